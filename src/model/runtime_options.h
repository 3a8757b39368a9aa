// RuntimeOptions: runtime-only policies an operator chooses per run (not model
// config, never stored in a checkpoint) — MoE capacity limit, expert mask,
// forced experts, router freezing and reweighting, the KV pruning policy, the
// CED dispatch and op profiling. The engine parses them from the CLI and the
// server's flags (engine/engine_options.h) and hands them to a model through
// Model::ApplyRuntimeOptions; each model family decides which it takes.
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
//   (Unimplemented, naming its flag) instead of ignored.
#ifndef DSV4_MODEL_RUNTIME_OPTIONS_H_
#define DSV4_MODEL_RUNTIME_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

enum class PrunerPolicy { kModelDefault, kOn, kOff };
// S-015: kModelDefault keeps the model's (auto, ced_min_batch 8).
enum class CedDispatchPolicy { kModelDefault, kAuto, kFused, kBaseline };

// Each option is named in errors by its CLI flag (FirstFlag).
struct RuntimeOptions {
  double router_capacity = -1;          // --router-capacity (S-044); 0 = unlimited, < 0: config's
  std::vector<int32_t> expert_allow;    // --expert-mask (S-051): experts allowed; empty: all
  std::vector<int32_t> force_experts;   // --force-experts (S-051): experts every token uses
  bool freeze_router = false;           // --freeze-router (S-134)
  std::vector<int32_t> freeze_experts;  // empty: seed {0, 1}; DeepSeek-V4 the first k
  std::vector<float> freeze_weights;    // empty: seed {0.7, 0.3}; DeepSeek-V4 1/k each
  bool reweight_router = false;         // --reweight-router (S-053)
  PrunerPolicy kv_pruner = PrunerPolicy::kModelDefault;  // --kv-pruner
  int64_t kv_budget = -1;                                // --kv-budget; < 0: the config's
  CedDispatchPolicy ced_dispatch = CedDispatchPolicy::kModelDefault;  // --ced-dispatch
  int64_t ced_min_batch = -1;  // --ced-min-batch; < 0: the model's (8); tokens per Forward call
  bool profile_ops = false;    // --profile-ops (S-014): count each block's dispatches

  // True when any option differs from the defaults.
  bool any() const {
    return router_capacity >= 0 || !expert_allow.empty() || !force_experts.empty() ||
           freeze_router || reweight_router || kv_pruner != PrunerPolicy::kModelDefault ||
           kv_budget >= 0 || ced_dispatch != CedDispatchPolicy::kModelDefault ||
           ced_min_batch >= 0 || profile_ops;
  }
};

// The flag of the first option set (for refusals); "--profile-ops" when none
// but it is.
inline const char* FirstFlag(const RuntimeOptions& o) {
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

// InvalidArgument naming `flag` when an expert index of `experts` is not in
// [0, E).
inline Status CheckExpertIndices(const std::vector<int32_t>& experts, int64_t E, const char* flag) {
  for (int32_t e : experts) {
    if (e >= E) {
      return InvalidArgument(std::string(flag) + ": expert " + std::to_string(e) +
                                 " is not in [0, " + std::to_string(E) + ")",
                             "the model has " + std::to_string(E) + " experts");
    }
  }
  return Status::Ok();
}

}  // namespace dsv4

#endif  // DSV4_MODEL_RUNTIME_OPTIONS_H_
