// A llama.cpp `deepseek4` GGUF file (spec deepseek-v4.md §14) as the
// CheckpointReader BindWeights binds through: every tensor of the file under
// its GGUF name (tensor_names.h's GGUF spelling), except that each MXFP4
// tensor — the routed experts, `blk.{L}.ffn_{gate,up,down}_exps.weight`
// [E, N, K] — is split at load into dsv4's FP4 layout: the e2m1 codes as I8
// [E, N, K/2] under the same name and the e8m0 scales as `<base>.scale`
// [E, N, K/32] (ops/ref/mxfp4_ref.h; bit for bit the codes and scales of the
// release's safetensors). The other tensors stay views into the mapped file.
#ifndef DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
#define DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

namespace dsv4::deepseek_v4 {

class GgufDeepSeekV4Reader final : public CheckpointReader {
 public:
  // Repacks the file's MXFP4 tensors; errors name the file and the tensor.
  static Result<std::unique_ptr<GgufDeepSeekV4Reader>> Create(std::unique_ptr<GgufFile> file);

  const std::string& path() const override { return file_->path(); }
  const TensorInfo* Find(std::string_view name) const override;
  // Like the file's Lookup (which says why a tensor of an unsupported ggml
  // type cannot be bound), for the repacked tensors too.
  Result<const TensorInfo*> Lookup(std::string_view name) const override;
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  const GgufFile& file() const { return *file_; }
  // Bytes copied out of the file at load (the repacked MXFP4 experts).
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  explicit GgufDeepSeekV4Reader(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {}

  std::unique_ptr<GgufFile> file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  int64_t copied_bytes_ = 0;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
