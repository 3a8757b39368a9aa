// stories260K through the whole engine against llama2.c run.c goldens
// (tests/data/stories260K/README.md): logits, greedy text, .bin == .gguf,
// prefill == incremental decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/loader.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

const std::string kModels = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/";
const std::string kData = std::string(DSV4_TEST_DATA_DIR) + "/stories260K/";
constexpr int kVocab = 512;

LoadedModel Load(const std::string& file, int threads = 1) {
  auto r = LoadModel({.model_path = kModels + file, .tokenizer_path = "", .threads = threads});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<int32_t> GreedyIds() {
  std::ifstream in(kData + "greedy256_ids.txt");
  std::vector<int32_t> ids;
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

std::vector<float> GoldenLogits() {
  std::ifstream in(kData + "logits_64x512.f32", std::ios::binary);
  std::vector<float> v(64 * kVocab);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  EXPECT_TRUE(in.good());
  return v;
}

// Logits of every position of [BOS, greedy ids...] (64 positions).
std::vector<float> AllLogits(LoadedModel& m, int n_pos) {
  std::vector<int32_t> tokens = {1};
  const auto ids = GreedyIds();
  tokens.insert(tokens.end(), ids.begin(), ids.begin() + (n_pos - 1));
  auto cache = m.model->NewCache(512);
  std::vector<float> logits(n_pos * kVocab);
  EXPECT_TRUE(m.model->Forward(tokens, *cache, logits, true).ok());
  return logits;
}

TEST(LlamaGolden, LogitsMatchRunC) {
  for (const char* file : {"stories260K.bin", "stories260K.gguf"}) {
    LoadedModel m = Load(file);
    const auto got = AllLogits(m, 64);
    const auto want = GoldenLogits();
    double max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      max_diff = std::max<double>(max_diff, std::fabs(got[i] - want[i]));
    EXPECT_LE(max_diff, 1e-4) << file;
    for (int p = 0; p < 64; ++p) {
      const float* row = got.data() + p * kVocab;
      EXPECT_EQ(std::max_element(row, row + kVocab) - row, GreedyIds()[p]) << file << " pos " << p;
    }
  }
}

TEST(LlamaGolden, Top5AtPositions0And1MatchOracle) {
  // llama2.c run.c's logits on stories260K (tests/data/stories260K/README.md).
  const std::vector<std::pair<int, float>> pos0 = {{403, 17.023516f},
                                                   {385, 15.406213f},
                                                   {410, 13.108263f},
                                                   {317, 12.769166f},
                                                   {407, 12.418087f}};
  const std::vector<std::pair<int, float>> pos1 = {{407, 18.459986f},
                                                   {383, 14.291061f},
                                                   {261, 10.897967f},
                                                   {403, 10.662053f},
                                                   {432, 10.313799f}};
  LoadedModel m = Load("stories260K.bin");
  const auto got = AllLogits(m, 2);
  for (int p = 0; p < 2; ++p) {
    const float* row = got.data() + p * kVocab;
    std::vector<int> order(kVocab);
    for (int i = 0; i < kVocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [row](int a, int b) { return row[a] > row[b]; });
    const auto& want = p == 0 ? pos0 : pos1;
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(order[k], want[k].first) << "pos " << p << " rank " << k;
      EXPECT_NEAR(row[order[k]], want[k].second, 1e-4) << "pos " << p << " rank " << k;
    }
  }
}

TEST(LlamaGolden, BinAndGgufLogitsAreBitIdentical) {
  LoadedModel bin = Load("stories260K.bin");
  LoadedModel gguf = Load("stories260K.gguf");
  const auto a = AllLogits(bin, 64);
  const auto b = AllLogits(gguf, 64);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(LlamaGolden, IncrementalDecodeEqualsPrefill) {
  for (int threads : {1, 2}) {
    LoadedModel m = Load("stories260K.bin", threads);
    const auto full = AllLogits(m, 40);
    std::vector<int32_t> tokens = {1};
    const auto ids = GreedyIds();
    tokens.insert(tokens.end(), ids.begin(), ids.begin() + 39);
    // Prefill 13 tokens, then a chunk of 7, then one at a time.
    auto cache = m.model->NewCache(512);
    std::vector<float> logits(13 * kVocab);
    ASSERT_TRUE(m.model->Forward(std::span(tokens).subspan(0, 13), *cache, logits, true).ok());
    std::vector<float> got(logits.begin(), logits.end());
    logits.resize(7 * kVocab);
    ASSERT_TRUE(m.model->Forward(std::span(tokens).subspan(13, 7), *cache, logits, true).ok());
    got.insert(got.end(), logits.begin(), logits.end());
    for (size_t t = 20; t < tokens.size(); ++t) {
      std::vector<float> one(kVocab);
      ASSERT_TRUE(m.model->Forward(std::span(tokens).subspan(t, 1), *cache, one, false).ok());
      got.insert(got.end(), one.begin(), one.end());
    }
    ASSERT_EQ(got.size(), full.size());
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_diff = std::max<double>(max_diff, std::fabs(got[i] - full[i]));
    EXPECT_LE(max_diff, 1e-5) << threads << " threads";
  }
}

TEST(LlamaGolden, Greedy256FromBosEqualsRunCText) {
  std::ifstream in(kData + "greedy256_from_bos.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  for (const char* file : {"stories260K.bin", "stories260K.gguf"}) {
    LoadedModel m = Load(file);
    GenerateOptions g;
    g.max_tokens = 256;
    g.sampling.temperature = 0.0f;
    std::string text;
    std::vector<int32_t> ids;
    const int32_t bos[1] = {1};
    auto stats = Generate(m, bos, g, [&](int32_t id, std::string_view piece) {
      if (id >= 0) ids.push_back(id);
      text += piece;
    });
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(ids, GreedyIds()) << file;
    EXPECT_EQ(text + "\n", ss.str()) << file;  // run.c ends with a newline
  }
}

TEST(LlamaGolden, PerplexityEqualsMeanNllOfForward) {
  LoadedModel m = Load("stories260K.bin");
  std::vector<int32_t> doc = {1};
  const auto ids = GreedyIds();
  doc.insert(doc.end(), ids.begin(), ids.begin() + 30);
  auto r = Perplexity(m, {doc});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, 30);
  const auto logits = AllLogits(m, 31);
  double nll = 0;
  for (int t = 0; t < 30; ++t) {
    const float* row = logits.data() + t * kVocab;
    double mx = *std::max_element(row, row + kVocab), sum = 0;
    for (int v = 0; v < kVocab; ++v) sum += std::exp(row[v] - mx);
    nll -= row[doc[t + 1]] - mx - std::log(sum);
  }
  EXPECT_NEAR(r->nll, nll / 30, 1e-9);
  EXPECT_NEAR(r->ppl, std::exp(nll / 30), 1e-6);
  // Greedy text is likely under the model: perplexity well below the vocabulary size.
  EXPECT_LT(r->ppl, 10.0);
}

TEST(LlamaGolden, PerplexityWindowsLongDocuments) {
  // A document longer than the 512-token context is scored in windows.
  LoadedModel m = Load("stories260K.bin");
  std::vector<int32_t> doc = {1};
  for (int i = 0; i < 700; ++i) doc.push_back(GreedyIds()[i % 256]);
  auto r = Perplexity(m, {doc});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens, 700);
}

TEST(LlamaGolden, ContextOverflowIsAnError) {
  LoadedModel m = Load("stories260K.bin");
  auto cache = m.model->NewCache(8);
  std::vector<int32_t> tokens(9, 1);
  std::vector<float> logits(kVocab);
  Status s = m.model->Forward(tokens, *cache, logits, false);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  tokens = {1, 9999};
  s = m.model->Forward(tokens, *cache, logits, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("9999"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
