// ops::ref products of the GGUF quant types of tensor/ggml_quants.h with
// activations quantised as llama.cpp's CPU backend quantises them for each
// type (ggml-cpu's vec_dot_type), in the arithmetic of ggml's scalar
// ("generic") dot products: each block's integer sums are exact, then the
// block's float steps in block order from acc = 0, each product rounded (no
// multiply-add contraction). The scalar twins of the ops/simd kernels
// (GgmlBasicQ8Kernel, GgmlIqQ8Kernel in ops/simd/simd_kernels.h).
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_REF_GGML_DOT_REF_H_
#define DSV4_OPS_REF_GGML_DOT_REF_H_

#include <cstdint>

#include "tensor/ggml_quants.h"
#include "tensor/tensor.h"

namespace dsv4::ops::ref {

// The activation blocks a weight type meets (ggml's vec_dot_type):
//   q8_0: q8_0, q4_0, q5_0, iq4_nl, mxfp4      q8_1: q4_1, q5_1
//   q8_K: the k-quants (q4_K and q6_K through kquant_ref.h), iq4_xs and the
//         grid i-quants
enum class ActFormat { kQ8_0, kQ8_1, kQ8_K };
ActFormat ActivationFormat(DType w);
// Bytes of one token's quantised activations for K inputs.
int64_t ActivationBytes(ActFormat f, int64_t k);

// llama.cpp's x86 quantize_row_q8_1: as q8_0 (QuantizeRowQ8_0,
// ops/ref/kquant_ref.h: 127 / max |x|, ties to even) plus s = f16(d · Σ codes).
// K a multiple of 32.
void QuantizeRowQ8_1(const float* x, int64_t k, BlockQ8_1* y);
// x[K] into `y` in format f (ActivationBytes(f, K) bytes).
void QuantizeActivations(ActFormat f, const float* x, int64_t k, void* y);

// Σ over one weight row of K values against its quantised activations
// xq (format ActivationFormat(w)).
float DotGgmlQ8(DType w, const uint8_t* row, const void* xq, int64_t k);
//   mxfp4 (ggml_dot_ref.cc): per block, d = f16(x.d) · 2^(e − 128) (ggml's
//   E8M0_TO_FP32_HALF: 0xff is 2^127, e < 2 the subnormals) and
//   isum = Σ kvalues_mxfp4[code]·x8 with kvalues_mxfp4 = 2·fp4_e2m1;
//   acc = acc + d·isum.
float DotMxfp4Q8_0(const uint8_t* row, const BlockQ8_0* xq, int64_t k);
//   the legacy and k-quant families (ggml_dot_basic_ref.cc)
float DotBasicQ8(DType w, const uint8_t* row, const void* xq, int64_t k);
//   the grid i-quants (ggml_dot_iq_ref.cc, which spells out each type's float steps)
float DotIqQ8K(DType w, const uint8_t* row, const BlockQ8K* xq, int64_t k);

// out[t * out_stride + n] for w: [N, K] of one of these types, each token's
// activations quantised first. out_stride < 0 means N.
void MatMulGgmlQ8(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                  int64_t out_stride = -1);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_GGML_DOT_REF_H_
