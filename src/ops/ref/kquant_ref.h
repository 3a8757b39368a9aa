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

// ---- The q8_K path: llama.cpp's arithmetic for k-quant weights ----
//
// The activations are quantised per 256-value block to q8_K as ggml's
// quantize_row_q8_K_ref does (the value of largest magnitude, first on ties,
// maps to ∓127; round to nearest, ties to even; a block whose −127 / max
// overflows, all denormals, is zeros), and each block's products
// are summed exactly in integers. Per block b of a weight row, with dx the
// activations' scale and dw, dmin the weight block's f16 scales:
//   q4_K: isum = Σ_s sc[s] · Σ_{k in s} q[k]·x8[k],  imin = Σ_s m[s] · Σ_{k in s} x8[k]
//         acc = acc + (dx·dw)·isum;  acc = acc − (dx·dmin)·imin
//   q6_K: isum = Σ_s sc[s] · Σ_{k in s} (q[k] − 32)·x8[k]
//         acc = acc + (dx·dw)·isum
// in that order, from acc = 0, blocks in order, each product rounded (no
// multiply-add contraction). The integer sums are exact, so every
// implementation that keeps this float order gives the same bits: the SIMD
// kernels (ops/simd/kquant_q8_x86.cc) are tested bit for bit against these.

// x[K] (K a multiple of 256) as K / 256 q8_K blocks.
void QuantizeRowQ8K(const float* x, int64_t k, BlockQ8K* y);

// Σ over the n_blocks blocks of one q4_K/q6_K weight row against q8_K blocks.
float DotKQuantQ8K(DType w_dtype, const uint8_t* row, const BlockQ8K* x, int64_t n_blocks);

// MatMulKQuant with each token's activations quantised to q8_K first.
void MatMulKQuantQ8K(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                     int64_t out_stride = -1);

// ---- The q8_0 path: llama.cpp's arithmetic for q8_0 weights ----
//
// The activations are quantised per 32-value block to q8_0 as llama.cpp's CPU
// backend does on x86 (ggml-cpu/arch/x86/quants.c quantize_row_q8_0, AVX/AVX2,
// and its repack twin ggml_quantize_mat_q8_0_4x8; not ggml's
// quantize_row_q8_0_ref, which takes 1 / d and roundf): d = max |x| / 127,
// codes x · (127 / max |x|) rounded to nearest, ties to even, d stored as f16
// (rounded to nearest even); an all-zero block has d = 0 and codes 0. Per
// block b of a weight row, with dw and dx the two f16 scales:
//   isum = Σ_k w[k]·x8[k];  acc = acc + (dw·dx)·isum
// from acc = 0, blocks in order, each product rounded (no contraction): the
// SIMD kernels (ops/simd/q8_0_x86.cc) give these bits.

// x[K] (K a multiple of 32) as K / 32 q8_0 blocks.
void QuantizeRowQ8_0(const float* x, int64_t k, BlockQ8_0* y);

// Σ over the n_blocks blocks of one q8_0 weight row against q8_0 activation blocks.
float DotQ8_0Q8_0(const uint8_t* row, const BlockQ8_0* x, int64_t n_blocks);

// out[t * out_stride + n] for w: [N, K] q8_0 with each token's activations
// quantised to q8_0 first. out_stride < 0 means N.
void MatMulQ8_0Q8_0(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                    int64_t out_stride = -1);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_KQUANT_REF_H_
