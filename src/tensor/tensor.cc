#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

namespace dsv4 {

TensorView TensorView::Contiguous(const void* data, DType dtype,
                                  std::initializer_list<int64_t> sizes) {
  return Contiguous(data, dtype, std::span<const int64_t>(sizes.begin(), sizes.size()));
}

TensorView TensorView::Contiguous(const void* data, DType dtype, std::span<const int64_t> sizes) {
  CHECK(sizes.size() <= static_cast<size_t>(kMaxRank), "rank %zu > %d", sizes.size(), kMaxRank);
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.rank = static_cast<int>(sizes.size());
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = stride;
    stride *= sizes[d];
  }
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= sizes[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != stride) return false;
    stride *= sizes[d];
  }
  return true;
}

TensorView TensorView::operator[](int64_t i) const {
  DCHECK(rank >= 1 && i >= 0 && i < sizes[0]);
  TensorView v;
  v.dtype = dtype;
  v.rank = rank - 1;
  for (int d = 1; d < rank; ++d) {
    v.sizes[d - 1] = sizes[d];
    v.strides[d - 1] = strides[d];
  }
  v.data = static_cast<uint8_t*>(data) + DTypeBytes(dtype, i * strides[0]);
  return v;
}

TensorView TensorView::Slice(int64_t begin, int64_t end) const {
  DCHECK(rank >= 1 && 0 <= begin && begin <= end && end <= sizes[0]);
  TensorView v = *this;
  v.sizes[0] = end - begin;
  v.data = static_cast<uint8_t*>(data) + DTypeBytes(dtype, begin * strides[0]);
  return v;
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(sizes[d]);
  }
  s += "] ";
  s += DTypeName(dtype);
  return s;
}

bool TensorView::SameShape(std::initializer_list<int64_t> s) const {
  if (static_cast<int>(s.size()) != rank) return false;
  int d = 0;
  for (int64_t x : s) {
    if (sizes[d++] != x) return false;
  }
  return true;
}

void Tensor::Free::operator()(void* p) const { std::free(p); }

Tensor::Tensor(DType dtype, std::initializer_list<int64_t> sizes)
    : Tensor(dtype, std::span<const int64_t>(sizes.begin(), sizes.size())) {}

Tensor::Tensor(DType dtype, std::span<const int64_t> sizes) {
  view_ = TensorView::Contiguous(nullptr, dtype, sizes);
  const size_t bytes = static_cast<size_t>(view_.nbytes());
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  CHECK(p != nullptr, "out of memory allocating %zu bytes", rounded);
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  storage_.reset(p);
  view_.data = p;
}

}  // namespace dsv4
