// LayerPlan: what one DeepSeek-V4 layer is made of, decided once from the
// config. The plan drives which weights are declared and bound (weights.h),
// which caches exist (model.cc) and which blocks the forward pass runs; no
// other code looks at compress_ratios or num_hash_layers again.
//
// Source: specs/deepseek-v4.md §1.2 (schedule), §4 (attention kinds), §5.1
// (hash vs scored routing), §6.3 (the MTP layer).
#ifndef DSV4_MODEL_DEEPSEEK_V4_PLAN_H_
#define DSV4_MODEL_DEEPSEEK_V4_PLAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/deepseek_v4/config.h"

namespace dsv4::deepseek_v4 {

enum class AttentionKind {
  kWindow,  // compress ratio 0: the sliding window only
  kCsa,     // ratio 4: window + overlapping compressed entries chosen by the indexer
  kHca,     // other ratios: window + every compressed entry (non-overlapping pools)
};
enum class RouterKind {
  kHash,    // experts = tid2eid[token id] (the first num_hash_layers layers)
  kScored,  // experts = top-k of score + bias
};
enum class LayerRole {
  kMain,    // a layer of the main stack, `layers.{i}.`
  kMtp,     // a multi-token-prediction layer, `mtp.{k}.` (speculative decoding only)
};

std::string_view AttentionKindName(AttentionKind k);  // "window", "csa", "hca"
std::string_view RouterKindName(RouterKind k);        // "hash", "scored"

// Per-layer cache needs (the memory module will build stores from these).
struct CacheSpec {
  int64_t window = 0;             // ring of the last W kv rows, [W, A]
  int64_t compress_ratio = 0;     // > 0: one compressed kv row per `ratio` tokens
  int64_t indexer_head_dim = 0;   // > 0: one index key row per compressed entry
};

struct LayerPlan {
  int64_t layer = 0;              // index in [0, L) main, L + k for MTP layer k
  LayerRole role = LayerRole::kMain;
  std::string prefix;             // official tensor-name prefix: "layers.3." or "mtp.0."
  AttentionKind attention = AttentionKind::kWindow;
  int64_t compress_ratio = 0;
  bool has_indexer = false;       // CSA only
  RouterKind router = RouterKind::kScored;
  bool hyper_connection = true;   // mHC pre/post around both sublayers (always on in V4)
  // RoPE of this layer (spec §4.2): ratio-0 layers use rope_theta without YaRN;
  // compressed layers use compress_rope_theta with YaRN for everything rotated.
  double rope_theta = 10000.0;
  bool rope_yarn = false;
  CacheSpec cache;
};

// One plan per layer: the L main layers, then the MTP layers.
std::vector<LayerPlan> BuildLayerPlans(const DeepSeekV4Config& config);

// "layer 3: window, scored router, mHC, rope θ=10000" — one line for inspect.
std::string DescribeLayerPlan(const LayerPlan& plan);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_PLAN_H_
