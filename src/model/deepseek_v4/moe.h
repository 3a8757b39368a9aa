// DeepSeek-V4 mixture of experts: a router (sqrt(softplus) scores; top-k of
// score + bias on scored layers, the fixed tid2eid[token] table on hash
// layers; weights = unbiased scores normalised over the k picks × route
// scale), k routed SwiGLU experts with the routing weight applied before the
// down projection, and one always-on shared expert. Both expert kinds clamp
// the SwiGLU inputs (gate ≤ limit, up ∈ [−limit, limit]).
//
// Source: specs/deepseek-v4.md §5 (reference `Gate`, `Expert`, `MoE`);
// gotchas §11 items 1–3, 25.
//
// Dimensions: T tokens, D hidden, E routed experts, k experts per token,
// F expert width (moe_intermediate_size), V vocab.
#ifndef DSV4_MODEL_DEEPSEEK_V4_MOE_H_
#define DSV4_MODEL_DEEPSEEK_V4_MOE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

// The routing decision of T tokens.
struct Routing {
  std::vector<float> scores;     // [T, E] activated router scores (before the bias)
  std::vector<int32_t> experts;  // [T, k] chosen expert ids
  std::vector<float> weights;    // [T, k] their routing weights (× route scale)
};

struct MoeScratch {
  void Reserve(const DeepSeekV4Config& c, int64_t n_tokens);
  int64_t bytes() const;  // allocated
  int64_t n_tokens = 0;
  Routing routing;
  std::vector<float> logits;      // [T, E]
  std::vector<int32_t> rows;      // [T·k] token of each gathered (token, pick), by expert
  std::vector<float> row_weight;  // [T·k]
  std::vector<float> xe;          // [T·k + T, D] gathered inputs, then the shared expert's
  std::vector<float> gate;        // [T·k + T, F]
  std::vector<float> up;          // [T·k + T, F]
  std::vector<float> down;        // [T·k + T, D]
  std::vector<float> y;           // [T, D] fp32 accumulator
  std::vector<float> act;         // activation-quant copies (w1/w3 inputs)
  std::vector<float> act_w2;      // those of the w2 inputs
  std::vector<float> biased;      // [E]
  std::vector<int32_t> order;     // [E]
  std::vector<int32_t> active;    // [E] experts with picks this step, ascending
  std::vector<int64_t> first;     // [E] their first gathered row
  std::vector<int64_t> count;     // [E] their rows
  std::vector<int64_t> cursor;    // [E] by expert id: picks, then the next row to fill
  std::vector<const ExpertWeights*> routed;  // [E] the active experts' weights (s.active order)
  std::vector<int64_t> job_order;            // [E + 1] a segment's experts (moe.cc)
  std::vector<uint8_t> pending;              // [E] 1: being read by the expert cache
  std::vector<LinearJob> jobs;               // [2·(E + 1)] one pooled step's products
  Routing ahead;                             // the next layer's routing, guessed (read-ahead)
  std::vector<int32_t> ahead_ids;            // its distinct experts
  std::vector<int64_t> job_rows;             // LinearMany's row offsets
  std::vector<int64_t> shard_offsets;  // [ranks + 1] expert parallel: each rank's rows of down
  int64_t experts_run = 0;             // routed experts whose weights were read, all calls so far
};

// Runtime options of the scored routers (model/runtime_options.h, an
// operator's choice per run; not in the checkpoint), held by the model and
// handed to Route through LayerContext::router_options. Hash-routed layers
// never take them.
//   allow:  [E] 1 = the expert may be picked (the others are left out of the
//           top-k); empty = all. At least k must be allowed.
//   freeze: every token gets freeze_experts [k] with weights freeze_weights [k]
//           (× routed_scaling_factor, like the router's own weights).
struct ScoredRouterOptions {
  std::vector<uint8_t> allow;
  bool freeze = false;
  std::vector<int32_t> freeze_experts;
  std::vector<float> freeze_weights;
};

// Router for T tokens (spec §5.1). token_ids: [T] (used by hash layers).
void Route(const LayerContext& ctx, const MoeWeights& w, const float* x,
           std::span<const int32_t> token_ids, MoeScratch& s);
// The same for the router of `plan`'s layer (w: its MoE) into `r` (sized
// [T, E] / [T, k] here), with scratch logits [T, E], biased [E], order [E].
void RouteInto(const LayerContext& ctx, const LayerPlan& plan, const MoeWeights& w, const float* x,
               std::span<const int32_t> token_ids, float* logits, float* biased, int32_t* order,
               Routing& r);

// The MoE sublayer: out[T, D] = Σ_k routed experts + shared expert, for x [T, D].
void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x,
                std::span<const int32_t> token_ids, MoeScratch& s, float* out);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_MOE_H_
