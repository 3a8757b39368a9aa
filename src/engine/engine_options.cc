// EngineOptions parsing and application (see engine_options.h).
#include "engine/engine_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>

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

bool EngineOptions::any() const {
  return router_capacity >= 0 || !expert_allow.empty() || !force_experts.empty() || freeze_router ||
         reweight_router || kv_pruner != PrunerPolicy::kModelDefault || kv_budget >= 0;
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

Status ParseFreezeSpec(std::string_view spec, EngineOptions& out) {
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

Status ApplyEngineOptions(Model& model, const EngineOptions& o) {
  if (!o.any()) return Status::Ok();
  auto* seed_model = dynamic_cast<seed::SeedModel*>(&model);
  if (seed_model == nullptr) {
    const char* which = o.router_capacity >= 0     ? "--router-capacity"
                        : !o.expert_allow.empty()  ? "--expert-mask"
                        : !o.force_experts.empty() ? "--force-experts"
                        : o.freeze_router          ? "--freeze-router"
                        : o.reweight_router        ? "--reweight-router"
                                                   : "--kv-pruner/--kv-budget";
    return Unimplemented(std::string(which) + " applies to seed-family models only (model " +
                             model.info().architecture + ")",
                         "DeepSeek-V4's scored routers and other models do not take runtime "
                         "router/KV policies yet; drop the option");
  }
  const seed::SeedConfig& c = seed_model->config();
  const int64_t E = c.moe.enabled ? c.moe.num_experts : 0;
  const bool router_opts = o.router_capacity >= 0 || !o.expert_allow.empty() ||
                           !o.force_experts.empty() || o.freeze_router || o.reweight_router;
  if (router_opts && E == 0) {
    return InvalidArgument("router options given, but this seed model has no MoE layers",
                           "drop --router-capacity/--expert-mask/--force-experts/--freeze-router");
  }
  auto check_range = [&](const std::vector<int32_t>& v, const char* flag) -> Status {
    for (int32_t e : v) {
      if (e >= E) {
        return InvalidArgument(std::string(flag) + ": expert " + std::to_string(e) +
                                   " is not in [0, " + std::to_string(E) + ")",
                               "the model has " + std::to_string(E) + " experts");
      }
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(check_range(o.expert_allow, "--expert-mask"));
  RETURN_IF_ERROR(check_range(o.force_experts, "--force-experts"));
  RETURN_IF_ERROR(check_range(o.freeze_experts, "--freeze-router"));
  if (o.kv_pruner == PrunerPolicy::kOn && !c.kv_pruner.enabled) {
    return InvalidArgument("--kv-pruner on: this model has no SemanticKVPruner",
                           "only checkpoints with extensions.kv_pruner enabled can prune");
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
  seed_model->SetRuntimeOptions(r);
  return Status::Ok();
}

}  // namespace dsv4
