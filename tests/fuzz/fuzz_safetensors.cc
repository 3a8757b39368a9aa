// libFuzzer target: ParseSafetensors on arbitrary bytes, and the same bytes as
// a model.safetensors.index.json. Seeds: tests/fuzz/corpus/fuzz_safetensors.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto index = dsv4::ParseSafetensorsIndex(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
  if (index.ok()) {
    for (const auto& [name, shard] : index->weight_map) {
      (void)name;
      CHECK(!shard.empty() && shard.front() != '/', "unsafe shard name accepted");
    }
  }
  auto file = dsv4::ParseSafetensors(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  if (!file.ok()) {
    CHECK(!file.status().message().empty());
    return 0;
  }
  const dsv4::SafetensorsFile& f = **file;
  volatile uint8_t sink = dsv4::fuzz::TouchTensors(f, data, size);
  for (const dsv4::TensorInfo& t : f.tensors()) {
    CHECK(f.Lookup(t.name).ok());
    CHECK(!f.StoredDType(t.name).empty());
    // Try the packed-FP4 view of every byte tensor with a last dim.
    if (t.dtype == dsv4::DType::kI8 && t.shape.size() == 2 && t.shape[1] <= (int64_t{1} << 40)) {
      auto v = dsv4::GetPackedFp4(f, t.name, {t.shape[0], 2 * t.shape[1]});
      CHECK(v.ok());
      CHECK(v->nbytes() == t.nbytes);
    }
  }
  for (const auto& [name, why] : f.unsupported()) CHECK(!f.Lookup(name).ok());
  (void)sink;
  return 0;
}
