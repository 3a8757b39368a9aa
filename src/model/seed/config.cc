// Parsing and validation of the seed family's config.json (see config.h).
// nlohmann::json runs without exceptions (allow_exceptions = false, every
// access type-checked), so nothing escapes this module.
#include "model/seed/config.h"

#include <algorithm>
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
  void OnlyKeys(const std::vector<std::string>& known,
                std::initializer_list<const char*> ignored = {}) {
    std::set<std::string> ok(known.begin(), known.end());
    ok.insert(ignored.begin(), ignored.end());
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (ok.count(it.key()) == 0) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        Fail("unknown field '" + where_ + it.key() + "'", "known fields here: " + list);
        return;
      }
    }
  }
  // The table's readers (VisitSeedFields), by the field's type.
  void Read(const SeedField& f, int64_t& out) { Int(f.key, out); }
  void Read(const SeedField& f, int32_t& out) { Int32(f.key, out); }
  void Read(const SeedField& f, double& out) { Float(f.key, out); }
  void Read(const SeedField& f, bool& out) { Bool(f.key, out); }
  void Read(const SeedField& f, std::string& out) {
    if (const Json* v = Get(f.key); f.bool_spelling && v != nullptr && v->is_boolean()) {
      out = v->get<bool>() ? "true" : "false";
      return;
    }
    String(f.key, out);
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

const SeedConfig kDefaults{};  // walked for the table's keys

// The extensions (VisitSeedFields sections other than "" and "rope_scaling"),
// in table order.
std::vector<std::string> ExtensionNames() {
  std::vector<std::string> out;
  VisitSeedFields(kDefaults, [&](const SeedField& f, const auto&) {
    const std::string s = f.section;
    if (!s.empty() && s != "rope_scaling" && std::find(out.begin(), out.end(), s) == out.end()) {
      out.push_back(s);
    }
  });
  return out;
}

// The keys of one section: the table's, then `structured` ones read around it.
std::vector<std::string> SectionKeys(std::string_view section,
                                     std::initializer_list<const char*> structured = {}) {
  std::vector<std::string> out;
  VisitSeedFields(kDefaults, [&](const SeedField& f, const auto&) {
    if (section == f.section) out.push_back(f.key);
  });
  out.insert(out.end(), structured.begin(), structured.end());
  return out;
}

// Reads the table's fields of `section` from `x`.
void ReadSection(Reader& x, std::string_view section, SeedConfig& c) {
  VisitSeedFields(c, [&](const SeedField& f, auto& value) {
    if (section == f.section) x.Read(f, value);
  });
}

// An extension present in the file is on (hca: unless its "enabled" says not).
void SetSectionEnabled(SeedConfig& c, std::string_view s) {
  bool* on = s == "csa"              ? &c.csa.enabled
             : s == "hca"            ? &c.hca.enabled
             : s == "dynamic_rope"   ? &c.dynamic_rope.enabled
             : s == "segmented_rope" ? &c.segmented_rope.enabled
             : s == "moe"            ? &c.moe.enabled
             : s == "ced"            ? &c.ced.enabled
             : s == "task_adapter"   ? &c.task_adapter.enabled
             : s == "kv_pruner"      ? &c.kv_pruner.enabled
                                     : nullptr;
  if (on != nullptr) *on = true;
}

// extensions.csa.branch_weights: three numbers (S-020).
void ReadBranchWeights(Reader& x, CsaConfig& csa) {
  const Json* w = x.Get("branch_weights");
  if (w == nullptr) return;
  if (!w->is_array() || w->size() != 3) {
    x.TypeError("branch_weights", "a list of three numbers", *w);
    return;
  }
  for (int i = 0; i < 3; ++i) {
    if (!(*w)[i].is_number()) {
      x.TypeError("branch_weights", "a list of three numbers", *w);
      return;
    }
    csa.branch_weights[i] = (*w)[i].get<double>();
  }
}

// Validate's check of one field against its range or allowed values.
std::string RangeHint(const SeedField& f, bool integer) {
  if (f.hint != nullptr) return f.hint;
  const bool no_max = f.max == SeedField::kInf;
  if (integer && f.min == 1 && no_max) return "a positive integer";
  if (integer && f.min == 0 && no_max) return "0 or more";
  if (!integer && f.min == 0 && f.min_open && no_max) return "a positive number";
  if (no_max) return std::string(integer ? "an integer" : "a number") + " >= " + Num(f.min);
  return std::string(integer ? "an integer" : "a number") + " in " + (f.min_open ? "(" : "[") +
         Num(f.min) + ", " + Num(f.max) + "]";
}
Status CheckField(const SeedField& f, double v, bool integer, const std::string& shown) {
  const bool ok = std::isfinite(v) && (f.min_open ? v > f.min : v >= f.min) && v <= f.max;
  if (ok) return Status::Ok();
  return Bad(SeedFieldPrefix(f.section) + f.key, shown, RangeHint(f, integer));
}
Status CheckField(const SeedField& f, int64_t v) {
  return CheckField(f, static_cast<double>(v), true, std::to_string(v));
}
Status CheckField(const SeedField& f, int32_t v) { return CheckField(f, int64_t{v}); }
Status CheckField(const SeedField& f, double v) { return CheckField(f, v, false, Num(v)); }
Status CheckField(const SeedField&, bool) { return Status::Ok(); }
Status CheckField(const SeedField& f, const std::string& v) {
  if (f.allowed[0] == nullptr) return Status::Ok();
  std::string list;
  for (const char* a : f.allowed) {
    if (a == nullptr) break;
    if (v == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Bad(SeedFieldPrefix(f.section) + f.key, v, f.hint != nullptr ? f.hint : list);
}

}  // namespace

bool SeedSectionEnabled(const SeedConfig& c, std::string_view s) {
  if (s.empty()) return true;
  if (s == "rope_scaling") return c.rope_scaling.enabled;
  if (s == "csa") return c.csa.enabled;
  if (s == "hca") return c.hca.enabled;
  if (s == "dynamic_rope") return c.dynamic_rope.enabled;
  if (s == "segmented_rope") return c.segmented_rope.enabled;
  if (s == "moe") return c.moe.enabled;
  if (s == "ced") return c.ced.enabled;
  if (s == "task_adapter") return c.task_adapter.enabled;
  if (s == "kv_pruner") return c.kv_pruner.enabled;
  return false;
}

std::string SeedFieldPrefix(std::string_view section) {
  if (section.empty()) return "";
  if (section == "rope_scaling") return "rope_scaling.";
  return "extensions." + std::string(section) + ".";
}

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
  // Each enabled section's fields against the table's ranges and values.
  Status st;
  VisitSeedFields(*this, [&](const SeedField& f, const auto& value) {
    if (st.ok() && SeedSectionEnabled(*this, f.section)) st = CheckField(f, value);
  });
  RETURN_IF_ERROR(st);
  // ---- Across fields ----
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
  if (bos_token_id >= vocab_size || eos_token_id >= vocab_size) {
    return Bad("bos_token_id/eos_token_id",
               std::to_string(bos_token_id) + "/" + std::to_string(eos_token_id),
               "ids below vocab_size " + std::to_string(vocab_size));
  }
  if (csa.enabled) {
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
    if (csa.fusion_mode == "residual_layernorm" &&
        num_attention_heads * head_dim() != hidden_size) {
      return Bad("extensions.csa.fusion_mode", csa.fusion_mode, "weighted (nh·d != H)");
    }
  }
  if (hca.enabled && !moe.enabled) {
    return Bad("extensions.hca", "on without extensions.moe",
               "hca together with moe (its output feeds the router, C-13)");
  }
  if (moe.enabled && moe.routing == "group_limited") {
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
  if (ced.enabled && intermediate_size % 2 != 0) {
    return Bad("intermediate_size", std::to_string(intermediate_size),
               "an even number with extensions.ced (gate and up halves, C-02)");
  }
  if (kv_pruner.enabled) {
    const KvPrunerConfig& p = kv_pruner;
    if (!(p.tau_max >= p.base_threshold && p.tau_max <= 1))
      return Bad("extensions.kv_pruner.tau_max", Num(p.tau_max), "a number in [base_threshold, 1]");
    if (p.kv_budget < 0 || (p.kv_budget > 0 && p.kv_budget < p.min_budget())) {
      return Bad("extensions.kv_pruner.kv_budget", std::to_string(p.kv_budget),
                 "0 (the cache size) or more than protect_recent + protect_sink = " +
                     std::to_string(p.protect_recent + p.protect_sink));
    }
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
  r.OnlyKeys(SectionKeys("", {"model_type", "seed_profile", "rope_scaling", "extensions"}),
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
  c.num_key_value_heads = -1;
  ReadSection(r, "", c);
  if (c.num_key_value_heads == -1) c.num_key_value_heads = c.num_attention_heads;
  if (const Json* rs = r.Get("rope_scaling")) {
    if (!rs->is_object()) {
      r.TypeError("rope_scaling", "an object {\"type\": \"linear\", \"factor\": f}", *rs);
    } else {
      Reader s(*rs, source, "rope_scaling.", &st);
      s.OnlyKeys(SectionKeys("rope_scaling", {"type", "rope_type"}));
      std::string type;
      s.String("type", type);
      if (type.empty()) s.String("rope_type", type);
      if (st.ok() && type != "linear") {
        return InvalidArgument(source + ": 'rope_scaling.type' = '" + type + "' is not supported",
                               "allowed: linear (S-026)");
      }
      c.rope_scaling.enabled = true;
      ReadSection(s, "rope_scaling", c);
    }
  }
  if (const Json* ext = r.Get("extensions")) {
    if (!ext->is_object()) {
      r.TypeError("extensions", "an object", *ext);
    } else {
      Reader e(*ext, source, "extensions.", &st);
      e.OnlyKeys(ExtensionNames());
      for (const std::string& name : ExtensionNames()) {
        const Json* j = e.Get(name.c_str());
        if (j == nullptr) continue;
        if (!j->is_object()) {
          e.TypeError(name.c_str(), "an object (use {} for the defaults)", *j);
          continue;
        }
        Reader x(*j, source, SeedFieldPrefix(name), &st);
        // csa's branch_weights (a list) is read around the table.
        x.OnlyKeys(name == "csa" ? SectionKeys(name, {"branch_weights"}) : SectionKeys(name));
        SetSectionEnabled(c, name);
        ReadSection(x, name, c);
        if (name == "moe") capacity_given = x.Get("capacity_factor") != nullptr;
        if (name == "csa") ReadBranchWeights(x, c.csa);
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
