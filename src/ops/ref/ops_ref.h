// ops::ref — the scalar twin of every op: plain loops, fp32 (fp64 where it
// helps), no SIMD. They are the oracle that fast kernels are tested against
// and the path used while a fast version does not exist.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_REF_OPS_REF_H_
#define DSV4_OPS_REF_OPS_REF_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace dsv4::ops::ref {

// out[T, N] = x[T, K] · w[N, K]ᵀ. w may be any dtype; rows are dequantized
// one at a time (DequantizeRow), accumulation in fp32, in k order.
// Rows of `out` are `out_stride` floats apart (default: N).
void MatMul(float* out, const float* x, const TensorView& w, int64_t n_tokens,
            int64_t out_stride = -1);

// out[n] = x[n] / sqrt(mean(x²) + eps) * weight[n].
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps);

// Rotary embedding on interleaved pairs (x[2i], x[2i+1]) of the first
// `rot_dim` dims of each head: angle = pos · theta^(-2i/rot_dim).
// x: [n_heads, head_dim], rotated in place.
void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                     float theta);

// In-place softmax over n values (max-subtracted).
void Softmax(float* x, int64_t n);

// Softmax of scale · x with a sink in place: m = max_i scale · x[i], e_i =
// exp(scale · x[i] − m), x[i] = e_i / (Σ e_i + exp(sink − m)) (sink −inf:
// none; the max is over x only). DeepSeek-V4's attention weights.
void SoftmaxWithSink(float* x, int64_t n, float scale, float sink);

// Softmax pooling over slots, per channel: for d < n, with m = max_j s_j[d]
// (from −inf, in order of j) and e_j = exp(s_j[d] − m), sum = Σ_j e_j in
// order of j, out[d] = Σ_j v_j[d] · (e_j / sum) from 0 in order of j
// (s_j = scores[j], v_j = values[j], n_slots rows each). DeepSeek-V4's
// compressor pools a window's rows into an entry so.
void SoftmaxPool(float* out, const float* const* scores, const float* const* values,
                 int64_t n_slots, int64_t n);

// x · sigmoid(x).
float Silu(float x);
// out[n] = silu(gate[n]) * up[n].
void SwiGlu(float* out, const float* gate, const float* up, int64_t n);
// SwiGlu of limited inputs, scaled: out = silu(min(g, limit)) ·
// clamp(u, −limit, limit) · scale (limit ≤ 0: no limit; the product by scale
// last). DeepSeek-V4's MoE (swiglu_limit, the routed expert's weight).
void SwiGluLimited(float* out, const float* gate, const float* up, int64_t n, float limit,
                   float scale);

// out[h · n_keys + i] = Σ_j q[h · q_stride + j] · keys[i][j] (j < n, in
// order) for h < n_q, i < n_keys; out: [n_q, n_keys].
void DotMany(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
             int64_t n_keys, int64_t n, float* out);

// y[h · y_stride + j] += alpha[h · n_keys + i] · x[i][j] for h < n_y, j < n,
// keys i = 0 … n_keys − 1 in order; alpha: [n_y, n_keys].
void AxpyMany(float* y, int64_t n_y, int64_t y_stride, const float* alpha, const float* const* x,
              int64_t n_keys, int64_t n);
// The same over f16 x rows (uint16_t bits, converted exactly).
void AxpyManyF16(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                 const uint16_t* const* x, int64_t n_keys, int64_t n);

// out[j] = (…((0 + c[0]·x[0][j]) + c[1]·x[1][j]) + …) + c[n_x − 1]·x[n_x − 1][j]
// for j < n: each product rounded, then added (no fused multiply-add), the
// sum from 0 in order of the rows. out must not overlap the x rows.
void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n);
// out[k][j] = LinearCombine's sum with the coefficients c[k · n_x, (k + 1) ·
// n_x), for k < n_out ≤ kMaxCombineRows and n_x ≤ 2 · kMaxCombineRows
// rows: every x[·][j] is read before any
// out[·][j] is written, so an out row may be an x row (in place); out rows
// must not otherwise overlap x rows or each other.
inline constexpr int64_t kMaxCombineRows = 64;
void LinearCombineRows(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                       const float* c, int64_t n);

// Index of the largest value; the lowest index wins ties, NaN is ignored, and
// 0 when no value exceeds −inf (as greedy sampling picks).
int64_t Argmax(const float* x, int64_t n);

// The k largest values' indices, largest first; ties go to the lower index.
void TopK(const float* x, int64_t n, int64_t k, int32_t* indices);
// The same with caller-owned scratch of at least n ints (no allocation).
void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, int32_t* scratch);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_OPS_REF_H_
