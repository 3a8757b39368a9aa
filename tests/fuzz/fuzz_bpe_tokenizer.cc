// libFuzzer target for byte-level BPE encoding/decoding with the real
// DeepSeek-V4 vocabulary (tests/data/tokenizer/deepseek_v4_tokenizer.json.gz).
// The first input byte picks parse_special; the rest is the text. Checks: every
// id is in range; the token bytes concatenate back to the input exactly (any
// bytes, valid UTF-8 or not); with parse_special off, the streamed text equals
// utf8::Sanitize(input) and is well-formed UTF-8.
// Seeds: tests/fuzz/corpus/fuzz_bpe_tokenizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/check.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const dsv4::BpeTokenizer& V4() {
  static const dsv4::BpeTokenizer* tok = [] {
    const std::string dir = std::string(DSV4_SOURCE_DIR) + "/tests/data/tokenizer/";
    auto t = dsv4::LoadTokenizerJson(dir + "deepseek_v4_tokenizer.json.gz",
                                     dir + "deepseek_v4_tokenizer_config.json");
    CHECK(t.ok(), "%s", t.status().ToString().c_str());
    return std::move(t).value().release();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool parse_special = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const dsv4::BpeTokenizer& tok = V4();
  const std::vector<int32_t> ids =
      tok.Encode(text, dsv4::BpeEncodeOptions{.parse_special = parse_special});
  for (int32_t id : ids) CHECK(id >= 0 && id < tok.vocab_size(), "id %d out of range", id);
  CHECK(tok.DecodeText(ids) == text, "token bytes do not concatenate back to the input");
  if (!parse_special) {
    const std::string streamed = dsv4::DecodeTokens(tok, ids);
    CHECK(dsv4::utf8::IsValid(streamed));
    CHECK(streamed == dsv4::utf8::Sanitize(text), "streamed text differs from the sanitized input");
  }
  return 0;
}
