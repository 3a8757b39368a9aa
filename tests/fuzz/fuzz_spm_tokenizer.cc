// libFuzzer target for the SentencePiece-style tokenizer, two ways per input:
//  1. the bytes as text, encoded with the stories260K vocabulary (tok512.bin
//     from the source tree): every id is in range, the decoded text is
//     well-formed UTF-8 and equals utf8::Sanitize(input) (so valid UTF-8 round
//     trips exactly; the dummy prefix space is dropped after BOS), and the raw
//     token bytes without BOS are " " + input;
//  2. the bytes as a tok512.bin file (ParseTok512 with vocab_size -1): no crash;
//     whatever parses and validates must encode and decode without crashing.
// Seeds: tests/fuzz/corpus/fuzz_spm_tokenizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/check.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const dsv4::SpmTokenizer& Stories260K() {
  static const dsv4::SpmTokenizer* tok = [] {
    auto vocab =
        dsv4::ReadTok512(std::string(DSV4_SOURCE_DIR) + "/models/stories260K/tok512.bin", 512);
    CHECK(vocab.ok(), "%s", vocab.status().ToString().c_str());
    auto t = dsv4::SpmTokenizer::Create(std::move(vocab).value());
    CHECK(t.ok(), "%s", t.status().ToString().c_str());
    return std::move(t).value().release();
  }();
  return *tok;
}

void CheckIdsInRange(const dsv4::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (const int32_t id : ids) CHECK(id >= 0 && id < tok.vocab_size(), "id %d out of range", id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // 1. Text.
  const dsv4::SpmTokenizer& tok = Stories260K();
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true);
  CHECK(!ids.empty() && ids[0] == tok.bos_id());
  CheckIdsInRange(tok, ids);
  const std::string decoded = dsv4::DecodeTokens(tok, ids);
  CHECK(dsv4::utf8::IsValid(decoded));
  CHECK(decoded == dsv4::utf8::Sanitize(text), "decode(encode(s)) != sanitize(s)");
  if (dsv4::utf8::IsValid(text)) CHECK(decoded == text);
  std::string raw;
  for (const int32_t id : tok.Encode(text, /*add_bos=*/false)) raw += tok.Decode(id);
  CHECK(raw == (text.empty() ? std::string() : " " + std::string(text)));

  // 2. A tokenizer file.
  auto vocab = dsv4::ParseTok512(std::span<const uint8_t>(data, size), -1, "fuzz.bin");
  if (!vocab.ok()) {
    CHECK(!vocab.status().message().empty());
    return 0;
  }
  auto parsed = dsv4::SpmTokenizer::Create(std::move(vocab).value());
  if (!parsed.ok()) return 0;
  const dsv4::SpmTokenizer& other = **parsed;
  for (const std::string_view s : {std::string_view("Once upon a time"), text.substr(0, 64)}) {
    const std::vector<int32_t> other_ids = other.Encode(s, true);
    CheckIdsInRange(other, other_ids);
    CHECK(dsv4::utf8::IsValid(dsv4::DecodeTokens(other, other_ids)));
  }
  return 0;
}
