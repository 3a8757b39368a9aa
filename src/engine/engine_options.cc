// EngineRuntimeOptions parsing and application (see engine_options.h).
#include "engine/engine_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "model/deepseek_v4/model.h"
#include "model/seed/model.h"

namespace dsv4 {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (true) {
    const size_t next = s.find(sep, at);
    out.push_back(
        s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) break;
    at = next + 1;
  }
  return out;
}

}  // namespace

bool EngineRuntimeOptions::any() const {
  return router_capacity >= 0 || !expert_allow.empty() || !force_experts.empty() || freeze_router ||
         reweight_router || kv_pruner != PrunerPolicy::kModelDefault || kv_budget >= 0 ||
         ced_dispatch != CedDispatchPolicy::kModelDefault || ced_min_batch >= 0 || profile_ops;
}

Result<std::vector<int32_t>> ParseIndexList(std::string_view spec, std::string_view what) {
  std::vector<int32_t> out;
  if (spec.empty()) {
    return InvalidArgument(std::string(what) + ": empty expert list", "e.g. 0,2,5");
  }
  for (std::string_view item : Split(spec, ',')) {
    int32_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v < 0) {
      return InvalidArgument(
          std::string(what) + ": '" + std::string(item) + "' is not an expert index",
          "give non-negative integers separated by commas, e.g. 0,2,5");
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      return InvalidArgument(std::string(what) + ": expert " + std::to_string(v) +
                             " is listed twice");
    }
    out.push_back(v);
  }
  return out;
}

Status ParseFreezeSpec(std::string_view spec, EngineRuntimeOptions& out) {
  const size_t colon = spec.find(':');
  ASSIGN_OR_RETURN(out.freeze_experts, ParseIndexList(spec.substr(0, colon), "--freeze-router"));
  out.freeze_weights.clear();
  const size_t n = out.freeze_experts.size();
  if (colon == std::string_view::npos) {
    out.freeze_weights.assign(n, 1.0f / static_cast<float>(n));
  } else {
    for (std::string_view item : Split(spec.substr(colon + 1), ',')) {
      const std::string s(item);
      char* end = nullptr;
      const float w = std::strtof(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(w) || w < 0) {
        return InvalidArgument("--freeze-router: weight '" + s + "' is not a number >= 0",
                               "e.g. 0,1:0.7,0.3");
      }
      out.freeze_weights.push_back(w);
    }
    if (out.freeze_weights.size() != n) {
      return InvalidArgument("--freeze-router: " + std::to_string(n) + " experts but " +
                                 std::to_string(out.freeze_weights.size()) + " weights",
                             "give one weight per expert, e.g. 0,1:0.7,0.3");
    }
  }
  out.freeze_router = true;
  return Status::Ok();
}

Result<PrunerPolicy> ParsePrunerPolicy(std::string_view spec) {
  if (spec == "on") return PrunerPolicy::kOn;
  if (spec == "off") return PrunerPolicy::kOff;
  if (spec == "auto") return PrunerPolicy::kModelDefault;
  return InvalidArgument("--kv-pruner: '" + std::string(spec) + "' is not on, off or auto");
}

Result<CedDispatchPolicy> ParseCedDispatch(std::string_view spec) {
  if (spec == "auto") return CedDispatchPolicy::kAuto;
  if (spec == "fused") return CedDispatchPolicy::kFused;
  if (spec == "baseline") return CedDispatchPolicy::kBaseline;
  return InvalidArgument("--ced-dispatch: '" + std::string(spec) +
                         "' is not auto, fused or baseline");
}

namespace {

Status CheckExperts(const std::vector<int32_t>& v, int64_t E, const char* flag) {
  for (int32_t e : v) {
    if (e >= E) {
      return InvalidArgument(std::string(flag) + ": expert " + std::to_string(e) +
                                 " is not in [0, " + std::to_string(E) + ")",
                             "the model has " + std::to_string(E) + " experts");
    }
  }
  return Status::Ok();
}

// The first option set, by its flag (for refusals).
const char* FirstFlag(const EngineRuntimeOptions& o) {
  return o.router_capacity >= 0                               ? "--router-capacity"
         : !o.expert_allow.empty()                            ? "--expert-mask"
         : !o.force_experts.empty()                           ? "--force-experts"
         : o.freeze_router                                    ? "--freeze-router"
         : o.reweight_router                                  ? "--reweight-router"
         : o.kv_pruner != PrunerPolicy::kModelDefault         ? "--kv-pruner"
         : o.kv_budget >= 0                                   ? "--kv-budget"
         : o.ced_dispatch != CedDispatchPolicy::kModelDefault ? "--ced-dispatch"
         : o.ced_min_batch >= 0                               ? "--ced-min-batch"
                                                              : "--profile-ops";
}

// DeepSeek-V4: the expert mask and freeze on the scored routers.
Result<EngineOptionsBinding> ApplyToDeepSeekV4(DeepSeekV4Model& m, const EngineRuntimeOptions& o) {
  const std::string arch = m.info().architecture;
  auto refuse = [&](const char* flag, const std::string& why) {
    return Unimplemented(
        std::string(flag) + " does not apply to DeepSeek-V4 (" + arch + "): " + why,
        "DeepSeek-V4 takes --expert-mask and --freeze-router (scored layers)");
  };
  if (o.router_capacity >= 0) {
    return refuse("--router-capacity",
                  "its top-k router drops no tokens, and a per-forward capacity would make a "
                  "sequence's experts depend on the other sequences of a batched step");
  }
  if (!o.force_experts.empty()) return refuse("--force-experts", "not offered for its router");
  if (o.reweight_router) {
    return refuse("--reweight-router", "the checkpoint's selection bias already balances load");
  }
  if (o.kv_pruner != PrunerPolicy::kModelDefault || o.kv_budget >= 0) {
    return refuse(o.kv_pruner != PrunerPolicy::kModelDefault ? "--kv-pruner" : "--kv-budget",
                  "its compressed caches keep no per-token entries a pruner could evict");
  }
  if (o.ced_dispatch != CedDispatchPolicy::kModelDefault || o.ced_min_batch >= 0 || o.profile_ops) {
    return refuse(FirstFlag(o), "it has no CED layers (seed family only)");
  }
  const deepseek_v4::DeepSeekV4Config& c = m.config();
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  RETURN_IF_ERROR(CheckExperts(o.expert_allow, E, "--expert-mask"));
  RETURN_IF_ERROR(CheckExperts(o.freeze_experts, E, "--freeze-router"));
  deepseek_v4::ScoredRouterOptions r;
  if (!o.expert_allow.empty()) {
    if (static_cast<int64_t>(o.expert_allow.size()) < k) {
      return InvalidArgument(
          "--expert-mask allows " + std::to_string(o.expert_allow.size()) +
              " experts, but every DeepSeek-V4 token routes to k = " + std::to_string(k),
          "allow at least " + std::to_string(k) + " experts");
    }
    r.allow.assign(E, 0);
    for (int32_t e : o.expert_allow) r.allow[e] = 1;
  }
  if (o.freeze_router) {
    r.freeze = true;
    if (o.freeze_experts.empty()) {  // the first k experts, equal weights
      for (int64_t j = 0; j < k; ++j) r.freeze_experts.push_back(static_cast<int32_t>(j));
      r.freeze_weights.assign(k, 1.0f / static_cast<float>(k));
    } else {
      if (static_cast<int64_t>(o.freeze_experts.size()) != k) {
        return InvalidArgument(
            "--freeze-router lists " + std::to_string(o.freeze_experts.size()) +
                " experts; a DeepSeek-V4 token routes to k = " + std::to_string(k),
            "list exactly " + std::to_string(k) + " experts (and weights)");
      }
      r.freeze_experts = o.freeze_experts;
      r.freeze_weights = o.freeze_weights;
    }
    if (!r.allow.empty()) {
      for (int32_t e : r.freeze_experts) {
        if (r.allow[e] == 0) {
          return InvalidArgument(
              "--freeze-router: expert " + std::to_string(e) + " is not allowed by --expert-mask",
              "freeze to allowed experts, or drop one of the options");
        }
      }
    }
  }
  std::vector<const deepseek_v4::MoeWeights*> scored;
  for (size_t l = 0; l < m.plans().size() && l < m.weights().layers.size(); ++l) {
    if (m.plans()[l].router == deepseek_v4::RouterKind::kScored) {
      scored.push_back(&m.weights().layers[l].moe);
    }
  }
  if (scored.empty()) {
    return InvalidArgument(
        FirstFlag(o) + std::string(": this DeepSeek-V4 model has no scored "
                                   "(top-k) router layers, only hash-routed ones"),
        "hash-routed layers never take router options");
  }
  return EngineOptionsBinding(deepseek_v4::AttachScoredRouterOptions(scored, std::move(r)));
}

}  // namespace

Result<EngineOptionsBinding> ApplyEngineOptions(Model& model, const EngineRuntimeOptions& o) {
  if (!o.any()) return EngineOptionsBinding();
  if (auto* v4 = dynamic_cast<DeepSeekV4Model*>(&model)) return ApplyToDeepSeekV4(*v4, o);
  auto* seed_model = dynamic_cast<seed::SeedModel*>(&model);
  if (seed_model == nullptr) {
    return Unimplemented(std::string(FirstFlag(o)) +
                             " applies to seed-family and DeepSeek-V4 models only (model " +
                             model.info().architecture + ")",
                         "this model takes no runtime router/KV/CED policies; drop the option");
  }
  const seed::SeedConfig& c = seed_model->config();
  const int64_t E = c.moe.enabled ? c.moe.num_experts : 0;
  const bool router_opts = o.router_capacity >= 0 || !o.expert_allow.empty() ||
                           !o.force_experts.empty() || o.freeze_router || o.reweight_router;
  if (router_opts && E == 0) {
    return InvalidArgument("router options given, but this seed model has no MoE layers",
                           "drop --router-capacity/--expert-mask/--force-experts/--freeze-router");
  }
  RETURN_IF_ERROR(CheckExperts(o.expert_allow, E, "--expert-mask"));
  RETURN_IF_ERROR(CheckExperts(o.force_experts, E, "--force-experts"));
  RETURN_IF_ERROR(CheckExperts(o.freeze_experts, E, "--freeze-router"));
  if (o.kv_pruner == PrunerPolicy::kOn && !c.kv_pruner.enabled) {
    return InvalidArgument("--kv-pruner on: this model has no SemanticKVPruner",
                           "only checkpoints with extensions.kv_pruner enabled can prune");
  }
  if (o.kv_budget >= 0) {
    const std::string budget = "--kv-budget " + std::to_string(o.kv_budget);
    if (!c.kv_pruner.enabled) {
      return InvalidArgument(budget + ": this model has no SemanticKVPruner",
                             "drop --kv-budget; only checkpoints with extensions.kv_pruner "
                             "enabled keep a budget");
    }
    const seed::KvPrunerConfig& kp = c.kv_pruner;
    if (o.kv_budget < kp.min_budget()) {
      return InvalidArgument(
          budget + " is below this model's minimum of " + std::to_string(kp.min_budget()) +
              ": the pruner never evicts the first protect_sink = " +
              std::to_string(kp.protect_sink) + " and the newest protect_recent = " +
              std::to_string(kp.protect_recent) + " tokens, so the budget must exceed " +
              std::to_string(kp.protect_sink + kp.protect_recent),
          "give --kv-budget " + std::to_string(kp.min_budget()) +
              " or more, or leave it out for the config's (" +
              (kp.kv_budget > 0 ? std::to_string(kp.kv_budget) : std::string("the cache size")) +
              ")");
    }
  }
  const bool ced_opts = o.ced_dispatch != CedDispatchPolicy::kModelDefault || o.ced_min_batch >= 0;
  if (ced_opts) {
    bool has_ced = false;
    for (const seed::SeedLayerPlan& p : seed_model->plans()) {
      has_ced = has_ced || p.ffn == seed::FfnKind::kCedFused;
    }
    if (!has_ced) {
      return InvalidArgument(
          std::string(o.ced_dispatch != CedDispatchPolicy::kModelDefault ? "--ced-dispatch"
                                                                         : "--ced-min-batch") +
              ": this seed model has no CED fused MLP layers",
          "only checkpoints with mlp.ced_weight tensors dispatch CED (S-015)");
    }
  }
  seed::SeedRuntimeOptions r = seed_model->runtime_options();
  r.router.capacity_factor = o.router_capacity;
  r.router.expert_mask.clear();
  if (!o.expert_allow.empty()) {
    r.router.expert_mask.assign(E, 0);
    for (int32_t e : o.expert_allow) r.router.expert_mask[e] = 1;
  }
  r.router.force_experts = o.force_experts;
  r.router.freeze = o.freeze_router;
  if (!o.freeze_experts.empty()) {
    r.router.freeze_experts = o.freeze_experts;
    r.router.freeze_weights = o.freeze_weights;
  }
  r.router.reweight = o.reweight_router;
  if (o.kv_pruner != PrunerPolicy::kModelDefault) r.pruner = o.kv_pruner == PrunerPolicy::kOn;
  r.pruner_budget = o.kv_budget;
  switch (o.ced_dispatch) {
    case CedDispatchPolicy::kModelDefault:
      break;
    case CedDispatchPolicy::kAuto:
      r.ced_dispatch = seed::CedDispatch::kAuto;
      break;
    case CedDispatchPolicy::kFused:
      r.ced_dispatch = seed::CedDispatch::kFused;
      break;
    case CedDispatchPolicy::kBaseline:
      r.ced_dispatch = seed::CedDispatch::kBaseline;
      break;
  }
  if (o.ced_min_batch >= 0) r.ced_min_batch = o.ced_min_batch;
  r.profile_ops = o.profile_ops;
  seed_model->SetRuntimeOptions(r);
  return EngineOptionsBinding();
}

}  // namespace dsv4
