// DeepSeek-V4 config.json parsing, validation, layer plans and the inspect
// report: the real V4-Flash / V4-Pro configs (parameter totals 284B/13B and
// 1.6T/49B), the alternative spellings (inference ModelArgs, HF v5), and one
// test per rejected value — each error must name the field and the value.
#include <gtest/gtest.h>

#include <climits>
#include <type_traits>

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "deepseek_v4_test_util.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/inspect.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {
namespace {

using Json = nlohmann::json;
using testing::DataDir;

Json LoadJson(const std::string& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return Json::parse(text.ok() ? *text : "{}");
}

Json FlashJson() { return LoadJson(DataDir() + "/v4_flash_config.json"); }
Json TinyJson() { return LoadJson(DataDir() + "/swa_bf16/config.json"); }

Result<DeepSeekV4Config> Parse(const Json& j) {
  return DeepSeekV4Config::FromJson(j.dump(), "test.json");
}

// The 0731 release's DSpark keys (spec §13.2): the stages are the
// compress_ratios entries past the 43 main layers; num_nextn_predict_layers
// stays 1 and does not count them.
TEST(DeepSeekV4Config, Flash0731ConfigHasThreeDSparkStages) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_0731_config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->dspark());
  EXPECT_EQ(c->dspark_block_size, 5);
  EXPECT_EQ(c->dspark_noise_token_id, 128799);
  EXPECT_EQ(c->dspark_target_layer_ids, (std::vector<int64_t>{40, 41, 42}));
  EXPECT_EQ(c->dspark_markov_rank, 256);
  EXPECT_EQ(c->n_draft_layers(), 3);
  EXPECT_EQ(c->n_layers_total(), 46);
  const std::vector<LayerPlan> plans = BuildLayerPlans(*c);
  ASSERT_EQ(plans.size(), 46u);
  EXPECT_EQ(plans[43].prefix, "mtp.0.");
  EXPECT_EQ(plans[45].attention, AttentionKind::kWindow);
  EXPECT_EQ(plans[45].router, RouterKind::kScored);
  // inspect names the release and the module; the draft's parameters: three
  // window layers plus main_proj, main_norm and the last stage's heads.
  auto report = InspectPath(DataDir() + "/v4_flash_0731_config.json");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_NE(report->find("V4-Flash with the DSpark draft module"), std::string::npos) << *report;
  EXPECT_NE(report->find("3 window-only stages, block 5 tokens (noise id 128799), targets "
                         "[40, 41, 42], Markov rank 256"),
            std::string::npos)
      << *report;
  const ParameterCounts n = CountParameters(*c, nullptr);
  int64_t stage_params = 0;
  ForEachWeight(*c, plans, [&](const WeightDecl& d) {
    if (d.layer != 44) return;  // the middle stage: a plain window layer
    int64_t e = 1;
    for (int64_t s : d.shape) e *= s;
    stage_params += e;
  });
  const int64_t D = 4096, V = 129280, r = 256, C = 4;
  const int64_t extras = D * 3 * D + D + D + C * C * D + C + 1 + 2 * V * r + (D + r);
  EXPECT_EQ(n.mtp, 3 * stage_params + extras);
  EXPECT_EQ(DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_config.json")->n_draft_layers(), 1);
}

TEST(DeepSeekV4Config, FlashConfigParses) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_hidden_layers, 43);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->head_dim, 512);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->q_lora_rank, 1024);
  EXPECT_EQ(c->o_groups, 8);
  EXPECT_EQ(c->n_routed_experts, 256);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_EQ(c->moe_intermediate_size, 2048);
  EXPECT_EQ(c->num_hash_layers, 3);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 1.5);
  EXPECT_EQ(c->expert_dtype, ExpertDType::kFp4);
  EXPECT_TRUE(c->quantization_config.present);
  EXPECT_EQ(c->quantization_config.scale_fmt, "ue8m0");
  EXPECT_TRUE(c->rope_scaling.enabled);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 16.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 65536);
  ASSERT_EQ(c->compress_ratios.size(), 44u);
  EXPECT_TRUE(c->CheckForwardSupported().ok());
}

TEST(DeepSeekV4Config, FlashLayerPlan) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_config.json");
  ASSERT_TRUE(c.ok());
  const auto plans = BuildLayerPlans(*c);
  ASSERT_EQ(plans.size(), 44u);
  int window = 0, csa = 0, hca = 0, hash = 0;
  for (const LayerPlan& p : plans) {
    if (p.role != LayerRole::kMain) continue;
    window += p.attention == AttentionKind::kWindow;
    csa += p.attention == AttentionKind::kCsa;
    hca += p.attention == AttentionKind::kHca;
    hash += p.router == RouterKind::kHash;
  }
  // Spec §1.2: layers 0–1 SWA, CSA at even 2..42 (21), HCA at odd 3..41 (20).
  EXPECT_EQ(window, 2);
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  EXPECT_EQ(hash, 3);
  EXPECT_EQ(plans[0].attention, AttentionKind::kWindow);
  EXPECT_FALSE(plans[0].rope_yarn);
  EXPECT_DOUBLE_EQ(plans[0].rope_theta, 10000.0);
  EXPECT_EQ(plans[2].attention, AttentionKind::kCsa);
  EXPECT_TRUE(plans[2].has_indexer);
  EXPECT_TRUE(plans[2].rope_yarn);
  EXPECT_DOUBLE_EQ(plans[2].rope_theta, 160000.0);
  EXPECT_EQ(plans[3].attention, AttentionKind::kHca);
  EXPECT_FALSE(plans[3].has_indexer);
  EXPECT_EQ(plans[3].cache.compress_ratio, 128);
  // The MTP layer: window-only, scored router, own prefix.
  EXPECT_EQ(plans[43].role, LayerRole::kMtp);
  EXPECT_EQ(plans[43].prefix, "mtp.0.");
  EXPECT_EQ(plans[43].attention, AttentionKind::kWindow);
  EXPECT_EQ(plans[43].router, RouterKind::kScored);
}

// The published sizes: V4-Flash 284B total / 13B active, V4-Pro 1.6T / 49B.
TEST(DeepSeekV4Config, FlashParameterTotals) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_config.json");
  ASSERT_TRUE(c.ok());
  const ParameterCounts n = CountParameters(*c, nullptr);
  EXPECT_EQ(std::llround(n.total / 1e9), 284) << n.total;
  EXPECT_EQ(std::llround(n.active / 1e9), 13) << n.active;
  EXPECT_GT(n.mtp, 0);
  EXPECT_FALSE(n.measured);
  // Predicted storage: FP4 experts dominate, FP8 dense, bf16 embed/head, e8m0 scales.
  EXPECT_GT(n.bytes_by_dtype.at("fp4_e2m1"), n.bytes_by_dtype.at("fp8_e4m3"));
  EXPECT_GT(n.bytes_by_dtype.at("e8m0"), 0);
  EXPECT_GT(n.bytes_by_dtype.at("bf16"), 2 * 129280 * 4096);
}

TEST(DeepSeekV4Config, ProParameterTotals) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_pro_config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->num_hidden_layers, 61);
  const ParameterCounts n = CountParameters(*c, nullptr);
  EXPECT_EQ(std::llround(n.total / 1e11), 16) << n.total;  // 1.6T
  EXPECT_EQ(std::llround(n.active / 1e9), 49) << n.active;
  const auto plans = BuildLayerPlans(*c);
  EXPECT_EQ(plans[0].attention, AttentionKind::kHca);  // Pro starts with two HCA layers
  EXPECT_EQ(plans[1].attention, AttentionKind::kHca);
}

TEST(DeepSeekV4Config, InspectReportFromConfigAlone) {
  auto report = InspectPath(DataDir() + "/v4_flash_config.json");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string& r = *report;
  EXPECT_NE(r.find("total 284."), std::string::npos) << r;
  EXPECT_NE(r.find("active per token 13."), std::string::npos) << r;
  EXPECT_NE(r.find("2 window, 21 CSA, 20 HCA; 3 hash-routed"), std::string::npos) << r;
  EXPECT_NE(r.find("predicted from config.json"), std::string::npos) << r;
  EXPECT_NE(r.find("fp4_e2m1"), std::string::npos) << r;
  EXPECT_NE(r.find("weights: none"), std::string::npos) << r;
  EXPECT_NE(r.find("numerics: the release's"), std::string::npos) << r;
  EXPECT_NE(r.find("wo_a input bf16"), std::string::npos) << r;
  // The field table's listing: every scalar key with its value.
  EXPECT_NE(r.find(" hidden_size=4096 "), std::string::npos) << r;
  EXPECT_NE(r.find(" n_routed_experts=256"), std::string::npos) << r;
  EXPECT_NE(r.find(" routed_scaling_factor=1.5"), std::string::npos) << r;
}

TEST(DeepSeekV4Config, InspectReportWithWeights) {
  auto report = InspectPath(DataDir() + "/swa_fp8");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string& r = *report;
  EXPECT_NE(r.find("measured"), std::string::npos) << r;
  EXPECT_NE(r.find("fp8_e4m3"), std::string::npos) << r;
  EXPECT_NE(r.find("e8m0"), std::string::npos) << r;
  EXPECT_NE(r.find("every declared tensor bound (official names)"), std::string::npos) << r;
  EXPECT_NE(r.find("forward: supported"), std::string::npos) << r;
  EXPECT_NE(r.find("wo_a input bf16"), std::string::npos) << r;
  // A bf16 checkpoint (no quantization_config): the fp32 path's numerics.
  auto bf16 = InspectPath(DataDir() + "/swa_bf16");
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_NE(bf16->find("numerics: no QAT simulations"), std::string::npos) << *bf16;
  EXPECT_NE(bf16->find("wo_a input f32"), std::string::npos) << *bf16;
}

// Spec §4.9: at S = 1,048,576 tokens the bf16 reference cache of V4-Flash is
// 21·320·S + 20·8·S + rings ≈ 6.72 GiB and of V4-Pro 30·320·S + 31·8·S +
// rings ≈ 9.62 GiB (the compressor state, ~12 / ~19 MiB, comes on top).
void ExpectSpecKvTotal(const std::string& file, int64_t n_csa, int64_t n_hca, int64_t n_layers,
                       double spec_gib) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/" + file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int64_t S = 1048576;
  const KvCacheSummary kv = SummarizeKvCache(*c, S, /*reference=*/true);
  const CacheBytes& b = kv.main;
  EXPECT_EQ(b.compressed + b.index_keys, (n_csa * 320 + n_hca * 8) * S) << file;
  EXPECT_EQ(b.ring, n_layers * 128 * 512 * 2) << file;
  EXPECT_EQ(b.state, n_csa * (8 * 1024 + 8 * 256) * 4 * 2 + n_hca * 128 * 512 * 4 * 2) << file;
  const double gib = static_cast<double>(b.ring + b.compressed + b.index_keys) / (1 << 30);
  EXPECT_NEAR(gib, spec_gib, 0.005) << file;
  // Per kind: CSA 320 B and HCA 8 B per token and layer.
  for (const KvCacheKind& k : kv.kinds) {
    if (k.name == "csa") {
      EXPECT_DOUBLE_EQ(k.bytes_per_token, 320.0 * n_csa);
    }
    if (k.name == "hca r=128") {
      EXPECT_DOUBLE_EQ(k.bytes_per_token, 8.0 * n_hca);
    }
    if (k.name == "window" || k.name == "mtp") {
      EXPECT_EQ(k.bytes_per_token, 0.0);
    }
  }
  auto report = InspectPath(DataDir() + "/" + file, {4096, S});
  ASSERT_TRUE(report.ok());
  char want[64];
  std::snprintf(want, sizeof(want), "%.2f GiB of window, compressed and index rows", spec_gib);
  EXPECT_NE(report->find(want), std::string::npos) << *report;
  EXPECT_NE(report->find("4096 tok"), std::string::npos);
}

TEST(DeepSeekV4Config, FlashKvCacheMatchesSpec) {
  ExpectSpecKvTotal("v4_flash_config.json", 21, 20, 43, 6.72);
}
TEST(DeepSeekV4Config, ProKvCacheMatchesSpec) {
  ExpectSpecKvTotal("v4_pro_config.json", 30, 31, 61, 9.62);
}

TEST(DeepSeekV4ConfigBad, InspectContextMustBePositive) {
  auto r = InspectPath(DataDir() + "/v4_flash_config.json", {4096, 0});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context length 0"), std::string::npos);
}

// QAT simulations (spec §9.2): on for official FP8 releases, off for models
// without quantization_config; "qat_simulation" overrides either way.
TEST(DeepSeekV4Config, QatSimulationDefaultsAndOverride) {
  auto flash = Parse(FlashJson());
  ASSERT_TRUE(flash.ok());
  EXPECT_TRUE(flash->qat_simulation);
  auto tiny = Parse(TinyJson());
  ASSERT_TRUE(tiny.ok());
  EXPECT_FALSE(tiny->qat_simulation);
  Json off = FlashJson();
  off["qat_simulation"] = false;
  EXPECT_FALSE(Parse(off)->qat_simulation);
  Json on = TinyJson();
  on["qat_simulation"] = true;
  EXPECT_TRUE(Parse(on)->qat_simulation);
}

TEST(DeepSeekV4Config, TinyGoldenConfigParses) {
  auto c = Parse(TinyJson());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->sliding_window, 8);
  EXPECT_DOUBLE_EQ(c->swiglu_limit, 1.5);
  EXPECT_TRUE(c->CheckForwardSupported().ok());
}

// The official inference config.json spelling (ModelArgs names) parses to the same values.
TEST(DeepSeekV4Config, InferenceSpellings) {
  Json j = {{"model_type", "deepseek_v4"},
            {"vocab_size", 256},
            {"dim", 64},
            {"n_layers", 2},
            {"n_heads", 4},
            {"head_dim", 128},
            {"rope_head_dim", 64},
            {"q_lora_rank", 16},
            {"o_groups", 2},
            {"o_lora_rank", 16},
            {"window_size", 8},
            {"n_routed_experts", 8},
            {"n_activated_experts", 2},
            {"moe_inter_dim", 16},
            {"n_hash_layers", 1},
            {"score_func", "sqrtsoftplus"},
            {"route_scale", 2.5},
            {"norm_eps", 1e-5},
            {"n_mtp_layers", 0},
            {"compress_ratios", {0, 0}},
            {"original_seq_len", 65536},
            {"rope_factor", 16},
            {"dtype", "fp8"},
            {"scale_fmt", "ue8m0"},
            {"expert_dtype", "fp4"}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->sliding_window, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 16);
  EXPECT_EQ(c->num_hash_layers, 1);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_TRUE(c->rope_scaling.enabled);
  EXPECT_TRUE(c->quantization_config.present);
  EXPECT_EQ(c->expert_dtype, ExpertDType::kFp4);
}

// HF transformers v5 spellings: layer_types + compress_rates, mlp_layer_types,
// rope_parameters {main, compress}, partial_rotary_factor.
TEST(DeepSeekV4Config, HfV5Spellings) {
  Json j = TinyJson();
  j.erase("compress_ratios");
  j.erase("num_hash_layers");
  j.erase("qk_rope_head_dim");
  j.erase("rope_scaling");
  j["layer_types"] = {"sliding_attention", "sliding_attention", "heavily_compressed_attention",
                      "compressed_sparse_attention"};
  j["compress_rates"] = {{"heavily_compressed_attention", 8}};
  j["mlp_layer_types"] = {"hash_moe", "hash_moe", "moe", "moe"};
  j["partial_rotary_factor"] = 0.5;
  j["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                          {"compress",
                           {{"rope_type", "yarn"},
                            {"rope_theta", 160000.0},
                            {"factor", 16.0},
                            {"original_max_position_embeddings", 65536},
                            {"beta_fast", 32},
                            {"beta_slow", 1},
                            {"attention_factor", 1.0}}}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compress_ratios, (std::vector<int64_t>{0, 0, 8, 4}));
  EXPECT_EQ(c->num_hash_layers, 2);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_TRUE(c->rope_scaling.enabled);
  EXPECT_DOUBLE_EQ(c->compress_rope_theta, 160000.0);
  EXPECT_EQ(BuildLayerPlans(*c)[2].attention, AttentionKind::kHca);
  EXPECT_EQ(BuildLayerPlans(*c)[3].attention, AttentionKind::kCsa);
}

// The field table (config.h VisitConfigFields) drives parsing: every alias
// it lists is read into its field, and the integer ranges it states are the
// ones Validate enforces, naming the field.
TEST(DeepSeekV4Config, FieldTableAliasesAreRead) {
  const DeepSeekV4Config base = *Parse(TinyJson());
  int aliases = 0;
  VisitConfigFields(base, [&](const ConfigField& field, const auto& value) {
    for (const char* alias : field.aliases) {
      if (alias == nullptr) continue;
      ++aliases;
      Json j = TinyJson();
      j.erase(field.key);
      j[alias] = value;
      auto c = Parse(j);
      ASSERT_TRUE(c.ok()) << alias << ": " << c.status().ToString();
      bool same = false;
      VisitConfigFields(*c, [&](const ConfigField& f2, const auto& v2) {
        if (std::string(f2.key) != field.key) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(v2)>, std::decay_t<decltype(value)>>) {
          same = v2 == value;
        }
      });
      EXPECT_TRUE(same) << alias << " was not read into " << field.key;
    }
  });
  EXPECT_GE(aliases, 10);
}

// ---- rejected configs: one test per case; the error names field and value ----

void ExpectRejected(const Json& j, const std::string& field, const std::string& value) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok()) << "accepted: " << j.dump();
  const std::string msg = c.status().message() + " " + c.status().hint();
  EXPECT_NE(msg.find(field), std::string::npos) << msg;
  EXPECT_NE(msg.find(value), std::string::npos) << msg;
  EXPECT_NE(c.status().message().find("test.json"), std::string::npos) << msg;
}

TEST(DeepSeekV4ConfigBad, FieldTableRangesAreEnforced) {
  int checked = 0;
  VisitConfigFields(*Parse(TinyJson()), [&](const ConfigField& field, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, int64_t>) {
      if (field.max == INT64_MAX) return;
      ++checked;
      Json j = TinyJson();
      for (const char* alias : field.aliases) {
        if (alias != nullptr) j.erase(alias);
      }
      j[field.key] = field.max + 1;
      ExpectRejected(
          j, std::string("'") + field.key + "' = " + std::to_string(field.max + 1),
          field.range_hint != nullptr ? field.range_hint : "at most " + std::to_string(field.max));
    }
  });
  EXPECT_GE(checked, 15);
}

// DSpark configs that do not fit their model name the field.
TEST(DeepSeekV4ConfigBad, DSparkFieldsThatDoNotFit) {
  const Json base = LoadJson(DataDir() + "/dspark_mixed_bf16/config.json");
  ASSERT_TRUE(Parse(base).ok()) << Parse(base).status().ToString();
  Json j = base;
  j["dspark_target_layer_ids"] = {1, 2, 4};  // 4 main layers: ids 0..3
  ExpectRejected(j, "dspark_target_layer_ids[2]", "4");
  j = base;
  j["dspark_target_layer_ids"] = {1, 1, 3};
  ExpectRejected(j, "dspark_target_layer_ids[1]", "distinct main-layer indices");
  j = base;
  j["dspark_target_layer_ids"] = Json::array();
  ExpectRejected(j, "dspark_target_layer_ids", "whose outputs feed the DSpark draft");
  j = base;
  j["dspark_block_size"] = 65;
  ExpectRejected(j, "dspark_block_size", "0 (no DSpark) .. 64");
  j = base;
  j["dspark_noise_token_id"] = 256;  // vocab 256
  ExpectRejected(j, "dspark_noise_token_id", "an id in [0, vocab_size)");
  j = base;
  j["dspark_markov_rank"] = 0;
  ExpectRejected(j, "dspark_markov_rank", "a positive integer");
  j = base;
  j["compress_ratios"] = {0, 4, 8, 0};  // no stage entries
  ExpectRejected(j, "compress_ratios", "one 0 per DSpark draft stage");
  j = base;
  j["compress_ratios"] = {0, 4, 8, 0, 0, 4, 0};
  ExpectRejected(j, "compress_ratios[5]", "draft layers are window-only");
  j = base;
  j["dspark_target_layer_ids"] = "1,2,3";
  ExpectRejected(j, "dspark_target_layer_ids", "a list of integers");
}

TEST(DeepSeekV4ConfigBad, NotJson) {
  auto c = DeepSeekV4Config::FromJson("{\"model_type\": ", "bad.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.json"), std::string::npos);
  EXPECT_NE(c.status().message().find("not valid JSON"), std::string::npos);
}
TEST(DeepSeekV4ConfigBad, NotAnObject) {
  auto c = DeepSeekV4Config::FromJson("[1, 2]", "bad.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a JSON object"), std::string::npos);
}
TEST(DeepSeekV4ConfigBad, MissingModelType) {
  Json j = TinyJson();
  j.erase("model_type");
  ExpectRejected(j, "model_type", "missing");
}
TEST(DeepSeekV4ConfigBad, WrongModelType) {
  Json j = TinyJson();
  j["model_type"] = "deepseek_v3";
  ExpectRejected(j, "model_type", "deepseek_v3");
}
TEST(DeepSeekV4ConfigBad, WrongFieldType) {
  Json j = TinyJson();
  j["hidden_size"] = "sixty-four";
  ExpectRejected(j, "hidden_size", "sixty-four");
}
TEST(DeepSeekV4ConfigBad, QatSimulationNotABool) {
  Json j = TinyJson();
  j["qat_simulation"] = "yes";
  ExpectRejected(j, "qat_simulation", "yes");
}
TEST(DeepSeekV4ConfigBad, NegativeSize) {
  Json j = TinyJson();
  j["num_attention_heads"] = -4;
  ExpectRejected(j, "num_attention_heads", "-4");
}
TEST(DeepSeekV4ConfigBad, AbsurdSize) {
  Json j = TinyJson();
  j["vocab_size"] = int64_t{1} << 40;
  ExpectRejected(j, "vocab_size", std::to_string(int64_t{1} << 40));
}
TEST(DeepSeekV4ConfigBad, SeveralKvHeads) {
  Json j = TinyJson();
  j["num_key_value_heads"] = 4;
  ExpectRejected(j, "num_key_value_heads", "4");
}
TEST(DeepSeekV4ConfigBad, RopeDimLargerThanHead) {
  Json j = TinyJson();
  j["qk_rope_head_dim"] = 256;
  ExpectRejected(j, "qk_rope_head_dim", "256");
}
TEST(DeepSeekV4ConfigBad, GroupsDoNotDivideHeads) {
  Json j = TinyJson();
  j["o_groups"] = 3;
  ExpectRejected(j, "o_groups", "3");
}
TEST(DeepSeekV4ConfigBad, TwoSharedExperts) {
  Json j = TinyJson();
  j["n_shared_experts"] = 2;
  ExpectRejected(j, "n_shared_experts", "2");
}
TEST(DeepSeekV4ConfigBad, TopKAboveExperts) {
  Json j = TinyJson();
  j["num_experts_per_tok"] = 9;
  ExpectRejected(j, "num_experts_per_tok", "9");
}
TEST(DeepSeekV4ConfigBad, TooManyHashLayers) {
  Json j = TinyJson();
  j["num_hash_layers"] = 5;
  ExpectRejected(j, "num_hash_layers", "5");
}
TEST(DeepSeekV4ConfigBad, UnknownScoringFunc) {
  Json j = TinyJson();
  j["scoring_func"] = "relu";
  ExpectRejected(j, "scoring_func", "relu");
}
TEST(DeepSeekV4ConfigBad, UnknownTopkMethod) {
  Json j = TinyJson();
  j["topk_method"] = "group_limited_greedy";
  ExpectRejected(j, "topk_method", "group_limited_greedy");
}
TEST(DeepSeekV4ConfigBad, ExpertGroups) {
  Json j = TinyJson();
  j["n_group"] = 8;
  ExpectRejected(j, "n_group", "8");
}
TEST(DeepSeekV4ConfigBad, DenseFirstLayers) {
  Json j = TinyJson();
  j["first_k_dense_replace"] = 1;
  ExpectRejected(j, "first_k_dense_replace", "1");
}
TEST(DeepSeekV4ConfigBad, UnnormalisedTopK) {
  Json j = TinyJson();
  j["norm_topk_prob"] = false;
  ExpectRejected(j, "norm_topk_prob", "false");
}
TEST(DeepSeekV4ConfigBad, TiedEmbeddings) {
  Json j = TinyJson();
  j["tie_word_embeddings"] = true;
  ExpectRejected(j, "tie_word_embeddings", "true");
}
TEST(DeepSeekV4ConfigBad, AttentionBias) {
  Json j = TinyJson();
  j["attention_bias"] = true;
  ExpectRejected(j, "attention_bias", "true");
}
TEST(DeepSeekV4ConfigBad, OtherActivation) {
  Json j = TinyJson();
  j["hidden_act"] = "gelu";
  ExpectRejected(j, "hidden_act", "gelu");
}
TEST(DeepSeekV4ConfigBad, NonYarnRopeScaling) {
  Json j = TinyJson();
  j["rope_scaling"]["type"] = "linear";
  ExpectRejected(j, "rope_scaling.type", "linear");
}
TEST(DeepSeekV4ConfigBad, YarnAmplitudeFactor) {
  Json j = TinyJson();
  j["rope_scaling"]["attention_factor"] = 1.277;
  ExpectRejected(j, "attention_factor", "1.277");
}
TEST(DeepSeekV4ConfigBad, QuantMethod) {
  Json j = TinyJson();
  j["quantization_config"] = {{"quant_method", "gptq"}};
  ExpectRejected(j, "quantization_config.quant_method", "gptq");
}
TEST(DeepSeekV4ConfigBad, QuantBlockSize) {
  Json j = FlashJson();
  j["quantization_config"]["weight_block_size"] = {64, 64};
  ExpectRejected(j, "weight_block_size", "[64, 64]");
}
TEST(DeepSeekV4ConfigBad, QuantScaleFormat) {
  Json j = FlashJson();
  j["quantization_config"]["scale_fmt"] = "fp32";
  ExpectRejected(j, "scale_fmt", "fp32");
}
TEST(DeepSeekV4ConfigBad, ExpertDType) {
  Json j = TinyJson();
  j["expert_dtype"] = "int4";
  ExpectRejected(j, "expert_dtype", "int4");
}
TEST(DeepSeekV4ConfigBad, NoAttentionSchedule) {
  Json j = TinyJson();
  j.erase("compress_ratios");
  ExpectRejected(j, "compress_ratios", "layer_types");
}
TEST(DeepSeekV4ConfigBad, ScheduleLengthMismatch) {
  Json j = TinyJson();
  j["compress_ratios"] = {0, 0};
  ExpectRejected(j, "compress_ratios", "2 entries");
}
TEST(DeepSeekV4ConfigBad, NegativeCompressRatio) {
  Json j = TinyJson();
  j["compress_ratios"] = {0, -4, 0, 0};
  ExpectRejected(j, "compress_ratios[1]", "-4");
}
TEST(DeepSeekV4ConfigBad, UnknownLayerType) {
  Json j = TinyJson();
  j.erase("compress_ratios");
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention"};
  ExpectRejected(j, "layer_types[1]", "full_attention");
}
TEST(DeepSeekV4ConfigBad, LayerTypesDisagreeWithRatios) {
  Json j = TinyJson();
  j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "sliding_attention",
                      "sliding_attention"};
  ExpectRejected(j, "layer_types", "compress_ratios[1]");
}
TEST(DeepSeekV4ConfigBad, AliasesDisagree) {
  Json j = TinyJson();
  j["dim"] = 128;  // hidden_size is 64
  ExpectRejected(j, "hidden_size", "dim");
}
TEST(DeepSeekV4ConfigBad, HashLayersNotLeading) {
  Json j = TinyJson();
  j["mlp_layer_types"] = {"moe", "hash_moe", "moe", "moe"};
  ExpectRejected(j, "mlp_layer_types[1]", "hash_moe");
}
TEST(DeepSeekV4ConfigBad, BosOutsideVocab) {
  Json j = TinyJson();
  j["bos_token_id"] = 999;
  ExpectRejected(j, "bos_token_id", "999");
}
TEST(DeepSeekV4ConfigBad, CompressedMtpLayer) {
  Json j = TinyJson();
  j["num_nextn_predict_layers"] = 1;
  j["compress_ratios"] = {0, 0, 0, 0, 4};
  ExpectRejected(j, "compress_ratios[4]", "4");
}

// A CSA layer needs a power-of-two indexer width (Hadamard); the config is
// valid for inspection, the forward refuses it naming the layer and field.
TEST(DeepSeekV4ConfigBad, IndexerWidthNotAPowerOfTwo) {
  Json j = TinyJson();
  j["compress_ratios"] = {0, 0, 4, 0};
  j["index_head_dim"] = 96;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Status s = c->CheckForwardSupported();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("layer 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("index_head_dim' = 96"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::deepseek_v4
