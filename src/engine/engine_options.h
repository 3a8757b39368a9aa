// EngineRuntimeOptions: runtime-only policies an operator chooses per run (not
// model config, never stored in a checkpoint) — MoE capacity limit, expert
// mask, forced experts, router freezing and reweighting, the KV pruning
// policy, the CED dispatch and op profiling — plus the parsers for their CLI
// spellings and ApplyEngineOptions, which hands them to a loaded model.
// (Named apart from engine.h's EngineOptions, the serving loop's settings.)
//
// Which models take which (docs/seed-mechanisms.md):
//   seed family (model/seed): all of them (S-044, S-051, S-053, S-134,
//     S-059…S-065, S-015, S-014);
//   DeepSeek-V4: the expert mask and freeze, on its scored (top-k
//     sqrt-softplus) routers only — hash-routed layers never change. Capacity,
//     forced experts and reweighting are refused: the real router drops no
//     tokens (a per-forward capacity would also couple the sequences of a
//     batched step), and the checkpoint's own selection bias already balances;
//   other models: none. Any option a model cannot take is refused
//   (Unimplemented, naming the flag) instead of ignored.
#ifndef DSV4_ENGINE_ENGINE_OPTIONS_H_
#define DSV4_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace dsv4 {

enum class PrunerPolicy { kModelDefault, kOn, kOff };
// S-015: kModelDefault keeps the model's (auto, ced_min_batch 8).
enum class CedDispatchPolicy { kModelDefault, kAuto, kFused, kBaseline };

struct EngineRuntimeOptions {
  double router_capacity = -1;          // capacity factor (S-044); 0 = unlimited, < 0: config's
  std::vector<int32_t> expert_allow;    // experts allowed (S-051 mask); empty: all
  std::vector<int32_t> force_experts;   // experts every token uses (S-051)
  bool freeze_router = false;           // S-134
  std::vector<int32_t> freeze_experts;  // empty: seed {0, 1}; DeepSeek-V4 the first k
  std::vector<float> freeze_weights;    // empty: seed {0.7, 0.3}; DeepSeek-V4 1/k each
  bool reweight_router = false;         // S-053
  PrunerPolicy kv_pruner = PrunerPolicy::kModelDefault;
  int64_t kv_budget = -1;  // < 0: the config's
  CedDispatchPolicy ced_dispatch = CedDispatchPolicy::kModelDefault;
  int64_t ced_min_batch = -1;  // < 0: the model's (8); tokens per Forward call
  bool profile_ops = false;    // S-014: count each block's dispatches

  // True when any option differs from the defaults.
  bool any() const;
};

// What ApplyEngineOptions attached outside the model (DeepSeek-V4: the scored
// routers' options live in a table keyed by the model's MoE weights). The
// options hold while the binding lives; destroy it before the model. Empty for
// models that keep their options inside (seed family).
class EngineOptionsBinding {
 public:
  EngineOptionsBinding() = default;
  explicit EngineOptionsBinding(std::shared_ptr<void> attached) : attached_(std::move(attached)) {}
  bool empty() const { return attached_ == nullptr; }

 private:
  std::shared_ptr<void> attached_;
};

// "0,2,5" → {0, 2, 5}: non-negative, distinct integers. `what` names the flag
// in errors.
Result<std::vector<int32_t>> ParseIndexList(std::string_view spec, std::string_view what);
// "0,1:0.7,0.3" (experts:weights, as many of each) or "0,1" (weights
// 1/n each) → freeze_experts / freeze_weights of `out`.
Status ParseFreezeSpec(std::string_view spec, EngineRuntimeOptions& out);
// "on" | "off" | "auto".
Result<PrunerPolicy> ParsePrunerPolicy(std::string_view spec);
// "auto" | "fused" | "baseline".
Result<CedDispatchPolicy> ParseCedDispatch(std::string_view spec);

// Hands the options to `model` (and, for DeepSeek-V4, returns the binding that
// keeps them attached). Errors: an option the model cannot take
// (Unimplemented, naming it), an expert index outside [0, E), fewer allowed
// experts than a DeepSeek-V4 token routes to, a pruner asked for on a model
// without one, a CED option for a model without CED layers.
Result<EngineOptionsBinding> ApplyEngineOptions(Model& model, const EngineRuntimeOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_ENGINE_OPTIONS_H_
