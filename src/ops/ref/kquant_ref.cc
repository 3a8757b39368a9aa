// ops::ref k-quant matmul: block-wise exact dequantisation, then a scalar dot.
#include "ops/ref/kquant_ref.h"

#include "base/check.h"

namespace dsv4::ops::ref {

bool IsKQuant(DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; }

void MatMulKQuant(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                  int64_t out_stride) {
  CHECK(w.rank == 2 && w.strides[1] == 1 && IsKQuant(w.dtype) && w.sizes[1] % kQK_K == 0,
        "MatMulKQuant: w must be a row-major [N, K] q4_K/q6_K matrix with K %% 256 == 0, got %s",
        w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0];
  const int64_t n_in = w.sizes[1];
  const int64_t block_bytes = GetDTypeInfo(w.dtype).block_bytes;
  if (out_stride < 0) out_stride = n_out;
  float block[kQK_K];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n_in;
    for (int64_t n = 0; n < n_out; ++n) {
      const uint8_t* row = static_cast<const uint8_t*>(w[n].data);
      float acc = 0.0f;
      for (int64_t b = 0; b < n_in / kQK_K; ++b) {
        DequantizeRow(w.dtype, row + b * block_bytes, kQK_K, block);
        const float* xb = xt + b * kQK_K;
        for (int k = 0; k < kQK_K; ++k) acc += xb[k] * block[k];
      }
      out[t * out_stride + n] = acc;
    }
  }
}

}  // namespace dsv4::ops::ref
