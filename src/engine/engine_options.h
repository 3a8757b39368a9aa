// The CLI spellings of the runtime options (model/runtime_options.h: which
// models take which) and ApplyEngineOptions, which hands them to a loaded
// model. (EngineRuntimeOptions is named apart from engine.h's EngineOptions,
// the serving loop's settings.)
#ifndef DSV4_ENGINE_ENGINE_OPTIONS_H_
#define DSV4_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "model/runtime_options.h"

namespace dsv4 {

using EngineRuntimeOptions = RuntimeOptions;

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

// Hands the options to `model` (Model::ApplyRuntimeOptions), replacing those
// applied before (default options: the model's own behaviour); the model keeps
// them, so nothing need be held by the caller. Errors: an
// option the model cannot take (Unimplemented, naming it), an expert index
// outside [0, E), fewer allowed experts than a DeepSeek-V4 token routes to, a
// pruner asked for on a model without one, a CED option for a model without
// CED layers.
Status ApplyEngineOptions(Model& model, const EngineRuntimeOptions& options);

// The model's fingerprint (LoadedModel::fingerprint) with these options mixed
// in: what guards saved sequence states (engine/state_file.h), since the
// options change how a cache is computed.
uint64_t StateFingerprint(uint64_t model_fingerprint, const EngineRuntimeOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_ENGINE_OPTIONS_H_
