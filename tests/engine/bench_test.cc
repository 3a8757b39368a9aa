// engine/bench.h: weight bytes per decoded token (Llama from ModelInfo,
// DeepSeek-V4 from a checkpoint directory) and the bandwidth probe wrapper.
#include "engine/bench.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <algorithm>
#include <optional>
#include <string>

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
