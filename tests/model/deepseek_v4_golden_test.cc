// DeepSeek-V4 forward vs the goldens of DeepSeek's official inference code
// (tests/data/deepseek_v4/README.md: fp32, QAT simulations off). Checks the
// logits (top-1 100 %, max |Δ| ≤ 1e-3, mean KL ≤ 1e-6), every named
// intermediate the golden dump holds (difference reported by name), the
// routing decisions, incremental decode vs prefill, and two sequences run
// with alternating caches vs separate runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>

#include "deepseek_v4_test_util.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::ArgmaxRow;
using testing::DataDir;
using testing::MeanKl;
using testing::ReadF32File;
using testing::ReadIds;

struct Loaded {
  std::unique_ptr<DeepSeekV4Model> model;
  std::vector<int32_t> ids;
  std::vector<float> golden;  // [T, V]
};

Loaded LoadGolden(const std::string& name) {
  const std::string dir = DataDir() + "/" + name;
  Loaded out;
  out.model = testing::LoadCheckpointDir(dir);
  if (out.model == nullptr) return out;
  out.ids = ReadIds(dir + "/input_ids.txt");
  out.golden = ReadF32File(dir + "/logits.f32");
  return out;
}

// Compares one query's indexer picks with the golden's. Picks may differ only
// where the golden scores at the top-k boundary are near-tied (the k-th and
// (k+1)-th best within 1e-4 relative, as recorded in report.json), and then
// only by entries whose golden scores lie in that tied band.
enum class TopKMatch { kEqual, kNearTie, kDiffers };
TopKMatch CompareTopK(const float* golden_scores, int64_t n, const float* golden_picks,
                      const float* our_picks, int64_t k) {
  std::vector<int64_t> g, o;
  for (int64_t j = 0; j < k; ++j) {
    if (golden_picks[j] >= 0) g.push_back(static_cast<int64_t>(golden_picks[j]));
    if (our_picks[j] >= 0) o.push_back(static_cast<int64_t>(our_picks[j]));
  }
  std::sort(g.begin(), g.end());
  std::sort(o.begin(), o.end());
  if (g == o) return TopKMatch::kEqual;
  if (g.size() != o.size()) return TopKMatch::kDiffers;
  std::vector<float> visible;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(golden_scores[i])) visible.push_back(golden_scores[i]);
  }
  if (static_cast<int64_t>(visible.size()) <= k) return TopKMatch::kDiffers;
  std::sort(visible.begin(), visible.end(), std::greater<>());
  const float a = visible[k - 1], b = visible[k];
  const float band = 1e-4f * std::max({std::fabs(a), std::fabs(b), 1e-30f});
  if (a - b > band) return TopKMatch::kDiffers;
  // Every pick in one set but not the other must score within the tied band.
  std::vector<int64_t> sym;
  std::set_symmetric_difference(g.begin(), g.end(), o.begin(), o.end(), std::back_inserter(sym));
  for (int64_t e : sym) {
    if (e >= n || std::fabs(golden_scores[e] - a) > band) return TopKMatch::kDiffers;
  }
  return TopKMatch::kNearTie;
}

TEST(DeepSeekV4GoldenTopK, OnlyNearTiesAreExempt) {
  // Scores of 6 visible entries; k = 2.
  const float tied[6] = {5.0f, 3.0f, 2.99999f, 1.0f, 0.0f, -INFINITY};
  const float g[2] = {0, 1}, swap[2] = {0, 2}, same[2] = {1, 0}, far[2] = {0, 3};
  EXPECT_EQ(CompareTopK(tied, 6, g, same, 2), TopKMatch::kEqual);
  EXPECT_EQ(CompareTopK(tied, 6, g, swap, 2), TopKMatch::kNearTie);  // 3.0 vs 2.99999
  EXPECT_EQ(CompareTopK(tied, 6, g, far, 2), TopKMatch::kDiffers);   // 1.0 is not tied
  const float clear[6] = {5.0f, 3.0f, 2.9f, 1.0f, 0.0f, -INFINITY};
  EXPECT_EQ(CompareTopK(clear, 6, g, swap, 2), TopKMatch::kDiffers);  // gap 0.1: no exemption
  const float pad[2] = {0, -1};
  EXPECT_EQ(CompareTopK(tied, 6, g, pad, 2), TopKMatch::kDiffers);
}

class DeepSeekV4Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepSeekV4Golden, LogitsMatchOfficialFp32) {
  Loaded g = LoadGolden(GetParam());
  ASSERT_NE(g.model, nullptr);
  const int64_t T = static_cast<int64_t>(g.ids.size());
  const int64_t V = g.model->info().vocab_size;
  ASSERT_EQ(static_cast<int64_t>(g.golden.size()), T * V);
  auto cache = g.model->NewCache(T);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(g.model->Forward(g.ids, *cache, logits, /*all_logits=*/true).ok());

  float max_diff = 0.0f;
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) {
    agree += ArgmaxRow(&logits[t * V], V) == ArgmaxRow(&g.golden[t * V], V);
    for (int64_t v = 0; v < V; ++v) {
      max_diff = std::max(max_diff, std::fabs(logits[t * V + v] - g.golden[t * V + v]));
    }
  }
  const double kl = MeanKl(g.golden, logits, T, V);
  std::printf("[%s] T=%lld max|dlogit| %.3g, mean KL %.3g, top-1 %lld/%lld\n", GetParam().c_str(),
              static_cast<long long>(T), max_diff, kl, static_cast<long long>(agree),
              static_cast<long long>(T));
  EXPECT_EQ(agree, T);
  EXPECT_LE(max_diff, 1e-3f);
  EXPECT_LE(kl, 1e-6);
}

TEST_P(DeepSeekV4Golden, IntermediatesMatchByName) {
  Loaded g = LoadGolden(GetParam());
  ASSERT_NE(g.model, nullptr);
  auto inter = OpenSafetensors(DataDir() + "/" + GetParam() + "/intermediates.safetensors");
  ASSERT_TRUE(inter.ok()) << inter.status().ToString();
  const SafetensorsFile& golden = **inter;

  struct Seen {
    float max_diff = 0.0f;
    float max_ref = 0.0f;
  };
  std::map<std::string, Seen> seen;
  std::map<std::string, std::vector<float>> our_topk;  // name -> [T, k]
  std::vector<std::string> shape_errors;
  g.model->SetTrace(
      [&](std::string_view name, int64_t, const float* data, std::span<const int64_t> shape) {
        const TensorInfo* ref = golden.Find(name);
        if (ref == nullptr) return;
        if (ref->shape != std::vector<int64_t>(shape.begin(), shape.end())) {
          shape_errors.push_back(std::string(name) + ": golden " + ShapeToString(ref->shape) +
                                 ", ours " + ShapeToString(shape));
          return;
        }
        const int64_t n = ref->view().numel();
        if (name.ends_with("indexer_topk")) our_topk[std::string(name)].assign(data, data + n);
        std::vector<float> want(n);
        DequantizeRow(ref->dtype, ref->data, n, want.data());
        Seen s;
        for (int64_t i = 0; i < n; ++i) {
          // Equal infinities (masked indexer scores) match; NaN or a finite/infinite
          // mismatch counts as an infinite difference.
          float d = data[i] == want[i] ? 0.0f : std::fabs(data[i] - want[i]);
          if (std::isnan(d)) d = INFINITY;
          s.max_diff = std::max(s.max_diff, d);
          if (std::isfinite(want[i])) s.max_ref = std::max(s.max_ref, std::fabs(want[i]));
        }
        seen[std::string(name)] = s;
      });
  const int64_t T = static_cast<int64_t>(g.ids.size());
  auto cache = g.model->NewCache(T);
  std::vector<float> logits(T * g.model->info().vocab_size);
  ASSERT_TRUE(g.model->Forward(g.ids, *cache, logits, true).ok());
  if (g.model->has_mtp()) {  // the MTP intermediates (positions 0 .. T−2)
    const auto& c = g.model->config();
    const std::vector<float> hidden(
        g.model->last_hidden().begin(),
        g.model->last_hidden().begin() + (T - 1) * c.hc_mult * c.hidden_size);
    auto mtp_cache = g.model->NewMtpCache(T);
    ASSERT_TRUE(g.model
                    ->ForwardMtp(std::span<const int32_t>(g.ids).subspan(1), hidden, *mtp_cache,
                                 logits, true)
                    .ok());
  }
  g.model->SetTrace(nullptr);

  EXPECT_TRUE(shape_errors.empty()) << ::testing::PrintToString(shape_errors);
  // Every golden intermediate of the window-attention forward has a traced twin.
  std::vector<std::string> untraced;
  for (const TensorInfo& t : golden.tensors()) {
    if (!seen.count(t.name)) untraced.push_back(t.name);
  }
  EXPECT_TRUE(untraced.empty()) << "golden intermediates we did not trace: "
                                << ::testing::PrintToString(untraced);
  for (const auto& [name, s] : seen) {
    std::printf("  %-28s max|d| %.3g (max|ref| %.3g)\n", name.c_str(), s.max_diff, s.max_ref);
    if (name.ends_with("indexer_topk")) {
      // Per query: the same set, or a near-tie at the boundary of the golden scores.
      const std::string scores_name = name.substr(0, name.size() - 4) + "scores";
      const TensorInfo* gs = golden.Find(scores_name);
      const TensorInfo* gt = golden.Find(name);
      ASSERT_NE(gs, nullptr) << scores_name << " is needed to judge ties";
      const int64_t T = gt->shape[0], k = gt->shape[1], n_entries = gs->shape[1];
      std::vector<float> scores(T * n_entries), picks(T * k);
      DequantizeRow(gs->dtype, gs->data, T * n_entries, scores.data());
      DequantizeRow(gt->dtype, gt->data, T * k, picks.data());
      int64_t ties = 0;
      for (int64_t t = 0; t < T; ++t) {
        const TopKMatch m = CompareTopK(&scores[t * n_entries], n_entries, &picks[t * k],
                                        &our_topk[name][t * k], k);
        EXPECT_NE(m, TopKMatch::kDiffers) << name << ": query " << t << " picked other entries";
        ties += m == TopKMatch::kNearTie;
      }
      std::printf("  %-28s %lld queries differ at a near-tie (exempt)\n", name.c_str(),
                  static_cast<long long>(ties));
    } else if (name.ends_with("router_indices")) {
      EXPECT_EQ(s.max_diff, 0.0f) << name << ": a different choice was made";
    } else {
      EXPECT_LE(s.max_diff, 1e-4f * std::max(1.0f, s.max_ref)) << name;
    }
  }
}

// Token-by-token decode (and uneven chunks) equals one prefill.
TEST_P(DeepSeekV4Golden, IncrementalDecodeEqualsPrefill) {
  Loaded g = LoadGolden(GetParam());
  ASSERT_NE(g.model, nullptr);
  const int64_t T = static_cast<int64_t>(g.ids.size());
  const int64_t V = g.model->info().vocab_size;
  std::vector<float> prefill(T * V);
  auto c1 = g.model->NewCache(T);
  ASSERT_TRUE(g.model->Forward(g.ids, *c1, prefill, true).ok());

  for (int64_t chunk : {int64_t{1}, int64_t{5}}) {
    auto c2 = g.model->NewCache(T);
    std::vector<float> step(T * V);
    for (int64_t t = 0; t < T; t += chunk) {
      const int64_t n = std::min(chunk, T - t);
      ASSERT_TRUE(g.model
                      ->Forward(std::span<const int32_t>(g.ids).subspan(t, n), *c2,
                                std::span<float>(step).subspan(t * V, n * V), true)
                      .ok());
    }
    EXPECT_EQ(c2->length(), T);
    float max_diff = 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(ArgmaxRow(&step[t * V], V), ArgmaxRow(&prefill[t * V], V)) << "position " << t;
      for (int64_t v = 0; v < V; ++v) {
        max_diff = std::max(max_diff, std::fabs(step[t * V + v] - prefill[t * V + v]));
      }
    }
    std::printf("[%s] chunk %lld vs prefill: max|d| %.3g\n", GetParam().c_str(),
                static_cast<long long>(chunk), max_diff);
    EXPECT_LE(max_diff, 1e-4f) << "chunk " << chunk;
  }
}

// Two different sequences decoded with two caches used alternately give the
// same logits as two separate runs (no state leaks between caches).
TEST_P(DeepSeekV4Golden, AlternatingCachesEqualSeparateRuns) {
  Loaded g = LoadGolden(GetParam());
  ASSERT_NE(g.model, nullptr);
  const int64_t V = g.model->info().vocab_size;
  std::vector<int32_t> a = g.ids;
  std::vector<int32_t> b(g.ids.rbegin(), g.ids.rend());  // a different sequence
  b.resize(a.size() - 3);
  auto run_alone = [&](const std::vector<int32_t>& ids) {
    auto cache = g.model->NewCache(0);
    std::vector<float> out(ids.size() * V);
    for (size_t t = 0; t < ids.size(); ++t) {
      EXPECT_TRUE(g.model
                      ->Forward(std::span<const int32_t>(ids).subspan(t, 1), *cache,
                                std::span<float>(out).subspan(t * V, V), false)
                      .ok());
    }
    return out;
  };
  const std::vector<float> alone_a = run_alone(a), alone_b = run_alone(b);
  auto ca = g.model->NewCache(0), cb = g.model->NewCache(0);
  std::vector<float> la(a.size() * V), lb(b.size() * V);
  // Prefill a in one chunk of 3 first, then interleave single steps.
  ASSERT_TRUE(g.model
                  ->Forward(std::span<const int32_t>(a).first(3), *ca,
                            std::span<float>(la).first(3 * V), true)
                  .ok());
  size_t ia = 3, ib = 0;
  while (ia < a.size() || ib < b.size()) {
    if (ib < b.size()) {
      ASSERT_TRUE(g.model
                      ->Forward(std::span<const int32_t>(b).subspan(ib, 1), *cb,
                                std::span<float>(lb).subspan(ib * V, V), false)
                      .ok());
      ++ib;
    }
    if (ia < a.size()) {
      ASSERT_TRUE(g.model
                      ->Forward(std::span<const int32_t>(a).subspan(ia, 1), *ca,
                                std::span<float>(la).subspan(ia * V, V), false)
                      .ok());
      ++ia;
    }
  }
  auto max_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
    float m = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
    return m;
  };
  EXPECT_LE(max_diff(la, alone_a), 1e-4f);
  EXPECT_LE(max_diff(lb, alone_b), 1e-4f);
}

// QAT simulations on (spec §9.2) vs the official code run in fp32 with its
// simulations rounding like kernel_tilelang.py (logits_qat_fp32.f32). The
// switch comes from the config where it can: swa_fp8 carries the release's
// quantization_config, so the default load turns every simulation on; the
// bf16 configs (trained without them, qat_simulation off) are given
// explicit options (kv FP8 + indexer FP4; they have no FP8 linears).
//
// Rounding to FP8/FP4 is discontinuous: an fp32-noise difference upstream can
// move a value across a rounding boundary (on the 544-token config a few do,
// and the coarse FP4 index scores then pick another entry for 1 query). So the
// bar is the "full forward reduced" one of oracles/README.md, tightened: mean
// KL ≤ 1e-4 — and ≤ 1 % of the sims-off golden's distance, which shows the
// simulations are on and right — top-1 ≥ 99 %, indexer picks ≥ 99 % equal.
// That golden's activations are fp32 throughout, so the attention output
// stays f32 here too (o_bf16, on by default with the release's numerics, is
// the released bf16 code's rounding: DeepSeekV4Model.BF16AttentionOutput…).
TEST_P(DeepSeekV4Golden, QatSimulationsMatchOfficialFp32) {
  const std::string dir = DataDir() + "/" + GetParam();
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  ASSERT_TRUE(config.ok());
  LoadOptions o;
  o.o_bf16 = false;
  if (!config->qat_simulation) {
    o.numerics = NumericsOptions{.act_quant = false, .kv_quant = true, .index_quant = true};
  }
  auto loaded = LoadDeepSeekV4(dir, o);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto& m = static_cast<DeepSeekV4Model&>(**loaded);
  EXPECT_TRUE(m.numerics().kv_quant);
  EXPECT_EQ(m.numerics().act_quant, config->quantization_config.present);
  EXPECT_FALSE(m.numerics().o_bf16);
  const std::vector<int32_t> ids = ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.info().vocab_size;
  const std::vector<float> golden = ReadF32File(dir + "/logits_qat_fp32.f32");
  const std::vector<float> off = ReadF32File(dir + "/logits.f32");
  ASSERT_EQ(static_cast<int64_t>(golden.size()), T * V);
  std::map<std::string, std::vector<float>> picks;  // ours, [T, k]
  m.SetTrace(
      [&](std::string_view name, int64_t, const float* data, std::span<const int64_t> shape) {
        if (!name.ends_with("indexer_topk")) return;
        picks[std::string(name)].assign(data, data + shape[0] * shape[1]);
      });
  auto cache = m.NewCache(T);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(m.Forward(ids, *cache, logits, true).ok());
  m.SetTrace(nullptr);
  float max_diff = 0.0f;
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) {
    agree += ArgmaxRow(&logits[t * V], V) == ArgmaxRow(&golden[t * V], V);
    for (int64_t v = 0; v < V; ++v) {
      max_diff = std::max(max_diff, std::fabs(logits[t * V + v] - golden[t * V + v]));
    }
  }
  const double kl = MeanKl(golden, logits, T, V), kl_off = MeanKl(golden, off, T, V);
  std::printf(
      "[%s QAT on] max|dlogit| %.3g, mean KL %.3g (sims-off golden: %.3g), top-1 "
      "%lld/%lld\n",
      GetParam().c_str(), max_diff, kl, kl_off, static_cast<long long>(agree),
      static_cast<long long>(T));
  EXPECT_LE(kl, 1e-4);
  EXPECT_LE(kl, kl_off / 100);
  EXPECT_GE(agree * 100, T * 99);
  if (picks.empty()) return;
  auto inter = OpenSafetensors(dir + "/intermediates_qat_fp32.safetensors");
  ASSERT_TRUE(inter.ok()) << inter.status().ToString();
  for (const auto& [name, ours] : picks) {
    const TensorInfo* gt = (*inter)->Find(name);
    ASSERT_NE(gt, nullptr) << name;
    const int64_t k = gt->shape[1];
    std::vector<float> want(T * k);
    DequantizeRow(gt->dtype, gt->data, T * k, want.data());
    int64_t same = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> a(&want[t * k], &want[t * k] + k), b(&ours[t * k], &ours[t * k] + k);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      same += a == b;
    }
    std::printf("  %s: %lld/%lld queries pick the same entries\n", name.c_str(),
                static_cast<long long>(same), static_cast<long long>(T));
    EXPECT_GE(same * 100, T * 99) << name;
  }
}

// The MTP draft logits (spec §6.3): row t from the main residual at t and the
// embedding of token t+1, vs the official MTPBlock; one call and token by token.
void ExpectMtpDraftLogitsMatchOfficial(Loaded g) {
  ASSERT_NE(g.model, nullptr);
  ASSERT_TRUE(g.model->has_mtp());
  const auto& c = g.model->config();
  const int64_t T = static_cast<int64_t>(g.ids.size()), V = c.vocab_size;
  const int64_t row = c.hc_mult * c.hidden_size;
  auto cache = g.model->NewCache(T);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(g.model->Forward(g.ids, *cache, logits, true).ok());
  const std::vector<float> hidden(g.model->last_hidden().begin(), g.model->last_hidden().end());
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), T * row);
  const std::vector<float> golden = ReadF32File(DataDir() + "/mixed_mtp_bf16/mtp_logits.f32");
  ASSERT_EQ(static_cast<int64_t>(golden.size()), (T - 1) * V);
  const std::span<const int32_t> next = std::span<const int32_t>(g.ids).subspan(1);

  std::vector<float> all((T - 1) * V), step((T - 1) * V);
  auto mtp = g.model->NewMtpCache(T);
  ASSERT_TRUE(
      g.model
          ->ForwardMtp(next, std::span<const float>(hidden).first((T - 1) * row), *mtp, all, true)
          .ok());
  auto mtp2 = g.model->NewMtpCache(T);
  for (int64_t t = 0; t + 1 < T; ++t) {
    ASSERT_TRUE(g.model
                    ->ForwardMtp(next.subspan(t, 1),
                                 std::span<const float>(hidden).subspan(t * row, row), *mtp2,
                                 std::span<float>(step).subspan(t * V, V), false)
                    .ok());
  }
  float max_diff = 0.0f, max_step = 0.0f;
  int64_t agree = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    agree += ArgmaxRow(&all[t * V], V) == ArgmaxRow(&golden[t * V], V);
    for (int64_t v = 0; v < V; ++v) {
      max_diff = std::max(max_diff, std::fabs(all[t * V + v] - golden[t * V + v]));
      max_step = std::max(max_step, std::fabs(step[t * V + v] - all[t * V + v]));
    }
  }
  std::printf("[mtp] max|dlogit| %.3g, KL %.3g, top-1 %lld/%lld, step vs all %.3g\n", max_diff,
              MeanKl(golden, all, T - 1, V), static_cast<long long>(agree),
              static_cast<long long>(T - 1), max_step);
  EXPECT_EQ(agree, T - 1);
  EXPECT_LE(max_diff, 1e-3f);
  EXPECT_LE(MeanKl(golden, all, T - 1, V), 1e-6);
  EXPECT_LE(max_step, 1e-4f);
}

TEST(DeepSeekV4GoldenMtp, DraftLogitsMatchOfficial) {
  ExpectMtpDraftLogitsMatchOfficial(LoadGolden("mixed_mtp_bf16"));
}

// The same checkpoint as llama.cpp's converter writes it: the main model's
// GGUF and the NextN block's (--mtp; tests/data/deepseek_v4/gguf_drafts,
// tools/goldens/ds4_gguf_drafts.py), every weight keeping its bits.
TEST(DeepSeekV4GoldenMtp, DraftLogitsFromTheGgufFilesMatchOfficial) {
  Loaded g = LoadGolden("mixed_mtp_bf16");
  const std::string dir = DataDir() + "/gguf_drafts/";
  g.model = testing::LoadGgufWithDraft(dir + "mtp_main.gguf", dir + "mtp.gguf");
  ExpectMtpDraftLogitsMatchOfficial(std::move(g));
}

TEST(DeepSeekV4GoldenMtp, ErrorsWithoutMtpWeightsOrWithWrongSizes) {
  Loaded g = LoadGolden("swa_bf16");  // num_nextn_predict_layers 0
  ASSERT_NE(g.model, nullptr);
  EXPECT_FALSE(g.model->has_mtp());
  auto cache = g.model->NewMtpCache(4);
  std::vector<float> logits(256), hidden(4 * 64);
  EXPECT_EQ(g.model->ForwardMtp(std::vector<int32_t>{1}, hidden, *cache, logits, false).code(),
            StatusCode::kUnimplemented);
  Loaded m = LoadGolden("mixed_mtp_bf16");
  ASSERT_NE(m.model, nullptr);
  auto mcache = m.model->NewMtpCache(4);
  std::vector<float> wrong(3);
  EXPECT_EQ(m.model->ForwardMtp(std::vector<int32_t>{1}, wrong, *mcache, logits, false).code(),
            StatusCode::kInvalidArgument);
  // A main-model cache is not an MTP cache.
  auto main_cache = m.model->NewCache(4);
  std::vector<float> right(4 * 40);
  EXPECT_EQ(m.model->ForwardMtp(std::vector<int32_t>{1}, right, *main_cache, logits, false).code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Official, DeepSeekV4Golden,
                         ::testing::Values("swa_bf16", "swa_fp8", "swa_bf16_v2", "mixed_mtp_bf16",
                                           "long_hca128_bf16"),
                         [](const auto& info) { return info.param; });

// The directory loader (config.json + safetensors) gives the same logits as
// binding the reader directly.
TEST(DeepSeekV4GoldenMixed, LoadDeepSeekV4FromDirectory) {
  auto model = LoadDeepSeekV4(DataDir() + "/swa_bf16");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->info().architecture, "deepseek_v4");
  EXPECT_EQ((*model)->info().vocab_size, 256);
  const std::vector<int32_t> ids = ReadIds(DataDir() + "/swa_bf16/input_ids.txt");
  const std::vector<float> golden = ReadF32File(DataDir() + "/swa_bf16/logits.f32");
  auto cache = (*model)->NewCache(0);
  std::vector<float> last(256);
  ASSERT_TRUE((*model)->Forward(ids, *cache, last, /*all_logits=*/false).ok());
  const float* want = golden.data() + (ids.size() - 1) * 256;
  for (int v = 0; v < 256; ++v) EXPECT_NEAR(last[v], want[v], 1e-3f);
}

}  // namespace
}  // namespace dsv4::deepseek_v4
