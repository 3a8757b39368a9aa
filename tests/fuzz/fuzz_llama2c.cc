// libFuzzer target: ParseLlama2c on arbitrary bytes. Seeds:
// tests/fuzz/corpus/fuzz_llama2c.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_common.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = dsv4::ParseLlama2c(std::span<const uint8_t>(data, size), "fuzz.bin");
  if (!file.ok()) {
    CHECK(!file.status().message().empty());
    return 0;
  }
  const dsv4::Llama2cConfig& c = (*file)->config();
  CHECK(c.dim > 0 && c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0);
  CHECK((*file)->tensors().size() ==
        2u + 9u * static_cast<size_t>(c.n_layers) + (c.shared_classifier ? 0u : 1u));
  volatile uint8_t sink = dsv4::fuzz::TouchTensors(**file, data, size);
  (void)sink;
  return 0;
}
