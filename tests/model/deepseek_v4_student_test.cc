// The bundled trained DeepSeek-V4 student (models/deepseek_v4_stories, made by
// tools/train/ from stories260K) against transformers' DeepseekV4ForCausalLM
// on the same weights: the main logits and the MTP draft's logits of a
// TinyStories document, written by tools/train/make_student_golden.py into
// tests/data/deepseek_v4_stories/. Also: the routing and indexer counts
// (Model::EnableUsageStats) add up to what the forward did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "deepseek_v4_test_util.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::ReadF32File;
using testing::ReadIds;

std::string ModelDir() {
  return std::string(DSV4_TEST_DATA_DIR) + "/../../models/deepseek_v4_stories";
}
std::string GoldenDir() { return std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4_stories"; }

int64_t Argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

TEST(DeepSeekV4Student, LogitsEqualTransformers) {
  auto m = testing::LoadCheckpointDir(ModelDir());
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_mtp());
  const std::vector<int32_t> ids = ReadIds(GoldenDir() + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = m->info().vocab_size;
  ASSERT_GT(T, 200);  // long enough that the CSA indexer chooses and HCA compresses
  const std::vector<float> want = ReadF32File(GoldenDir() + "/logits_hf.f32");
  const std::vector<float> want_mtp = ReadF32File(GoldenDir() + "/mtp_logits.f32");
  ASSERT_EQ(static_cast<int64_t>(want.size()), T * V);
  ASSERT_EQ(static_cast<int64_t>(want_mtp.size()), (T - 1) * V);

  std::vector<float> logits(T * V);
  auto cache = m->NewCache(T);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, true).ok());
  const int64_t row = m->config().hc_mult * m->config().hidden_size;
  const std::vector<float> hidden(m->last_hidden().begin(), m->last_hidden().end());
  std::vector<float> draft((T - 1) * V);
  auto mtp = m->NewMtpCache(T);
  ASSERT_TRUE(m->ForwardMtp(std::span<const int32_t>(ids).subspan(1),
                            std::span<const float>(hidden).first((T - 1) * row), *mtp, draft, true)
                  .ok());

  float worst = 0, worst_mtp = 0;
  int64_t argmax_differ = 0;
  for (int64_t i = 0; i < T * V; ++i) worst = std::max(worst, std::fabs(logits[i] - want[i]));
  for (int64_t i = 0; i < (T - 1) * V; ++i) {
    worst_mtp = std::max(worst_mtp, std::fabs(draft[i] - want_mtp[i]));
  }
  for (int64_t t = 0; t < T; ++t) {
    argmax_differ += Argmax(&logits[t * V], V) != Argmax(&want[t * V], V);
  }
  // fp32 on both sides over the same bf16 weights; the script refused prompts
  // whose indexer top-k has near-ties, so the selections agree.
  EXPECT_LT(worst, 1e-4f);
  EXPECT_LT(worst_mtp, 1e-4f);
  EXPECT_EQ(argmax_differ, 0);
}

TEST(DeepSeekV4Student, UsageStatsCountEveryPick) {
  auto m = testing::LoadCheckpointDir(ModelDir());
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->usage_stats().has_value());
  ASSERT_TRUE(m->EnableUsageStats(true).ok());
  const std::vector<int32_t> ids = ReadIds(GoldenDir() + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = m->info().vocab_size;
  const DeepSeekV4Config& c = m->config();
  // Two calls (a prefill in two chunks) count like one.
  std::vector<float> logits(T * V);
  auto cache = m->NewCache(T);
  const int64_t half = T / 2;
  ASSERT_TRUE(m->Forward(std::span<const int32_t>(ids).first(half), *cache,
                         std::span<float>(logits).first(half * V), true)
                  .ok());
  ASSERT_TRUE(m->Forward(std::span<const int32_t>(ids).subspan(half), *cache,
                         std::span<float>(logits).subspan(half * V), true)
                  .ok());
  const std::optional<UsageStats> u = m->usage_stats();
  ASSERT_TRUE(u.has_value());
  ASSERT_EQ(static_cast<int64_t>(u->layers.size()),
            c.num_hidden_layers + c.num_nextn_predict_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerUsage& lu = u->layers[l];
    EXPECT_EQ(lu.layer, l);
    EXPECT_FALSE(lu.draft);
    EXPECT_EQ(lu.hash_routed, l < c.num_hash_layers);
    ASSERT_EQ(static_cast<int64_t>(lu.expert_picks.size()), c.n_routed_experts);
    EXPECT_EQ(std::accumulate(lu.expert_picks.begin(), lu.expert_picks.end(), int64_t{0}),
              T * c.num_experts_per_tok)
        << "layer " << l;
    const int64_t r = c.compress_ratios[l];
    const bool csa = r > 0 && r == 4;  // the student's CSA layers have ratio 4
    if (!csa) {
      EXPECT_EQ(lu.index_picks(), 0) << "layer " << l;
      continue;
    }
    // Every query that saw more than top-k entries picked exactly top-k of them.
    int64_t queries = 0, visible = 0;
    for (int64_t p = 0; p < T; ++p) {
      const int64_t n = (p + 1) / r;
      if (n > c.index_topk) ++queries, visible += n;
    }
    EXPECT_EQ(lu.index_queries, queries) << "layer " << l;
    EXPECT_EQ(lu.index_visible, visible) << "layer " << l;
    EXPECT_EQ(lu.index_picks(), queries * c.index_topk) << "layer " << l;
    EXPECT_LE(lu.index_recent, lu.index_picks());
    EXPECT_GT(lu.index_relative_age, 0.0);
  }
  // The MTP layer did not run.
  EXPECT_EQ(std::accumulate(u->layers.back().expert_picks.begin(),
                            u->layers.back().expert_picks.end(), int64_t{0}),
            0);
  ASSERT_TRUE(m->EnableUsageStats(false).ok());
  EXPECT_FALSE(m->usage_stats().has_value());
}

}  // namespace
}  // namespace dsv4::deepseek_v4
