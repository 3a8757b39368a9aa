// EngineRuntimeOptions (engine/engine_options.h): the CLI spellings' parsers,
// one bad-input test per rejected case, and ApplyEngineOptions on the seed
// profiles (tests/data/seed), on DeepSeek-V4's scored routers (the tiny
// checkpoints of tests/data/deepseek_v4) and on a model that takes no runtime
// policies.
#include "engine/engine_options.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <map>
#include <span>

#include "engine/loader.h"
#include "model/deepseek_v4/model.h"
#include "model/seed/model.h"

namespace dsv4 {
namespace {

std::string SeedDir(const std::string& p) { return std::string(DSV4_TEST_DATA_DIR) + "/seed/" + p; }

std::unique_ptr<seed::SeedModel> LoadSeed(const std::string& profile) {
  auto m = LoadSeedModel(SeedDir(profile), 1);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  return std::unique_ptr<seed::SeedModel>(dynamic_cast<seed::SeedModel*>(m->release()));
}

TEST(EngineOptions, ParseIndexList) {
  auto v = ParseIndexList("0,2,5", "--expert-mask");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<int32_t>{0, 2, 5}));
}
TEST(EngineOptions, ParseIndexListRejectsEmpty) {
  EXPECT_ERROR(ParseIndexList("", "--expert-mask"), StatusCode::kInvalidArgument,
               "--expert-mask: empty expert list");
}
TEST(EngineOptions, ParseIndexListRejectsNegative) {
  auto v = ParseIndexList("1,-2", "--expert-mask");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().ToString().find("--expert-mask"), std::string::npos);
}
TEST(EngineOptions, ParseIndexListRejectsGarbage) {
  EXPECT_ERROR(ParseIndexList("1,x", "f"), StatusCode::kInvalidArgument,
               "f: 'x' is not an expert index");
  EXPECT_ERROR(ParseIndexList("1,", "f"), StatusCode::kInvalidArgument,
               "f: '' is not an expert index");
  EXPECT_ERROR(ParseIndexList("1 2", "f"), StatusCode::kInvalidArgument,
               "f: '1 2' is not an expert index");
}
TEST(EngineOptions, ParseIndexListRejectsDuplicates) {
  EXPECT_ERROR(ParseIndexList("1,1", "f"), StatusCode::kInvalidArgument,
               "f: expert 1 is listed twice");
}

TEST(EngineOptions, S134_ParseFreezeSpec) {
  EngineRuntimeOptions o;
  ASSERT_TRUE(ParseFreezeSpec("0,1:0.7,0.3", o).ok());
  EXPECT_TRUE(o.freeze_router);
  EXPECT_EQ(o.freeze_experts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(o.freeze_weights, (std::vector<float>{0.7f, 0.3f}));
  EngineRuntimeOptions even;
  ASSERT_TRUE(ParseFreezeSpec("2,3", even).ok());
  EXPECT_EQ(even.freeze_weights, (std::vector<float>{0.5f, 0.5f}));
}
TEST(EngineOptions, ParseFreezeSpecRejectsWeightCountMismatch) {
  EngineRuntimeOptions o;
  EXPECT_ERROR(ParseFreezeSpec("0,1:0.7", o), StatusCode::kInvalidArgument,
               "--freeze-router: 2 experts but 1 weights");
}
TEST(EngineOptions, ParseFreezeSpecRejectsBadWeight) {
  EngineRuntimeOptions o;
  EXPECT_ERROR(ParseFreezeSpec("0,1:0.7,abc", o), StatusCode::kInvalidArgument,
               "--freeze-router: weight 'abc' is not a number >= 0");
  EXPECT_ERROR(ParseFreezeSpec("0,1:0.7,-0.3", o), StatusCode::kInvalidArgument,
               "--freeze-router: weight '-0.3' is not a number >= 0");
  EXPECT_ERROR(ParseFreezeSpec("0,1:0.7,nan", o), StatusCode::kInvalidArgument,
               "--freeze-router: weight 'nan' is not a number >= 0");
}
TEST(EngineOptions, ParsePrunerPolicy) {
  EXPECT_EQ(*ParsePrunerPolicy("on"), PrunerPolicy::kOn);
  EXPECT_EQ(*ParsePrunerPolicy("off"), PrunerPolicy::kOff);
  EXPECT_EQ(*ParsePrunerPolicy("auto"), PrunerPolicy::kModelDefault);
  EXPECT_ERROR(ParsePrunerPolicy("yes"), StatusCode::kInvalidArgument,
               "--kv-pruner: 'yes' is not on, off or auto");
}

TEST(EngineOptions, AppliesRouterOptionsToTheSeedModel) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  const int64_t E = m->config().moe.num_experts;
  EngineRuntimeOptions o;
  o.router_capacity = 0;
  o.expert_allow = {0, static_cast<int32_t>(E - 1)};
  o.reweight_router = true;
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  const auto& r = m->runtime_options().router;
  EXPECT_EQ(r.capacity_factor, 0);
  ASSERT_EQ(static_cast<int64_t>(r.expert_mask.size()), E);
  EXPECT_EQ(r.expert_mask[0], 1);
  EXPECT_EQ(r.expert_mask[1], 0);
  EXPECT_EQ(r.expert_mask[E - 1], 1);
  EXPECT_TRUE(r.reweight);
  // The mask reaches routing: only experts 0 and E-1 get tokens.
  auto cache = m->NewCache(16);
  std::vector<int32_t> ids = {1, 5, 9, 3};
  std::vector<float> logits(m->info().vocab_size);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
  int moe_layers = 0;
  for (const auto& rr : m->last_step().routes) {
    if (rr.counts.empty()) continue;
    ++moe_layers;
    for (int64_t e = 1; e + 1 < E; ++e) EXPECT_EQ(rr.counts[e], 0);
  }
  EXPECT_GT(moe_layers, 0);
}

TEST(EngineOptions, S134_FreezeReachesTheModel) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  ASSERT_TRUE(ParseFreezeSpec("1:1.0", o).ok());
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  auto cache = m->NewCache(16);
  std::vector<int32_t> ids = {1, 5, 9};
  std::vector<float> logits(m->info().vocab_size);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
  for (const auto& rr : m->last_step().routes) {
    if (!rr.counts.empty()) {
      EXPECT_EQ(rr.counts[1], 3);
    }
  }
}

TEST(EngineOptions, RejectsExpertOutOfRange) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.expert_allow = {static_cast<int32_t>(m->config().moe.num_experts)};
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("--expert-mask"), std::string::npos);
}

TEST(EngineOptions, RejectsPrunerOnForAModelWithout) {
  auto m = LoadSeed("P-CED");
  ASSERT_NE(m, nullptr);
  ASSERT_FALSE(m->config().kv_pruner.enabled);
  EngineRuntimeOptions o;
  o.kv_pruner = PrunerPolicy::kOn;
  EXPECT_ERROR(ApplyEngineOptions(*m, o), StatusCode::kInvalidArgument,
               "--kv-pruner on: this model has no SemanticKVPruner");
}

TEST(EngineOptions, RejectsRouterOptionsForAModelWithoutMoe) {
  auto m = LoadSeed("P-CED");
  ASSERT_NE(m, nullptr);
  ASSERT_FALSE(m->config().moe.enabled);
  EngineRuntimeOptions o;
  o.reweight_router = true;
  EXPECT_ERROR(ApplyEngineOptions(*m, o), StatusCode::kInvalidArgument,
               "router options given, but this seed model has no MoE layers");
}

// S-059…S-065 as an engine policy: --kv-pruner off keeps every token; on (with a
// budget override) evicts down to the budget.
TEST(EngineOptions, S065_PrunerOnOffAndBudgetOverride) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 14; ++i) ids.push_back((i * 7 + 3) % 60 + 1);
  auto live_after = [&](const EngineRuntimeOptions& o) -> int64_t {
    auto m = LoadSeed("P-V4-7B");
    if (m == nullptr) return -1;
    EXPECT_TRUE(ApplyEngineOptions(*m, o).ok());
    auto cache = m->NewCache(32);
    std::vector<float> logits(m->info().vocab_size);
    for (int32_t id : ids) {
      EXPECT_TRUE(m->Forward(std::span(&id, 1), *cache, logits, false).ok());
    }
    return static_cast<seed::SeedCache&>(*cache).live_tokens();
  };
  EngineRuntimeOptions off;
  off.kv_pruner = PrunerPolicy::kOff;
  EXPECT_EQ(live_after(off), 14);
  EngineRuntimeOptions on;
  on.kv_pruner = PrunerPolicy::kOn;
  EXPECT_LE(live_after(on), 8);  // the config's kv_budget
  EngineRuntimeOptions small = on;
  small.kv_budget = 4;
  EXPECT_LE(live_after(small), 4);
}

// --kv-budget below what the pruner can hold (more than protect_sink 1 +
// protect_recent 2 for P-V4-7B, so 4) is refused naming the flag, the value and
// the minimum — 0 included (it once meant 1, then was exceeded); the minimum
// itself is accepted and held. A model without a pruner refuses any budget.
TEST(EngineOptions, S063_KvBudgetBelowTheProtectedTokensIsRefused) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->config().kv_pruner.min_budget(), 4);
  for (int64_t bad : {0, 1, 3}) {
    EngineRuntimeOptions o;
    o.kv_budget = bad;
    Status r = ApplyEngineOptions(*m, o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.message().find("--kv-budget " + std::to_string(bad) +
                               " is below this model's minimum of 4"),
              std::string::npos)
        << r.ToString();
    EXPECT_NE(r.hint().find("--kv-budget 4 or more"), std::string::npos);
  }
  EngineRuntimeOptions ok;
  ok.kv_budget = 4;
  ASSERT_TRUE(ApplyEngineOptions(*m, ok).ok());
  auto cache = m->NewCache(32);
  std::vector<float> logits(m->info().vocab_size);
  for (int32_t i = 0; i < 20; ++i) {
    const int32_t id = (i * 7 + 3) % 60 + 1;
    ASSERT_TRUE(m->Forward(std::span(&id, 1), *cache, logits, false).ok());
    EXPECT_LE(static_cast<seed::SeedCache&>(*cache).live_tokens(), 4) << "after token " << i;
  }
  auto no_pruner = LoadSeed("P-V4");
  ASSERT_NE(no_pruner, nullptr);
  Status r = ApplyEngineOptions(*no_pruner, ok);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.message().find("--kv-budget 4: this model has no SemanticKVPruner"),
            std::string::npos)
      << r.ToString();
}

TEST(EngineOptions, ModelsWithoutRuntimePoliciesRefuseThem) {
  LoadOptions lo;
  lo.model_path = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin";
  lo.threads = 1;
  auto loaded = LoadModel(lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(
      ApplyEngineOptions(*loaded->model, EngineRuntimeOptions{}).ok());  // nothing set: fine
  EngineRuntimeOptions o;
  o.router_capacity = 1.0;
  Status st = ApplyEngineOptions(*loaded->model, o);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.ToString().find("--router-capacity"), std::string::npos);
}

// ---------------------------------------------------------------- S-015 override

TEST(EngineOptions, S015_ParseCedDispatch) {
  EXPECT_EQ(*ParseCedDispatch("auto"), CedDispatchPolicy::kAuto);
  EXPECT_EQ(*ParseCedDispatch("fused"), CedDispatchPolicy::kFused);
  EXPECT_EQ(*ParseCedDispatch("baseline"), CedDispatchPolicy::kBaseline);
  auto bad = ParseCedDispatch("ced");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("--ced-dispatch"), std::string::npos);
}

TEST(EngineOptions, S015_CedDispatchReachesTheModel) {
  auto m = LoadSeed("P-CED");
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.ced_dispatch = CedDispatchPolicy::kFused;
  o.ced_min_batch = 3;
  o.profile_ops = true;
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  EXPECT_EQ(m->runtime_options().ced_dispatch, seed::CedDispatch::kFused);
  EXPECT_EQ(m->runtime_options().ced_min_batch, 3);
  EXPECT_TRUE(m->runtime_options().profile_ops);
  auto cache = m->NewCache(8);
  std::vector<int32_t> one = {1};
  std::vector<float> logits(m->info().vocab_size);
  ASSERT_TRUE(m->Forward(one, *cache, logits, false).ok());
  EXPECT_EQ(m->ced_dispatch_counts().fused, 2);  // forced: even a 1-token call is fused
  EXPECT_EQ(m->ced_dispatch_counts().baseline, 0);
  o.ced_dispatch = CedDispatchPolicy::kAuto;  // auto with min batch 3: 1 token → baseline
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  ASSERT_TRUE(m->Forward(one, *cache, logits, false).ok());
  EXPECT_EQ(m->ced_dispatch_counts().baseline, 2);
}

TEST(EngineOptions, S015_CedOptionsNeedCedLayers) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.ced_dispatch = CedDispatchPolicy::kBaseline;
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("--ced-dispatch"), std::string::npos);
  EngineRuntimeOptions b;
  b.ced_min_batch = 4;
  EXPECT_NE(ApplyEngineOptions(*m, b).ToString().find("--ced-min-batch"), std::string::npos);
}

// ---------------------------------------------------------------- DeepSeek-V4 scored routers
// The tiny V4 (tests/data/deepseek_v4/swa_bf16): 4 layers, the first 2 hash-routed,
// the last 2 scored; E = 8, k = 2, routed_scaling_factor 1.5.

struct V4Run {
  std::vector<float> logits;                      // [T, V]
  std::map<int64_t, std::vector<float>> indices;  // layer -> [T, k]
  std::map<int64_t, std::vector<float>> weights;  // layer -> [T, k]
};

std::unique_ptr<DeepSeekV4Model> LoadTinyV4() {
  auto m = LoadDeepSeekV4(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_bf16");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  return std::unique_ptr<DeepSeekV4Model>(dynamic_cast<DeepSeekV4Model*>(m->release()));
}

const std::vector<int32_t> kV4Ids = {0, 115, 115, 35, 5, 250, 13, 215, 20, 226};

V4Run RunV4(DeepSeekV4Model& m) {
  V4Run r;
  m.SetTrace(
      [&](std::string_view name, int64_t layer, const float* data, std::span<const int64_t> shape) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        if (name.ends_with("router_indices")) r.indices[layer].assign(data, data + n);
        if (name.ends_with("router_weights")) r.weights[layer].assign(data, data + n);
      });
  auto cache = m.NewCache(32);
  r.logits.resize(kV4Ids.size() * m.info().vocab_size);
  EXPECT_TRUE(m.Forward(kV4Ids, *cache, r.logits, true).ok());
  m.SetTrace(nullptr);
  return r;
}

TEST(EngineOptionsV4, ExpertMaskKeepsScoredLayersOnAllowedExpertsAndHashLayersAsTheyAre) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->config().num_experts_per_tok, 2);
  const V4Run base = RunV4(*m);
  EngineRuntimeOptions o;
  o.expert_allow = {2, 5};
  Status binding = ApplyEngineOptions(*m, o);
  ASSERT_TRUE(binding.ok()) << binding.ToString();
  ASSERT_NE(m->router_options(), nullptr);  // held by the model, not a process-global table
  const V4Run masked = RunV4(*m);
  int64_t scored = 0;
  for (const auto& [layer, idx] : masked.indices) {
    if (m->plans()[layer].router == deepseek_v4::RouterKind::kHash) {
      EXPECT_EQ(idx, base.indices.at(layer)) << "hash layer " << layer;
      continue;
    }
    ++scored;
    for (float e : idx) EXPECT_TRUE(e == 2.0f || e == 5.0f) << "layer " << layer << ": " << e;
    // The weights are still the router's: normalised scores × 1.5, summing to 1.5 per token.
    const auto& w = masked.weights.at(layer);
    for (size_t t = 0; t < w.size() / 2; ++t) EXPECT_NEAR(w[2 * t] + w[2 * t + 1], 1.5f, 1e-5f);
  }
  EXPECT_EQ(scored, 2);
  // Unmasked, the scored layers used other experts too (the mask changed something).
  bool other = false;
  for (const auto& [layer, idx] : base.indices) {
    if (m->plans()[layer].router == deepseek_v4::RouterKind::kHash) continue;
    for (float e : idx) other = other || (e != 2.0f && e != 5.0f);
  }
  EXPECT_TRUE(other);
  EXPECT_NE(masked.logits, base.logits);
}

TEST(EngineOptionsV4, FreezeRoutesEveryTokenToTheFixedExperts) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  const V4Run base = RunV4(*m);
  for (const char* spec : {"", "3,6:0.9,0.1"}) {
    SCOPED_TRACE(spec);
    EngineRuntimeOptions o;
    if (*spec == '\0') {
      o.freeze_router = true;  // default: experts 0..k-1, weights 1/k
    } else {
      ASSERT_TRUE(ParseFreezeSpec(spec, o).ok());
    }
    Status binding = ApplyEngineOptions(*m, o);
    ASSERT_TRUE(binding.ok()) << binding.ToString();
    const V4Run frozen = RunV4(*m);
    const float e0 = *spec ? 3.0f : 0.0f, e1 = *spec ? 6.0f : 1.0f;
    const float w0 = (*spec ? 0.9f : 0.5f) * 1.5f, w1 = (*spec ? 0.1f : 0.5f) * 1.5f;
    for (const auto& [layer, idx] : frozen.indices) {
      if (m->plans()[layer].router == deepseek_v4::RouterKind::kHash) {
        EXPECT_EQ(idx, base.indices.at(layer));
        continue;
      }
      const auto& w = frozen.weights.at(layer);
      for (size_t t = 0; t < idx.size() / 2; ++t) {
        EXPECT_EQ(idx[2 * t], e0);
        EXPECT_EQ(idx[2 * t + 1], e1);
        EXPECT_FLOAT_EQ(w[2 * t], w0);
        EXPECT_FLOAT_EQ(w[2 * t + 1], w1);
      }
    }
  }
}

// Options off (never applied, or replaced by the defaults): bit-identical to the
// checkpoint's routing.
TEST(EngineOptionsV4, DefaultOptionsRestoreBitIdenticalLogits) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  const V4Run before = RunV4(*m);
  EngineRuntimeOptions o;
  ASSERT_TRUE(ParseFreezeSpec("4,7", o).ok());
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  EXPECT_NE(RunV4(*m).logits, before.logits);
  ASSERT_TRUE(ApplyEngineOptions(*m, EngineRuntimeOptions{}).ok());  // nothing set: dropped
  EXPECT_EQ(m->router_options(), nullptr);
  EXPECT_EQ(RunV4(*m).logits, before.logits);
}

// Two models of the same checkpoint keep their own options (no process-global
// state): options on one leave the other's routing as the checkpoint's.
TEST(EngineOptionsV4, OptionsStayWithTheirModel) {
  auto a = LoadTinyV4(), b = LoadTinyV4();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const V4Run before = RunV4(*b);
  EngineRuntimeOptions o;
  ASSERT_TRUE(ParseFreezeSpec("4,7", o).ok());
  ASSERT_TRUE(ApplyEngineOptions(*a, o).ok());
  EXPECT_NE(RunV4(*a).logits, before.logits);
  EXPECT_EQ(RunV4(*b).logits, before.logits);
}

// The batched forward routes through the same router: a masked ForwardBatch of two
// sequences equals masked Forwards of each.
TEST(EngineOptionsV4, MaskAppliesToForwardBatch) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.expert_allow = {1, 3, 4};
  Status binding = ApplyEngineOptions(*m, o);
  ASSERT_TRUE(binding.ok());
  const int64_t V = m->info().vocab_size;
  const std::vector<int32_t> a(kV4Ids.begin(), kV4Ids.begin() + 6),
      b(kV4Ids.begin() + 4, kV4Ids.end());
  std::vector<float> la(V), lb(V), sa(V), sb(V);
  auto ca = m->NewCache(32), cb = m->NewCache(32);
  std::vector<BatchEntry> batch = {{a, ca.get(), la, false}, {b, cb.get(), lb, false}};
  ASSERT_TRUE(m->ForwardBatch(batch).ok());
  auto c1 = m->NewCache(32), c2 = m->NewCache(32);
  ASSERT_TRUE(m->Forward(a, *c1, sa, false).ok());
  ASSERT_TRUE(m->Forward(b, *c2, sb, false).ok());
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(la[i], sa[i], 1e-4);
    EXPECT_NEAR(lb[i], sb[i], 1e-4);
  }
}

TEST(EngineOptionsV4, RefusesCapacity) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.router_capacity = 1.0;
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.ToString().find("--router-capacity"), std::string::npos);
}
TEST(EngineOptionsV4, RefusesForcedExperts) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.force_experts = {1};
  EXPECT_EQ(ApplyEngineOptions(*m, o).code(), StatusCode::kUnimplemented);
}
TEST(EngineOptionsV4, RefusesReweighting) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.reweight_router = true;
  EXPECT_EQ(ApplyEngineOptions(*m, o).code(), StatusCode::kUnimplemented);
}
TEST(EngineOptionsV4, RefusesThePruner) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.kv_pruner = PrunerPolicy::kOn;
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.ToString().find("--kv-pruner"), std::string::npos);
}
TEST(EngineOptionsV4, RefusesCedDispatch) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.ced_dispatch = CedDispatchPolicy::kFused;
  EXPECT_EQ(ApplyEngineOptions(*m, o).code(), StatusCode::kUnimplemented);
}
TEST(EngineOptionsV4, RejectsMaskSmallerThanK) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.expert_allow = {3};
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("k = 2"), std::string::npos);
}
TEST(EngineOptionsV4, RejectsExpertOutOfRange) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.expert_allow = {1, 8};
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("[0, 8)"), std::string::npos);
}
TEST(EngineOptionsV4, RejectsFreezeWithOtherThanKExperts) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  ASSERT_TRUE(ParseFreezeSpec("1,2,3", o).ok());
  EXPECT_EQ(ApplyEngineOptions(*m, o).code(), StatusCode::kInvalidArgument);
}
TEST(EngineOptionsV4, RejectsFreezeOutsideTheMask) {
  auto m = LoadTinyV4();
  ASSERT_NE(m, nullptr);
  EngineRuntimeOptions o;
  o.expert_allow = {0, 1, 2};
  ASSERT_TRUE(ParseFreezeSpec("1,5", o).ok());
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("expert 5"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
