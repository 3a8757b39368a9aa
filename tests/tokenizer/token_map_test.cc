// Engram's compressed token map (tokenizer/token_map.h) against DeepSeek's
// engram.build_compressed_token_map over HF `tokenizers` on the DeepSeek-V4
// tokenizer: every one of the 129,280 ids (tests/data/deepseek_v41/engram,
// made by tools/reference/make_engram_goldens.py), and the normalizer on cases
// whose HF results are written next to them.
#include "tokenizer/token_map.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

const std::string kDataDir = std::string(DSV4_TEST_DATA_DIR);

const BpeTokenizer& V4() {
  static const std::unique_ptr<BpeTokenizer> tok = [] {
    auto r = LoadTokenizerJson(kDataDir + "/tokenizer/deepseek_v4_tokenizer.json.gz",
                               kDataDir + "/tokenizer/deepseek_v4_tokenizer_config.json");
    CHECK(r.ok(), "%s", r.status().ToString().c_str());
    return std::move(r).value();
  }();
  return *tok;
}

// token_map.txt.gz: "# vocab V compressed C", then one line per id: "+" for
// the next fresh compressed id, else the (earlier) compressed id it shares.
CompressedTokenMap LoadGoldenMap() {
  auto raw = ReadFileMaybeGzip(kDataDir + "/deepseek_v41/engram/token_map.txt.gz");
  CHECK(raw.ok(), "%s", raw.status().ToString().c_str());
  std::istringstream in(*raw);
  std::string line;
  std::getline(in, line);
  int64_t vocab = 0, count = 0;
  CHECK(std::sscanf(line.c_str(), "# vocab %ld compressed %ld", &vocab, &count) == 2, "bad header");
  CompressedTokenMap map;
  while (std::getline(in, line)) {
    if (line == "+") {
      map.ids.push_back(map.count++);
    } else {
      map.ids.push_back(std::stoi(line));
    }
  }
  CHECK(static_cast<int64_t>(map.ids.size()) == vocab && map.count == count, "bad golden");
  return map;
}

std::string Norm(std::string_view s) {
  auto r = EngramNormalize(s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "<error>";
}

TEST(EngramNormalize, MatchesHfTokenizersOnHandCases) {
  // Expected values: HF tokenizers 0.23.3, the normalizer sequence of engram.py.
  EXPECT_EQ(Norm(" The"), "the");
  EXPECT_EQ(Norm("THE  \t\n"), "the");
  EXPECT_EQ(Norm("a \n b"), "a b");
  EXPECT_EQ(Norm(" "), " ");   // a lone space survives (the sentinel)
  EXPECT_EQ(Norm("\n"), " ");  // becomes " " first, then the lone-space rule
  EXPECT_EQ(Norm("  "), " ");
  EXPECT_EQ(Norm("\xE2\x80\xA8"), "");                      // U+2028: White_Space, stripped
  EXPECT_EQ(Norm("\xE3\x80\x80"), " ");                     // U+3000 -> NFKC " "
  EXPECT_EQ(Norm("\xE0\xA4\x83"), "");                      // U+0903 (Mc) is a mark too
  EXPECT_EQ(Norm("\xE2\x83\x9D"), "");                      // U+20DD (Me)
  EXPECT_EQ(Norm("a\xCC\x81"), "a");                        // a + U+0301
  EXPECT_EQ(Norm("\xC3\xA9t\xC3\xA9"), "ete");              // été
  EXPECT_EQ(Norm("\xC4\xB0"), "i");                         // İ: NFD splits off the dot first
  EXPECT_EQ(Norm("\xCE\x91\xCE\xA3"), "\xCE\xB1\xCF\x83");  // ΑΣ -> ασ (no final sigma)
  EXPECT_EQ(Norm("\xC7\x85"), "dz");                        // ǅ: NFKC -> Dž, NFD, strip, lower
  EXPECT_EQ(Norm("\xEF\xAC\x83"), "ffi");                   // ﬃ
  EXPECT_EQ(Norm("\xC3\x9F"), "\xC3\x9F");                  // ß stays (lowercase already)
  EXPECT_EQ(Norm("\xEE\x80\x80x"), " x");                   // a real U+E000 becomes " " too
  EXPECT_EQ(Norm(""), "");
}

TEST(EngramNormalize, RejectsIllFormedUtf8) {
  for (std::string_view bad :
       {std::string_view("\xC3"), std::string_view("a\xFF"), std::string_view("\xED\xA0\x80")}) {
    auto r = EngramNormalize(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().ToString().find("UTF-8"), std::string::npos);
  }
}

TEST(DecodeTokenLikeHf, PartialByteTokensCarryReplacement) {
  // Some single-byte tokens of V4 are continuation bytes: HF decodes them to U+FFFD.
  const BpeTokenizer& tok = V4();
  int partial = 0;
  for (int32_t id = 0; id < 512; ++id) {
    if (DecodeTokenLikeHf(tok, id).find("\xEF\xBF\xBD") != std::string::npos) ++partial;
  }
  EXPECT_GT(partial, 0);
  EXPECT_EQ(DecodeTokenLikeHf(tok, 0),
            "<\xEF\xBD\x9C"
            "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
}

TEST(CompressedTokenMap, MatchesReferenceOnEveryV4Token) {
  const CompressedTokenMap golden = LoadGoldenMap();
  auto built = BuildCompressedTokenMap(V4());
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_EQ(built->ids.size(), golden.ids.size());
  int mismatches = 0;
  for (size_t id = 0; id < golden.ids.size(); ++id) {
    if (built->ids[id] != golden.ids[id]) {
      if (++mismatches <= 30) {
        const std::string text = DecodeTokenLikeHf(V4(), static_cast<int32_t>(id));
        auto norm = EngramNormalize(text);
        ADD_FAILURE() << "token " << id << " text '" << text << "' normalized '"
                      << (norm.ok() ? *norm : norm.status().ToString()) << "': compressed id "
                      << built->ids[id] << ", reference " << golden.ids[id];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(built->count, golden.count);
  EXPECT_EQ(built->count, 99092);  // the release's engram_compressed_vocab_size
}

}  // namespace
}  // namespace dsv4
