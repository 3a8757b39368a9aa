// Seed-family forward vs the float64 numpy reference (tools/reference/
// seed_reference.py) for each profile of tests/data/seed/, at the fp32 forward
// tolerance of the oracles README (top-1 100 %, max |Δlogit| ≤ 1e-3, mean KL ≤ 1e-6),
// plus the invariances each profile promises and the model-level S-item tests.
#include <gtest/gtest.h>

#include <unistd.h>

#include "../common/status_matchers.h"

#include <cstring>
#include <filesystem>

#include "model/seed/convert_layout.h"

#include <cmath>

#include "base/log.h"
#include "io/safetensors_writer.h"
#include "seed_test_util.h"

namespace dsv4::seed {
namespace {

using testing::Build;
using testing::Compare;
using testing::LoadProfile;
using testing::OverlayReader;
using testing::ProfileDir;
using testing::ReadF32;
using testing::RunCalls;

constexpr double kMaxAbs = 1e-3, kMeanKl = 1e-6, kInvariance = 1e-4;

// Every run of every profile's golden: the same chunking, the same logits, and
// for the pruner the same live positions after every call.
class SeedGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SeedGolden, S001_S012_ForwardMatchesFloat64Reference) {
  auto p = LoadProfile(GetParam());
  ASSERT_NE(p.reader, nullptr);
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->info().vocab_size;
  const int64_t max_tokens = p.golden["max_tokens"].get<int64_t>();
  ASSERT_FALSE(p.golden["runs"].empty());
  for (auto& [run, spec] : p.golden["runs"].items()) {
    SCOPED_TRACE(GetParam() + " run " + run);
    std::vector<int64_t> chunks;
    for (auto& c : spec["chunks"]) chunks.push_back(c.get<int64_t>());
    const bool last_only = spec["last_only"].get<bool>();
    auto cache = m->NewCache(max_tokens);
    std::vector<std::vector<int64_t>> live;
    std::vector<float> got = RunCalls(*m, *cache, p.ids, chunks, last_only, &live);
    std::vector<float> want =
        ReadF32(ProfileDir(GetParam()) + "/" + spec["logits"].get<std::string>());
    ASSERT_EQ(got.size(), want.size());
    auto d = Compare(got, want, V);
    EXPECT_EQ(d.argmax_mismatch, 0);
    EXPECT_LE(d.max_abs, kMaxAbs);
    EXPECT_LE(d.mean_kl, kMeanKl);
    if (spec.contains("live_after_call")) {  // S-061, S-063, S-065: the same evictions
      ASSERT_EQ(live.size(), spec["live_after_call"].size());
      for (size_t i = 0; i < live.size(); ++i) {
        std::vector<int64_t> w;
        for (auto& x : spec["live_after_call"][i]) w.push_back(x.get<int64_t>());
        EXPECT_EQ(live[i], w) << "after call " << i;
      }
    }
    if (spec.contains("eff_after_call")) {
      EXPECT_NEAR(static_cast<SeedCache&>(*cache).pruner_efficiency(),
                  spec["eff_after_call"].back().get<double>(), 1e-9);
    }
    // S-025 / C-11: theta is frozen per request and equals the reference's.
    EXPECT_NEAR(static_cast<SeedCache&>(*cache).rope().theta, p.golden["theta"].get<double>(),
                1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, SeedGolden, ::testing::Values("P-V4", "P-CED", "P-V4-7B"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Prefill vs incremental for a model with only causal mechanisms.
double PrefillVsIncremental(SeedModel& m, const std::vector<int32_t>& ids, int64_t max_tokens) {
  const int64_t T = static_cast<int64_t>(ids.size());
  auto c1 = m.NewCache(max_tokens);
  auto a = RunCalls(m, *c1, ids, {T}, false);
  auto c2 = m.NewCache(max_tokens);
  auto b = RunCalls(m, *c2, ids, std::vector<int64_t>(T, 1), false);
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i)
    mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
  return mx;
}

TEST(SeedModel, S013_S037_CedProfilePrefillEqualsIncremental) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  EXPECT_LE(PrefillVsIncremental(*m, p.ids, 16), kInvariance);
}

TEST(SeedModel, S058_V47bWithoutPrunerIsCausalAndChunkInvariant) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.pruner = false;
  m->SetRuntimeOptions(o);
  EXPECT_LE(PrefillVsIncremental(*m, p.ids, 16), kInvariance);
  // Chunked prefill (first_token task source): same logits as one call.
  auto c1 = m->NewCache(16);
  auto a = RunCalls(*m, *c1, p.ids, {16}, false);
  auto c2 = m->NewCache(16);
  auto b = RunCalls(*m, *c2, p.ids, {5, 7, 4}, false);
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i)
    mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_LE(mx, kInvariance);
  // The adapter output is the prefill's, kept for the request.
  EXPECT_EQ(static_cast<SeedCache&>(*c1).adapter_out(1),
            static_cast<SeedCache&>(*c2).adapter_out(1));
}

// P-V4 with the non-causal mechanisms off (capacity unlimited, HCA off): CSA,
// dynamic theta and group routing are causal, so prefill == incremental.
SeedConfig V4Causal(const SeedConfig& c) {
  SeedConfig v = c;
  v.hca.enabled = false;
  v.moe.capacity_factor = 0;
  return v;
}

TEST(SeedModel, S019_S023_CsaCausalModePrefillEqualsIncremental) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, V4Causal(p.config));
  ASSERT_NE(m, nullptr);
  EXPECT_LE(PrefillVsIncremental(*m, p.ids, 48), kInvariance);
}

TEST(SeedModel, S019_CausalGlobalBranchIgnoresFutureTokens) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, V4Causal(p.config));
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(p.ids.size()), V = m->info().vocab_size;
  auto c1 = m->NewCache(48);
  auto a = RunCalls(*m, *c1, p.ids, {T}, false);
  std::vector<int32_t> changed = p.ids;
  changed[T - 1] = 7;
  changed[T - 2] = 9;
  auto c2 = m->NewCache(48);
  auto b = RunCalls(*m, *c2, changed, {T}, false);
  for (int64_t i = 0; i < (T - 2) * V; ++i) ASSERT_EQ(a[i], b[i]) << "row " << i / V;
}

TEST(SeedModel, S019_SeedGlobalModeIsNotCausal) {
  auto p = LoadProfile("P-V4");
  SeedConfig c = V4Causal(p.config);
  c.csa.global_mode = "seed";
  auto m = Build(p, c);
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(p.ids.size()), V = m->info().vocab_size;
  auto c1 = m->NewCache(48);
  auto a = RunCalls(*m, *c1, p.ids, {T}, false);
  std::vector<int32_t> changed = p.ids;
  changed[T - 1] = 7;
  auto c2 = m->NewCache(48);
  auto b = RunCalls(*m, *c2, changed, {T}, false);
  double mx = 0;
  for (int64_t i = 0; i < (T - 1) * V; ++i)
    mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_GT(mx, 0.0);  // C-08: the literal seed mode leaks the future
}

// S-021 (C-09): the prose form LayerNorm(x + CSA_512(x) + CSA_4096(x) + CSA_global(x))
// against the float64 reference on P-V4's weights with csa.fusion_mode
// "residual_layernorm" (golden.json "variants"): the config is P-V4's config.json
// with the variant's extension fields patched in, parsed by SeedConfig::FromJson.
TEST(SeedGolden, S021_ResidualLayerNormMatchesFloat64Reference) {
  auto p = LoadProfile("P-V4");
  ASSERT_NE(p.reader, nullptr);
  ASSERT_TRUE(p.golden.contains("variants"));
  const auto& variant = p.golden["variants"]["residual_layernorm"];
  auto text = ReadFileToString(ProfileDir("P-V4") + "/config.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json cfg = nlohmann::json::parse(*text);
  for (auto& [ext, fields] : variant["extensions_patch"].items()) {
    for (auto& [key, value] : fields.items()) cfg["extensions"][ext][key] = value;
  }
  auto config = SeedConfig::FromJson(cfg.dump(), "P-V4 residual_layernorm");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->csa.fusion_mode, "residual_layernorm");
  auto m = Build(p, *config);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->info().vocab_size;
  const int64_t max_tokens = p.golden["max_tokens"].get<int64_t>();
  ASSERT_EQ(variant["runs"].size(), 2u);  // prefill and incremental
  for (auto& [run, spec] : variant["runs"].items()) {
    SCOPED_TRACE("run " + run);
    std::vector<int64_t> chunks;
    for (auto& c : spec["chunks"]) chunks.push_back(c.get<int64_t>());
    auto cache = m->NewCache(max_tokens);
    std::vector<float> got = RunCalls(*m, *cache, p.ids, chunks, false);
    std::vector<float> want = ReadF32(ProfileDir("P-V4") + "/" + spec["logits"].get<std::string>());
    ASSERT_EQ(got.size(), want.size());
    auto d = Compare(got, want, V);
    EXPECT_EQ(d.argmax_mismatch, 0);
    EXPECT_LE(d.max_abs, kMaxAbs);
    EXPECT_LE(d.mean_kl, kMeanKl);
  }
  // The weighted form's golden differs: the variant is not the default in disguise.
  auto base = ReadF32(ProfileDir("P-V4") + "/prefill_logits.f32");
  auto mine = ReadF32(ProfileDir("P-V4") + "/residual_layernorm_prefill_logits.f32");
  EXPECT_GT(Compare(mine, base, V).max_abs, 1e-2);
}

// C-15: HCA statistics. The default ("causal") takes each token's μ, σ over
// the sequence's tokens up to it, updated across the prompt; "whole_call" (the
// earlier reading) over every token of the call. The whole-call golden is the
// float64 reference under hca.stats "whole_call" (golden.json variants).
TEST(SeedGolden, C15_WholeCallHcaMatchesFloat64Reference) {
  auto p = LoadProfile("P-V4");
  ASSERT_NE(p.reader, nullptr);
  ASSERT_TRUE(p.golden["variants"].contains("whole_call_hca"));
  const auto& variant = p.golden["variants"]["whole_call_hca"];
  SeedConfig c = p.config;
  ASSERT_EQ(c.hca.stats, "causal");  // the default
  c.hca.stats = variant["extensions_patch"]["hca"]["stats"].get<std::string>();
  ASSERT_EQ(c.hca.stats, "whole_call");
  auto m = Build(p, c);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->info().vocab_size;
  ASSERT_EQ(variant["runs"].size(), 2u);
  for (auto& [run, spec] : variant["runs"].items()) {
    SCOPED_TRACE("run " + run);
    std::vector<int64_t> chunks;
    for (auto& x : spec["chunks"]) chunks.push_back(x.get<int64_t>());
    auto cache = m->NewCache(p.golden["max_tokens"].get<int64_t>());
    std::vector<float> got = RunCalls(*m, *cache, p.ids, chunks, false);
    std::vector<float> want = ReadF32(ProfileDir("P-V4") + "/" + spec["logits"].get<std::string>());
    ASSERT_EQ(got.size(), want.size());
    auto d = Compare(got, want, V);
    EXPECT_EQ(d.argmax_mismatch, 0);
    EXPECT_LE(d.max_abs, kMaxAbs);
    EXPECT_LE(d.mean_kl, kMeanKl);
  }
  // The two readings give different prefills (one call), the same incremental run.
  const std::string dir = ProfileDir("P-V4") + "/";
  EXPECT_GT(Compare(ReadF32(dir + "whole_call_hca_prefill_logits.f32"),
                    ReadF32(dir + "prefill_logits.f32"), V)
                .max_abs,
            1e-2);
  EXPECT_EQ(ReadF32(dir + "whole_call_hca_incremental_logits.f32"),
            ReadF32(dir + "incremental_logits.f32"));
}

// Causal HCA: prefilling T tokens gives every position the logits that feeding
// them one by one gives (≤ kInvariance = 1e-4: the same arithmetic, products
// over T rows vs one), and in chunks too. Capacity is per forward call by the
// digest (S-044), so it is unlimited here; HCA, CSA and group routing stay on.
TEST(SeedModel, C15_CausalHcaPrefillEqualsTokenByTokenDecode) {
  auto p = LoadProfile("P-V4");
  SeedConfig c = p.config;
  c.moe.capacity_factor = 0;
  ASSERT_TRUE(c.hca.enabled);
  auto m = Build(p, c);
  ASSERT_NE(m, nullptr);
  EXPECT_LE(PrefillVsIncremental(*m, p.ids, 48), kInvariance);
  const int64_t T = static_cast<int64_t>(p.ids.size());
  auto c1 = m->NewCache(48);
  auto whole = RunCalls(*m, *c1, p.ids, {T}, false);
  auto c2 = m->NewCache(48);
  auto chunked = RunCalls(*m, *c2, p.ids, {5, 4, T - 9}, false);
  EXPECT_LE(Compare(chunked, whole, 512).max_abs, kInvariance);
  // The whole-call reading is not causal: its prefill differs from its decode.
  c.hca.stats = "whole_call";
  auto w = Build(p, c);
  ASSERT_NE(w, nullptr);
  EXPECT_GT(PrefillVsIncremental(*w, p.ids, 48), 1e-2);
}

// With the profile's defaults (capacity 1.0 included: tokens are assigned in
// order, so a later token never takes an earlier one's place), no position's
// logits depend on a later token: changing token 9 leaves rows 0..8 bit for bit.
// Under "whole_call", position 0 sees token 9.
TEST(SeedModel, C15_EarlierPositionsDoNotDependOnLaterTokens) {
  auto p = LoadProfile("P-V4");
  const int64_t T = static_cast<int64_t>(p.ids.size()), V = 512;
  ASSERT_GE(T, 10);
  std::vector<int32_t> changed = p.ids;
  changed[9] = changed[9] == 7 ? 8 : 7;
  for (const std::string stats : {"causal", "whole_call"}) {
    SCOPED_TRACE(stats);
    SeedConfig c = p.config;
    c.hca.stats = stats;
    auto m = Build(p, c);
    ASSERT_NE(m, nullptr);
    auto c1 = m->NewCache(48);
    auto a = RunCalls(*m, *c1, p.ids, {T}, false);
    auto c2 = m->NewCache(48);
    auto b = RunCalls(*m, *c2, changed, {T}, false);
    const std::vector<float> a0(a.begin(), a.begin() + V), b0(b.begin(), b.begin() + V);
    if (stats == "causal") {
      for (int64_t i = 0; i < 9 * V; ++i) ASSERT_EQ(a[i], b[i]) << "row " << i / V;
    } else {
      EXPECT_GT(Compare(a0, b0, V).max_abs, 1e-4);
    }
  }
}

TEST(SeedModel, S021_ResidualLayerNormFusionRunsAndStaysCausal) {
  auto p = LoadProfile("P-V4");
  SeedConfig c = V4Causal(p.config);
  c.csa.fusion_mode = "residual_layernorm";
  auto m = Build(p, c);
  auto w = Build(p, V4Causal(p.config));
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(p.ids.size());
  auto c1 = m->NewCache(48);
  auto a = RunCalls(*m, *c1, p.ids, {T}, false);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  auto c2 = w->NewCache(48);
  auto b = RunCalls(*w, *c2, p.ids, {T}, false);
  EXPECT_GT(Compare(a, b, 512).max_abs, 1e-3);  // a different output definition (C-09)
  EXPECT_LE(PrefillVsIncremental(*m, p.ids, 48), kInvariance);
}

TEST(SeedModel, S022_LongPromptDiffersFromTruncated) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, V4Causal(p.config));
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(p.ids.size()), V = m->info().vocab_size;
  const int64_t W = p.config.csa.segment_window;
  auto c1 = m->NewCache(48);
  auto full = RunCalls(*m, *c1, p.ids, {T}, true);
  std::vector<int32_t> tail(p.ids.end() - W, p.ids.end());
  auto c2 = m->NewCache(48);
  auto cut = RunCalls(*m, *c2, tail, {W}, true);
  double mx = 0;
  for (int64_t i = 0; i < V; ++i)
    mx = std::max(mx, std::fabs(static_cast<double>(full[i]) - cut[i]));
  EXPECT_GT(mx, 1e-3);
}

TEST(SeedModel, S011_HcaWeightsChangeRoutingAndDisabledHcaFallsBack) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  auto cache = m->NewCache(48);
  RunCalls(*m, *cache, p.ids, {static_cast<int64_t>(p.ids.size())}, true);
  const std::vector<int32_t> routing = m->last_step().routes[1].expert;
  // Changed controller weights: different routing.
  auto overlay = std::make_shared<OverlayReader>(p.reader);
  std::vector<float> b2 = overlay->Values("model.layers.1.mlp.hca_controller.fc2.bias");
  for (size_t i = 0; i < b2.size(); ++i) b2[i] += (i % 2 == 0 ? 3.0f : -3.0f);
  overlay->Replace("model.layers.1.mlp.hca_controller.fc2.bias", {32}, b2);
  auto m2 = Build(p, p.config, overlay);
  ASSERT_NE(m2, nullptr);
  auto c2 = m2->NewCache(48);
  RunCalls(*m2, *c2, p.ids, {static_cast<int64_t>(p.ids.size())}, true);
  EXPECT_NE(m2->last_step().routes[1].expert, routing);
  // HCA off: the router reads the FFN input and the forward stays well-formed.
  SeedConfig off = p.config;
  off.hca.enabled = false;
  auto m3 = Build(p, off);
  ASSERT_NE(m3, nullptr);
  auto c3 = m3->NewCache(48);
  auto lg = RunCalls(*m3, *c3, p.ids, {static_cast<int64_t>(p.ids.size())}, true);
  for (float v : lg) ASSERT_TRUE(std::isfinite(v));
}

TEST(SeedModel, S034_HcaSkipThresholdRemovesTokensFromDispatch) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.hca_skip_override = true;
  o.hca_skip_threshold = 1.0;  // every token's mean(w) < 1: all skipped
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(48);
  RunCalls(*m, *cache, p.ids, {static_cast<int64_t>(p.ids.size())}, true);
  for (const auto& r : m->last_step().routes) {
    int64_t sum = 0;
    for (int64_t c : r.counts) sum += c;
    EXPECT_EQ(sum, 0);
  }
  o.hca_skip_threshold = 0.0;  // threshold 0 equals the non-skipping path (the golden)
  m->SetRuntimeOptions(o);
  auto c2 = m->NewCache(48);
  auto a = RunCalls(*m, *c2, p.ids, {static_cast<int64_t>(p.ids.size())}, false);
  auto want = ReadF32(ProfileDir("P-V4") + "/prefill_logits.f32");
  EXPECT_LE(Compare(a, want, m->info().vocab_size).max_abs, kMaxAbs);
}

TEST(SeedModel, S044_S046_CapacityPerStepAndCountersReset) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  auto cache = m->NewCache(48);
  const int64_t T = static_cast<int64_t>(p.ids.size());
  RunCalls(*m, *cache, p.ids, {T}, true);
  const int64_t k = p.config.routed_k(), E = p.config.moe.num_experts;
  for (int64_t l = 0; l < p.config.num_hidden_layers; ++l) {
    const RouteResult& r = m->last_step().routes[l];
    EXPECT_EQ(r.capacity, (T * k + E - 1) / E);
    for (int64_t c : r.counts) EXPECT_LE(c, r.capacity);
  }
  // Two identical decode steps on two caches in the same state: identical routing;
  // the cumulative counter is the sum of the steps.
  auto m2 = Build(p, p.config);
  auto a = m2->NewCache(48);
  auto b = m2->NewCache(48);
  RunCalls(*m2, *a, p.ids, {T}, true);
  RunCalls(*m2, *b, p.ids, {T}, true);
  std::vector<int32_t> next = {5};
  RunCalls(*m2, *a, next, {1}, true);
  auto first = m2->last_step().routes[0];
  RunCalls(*m2, *b, next, {1}, true);
  EXPECT_EQ(m2->last_step().routes[0].expert, first.expert);
  int64_t cum = 0, steps = 0;
  for (int64_t c : m2->router_state(0).cumulative) cum += c;
  steps =
      2 * T * k + 2 * k;  // every slot used: decode never binds (capacity 1 per expert, k distinct)
  EXPECT_LE(cum, steps);
  EXPECT_GT(cum, 0);
}

TEST(SeedModel, S134_FreezeRouterSendsEveryTokenToExperts0And1) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.router.freeze = true;
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(16);
  RunCalls(*m, *cache, p.ids, {10}, true);
  for (const auto& r : m->last_step().routes) {
    ASSERT_EQ(r.k, 2);
    for (int64_t t = 0; t < 10; ++t) {
      EXPECT_EQ(r.expert[t * 2], 0);
      EXPECT_EQ(r.expert[t * 2 + 1], 1);
      EXPECT_FLOAT_EQ(r.weight[t * 2], 0.7f);
      EXPECT_FLOAT_EQ(r.weight[t * 2 + 1], 0.3f);
    }
  }
}

TEST(SeedModel, S051_ExpertMaskIsRespectedInTheModel) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.router.expert_mask = {1, 0, 1, 1};
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(16);
  RunCalls(*m, *cache, p.ids, {10}, true);
  for (const auto& r : m->last_step().routes) EXPECT_EQ(r.counts[1], 0);
}

TEST(SeedModel, S052_ExternalWeightsReachForwardAndAreValidated) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  int64_t moe_layer = -1;
  for (size_t l = 0; l < m->plans().size(); ++l) {
    if (m->plans()[l].ffn == FfnKind::kMoe) moe_layer = static_cast<int64_t>(l);
  }
  ASSERT_GE(moe_layer, 0);
  const int64_t k = EffectiveK(p.config.moe, 1);
  const int64_t V = m->info().vocab_size;
  // Plain run: the router's own weights.
  auto c0 = m->NewCache(16);
  std::vector<float> plain(V), ext(V);
  ASSERT_TRUE(m->Forward(std::span(p.ids.data(), 1), *c0, plain, false).ok());
  const std::vector<int32_t> experts = m->last_step().routes[moe_layer].expert;
  // Mode C: all weight on the first selected expert (sum within 1e-3: renormalised).
  SeedRuntimeOptions o;
  std::vector<float> w(k, 0.0f);
  w[0] = 1.0004f;
  o.external_weights[moe_layer] = w;
  m->SetRuntimeOptions(o);
  auto c1 = m->NewCache(16);
  ASSERT_TRUE(m->Forward(std::span(p.ids.data(), 1), *c1, ext, false).ok());
  const RouteResult& r = m->last_step().routes[moe_layer];
  EXPECT_EQ(r.expert, experts);  // selection unchanged, only the weights come from outside
  EXPECT_NEAR(r.weight[0], 1.0f, 1e-6);
  double diff = 0;
  for (int64_t i = 0; i < V; ++i) diff = std::max(diff, std::fabs(double(plain[i]) - ext[i]));
  EXPECT_GT(diff, 1e-6);
  // Bad inputs: a negative weight, a wrong sum, the wrong count, mask + weights.
  auto fails = [&](std::vector<float> bad, const std::string& what) {
    SeedRuntimeOptions b;
    b.external_weights[moe_layer] = std::move(bad);
    m->SetRuntimeOptions(b);
    auto c = m->NewCache(16);
    Status st = m->Forward(std::span(p.ids.data(), 1), *c, ext, false);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.ToString().find("layer " + std::to_string(moe_layer)), std::string::npos) << what;
    EXPECT_EQ(c->length(), 0) << what;  // the failed call left nothing behind
  };
  std::vector<float> neg(k, 0.0f);
  neg[0] = -1.0f;
  if (k > 1) neg[1] = 2.0f;
  fails(neg, "negative");
  fails(std::vector<float>(k, 0.2f / static_cast<float>(k)), "sum 0.2");
  fails(std::vector<float>(k + 1, 1.0f / static_cast<float>(k + 1)), "count");
  SeedRuntimeOptions both;
  both.external_weights[moe_layer] = w;
  both.router.expert_mask.assign(p.config.moe.num_experts, 1);
  m->SetRuntimeOptions(both);
  auto c2 = m->NewCache(16);
  EXPECT_ERROR(m->Forward(std::span(p.ids.data(), 1), *c2, ext, false),
               StatusCode::kInvalidArgument,
               "an expert mask and external routing weights were both given");
}

TEST(SeedModel, S051_ForcedExpertIsUsedByEveryToken) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.router.force_experts = {static_cast<int>(p.config.moe.num_experts - 1)};
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(16);
  RunCalls(*m, *cache, p.ids, {10}, true);
  int moe_layers = 0;
  for (const auto& r : m->last_step().routes) {
    if (r.counts.empty()) continue;
    ++moe_layers;
    EXPECT_EQ(r.counts[p.config.moe.num_experts - 1], 10);
  }
  EXPECT_GT(moe_layers, 0);
}

TEST(SeedModel, S008_ParameterCountsPerComponentFromTheTensors) {
  for (const std::string name : {"P-V4", "P-CED", "P-V4-7B"}) {
    auto p = LoadProfile(name);
    ASSERT_NE(p.reader, nullptr);
    const auto counts = CountParametersByComponent(*p.reader);
    int64_t sum = 0, total = 0;
    for (const auto& [k, v] : counts) {
      if (k != "total") sum += v;
    }
    for (const TensorInfo& t : p.reader->tensors()) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      total += n;
    }
    EXPECT_EQ(counts.at("total"), total) << name;
    EXPECT_EQ(sum, total) << name;
    EXPECT_EQ(counts.count("other"), 0u) << name << ": every tensor has a component";
    const SeedConfig& c = p.config;
    const int64_t H = c.hidden_size, L = c.num_hidden_layers,
                  qd = c.num_attention_heads * c.head_dim();
    // q, o: [nh·d, H] and [H, nh·d]; k, v: [nkv·d, H]; plus any segment_shift.
    int64_t attn = L * (2 * qd * H + 2 * c.kv_dim() * H);
    for (const TensorInfo& t : p.reader->tensors()) {
      if (t.name.find("segment_shift") != std::string::npos) {
        attn += t.shape[0] * (t.shape.size() > 1 ? t.shape[1] : 1);
      }
    }
    EXPECT_EQ(counts.at("attention"), attn) << name;
    EXPECT_EQ(counts.at("embedding"), c.vocab_size * H) << name;
    // The model's own total agrees with the counter (and not with any declared size).
    auto m = Build(p, p.config);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->info().n_params, total) << name;
  }
}

std::vector<float> DirLogits(const std::string& dir, const std::vector<int32_t>& ids,
                             SeedModel** out = nullptr, std::unique_ptr<Model>* keep = nullptr) {
  auto m = LoadSeedModel(dir, 1);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  auto cache = (*m)->NewCache(32);
  std::vector<float> lg(ids.size() * (*m)->info().vocab_size);
  EXPECT_TRUE((*m)->Forward(ids, *cache, lg, true).ok());
  if (out != nullptr) *out = dynamic_cast<SeedModel*>(m->get());
  if (keep != nullptr) *keep = std::move(*m);
  return lg;
}

std::string TempDir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("dsv4_seed_convert_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  return d.string();
}

TEST(SeedConvert, S143_LayoutOnlyRoundTripKeepsLogits) {
  const std::string in = ProfileDir("P-CED");
  const std::vector<int32_t> ids = {1, 5, 9, 3, 7, 11};
  const auto want = DirLogits(in, ids);
  const std::string ced = TempDir("ced"), back = TempDir("std");
  auto r = ConvertSeedLayout(in, ced, {"ced", false});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->converted, (std::vector<int64_t>{2}));  // the dense layer; 0, 1 are already CED
  EXPECT_TRUE(r->warnings.empty());
  SeedModel* m = nullptr;
  std::unique_ptr<Model> keep;
  auto got = DirLogits(ced, ids, &m, &keep);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->plans()[2].ffn, FfnKind::kCedFused);
  EXPECT_EQ(m->plans()[2].ced_layout, Layout::kColMajor);  // stored col_major, bound in place
  EXPECT_EQ(m->plans()[2].block, BlockKind::kPreNorm);     // layout only
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
  // And back: layer 2 is a SwiGLU again; layers 0/1 carry a bias no SwiGLU has: kept.
  auto b = ConvertSeedLayout(ced, back, {"standard", false});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->converted, (std::vector<int64_t>{2}));
  EXPECT_EQ(b->kept.size(), 2u);
  got = DirLogits(back, ids, &m, &keep);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->plans()[2].ffn, FfnKind::kDense);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
  std::filesystem::remove_all(ced);
  std::filesystem::remove_all(back);
}

TEST(SeedConvert, S143_TopologyCedWarnsAndSetsTheInitialScale) {
  const std::string out = TempDir("topo");
  auto r = ConvertSeedLayout(ProfileDir("P-CED"), out, {"ced", true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("retrain"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("norm-free"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("post_attention_layernorm"), std::string::npos);
  SeedModel* m = nullptr;
  std::unique_ptr<Model> keep;
  DirLogits(out, {1, 5, 9}, &m, &keep);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->plans()[2].block, BlockKind::kCed);
  EXPECT_FLOAT_EQ(m->ced_scale(2), 0.873f);
  // Norm-free as the warning says (S-013): both norms of the converted layer are
  // gone, so the loader applies none (C-18 would apply a kept MLP norm), and the
  // S-014 profile counts no norm dispatch for it.
  auto file = OpenSafetensors(out + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Find("model.layers.2.input_layernorm.weight"), nullptr);
  EXPECT_EQ((*file)->Find("model.layers.2.post_attention_layernorm.weight"), nullptr);
  EXPECT_NE((*file)->Find("model.layers.1.post_attention_layernorm.weight"), nullptr);  // kept
  EXPECT_FALSE(m->plans()[2].ced_mlp_norm);
  SeedRuntimeOptions o;
  o.profile_ops = true;
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(16);
  std::vector<float> lg(512);
  const std::vector<int32_t> ids = {1, 5, 9};
  ASSERT_TRUE(m->Forward(ids, *cache, lg, false).ok());
  EXPECT_EQ(m->op_counts()[2].norm, 0);
  EXPECT_EQ(m->op_counts()[2].top_level, 2);
  std::filesystem::remove_all(out);
}

TEST(SeedConvert, S143_RejectsUnknownTarget) {
  EXPECT_ERROR(ConvertSeedLayout(ProfileDir("P-CED"), TempDir("x"), {"rowmajor", false}),
               StatusCode::kInvalidArgument, "--to 'rowmajor' is not ced or standard");
}
TEST(SeedConvert, S143_RejectsTopologyWithStandard) {
  EXPECT_ERROR(ConvertSeedLayout(ProfileDir("P-CED"), TempDir("x"), {"standard", true}),
               StatusCode::kInvalidArgument, "--topology ced needs --to ced");
}
TEST(SeedConvert, S143_RejectsWritingOverTheInput) {
  EXPECT_ERROR(ConvertSeedLayout(ProfileDir("P-CED"), ProfileDir("P-CED"), {"ced", false}),
               StatusCode::kInvalidArgument, "is the input directory");
}
TEST(SeedConvert, S143_RejectsTaskAdapterModelsToCed) {
  auto r = ConvertSeedLayout(ProfileDir("P-V4-7B"), TempDir("ta"), {"ced", false});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("TaskAdapter"), std::string::npos);
}
TEST(SeedConvert, S143_MissingInputNamesTheFile) {
  auto r = ConvertSeedLayout("/nonexistent/seed", TempDir("none"), {"ced", false});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("/nonexistent/seed"), std::string::npos);
}

TEST(SeedModel, S013_CedScaleZeroEqualsNoAttentionAndScaleShapeIsChecked) {
  auto p = LoadProfile("P-CED");
  auto zero_scale = std::make_shared<OverlayReader>(p.reader);
  auto zero_attn = std::make_shared<OverlayReader>(p.reader);
  for (int l = 0; l < 2; ++l) {  // layers 0, 1 are CED blocks
    const std::string n = "model.layers." + std::to_string(l) + ".";
    ASSERT_NE(p.reader->Find(n + "ced_scale_factor"), nullptr);
    EXPECT_EQ(p.reader->Find(n + "ced_scale_factor")->shape, std::vector<int64_t>{1});
    zero_scale->Replace(n + "ced_scale_factor", {1}, {0.0f});
    zero_attn->Replace(n + "self_attn.o_proj.weight", {32, 32}, std::vector<float>(32 * 32, 0.0f));
  }
  auto a = Build(p, p.config, zero_scale);
  auto b = Build(p, p.config, zero_attn);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->plans()[0].block, BlockKind::kCed);
  EXPECT_EQ(a->plans()[2].block, BlockKind::kPreNorm);  // per-layer topology from the checkpoint
  EXPECT_TRUE(a->plans()[1].ced_mlp_norm);              // C-18 auto
  auto ca = a->NewCache(16);
  auto cb = b->NewCache(16);
  auto la = RunCalls(*a, *ca, p.ids, {12}, false);
  auto lb = RunCalls(*b, *cb, p.ids, {12}, false);
  EXPECT_LE(Compare(la, lb, 512).max_abs, 1e-5);
  // A scale of shape [2] is rejected, naming the tensor.
  auto bad = std::make_shared<OverlayReader>(p.reader);
  bad->Replace("model.layers.0.ced_scale_factor", {2}, {0.5f, 0.5f});
  testing::Profile q = p;
  SeedLoadOptions o;
  o.metadata = p.metadata;
  auto r = SeedModel::Load(bad, p.config, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.0.ced_scale_factor"), std::string::npos);
}

TEST(SeedModel, S074_S076_LayoutDetectedFromMetadataWithoutCopy) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->plans()[0].ced_layout, Layout::kColMajor);  // metadata says col_major
  EXPECT_EQ(m->plans()[1].ced_layout, Layout::kRowMajor);
  EXPECT_EQ(p.metadata.at("dsv4.layout.model.layers.0.mlp.ced_weight"), "col_major");
}

// S-079 (no device backend here): the host analogue of "the upload keeps the
// layout" — the forward reads the stored tensor in place. The bound ced_weight
// view's data pointer is the mapped file tensor's, its strides are the stored
// layout's ((1, I) col_major, (H, 1) row_major), and the bytes it reads are the
// file's bytes at the tensor's offset; forwards through both CED paths leave it so.
TEST(SeedModel, S079_BoundCedViewIsTheMappedFileTensorInPlace) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  const int64_t H = p.config.hidden_size;
  // The file's bytes, read independently of the mapping.
  auto file = ReadFileToString(ProfileDir("P-CED") + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file->substr(8, header_len));
  auto check = [&](int64_t l, bool col_major) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const std::string name = "model.layers." + std::to_string(l) + ".mlp.ced_weight";
    const TensorInfo* ti = p.reader->Find(name);
    ASSERT_NE(ti, nullptr);
    const int64_t I = ti->shape[0];
    const TensorView& w = m->ced_weights(l).fused;
    EXPECT_EQ(w.data, ti->data);  // no re-pack, no copy
    ASSERT_EQ(w.rank, 2);
    EXPECT_EQ(w.sizes[0], I);
    EXPECT_EQ(w.sizes[1], H);
    EXPECT_EQ(w.strides[0], col_major ? 1 : H);
    EXPECT_EQ(w.strides[1], col_major ? I : 1);
    EXPECT_EQ(DetectLayout(w), col_major ? Layout::kColMajor : Layout::kRowMajor);
    const uint64_t begin = header[name]["data_offsets"][0].get<uint64_t>();
    EXPECT_EQ(std::memcmp(w.data, file->data() + 8 + header_len + begin, ti->nbytes), 0);
    EXPECT_EQ(m->ced_weights(l).down.data,
              p.reader->Find("model.layers." + std::to_string(l) + ".mlp.down_proj.weight")->data);
  };
  check(0, true);
  check(1, false);
  for (CedDispatch d : {CedDispatch::kFused, CedDispatch::kBaseline}) {
    SeedRuntimeOptions o;
    o.ced_dispatch = d;
    m->SetRuntimeOptions(o);
    auto cache = m->NewCache(16);
    RunCalls(*m, *cache, p.ids, {4, 1}, true);
  }
  check(0, true);
  check(1, false);
  // Asking for another layout (S-077) copies: then the pointer is not the file's.
  SeedConfig c = p.config;
  c.ced.layout = "false";
  auto copied = Build(p, c);
  ASSERT_NE(copied, nullptr);
  EXPECT_NE(copied->ced_weights(0).fused.data,
            p.reader->Find("model.layers.0.mlp.ced_weight")->data);
  EXPECT_EQ(copied->ced_weights(1).fused.data,
            p.reader->Find("model.layers.1.mlp.ced_weight")->data);  // already row_major
}

// Layout metadata on every tensor (not only mlp.ced_weight): a copy of a
// profile directory whose tensors in `col_major` are stored column by column
// (the articles' CED signal, stride (1, rows)), with `meta` as __metadata__.
std::string WriteLayoutVariant(const std::string& profile, const std::string& name,
                               const std::set<std::string>& col_major,
                               const std::map<std::string, std::string>& meta) {
  const std::string out = TempDir(name);
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(ProfileDir(profile) + "/config.json", out + "/config.json");
  auto file = OpenSafetensors(ProfileDir(profile) + "/model.safetensors");
  EXPECT_TRUE(file.ok());
  std::map<std::string, std::string> all = (*file)->metadata();
  for (const auto& [k, v] : meta) all[k] = v;
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<float>> owned;
  std::vector<std::span<const uint8_t>> data;
  owned.reserve((*file)->tensors().size());
  for (const TensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.dtype, DType::kF32);
    const float* src = static_cast<const float*>(t.data);
    std::vector<float> v(src, src + t.nbytes / 4);
    if (col_major.count(t.name)) {
      const int64_t R = t.shape[0], C = t.shape[1];
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) v[c * R + r] = src[r * C + c];
      }
    }
    owned.push_back(std::move(v));
    entries.push_back({t.name, "F32", t.shape});
    data.push_back(
        {reinterpret_cast<const uint8_t*>(owned.back().data()), owned.back().size() * 4});
  }
  Status st = WriteSafetensors(out + "/model.safetensors", entries, data, all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// S-074 on every tensor: dense gate_proj / up_proj (the pre-norm layer of P-CED),
// an attention projection and lm_head marked col_major load as the logical
// matrices: the logits equal the row-major checkpoint's, bit for bit. The same
// bytes without the marks give other logits (what the loader once did silently).
TEST(SeedModel, S074_ColMajorMetadataIsHonouredOnEveryMatrix) {
  const std::vector<int32_t> ids = {1, 5, 9, 3, 7, 11};
  const auto want = DirLogits(ProfileDir("P-CED"), ids);
  const std::set<std::string> marked = {"model.layers.2.mlp.gate_proj.weight",
                                        "model.layers.2.mlp.up_proj.weight",
                                        "model.layers.2.mlp.down_proj.weight",
                                        "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"};
  std::map<std::string, std::string> meta;
  for (const std::string& n : marked) meta["dsv4.layout." + n] = "col_major";
  const std::string dir = WriteLayoutVariant("P-CED", "colmajor_dense", marked, meta);
  EXPECT_EQ(DirLogits(dir, ids), want);
  // Only the gate marked, and the metadata dropped: the bytes read as row-major differ.
  const std::string gate = "model.layers.2.mlp.gate_proj.weight";
  const std::string unmarked = WriteLayoutVariant("P-CED", "colmajor_unmarked", {gate}, {});
  EXPECT_GT(Compare(DirLogits(unmarked, ids), want, 512).max_abs, 1e-3);
  // "row_major" is accepted and changes nothing.
  const std::string row =
      WriteLayoutVariant("P-CED", "rowmajor_marked", {}, {{"dsv4.layout." + gate, "row_major"}});
  EXPECT_EQ(DirLogits(row, ids), want);
  for (const std::string& d : {dir, unmarked, row}) std::filesystem::remove_all(d);
}

// Layout signals that cannot be honoured are refused, naming the tensor or key.
TEST(SeedModel, S074_UnreadableLayoutMetadataIsRefusedNamingIt) {
  struct Case {
    std::string what;
    std::set<std::string> transposed;
    std::map<std::string, std::string> meta;
    StatusCode code;
    std::string names;  // what the message must contain
  };
  const std::string gate = "model.layers.2.mlp.gate_proj.weight";
  const std::vector<Case> cases = {
      {"a stride key",
       {gate},
       {{"dsv4.stride." + gate, "1,48"}},
       StatusCode::kInvalidArgument,
       "'dsv4.stride." + gate + "'"},
      {"an unknown layout value",
       {},
       {{"dsv4.layout." + gate, "column_major"}},
       StatusCode::kInvalidArgument,
       "'dsv4.layout." + gate + "' = 'column_major'"},
      {"a key naming no tensor",
       {},
       {{"dsv4.layout.model.layers.9.mlp.gate_proj.weight", "col_major"}},
       StatusCode::kInvalidArgument,
       "names no tensor"},
      {"col_major on a vector",
       {},
       {{"dsv4.layout.model.norm.weight", "col_major"}},
       StatusCode::kNotFound,
       "model.norm.weight: layout metadata says col_major"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = WriteLayoutVariant("P-CED", "bad_layout", c.transposed, c.meta);
    auto m = LoadSeedModel(dir, 1);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), c.code);
    EXPECT_NE(m.status().message().find(c.names), std::string::npos) << m.status().ToString();
    std::filesystem::remove_all(dir);
  }
}

TEST(SeedModel, S075_S077_LayoutOverrideGivesTheSameLogits) {
  auto p = LoadProfile("P-CED");
  auto want = ReadF32(ProfileDir("P-CED") + "/prefill_logits.f32");
  for (const char* mode : {"true", "false"}) {
    SeedConfig c = p.config;
    c.ced.layout = mode;
    auto m = Build(p, c);
    ASSERT_NE(m, nullptr);
    const Layout expect = std::string(mode) == "true" ? Layout::kColMajor : Layout::kRowMajor;
    EXPECT_EQ(m->plans()[0].ced_layout, expect);
    EXPECT_EQ(m->plans()[1].ced_layout, expect);
    auto cache = m->NewCache(16);
    auto got = RunCalls(*m, *cache, p.ids, {12}, false);
    EXPECT_LE(Compare(got, want, 512).max_abs, kMaxAbs) << mode;
  }
}

TEST(SeedModel, S001_S002_S010_CheckpointMismatchNamesTheTensor) {
  auto p = LoadProfile("P-V4");
  {  // a missing expert
    auto o = std::make_shared<OverlayReader>(p.reader);
    o->Remove("model.layers.1.mlp.experts.7.w2.weight");
    SeedLoadOptions lo;
    auto r = SeedModel::Load(o, p.config, lo);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("model.layers.1.mlp.experts.7.w2.weight"),
              std::string::npos);
  }
  {  // a changed hidden_size: every dependent tensor mismatches at load, not at first forward
    SeedConfig c = p.config;
    c.hidden_size = 40;
    auto r = SeedModel::Load(p.reader, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("model.layers.0.self_attn.q_proj.weight"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(SeedModel, S007_S026_ContextBeyondTheScaledLimitIsRefused) {
  auto p = LoadProfile("P-V4");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->info().max_context, 64);  // 32 positions × linear factor 2
  auto cache = m->NewCache(80);
  std::vector<int32_t> ids(65, 5);
  std::vector<float> lg(512);
  Status st = m->Forward(ids, *cache, lg, false);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.hint().find("rope_scaling"), std::string::npos);
}

TEST(SeedModel, S057_TaskAdapterLayerOutOfRangeFails) {
  auto p = LoadProfile("P-V4-7B");
  auto o = std::make_shared<OverlayReader>(p.reader);
  // A layer embedding with one row too few: rejected at construction, naming the tensor.
  o->Replace("model.task_adapter.layer_embedding.weight", {1, 8}, std::vector<float>(8, 0.1f));
  auto r = SeedModel::Load(o, p.config, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.task_adapter.layer_embedding.weight"),
            std::string::npos);
}

TEST(SeedModel, S055_TaskGateZeroReproducesThePlainMlp) {
  auto p = LoadProfile("P-V4-7B");
  auto zero = std::make_shared<OverlayReader>(p.reader);
  auto none = std::make_shared<OverlayReader>(p.reader);
  for (int l = 0; l < 2; ++l) {
    zero->Replace("model.layers." + std::to_string(l) + ".mlp.task_gate_weight", {1}, {0.0f});
  }
  SeedConfig plain = p.config;
  plain.task_adapter.enabled = false;
  auto a = Build(p, p.config, zero);
  auto b = Build(p, plain, none);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  SeedRuntimeOptions o;
  o.pruner = false;
  a->SetRuntimeOptions(o);
  b->SetRuntimeOptions(o);
  auto ca = a->NewCache(16), cb = b->NewCache(16);
  EXPECT_EQ(RunCalls(*a, *ca, p.ids, {16}, false), RunCalls(*b, *cb, p.ids, {16}, false));
}

TEST(SeedModel, S064_EvictHintDropsTheRangeAndGenerationContinues) {
  auto p = LoadProfile("P-V4-7B");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  SeedRuntimeOptions o;
  o.pruner = false;
  m->SetRuntimeOptions(o);
  auto cache = m->NewCache(16);
  auto& c = static_cast<SeedCache&>(*cache);
  RunCalls(*m, *cache, p.ids, {10}, true);
  ASSERT_TRUE(c.EvictRange(2, 6).ok());
  for (int64_t pos = 2; pos < 6; ++pos) EXPECT_FALSE(c.holds(pos));
  EXPECT_TRUE(c.holds(1));
  EXPECT_EQ(c.length(), 10);  // positions are not renumbered
  std::vector<int32_t> next = {p.ids[10]};
  std::vector<float> lg(512);
  ASSERT_TRUE(m->Forward(next, *cache, lg, false).ok());
  EXPECT_TRUE(c.holds(10));
  EXPECT_ERROR(c.EvictRange(5, 40), StatusCode::kOutOfRange,
               "evict hint [5, 40) is outside the sequence");
}

TEST(SeedModel, S065_WriteThenEvictAndFreedSlotsAreReused) {
  auto p = LoadProfile("P-V4-7B");
  auto on = Build(p, p.config);
  auto off = Build(p, p.config);
  ASSERT_NE(on, nullptr);
  SeedRuntimeOptions o;
  o.pruner = false;
  off->SetRuntimeOptions(o);
  auto c_on = on->NewCache(16), c_off = off->NewCache(16);
  // The step's own pruning does not change its outputs.
  EXPECT_EQ(RunCalls(*on, *c_on, p.ids, {10}, false), RunCalls(*off, *c_off, p.ids, {10}, false));
  const std::vector<int64_t> evicted = on->last_step().pruner.evict;
  ASSERT_FALSE(evicted.empty());
  auto& c = static_cast<SeedCache&>(*c_on);
  EXPECT_LE(c.live_tokens(), p.config.kv_pruner.kv_budget);
  // The next token takes the lowest freed slot (slots were 0..9, all used before).
  std::vector<int32_t> next = {p.ids[10]};
  std::vector<float> lg(512);
  ASSERT_TRUE(on->Forward(next, *c_on, lg, false).ok());
  EXPECT_EQ(c.slot_of(10), evicted.front());
}

// A cache reused for another request (Truncate(0), as the serving engine does)
// is indistinguishable from a new one: the pruner's adapted efficiency factor
// (S-063), its counters, the live list, the HCA history, the TaskAdapter output
// and the S-053 reweighting bias all start over, so B's logits and evictions
// after a long request A equal B's on a fresh cache, bit for bit.
TEST(SeedModel, S063_S053_TruncateToZeroGivesAFreshCache) {
  for (const std::string profile : {"P-V4-7B", "P-V4"}) {
    SCOPED_TRACE(profile);
    auto p = LoadProfile(profile);
    auto m = Build(p, p.config);
    ASSERT_NE(m, nullptr);
    if (profile == "P-V4") {
      SeedRuntimeOptions o;
      o.router.reweight = true;
      m->SetRuntimeOptions(o);
    }
    const int64_t ctx = m->info().max_context;
    std::vector<int32_t> a, b;
    for (int i = 0; i < 40; ++i) a.push_back(static_cast<int32_t>(3 + (i * 37) % 500));
    for (int i = 0; i < 14; ++i) b.push_back(static_cast<int32_t>(3 + (i * 91 + 11) % 500));
    auto fresh = m->NewCache(ctx);
    std::vector<std::vector<int64_t>> live_fresh, live_reused;
    const std::vector<int64_t> b_calls = {6, 1, 1, 1, 1, 1, 1, 1, 1};
    auto want = RunCalls(*m, *fresh, b, b_calls, false, &live_fresh);
    auto reused = m->NewCache(ctx);
    RunCalls(*m, *reused, a, {20, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
             true);
    auto& rc = static_cast<SeedCache&>(*reused);
    if (profile == "P-V4-7B") {  // the long request moved the factor away from the config's
      EXPECT_NE(rc.pruner_efficiency(), p.config.kv_pruner.efficiency_factor);
      EXPECT_GT(rc.evicted_total(), 0);
    } else {  // and the reweighting bias away from zero
      bool moved = false;
      for (float x : rc.router_state(0).bias) moved = moved || x != 0.0f;
      EXPECT_TRUE(moved);
    }
    reused->Truncate(0);
    EXPECT_EQ(rc.length(), 0);
    EXPECT_EQ(rc.live_tokens(), 0);
    EXPECT_EQ(rc.evicted_total(), 0);
    EXPECT_EQ(rc.peak_live(), 0);
    EXPECT_EQ(rc.pruner_efficiency(),
              p.config.kv_pruner.enabled ? p.config.kv_pruner.efficiency_factor : 0.0);
    for (int64_t l = 0; l < p.config.num_hidden_layers; ++l) {
      EXPECT_TRUE(rc.adapter_out(l).empty());
      for (float x : rc.router_state(l).bias) EXPECT_EQ(x, 0.0f);
      EXPECT_EQ(rc.router_state(l).reweight_count, 0);
    }
    auto got = RunCalls(*m, *reused, b, b_calls, false, &live_reused);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
    EXPECT_EQ(live_reused, live_fresh);
    EXPECT_EQ(rc.pruner_efficiency(), static_cast<SeedCache&>(*fresh).pruner_efficiency());
  }
}

// ---------------------------------------------------------------- S-015 CED dispatch

int64_t CedLayers(const SeedModel& m) {
  int64_t n = 0;
  for (const SeedLayerPlan& p : m.plans()) n += p.ffn == FfnKind::kCedFused ? 1 : 0;
  return n;
}

// auto: a call of fewer than ced_min_batch (8) tokens takes the baseline path,
// 8 or more the fused path — counted per CED layer call, logged once per path.
TEST(SeedModel, S015_AutoDispatchSplitsAtEightTokens) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  const int64_t n_ced = CedLayers(*m);
  ASSERT_EQ(n_ced, 2);
  EXPECT_EQ(m->runtime_options().ced_dispatch, CedDispatch::kAuto);
  EXPECT_EQ(m->runtime_options().ced_min_batch, 8);
  const std::vector<int32_t> ids(p.ids.begin(), p.ids.begin() + 7);
  const LogLevel level = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  auto c7 = m->NewCache(16);
  RunCalls(*m, *c7, ids, {7}, true);  // 7 tokens: baseline
  EXPECT_EQ(m->ced_dispatch_counts().baseline, n_ced);
  EXPECT_EQ(m->ced_dispatch_counts().fused, 0);
  auto c8 = m->NewCache(16);
  const std::vector<int32_t> ids8(p.ids.begin(), p.ids.begin() + 8);
  RunCalls(*m, *c8, ids8, {8}, true);  // 8 tokens: fused
  EXPECT_EQ(m->ced_dispatch_counts().fused, n_ced);
  RunCalls(*m, *c8, {p.ids[8]}, {1}, true);  // a decode step: baseline again
  EXPECT_EQ(m->ced_dispatch_counts().baseline, 2 * n_ced);
  const std::string log = ::testing::internal::GetCapturedStderr();
  SetLogLevel(level);
  auto count = [&](const std::string& what) {
    int64_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("takes the baseline"), 1) << log;  // logged once, not per call
  EXPECT_EQ(count("takes the CED fused"), 1) << log;
  m->ResetCounters();
  EXPECT_EQ(m->ced_dispatch_counts().fused + m->ced_dispatch_counts().baseline, 0);
}

// The override forces a path for every batch, and both paths give the same
// logits (fp32 summation order only) and match the reference.
TEST(SeedModel, S015_OverrideForcesThePathAndBothPathsAgree) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(p.ids.size()), n_ced = CedLayers(*m);
  std::vector<std::vector<float>> out;
  for (CedDispatch d : {CedDispatch::kFused, CedDispatch::kBaseline}) {
    SeedRuntimeOptions o;
    o.ced_dispatch = d;
    m->SetRuntimeOptions(o);
    m->ResetCounters();
    auto prefill = m->NewCache(16);
    std::vector<float> a = RunCalls(*m, *prefill, p.ids, {T}, false);
    auto inc = m->NewCache(16);
    std::vector<float> b = RunCalls(*m, *inc, p.ids, std::vector<int64_t>(T, 1), false);
    const CedDispatchCounts& n = m->ced_dispatch_counts();
    EXPECT_EQ(d == CedDispatch::kFused ? n.fused : n.baseline, (1 + T) * n_ced);
    EXPECT_EQ(d == CedDispatch::kFused ? n.baseline : n.fused, 0);
    a.insert(a.end(), b.begin(), b.end());
    out.push_back(std::move(a));
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  double mx = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(out[0][i]) - out[1][i]));
  }
  EXPECT_LE(mx, 1e-5);
  EXPECT_GT(mx, -1.0);
  // Forced baseline matches the float64 reference (the fused path is SeedGolden's).
  std::vector<float> want = ReadF32(ProfileDir("P-CED") + "/prefill_logits.f32");
  std::vector<float> got(out[1].begin(), out[1].begin() + static_cast<int64_t>(want.size()));
  auto d = Compare(got, want, m->info().vocab_size);
  EXPECT_EQ(d.argmax_mismatch, 0);
  EXPECT_LE(d.max_abs, kMaxAbs);
}

// The two CED MLP paths on their own, both layouts, against the explicit oracle.
TEST(SeedCedDispatch, S015_BaselineEqualsFusedInBothLayouts) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->plans()[0].ced_layout, Layout::kColMajor);  // stored col_major, read in place
  EXPECT_EQ(m->plans()[1].ced_layout, Layout::kRowMajor);
  ThreadPool pool(2);
  const int64_t H = p.config.hidden_size, T = 9;
  std::vector<float> x(T * H);
  for (int64_t i = 0; i < T * H; ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  for (int64_t l = 0; l < 2; ++l) {
    const std::string n = "model.layers." + std::to_string(l) + ".";
    const TensorInfo* ti = p.reader->Find(n + "mlp.ced_weight");
    ASSERT_NE(ti, nullptr);
    const int64_t I = ti->shape[0];
    TensorView fused = l == 0 ? ColMajorView(ti->data, DType::kF32, I, H)
                              : TensorView::Contiguous(ti->data, DType::kF32, {I, H});
    const TensorInfo* bi = p.reader->Find(n + "mlp.ced_bias");
    const float* b = static_cast<const float*>(bi->data);
    CedMlpWeights w{fused, std::vector<float>(b, b + I),
                    TensorView::Contiguous(p.reader->Find(n + "mlp.down_proj.weight")->data,
                                           DType::kF32, {H, I})};
    std::vector<float> a(T * H), c(T * H), e(T * H);
    CedScratch s;
    CedMlpForward(pool, w, x.data(), T, a.data(), s);
    CedMlpBaseline(pool, w, x.data(), T, c.data(), s);
    CedMlpExplicit(w, x.data(), T, e.data());
    for (int64_t i = 0; i < T * H; ++i) {
      EXPECT_NEAR(a[i], e[i], 1e-5) << "layer " << l;
      EXPECT_NEAR(c[i], e[i], 1e-5) << "layer " << l;
    }
  }
}

// ---------------------------------------------------------------- S-014 op profiling

// The CPU analogue of kernel launches: dispatches per block. A CED block (P-CED
// layer 0) dispatches no norm and 2 top-level sub-blocks; the C-18 CED block
// that keeps a norm before its MLP (layer 1) dispatches that one norm; the
// pre-norm reference block (layer 2) dispatches both of its norms.
TEST(SeedModel, S014_CedBlockDispatchesNoNormAndTwoSubBlocks) {
  auto p = LoadProfile("P-CED");
  auto m = Build(p, p.config);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->plans()[0].block, BlockKind::kCed);
  ASSERT_FALSE(m->plans()[0].ced_mlp_norm);
  ASSERT_TRUE(m->plans()[1].ced_mlp_norm);
  ASSERT_EQ(m->plans()[2].block, BlockKind::kPreNorm);
  const int64_t T = static_cast<int64_t>(p.ids.size());
  // Off (the default): nothing is counted.
  auto c0 = m->NewCache(16);
  RunCalls(*m, *c0, p.ids, {T}, true);
  for (const BlockOpCounts& b : m->op_counts()) EXPECT_EQ(b.calls + b.norm + b.matmul, 0);
  SeedRuntimeOptions o;
  o.profile_ops = true;
  m->SetRuntimeOptions(o);
  auto c1 = m->NewCache(16);
  RunCalls(*m, *c1, p.ids, {T}, true);  // one 12-token call: CED layers take the fused path
  const auto& n = m->op_counts();
  ASSERT_EQ(n.size(), 3u);
  for (const BlockOpCounts& b : n) {
    EXPECT_EQ(b.calls, 1);
    EXPECT_EQ(b.attention, 1);
  }
  EXPECT_EQ(n[0].norm, 0);
  EXPECT_LE(n[0].top_level, 2);
  EXPECT_EQ(n[0].matmul, 4 + 2);  // q, k, v, o; fused [I, H] product, down
  EXPECT_EQ(n[1].norm, 1);
  EXPECT_EQ(n[1].top_level, 3);
  EXPECT_EQ(n[2].norm, 2);
  EXPECT_EQ(n[2].top_level, 4);
  EXPECT_EQ(n[2].matmul, 4 + 3);  // q, k, v, o; gate, up, down
  // A decode step: the baseline CED path dispatches one more product (gate and up apart).
  RunCalls(*m, *c1, {p.ids[0]}, {1}, true);
  EXPECT_EQ(n[0].calls, 2);
  EXPECT_EQ(n[0].matmul, 6 + 4 + 3);
  EXPECT_EQ(n[0].norm, 0);
  EXPECT_EQ(n[2].norm, 4);
}

}  // namespace
}  // namespace dsv4::seed
