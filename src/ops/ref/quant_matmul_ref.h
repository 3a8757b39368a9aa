// ops::ref quantized matmuls — the scalar twins for block-scaled weights as
// DeepSeek-V4 ships them (spec deepseek-v4.md §7.4):
//   FP8: w [N, K] e4m3fn, scale [ceil(N/b), ceil(K/b)] e8m0 (or f32 in the
//        -Base checkpoints); W[n, k] = fp8(w[n, k]) · scale[n / b, k / b],
//        with b × b weight tiles sharing a scale: b = 128 (DeepSeek-V4) or
//        b = 32 (DeepSeek-V4.1-Flash's dense weights).
//   FP4: w [N, K] e2m1 packed two per byte (element 2j in the LOW nibble of
//        byte j), scale [N, K / 32] e8m0; W[n, k] = fp4(w[n, k]) · scale[n, k / 32].
// Weights are read in their stored format (views into the mmap'd checkpoint);
// nothing is expanded at load time. Also here: the activation-side QAT
// simulations of the reference (spec §9.2), which are what the official FP8/FP4
// linears apply to their inputs.
//
// Not here: fast kernels (ops/simd, later), which are tested against these.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_REF_QUANT_MATMUL_REF_H_
#define DSV4_OPS_REF_QUANT_MATMUL_REF_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace dsv4::ops::ref {

inline constexpr int64_t kFp8WeightBlock = 128;      // 128×128 weight tiles share one scale (V4)
inline constexpr int64_t kFp8SmallWeightBlock = 32;  // 32×32 tiles (V4.1-Flash)
inline constexpr int64_t kFp4WeightBlock = 32;       // 32 inputs along K share one scale

// Whether b is an FP8 weight block these kernels take: 128 or 32.
bool IsFp8WeightBlock(int64_t b);
// The FP8 weight block of a weight [n, k] whose scale is [sn, sk]: the b in
// {128, 32} with sn = ceil(n/b) and sk = ceil(k/b); 0 when neither fits.
// Where both fit (n ≤ 32 and k ≤ 32: one scale for the whole matrix) the two
// give the same products; 128 is returned.
int64_t Fp8WeightBlockOf(int64_t n, int64_t k, int64_t sn, int64_t sk);

// One element of a block-scale tensor as f32: scales are e8m0 in the released
// checkpoints, f32 or bf16 in others.
float ScaleAt(const TensorView& scale, int64_t row, int64_t col);

// Dequantizes row n of an FP8 block-scaled weight with block × block scale
// tiles (block: 128 or 32; scale [ceil(N/block), ceil(K/block)]) into out[K].
// Exact: an e4m3 value times a power of two is representable in f32. scale
// may be e8m0, f32 or bf16.
void DequantizeFp8BlockRow(const TensorView& w, const TensorView& scale, int64_t n, float* out,
                           int64_t block = kFp8WeightBlock);
// Dequantizes row n of an FP4 block-scaled weight into out[K] (exact).
void DequantizeFp4BlockRow(const TensorView& w, const TensorView& scale, int64_t n, float* out);

// out[t, n - row_begin] (row stride out_stride) = Σ_k x[t, k] · W[n, k] for the
// output features n in [row_begin, row_end) of an FP8 block-scaled weight, fp32
// accumulation in k order. x: [T, K] contiguous. Callers split rows across
// threads or pick a group of rows (the grouped output projection). block: the
// weight's scale tile, 128 or 32 (as DequantizeFp8BlockRow).
void MatMulFp8Block(float* out, int64_t out_stride, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                    int64_t block = kFp8WeightBlock);
// The same for an FP4 block-scaled weight.
void MatMulFp4Block(float* out, int64_t out_stride, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t row_begin, int64_t row_end);

// 2^ceil(log2(a)) for a > 0, by the IEEE trick of the reference kernels
// (exponent − 127 + [mantissa ≠ 0]); the "ue8m0" activation scale (spec §9.2).
float Pow2Ceil(float a);

// FP8 activation quantisation, simulated in place (spec §9.2, reference
// `act_quant`): per block of `block` values, s = Pow2Ceil(max(amax, 1e-4) / 448),
// x ← e4m3(clamp(x / s, ±448)) · s. n must be a multiple of block.
void QuantizeDequantizeFp8(float* x, int64_t n, int64_t block);
// FP4 activation quantisation, simulated in place (reference `fp4_act_quant`):
// s = Pow2Ceil(max(amax, 6·2^-126) / 6), x ← e2m1(clamp(x / s, ±6)) · s.
void QuantizeDequantizeFp4(float* x, int64_t n, int64_t block);
// The same with an FP8 e4m3 scale per `block` values instead of a power of two
// (DeepSeek-V4.1's compressed KV entries, block 16): s = e4m3(max(amax, 6·2⁻⁹) / 6),
// x = e2m1(clamp(x / s, ±6)) · s.
void QuantizeDequantizeFp4E4m3Scale(float* x, int64_t n, int64_t block);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_QUANT_MATMUL_REF_H_
