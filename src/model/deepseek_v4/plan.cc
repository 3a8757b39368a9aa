// Building the per-layer plans of a DeepSeek-V4 model (see plan.h).
#include "model/deepseek_v4/plan.h"

#include <algorithm>
#include <cstdio>

namespace dsv4::deepseek_v4 {

std::string_view AttentionKindName(AttentionKind k) {
  switch (k) {
    case AttentionKind::kWindow:
      return "window";
    case AttentionKind::kCsa:
      return "csa";
    case AttentionKind::kHca:
      return "hca";
    case AttentionKind::kCsa2:
      return "csa2";
  }
  return "?";
}

std::string_view RouterKindName(RouterKind k) {
  switch (k) {
    case RouterKind::kHash:
      return "hash";
    case RouterKind::kScored:
      return "scored";
  }
  return "?";
}

namespace {

int64_t LatestAtOrBefore(const std::vector<int64_t>& layers, int64_t layer) {
  int64_t found = -1;
  for (int64_t l : layers) {
    if (l <= layer) found = l;
  }
  return found;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// DeepSeek-V4.1: CSA2 roles, Engram, lagged mHC (config.cc's ValidateV41
// checked that every reference below exists and has the layer's ratio). Only
// kv sources keep compressed entries, only key owners index keys; the draft
// stages are window-only.
void SetV41Roles(const DeepSeekV4Config& c, LayerPlan& p) {
  p.lagged_hc = true;
  p.router = RouterKind::kScored;
  p.cache.overlap = false;
  p.cache.indexer_head_dim = 0;
  if (p.role == LayerRole::kMtp) return;
  const int64_t l = p.layer;
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    if (c.engram_layer_ids[i] == l) p.engram = static_cast<int64_t>(i);
  }
  if (p.compress_ratio == 0) return;
  Csa2Roles& r = p.csa2;
  r.kv_source = Contains(c.kv_source_layers, l);
  r.index_source = Contains(c.index_source_layers, l);
  r.owns_index_keys = r.kv_source && r.index_source;
  r.candidate_source = l == c.candidate_source_layer;
  r.uses_candidates =
      r.index_source && c.candidate_source_layer >= 0 && c.candidate_source_layer < l;
  r.kv_from = LatestAtOrBefore(c.kv_source_layers, l);
  r.keys_from = r.index_source ? r.kv_from : -1;
  r.picks_from = LatestAtOrBefore(c.index_source_layers, l);
  if (!r.kv_source) p.cache.compress_ratio = 0;
  if (r.owns_index_keys) p.cache.indexer_head_dim = c.index_head_dim;
}

}  // namespace

std::vector<LayerPlan> BuildLayerPlans(const DeepSeekV4Config& c) {
  std::vector<LayerPlan> plans;
  for (int64_t l = 0; l < c.n_layers_total(); ++l) {
    LayerPlan p;
    p.layer = l;
    const bool mtp = l >= c.num_hidden_layers;
    p.role = mtp ? LayerRole::kMtp : LayerRole::kMain;
    p.prefix = mtp ? "mtp." + std::to_string(l - c.num_hidden_layers) + "."
                   : "layers." + std::to_string(l) + ".";
    p.compress_ratio = c.compress_ratio(l);
    p.attention = p.compress_ratio == 0   ? AttentionKind::kWindow
                  : p.compress_ratio == 4 ? AttentionKind::kCsa
                                          : AttentionKind::kHca;
    if (c.v41() && p.compress_ratio > 0) p.attention = AttentionKind::kCsa2;
    p.has_indexer = p.attention == AttentionKind::kCsa;
    // Hash routing by layer index; the MTP layer's index is ≥ L > num_hash_layers
    // so it is always scored (spec §6.3, §11 item 22).
    p.router = l < c.num_hash_layers ? RouterKind::kHash : RouterKind::kScored;
    p.hyper_connection = true;
    if (p.compress_ratio > 0) {
      p.rope_theta = c.compress_rope_theta;
      p.rope_yarn = c.rope_scaling.enabled;
    } else {
      p.rope_theta = c.rope_theta;
      p.rope_yarn = false;
    }
    p.cache.window = c.sliding_window;
    p.cache.head_dim = c.head_dim;
    p.cache.compress_ratio = p.compress_ratio;
    p.cache.overlap = p.attention == AttentionKind::kCsa;
    p.cache.indexer_head_dim = p.has_indexer ? c.index_head_dim : 0;
    if (c.v41()) SetV41Roles(c, p);
    plans.push_back(std::move(p));
  }
  return plans;
}

std::string DescribeLayerPlan(const LayerPlan& p) {
  char buf[320];
  std::string attention(AttentionKindName(p.attention));
  if (p.compress_ratio > 0) attention += " ratio " + std::to_string(p.compress_ratio);
  if (p.has_indexer) attention += " +indexer";
  if (p.attention == AttentionKind::kCsa2) {
    const Csa2Roles& r = p.csa2;
    attention += r.kv_source      ? (r.index_source ? " full" : " kv")
                 : r.index_source ? " reindex"
                                  : " reuse";
    if (r.candidate_source) attention += " +cand";
    if (r.uses_candidates) attention += " in-cand";
    if (!r.kv_source) attention += " kv<" + std::to_string(r.kv_from);
    if (!r.index_source) attention += " picks<" + std::to_string(r.picks_from);
  }
  if (p.engram >= 0) attention += " +engram";
  std::snprintf(buf, sizeof(buf), "%-4s %-10s %-34s router %-6s %s rope theta %g%s",
                p.role == LayerRole::kMtp ? "mtp" : "main", p.prefix.c_str(), attention.c_str(),
                std::string(RouterKindName(p.router)).c_str(),
                p.lagged_hc          ? "mHC-lag"
                : p.hyper_connection ? "mHC"
                                     : "   ",
                p.rope_theta, p.rope_yarn ? " +yarn" : "");
  return buf;
}

}  // namespace dsv4::deepseek_v4
