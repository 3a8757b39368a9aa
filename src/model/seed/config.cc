// Parsing and validation of the seed family's config.json (see config.h).
// nlohmann::json runs without exceptions (allow_exceptions = false, every
// access type-checked), so nothing escapes this module.
#include "model/seed/config.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/mapped_file.h"

namespace dsv4::seed {
namespace {

using Json = nlohmann::json;

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Reads typed fields of one JSON object whose keys must all be known; the
// first problem is kept. `where` prefixes field names ("extensions.moe.").
class Reader {
 public:
  Reader(const Json& obj, std::string source, std::string where, Status* status)
      : obj_(obj), source_(std::move(source)), where_(std::move(where)), status_(status) {}

  // Fails on any key not in `known` (plus `ignored`, accepted and unused).
  void OnlyKeys(std::initializer_list<const char*> known,
                std::initializer_list<const char*> ignored = {}) {
    std::set<std::string> ok(known.begin(), known.end());
    ok.insert(ignored.begin(), ignored.end());
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (ok.count(it.key()) == 0) {
        std::string list;
        for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
        Fail("unknown field '" + where_ + it.key() + "'", "known fields here: " + list);
        return;
      }
    }
  }
  const Json* Get(const char* key) {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void Int(const char* key, int64_t& out) {
    const Json* v = Get(key);
    if (v == nullptr) return;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      out = static_cast<int64_t>(v->get<double>());
    } else {
      TypeError(key, "an integer", *v);
    }
  }
  void Int32(const char* key, int32_t& out) {
    int64_t v = out;
    Int(key, v);
    if (v < INT32_MIN || v > INT32_MAX) {
      Fail("'" + where_ + key + "' = " + std::to_string(v) + " does not fit in 32 bits");
      return;
    }
    out = static_cast<int32_t>(v);
  }
  void Float(const char* key, double& out) {
    const Json* v = Get(key);
    if (v == nullptr) return;
    if (v->is_number()) {
      out = v->get<double>();
    } else {
      TypeError(key, "a number", *v);
    }
  }
  void Bool(const char* key, bool& out) {
    const Json* v = Get(key);
    if (v == nullptr) return;
    if (v->is_boolean()) {
      out = v->get<bool>();
    } else {
      TypeError(key, "true or false", *v);
    }
  }
  void String(const char* key, std::string& out) {
    const Json* v = Get(key);
    if (v == nullptr) return;
    if (v->is_string()) {
      out = v->get<std::string>();
    } else {
      TypeError(key, "a string", *v);
    }
  }
  void Fail(std::string message, std::string hint = {}) {
    if (status_->ok()) *status_ = InvalidArgument(source_ + ": " + message, std::move(hint));
  }
  void TypeError(const char* key, const char* want, const Json& got) {
    std::string shown = got.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    Fail("'" + where_ + key + "' must be " + want + ", got " + shown);
  }
  const std::string& where() const { return where_; }

 private:
  const Json& obj_;
  std::string source_;
  std::string where_;
  Status* status_;
};

Status Bad(const std::string& field, const std::string& value, const std::string& allowed) {
  return InvalidArgument("seed config field '" + field + "' = " + value + " is not valid",
                         "allowed: " + allowed);
}

bool OneOf(const std::string& v, std::initializer_list<const char*> set) {
  for (const char* s : set) {
    if (v == s) return true;
  }
  return false;
}

}  // namespace

std::string_view ProfileName(Profile p) {
  switch (p) {
    case Profile::kV4:
      return "P-V4";
    case Profile::kCed:
      return "P-CED";
    case Profile::kV47B:
      return "P-V4-7B";
  }
  return "?";
}

int64_t SeedConfig::max_context() const {
  const double f = rope_scaling.enabled ? rope_scaling.factor : 1.0;
  return static_cast<int64_t>(std::floor(static_cast<double>(max_position_embeddings) * f));
}

int64_t SeedConfig::routed_k() const {
  if (!moe.enabled) return 0;
  const int64_t k =
      moe.routing == "group_limited" ? moe.topk_group * moe.per_group_k : moe.num_experts_per_tok;
  return std::clamp<int64_t>(k, 1, moe.num_experts);
}

Status SeedConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return Bad(name, std::to_string(v), "a positive integer");
    return Status::Ok();
  };
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", num_hidden_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", num_attention_heads));
  RETURN_IF_ERROR(positive("num_key_value_heads", num_key_value_heads));
  RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (hidden_size % num_attention_heads != 0) {  // S-004
    return Bad("num_attention_heads", std::to_string(num_attention_heads),
               "a divisor of hidden_size " + std::to_string(hidden_size) + " (head_dim = H / nh)");
  }
  if (head_dim() % 2 != 0) {
    return Bad("num_attention_heads", std::to_string(num_attention_heads),
               "a value giving an even head_dim (RoPE rotates pairs); head_dim is " +
                   std::to_string(head_dim()));
  }
  if (num_attention_heads % num_key_value_heads != 0) {  // S-005
    return Bad("num_key_value_heads", std::to_string(num_key_value_heads),
               "a divisor of num_attention_heads " + std::to_string(num_attention_heads));
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    return Bad("rope_theta", Num(rope_theta), "a positive number");
  }
  if (rope_scaling.enabled &&
      (!(rope_scaling.factor >= 1.0) || !std::isfinite(rope_scaling.factor))) {
    return Bad("rope_scaling.factor", Num(rope_scaling.factor), "a number >= 1");
  }
  if (!(rms_norm_eps > 0)) return Bad("rms_norm_eps", Num(rms_norm_eps), "a positive number");
  if (bos_token_id >= vocab_size || eos_token_id >= vocab_size) {
    return Bad("bos_token_id/eos_token_id",
               std::to_string(bos_token_id) + "/" + std::to_string(eos_token_id),
               "ids below vocab_size " + std::to_string(vocab_size));
  }

  if (csa.enabled) {
    if (csa.local_window <= 0)
      return Bad("extensions.csa.local_window", std::to_string(csa.local_window),
                 "a positive integer");
    if (csa.segment_window <= 0)
      return Bad("extensions.csa.segment_window", std::to_string(csa.segment_window),
                 "a positive integer");
    if (csa.global_topk <= 0)
      return Bad("extensions.csa.global_topk", std::to_string(csa.global_topk),
                 "a positive integer");
    double sum = 0;
    for (double w : csa.branch_weights) {
      if (!(w >= 0) || !std::isfinite(w)) {
        return Bad("extensions.csa.branch_weights", Num(w),
                   "three non-negative numbers summing to 1");
      }
      sum += w;
    }
    if (std::fabs(sum - 1.0) > 1e-6) {
      return Bad("extensions.csa.branch_weights", "sum " + Num(sum),
                 "three non-negative numbers summing to 1 (S-020)");
    }
    if (!OneOf(csa.global_mode, {"causal", "seed"}))
      return Bad("extensions.csa.global_mode", csa.global_mode, "causal, seed");
    if (!OneOf(csa.fusion_mode, {"weighted", "residual_layernorm"})) {
      return Bad("extensions.csa.fusion_mode", csa.fusion_mode, "weighted, residual_layernorm");
    }
    if (csa.fusion_mode == "residual_layernorm" &&
        num_attention_heads * head_dim() != hidden_size) {
      return Bad("extensions.csa.fusion_mode", csa.fusion_mode, "weighted (nh·d != H)");
    }
  }
  if (hca.enabled) {
    if (!moe.enabled) {
      return Bad("extensions.hca", "on without extensions.moe",
                 "hca together with moe (its output feeds the router, C-13)");
    }
    if (hca.hidden <= 0)
      return Bad("extensions.hca.hidden", std::to_string(hca.hidden), "a positive integer");
    if (!OneOf(hca.stats, {"causal", "whole_call", "batch"})) {
      return Bad("extensions.hca.stats", hca.stats,
                 "causal (default), whole_call, batch (the former \"sequence\" is whole_call; "
                 "docs/seed-mechanisms.md)");
    }
    if (!(hca.eps > 0)) return Bad("extensions.hca.eps", Num(hca.eps), "a positive number");
    if (!(hca.skip_threshold >= 0 && hca.skip_threshold <= 1)) {
      return Bad("extensions.hca.skip_threshold", Num(hca.skip_threshold), "a number in [0, 1]");
    }
  }
  if (dynamic_rope.enabled) {
    if (dynamic_rope.base_len <= 0)
      return Bad("extensions.dynamic_rope.base_len", std::to_string(dynamic_rope.base_len),
                 "a positive integer");
    if (dynamic_rope.dim < 0)
      return Bad("extensions.dynamic_rope.dim", std::to_string(dynamic_rope.dim),
                 "0 (hidden_size) or a positive integer");
  }
  if (segmented_rope.enabled && segmented_rope.segment_length <= 0) {
    return Bad("extensions.segmented_rope.segment_length",
               std::to_string(segmented_rope.segment_length), "a positive integer");
  }
  if (moe.enabled) {
    if (moe.num_experts <= 0)
      return Bad("extensions.moe.num_experts", std::to_string(moe.num_experts),
                 "a positive integer");
    if (moe.num_experts_per_tok <= 0) {
      return Bad("extensions.moe.num_experts_per_tok", std::to_string(moe.num_experts_per_tok),
                 "a positive integer (clamped to num_experts)");
    }
    if (moe.moe_intermediate_size < 0)
      return Bad("extensions.moe.moe_intermediate_size", std::to_string(moe.moe_intermediate_size),
                 "0 (intermediate_size) or a positive integer");
    if (!OneOf(moe.routing, {"topk", "group_limited"}))
      return Bad("extensions.moe.routing", moe.routing, "topk, group_limited");
    if (moe.routing == "group_limited") {
      if (moe.n_group <= 0 || moe.num_experts % moe.n_group != 0) {
        return Bad("extensions.moe.n_group", std::to_string(moe.n_group),
                   "a divisor of num_experts " + std::to_string(moe.num_experts));
      }
      if (moe.topk_group <= 0 || moe.topk_group > moe.n_group) {
        return Bad("extensions.moe.topk_group", std::to_string(moe.topk_group), "1 .. n_group");
      }
      if (moe.per_group_k <= 0 || moe.per_group_k > moe.num_experts / moe.n_group) {
        return Bad("extensions.moe.per_group_k", std::to_string(moe.per_group_k),
                   "1 .. experts per group");
      }
    }
    if (!OneOf(moe.router_input, {"hidden", "hca", "hidden_plus_attn"})) {
      return Bad("extensions.moe.router_input", moe.router_input, "hidden, hca, hidden_plus_attn");
    }
    if (!(moe.capacity_factor >= 0) || !std::isfinite(moe.capacity_factor)) {
      return Bad("extensions.moe.capacity_factor", Num(moe.capacity_factor),
                 "0 (unlimited) or a positive number");
    }
    if (!OneOf(moe.assign, {"topk_capped", "seed_greedy"}))
      return Bad("extensions.moe.assign", moe.assign, "topk_capped, seed_greedy");
    if (!OneOf(moe.expert_naming, {"deepseek", "seed"}))
      return Bad("extensions.moe.expert_naming", moe.expert_naming, "deepseek, seed");
    if (!(moe.utilization_threshold > 0))
      return Bad("extensions.moe.utilization_threshold", Num(moe.utilization_threshold),
                 "a positive number");
  }
  if (ced.enabled) {
    if (intermediate_size % 2 != 0) {
      return Bad("intermediate_size", std::to_string(intermediate_size),
                 "an even number with extensions.ced (gate and up halves, C-02)");
    }
    if (!OneOf(ced.layout, {"auto", "true", "false"}))
      return Bad("extensions.ced.layout", ced.layout, "auto, true, false");
    if (!OneOf(ced.block, {"auto", "all", "none"}))
      return Bad("extensions.ced.block", ced.block, "auto, all, none");
  }
  if (task_adapter.enabled) {
    if (task_adapter.adapter_dim <= 0)
      return Bad("extensions.task_adapter.adapter_dim", std::to_string(task_adapter.adapter_dim),
                 "a positive integer");
    if (!OneOf(task_adapter.task_source, {"first_token", "mean"})) {
      return Bad("extensions.task_adapter.task_source", task_adapter.task_source,
                 "first_token, mean");
    }
  }
  if (kv_pruner.enabled) {
    const KvPrunerConfig& p = kv_pruner;
    if (p.hidden <= 0)
      return Bad("extensions.kv_pruner.hidden", std::to_string(p.hidden), "a positive integer");
    if (!(p.base_threshold > 0 && p.base_threshold <= 1))
      return Bad("extensions.kv_pruner.base_threshold", Num(p.base_threshold),
                 "a number in (0, 1]");
    if (!(p.tau_max >= p.base_threshold && p.tau_max <= 1))
      return Bad("extensions.kv_pruner.tau_max", Num(p.tau_max), "a number in [base_threshold, 1]");
    if (!(p.efficiency_factor >= 0.75 && p.efficiency_factor <= 0.95)) {
      return Bad("extensions.kv_pruner.efficiency_factor", Num(p.efficiency_factor),
                 "a number in [0.75, 0.95] (S-063)");
    }
    if (!(p.prune_pressure > 0))
      return Bad("extensions.kv_pruner.prune_pressure", Num(p.prune_pressure), "a positive number");
    if (p.protect_recent < 0)
      return Bad("extensions.kv_pruner.protect_recent", std::to_string(p.protect_recent),
                 "0 or more");
    if (p.protect_sink < 0)
      return Bad("extensions.kv_pruner.protect_sink", std::to_string(p.protect_sink), "0 or more");
    if (p.kv_budget < 0 || (p.kv_budget > 0 && p.kv_budget < p.min_budget())) {
      return Bad("extensions.kv_pruner.kv_budget", std::to_string(p.kv_budget),
                 "0 (the cache size) or more than protect_recent + protect_sink = " +
                     std::to_string(p.protect_recent + p.protect_sink));
    }
    if (!OneOf(p.eff_mode, {"resolved", "seed"}))
      return Bad("extensions.kv_pruner.eff_mode", p.eff_mode, "resolved, seed");
  }
  return Status::Ok();
}

Result<SeedConfig> SeedConfig::FromJson(std::string_view text, const std::string& source) {
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgument(source + ": not a JSON object", "is this a config.json?");
  }
  Status st;
  SeedConfig c;
  bool capacity_given = false;
  Reader r(root, source, "", &st);
  r.OnlyKeys({"model_type", "seed_profile", "vocab_size", "hidden_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "max_position_embeddings", "rope_theta", "rope_scaling", "rms_norm_eps",
              "bos_token_id", "eos_token_id", "tie_word_embeddings", "extensions"},
             {"architectures", "torch_dtype", "transformers_version", "_name_or_path"});
  std::string model_type;
  r.String("model_type", model_type);
  if (st.ok() && model_type != kSeedModelType) {
    return InvalidArgument(
        source + ": model_type '" + model_type + "' is not '" + std::string(kSeedModelType) + "'",
        "this reader is for the seed-article family");
  }
  std::string profile = "P-V4";
  r.String("seed_profile", profile);
  if (profile == "P-V4") {
    c.profile = Profile::kV4;
  } else if (profile == "P-CED") {
    c.profile = Profile::kCed;
  } else if (profile == "P-V4-7B") {
    c.profile = Profile::kV47B;
  } else if (st.ok()) {
    return InvalidArgument(source + ": 'seed_profile' = '" + profile + "' is not a known profile",
                           "allowed: P-V4, P-CED, P-V4-7B");
  }
  r.Int("vocab_size", c.vocab_size);
  r.Int("hidden_size", c.hidden_size);
  r.Int("num_hidden_layers", c.num_hidden_layers);
  r.Int("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = -1;
  r.Int("num_key_value_heads", c.num_key_value_heads);
  if (c.num_key_value_heads == -1) c.num_key_value_heads = c.num_attention_heads;
  r.Int("intermediate_size", c.intermediate_size);
  r.Int("max_position_embeddings", c.max_position_embeddings);
  r.Float("rope_theta", c.rope_theta);
  r.Float("rms_norm_eps", c.rms_norm_eps);
  r.Int32("bos_token_id", c.bos_token_id);
  r.Int32("eos_token_id", c.eos_token_id);
  r.Bool("tie_word_embeddings", c.tie_word_embeddings);
  if (const Json* rs = r.Get("rope_scaling")) {
    if (!rs->is_object()) {
      r.TypeError("rope_scaling", "an object {\"type\": \"linear\", \"factor\": f}", *rs);
    } else {
      Reader s(*rs, source, "rope_scaling.", &st);
      s.OnlyKeys({"type", "rope_type", "factor"});
      std::string type;
      s.String("type", type);
      if (type.empty()) s.String("rope_type", type);
      if (st.ok() && type != "linear") {
        return InvalidArgument(source + ": 'rope_scaling.type' = '" + type + "' is not supported",
                               "allowed: linear (S-026)");
      }
      c.rope_scaling.enabled = true;
      s.Float("factor", c.rope_scaling.factor);
    }
  }
  if (const Json* ext = r.Get("extensions")) {
    if (!ext->is_object()) {
      r.TypeError("extensions", "an object", *ext);
    } else {
      Reader e(*ext, source, "extensions.", &st);
      e.OnlyKeys({"csa", "hca", "dynamic_rope", "segmented_rope", "moe", "ced", "task_adapter",
                  "kv_pruner"});
      auto sub = [&](const char* key) -> const Json* {
        const Json* v = e.Get(key);
        if (v != nullptr && !v->is_object()) {
          e.TypeError(key, "an object (use {} for the defaults)", *v);
          return nullptr;
        }
        return v;
      };
      auto where = [](const char* key) { return std::string("extensions.") + key + "."; };
      if (const Json* j = sub("csa")) {
        Reader x(*j, source, where("csa"), &st);
        x.OnlyKeys({"local_window", "segment_window", "global_topk", "branch_weights",
                    "global_mode", "fusion_mode"});
        c.csa.enabled = true;
        x.Int("local_window", c.csa.local_window);
        x.Int("segment_window", c.csa.segment_window);
        x.Int("global_topk", c.csa.global_topk);
        if (const Json* w = x.Get("branch_weights")) {
          if (!w->is_array() || w->size() != 3) {
            x.TypeError("branch_weights", "a list of three numbers", *w);
          } else {
            for (int i = 0; i < 3; ++i) {
              if (!(*w)[i].is_number()) {
                x.TypeError("branch_weights", "a list of three numbers", *w);
                break;
              }
              c.csa.branch_weights[i] = (*w)[i].get<double>();
            }
          }
        }
        x.String("global_mode", c.csa.global_mode);
        x.String("fusion_mode", c.csa.fusion_mode);
      }
      if (const Json* j = sub("hca")) {
        Reader x(*j, source, where("hca"), &st);
        x.OnlyKeys({"enabled", "hidden", "stats", "eps", "skip_threshold"});
        c.hca.enabled = true;
        x.Bool("enabled", c.hca.enabled);
        x.Int("hidden", c.hca.hidden);
        x.String("stats", c.hca.stats);
        x.Float("eps", c.hca.eps);
        x.Float("skip_threshold", c.hca.skip_threshold);
      }
      if (const Json* j = sub("dynamic_rope")) {
        Reader x(*j, source, where("dynamic_rope"), &st);
        x.OnlyKeys({"base_len", "dim"});
        c.dynamic_rope.enabled = true;
        x.Int("base_len", c.dynamic_rope.base_len);
        x.Int("dim", c.dynamic_rope.dim);
      }
      if (const Json* j = sub("segmented_rope")) {
        Reader x(*j, source, where("segmented_rope"), &st);
        x.OnlyKeys({"segment_length"});
        c.segmented_rope.enabled = true;
        x.Int("segment_length", c.segmented_rope.segment_length);
      }
      if (const Json* j = sub("moe")) {
        Reader x(*j, source, where("moe"), &st);
        x.OnlyKeys({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "routing",
                    "n_group", "topk_group", "per_group_k", "dynamic_k", "router_input",
                    "capacity_factor", "assign", "expert_naming", "utilization_threshold"});
        c.moe.enabled = true;
        x.Int("num_experts", c.moe.num_experts);
        x.Int("num_experts_per_tok", c.moe.num_experts_per_tok);
        x.Int("moe_intermediate_size", c.moe.moe_intermediate_size);
        x.String("routing", c.moe.routing);
        x.Int("n_group", c.moe.n_group);
        x.Int("topk_group", c.moe.topk_group);
        x.Int("per_group_k", c.moe.per_group_k);
        x.Bool("dynamic_k", c.moe.dynamic_k);
        x.String("router_input", c.moe.router_input);
        capacity_given = x.Get("capacity_factor") != nullptr;
        x.Float("capacity_factor", c.moe.capacity_factor);
        x.String("assign", c.moe.assign);
        x.String("expert_naming", c.moe.expert_naming);
        x.Float("utilization_threshold", c.moe.utilization_threshold);
      }
      if (const Json* j = sub("ced")) {
        Reader x(*j, source, where("ced"), &st);
        x.OnlyKeys({"layout", "block"});
        c.ced.enabled = true;
        if (const Json* l = x.Get("layout"); l != nullptr && l->is_boolean()) {
          c.ced.layout = l->get<bool>() ? "true" : "false";
        } else {
          x.String("layout", c.ced.layout);
        }
        x.String("block", c.ced.block);
      }
      if (const Json* j = sub("task_adapter")) {
        Reader x(*j, source, where("task_adapter"), &st);
        x.OnlyKeys({"adapter_dim", "task_source"});
        c.task_adapter.enabled = true;
        x.Int("adapter_dim", c.task_adapter.adapter_dim);
        x.String("task_source", c.task_adapter.task_source);
      }
      if (const Json* j = sub("kv_pruner")) {
        Reader x(*j, source, where("kv_pruner"), &st);
        x.OnlyKeys({"hidden", "base_threshold", "tau_max", "efficiency_factor", "prune_pressure",
                    "protect_recent", "protect_sink", "kv_budget", "eff_mode"});
        c.kv_pruner.enabled = true;
        x.Int("hidden", c.kv_pruner.hidden);
        x.Float("base_threshold", c.kv_pruner.base_threshold);
        x.Float("tau_max", c.kv_pruner.tau_max);
        x.Float("efficiency_factor", c.kv_pruner.efficiency_factor);
        x.Float("prune_pressure", c.kv_pruner.prune_pressure);
        x.Int("protect_recent", c.kv_pruner.protect_recent);
        x.Int("protect_sink", c.kv_pruner.protect_sink);
        x.Int("kv_budget", c.kv_pruner.kv_budget);
        x.String("eff_mode", c.kv_pruner.eff_mode);
      }
    }
  }
  if (!st.ok()) return st;
  // Profile defaults (S-040, S-044 / C-05, C-20).
  if (c.moe.router_input.empty()) {
    c.moe.router_input = c.profile == Profile::kV4     ? "hca"
                         : c.profile == Profile::kV47B ? "hidden_plus_attn"
                                                       : "hidden";
  }
  if (!capacity_given) c.moe.capacity_factor = c.profile == Profile::kV4 ? 1.0 : 0.0;
  Status v = c.Validate();
  if (!v.ok()) return v.WithContext(source);
  // S-003: warn (not refuse) when I is not round(8H/3).
  if (c.intermediate_size != std::llround(8.0 * static_cast<double>(c.hidden_size) / 3.0)) {
    LOG_DEBUG("{}: intermediate_size {} is not round(8·hidden_size/3) = {} (allowed, S-003)",
              source, c.intermediate_size, std::llround(8.0 * c.hidden_size / 3.0));
  }
  if (c.moe.enabled && c.moe.router_input == "hca" && !c.hca.enabled) {
    LOG_INFO(
        "{}: router_input 'hca' without extensions.hca: the router reads the FFN input (S-011)",
        source);
  }
  return c;
}

Result<SeedConfig> SeedConfig::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

}  // namespace dsv4::seed
