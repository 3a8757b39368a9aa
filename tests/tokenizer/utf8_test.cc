// Tests of tokenizer/utf8.h: well-formedness per Unicode Table 3-7 and U+FFFD
// substitution of maximal subparts. The expected replacements are what
// CPython 3.11 gives for bytes.decode("utf-8", errors="replace").
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsv4::utf8 {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8Test, SanitizeMatchesCPythonReplace) {
  struct Case {
    std::string in, out;
  };
  const std::vector<Case> cases = {
      {"\x80", kFffd},
      {"\xC0\xAF", Repeat(kFffd, 2)},            // overlong '/': C0 never starts a character
      {"\xC2", kFffd},                           // truncated
      {"\xC2\x41", kFffd + "A"},                 // interrupted
      {"\xE0\x80\x80", Repeat(kFffd, 3)},        // overlong: E0 needs A0..BF next
      {"\xE0\xA0", kFffd},                       // truncated 3-byte: one maximal subpart
      {"\xED\xA0\x80", Repeat(kFffd, 3)},        // surrogate U+D800
      {"\xED\x9F\xBF", "\xED\x9F\xBF"},          // U+D7FF is fine
      {"\xF0\x8F\xBF\xBF", Repeat(kFffd, 4)},    // overlong 4-byte
      {"\xF0\x90\x80", kFffd},                   // truncated 4-byte
      {"\xF4\x90\x80\x80", Repeat(kFffd, 4)},    // past U+10FFFF
      {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},  // U+10FFFF is fine
      {"\xF5\x80", Repeat(kFffd, 2)},
      {"\xFF", kFffd},
      {"a\xE2\x82", "a" + kFffd},
      {"\xE2\x82\xAC\x78", "\xE2\x82\xAC\x78"},
      {"\xF1\x80\x80\xC2\xA9", kFffd + "\xC2\xA9"},
      {"", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Sanitize(c.in), c.out) << c.in;
    EXPECT_EQ(IsValid(c.in), c.in == c.out) << c.in;
  }
}

TEST(Utf8Test, ScanFirstReportsLengths) {
  EXPECT_EQ(ScanFirst("a").result, ScanResult::kComplete);
  EXPECT_EQ(ScanFirst("a").length, 1u);
  EXPECT_EQ(ScanFirst("\xE2\x82\xAC!").length, 3u);
  EXPECT_EQ(ScanFirst("\xE2\x82").result, ScanResult::kIncomplete);
  EXPECT_EQ(ScanFirst("\xE2\x82").length, 2u);
  EXPECT_EQ(ScanFirst("\xF0").result, ScanResult::kIncomplete);
  EXPECT_EQ(ScanFirst("\xE2\x82\x61").result, ScanResult::kInvalid);
  EXPECT_EQ(ScanFirst("\xE2\x82\x61").length, 2u);
  EXPECT_EQ(ScanFirst("\xBF").result, ScanResult::kInvalid);
  EXPECT_EQ(ScanFirst("\xBF").length, 1u);
}

TEST(Utf8Test, EveryScalarValueRoundTrips) {
  std::string s;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    s.clear();
    Append(cp, &s);
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      EXPECT_EQ(s, kFffd);
      EXPECT_EQ(EncodedLength(cp), 0u);
      continue;
    }
    ASSERT_EQ(s.size(), EncodedLength(cp)) << static_cast<uint32_t>(cp);
    const Scan scan = ScanFirst(s);
    ASSERT_EQ(scan.result, ScanResult::kComplete) << static_cast<uint32_t>(cp);
    ASSERT_EQ(scan.length, s.size());
    // Every proper prefix is incomplete, never invalid.
    for (size_t n = 1; n < s.size(); ++n) {
      ASSERT_EQ(ScanFirst(s.substr(0, n)).result, ScanResult::kIncomplete);
    }
  }
  s.clear();
  Append(0x110000, &s);
  EXPECT_EQ(s, kFffd);
}

TEST(Utf8Test, AllTwoByteSequencesAgreeWithTheTable) {
  // Brute force: a 2-byte string is valid iff it is one of the Table 3-7 forms.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      const bool ascii_pair = a < 0x80 && b < 0x80;
      const bool two_byte = a >= 0xC2 && a <= 0xDF && b >= 0x80 && b <= 0xBF;
      EXPECT_EQ(IsValid(s), ascii_pair || two_byte) << a << " " << b;
    }
  }
}

}  // namespace
}  // namespace dsv4::utf8
