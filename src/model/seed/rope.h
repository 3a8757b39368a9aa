// RoPE variants of the seed family (specs/seed-mechanisms.md §1.4):
//   S-024 inv_freq[i] = theta^(-2i/d), computed and kept in float32; angles in fp64.
//   S-025 dynamic theta: theta_dyn = theta · max(1, L_ctx / L_base)^(2 / dim),
//         computed once per request from the expected context (C-11) and frozen.
//   S-026 linear scaling: the rotary position is p / factor; dynamic theta then
//         measures L_ctx in scaled positions (C-11).
//   S-027 segmented RoPE: angle(p, h, i) = (p/f)·inv_freq[i] + floor(p / L_seg)·shift[h, i]
//         (C-12: one inv_freq table, global positions, segment from the raw position).
//   S-029 the per-segment loop guards the tail: min(S - seg·L, L) tokens.
// Pairs are interleaved (x[2i], x[2i+1]), as the Llama baseline of this engine.
// With GQA a key is shared by nh/nkv query heads; keys are cached with the
// standard rotation only and get the segment phase of the query head that reads
// them (RotatePairs at score time), so q·k depends on the position difference
// and the segment difference only.
#ifndef DSV4_MODEL_SEED_ROPE_H_
#define DSV4_MODEL_SEED_ROPE_H_

#include <cstdint>
#include <vector>

#include "model/seed/config.h"

namespace dsv4::seed {

// theta_base · max(1, l_ctx / base_len)^(2 / dim)  (S-025; 10000 at l_ctx <= base_len).
double DynamicTheta(double theta_base, double l_ctx, int64_t base_len, int64_t dim);

// The per-request rotary parameters, frozen when the request's cache is made.
struct RopeParams {
  double theta = 10000.0;       // effective theta
  double pos_scale = 1.0;       // 1 / linear factor
  std::vector<float> inv_freq;  // [d/2], float32 (S-024)
  int64_t segment_length = 0;   // 0: segmented RoPE off
};

// Effective rotary parameters for a request that expects `expected_ctx`
// positions in total (prompt + new tokens), capped at config.max_context().
RopeParams MakeRopeParams(const SeedConfig& config, int64_t expected_ctx);

// Segment index of raw position p (0 when segmented RoPE is off).
inline int64_t SegmentOf(const RopeParams& r, int64_t p) {
  return r.segment_length > 0 ? p / r.segment_length : 0;
}

// Rotates pairs of x[d] by angle[i] = a·inv_freq[i] + s·shift[i] (shift may be null).
void RotatePairs(float* x, int64_t d, double a, const float* inv_freq, double s,
                 const float* shift);

// Applies RoPE to x [S, n_heads, d] holding positions pos0 .. pos0+S-1, one
// segment at a time with the tail guard of S-029. `shift` [n_heads, d/2] adds
// the segment phase (null: standard RoPE, also used for cached keys).
void ApplyRope(float* x, int64_t S, int64_t n_heads, int64_t d, int64_t pos0, const RopeParams& r,
               const float* shift);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_ROPE_H_
