// libFuzzer target: DeepSeek-V4 config.json parsing (DeepSeekV4Config::FromJson)
// and, for configs that validate and are small enough to walk quickly, the
// layer plan, the weight declarations and the inspect report built from them.
// Nothing may crash, hang or throw; errors must come back as a Status.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/inspect.h"
#include "model/deepseek_v4/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dsv4::deepseek_v4::DeepSeekV4Config;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = DeepSeekV4Config::FromJson(text, "fuzz/config.json");
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();  // errors must say something
    return 0;
  }
  (void)config->CheckForwardSupported();
  const auto plans = dsv4::deepseek_v4::BuildLayerPlans(*config);
  if (static_cast<int64_t>(plans.size()) != config->n_layers_total()) __builtin_trap();
  // Walking every declared tensor is O(layers × experts): keep the fuzzer fast.
  if (config->n_layers_total() * config->n_routed_experts <= 4096) {
    (void)dsv4::deepseek_v4::InspectReport(*config, nullptr, "fuzz");
  }
  return 0;
}
