// EngineRuntimeOptions parsing and application (see engine_options.h).
#include "engine/engine_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/hash.h"

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

Status ApplyEngineOptions(Model& model, const EngineRuntimeOptions& o) {
  return model.ApplyRuntimeOptions(o);
}

uint64_t StateFingerprint(uint64_t model_fingerprint, const EngineRuntimeOptions& o) {
  Hasher h(model_fingerprint);
  h.UpdatePod(o.router_capacity);
  h.Update(o.expert_allow.data(), o.expert_allow.size() * sizeof(int32_t));
  h.Update(o.force_experts.data(), o.force_experts.size() * sizeof(int32_t));
  h.UpdatePod(o.freeze_router).UpdatePod(o.reweight_router);
  h.Update(o.freeze_experts.data(), o.freeze_experts.size() * sizeof(int32_t));
  h.Update(o.freeze_weights.data(), o.freeze_weights.size() * sizeof(float));
  h.UpdatePod(static_cast<int>(o.kv_pruner)).UpdatePod(o.kv_budget);
  h.UpdatePod(static_cast<int>(o.ced_dispatch)).UpdatePod(o.ced_min_batch);
  return h.digest();
}

}  // namespace dsv4
