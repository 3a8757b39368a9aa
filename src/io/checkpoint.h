// CheckpointReader: the one interface model code binds weights through.
// Every reader (llama2.c .bin, GGUF, safetensors file or sharded directory)
// exposes its tensors by name as {dtype, shape (outermost first), bytes},
// viewing the mmap'd file without copying.
#ifndef DSV4_IO_CHECKPOINT_H_
#define DSV4_IO_CHECKPOINT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace dsv4 {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  const void* data = nullptr;  // into the mapped file
  int64_t nbytes = 0;

  TensorView view() const { return TensorView::Contiguous(data, dtype, shape); }
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;

  // The file (or directory) this reader reads, for error messages.
  virtual const std::string& path() const = 0;
  // nullptr when absent.
  virtual const TensorInfo* Find(std::string_view name) const = 0;
  // Like Find, but an error when absent: NotFound, or where the file holds the
  // tensor in a form that cannot be bound (a safetensors dtype or rank this
  // engine does not read), an error that says so. Get and GetPackedFp4 use it.
  virtual Result<const TensorInfo*> Lookup(std::string_view name) const;
  // All tensors, in file order.
  virtual const std::vector<TensorInfo>& tensors() const = 0;

  // The named tensor's view, checked against an expected shape. Errors name the
  // file, the tensor, the expected and the found shape.
  Result<TensorView> Get(std::string_view name, std::initializer_list<int64_t> shape) const;
};

// "[64, 512]"
std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace dsv4

#endif  // DSV4_IO_CHECKPOINT_H_
