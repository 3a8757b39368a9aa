// EngineOptions: runtime-only policies an operator chooses per run (not model
// config, never stored in a checkpoint) — MoE capacity limit, expert mask,
// forced experts, router freezing and reweighting, and the KV pruning policy —
// plus the parsers for their CLI spellings and ApplyEngineOptions, which hands
// them to a loaded model.
//
// Which models take them: the seed family (model/seed, docs/seed-mechanisms.md:
// S-044, S-051, S-053, S-134, S-059…S-065). DeepSeek-V4's scored routers and
// other models do not take them yet: ApplyEngineOptions refuses any set option
// for them (Unimplemented, naming the option) instead of ignoring it.
#ifndef DSV4_ENGINE_ENGINE_OPTIONS_H_
#define DSV4_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace dsv4 {

enum class PrunerPolicy { kModelDefault, kOn, kOff };

struct EngineOptions {
  double router_capacity = -1;          // capacity factor (S-044); 0 = unlimited, < 0: config's
  std::vector<int32_t> expert_allow;    // experts allowed (S-051 mask); empty: all
  std::vector<int32_t> force_experts;   // experts every token uses (S-051)
  bool freeze_router = false;           // S-134
  std::vector<int32_t> freeze_experts;  // empty: the default {0, 1}
  std::vector<float> freeze_weights;    // empty: the default {0.7, 0.3}
  bool reweight_router = false;         // S-053
  PrunerPolicy kv_pruner = PrunerPolicy::kModelDefault;
  int64_t kv_budget = -1;  // < 0: the config's

  // True when any option differs from the defaults.
  bool any() const;
};

// "0,2,5" → {0, 2, 5}: non-negative, distinct integers. `what` names the flag
// in errors.
Result<std::vector<int32_t>> ParseIndexList(std::string_view spec, std::string_view what);
// "0,1:0.7,0.3" (experts:weights, as many of each) or "0,1" (weights
// 1/n each) → freeze_experts / freeze_weights of `out`.
Status ParseFreezeSpec(std::string_view spec, EngineOptions& out);
// "on" | "off" | "auto".
Result<PrunerPolicy> ParsePrunerPolicy(std::string_view spec);

// Hands the options to `model`. Errors: an option the model cannot take
// (Unimplemented, naming it), an expert index outside [0, E), a pruner asked
// for on a model without one.
Status ApplyEngineOptions(Model& model, const EngineOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_ENGINE_OPTIONS_H_
