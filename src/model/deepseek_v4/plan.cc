// Building the per-layer plans of a DeepSeek-V4 model (see plan.h).
#include "model/deepseek_v4/plan.h"

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
    plans.push_back(std::move(p));
  }
  return plans;
}

std::string DescribeLayerPlan(const LayerPlan& p) {
  char buf[256];
  std::string attention(AttentionKindName(p.attention));
  if (p.compress_ratio > 0) attention += " ratio " + std::to_string(p.compress_ratio);
  if (p.has_indexer) attention += " +indexer";
  std::snprintf(buf, sizeof(buf), "%-4s %-10s %-22s router %-6s %s rope theta %g%s",
                p.role == LayerRole::kMtp ? "mtp" : "main", p.prefix.c_str(), attention.c_str(),
                std::string(RouterKindName(p.router)).c_str(), p.hyper_connection ? "mHC" : "   ",
                p.rope_theta, p.rope_yarn ? " +yarn" : "");
  return buf;
}

}  // namespace dsv4::deepseek_v4
