// libFuzzer target: ParseGguf on arbitrary bytes, then every metadata accessor
// on every key, a lookup of every tensor and the dequantisation of the first
// row of every tensor of a type dsv4 reads (every GGUF quant type's decoder on
// arbitrary bytes). Seeds: tests/fuzz/corpus/fuzz_gguf (quant_types.gguf holds
// a row of each quant type).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_common.h"
#include "io/gguf.h"
#include "tensor/dtype.h"

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
  std::vector<float> row;
  for (const dsv4::TensorInfo& t : g.tensors()) {
    if (t.shape.empty()) continue;
    const int64_t n = t.shape.back();  // the innermost dimension: one row
    if (n <= 0 || n > (int64_t{1} << 16) || t.nbytes < dsv4::DTypeBytes(t.dtype, n)) continue;
    row.resize(static_cast<size_t>(n));
    dsv4::DequantizeRow(t.dtype, t.data, n, row.data());
    sink ^= static_cast<uint8_t>(row[0] != row[0]);
  }
  (void)sink;
  return 0;
}
