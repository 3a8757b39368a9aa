// Routed experts streamed under a RAM budget (model/deepseek_v4/
// expert_cache.h): a model whose experts are read from the checkpoint into a
// cache of a few slots gives the resident model's logits bit for bit — in
// prefill (more experts active than slots: the MoE runs in segments) and in
// decode (evictions every token), for bf16, FP8/FP4 and GGUF MXFP4 experts;
// the cache counts hits, misses and bytes; experts read ahead for the next
// layer are found by its Begin, never evict the current layer's and do not
// change a logit (on or off); budgets too small for one token's
// experts, models that cannot stream and bad --ram-budget values are refused
// with what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/loader.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/model.h"

namespace dsv4 {
namespace {

using deepseek_v4::DeepSeekV4Model;

LoadedModel Load(const std::string& path, int64_t ram_budget = 0) {
  LoadOptions o;
  o.model_path = path;
  o.threads = 2;
  o.ram_budget = ram_budget;
  auto r = LoadModel(o);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return std::move(r).value();
}

// Every logit of a chunked prefill (chunks of 7) and of 8 decoded tokens.
std::vector<float> Logits(Model& m, const std::vector<int32_t>& tokens) {
  const int64_t V = m.info().vocab_size;
  auto cache = m.NewCache(128);
  std::vector<float> all, logits;
  for (size_t b = 0; b < tokens.size(); b += 7) {
    const size_t e = std::min(tokens.size(), b + 7);
    logits.assign((e - b) * V, 0.0f);
    EXPECT_TRUE(m.Forward(std::span(tokens).subspan(b, e - b), *cache, logits, true).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  for (int i = 0; i < 8; ++i) {
    const int32_t next[1] = {static_cast<int32_t>(std::max_element(logits.end() - V, logits.end()) -
                                                  (logits.end() - V))};
    logits.assign(V, 0.0f);
    EXPECT_TRUE(m.Forward(next, *cache, logits, false).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

class ExpertStream : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertStream, StreamedEqualsResidentBitForBit) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/" + GetParam();
  LoadedModel m = Load(path);
  auto* v4 = dynamic_cast<DeepSeekV4Model*>(m.model.get());
  ASSERT_NE(v4, nullptr);
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(40);
  for (int32_t& t : tokens) t = 2 + static_cast<int32_t>(rng() % (m.model->info().vocab_size - 2));
  const std::vector<float> resident = Logits(*m.model, tokens);

  const int64_t k = v4->config().num_experts_per_tok, E = v4->config().n_routed_experts;
  ASSERT_TRUE(v4->StreamExperts(int64_t{1} << 30).ok());
  const int64_t slot = v4->expert_cache()->stats().slot_bytes;
  ASSERT_GT(slot, 0);
  const int64_t all = E * static_cast<int64_t>(v4->config().num_hidden_layers);
  for (int64_t slots : {k, k + 1, 3 * k, all}) {
    for (bool read_ahead : {false, true}) {
      ASSERT_TRUE(v4->StreamExperts(slots * slot, read_ahead).ok());
      ASSERT_EQ(v4->expert_cache()->capacity(), slots);
      EXPECT_EQ(Logits(*m.model, tokens), resident)
          << GetParam() << ", " << slots << " slots, read-ahead " << read_ahead;
      const deepseek_v4::ExpertCacheStats st = v4->expert_cache()->stats();
      // Decode reads ahead once a token's experts fit twice beside a layer's
      // (with room for all, the prefill leaves nothing to read).
      if (!read_ahead || slots < 3 * k) EXPECT_EQ(st.ahead_reads, 0) << slots;
      if (read_ahead && slots == 3 * k) EXPECT_GT(st.ahead_reads, 0);
      EXPECT_LE(st.ahead_used, st.ahead_reads);
    }
    const deepseek_v4::ExpertCacheStats st = v4->expert_cache()->stats();
    EXPECT_GT(st.misses, 0);
    EXPECT_GT(st.read_bytes, 0);
    if (slots == all) {
      // Room for every expert: each is read once, then always hit.
      EXPECT_LE(st.misses, E * v4->config().num_hidden_layers);
      EXPECT_GT(st.hits, st.misses);
    }
  }
  ASSERT_TRUE(v4->StreamExperts(0).ok());
  EXPECT_EQ(v4->expert_cache(), nullptr);
  EXPECT_EQ(Logits(*m.model, tokens), resident);
}

// The cache on its own: what is read ahead is what Begin then finds, the
// bytes as mapped; a current call's experts are never evicted for it.
TEST(ExpertStream, ReadAheadIsFoundByBeginAndNeverEvictsTheCurrentCall) {
  LoadedModel m = Load(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_fp8");
  auto* v4 = dynamic_cast<DeepSeekV4Model*>(m.model.get());
  ASSERT_NE(v4, nullptr);
  std::vector<const deepseek_v4::MoeWeights*> layers;
  for (const auto& lw : v4->weights().layers) layers.push_back(&lw.moe);
  ASSERT_TRUE(v4->StreamExperts(int64_t{1} << 30).ok());
  const int64_t slot = v4->expert_cache()->stats().slot_bytes;
  const auto same_bytes = [](const deepseek_v4::ExpertWeights& a,
                             const deepseek_v4::ExpertWeights& b) {
    for (auto p : {&deepseek_v4::ExpertWeights::w1, &deepseek_v4::ExpertWeights::w3,
                   &deepseek_v4::ExpertWeights::w2}) {
      const TensorView& x = (a.*p).weight;
      const TensorView& y = (b.*p).weight;
      if (x.data == y.data || x.nbytes() != y.nbytes()) return false;  // a copy, same size
      if (std::memcmp(x.data, y.data, x.nbytes()) != 0) return false;
    }
    return true;
  };
  auto made = deepseek_v4::ExpertCache::Make(layers, 4 * slot, 2, 2);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  deepseek_v4::ExpertCache& cache = **made;
  const int32_t a[2] = {0, 1}, b[2] = {2, 3}, c[2] = {4, 5};
  const deepseek_v4::ExpertWeights* out[2];
  uint8_t pending[2];
  // Read ahead outside a call, then asked for: found (in flight or done).
  cache.ReadAhead(1, b);
  cache.Begin(1, b, out, pending);
  ASSERT_TRUE(cache.Finish().ok());
  auto st = cache.stats();
  EXPECT_EQ(st.ahead_reads, 2);
  EXPECT_EQ(st.ahead_used, 2);
  EXPECT_EQ(st.misses, 0);
  EXPECT_EQ(st.hits, 2);
  EXPECT_TRUE(same_bytes(*out[0], layers[1]->experts[2]));
  EXPECT_TRUE(same_bytes(*out[1], layers[1]->experts[3]));
  // During a call that holds two of the four slots, read-ahead takes the
  // other two (and no more): the call's experts keep their bytes.
  cache.Begin(0, a, out, pending);
  EXPECT_EQ(pending[0], 1);
  const int32_t many[4] = {4, 5, 6, 7};
  cache.ReadAhead(1, many);
  ASSERT_TRUE(cache.Finish().ok());
  st = cache.stats();
  EXPECT_EQ(st.ahead_reads, 4);
  EXPECT_EQ(st.misses, 2);
  EXPECT_TRUE(same_bytes(*out[0], layers[0]->experts[0]));
  EXPECT_TRUE(same_bytes(*out[1], layers[0]->experts[1]));
  // Those two are found; an expert not read ahead is a miss.
  cache.Begin(1, c, out, pending);
  ASSERT_TRUE(cache.Finish().ok());
  st = cache.stats();
  EXPECT_EQ(st.ahead_used, 4);
  EXPECT_TRUE(same_bytes(*out[0], layers[1]->experts[4]));
  EXPECT_TRUE(same_bytes(*out[1], layers[1]->experts[5]));
  const int32_t d[2] = {6, 7};
  cache.Begin(1, d, out, pending);
  ASSERT_TRUE(cache.Finish().ok());
  EXPECT_EQ(cache.stats().misses, 4);  // 6 and 7 were never read ahead
  EXPECT_TRUE(same_bytes(*out[0], layers[1]->experts[6]));
  // Ids outside the layer are ignored.
  const int32_t bad[2] = {-1, 99};
  cache.ReadAhead(1, bad);
  EXPECT_EQ(cache.stats().ahead_reads, 4);
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV4, ExpertStream,
                         ::testing::Values("mixed_mtp_bf16", "swa_fp8", "long_hca128_bf16",
                                           "gguf_tiny/tiny.gguf"));

TEST(ExpertStream, BudgetsBelowOneTokensExpertsAreRefused) {
  LoadedModel m = Load(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_fp8");
  auto* v4 = dynamic_cast<DeepSeekV4Model*>(m.model.get());
  ASSERT_TRUE(v4->StreamExperts(int64_t{1} << 30).ok());
  const int64_t slot = v4->expert_cache()->stats().slot_bytes;
  const Status st = v4->StreamExperts(slot * v4->config().num_experts_per_tok - 1);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("--ram-budget"), std::string::npos);
  // Through the loader: the budget must hold the other weights and the reserve.
  LoadOptions o;
  o.model_path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_fp8";
  o.ram_budget = 4096;
  auto r = LoadModel(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("does not hold"), std::string::npos);
  // A model that cannot stream, over an explicit budget.
  o.model_path = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin";
  r = LoadModel(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  // A budget the files fit in: nothing streams.
  o.ram_budget = int64_t{1} << 30;
  o.model_path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_fp8";
  r = LoadModel(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->expert_cache_bytes, 0);
}

TEST(ExpertStream, ParsesRamBudgets) {
  EXPECT_EQ(*ParseRamBudget("24G"), int64_t{24} << 30);
  EXPECT_EQ(*ParseRamBudget("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseRamBudget("1.5T"), int64_t{3} << 39);
  EXPECT_EQ(*ParseRamBudget("4096"), 4096);
  EXPECT_EQ(*ParseRamBudget("auto"), LoadOptions::kRamBudgetAuto);
  EXPECT_EQ(*ParseRamBudget("off"), 0);
  for (const char* bad : {"", "abc", "-3G", "12X", "G", "1e30T"}) {
    const auto r = ParseRamBudget(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--ram-budget"), std::string::npos) << bad;
  }
  EXPECT_GT(AvailableMemoryBytes(), 0);
}

}  // namespace
}  // namespace dsv4
