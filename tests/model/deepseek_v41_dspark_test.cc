// DeepSeek-V4.1's DSpark draft head against DeepSeek's V4.1 reference
// (tests/data/deepseek_v41/README.md, dspark_bf16): the target features
// (main_hidden), and per decode step the anchor, the block's drafts, their
// Markov-corrected logits and the confidences of forward_spec — the
// reference's own call sequence (prefill, then one token a call). Then the
// draft protocol of model/draft.h: greedy speculation emits plain greedy
// decoding's tokens (the owner's index keys), a rejected block leaves the
// draft exactly as never drafted, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../common/status_matchers.h"
#include "deepseek_v4_test_util.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/v41_model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::ReadF32File;
using testing::ReadIds;

std::string Dir() { return std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/dspark_bf16"; }

std::vector<int32_t> ReadI32File(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<int32_t> v;
  int32_t x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::unique_ptr<DeepSeekV41Model> Load(const std::string& dir, IndexKeyReading reading) {
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return nullptr;
  auto reader = OpenCheckpointDir(dir);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return nullptr;
  const std::vector<int32_t> map = ReadI32File(dir + "/engram_token_map.i32");
  LoadOptions o;
  o.index_key_reading = reading;
  o.engram_token_map = map;
  o.engram_token_count = *std::max_element(map.begin(), map.end()) + 1;
  o.threads = 2;
  auto m = DeepSeekV41Model::Load(std::shared_ptr<const CheckpointReader>(std::move(*reader)),
                                  *config, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

float MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

const DeepSeekV41Model::DraftPick kGreedy = [](std::span<float> row, int64_t) {
  return Argmax(row);
};

TEST(V41DSpark, LoadsAsADraftModel) {
  auto m = Load(Dir(), IndexKeyReading::kReference);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_dspark());
  ASSERT_EQ(m->draft_model(), m.get());
  EXPECT_EQ(m->draft_kind(), "dspark");
  EXPECT_EQ(m->max_drafts(), 4);
  // The stages' own MoE: 4 experts, not the main model's 6.
  EXPECT_EQ(m->config().draft_routed_experts(), 4);
  EXPECT_EQ(m->config().draft_experts_per_tok(), 2);
  // A V4.1 checkpoint without the stages has no draft head.
  auto plain = Load(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/csa2_bf16",
                    IndexKeyReading::kReference);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->draft_model(), nullptr);
  EXPECT_EQ(plain->NewDraftSession(16), nullptr);
}

TEST(V41DSpark, DraftsLogitsAndConfidenceMatchTheReference) {
  auto m = Load(Dir(), IndexKeyReading::kReference);
  ASSERT_NE(m, nullptr);
  const DeepSeekV4Config& c = m->config();
  const std::vector<int32_t> ids = ReadIds(Dir() + "/input_ids.txt");
  const std::vector<float> hidden = ReadF32File(Dir() + "/spec_main_hidden.f32");
  const std::vector<int32_t> anchors = ReadI32File(Dir() + "/spec_anchor.i32");
  const std::vector<int32_t> drafts = ReadI32File(Dir() + "/spec_drafts.i32");
  const std::vector<float> dlogits = ReadF32File(Dir() + "/spec_logits.f32");
  const std::vector<float> conf = ReadF32File(Dir() + "/spec_confidence.f32");
  const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size;
  const int64_t B = c.dspark_block_size;
  const int64_t S = static_cast<int64_t>(anchors.size()), P = T - S;
  const int64_t frow = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * c.hidden_size;
  ASSERT_GE(S, 8);
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), T * frow);
  ASSERT_EQ(static_cast<int64_t>(drafts.size()), S * B);

  auto cache = m->NewCache(T);
  auto draft = m->NewMtpCache(T);
  std::vector<float> logits(V);
  ASSERT_TRUE(m->Forward(std::span(ids).first(P), *cache, logits, false).ok());
  ASSERT_EQ(static_cast<int64_t>(m->last_features().size()), P * frow);
  EXPECT_LE(MaxAbsDiff(m->last_features(), std::span(hidden).first(P * frow)), 1e-4f);
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft).ok());
  DeepSeekV41Model::DSparkBlock block;
  int64_t differ = 0;
  for (int64_t i = 0; i < S; ++i) {
    ASSERT_TRUE(m->Forward(std::span(ids).subspan(P + i, 1), *cache, logits, false).ok());
    EXPECT_LE(MaxAbsDiff(m->last_features(), std::span(hidden).subspan((P + i) * frow, frow)),
              1e-4f)
        << "step " << i;
    ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft).ok());
    const int32_t anchor = Argmax(logits);
    ASSERT_EQ(anchor, anchors[i]) << "step " << i;
    ASSERT_TRUE(m->DSparkDraft(anchor, *draft, kGreedy, block).ok());
    EXPECT_EQ(block.tokens,
              std::vector<int32_t>(drafts.begin() + i * B, drafts.begin() + (i + 1) * B))
        << "step " << i;
    EXPECT_LE(MaxAbsDiff(block.logits, std::span(dlogits).subspan(i * B * V, B * V)), 1e-4f)
        << "step " << i;
    EXPECT_LE(MaxAbsDiff(block.confidence, std::span(conf).subspan(i * B, B)), 1e-4f)
        << "step " << i;
    // The drafts are not just the anchor repeated: the block says something.
    differ += block.tokens[0] != anchor;
  }
  EXPECT_GT(differ, 0);
}

// The protocol of model/draft.h with greedy drafts: every round's accepted
// drafts and bonus token are plain greedy decoding's, under the owner's
// index keys (a multi-token verify then equals its single-token steps).
TEST(V41DSpark, GreedySpeculationEmitsPlainGreedyTokens) {
  auto m = Load(Dir(), IndexKeyReading::kOwner);
  ASSERT_NE(m, nullptr);
  const DeepSeekV4Config& c = m->config();
  const std::vector<int32_t> ids = ReadIds(Dir() + "/input_ids.txt");
  const int64_t V = c.vocab_size, P = static_cast<int64_t>(ids.size());
  const int64_t n_gen = 30, max_tokens = 64;
  // Plain greedy.
  std::vector<int32_t> plain;
  {
    auto cache = m->NewCache(max_tokens);
    std::vector<float> logits(V);
    ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
    while (static_cast<int64_t>(plain.size()) < n_gen) {
      plain.push_back(Argmax(logits));
      const int32_t t[1] = {plain.back()};
      ASSERT_TRUE(m->Forward(t, *cache, logits, false).ok());
    }
  }
  for (int64_t k : {1, 2, 4}) {
    for (bool edit : {false, true}) {  // real drafts; the right tokens with every other one wrong
      auto cache = m->NewCache(max_tokens);
      auto session = m->NewDraftSession(max_tokens);
      ASSERT_NE(session, nullptr);
      std::vector<float> logits((k + 1) * V);
      ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
      ASSERT_TRUE(session->Observe(ids, P).ok());
      std::vector<int32_t> out = {Argmax(std::span(logits).first(V))};
      int64_t accepted = 0, rounds = 0;
      while (static_cast<int64_t>(out.size()) < n_gen) {
        const int64_t n = cache->length();
        std::vector<int32_t> d(k);
        auto got = session->Draft(out.back(), d, nullptr);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ASSERT_EQ(*got, k);
        if (edit) {
          for (int64_t i = 0; i < k; ++i) {
            const int64_t g = static_cast<int64_t>(out.size()) + i;
            if (g < n_gen) d[i] = i % 2 == 0 ? plain[g] : (plain[g] + 1) % static_cast<int32_t>(V);
          }
        }
        std::vector<int32_t> verify = {out.back()};
        verify.insert(verify.end(), d.begin(), d.end());
        ASSERT_TRUE(m->Forward(verify, *cache, logits, true).ok());
        int64_t a = 0;
        while (a < k && Argmax(std::span(logits).subspan(a * V, V)) == d[a]) ++a;
        cache->Truncate(n + 1 + a);
        ASSERT_TRUE(session->Observe(verify, a + 1).ok());
        out.insert(out.end(), d.begin(), d.begin() + a);
        out.push_back(Argmax(std::span(logits).subspan(a * V, V)));
        accepted += a;
        ++rounds;
      }
      out.resize(n_gen);
      EXPECT_EQ(out, plain) << "k " << k << (edit ? " edited" : " real");
      if (edit && k > 1) EXPECT_GT(accepted, 0) << "k " << k;
      EXPECT_GT(rounds, 0);
    }
  }
}

// A block verified and partly rejected leaves the draft exactly as if the
// committed tokens had run without drafting: the next block is equal bit for bit.
TEST(V41DSpark, RollbackEqualsNeverDrafted) {
  auto m = Load(Dir(), IndexKeyReading::kOwner);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> ids = ReadIds(Dir() + "/input_ids.txt");
  const int64_t V = m->config().vocab_size, B = m->config().dspark_block_size;
  const int64_t P = static_cast<int64_t>(ids.size()) - 6;
  auto main_a = m->NewCache(64), main_b = m->NewCache(64);
  auto draft_a = m->NewMtpCache(64), draft_b = m->NewMtpCache(64);
  std::vector<float> logits((B + 1) * V);
  ASSERT_TRUE(m->Forward(std::span(ids).first(P), *main_a, logits, false).ok());
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft_a).ok());
  // a: a block of 4 from the prompt's next tokens, two kept (the draft fed those rows only)
  const std::vector<int32_t> verify(ids.begin() + P, ids.begin() + P + B + 1);
  ASSERT_TRUE(m->Forward(verify, *main_a, logits, true).ok());
  main_a->Truncate(P + 2);
  ASSERT_TRUE(
      m->DSparkObserve(m->last_features().first(2 * m->last_features().size() / (B + 1)), *draft_a)
          .ok());
  // b: the committed tokens alone
  ASSERT_TRUE(m->Forward(std::span(ids).first(P + 2), *main_b, logits, false).ok());
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft_b).ok());
  ASSERT_EQ(draft_a->length(), draft_b->length());
  DeepSeekV41Model::DSparkBlock a, b;
  ASSERT_TRUE(m->DSparkDraft(7, *draft_a, kGreedy, a).ok());
  ASSERT_TRUE(m->DSparkDraft(7, *draft_b, kGreedy, b).ok());
  EXPECT_LE(MaxAbsDiff(a.logits, b.logits), 1e-4f);
  EXPECT_LE(MaxAbsDiff(a.confidence, b.confidence), 1e-4f);
  EXPECT_EQ(a.tokens, b.tokens);
  // and truncating the draft cache in place equals feeding fewer rows
  draft_a->Truncate(P + 1);
  draft_b->Truncate(P + 1);
  ASSERT_TRUE(m->DSparkDraft(9, *draft_a, kGreedy, a).ok());
  ASSERT_TRUE(m->DSparkDraft(9, *draft_b, kGreedy, b).ok());
  EXPECT_EQ(a.logits, b.logits);
}

// Drafting fewer rows than the block (the head and the Markov loop stop early)
// proposes the same first drafts with the same logits and confidences.
TEST(V41DSpark, FewerRowsDraftTheSamePrefix) {
  auto m = Load(Dir(), IndexKeyReading::kOwner);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> ids = ReadIds(Dir() + "/input_ids.txt");
  const int64_t V = m->config().vocab_size;
  auto cache = m->NewCache(64);
  auto draft = m->NewMtpCache(64);
  std::vector<float> logits(V);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft).ok());
  DeepSeekV41Model::DSparkBlock all, two;
  ASSERT_TRUE(m->DSparkDraft(Argmax(logits), *draft, kGreedy, all).ok());
  ASSERT_TRUE(m->DSparkDraft(Argmax(logits), *draft, kGreedy, two, 2).ok());
  EXPECT_EQ(std::vector<int32_t>(two.tokens.begin(), two.tokens.begin() + 2),
            std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + 2));
  EXPECT_LE(MaxAbsDiff(std::span(two.logits).first(2 * V), std::span(all.logits).first(2 * V)),
            1e-5f);
  EXPECT_LE(MaxAbsDiff(std::span(two.confidence).first(2), std::span(all.confidence).first(2)),
            1e-5f);
}

TEST(V41DSpark, BadCallsNameTheProblem) {
  auto m = Load(Dir(), IndexKeyReading::kReference);
  ASSERT_NE(m, nullptr);
  auto draft = m->NewMtpCache(32);
  DeepSeekV41Model::DSparkBlock block;
  EXPECT_ERROR(m->DSparkDraft(3, *draft, kGreedy, block), StatusCode::kInvalidArgument,
               "no committed position yet");
  const int64_t frow =
      static_cast<int64_t>(m->config().dspark_target_layer_ids.size()) * m->config().hidden_size;
  std::vector<float> features(2 * frow, 0.0f);
  ASSERT_TRUE(m->DSparkObserve(features, *draft).ok());
  EXPECT_ERROR(m->DSparkDraft(-1, *draft, kGreedy, block), StatusCode::kInvalidArgument,
               "token id -1 is outside the vocabulary");
  EXPECT_ERROR(m->DSparkObserve(std::vector<float>(frow + 1), *draft), StatusCode::kInvalidArgument,
               "expected a whole number of rows");
  auto main_cache = m->NewCache(16);
  EXPECT_ERROR(m->DSparkObserve(features, *main_cache), StatusCode::kInvalidArgument,
               "not made by this model's NewMtpCache");
  EXPECT_ERROR(m->DSparkDraft(
                   3, *draft, [](std::span<float>, int64_t) { return int32_t{100000}; }, block),
               StatusCode::kInvalidArgument, "outside [0, 192)");
  // A session's Observe after a Forward of other tokens.
  auto session = m->NewDraftSession(32);
  const std::vector<int32_t> two = {0, 5};
  std::vector<float> logits(m->config().vocab_size);
  ASSERT_TRUE(m->Forward(two, *main_cache, logits, false).ok());
  EXPECT_ERROR(session->Observe(std::vector<int32_t>{0, 5, 6}, 3), StatusCode::kInvalidArgument,
               "did not run these 3 tokens");
}

}  // namespace
}  // namespace dsv4::deepseek_v4
