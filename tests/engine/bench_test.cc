// engine/bench.h: weight bytes per decoded token (Llama from ModelInfo,
// DeepSeek-V4 from a checkpoint directory) and the bandwidth probe wrapper.
#include "engine/bench.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4 {
namespace {

const std::string kModels = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/";
const std::string kV4 = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";

LoadedModel Load(const std::string& path, std::optional<bool> wo_a_bf16 = std::nullopt) {
  LoadOptions o;
  o.model_path = path;
  o.threads = 1;
  o.wo_a_bf16 = wo_a_bf16;
  auto r = LoadModel(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(WeightBytesPerToken, TiedLlamaReadsEveryF32ParameterOnce) {
  // stories260K.bin: all f32, classifier tied to the embedding, so a decoded
  // token reads each parameter exactly once.
  LoadedModel m = Load(kModels + "stories260K.bin");
  auto bytes = WeightBytesPerToken(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, 4 * m.model->info().n_params);
  EXPECT_EQ(*bytes, m.model->info().weight_bytes_per_token);
}

TEST(WeightBytesPerToken, DeepSeekV4CountsTopKExpertsAndOneEmbeddingRow) {
  // Expected values from the safetensors headers by an independent Python
  // reading (tests/data/deepseek_v4/TENSORS.md shapes): all non-MTP tensors,
  // embed.weight and ffn.gate.tid2eid one row each, routed experts × k / E
  // (k = 2, E = 8).
  //   swa_fp8:        572438 non-expert + 417792 expert bytes × 2/8 = 676886
  //   mixed_mtp_bf16: 371172 non-expert +  92160 expert bytes × 2/8 = 394212 (mtp.* skipped)
  auto fp8 = DeepSeekV4WeightBytesPerToken(kV4 + "swa_fp8");
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  EXPECT_EQ(*fp8, 676886);
  auto mixed = DeepSeekV4WeightBytesPerToken(kV4 + "mixed_mtp_bf16");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(*mixed, 394212);
  LoadedModel m = Load(kV4 + "swa_fp8");
  auto via_model = WeightBytesPerToken(m);
  ASSERT_TRUE(via_model.ok()) << via_model.status().ToString();
  EXPECT_EQ(*via_model, 676886);
  // The same from a loaded model's own checkpoint (what dsv4 bench uses: no
  // second read of the headers), MTP tensors skipped there too.
  auto mixed_via_model = WeightBytesPerToken(Load(kV4 + "mixed_mtp_bf16"));
  ASSERT_TRUE(mixed_via_model.ok()) << mixed_via_model.status().ToString();
  EXPECT_EQ(*mixed_via_model, 394212);
}

// A deepseek4 GGUF (GGUF names: blk.{i}.ffn_*_exps, token_embd,
// ffn_gate_tid2eid) counts the same way: its stacked expert tensors × k / E,
// one row of the embedding and of the hash table. Expected from the file's
// own tensor list (tiny.gguf: E = 4, k = 2; MXFP4 experts as stored).
TEST(WeightBytesPerToken, DeepSeekV4GgufCountsTopKExpertsAndOneEmbeddingRow) {
  const std::string path = kV4 + "gguf_tiny/tiny.gguf";
  auto file = OpenGguf(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  int64_t dense = 0, experts = 0;
  for (const GgufTensorInfo& t : (*file)->ggml_tensors()) {
    if (t.name.find("_exps.") != std::string::npos) {
      experts += t.nbytes;
    } else if (t.name == "token_embd.weight" || t.name.find("tid2eid") != std::string::npos) {
      dense += t.nbytes / t.shape[0];
    } else {
      dense += t.nbytes;
    }
  }
  ASSERT_GT(experts, 0);
  LoadedModel m = Load(path);
  const std::optional<WeightWork> w = m.model->weight_work_per_token();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->routed_bytes, experts * 2 / 4);
  EXPECT_EQ(w->bytes, dense + experts * 2 / 4);
}

// The routed experts' share of the bytes (swa_fp8: 2 MoE layers of 8 experts,
// 417792 expert bytes in all, top-2; see the test above).
TEST(WeightWork, DeepSeekV4SplitsOffTheRoutedExperts) {
  LoadedModel m = Load(kV4 + "swa_fp8");
  const std::optional<WeightWork> w = m.model->weight_work_per_token();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->bytes, 676886);
  EXPECT_EQ(w->routed_bytes, 417792 * 2 / 8);
  EXPECT_EQ(w->routed_expert_bytes, 417792 / 8 / 2);
}

// A forward of one token runs top-k experts per score-routed layer, and the
// model counts the distinct experts each step ran.
TEST(RoutedExpertsRun, CountsDistinctExpertsPerStep) {
  LoadedModel m = Load(kV4 + "swa_fp8");
  EXPECT_EQ(m.model->routed_experts_run(), 0);
  auto cache = m.model->NewCache(64);
  std::vector<float> logits(256 * 4);
  ASSERT_TRUE(
      m.model->Forward(std::vector<int32_t>{0}, *cache, std::span<float>(logits).first(256), false)
          .ok());
  // Layer 0 hash-routed (its table may repeat an expert), layer 1 top-2 scored.
  const int64_t one = m.model->routed_experts_run();
  EXPECT_GE(one, 1 + 2);
  EXPECT_LE(one, 2 + 2);
  ASSERT_TRUE(m.model->Forward(std::vector<int32_t>{5, 6, 7, 8}, *cache, logits, true).ok());
  const int64_t four = m.model->routed_experts_run() - one;
  EXPECT_GE(four, 2 + 2);  // at least one token's picks per layer
  EXPECT_LE(four, 8 + 8);  // at most every expert of both layers
  EXPECT_EQ(Load(kModels + "stories260K.bin").model->routed_experts_run(), -1);
}

// The projection's arithmetic: E(k) = Σ_{j ≤ k} α^j tokens per round in
// draft(k) + verify(k) seconds, the best k per α.
TEST(ProjectSpeculative, PicksTheLengthWithTheMostTokensPerSecond) {
  const std::vector<VerifyCost> costs = {
      {.k = 0, .verify_seconds = 0.010},
      {.k = 1, .verify_seconds = 0.012, .draft_seconds = 0.002},
      {.k = 2, .verify_seconds = 0.016, .draft_seconds = 0.002},
  };
  const std::vector<SpeculativeProjection> p = ProjectSpeculative(costs);
  ASSERT_EQ(p.size(), std::size(kProjectionAcceptances));
  for (const SpeculativeProjection& x : p) {
    if (x.acceptance == 0.0) {  // drafts never pay: plain decoding
      EXPECT_EQ(x.best_k, 0);
      EXPECT_DOUBLE_EQ(x.tps, 100.0);
      EXPECT_DOUBLE_EQ(x.speedup, 1.0);
    }
    if (x.acceptance == 0.5) {  // k=1: 1.5 / 0.014 = 107.1 beats 100 and 1.75 / 0.018 = 97.2
      EXPECT_EQ(x.best_k, 1);
      EXPECT_DOUBLE_EQ(x.tokens_per_round, 1.5);
      EXPECT_NEAR(x.tps, 1.5 / 0.014, 1e-9);
    }
    if (x.acceptance == 1.0) {  // k=2: 3 / 0.018 = 166.7 beats 2 / 0.014 = 142.9
      EXPECT_EQ(x.best_k, 2);
      EXPECT_DOUBLE_EQ(x.tokens_per_round, 3.0);
      EXPECT_NEAR(x.speedup, 3.0 / 0.018 / 100.0, 1e-9);
    }
  }
  EXPECT_TRUE(ProjectSpeculative({}).empty());
}

// Each draft length's round on a DSpark checkpoint (block 5): a time for the
// draft and the verification, and the routed experts the verification ran,
// within what k + 1 tokens can pick; the bytes follow from them.
TEST(MeasureVerifyCosts, TimesEveryDraftLengthOfADSparkModel) {
  LoadedModel m = Load(kV4 + "dspark_mixed_bf16");
  const std::vector<int32_t> prompt = {0, 17, 42, 99, 5, 3};
  auto costs = MeasureVerifyCosts(m, prompt, 5, 3);
  ASSERT_TRUE(costs.ok()) << costs.status().ToString();
  ASSERT_EQ(costs->size(), 6u);
  const WeightWork w = *m.model->weight_work_per_token();
  const int64_t layers = 4, top_k = 2, experts = 8;
  for (const VerifyCost& c : *costs) {
    EXPECT_GT(c.verify_seconds, 0.0);
    EXPECT_EQ(c.draft_seconds > 0.0, c.k > 0) << c.k;
    EXPECT_GE(c.routed_experts, layers) << c.k;
    EXPECT_LE(c.routed_experts, layers * std::min<int64_t>(experts, (c.k + 1) * top_k)) << c.k;
    EXPECT_EQ(c.weight_bytes, w.bytes - w.routed_bytes +
                                  static_cast<int64_t>(c.routed_experts) * w.routed_expert_bytes);
  }
  // Without a draft head there is nothing to measure.
  LoadedModel plain = Load(kV4 + "swa_fp8");
  EXPECT_ERROR(MeasureVerifyCosts(plain, prompt, 2, 3), StatusCode::kUnimplemented,
               "needs a model with a draft head");
  // The rounds must fit the context.
  EXPECT_ERROR(MeasureVerifyCosts(m, prompt, 5, 1 << 20), StatusCode::kInvalidArgument,
               "exceeds the");
}

TEST(WeightMacsPerToken, DeepSeekV4FromTheConfigDimensions) {
  // swa_bf16 (config.json): D 64, 4 window layers, 4 heads × 128, q/o rank 16,
  // 2 output groups, E 8, k 2, F 16, V 256, mHC 4 (mix 24 = (2 + 4)·4).
  // Per layer: wq_a 16·64 + wq_b 512·16 + wkv 128·64 + wo_a 32·256 + wo_b 64·32
  // + 2 mHC fns 24·256 + gate 8·64 + shared 3·16·64 + 2 routed × 3·16·64
  // = 49664; × 4 layers + head 256·64 + head mHC fn 4·256 = 216064.
  LoadedModel m = Load(kV4 + "swa_bf16");
  auto macs = WeightMacsPerToken(m);
  ASSERT_TRUE(macs.ok()) << macs.status().ToString();
  EXPECT_EQ(*macs, 216064);
  // swa_fp8: FP8 dense, FP4 experts stored as I8 [128, 64] bytes = [128, 128]
  // weights (two per byte). D 128, 2 layers, 2 heads × 128, q rank 128,
  // 2 groups × o rank 64, F 128: per layer wq_a 128·128 + wq_b 256·128 + wkv
  // 128·128 + wo_a 128·128 + wo_b 128·128 + 2 mHC fns 24·512 + gate 8·128 +
  // shared 3·128·128 + 2 routed × 3·128·128 = 271360; × 2 + head 256·128 +
  // head mHC fn 4·512 = 577536.
  LoadedModel q = Load(kV4 + "swa_fp8");
  auto qmacs = WeightMacsPerToken(q);
  ASSERT_TRUE(qmacs.ok()) << qmacs.status().ToString();
  EXPECT_EQ(*qmacs, 577536);
}

TEST(Bf16DotMacsPerToken, FpQuantWeightsWithQuantisedOrBf16Inputs) {
  // swa_fp8 (dims in the test above; config.json has a quantization_config, so
  // act_quant and o_bf16 are on): per layer the FP8 wq_a 128·128, wq_b
  // 256·128, wkv 128·128, wo_a 128·128 (its input rounded to bf16), wo_b
  // 128·128 and shared experts 3·128·128, and 2 of the FP4 routed experts ×
  // 3·128·128 — not the bf16/f32 gate, mHC and head: 245760 per layer, × 2
  // layers; with wo_a's input f32 (--wo-a-input f32), 229376 per layer.
  const bool kernels =
      ops::simd::Fp8Bf16DotKernel() != nullptr && ops::simd::Fp4Bf16DotKernel() != nullptr;
  for (const bool wo_a_bf16 : {true, false}) {
    LoadedModel q = Load(kV4 + "swa_fp8", wo_a_bf16 ? std::nullopt : std::optional(false));
    auto dot = Bf16DotMacsPerToken(q);
    ASSERT_TRUE(dot.ok()) << dot.status().ToString();
    EXPECT_EQ(*dot, kernels ? (wo_a_bf16 ? 491520 : 458752) : 0) << wo_a_bf16;
  }
  // A bf16 model has none.
  LoadedModel b = Load(kV4 + "swa_bf16");
  auto none = Bf16DotMacsPerToken(b);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0);
  EXPECT_ERROR(Bf16DotMacsPerToken(Load(kModels + "stories260K.bin")), StatusCode::kNotFound,
               "bf16 dot-product multiply-adds of a 'llama' model");
}

TEST(WeightMacsPerToken, OtherModelsAreNotFound) {
  LoadedModel m = Load(kModels + "stories260K.bin");
  EXPECT_ERROR(WeightMacsPerToken(m), StatusCode::kNotFound,
               "weight multiply-adds per token of a 'llama' model");
}

TEST(PeakFlopsProbe, ReportsAPositiveRate) {
  const PeakFlops p = MeasurePeakFlops(1, 2);
  EXPECT_EQ(p.repeats, 2);
  EXPECT_GT(p.gflops, 0.1);
  // The bf16 dot-product roof: positive where the kernels exist, else 0.
  const PeakFlops dot = MeasurePeakBf16DotFlops(1, 2);
  EXPECT_EQ(dot.repeats, 2);
  if (ops::simd::Fp8Bf16DotKernel() != nullptr) {
    EXPECT_GT(dot.gflops, 0.1);
  } else {
    EXPECT_EQ(dot.gflops, 0.0);
  }
}

TEST(WeightBytesPerToken, DirectoryWithoutConfigIsAnError) {
  auto r = DeepSeekV4WeightBytesPerToken(kModels);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().ToString();
}

TEST(ReadBandwidthProbe, ReportsPositiveBandwidthForTheBytesAsked) {
  const ReadBandwidth bw = MeasureReadBandwidth(1, int64_t{16} << 20, 3);
  EXPECT_GT(bw.plain_gb_per_s, 0.0);
  EXPECT_GT(bw.ahead_gb_per_s, 0.0);
  EXPECT_EQ(bw.gb_per_s, std::max(bw.plain_gb_per_s, bw.ahead_gb_per_s));
  EXPECT_EQ(bw.bytes, int64_t{16} << 20);
  EXPECT_EQ(bw.repeats, 3);
}

}  // namespace
}  // namespace dsv4
