// DeepSeek-V4 attention, sliding-window branch (every layer has it; the CSA /
// HCA compressed branches are issue 4): low-rank query with a per-head
// unweighted RMS norm, one shared K=V head, partial RoPE on the trailing R dims
// of each head (inverse rotation on the output, since V = K carries rotated
// dims), a learned per-head attention sink in the softmax denominator, a
// W-token window including the current token, and the grouped low-rank output
// projection.
//
// Source: specs/deepseek-v4.md §4.1 (projections), §4.2 (RoPE), §4.3 (window),
// §4.6 (sink), §4.7 (grouped output); gotchas §11 items 4–7, 19.
//
// Dimensions: T tokens in the call, D hidden, Q q_lora_rank, H heads,
// A head_dim, R rope dims (the last R of A), G o_groups, O o_lora_rank,
// W window (ring slots).
#ifndef DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_
#define DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

// RoPE frequencies of one layer kind (spec §4.2): ω_i = base^(−2i/R) in fp32,
// with YaRN interpolation for compressed layers; no amplitude factor.
class RopeFrequencies {
 public:
  RopeFrequencies() = default;
  // `yarn` null: plain RoPE.
  RopeFrequencies(int64_t rope_dim, double base, const YarnScaling* yarn);

  // Rotates the adjacent pairs (x[2i], x[2i+1]) of x[R] by angle pos·ω_i
  // (by −pos·ω_i when inverse). Angles in fp32 as the reference's outer product.
  void Rotate(float* x, int64_t pos, bool inverse) const;
  const std::vector<float>& omega() const { return omega_; }  // [R/2]

 private:
  std::vector<float> omega_;
};

// Per-call scratch, sized for up to `n_tokens` tokens once (grown if needed).
struct AttentionScratch {
  void Reserve(const DeepSeekV4Config& c, int64_t n_tokens);
  int64_t n_tokens = 0;
  std::vector<float> qr;      // [T, Q]
  std::vector<float> q;       // [T, H·A]
  std::vector<float> kv;      // [T, A]
  std::vector<float> o;       // [T, H·A]
  std::vector<float> o_group; // [T, (H/G)·A]
  std::vector<float> z;       // [T, G·O]
  std::vector<float> scores;  // [W]
  std::vector<float> act;     // activation-quant copies of linear inputs
};

// The attention sublayer for T consecutive tokens at positions pos0 .. pos0+T−1.
// x: [T, D] (= attn_norm(mHC collapse)); out: [T, D].
// ring: the layer's window cache [W, A] holding the kv of positions
// max(0, pos0−W) .. pos0−1 in slots p mod W; on return it holds the window
// ending at pos0+T−1. Keys of query t are positions max(0, p−W+1) .. p, in
// ascending position order (as the reference's prefill and decode orders).
void AttentionForward(ThreadPool& pool, const DeepSeekV4Config& c, const AttentionWeights& w,
                      const RopeFrequencies& rope, const NumericsOptions& opts,
                      const Tracer& trace, int64_t layer, const float* x, int64_t n_tokens,
                      int64_t pos0, float* ring, AttentionScratch& s, float* out);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_
