// MoE router of the seed family with capacity routing and router modes
// (specs/seed-mechanisms.md §1.7, resolutions C-04…C-06, C-20…C-23):
//   S-041 top-k by score (ties: lower index), weights = fp32 softmax over the
//         selected raw logits.
//   S-042 k = clamp(k_config, 1, E); dynamic_k: clamp(max(2, floor(0.015·T)), 1, E), T = total
//   context. S-043 group-limited: group score = sum of the group's top-2 scores; top
//         topk_group groups; per_group_k experts inside each; softmax over those.
//   S-044 capacity = ceil(capacity_factor · N · k / E) per forward (0 = unlimited).
//   S-045 tokens in order; "topk_capped" (default) gives each token its k experts
//         while they have room, an overflowing slot goes to the best expert outside
//         the top-k with room, else is dropped, and the weights are the softmax over
//         the raw logits of the experts used; "seed_greedy" gives the token its first
//         expert with room, weighted by its original top-k weight, else nothing.
//   S-046 per-step counters reset every forward; a cumulative counter for telemetry.
//   S-047 diagnostic load-balance loss E · Σ_e f_e·P_e (f_e = selections/N, P_e = mean softmax).
//   S-049…S-052 modes: A (plain), B (expert mask = the allowed set, C-22), C
//         (external weights, validated); mask and weights together are an error.
//   S-053 utilisation-variance reweighting (u_e = selections/N, population variance
//         over E; above the threshold, a persistent selection bias of log 0.95 for
//         experts above the mean and log 1.05 below; selection only).
//   S-134 freeze: every token → freeze_experts with freeze_weights, no capacity.
// The router works on logits only and knows no model, so any scored router
// (DeepSeek-V4's included) can reuse it.
#ifndef DSV4_MODEL_SEED_ROUTER_H_
#define DSV4_MODEL_SEED_ROUTER_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/seed/config.h"

namespace dsv4::seed {

// moe.routing and moe.assign resolved once (the model does it at load), so
// routing compares no config strings per call.
enum class MoeRouting { kTopK, kGroupLimited };     // S-043
enum class MoeAssign { kTopKCapped, kSeedGreedy };  // S-045
struct MoeModes {
  MoeRouting routing = MoeRouting::kTopK;
  MoeAssign assign = MoeAssign::kTopKCapped;
};
MoeModes ResolveMoeModes(const MoeConfig& moe);

// Runtime router options (EngineOptions material: not model config).
struct RouterOptions {
  double capacity_factor = -1;       // < 0: the config's
  std::vector<uint8_t> expert_mask;  // [E] 1 = allowed; empty = all (Mode B)
  // S-051 (C-22, the "must participate" reading): experts every token uses;
  // they replace the lowest-ranked of its top-k (at most k, allowed by the mask).
  std::vector<int32_t> force_experts;
  bool freeze = false;  // S-134
  std::vector<int32_t> freeze_experts = {0, 1};
  std::vector<float> freeze_weights = {0.7f, 0.3f};
  std::vector<int64_t> freeze_layers;  // empty: every MoE layer
  bool reweight = false;               // S-053
  bool diagnostics = false;            // S-047
};

// Persistent per-layer router state.
struct RouterState {
  std::vector<float> bias;  // [E] selection bias (log factors), S-053
  int64_t reweight_count = 0;
  std::vector<int64_t> cumulative;  // [E] telemetry, S-046
};

struct RouteResult {
  int64_t k = 0;                  // slots per token
  std::vector<int32_t> expert;    // [N, k], -1 = unused slot
  std::vector<float> weight;      // [N, k]
  std::vector<int64_t> counts;    // [E] this forward's assignments
  std::vector<int64_t> selected;  // [E] this forward's top-k selections (before capacity)
  int64_t capacity = 0;           // 0 = unlimited
  double lb_loss = 0;             // S-047 (diagnostics)
  double utilization_variance = 0;
  bool reweighted = false;
};

// Buffers of Route and SelectExperts (grow-only; one per caller, so a decode
// step routes without allocating).
struct RouteScratch {
  std::vector<int32_t> sel;    // [N, k] selected experts
  std::vector<int64_t> sel_n;  // [N] how many
  std::vector<float> w;        // [N, k] their softmax (or external) weights
  std::vector<float> score;    // [E]
  std::vector<float> group_score, group_top;
  std::vector<int32_t> ranking;  // [E]
  std::vector<int32_t> groups, in, used;
  std::vector<float> used_w, ext;
  std::vector<double> u;  // [E] utilisation
};

// Top-k selection of one token: experts ordered by descending score
// (logit + bias, masked experts excluded), ties to the lower index.
std::vector<int32_t> SelectExperts(const MoeConfig& moe, const float* logits, const float* bias,
                                   const uint8_t* mask, int64_t k);

// Routes N tokens with logits [N, E]. `total_ctx` is T for dynamic_k.
// `external_weights` [N, k] (Mode C, may be null) replaces the softmax weights.
// `scratch` null: local buffers (allocates). `modes`: ResolveMoeModes(moe).
Status Route(const MoeConfig& moe, MoeModes modes, const RouterOptions& opt, RouterState& state,
             const float* logits, int64_t N, int64_t total_ctx, const float* external_weights,
             RouteResult& out, RouteScratch* scratch = nullptr);
// The same, resolving the modes on each call (tests, one-off callers).
Status Route(const MoeConfig& moe, const RouterOptions& opt, RouterState& state,
             const float* logits, int64_t N, int64_t total_ctx, const float* external_weights,
             RouteResult& out, RouteScratch* scratch = nullptr);

// S-048 stages 2 and 3: dispatch (the rows routed to each expert are gathered
// into one contiguous slice, in token order) and combine (each expert's output
// rows are scaled by the routing weight and added back at the token's row).
// `expert(e, in [n, H], n, out [n, H])` runs expert e on a slice. x [N, H] →
// out [N, H] (overwritten). `scratch` is reused between calls.
struct DispatchScratch {
  std::vector<float> in, out;
  std::vector<int64_t> rows;
  std::vector<float> weights;
};
template <typename ExpertFn>
void DispatchCombine(const RouteResult& r, int64_t num_experts, const float* x, int64_t N,
                     int64_t H, ExpertFn&& expert, float* out, DispatchScratch& s) {
  std::fill(out, out + N * H, 0.0f);
  for (int32_t e = 0; e < num_experts; ++e) {
    s.rows.clear();
    s.weights.clear();
    for (int64_t t = 0; t < N; ++t) {
      for (int64_t j = 0; j < r.k; ++j) {
        if (r.expert[t * r.k + j] == e) {
          s.rows.push_back(t);
          s.weights.push_back(r.weight[t * r.k + j]);
        }
      }
    }
    const int64_t n = static_cast<int64_t>(s.rows.size());
    if (n == 0) continue;
    if (static_cast<int64_t>(s.in.size()) < n * H) {
      s.in.resize(n * H);
      s.out.resize(n * H);
    }
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + s.rows[i] * H, H, s.in.data() + i * H);
    expert(e, s.in.data(), n, s.out.data());
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + s.rows[i] * H;
      const float* eo = s.out.data() + i * H;
      const float w = s.weights[i];
      for (int64_t h = 0; h < H; ++h) o[h] += w * eo[h];
    }
  }
}

// Mode C validation of one token's weights: negative or non-finite entries
// fail; a sum within 1e-3 of 1 is renormalised; anything else fails.
Status ValidateExternalWeights(std::vector<float>& w);

// The k that routing uses (C-04 / S-042).
int64_t EffectiveK(const MoeConfig& moe, MoeModes modes, int64_t total_ctx);
int64_t EffectiveK(const MoeConfig& moe, int64_t total_ctx);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_ROUTER_H_
