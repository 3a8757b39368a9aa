// SeedModel's Model capabilities: ApplyRuntimeOptions (the seed family takes
// every runtime option, model/runtime_options.h) and kv_usage.
#include <string>

#include "model/seed/model.h"

namespace dsv4::seed {

Status SeedModel::ApplyRuntimeOptions(const RuntimeOptions& o) {
  const SeedConfig& c = config_;
  const int64_t E = c.moe.enabled ? c.moe.num_experts : 0;
  const bool router_opts = o.router_capacity >= 0 || !o.expert_allow.empty() ||
                           !o.force_experts.empty() || o.freeze_router || o.reweight_router;
  if (router_opts && E == 0) {
    return InvalidArgument("router options given, but this seed model has no MoE layers",
                           "drop --router-capacity/--expert-mask/--force-experts/--freeze-router");
  }
  RETURN_IF_ERROR(CheckExpertIndices(o.expert_allow, E, "--expert-mask"));
  RETURN_IF_ERROR(CheckExpertIndices(o.force_experts, E, "--force-experts"));
  RETURN_IF_ERROR(CheckExpertIndices(o.freeze_experts, E, "--freeze-router"));
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
    const KvPrunerConfig& kp = c.kv_pruner;
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
    for (const SeedLayerPlan& p : plans_) has_ced = has_ced || p.ffn == FfnKind::kCedFused;
    if (!has_ced) {
      return InvalidArgument(
          std::string(o.ced_dispatch != CedDispatchPolicy::kModelDefault ? "--ced-dispatch"
                                                                         : "--ced-min-batch") +
              ": this seed model has no CED fused MLP layers",
          "only checkpoints with mlp.ced_weight tensors dispatch CED (S-015)");
    }
  }
  SeedRuntimeOptions r = runtime_;
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
      r.ced_dispatch = CedDispatch::kAuto;
      break;
    case CedDispatchPolicy::kFused:
      r.ced_dispatch = CedDispatch::kFused;
      break;
    case CedDispatchPolicy::kBaseline:
      r.ced_dispatch = CedDispatch::kBaseline;
      break;
  }
  if (o.ced_min_batch >= 0) r.ced_min_batch = o.ced_min_batch;
  r.profile_ops = o.profile_ops;
  SetRuntimeOptions(r);
  return Status::Ok();
}

std::optional<KvUsage> SeedModel::kv_usage(const SequenceCache& cache) const {
  const auto* c = dynamic_cast<const SeedCache*>(&cache);
  if (c == nullptr) return std::nullopt;  // not a seed cache
  KvUsage u;
  u.entries = c->live_tokens();
  u.entries_unpruned = c->length();
  u.peak_entries = c->peak_live();
  u.evicted = c->evicted_total();
  u.bytes_per_entry = kv_bytes_per_token();
  u.pruner_on = config_.kv_pruner.enabled && runtime_.pruner;
  return u;
}

}  // namespace dsv4::seed
