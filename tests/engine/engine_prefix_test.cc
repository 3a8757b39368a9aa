// The engine's prefix reuse (EngineOptions::reuse_prefix): a sequence whose
// prompt extends what a free slot holds (an earlier prompt, with or without
// its output) prefills only the rest, and its tokens and logprobs equal a
// cold run's bit for bit — on DeepSeek-V4 models with every layer kind
// (window, CSA ratio 4 with the indexer, HCA ratios 8, 16 and 128), for
// prefixes ending on and beside the compressed blocks' boundaries, with a
// prefill chunk that does not line up with them; the slot holding the longest
// prefix is chosen (when it is at least half the prompt); models whose Truncate is not exact start
// cold.
#include <gtest/gtest.h>

#include <random>

#include "engine/echo_model.h"
#include "engine/engine.h"
#include "engine/loader.h"
#include "engine/speculative.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

LoadedModel LoadV4(const std::string& name, bool swa_full = false) {
  LoadOptions o;
  o.model_path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/" + name;
  o.threads = 1;
  o.swa_full = swa_full;
  auto r = LoadModel(o);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return std::move(r).value();
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  int64_t cached = -1;
};

// Greedy; top-5 logprobs unless `logprobs` is false (a sequence that reports
// them does not speculate).
Outcome Submit(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens,
               bool logprobs = true) {
  SequenceRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = logprobs ? 5 : -1;
  r.stop_at_eos = false;
  auto h = engine.Submit({r});
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  Outcome out;
  if (!h.ok()) return out;
  SequenceEvent ev;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!(*h)->Next(&ev, 100ms)) continue;
    out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    out.logprobs.insert(out.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finish != FinishReason::kNone) {
      EXPECT_NE(ev.finish, FinishReason::kError) << ev.error.ToString();
      out.cached = ev.cached_prompt_tokens;
      return out;
    }
  }
  ADD_FAILURE() << "timed out";
  return out;
}

void ExpectSameRun(const Outcome& warm, const Outcome& cold, const std::string& what) {
  ASSERT_EQ(warm.tokens, cold.tokens) << what;
  ASSERT_EQ(warm.logprobs.size(), cold.logprobs.size()) << what;
  for (size_t i = 0; i < warm.logprobs.size(); ++i) {
    const TokenLogprobs &a = warm.logprobs[i], &b = cold.logprobs[i];
    ASSERT_EQ(a.top.size(), b.top.size()) << what;
    for (size_t j = 0; j < a.top.size(); ++j) {
      EXPECT_EQ(a.top[j].id, b.top[j].id) << what << " token " << i;
      EXPECT_EQ(a.top[j].logprob, b.top[j].logprob) << what << " token " << i;  // bit for bit
    }
  }
}

class PrefixReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixReuse, ExtendingAPromptEqualsTheColdRun) {
  LoadedModel m = LoadV4(GetParam());
  EngineOptions warm_options;
  warm_options.max_sequences = 1;
  warm_options.prefill_chunk = 5;  // chunks across the block boundaries
  warm_options.ctx_size = 256;
  EngineOptions cold_options = warm_options;
  cold_options.reuse_prefix = false;
  auto warm = Engine::Start(m, warm_options);
  auto cold = Engine::Start(m, cold_options);
  ASSERT_TRUE(warm.ok() && cold.ok());
  std::mt19937 rng(7);
  const int32_t vocab = static_cast<int32_t>(m.model->info().vocab_size);
  std::vector<int32_t> prompt(150);
  for (int32_t& id : prompt) id = 2 + static_cast<int32_t>(rng() % (vocab - 2));
  // Prefixes on and beside multiples of 4, 8, 16 and 128 (and of the window).
  int deep_cuts = 0;
  for (int64_t s : {3, 4, 5, 8, 9, 15, 16, 17, 31, 33, 127, 128, 129}) {
    const std::vector<int32_t> first(prompt.begin(), prompt.begin() + s);
    const Outcome a = Submit(**warm, first, 3);  // the slot keeps first + 2 outputs
    ASSERT_EQ(a.tokens.size(), 3u);
    std::vector<int32_t> extended = first;
    extended.insert(extended.end(), a.tokens.begin(), a.tokens.begin() + 2);
    extended.insert(extended.end(), prompt.begin() + s, prompt.begin() + s + 12);
    const Outcome b = Submit(**warm, extended, 4);
    EXPECT_EQ(b.cached, s + 2) << "prefix " << s;
    ExpectSameRun(b, Submit(**cold, extended, 4), GetParam() + " prefix " + std::to_string(s));
    // A prompt that leaves the slot's tokens early reuses only the common part.
    std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + s + 20);
    diverging[s / 2] = diverging[s / 2] == 2 ? 3 : 2;
    // The cache keeps only the last 16 tokens' rows beyond what the next
    // token needs (its rollback horizon): a deeper cut keeps nothing (no
    // checkpoint below 16384) rather than recompute the prefix.
    const Outcome c = Submit(**warm, diverging, 2);
    const int64_t held = static_cast<int64_t>(extended.size()) + 3;  // b's prompt and output
    EXPECT_TRUE(c.cached == s / 2 || c.cached == 0) << "prefix " << s << ": " << c.cached;
    if (held - s / 2 <= 16) {
      EXPECT_EQ(c.cached, s / 2) << "prefix " << s;
    }
    deep_cuts += c.cached == 0;
    ExpectSameRun(c, Submit(**cold, diverging, 2), GetParam() + " diverging " + std::to_string(s));
  }
  EXPECT_GT(deep_cuts, 0);  // the long prefixes' cuts go past the horizon
  EXPECT_GT((*warm)->Metrics().prompt_tokens_cached_total, 0);
  EXPECT_EQ((*cold)->Metrics().prompt_tokens_cached_total, 0);
}

// With --swa-full every row is kept: a deep cut reuses the whole common
// prefix, and the result is still the cold run's.
TEST(PrefixReuseSwaFull, ADeepCutKeepsTheWholeCommonPrefix) {
  LoadedModel m = LoadV4("long_hca128_bf16", /*swa_full=*/true);
  EngineOptions warm_options;
  warm_options.max_sequences = 1;
  warm_options.prefill_chunk = 5;
  warm_options.ctx_size = 256;
  EngineOptions cold_options = warm_options;
  cold_options.reuse_prefix = false;
  auto warm = Engine::Start(m, warm_options);
  auto cold = Engine::Start(m, cold_options);
  ASSERT_TRUE(warm.ok() && cold.ok());
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(170);
  for (int32_t& id : prompt) id = 2 + static_cast<int32_t>(rng() % 120);
  Submit(**warm, prompt, 4);
  for (int64_t cut : {129, 64, 33}) {
    std::vector<int32_t> diverging(prompt.begin(), prompt.begin() + cut + 10);
    diverging[cut] = diverging[cut] == 2 ? 3 : 2;
    const Outcome c = Submit(**warm, diverging, 3);
    EXPECT_EQ(c.cached, cut);
    ExpectSameRun(c, Submit(**cold, diverging, 3), "cut " + std::to_string(cut));
  }
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV4, PrefixReuse,
                         ::testing::Values("mixed_mtp_bf16", "long_hca128_bf16", "swa_fp8"));

// Speculating sequences reuse a prefix too: their draft session starts with
// what is prefilled, and the greedy output is the cold run's (verification
// decides every token), for the NextN MTP head and the DSpark module.
class PrefixReuseSpeculative : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixReuseSpeculative, GreedyOutputEqualsTheColdRun) {
  LoadedModel m = LoadV4(GetParam());
  EngineOptions warm_options;
  warm_options.max_sequences = 1;
  warm_options.ctx_size = 256;
  warm_options.speculative = *ParseSpeculative("3");
  EngineOptions cold_options = warm_options;
  cold_options.reuse_prefix = false;
  auto warm = Engine::Start(m, warm_options);
  auto cold = Engine::Start(m, cold_options);
  ASSERT_TRUE(warm.ok() && cold.ok()) << warm.status().ToString();
  std::mt19937 rng(5);
  const int32_t vocab = static_cast<int32_t>(m.model->info().vocab_size);
  std::vector<int32_t> prompt(60);
  for (int32_t& id : prompt) id = 2 + static_cast<int32_t>(rng() % (vocab - 2));
  for (int64_t s : {9, 20, 33}) {
    const std::vector<int32_t> first(prompt.begin(), prompt.begin() + s);
    const Outcome a = Submit(**warm, first, 6, /*logprobs=*/false);
    std::vector<int32_t> extended = first;
    extended.insert(extended.end(), a.tokens.begin(), a.tokens.end() - 1);
    extended.insert(extended.end(), prompt.begin() + s, prompt.begin() + s + 8);
    const Outcome b = Submit(**warm, extended, 12, /*logprobs=*/false);
    EXPECT_GT(b.cached, s) << "prefix " << s;
    const Outcome want = Submit(**cold, extended, 12, /*logprobs=*/false);
    EXPECT_EQ(b.tokens, want.tokens) << GetParam() << " prefix " << s;
  }
  EXPECT_GT((*warm)->Metrics().speculative_drafted_total, 0);
}

INSTANTIATE_TEST_SUITE_P(DraftHeads, PrefixReuseSpeculative,
                         ::testing::Values("mixed_mtp_bf16", "dspark_mixed_bf16"));

// Two slots: the sequence goes to the one holding its prefix, not the one
// freed longest ago.
TEST(PrefixReuseSlots, TheSlotWithTheLongestPrefixIsChosen) {
  LoadedModel m = LoadV4("mixed_mtp_bf16");
  EngineOptions o;
  o.max_sequences = 2;
  o.ctx_size = 128;
  auto engine = Engine::Start(m, o);
  ASSERT_TRUE(engine.ok());
  const std::vector<int32_t> p1 = {0, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const std::vector<int32_t> p2 = {0, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  // Both slots hold a prompt: the second request shares only BOS with the
  // first slot's, under half its prompt, so it takes the unused slot.
  ASSERT_EQ(Submit(**engine, p1, 1).cached, 0);
  EXPECT_EQ(Submit(**engine, p2, 1).cached, 0);
  std::vector<int32_t> more = p1;
  more.insert(more.end(), {30, 31, 32});
  EXPECT_EQ(Submit(**engine, more, 1).cached, static_cast<int64_t>(p1.size()));
  more = p2;
  more.insert(more.end(), {30, 31, 32});
  EXPECT_EQ(Submit(**engine, more, 1).cached, static_cast<int64_t>(p2.size()));
}

// The echo model's cache cannot be truncated exactly: it always starts cold.
TEST(PrefixReuseSlots, InexactCachesStartCold) {
  auto m =
      LoadEchoModel(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto engine = Engine::Start(*m, {});
  ASSERT_TRUE(engine.ok());
  const std::vector<int32_t> p = {0, 100, 101, 102};
  Submit(**engine, p, 1);
  EXPECT_EQ(Submit(**engine, p, 1).cached, 0);
}

}  // namespace
}  // namespace dsv4
