// ops:: vector entry points (rmsnorm, softmax, SwiGLU, interleaved RoPE, dot,
// axpy and their many-row forms): the SIMD kernels of ops/simd with the
// semantics of their ops/ref twins. Single-threaded; callers parallelise over
// tokens or heads.
#ifndef DSV4_OPS_VEC_OPS_H_
#define DSV4_OPS_VEC_OPS_H_

#include <cstdint>

#include "ops/simd/simd_kernels.h"

namespace dsv4::ops {

// out[n] = x[n] / sqrt(mean(x²) + eps) * weight[n]. out may alias x.
inline void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  simd::RmsNorm(out, x, weight, n, eps);
}
// In-place softmax over n values (max-subtracted).
inline void Softmax(float* x, int64_t n) { simd::Softmax(x, n); }
// In-place softmax of scale · x over n values with a sink that only adds
// exp(sink − max) to the denominator (sink −inf: none); see
// ops::ref::SoftmaxWithSink.
inline void SoftmaxWithSink(float* x, int64_t n, float scale, float sink) {
  simd::SoftmaxWithSink(x, n, scale, sink);
}
// out[n] = silu(gate[n]) * up[n]. out may alias gate or up.
inline void SwiGlu(float* out, const float* gate, const float* up, int64_t n) {
  simd::SwiGlu(out, gate, up, n);
}
// out[n] = silu(min(gate, limit)) · clamp(up, −limit, limit) · scale (limit
// ≤ 0: no limit). out may alias gate or up.
inline void SwiGluLimited(float* out, const float* gate, const float* up, int64_t n, float limit,
                          float scale) {
  simd::SwiGluLimited(out, gate, up, n, limit, scale);
}
// Rotary embedding on interleaved pairs of the first rot_dim dims of each
// head; x: [n_heads, head_dim], in place (see ops::ref::RopeInterleaved).
inline void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
                            int64_t pos, float theta) {
  simd::RopeInterleaved(x, n_heads, head_dim, rot_dim, pos, theta);
}
// Softmax pooling over n_slots rows per channel d < n (ops::ref::SoftmaxPool,
// exp Highway's): out[d] = Σ_j values[j][d] · softmax_j(scores[j][d]).
// scratch: room for n_slots · simd::kSoftmaxPoolLanes floats.
inline void SoftmaxPool(float* out, const float* const* scores, const float* const* values,
                        int64_t n_slots, int64_t n, float* scratch) {
  simd::SoftmaxPool(out, scores, values, n_slots, n, scratch);
}
// The index of the first largest of x[0, n), NaN ignored; 0 when no value
// exceeds −inf (greedy decoding's pick).
inline int64_t Argmax(const float* x, int64_t n) { return simd::Argmax(x, n); }
// Σ a[i] · b[i].
inline float Dot(const float* a, const float* b, int64_t n) { return simd::Dot(a, b, n); }
// Σ x[i].
inline float Sum(const float* x, int64_t n) { return simd::Sum(x, n); }
// y[i] += alpha · x[i].
inline void Axpy(float* y, float alpha, const float* x, int64_t n) { simd::Axpy(y, alpha, x, n); }
// Every query against every key (MQA: all heads share one key list):
// q: [n_q] rows of n floats, q_stride apart; keys: [n_keys] row pointers;
// out: [n_q, n_keys], out[h · n_keys + i] = Dot(q + h · q_stride, keys[i], n),
// bit for bit (each loaded vector is reused across queries and keys).
inline void DotMany(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
                    int64_t n_keys, int64_t n, float* out) {
  simd::DotMany(q, n_q, q_stride, keys, n_keys, n, out);
}
// Every row of y accumulates every x row, weighted (MQA attention output):
// y: [n_y] rows of n floats, y_stride apart; alpha: [n_y, n_keys]; x:
// [n_keys] row pointers (not overlapping y). Bit for bit the calls
// Axpy(y + h · y_stride, alpha[h · n_keys + i], x[i], n) for each h, for
// i = 0 … n_keys − 1 in order (a tile of y stays in registers across the keys).
inline void AxpyMany(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                     const float* const* x, int64_t n_keys, int64_t n) {
  simd::AxpyMany(y, n_y, y_stride, alpha, x, n_keys, n);
}
// AxpyMany with f16 x rows (an f16 KV cache's values): bit for bit AxpyMany
// on the rows converted to f32 (exactly).
inline void AxpyManyF16(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                        const uint16_t* const* x, int64_t n_keys, int64_t n) {
  simd::AxpyManyF16(y, n_y, y_stride, alpha, x, n_keys, n);
}
// out[i] = F32ToF16(x[i]) (an f16 KV cache's writes), vectorised; a NaN
// stays a NaN but its payload may differ.
inline void F32ToF16Row(const float* x, uint16_t* out, int64_t n) { simd::F32ToF16Row(x, out, n); }
// out[i] = x[i] rounded to bf16 (nearest even) and widened back: bit for
// bit Bf16ToF32(F32ToBf16(x[i])), vectorised. out may be x.
inline void RoundToBf16Row(const float* x, float* out, int64_t n) {
  simd::RoundToBf16Row(x, out, n);
}

// out[j] = Σ_i c[i] · x[i][j] for j < n, the sum from 0 in order of the n_x
// rows, each product rounded before its add (no FMA): bit for bit
// ops::ref::LinearCombine. out must not overlap the x rows.
inline void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x,
                          int64_t n) {
  simd::LinearCombine(out, x, c, n_x, n);
}
// n_out LinearCombines of the same x rows in one pass over them, coefficients
// c[k · n_x + i]: bit for bit ops::ref::LinearCombineRows. Every x[·][j] is
// read before out[·][j] is written, so out rows may be x rows (in place);
// n_out ≤ 64 (ops::ref::kMaxCombineRows), n_x ≤ 128.
inline void LinearCombineRows(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                              const float* c, int64_t n) {
  simd::LinearCombineRows(out, n_out, x, n_x, c, n);
}
// FP8 e4m3 quantise-dequantise per block (DeepSeek-V4's simulated activation
// quantisation): bit for bit ops::ref::QuantizeDequantizeFp8.
inline void QuantizeDequantizeFp8(float* x, int64_t n, int64_t block) {
  simd::QuantizeDequantizeFp8(x, n, block);
}
// FP4 e2m1 quantise-dequantise per block (DeepSeek-V4's index_quant): bit
// for bit ops::ref::QuantizeDequantizeFp4 for inputs without NaN.
inline void QuantizeDequantizeFp4(float* x, int64_t n, int64_t block) {
  simd::QuantizeDequantizeFp4(x, n, block);
}

}  // namespace dsv4::ops

#endif  // DSV4_OPS_VEC_OPS_H_
