// ops::ref matmul over GGUF k-quant weights (q4_K, q6_K; layouts in
// tensor/dtype.h): the scalar twin of the ops/simd k-quant kernels. Each
// 256-value block of a weight row is dequantised exactly (DequantizeRow) into a
// stack buffer and dotted with the activations, fp32 accumulation in k order.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_REF_KQUANT_REF_H_
#define DSV4_OPS_REF_KQUANT_REF_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace dsv4::ops::ref {

// True for the dtypes MatMulKQuant takes.
bool IsKQuant(DType t);

// out[t * out_stride + n] = Σ_k x[t * K + k] · W[n, k] for W: [N, K] q4_K or
// q6_K, rows contiguous, K a multiple of 256. out_stride < 0 means N.
void MatMulKQuant(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                  int64_t out_stride = -1);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_KQUANT_REF_H_
