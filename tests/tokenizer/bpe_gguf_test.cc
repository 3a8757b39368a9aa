// Byte-level BPE from GGUF vocabularies (DeepSeek-LLM, DeepSeek-Coder) against
// llama.cpp's tokenizer test cases (ggml-vocab-*.gguf.inp/.out, MIT; the ids were
// produced by HF `tokenizers` with the original tokenizer.json). Every case
// must encode exactly and decode back to its text.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

const std::string kDataDir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";

// What the engine does with a GGUF whose tokenizer.ggml.model is "gpt2".
Result<std::unique_ptr<BpeTokenizer>> LoadGgufVocab(const std::string& path) {
  ASSIGN_OR_RETURN(auto gguf, OpenGguf(path));
  ASSIGN_OR_RETURN(std::string model, gguf->GetString("tokenizer.ggml.model"));
  if (model != "gpt2") return InvalidArgument("not a byte-level BPE vocabulary: " + model);
  BpeVocab vocab;
  ASSIGN_OR_RETURN(vocab.tokens, gguf->GetStringArray("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(vocab.merges, gguf->GetStringArray("tokenizer.ggml.merges"));
  ASSIGN_OR_RETURN(vocab.token_types, gguf->GetI32Array("tokenizer.ggml.token_type"));
  ASSIGN_OR_RETURN(uint32_t bos, gguf->GetU32("tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(uint32_t eos, gguf->GetU32("tokenizer.ggml.eos_token_id"));
  vocab.bos_id = static_cast<int32_t>(bos);
  vocab.eos_id = static_cast<int32_t>(eos);
  ASSIGN_OR_RETURN(vocab.add_bos, gguf->GetBool("tokenizer.ggml.add_bos_token"));
  ASSIGN_OR_RETURN(vocab.pre, gguf->GetString("tokenizer.ggml.pre"));
  return BpeTokenizer::FromVocab(vocab, path);
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n", one line of
// space-separated ids per input in .out.
std::vector<Case> LoadCases(const std::string& stem) {
  auto inp = ReadFileToString(stem + ".inp");
  auto out = ReadFileToString(stem + ".out");
  CHECK(inp.ok() && out.ok(), "missing %s.inp/.out", stem.c_str());
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp->find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    texts.push_back(inp->substr(pos, next - pos));
  }
  std::vector<Case> cases;
  size_t line_start = 0;
  for (const std::string& text : texts) {
    size_t line_end = out->find('\n', line_start);
    CHECK(line_end != std::string::npos, "%s.out has fewer lines than inputs", stem.c_str());
    std::string line = out->substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    Case c{text, {}};
    size_t p = 0;
    while (p < line.size()) {
      if (line[p] == ' ') {
        ++p;
        continue;
      }
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      c.ids.push_back(std::stoi(line.substr(p, q - p)));
      p = q;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

class BpeGgufTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BpeGgufTest, LlamaCppCasesExact) {
  const std::string stem = kDataDir + GetParam();
  auto tok = LoadGgufVocab(stem);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<Case> cases = LoadCases(stem);
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const Case& c : cases) {
    std::vector<int32_t> ids = (*tok)->Encode(c.text, false);
    if (ids != c.ids) {
      ++failures;
      ADD_FAILURE() << "text [" << c.text << "]\n  want" << Ids(c.ids) << "\n  got " << Ids(ids);
    }
    EXPECT_EQ((*tok)->DecodeText(c.ids), c.text);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(BpeGgufTest, VocabularyMetadata) {
  const std::string stem = kDataDir + GetParam();
  auto tok = LoadGgufVocab(stem);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const BpeTokenizer& t = **tok;
  EXPECT_TRUE(t.add_bos_by_default());
  EXPECT_EQ(t.TokenText(t.bos_id()), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(t.TokenText(t.eos_id()), "<｜end▁of▁sentence｜>");
  std::vector<int32_t> with_bos = t.Encode("Hello world", true);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], t.bos_id());
  // BOS in the text is a control token: matched only with parse_special.
  std::vector<int32_t> special = t.Encode("<｜begin▁of▁sentence｜>", BpeEncodeOptions{});
  EXPECT_EQ(special, std::vector<int32_t>{t.bos_id()});
  std::vector<int32_t> literal =
      t.Encode("<｜begin▁of▁sentence｜>", BpeEncodeOptions{.parse_special = false});
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(t.DecodeText(literal), "<｜begin▁of▁sentence｜>");
}

INSTANTIATE_TEST_SUITE_P(Vocabs, BpeGgufTest,
                         ::testing::Values("ggml-vocab-deepseek-llm.gguf",
                                           "ggml-vocab-deepseek-coder.gguf"),
                         [](const auto& info) {
                           return std::string(info.param).find("coder") != std::string::npos
                                      ? std::string("Coder")
                                      : std::string("Llm");
                         });

TEST(BpeGgufVocabTest, UnknownPreTokenizerIsAnError) {
  BpeVocab vocab;
  vocab.tokens = {"a", "b", "ab"};
  vocab.merges = {"a b"};
  vocab.pre = "no-such-pre";
  auto tok = BpeTokenizer::FromVocab(vocab, "test.gguf");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_NE(tok.status().hint().find("deepseek-v3"), std::string::npos);
}

TEST(BpeGgufVocabTest, BadInputsAreErrors) {
  auto expect_error = [](BpeVocab vocab, StatusCode code, const char* needle) {
    auto tok = BpeTokenizer::FromVocab(vocab, "bad.gguf");
    ASSERT_FALSE(tok.ok()) << needle;
    EXPECT_EQ(tok.status().code(), code) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find("bad.gguf"), std::string::npos);
  };
  BpeVocab good;
  good.tokens = {"a", "b", "ab"};
  good.merges = {"a b"};
  ASSERT_TRUE(BpeTokenizer::FromVocab(good, "good.gguf").ok());

  BpeVocab empty = good;
  empty.tokens.clear();
  expect_error(empty, StatusCode::kInvalidArgument, "empty");

  BpeVocab types = good;
  types.token_types = {1, 1};
  expect_error(types, StatusCode::kInvalidArgument, "token_type has 2 entries");

  BpeVocab bad_type = good;
  bad_type.token_types = {1, 1, 9};
  expect_error(bad_type, StatusCode::kInvalidArgument, "token type 9");

  BpeVocab bad_merge = good;
  bad_merge.merges = {"ab"};
  expect_error(bad_merge, StatusCode::kInvalidArgument, "not 'left right'");

  BpeVocab bad_bos = good;
  bad_bos.bos_id = 7;
  expect_error(bad_bos, StatusCode::kOutOfRange, "bos id 7");
}

TEST(BpeGgufVocabTest, MergesApplyByRankNotByLength) {
  // "abc": merges a+b (rank 0) and b+c (rank 1) -> "ab" "c"; with the ranks
  // swapped -> "a" "bc".
  BpeVocab vocab;
  vocab.tokens = {"a", "b", "c", "ab", "bc", "abc"};
  vocab.merges = {"a b", "b c"};
  auto tok = BpeTokenizer::FromVocab(vocab, "toy");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Encode("abc", false), (std::vector<int32_t>{3, 2}));
  vocab.merges = {"b c", "a b"};
  tok = BpeTokenizer::FromVocab(vocab, "toy");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("abc", false), (std::vector<int32_t>{0, 4}));
  // A merge whose result is missing from the vocabulary never applies.
  vocab.merges = {"b c", "a bc"};
  vocab.tokens = {"a", "b", "c", "bc"};
  tok = BpeTokenizer::FromVocab(vocab, "toy");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("abc", false), (std::vector<int32_t>{0, 3}));
}

}  // namespace
}  // namespace dsv4
