// tokenizer.json loading: a small hand-written byte-level vocabulary checks
// the pieces (added-token passes, merges in both formats, config), then one
// bad input per case must give an error that names the file and the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

// A tiny byte-level BPE: "Ġ" is the byte-level form of a space.
std::string ToyJson(const std::string& model_extra = "", const std::string& root_extra = "",
                    const std::string& merges = R"(["h e", "he l", ["hel", "l"], "hell o", "Ġ w"])",
                    const std::string& added = R"([{"id": 20, "content": "<s>", "special": true},
                                                   {"id": 21, "content": "<tag>", "special": false}])") {
  return R"({"version": "1.0", "added_tokens": )" + added + R"(,
    "normalizer": {"type": "Sequence", "normalizers": []},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
       {"type": "Split", "pattern": {"Regex": "\\s?\\p{L}+"}, "behavior": "Isolated", "invert": false},
       {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"}, )" +
         root_extra + R"(
    "model": {"type": "BPE", "dropout": null, )" +
         model_extra + R"(
      "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "he": 6, "hel": 7, "hell": 8, "hello": 9,
                "Ġw": 10, "!": 11, "<": 12, "s": 13, ">": 14},
      "merges": )" +
         merges + "}}";
}

TEST(BpeJsonTest, ToyVocabularyEncodesAndDecodes) {
  auto tok = BpeTokenizer::FromTokenizerJson(ToyJson(), "", "toy.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const BpeTokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 22);
  EXPECT_EQ(t.num_merges(), 5);
  EXPECT_EQ(t.bos_id(), 20);  // "<s>" recognised without a config
  // 'r' and 'd' have no token and no unk is set: dropped, as HF does.
  EXPECT_EQ(t.Encode("hello world!", false), (std::vector<int32_t>{9, 10, 3, 2, 11}));
  EXPECT_EQ(t.Encode("hello", false), (std::vector<int32_t>{9}));
  EXPECT_EQ(t.Encode("hello<s>hello", false), (std::vector<int32_t>{9, 20, 9}));
  EXPECT_EQ(t.Encode("<tag>", BpeEncodeOptions{.parse_special = false}),
            (std::vector<int32_t>{21}));
  EXPECT_EQ(t.Encode("<s>", BpeEncodeOptions{.parse_special = false}),
            (std::vector<int32_t>{12, 13, 14}));
  EXPECT_EQ(t.DecodeText(t.Encode(" who", false)), " who");
  EXPECT_EQ(t.TokenBytes(4), " ");
  EXPECT_EQ(t.Decode(20), "");  // control token
  EXPECT_EQ(t.Decode(21), "<tag>");
  EXPECT_EQ(t.Decode(15), "");  // an id with no token (a hole)
}

TEST(BpeJsonTest, ConfigSetsBosEosAndAddBos) {
  auto tok = BpeTokenizer::FromTokenizerJson(
      ToyJson(),
      R"({"add_bos_token": true, "bos_token": {"content": "<tag>"}, "eos_token": "<s>"})",
      "toy.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->bos_id(), 21);
  EXPECT_EQ((*tok)->eos_id(), 20);
  EXPECT_TRUE((*tok)->add_bos_by_default());
}

TEST(BpeJsonTest, LoadMissingFileNamesIt) {
  auto tok = LoadTokenizerJson("/nonexistent/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(BpeJsonTest, CorruptGzipIsDataLoss) {
  const std::string path = ::testing::TempDir() + "/bad.json.gz";
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const unsigned char bytes[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x03, 0xde, 0xad};
  fwrite(bytes, 1, sizeof(bytes), f);
  fclose(f);
  auto text = ReadFileMaybeGzip(path);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(text.status().message().find("bad.json.gz"), std::string::npos);
}

struct BadCase {
  const char* name;
  std::string json;
  StatusCode code;
  const char* needle;
};

class BpeJsonBadInputTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BpeJsonBadInputTest, ClearError) {
  const BadCase& c = GetParam();
  auto tok = BpeTokenizer::FromTokenizerJson(c.json, "", "bad.json");
  ASSERT_FALSE(tok.ok()) << c.name;
  EXPECT_EQ(tok.status().code(), c.code) << tok.status().ToString();
  EXPECT_NE(tok.status().message().find(c.needle), std::string::npos) << tok.status().ToString();
  EXPECT_NE(tok.status().message().find("bad.json"), std::string::npos) << tok.status().ToString();
}

const std::string kGood = ToyJson();

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t pos = s.find(from);
  CHECK(pos != std::string::npos, "fixture lacks '%s'", from.c_str());
  return s.replace(pos, from.size(), to);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BpeJsonBadInputTest,
    ::testing::Values(
        BadCase{"NotJson", "{\"model\": ", StatusCode::kInvalidArgument, "not valid JSON at byte"},
        BadCase{"NumberTooLarge", "{\"model\": 1e999}", StatusCode::kInvalidArgument,
                "not valid JSON"},
        BadCase{"TopLevelArray", "[1, 2]", StatusCode::kInvalidArgument, "not an object"},
        BadCase{"NoModel", "{}", StatusCode::kInvalidArgument, "has no \"model\""},
        BadCase{"UnigramModel", Replace(kGood, "\"type\": \"BPE\"", "\"type\": \"Unigram\""),
                StatusCode::kUnimplemented, "model type 'Unigram'"},
        BadCase{"VocabNotObject", Replace(kGood, "\"vocab\": {", "\"vocab\": [], \"x\": {"),
                StatusCode::kInvalidArgument, "model.vocab is a array"},
        BadCase{"VocabIdNotNumber", Replace(kGood, "\"h\": 0", "\"h\": \"zero\""),
                StatusCode::kInvalidArgument, "model.vocab[\"h\"] is a string"},
        BadCase{"VocabIdNegative", Replace(kGood, "\"h\": 0", "\"h\": -1"), StatusCode::kOutOfRange,
                "outside"},
        BadCase{"VocabIdHuge", Replace(kGood, "\"h\": 0", "\"h\": 4000000000"),
                StatusCode::kOutOfRange, "outside"},
        BadCase{"DuplicateId", Replace(kGood, "\"e\": 1", "\"e\": 0"), StatusCode::kInvalidArgument,
                "appears twice"},
        BadCase{"MergesMissing", Replace(kGood, "\"merges\":", "\"merges_\":"),
                StatusCode::kInvalidArgument, "has no \"merges\""},
        BadCase{"MergeNotPair", ToyJson("", "", R"(["h e", "hel"])"), StatusCode::kInvalidArgument,
                "model.merges[1]"},
        BadCase{"MergeBadType", ToyJson("", "", R"(["h e", 7])"), StatusCode::kInvalidArgument,
                "neither"},
        BadCase{"MergeUnknownToken", ToyJson("", "", R"(["h e", "x y"])"),
                StatusCode::kInvalidArgument, "not in model.vocab"},
        BadCase{"AddedTokenNoId", ToyJson("", "", R"(["h e"])", R"([{"content": "<s>"}])"),
                StatusCode::kInvalidArgument, "added_tokens[0] has no \"id\""},
        BadCase{"AddedTokenEmpty", ToyJson("", "", R"(["h e"])", R"([{"id": 30, "content": ""}])"),
                StatusCode::kInvalidArgument, "content is empty"},
        BadCase{"AddedTokenLstrip",
                ToyJson("", "", R"(["h e"])", R"([{"id": 30, "content": "<x>", "lstrip": true}])"),
                StatusCode::kUnimplemented, "lstrip"},
        BadCase{"AddedTokensNotArray", ToyJson("", "", R"(["h e"])", "{}"),
                StatusCode::kInvalidArgument, "added_tokens is not an array"},
        BadCase{"Normalizer",
                Replace(kGood, "\"normalizers\": []", "\"normalizers\": [{\"type\": \"NFC\"}]"),
                StatusCode::kUnimplemented, "normalizers"},
        BadCase{"BadRegex", Replace(kGood, "\\\\s?\\\\p{L}+", "(unclosed"),
                StatusCode::kInvalidArgument, "does not compile"},
        BadCase{"SplitRemoved", Replace(kGood, "\"Isolated\"", "\"Removed\""),
                StatusCode::kUnimplemented, "behavior 'Removed'"},
        BadCase{"UnknownPreTokenizer",
                Replace(kGood, "\"type\": \"Split\"", "\"type\": \"Metaspace\""),
                StatusCode::kUnimplemented, "Metaspace"},
        BadCase{"PrefixSpace",
                Replace(kGood, "\"add_prefix_space\": false", "\"add_prefix_space\": true"),
                StatusCode::kUnimplemented, "add_prefix_space"},
        BadCase{"WordpieceDecoder",
                Replace(kGood, "{\"type\": \"ByteLevel\"}", "{\"type\": \"WordPiece\"}"),
                StatusCode::kUnimplemented, "decoder type 'WordPiece'"},
        BadCase{"Dropout", Replace(kGood, "\"dropout\": null", "\"dropout\": 0.1"),
                StatusCode::kUnimplemented, "dropout"},
        BadCase{"ByteFallback", ToyJson("\"byte_fallback\": true,"), StatusCode::kUnimplemented,
                "byte_fallback"},
        BadCase{"IgnoreMerges", ToyJson("\"ignore_merges\": true,"), StatusCode::kUnimplemented,
                "ignore_merges"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dsv4
