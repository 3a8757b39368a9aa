// TensorView: a non-owning, strided view of up to 4 dimensions, outermost
// first (as PyTorch and safetensors). Strides are in elements; block dtypes
// (dtype.h) need a contiguous innermost dimension that is a whole number of
// blocks. Tensor: owns aligned storage and hands out views.
#ifndef DSV4_TENSOR_TENSOR_H_
#define DSV4_TENSOR_TENSOR_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "base/check.h"
#include "tensor/dtype.h"

namespace dsv4 {

inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> sizes{};    // outermost first
  std::array<int64_t, kMaxRank> strides{};  // in elements

  // A contiguous (row-major) view of `data`.
  static TensorView Contiguous(const void* data, DType dtype, std::initializer_list<int64_t> sizes);
  static TensorView Contiguous(const void* data, DType dtype, std::span<const int64_t> sizes);

  int64_t size(int dim) const {
    DCHECK(dim >= 0 && dim < rank);
    return sizes[dim];
  }
  int64_t numel() const;
  bool is_contiguous() const;
  // Bytes spanned by a contiguous view.
  int64_t nbytes() const { return DTypeBytes(dtype, numel()); }

  // The i-th slice along dim 0 (rank decreases by one).
  TensorView operator[](int64_t i) const;
  // Rows [begin, end) along dim 0.
  TensorView Slice(int64_t begin, int64_t end) const;

  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
  // "[4, 64] f32"
  std::string ShapeString() const;
  bool SameShape(std::initializer_list<int64_t> s) const;
};

// Owning, 64-byte aligned, contiguous storage.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::initializer_list<int64_t> sizes);
  Tensor(DType dtype, std::span<const int64_t> sizes);

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const {
    return view_.As<T>();
  }
  int64_t numel() const { return view_.numel(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> storage_;
  TensorView view_;
};

}  // namespace dsv4

#endif  // DSV4_TENSOR_TENSOR_H_
