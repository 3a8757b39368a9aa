// DeepSeek-V4.1 configs: the released inference config.json (ModelArgs keys,
// no model_type) parses as V4.1 with the release's roles, sizes and KV bytes;
// every CSA2 and Engram rule the reference's shared runtime needs is checked,
// each rejection naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/inspect.h"
#include "model/deepseek_v4/plan.h"

namespace dsv4::deepseek_v4 {
namespace {

using Json = nlohmann::json;

std::string ReleaseConfigPath() {
  return std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/v41_flash_config.json";
}

Json ReleaseJson() {
  auto text = ReadFileToString(ReleaseConfigPath());
  EXPECT_TRUE(text.ok());
  return Json::parse(text.ok() ? *text : "{}");
}

Result<DeepSeekV4Config> Parse(const Json& j) {
  return DeepSeekV4Config::FromJson(j.dump(), "test.json");
}

TEST(DeepSeekV41Config, ReleasedConfigParsesAsV41) {
  auto c = DeepSeekV4Config::FromFile(ReleaseConfigPath());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->v41());
  EXPECT_EQ(c->num_hash_layers, 0);
  EXPECT_EQ(c->quantization_config.weight_block_size, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(c->kv_source_layers, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(c->candidate_source_layer, 20);
  EXPECT_EQ(c->engram_layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(c->engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c->n_draft_layers(), 3);
}

TEST(DeepSeekV41Config, ReleasedLayerRoles) {
  auto c = DeepSeekV4Config::FromFile(ReleaseConfigPath());
  ASSERT_TRUE(c.ok());
  const std::vector<LayerPlan> plans = BuildLayerPlans(*c);
  ASSERT_EQ(plans.size(), 43u);
  EXPECT_EQ(plans[1].attention, AttentionKind::kWindow);
  EXPECT_EQ(plans[1].engram, 0);
  // layer 2: full (kv + index source, key owner); 3: reuse of 2
  EXPECT_TRUE(plans[2].csa2.kv_source && plans[2].csa2.owns_index_keys);
  EXPECT_FALSE(plans[3].csa2.index_source);
  EXPECT_EQ(plans[3].csa2.kv_from, 2);
  EXPECT_EQ(plans[3].csa2.picks_from, 2);
  EXPECT_EQ(plans[14].engram, 1);
  // 20: the candidate source; 24: reindex inside its blocks; 25: reuses 24's picks
  EXPECT_TRUE(plans[20].csa2.candidate_source);
  EXPECT_TRUE(plans[24].csa2.index_source && !plans[24].csa2.kv_source);
  EXPECT_TRUE(plans[24].csa2.uses_candidates);
  EXPECT_EQ(plans[24].csa2.keys_from, 20);
  EXPECT_EQ(plans[25].csa2.picks_from, 24);
  EXPECT_EQ(plans[39].csa2.kv_from, 20);
  for (const LayerPlan& p : plans) EXPECT_TRUE(p.lagged_hc);
  // only kv sources keep compressed entries, only key owners index keys
  EXPECT_EQ(plans[3].cache.compress_ratio, 0);
  EXPECT_EQ(plans[2].cache.indexer_head_dim, 128);
  EXPECT_EQ(plans[24].cache.indexer_head_dim, 0);
}

// The release's stated sizes: 552B MoE plus about 196B of Engram tables,
// about 510 GB on disk, about 16B active per generated token; its KV cache
// (compressed entries FP4) a quarter of V4-Flash's.
TEST(DeepSeekV41Config, InspectCountsMatchTheRelease) {
  auto c = DeepSeekV4Config::FromFile(ReleaseConfigPath());
  ASSERT_TRUE(c.ok());
  const ParameterCounts n = CountParameters(*c, nullptr);
  EXPECT_EQ(std::llround((n.total - n.engram) / 1e9), 552) << n.total;
  EXPECT_EQ(std::llround(n.engram / 1e9), 197) << n.engram;
  EXPECT_EQ(std::llround(n.active / 1e9), 16) << n.active;
  EXPECT_EQ(n.engram_active, 2 * 24 * 256);
  int64_t bytes = 0;
  for (const auto& [name, b] : n.bytes_by_dtype) bytes += b;
  EXPECT_EQ(std::llround(bytes / 1e10), 51) << bytes;  // ≈ 510 GB
  auto report = InspectPath(ReleaseConfigPath());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string& r = *report;
  EXPECT_NE(r.find("DeepSeek-V4.1 model"), std::string::npos) << r;
  EXPECT_NE(r.find("V4.1-Flash"), std::string::npos);
  EXPECT_NE(r.find("38 CSA2 (4 full, 4 reindex, 30 reuse)"), std::string::npos) << r;
  EXPECT_NE(r.find("12672 B read per token"), std::string::npos) << r;
  EXPECT_NE(r.find("890 B/token"), std::string::npos) << r;
  EXPECT_NE(r.find("per 32x32"), std::string::npos);
}

// Each rule, broken once: the error names the field.
TEST(DeepSeekV41Config, RejectsBrokenRoles) {
  struct Case {
    const char* what;
    std::function<void(Json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"kv source on a window layer",
       [](Json& j) {
         j["kv_source_layers"] = {1, 2, 8, 14, 20};
       },
       "kv_source_layers"},
      {"a ratio-1 layer without a ratio-1 source",
       [](Json& j) {
         j["kv_source_layers"] = {2, 8, 14};
       },
       "kv_source_layers"},
      {"reindex layer whose kv source makes no keys",
       [](Json& j) { j["index_source_layers"] = {2, 8, 14, 24, 28, 32, 36}; },
       "index_source_layers"},
      {"candidate source not an index source", [](Json& j) { j["candidate_source_layer"] = 21; },
       "candidate_source_layer"},
      {"index source after the candidate source with another ratio",
       [](Json& j) { j["compress_ratios"][36] = 2; }, "kv_source_layers"},
      {"unsorted kv sources",
       [](Json& j) {
         j["kv_source_layers"] = {8, 2, 14, 20};
       },
       "kv_source_layers[1]"},
      {"engram table sizes", [](Json& j) { j["engram_num_embeddings"] = {1}; },
       "engram_num_embeddings"},
      {"engram head dim", [](Json& j) { j["engram_head_dim"] = 48; }, "engram_head_dim"},
      {"hash layers", [](Json& j) { j["n_hash_layers"] = 2; }, "num_hash_layers"},
      {"V4's FP8 tiles",
       [](Json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"scale_fmt", "ue8m0"},
                                     {"weight_block_size", {128, 128}},
                                     {"activation_scheme", "dynamic"}};
       },
       "weight_block_size"},
  };
  for (const Case& k : cases) {
    Json j = ReleaseJson();
    k.edit(j);
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << k.what;
    EXPECT_NE(c.status().ToString().find(k.field), std::string::npos)
        << k.what << ": " << c.status().ToString();
  }
}

}  // namespace
}  // namespace dsv4::deepseek_v4
