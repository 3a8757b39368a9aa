// libFuzzer target for the tokenizer.json reader (BpeTokenizer::FromTokenizerJson):
// any bytes either fail with a Status or give a tokenizer that encodes and
// decodes a fixed text without crashing, with every id in range.
// Seeds: tests/fuzz/corpus/fuzz_tokenizer_json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "base/log.h"
#include "tokenizer/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    dsv4::SetLogLevel(dsv4::LogLevel::kSilent);
    return true;
  }();
  (void)quiet;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tok = dsv4::BpeTokenizer::FromTokenizerJson(json, "", "fuzz.json");
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->Encode("Hello, world! 你好 <s> 123", true);
  for (int32_t id : ids) CHECK(id >= 0 && id < (*tok)->vocab_size(), "id %d out of range", id);
  (void)(*tok)->DecodeText(ids);
  return 0;
}
