// Regex pre-tokenizer (pretokenizer.h): the HF "Split, Isolated" semantics,
// the Oniguruma -> PCRE2 translation (\s includes U+0085, `$` is end of line),
// the named regex sets, and robustness on any bytes.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <string>
#include <vector>

namespace dsv4 {
namespace {

std::vector<std::string> SplitWith(const std::vector<std::string>& patterns,
                                   std::string_view text) {
  auto splitter = RegexSplitter::Create(patterns);
  CHECK(splitter.ok(), "%s", splitter.status().ToString().c_str());
  std::vector<std::string_view> pieces;
  splitter->Split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

std::vector<std::string> SplitV3(std::string_view text) {
  return SplitWith(PreTokenizerPatterns(PreTokenizerType::kDeepseekV3), text);
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, IsolatedKeepsMatchesAndGaps) {
  EXPECT_EQ(SplitWith({"[0-9]+"}, "ab12cd345"), (Pieces{"ab", "12", "cd", "345"}));
  EXPECT_EQ(SplitWith({"[0-9]+"}, "12"), (Pieces{"12"}));
  EXPECT_EQ(SplitWith({"[0-9]+"}, "none"), (Pieces{"none"}));
  EXPECT_EQ(SplitWith({}, "anything"), (Pieces{"anything"}));
  EXPECT_TRUE(SplitWith({"x"}, "").empty());
}

TEST(PreTokenizerTest, PatternsApplyInSequenceToEachPiece) {
  // The second pattern's anchor sees only the pieces of the first.
  EXPECT_EQ(SplitWith({"[0-9]+", "^[a-z]"}, "ab12cd"), (Pieces{"a", "b", "12", "c", "d"}));
}

TEST(PreTokenizerTest, DeepseekV3DigitsInGroupsOfThree) {
  EXPECT_EQ(SplitV3("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(SplitV3("x 12345"), (Pieces{"x", " ", "123", "45"}));
}

TEST(PreTokenizerTest, DeepseekV3CjkRunsAndPunctuation) {
  EXPECT_EQ(SplitV3("你好world"), (Pieces{"你好", "world"}));
  EXPECT_EQ(SplitV3("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(SplitV3("a.b"), (Pieces{"a", ".b"}));  // punctuation + ASCII letters stay together
}

TEST(PreTokenizerTest, DeepseekV3Whitespace) {
  EXPECT_EQ(SplitV3("a   b"),
            (Pieces{"a", "  ", " b"}));  // \s+(?!\S) leaves one space for the word
  EXPECT_EQ(SplitV3("a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(SplitV3("end  "), (Pieces{"end", "  "}));
}

TEST(PreTokenizerTest, NelIsWhitespaceAsInOniguruma) {
  // U+0085 is Unicode White_Space (Oniguruma's \s) but not in PCRE2's \s.
  const std::string nel = "\xC2\x85";
  EXPECT_EQ(SplitWith({"\\s+"}, "a" + nel + "b"), (Pieces{"a", nel, "b"}));
  EXPECT_EQ(SplitWith({"[\\s]+"}, "a" + nel + "b"), (Pieces{"a", nel, "b"}));
  EXPECT_EQ(SplitWith({"\\S+"}, "a" + nel + "b"), (Pieces{"a", nel, "b"}));
}

TEST(PreTokenizerTest, DollarIsEndOfLineAsInRuby) {
  EXPECT_EQ(SplitWith({"b$"}, "ab\nab"), (Pieces{"a", "b", "\na", "b"}));
}

TEST(PreTokenizerTest, Translation) {
  EXPECT_EQ(*TranslateOnigurumaPattern("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(*TranslateOnigurumaPattern("[^\\s\\p{L}]"), "[^\\s\\x{85}\\p{L}]");
  EXPECT_EQ(*TranslateOnigurumaPattern("[]\\s]"), "[]\\s\\x{85}]");
  EXPECT_EQ(*TranslateOnigurumaPattern("[[:alpha:]\\s]"), "[[:alpha:]\\s\\x{85}]");
  EXPECT_EQ(*TranslateOnigurumaPattern("\\\\s"), "\\\\s");  // an escaped backslash, then 's'
  auto bad = TranslateOnigurumaPattern("[^\\S]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(PreTokenizerTest, BadPatternIsAnErrorNamingIt) {
  auto s = RegexSplitter::Create({"(unclosed"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("(unclosed"), std::string::npos);
  EXPECT_NE(s.status().message().find("offset"), std::string::npos);
}

TEST(PreTokenizerTest, NamedTypes) {
  EXPECT_EQ(*PreTokenizerTypeFromName("deepseek-v3"), PreTokenizerType::kDeepseekV3);
  EXPECT_EQ(*PreTokenizerTypeFromName("joyai-llm"), PreTokenizerType::kDeepseekV3);
  EXPECT_EQ(*PreTokenizerTypeFromName("deepseek-llm"), PreTokenizerType::kDeepseekLlm);
  EXPECT_EQ(*PreTokenizerTypeFromName("deepseek-coder"), PreTokenizerType::kDeepseekCoder);
  EXPECT_EQ(*PreTokenizerTypeFromName("gpt2"), PreTokenizerType::kGpt2);
  EXPECT_ERROR(PreTokenizerTypeFromName("llama3"), StatusCode::kNotFound,
               "unknown BPE pre-tokenizer 'llama3'");
  for (auto type : {PreTokenizerType::kGpt2, PreTokenizerType::kDeepseekLlm,
                    PreTokenizerType::kDeepseekCoder, PreTokenizerType::kDeepseekV3}) {
    EXPECT_TRUE(RegexSplitter::Create(PreTokenizerPatterns(type)).ok());
  }
}

TEST(PreTokenizerTest, DeepseekLlmLetterClassKeepsNonNfcCodePoints) {
  // U+2126 OHM SIGN and U+212A KELVIN SIGN are in the class; their NFC forms
  // (U+03A9, U+004B) would be too, but U+1FBE must match as itself.
  auto patterns = PreTokenizerPatterns(PreTokenizerType::kDeepseekLlm);
  EXPECT_EQ(SplitWith({patterns[1]}, "x\u2126\u212A\u1FBE"), (Pieces{"x\u2126\u212A\u1FBE"}));
}

TEST(PreTokenizerTest, AnyBytesAreCoveredExactly) {
  const std::string junk =
      std::string("ok\xff\xfe\xc3(") + "\xe2\x82" + " 12345 " + std::string("\0z", 2);
  std::vector<std::string> pieces = SplitV3(junk);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, junk);
}

}  // namespace
}  // namespace dsv4
