// EngineOptions (engine/engine_options.h): the CLI spellings' parsers, one
// bad-input test per rejected case, and ApplyEngineOptions on the seed profiles
// (tests/data/seed) and on a model that takes no runtime policies.
#include "engine/engine_options.h"

#include <gtest/gtest.h>

#include <span>

#include "engine/loader.h"
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
  EXPECT_FALSE(ParseIndexList("", "--expert-mask").ok());
}
TEST(EngineOptions, ParseIndexListRejectsNegative) {
  auto v = ParseIndexList("1,-2", "--expert-mask");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().ToString().find("--expert-mask"), std::string::npos);
}
TEST(EngineOptions, ParseIndexListRejectsGarbage) {
  EXPECT_FALSE(ParseIndexList("1,x", "f").ok());
  EXPECT_FALSE(ParseIndexList("1,", "f").ok());
  EXPECT_FALSE(ParseIndexList("1 2", "f").ok());
}
TEST(EngineOptions, ParseIndexListRejectsDuplicates) {
  EXPECT_FALSE(ParseIndexList("1,1", "f").ok());
}

TEST(EngineOptions, S134_ParseFreezeSpec) {
  EngineOptions o;
  ASSERT_TRUE(ParseFreezeSpec("0,1:0.7,0.3", o).ok());
  EXPECT_TRUE(o.freeze_router);
  EXPECT_EQ(o.freeze_experts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(o.freeze_weights, (std::vector<float>{0.7f, 0.3f}));
  EngineOptions even;
  ASSERT_TRUE(ParseFreezeSpec("2,3", even).ok());
  EXPECT_EQ(even.freeze_weights, (std::vector<float>{0.5f, 0.5f}));
}
TEST(EngineOptions, ParseFreezeSpecRejectsWeightCountMismatch) {
  EngineOptions o;
  EXPECT_FALSE(ParseFreezeSpec("0,1:0.7", o).ok());
}
TEST(EngineOptions, ParseFreezeSpecRejectsBadWeight) {
  EngineOptions o;
  EXPECT_FALSE(ParseFreezeSpec("0,1:0.7,abc", o).ok());
  EXPECT_FALSE(ParseFreezeSpec("0,1:0.7,-0.3", o).ok());
  EXPECT_FALSE(ParseFreezeSpec("0,1:0.7,nan", o).ok());
}
TEST(EngineOptions, ParsePrunerPolicy) {
  EXPECT_EQ(*ParsePrunerPolicy("on"), PrunerPolicy::kOn);
  EXPECT_EQ(*ParsePrunerPolicy("off"), PrunerPolicy::kOff);
  EXPECT_EQ(*ParsePrunerPolicy("auto"), PrunerPolicy::kModelDefault);
  EXPECT_FALSE(ParsePrunerPolicy("yes").ok());
}

TEST(EngineOptions, AppliesRouterOptionsToTheSeedModel) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  const int64_t E = m->config().moe.num_experts;
  EngineOptions o;
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
  EngineOptions o;
  ASSERT_TRUE(ParseFreezeSpec("1:1.0", o).ok());
  ASSERT_TRUE(ApplyEngineOptions(*m, o).ok());
  auto cache = m->NewCache(16);
  std::vector<int32_t> ids = {1, 5, 9};
  std::vector<float> logits(m->info().vocab_size);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, false).ok());
  for (const auto& rr : m->last_step().routes) {
    if (!rr.counts.empty()) EXPECT_EQ(rr.counts[1], 3);
  }
}

TEST(EngineOptions, RejectsExpertOutOfRange) {
  auto m = LoadSeed("P-V4-7B");
  ASSERT_NE(m, nullptr);
  EngineOptions o;
  o.expert_allow = {static_cast<int32_t>(m->config().moe.num_experts)};
  Status st = ApplyEngineOptions(*m, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("--expert-mask"), std::string::npos);
}

TEST(EngineOptions, RejectsPrunerOnForAModelWithout) {
  auto m = LoadSeed("P-CED");
  ASSERT_NE(m, nullptr);
  ASSERT_FALSE(m->config().kv_pruner.enabled);
  EngineOptions o;
  o.kv_pruner = PrunerPolicy::kOn;
  EXPECT_FALSE(ApplyEngineOptions(*m, o).ok());
}

TEST(EngineOptions, RejectsRouterOptionsForAModelWithoutMoe) {
  auto m = LoadSeed("P-CED");
  ASSERT_NE(m, nullptr);
  ASSERT_FALSE(m->config().moe.enabled);
  EngineOptions o;
  o.reweight_router = true;
  EXPECT_FALSE(ApplyEngineOptions(*m, o).ok());
}

// S-059…S-065 as an engine policy: --kv-pruner off keeps every token; on (with a
// budget override) evicts down to the budget.
TEST(EngineOptions, S065_PrunerOnOffAndBudgetOverride) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 14; ++i) ids.push_back((i * 7 + 3) % 60 + 1);
  auto live_after = [&](const EngineOptions& o) -> int64_t {
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
  EngineOptions off;
  off.kv_pruner = PrunerPolicy::kOff;
  EXPECT_EQ(live_after(off), 14);
  EngineOptions on;
  on.kv_pruner = PrunerPolicy::kOn;
  EXPECT_LE(live_after(on), 8);  // the config's kv_budget
  EngineOptions small = on;
  small.kv_budget = 4;
  EXPECT_LE(live_after(small), 4);
}

TEST(EngineOptions, ModelsWithoutRuntimePoliciesRefuseThem) {
  LoadOptions lo;
  lo.model_path = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin";
  lo.threads = 1;
  auto loaded = LoadModel(lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(ApplyEngineOptions(*loaded->model, EngineOptions{}).ok());  // nothing set: fine
  EngineOptions o;
  o.router_capacity = 1.0;
  Status st = ApplyEngineOptions(*loaded->model, o);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.ToString().find("--router-capacity"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
