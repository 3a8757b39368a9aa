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
  kCsa2,    // DeepSeek-V4.1, ratio > 0: window + picked entries of a shared compressed cache
};

// A DeepSeek-V4.1 layer's part in CSA2's cross-layer sharing (the reference
// names them "full", "reindex" and "reuse"), decided from kv_source_layers and
// index_source_layers. −1: not applicable (window layers, V4).
struct Csa2Roles {
  bool kv_source = false;         // owns a compressor and the compressed cache (full)
  bool index_source = false;      // runs the indexer over the shared index keys (full, reindex)
  bool owns_index_keys = false;   // kv source and index source: makes the index keys
  bool candidate_source = false;  // picks the candidate blocks (level one of the top-k)
  bool uses_candidates = false;   // an index source after it: picks inside them (level two)
  int64_t kv_from = -1;           // the kv source whose compressed cache this layer reads
  int64_t keys_from = -1;         // index sources: the owner of the keys they score
  int64_t picks_from = -1;        // the index source whose picks this layer attends to
};
enum class RouterKind {
  kHash,    // experts = tid2eid[token id] (the first num_hash_layers layers)
  kScored,  // experts = top-k of score + bias
};
enum class LayerRole {
  kMain,  // a layer of the main stack, `layers.{i}.`
  kMtp,   // a multi-token-prediction layer, `mtp.{k}.` (speculative decoding only)
};

std::string_view AttentionKindName(AttentionKind k);  // "window", "csa", "hca"
std::string_view RouterKindName(RouterKind k);        // "hash", "scored"

// What one layer keeps per sequence (spec §4.8–4.9); cache.h turns it into
// stores and byte counts. Widths in values; the reference stores values in
// bf16 and the compressor state in fp32, this engine everything in fp32.
struct CacheSpec {
  int64_t window = 0;            // W: ring of the kv rows of the last W positions
  int64_t head_dim = 0;          // A: width of a window kv row and of a compressed entry
  int64_t compress_ratio = 0;    // r > 0: one compressed kv entry per r tokens
  bool overlap = false;          // CSA: entries pool 2r tokens (the previous window's halves)
  int64_t indexer_head_dim = 0;  // ID > 0 (CSA): one index key per entry, own compressor
  // Compressor state rows (un-pooled k and gate+ape of the window being
  // filled, and for CSA the previous window): c·r rows of c·A (resp. c·ID)
  // values each, twice (k and gate), c = 2 when overlapping.
  int64_t coff() const { return overlap ? 2 : 1; }
  int64_t state_rows() const { return compress_ratio * coff(); }
};

struct LayerPlan {
  int64_t layer = 0;  // index in [0, L) main, L + k for MTP layer k
  LayerRole role = LayerRole::kMain;
  std::string prefix;  // official tensor-name prefix: "layers.3." or "mtp.0."
  AttentionKind attention = AttentionKind::kWindow;
  int64_t compress_ratio = 0;
  bool has_indexer = false;  // CSA only
  Csa2Roles csa2;            // DeepSeek-V4.1 compressed layers
  int64_t engram = -1;       // DeepSeek-V4.1: index into engram_layer_ids, −1 without Engram
  // DeepSeek-V4.1: the sublayers' mHC mixes are lagged by one (each computes
  // the collapse weights the next sublayer uses) and there is no hc_head.
  bool lagged_hc = false;
  RouterKind router = RouterKind::kScored;
  bool hyper_connection = true;  // mHC pre/post around both sublayers (always on in V4)
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
