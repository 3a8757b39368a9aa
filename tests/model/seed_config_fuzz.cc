// libFuzzer target: SeedConfig::FromJson on arbitrary bytes must return a
// Status, never crash (asan-ubsan preset). Seeds: tests/data/seed/*/config.json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/seed/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = dsv4::seed::SeedConfig::FromJson(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (r.ok()) {
    (void)r->max_context();
    (void)r->routed_k();
  }
  return 0;
}
