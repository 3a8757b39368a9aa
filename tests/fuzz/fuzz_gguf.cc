// libFuzzer target: ParseGguf on arbitrary bytes, then every metadata accessor
// on every key and a lookup of every tensor. Seeds: tests/fuzz/corpus/fuzz_gguf.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_common.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = dsv4::ParseGguf(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) {
    CHECK(!file.status().message().empty());
    return 0;
  }
  const dsv4::GgufFile& g = **file;
  volatile uint8_t sink = dsv4::fuzz::TouchTensors(g, data, size);
  for (const dsv4::GgufKeyValue& kv : g.metadata()) {
    (void)g.GetU32(kv.key);
    (void)g.GetU64(kv.key);
    (void)g.GetI32(kv.key);
    (void)g.GetI64(kv.key);
    (void)g.GetF32(kv.key);
    (void)g.GetBool(kv.key);
    (void)g.GetString(kv.key);
    (void)g.GetStringArray(kv.key);
    (void)g.GetF32Array(kv.key);
    (void)g.GetI32Array(kv.key);
  }
  for (const dsv4::GgufTensorInfo& t : g.ggml_tensors()) {
    auto r = g.Lookup(t.name);
    CHECK(r.ok() == t.dtype.has_value(), "Lookup(%s) disagrees with the dtype", t.name.c_str());
  }
  (void)sink;
  return 0;
}
