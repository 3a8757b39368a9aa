// DeepSeekV4Model::ApplyRuntimeOptions: the expert mask and freeze of the
// scored routers (model/runtime_options.h says which options DeepSeek-V4
// takes and why it refuses the others).
#include <string>
#include <utility>

#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {

Status DeepSeekV4Model::ApplyRuntimeOptions(const RuntimeOptions& o) {
  if (!o.any()) {
    router_options_.reset();  // the checkpoint's routing again
    return Status::Ok();
  }
  const std::string arch = info().architecture;
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
  const DeepSeekV4Config& c = config_;
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  RETURN_IF_ERROR(CheckExpertIndices(o.expert_allow, E, "--expert-mask"));
  RETURN_IF_ERROR(CheckExpertIndices(o.freeze_experts, E, "--freeze-router"));
  ScoredRouterOptions r;
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
  bool any_scored = false;
  for (const LayerPlan& p : plans_) {
    any_scored = any_scored || (p.role != LayerRole::kMtp && p.router == RouterKind::kScored);
  }
  if (!any_scored) {
    return InvalidArgument(
        FirstFlag(o) + std::string(": this DeepSeek-V4 model has no scored "
                                   "(top-k) router layers, only hash-routed ones"),
        "hash-routed layers never take router options");
  }
  router_options_ = std::move(r);
  return Status::Ok();
}

}  // namespace dsv4::deepseek_v4
