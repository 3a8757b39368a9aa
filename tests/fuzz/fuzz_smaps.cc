// libFuzzer target: SumSmaps (base/page_cache.h) on arbitrary text, over the
// whole address range and over a narrow one. Seeds: tests/fuzz/corpus/fuzz_smaps.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "base/page_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const dsv4::HugePageProbe all = dsv4::SumSmaps(text, 0, UINTPTR_MAX);
  const dsv4::HugePageProbe some = dsv4::SumSmaps(text, 0x10000, 0x7f0000000000);
  CHECK(all.rss_kb >= some.rss_kb && all.pmd_kb >= some.pmd_kb);
  CHECK(some.rss_kb >= 0 && some.pmd_kb >= 0);
  return 0;
}
