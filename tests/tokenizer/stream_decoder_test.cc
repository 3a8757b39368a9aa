// Tests of StreamDecoder (tokenizer/tokenizer.h) against a fake tokenizer whose
// tokens are arbitrary byte strings: every Push returns well-formed UTF-8, and
// everything pushed plus Flush equals utf8::Sanitize of the concatenated bytes,
// however the bytes are split into tokens.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

// Token i decodes to pieces[i]; "after BOS" stripping is off.
class FakeTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view, bool) const override { return {}; }
  std::string Decode(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? pieces[static_cast<size_t>(id)] : std::string();
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces.size()); }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  std::vector<std::string> pieces;
};

TEST(StreamDecoderTest, HoldsBackIncompleteCharacters) {
  FakeTokenizer tok;
  tok.pieces = {"a\xF0\x9F", "\x98", "\x80\x62", "\xE2\x82", "\xAC"};  // a😀b€
  StreamDecoder d(tok);
  EXPECT_EQ(d.Push(0), "a");
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.Push(2), "\xF0\x9F\x98\x80\x62");
  EXPECT_EQ(d.Push(3), "");
  EXPECT_EQ(d.Push(4), "\xE2\x82\xAC");
  EXPECT_EQ(d.Flush(), "");
}

TEST(StreamDecoderTest, FlushReplacesATruncatedCharacterOnce) {
  FakeTokenizer tok;
  tok.pieces = {"x\xF0\x9F\x98"};
  StreamDecoder d(tok);
  EXPECT_EQ(d.Push(0), "x");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.pending_bytes(), 0u);
  // Decoding can go on after a flush.
  tok.pieces.push_back("ok");
  EXPECT_EQ(d.Push(1), "ok");
}

TEST(StreamDecoderTest, OutOfRangeIdsAddNothing) {
  FakeTokenizer tok;
  tok.pieces = {"\xC3", "\xA9"};
  StreamDecoder d(tok);
  EXPECT_EQ(d.Push(0), "");
  EXPECT_EQ(d.Push(7), "");
  EXPECT_EQ(d.Push(-1), "");
  EXPECT_EQ(d.Push(1), "\xC3\xA9");
}

TEST(StreamDecoderTest, RandomSplitsEqualSanitize) {
  std::mt19937 rng(7);
  // Bytes biased towards UTF-8 structure: ASCII, lead bytes, continuation bytes.
  const std::vector<uint8_t> alphabet = {'a',  ' ',  0xC2, 0xC3, 0xE0, 0xE2, 0xED, 0xF0,
                                         0xF4, 0xF5, 0x80, 0x82, 0x9F, 0xA0, 0xAC, 0xBF};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i)
      bytes.push_back(static_cast<char>(alphabet[rng() % alphabet.size()]));
    FakeTokenizer tok;
    for (size_t i = 0; i < bytes.size();) {
      const size_t len = 1 + rng() % 3;
      tok.pieces.push_back(bytes.substr(i, len));
      i += len;
    }
    StreamDecoder d(tok);
    std::string out;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      const std::string piece = d.Push(id);
      ASSERT_TRUE(utf8::IsValid(piece));
      ASSERT_LE(d.pending_bytes(), 3u);
      out += piece;
    }
    const std::string tail = d.Flush();
    ASSERT_TRUE(utf8::IsValid(tail));
    out += tail;
    ASSERT_EQ(out, utf8::Sanitize(bytes));
    std::vector<int32_t> ids(tok.pieces.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    ASSERT_EQ(DecodeTokens(tok, ids), out);
  }
}

}  // namespace
}  // namespace dsv4
