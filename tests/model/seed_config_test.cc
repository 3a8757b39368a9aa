// SeedConfig: the three profiles parse, profile defaults, and one bad-input
// test per rejected case (each error names the field).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "model/seed/config.h"

namespace dsv4::seed {
namespace {

std::string Dir(const std::string& p) { return std::string(DSV4_TEST_DATA_DIR) + "/seed/" + p; }

const char* kMinimal = R"({"model_type": "deepseek_v4_seed", "vocab_size": 512, "hidden_size": 32,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 64, "max_position_embeddings": 64)";

Result<SeedConfig> Parse(const std::string& extra) {
  return SeedConfig::FromJson(std::string(kMinimal) + extra + "}", "test.json");
}

void ExpectError(const std::string& extra, const std::string& field) {
  auto r = Parse(extra);
  ASSERT_FALSE(r.ok()) << extra;
  EXPECT_NE(r.status().ToString().find(field), std::string::npos)
      << "error for " << extra << " does not name " << field << ": " << r.status().ToString();
  EXPECT_NE(r.status().ToString().find("test.json"), std::string::npos);
}

TEST(SeedConfig, S001_EveryProfileLoads) {
  for (const char* p : {"P-V4", "P-CED", "P-V4-7B"}) {
    auto c = SeedConfig::FromFile(Dir(p) + "/config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(ProfileName(c->profile), p);
  }
  auto v4 = SeedConfig::FromFile(Dir("P-V4") + "/config.json");
  EXPECT_TRUE(v4->csa.enabled && v4->hca.enabled && v4->moe.enabled && v4->dynamic_rope.enabled);
  EXPECT_EQ(v4->moe.router_input, "hca");  // S-040 profile default
  EXPECT_EQ(v4->routed_k(), 4);            // S-043: 2 groups × 2
  auto b7 = SeedConfig::FromFile(Dir("P-V4-7B") + "/config.json");
  EXPECT_TRUE(b7->segmented_rope.enabled && b7->task_adapter.enabled && b7->kv_pruner.enabled);
  EXPECT_EQ(b7->moe.router_input, "hidden_plus_attn");
}

TEST(SeedConfig, S001_ProfileDefaults) {
  auto c = Parse(R"(, "seed_profile": "P-V4", "extensions": {"moe": {}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.capacity_factor, 1.0);  // S-044 seed parity for P-V4
  auto d = Parse(R"(, "seed_profile": "P-V4-7B", "extensions": {"moe": {}})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->moe.capacity_factor, 0.0);
  EXPECT_EQ(d->moe.num_experts, 16);  // S-010 default
}

TEST(SeedConfig, S020_CsaDefaults) {
  auto c = Parse(R"(, "extensions": {"csa": {}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->csa.local_window, 512);
  EXPECT_EQ(c->csa.segment_window, 4096);
  EXPECT_EQ(c->csa.global_topk, 1024);
  EXPECT_DOUBLE_EQ(c->csa.branch_weights[0] + c->csa.branch_weights[1] + c->csa.branch_weights[2],
                   1.0);
  EXPECT_DOUBLE_EQ(c->csa.branch_weights[2], 0.2);
}

TEST(SeedConfig, S003_IntermediateRatioIsNotEnforced) {
  // P-CED has I/H = 2.8; a non-8/3 ratio only warns.
  auto c = SeedConfig::FromJson(R"({"model_type": "deepseek_v4_seed", "vocab_size": 8,
    "hidden_size": 5120, "num_hidden_layers": 1, "num_attention_heads": 40,
    "intermediate_size": 14336, "max_position_embeddings": 8, "bos_token_id": 1, "eos_token_id": 2})",
                                "t.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(SeedConfig, S004_HeadsMustDivideHidden) {
  ExpectError(R"(, "num_attention_heads": 5)", "num_attention_heads");
}
TEST(SeedConfig, S004_HeadDimMustBeEven) {
  ExpectError(R"(, "num_attention_heads": 32, "num_key_value_heads": 1)", "num_attention_heads");
}
TEST(SeedConfig, S005_KvHeadsMustDivideHeads) {
  ExpectError(R"(, "num_key_value_heads": 3)", "num_key_value_heads");
}
TEST(SeedConfig, UnknownTopLevelField) { ExpectError(R"(, "hiden_size": 3)", "hiden_size"); }
TEST(SeedConfig, UnknownExtension) {
  ExpectError(R"(, "extensions": {"cas": {}})", "extensions.cas");
}
TEST(SeedConfig, UnknownExtensionField) {
  ExpectError(R"(, "extensions": {"csa": {"local": 3}})", "extensions.csa.local");
}
TEST(SeedConfig, WrongModelType) {
  auto r = SeedConfig::FromJson(R"({"model_type": "deepseek_v4"})", "test.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model_type"), std::string::npos);
}
TEST(SeedConfig, NotJson) { EXPECT_FALSE(SeedConfig::FromJson("{", "x").ok()); }
TEST(SeedConfig, UnknownProfile) { ExpectError(R"(, "seed_profile": "P-X")", "seed_profile"); }
TEST(SeedConfig, NonPositiveSize) { ExpectError(R"(, "hidden_size": 0)", "hidden_size"); }
TEST(SeedConfig, WrongType) { ExpectError(R"(, "hidden_size": "32")", "hidden_size"); }
TEST(SeedConfig, S026_RopeScalingMustBeLinear) {
  ExpectError(R"(, "rope_scaling": {"type": "yarn", "factor": 2})", "rope_scaling.type");
}
TEST(SeedConfig, S026_RopeScalingFactorBelowOne) {
  ExpectError(R"(, "rope_scaling": {"type": "linear", "factor": 0.5})", "rope_scaling.factor");
}
TEST(SeedConfig, S020_BranchWeightsMustSumToOne) {
  ExpectError(R"(, "extensions": {"csa": {"branch_weights": [0.5, 0.5, 0.5]}})", "branch_weights");
}
TEST(SeedConfig, S020_BranchWeightsNeedThree) {
  ExpectError(R"(, "extensions": {"csa": {"branch_weights": [1.0]}})", "branch_weights");
}
TEST(SeedConfig, S019_GlobalMode) {
  ExpectError(R"(, "extensions": {"csa": {"global_mode": "bidirectional"}})", "global_mode");
}
TEST(SeedConfig, S030_HcaNeedsMoe) {
  ExpectError(R"(, "extensions": {"hca": {}})", "extensions.hca");
}
TEST(SeedConfig, S031_HcaStatsMode) {
  ExpectError(R"(, "extensions": {"moe": {}, "hca": {"stats": "global"}})", "extensions.hca.stats");
  // "sequence" was split into causal and whole_call: refused, the hint says which is which.
  ExpectError(R"(, "extensions": {"moe": {}, "hca": {"stats": "sequence"}})", "whole_call");
  auto c = Parse(R"(, "extensions": {"moe": {}, "hca": {}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hca.stats, "causal");  // the default
  for (const char* mode : {"whole_call", "batch"}) {
    auto m =
        Parse(std::string(R"(, "extensions": {"moe": {}, "hca": {"stats": ")") + mode + R"("}})");
    ASSERT_TRUE(m.ok()) << mode << ": " << m.status().ToString();
    EXPECT_EQ(m->hca.stats, mode);
  }
}
TEST(SeedConfig, S043_GroupsMustDivideExperts) {
  ExpectError(R"(, "extensions": {"moe": {"routing": "group_limited", "n_group": 3}})", "n_group");
}
TEST(SeedConfig, S043_TopkGroupBounds) {
  ExpectError(R"(, "extensions": {"moe": {"routing": "group_limited", "topk_group": 5}})",
              "topk_group");
}
TEST(SeedConfig, S040_RouterInput) {
  ExpectError(R"(, "extensions": {"moe": {"router_input": "embedding"}})", "router_input");
}
TEST(SeedConfig, S044_NegativeCapacity) {
  ExpectError(R"(, "extensions": {"moe": {"capacity_factor": -2}})", "capacity_factor");
}
TEST(SeedConfig, S045_AssignMode) {
  ExpectError(R"(, "extensions": {"moe": {"assign": "random"}})", "assign");
}
TEST(SeedConfig, S042_TopKMustBePositive) {
  ExpectError(R"(, "extensions": {"moe": {"num_experts_per_tok": 0}})", "num_experts_per_tok");
}
TEST(SeedConfig, S042_KAboveExpertsIsClamped) {
  auto c = Parse(R"(, "extensions": {"moe": {"num_experts": 4, "num_experts_per_tok": 9}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->routed_k(), 4);
}
TEST(SeedConfig, S037_CedNeedsEvenIntermediate) {
  ExpectError(R"(, "intermediate_size": 63, "extensions": {"ced": {}})", "intermediate_size");
}
TEST(SeedConfig, S075_CedLayoutValue) {
  ExpectError(R"(, "extensions": {"ced": {"layout": "diagonal"}})", "extensions.ced.layout");
}
TEST(SeedConfig, S075_CedLayoutBoolean) {
  auto c = Parse(R"(, "extensions": {"ced": {"layout": true}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ced.layout, "true");
}
TEST(SeedConfig, S056_AdapterSource) {
  ExpectError(R"(, "extensions": {"task_adapter": {"task_source": "last_token"}})", "task_source");
}
TEST(SeedConfig, S063_EfficiencyOutOfRange) {
  ExpectError(R"(, "extensions": {"kv_pruner": {"efficiency_factor": 0.5}})", "efficiency_factor");
}
TEST(SeedConfig, S060_TauMaxBelowBase) {
  ExpectError(R"(, "extensions": {"kv_pruner": {"tau_max": 0.2}})", "tau_max");
}
TEST(SeedConfig, S063_BudgetBelowProtected) {
  ExpectError(R"(, "extensions": {"kv_pruner": {"kv_budget": 100}})", "kv_budget");
}
TEST(SeedConfig, S027_SegmentLength) {
  ExpectError(R"(, "extensions": {"segmented_rope": {"segment_length": 0}})", "segment_length");
}
TEST(SeedConfig, ExtensionMustBeObject) {
  ExpectError(R"(, "extensions": {"csa": true})", "extensions.csa");
}
TEST(SeedConfig, TokenIdsInsideVocab) { ExpectError(R"(, "eos_token_id": 600)", "eos_token_id"); }

TEST(SeedConfig, S007_MaxContextFollowsLinearScaling) {
  auto c = Parse(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_context(), 128);
  auto d = Parse("");
  EXPECT_EQ(d->max_context(), 64);
}

}  // namespace
}  // namespace dsv4::seed

namespace dsv4::seed {
namespace {

// The field table is the one key list: an unknown key in any section is
// refused with a hint naming every key the table has for that section, and a
// value outside a field's allowed values is refused naming the field.
TEST(SeedConfig, FieldTableDrivesKnownKeysAndChecks) {
  std::map<std::string, std::vector<std::string>> keys;
  const SeedConfig defaults;
  VisitSeedFields(defaults, [&](const SeedField& f, const auto&) {
    if (*f.section != '\0' && std::string(f.section) != "rope_scaling") {
      keys[f.section].push_back(f.key);
    }
  });
  ASSERT_EQ(keys.size(), 8u);
  for (const auto& [section, names] : keys) {
    const std::string extra = R"(, "extensions": {")" + section + R"(": {"no_such_key": 1}})";
    auto r = Parse(extra);
    ASSERT_FALSE(r.ok()) << section;
    EXPECT_NE(r.status().message().find("extensions." + section + ".no_such_key"),
              std::string::npos)
        << r.status().ToString();
    for (const std::string& k : names) {
      EXPECT_NE(r.status().hint().find(k), std::string::npos) << section << "." << k;
    }
  }
  ExpectError(R"(, "extensions": {"moe": {"assign": "greedy"}})", "extensions.moe.assign");
  ExpectError(R"(, "extensions": {"kv_pruner": {"efficiency_factor": 0.5}})", "S-063");
}

}  // namespace
}  // namespace dsv4::seed
