// DeepSeek-V4 weight binding: the name table (official ↔ HF ↔ GGUF), the
// declaration visitor, native FP8/FP4 binding (views into the checkpoint, no
// expansion; FP8 with 128×128 or 32×32 scale tiles, read off the scale's
// shape), HF-named checkpoints loading like official ones, and one test
// per bad checkpoint: missing tensors reported together, wrong shapes/dtypes
// naming the tensor with expected and found, missing/mis-shaped scales,
// out-of-range tid2eid, corrupt and missing files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <vector>

#include "base/thread_pool.h"
#include "deepseek_v4_test_util.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/tensor_names.h"
#include "model/deepseek_v4/weights.h"
#include "ops/ref/quant_matmul_ref.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::DataDir;
using testing::FillRandomCheckpoint;
using testing::MemoryCheckpoint;
using testing::SynthFormat;
using testing::TinyConfig;
using testing::TinyQuantConfig;

// ---- the name table ----

TEST(DeepSeekV4Names, TranslateOfficialToHfAndGguf) {
  auto hf = TranslateName("layers.3.attn.wq_a.weight", NameScheme::kHf);
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->name, "model.layers.3.self_attn.q_a_proj.weight");
  EXPECT_EQ(TranslateName("layers.3.attn.wq_a.scale", NameScheme::kHf)->name,
            "model.layers.3.self_attn.q_a_proj.weight_scale_inv");
  EXPECT_EQ(TranslateName("layers.12.attn.kv_norm.weight", NameScheme::kGguf)->name,
            "blk.12.attn_kv_a_norm.weight");
  EXPECT_EQ(TranslateName("embed.weight", NameScheme::kHf)->name, "model.embed_tokens.weight");
  EXPECT_EQ(TranslateName("head.weight", NameScheme::kGguf)->name, "output.weight");
  EXPECT_EQ(TranslateName("hc_head_fn", NameScheme::kHf)->name, "model.hc_head.hc_fn");
  EXPECT_EQ(TranslateName("layers.0.hc_ffn_base", NameScheme::kHf)->name,
            "model.layers.0.ffn_hc.base");
  EXPECT_EQ(TranslateName("layers.1.ffn.gate.bias", NameScheme::kHf)->name,
            "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(TranslateName("layers.2.attn.indexer.compressor.ape", NameScheme::kHf)->name,
            "model.layers.2.self_attn.compressor.indexer.position_bias");
  EXPECT_EQ(TranslateName("layers.0.ffn.shared_experts.w2.weight", NameScheme::kHf)->name,
            "model.layers.0.mlp.shared_experts.down_proj.weight");
}

TEST(DeepSeekV4Names, HfStackedExperts) {
  auto w1 = TranslateName("layers.4.ffn.experts.17.w1.weight", NameScheme::kHf);
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->name, "model.layers.4.mlp.experts.gate_up_proj");
  EXPECT_EQ(w1->hf_stack, HfStack::kGateHalf);
  EXPECT_EQ(w1->expert, 17);
  auto w3 = TranslateName("layers.4.ffn.experts.17.w3.weight", NameScheme::kHf);
  EXPECT_EQ(w3->hf_stack, HfStack::kUpHalf);
  auto w2 = TranslateName("layers.4.ffn.experts.3.w2.weight", NameScheme::kHf);
  EXPECT_EQ(w2->name, "model.layers.4.mlp.experts.down_proj");
  EXPECT_EQ(w2->hf_stack, HfStack::kWhole);
  EXPECT_EQ(w2->expert, 3);
  EXPECT_EQ(TranslateName("layers.4.ffn.experts.3.w2.weight", NameScheme::kGguf)->name,
            "blk.4.ffn_down_exps.weight");
}

// transformers' default save_pretrained (spelling seen in the files that
// tools/reference/make_hf_saved_v4.py writes).
TEST(DeepSeekV4Names, HfDefaultSaveSpelling) {
  auto n = [](const char* official) {
    return TranslateName(official, NameScheme::kHfSave).value().name;
  };
  EXPECT_EQ(n("embed.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(n("head.weight"), "head.weight");
  EXPECT_EQ(n("norm.weight"), "model.norm.weight");
  EXPECT_EQ(n("hc_head_fn"), "model.hc_head.hc_fn");
  EXPECT_EQ(n("layers.2.attn.wq_a.weight"), "model.layers.2.attn.wq_a.weight");
  EXPECT_EQ(n("layers.2.attn.kv_norm.weight"), "model.layers.2.attn.kv_norm.weight");
  // ... or, when the load renamed a compressor norm, `attn.norm` (both seen).
  auto kv = CandidateNames("layers.2.attn.kv_norm.weight");
  ASSERT_EQ(kv.size(), 4u);
  EXPECT_EQ(kv[3].scheme, NameScheme::kHfSave);
  EXPECT_EQ(kv[3].resolved.name, "model.layers.2.attn.norm.weight");
  EXPECT_EQ(n("layers.2.attn.compressor.norm.weight"),
            "model.layers.2.attn.compressor.norm.weight");
  EXPECT_EQ(n("layers.1.ffn.experts.5.w3.weight"), "model.layers.1.ffn.experts.5.w3.weight");
  EXPECT_EQ(TranslateName("layers.1.ffn.experts.5.w3.weight", NameScheme::kHfSave)->hf_stack,
            HfStack::kNone);
  // HF's internal name of the indexer's head weights (transformers 5.20-5.25).
  EXPECT_EQ(TranslateName("layers.1.attn.indexer.weights_proj.weight", NameScheme::kHf)->name,
            "model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight");
  // Candidates come in the order the binder tries them.
  auto c = CandidateNames("layers.0.attn_norm.weight");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].resolved.name, "layers.0.attn_norm.weight");
  EXPECT_EQ(c[1].resolved.name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(c[2].resolved.name, "model.layers.0.attn_norm.weight");
}

TEST(DeepSeekV4Names, MtpAndUnknownNames) {
  // MTP tensors: HF drops mtp.*, so HF files carry the release's names (or,
  // next to a default save, the same under `model.`).
  EXPECT_TRUE(TranslateName("mtp.0.e_proj.weight", NameScheme::kOfficial).has_value());
  EXPECT_TRUE(TranslateName("mtp.0.attn.wq_a.weight", NameScheme::kOfficial).has_value());
  EXPECT_EQ(TranslateName("mtp.0.attn.wq_a.weight", NameScheme::kHf)->name,
            "mtp.0.attn.wq_a.weight");
  EXPECT_EQ(TranslateName("mtp.0.e_proj.weight", NameScheme::kHfSave)->name,
            "model.mtp.0.e_proj.weight");
  // GGUF: the draft is a file of its own, listed by the reader under mtp.{M}.
  // with its GGUF names (gguf_reader.h); the FP8 scales are not stored.
  EXPECT_EQ(TranslateName("mtp.0.attn.wq_a.weight", NameScheme::kGguf)->name,
            "mtp.0.attn_q_a.weight");
  EXPECT_EQ(TranslateName("mtp.0.e_proj.weight", NameScheme::kGguf)->name,
            "mtp.0.nextn.e_proj.weight");
  EXPECT_EQ(TranslateName("mtp.0.hc_head_fn", NameScheme::kGguf)->name,
            "mtp.0.output_hc_fn.weight");
  EXPECT_FALSE(TranslateName("mtp.0.e_proj.scale", NameScheme::kGguf).has_value());
  EXPECT_FALSE(TranslateName("layers.0.attn.wq_c.weight", NameScheme::kHf).has_value());
  EXPECT_FALSE(TranslateName("layers.x.attn.wq_a.weight", NameScheme::kHf).has_value());
  EXPECT_FALSE(TranslateName("layers.0.ffn.experts..w1.weight", NameScheme::kHf).has_value());
  EXPECT_FALSE(TranslateName("", NameScheme::kHf).has_value());
}

TEST(DeepSeekV4Names, EveryDeclaredTensorHasATableRowAndNamesAreUnique) {
  auto c = DeepSeekV4Config::FromFile(DataDir() + "/v4_flash_config.json");
  ASSERT_TRUE(c.ok());
  std::set<std::string> official, hf;
  int64_t n = 0;
  ForEachWeight(*c, BuildLayerPlans(*c), [&](const WeightDecl& d) {
    ++n;
    EXPECT_TRUE(official.insert(d.name).second) << "declared twice: " << d.name;
    EXPECT_TRUE(TranslateName(d.name, NameScheme::kOfficial).has_value()) << d.name;
    if (d.mtp) return;
    auto h = TranslateName(d.name, NameScheme::kHf);
    ASSERT_TRUE(h.has_value()) << d.name;
    if (h->hf_stack == HfStack::kNone) {
      EXPECT_TRUE(hf.insert(h->name).second) << "two official names map to " << h->name;
    }
  });
  // 6 top-level + 43 layers + the MTP layer; experts dominate.
  EXPECT_GT(n, 43 * 256 * 3);
}

// ---- binding ----

std::shared_ptr<MemoryCheckpoint> TinyCheckpoint(SynthFormat format, uint32_t seed = 1) {
  auto ckpt = std::make_shared<MemoryCheckpoint>("tiny.safetensors");
  FillRandomCheckpoint(format == SynthFormat::kFp8Fp4 ? TinyQuantConfig() : TinyConfig(), seed,
                       format, *ckpt);
  return ckpt;
}

Status BindStatus(const MemoryCheckpoint& ckpt, const DeepSeekV4Config& c) {
  return BindWeights(ckpt, c, BuildLayerPlans(c)).status();
}

TEST(DeepSeekV4Weights, BindsBf16) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  auto w = BindWeights(*ckpt, TinyConfig(), BuildLayerPlans(TinyConfig()));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->naming, "official");
  ASSERT_EQ(w->layers.size(), 3u);
  EXPECT_EQ(w->layers[0].attn.wq_a.format, LinearFormat::kDense);
  EXPECT_EQ(w->layers[0].moe.tid2eid.size(), 64u * 2);  // hash layer
  EXPECT_TRUE(w->layers[0].moe.bias.empty());
  EXPECT_EQ(w->layers[1].moe.bias.size(), 8u);  // scored layer
  EXPECT_TRUE(w->layers[1].moe.tid2eid.empty());
  // Views into the checkpoint, not copies.
  EXPECT_EQ(w->embed.data, ckpt->Find("embed.weight")->data);
  EXPECT_EQ(w->layers[2].moe.experts[5].w2.weight.data,
            ckpt->Find("layers.2.ffn.experts.5.w2.weight")->data);
}

TEST(DeepSeekV4Weights, BindsFp8AndPackedFp4Natively) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  auto w = BindWeights(*ckpt, TinyQuantConfig(), BuildLayerPlans(TinyQuantConfig()));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const LinearWeight& wq_b = w->layers[0].attn.wq_b;
  EXPECT_EQ(wq_b.format, LinearFormat::kFp8Block);
  EXPECT_EQ(wq_b.weight.dtype, DType::kFp8E4m3);
  EXPECT_EQ(wq_b.scale.dtype, DType::kE8m0);
  EXPECT_EQ(wq_b.weight.data, ckpt->Find("layers.0.attn.wq_b.weight")->data);
  const LinearWeight& e = w->layers[1].moe.experts[3].w1;
  EXPECT_EQ(e.format, LinearFormat::kFp4Block);
  EXPECT_EQ(e.weight.dtype, DType::kFp4E2m1);
  EXPECT_EQ(e.rows(), 128);
  EXPECT_EQ(e.cols(), 128);  // logical K; stored as i8 [128, 64]
  EXPECT_EQ(e.weight.data, ckpt->Find("layers.1.ffn.experts.3.w1.weight")->data);
  EXPECT_TRUE(e.scale.SameShape({128, 4}));
}

// DeepSeek-V4.1-Flash's FP8 weights carry one scale per 32×32 tile: the
// binding reads the tiling off each scale's shape ([ceil(N/32), ceil(K/32)]
// instead of [ceil(N/128), ceil(K/128)]), and Linear multiplies with it (the
// fast kernels against the scalar twin with 32×32 tiles).
TEST(DeepSeekV4Weights, Fp8BlockFromScaleShape) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  const std::vector<int64_t> shape = ckpt->Find("layers.1.attn.wq_b.weight")->shape;
  ASSERT_EQ(shape.size(), 2u);
  const int64_t sn = (shape[0] + 31) / 32, sk = (shape[1] + 31) / 32;
  std::vector<uint8_t> codes(static_cast<size_t>(sn * sk));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(118 + i % 17);
  ckpt->Add("layers.1.attn.wq_b.scale", DType::kE8m0, {sn, sk}, codes);
  auto w = BindWeights(*ckpt, TinyQuantConfig(), BuildLayerPlans(TinyQuantConfig()));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const LinearWeight& small = w->layers[1].attn.wq_b;
  EXPECT_EQ(small.format, LinearFormat::kFp8Block);
  EXPECT_EQ(small.fp8_block, 32);
  EXPECT_TRUE(small.scale.SameShape({sn, sk}));
  EXPECT_EQ(w->layers[0].attn.wq_b.fp8_block, 128);
  EXPECT_EQ(w->layers[1].attn.wo_b.fp8_block, 128);

  const int64_t t = 3, n = small.rows(), k = small.cols();
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> x(t * k), got(t * n), want(t * n);
  for (float& v : x) v = normal(rng);
  ThreadPool pool(2);
  for (const int64_t tokens : {int64_t{1}, t}) {
    Linear(pool, got.data(), x.data(), small, tokens);
    ops::ref::MatMulFp8Block(want.data(), n, x.data(), small.weight, small.scale, tokens, 0, n, 32);
    for (int64_t i = 0; i < tokens * n; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4f * (std::fabs(want[i]) + 1.0f))
          << "T=" << tokens << " " << i;
    }
  }
}

TEST(DeepSeekV4WeightsBad, MissingTensorsAreReportedTogether) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  ckpt->Remove("layers.0.attn.wq_a.weight");
  ckpt->Remove("layers.2.ffn.experts.7.w3.weight");
  ckpt->Remove("hc_head_scale");
  Status s = BindStatus(*ckpt, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("tiny.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("3 tensor(s) missing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("layers.0.attn.wq_a.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("layers.2.ffn.experts.7.w3.weight"), std::string::npos);
  EXPECT_NE(s.message().find("hc_head_scale"), std::string::npos);
  EXPECT_FALSE(s.hint().empty());
}

TEST(DeepSeekV4WeightsBad, WrongShapeNamesTensorExpectedAndFound) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  ckpt->Add("layers.1.attn.wq_b.weight", DType::kBF16, {200, 32},
            std::vector<uint8_t>(200 * 32 * 2));
  Status s = BindStatus(*ckpt, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'layers.1.attn.wq_b.weight' is [200, 32] bf16, expected [256, 32]"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, WrongDtype) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  ckpt->Add("layers.0.attn_norm.weight", DType::kI32, {64}, std::vector<uint8_t>(64 * 4));
  Status s = BindStatus(*ckpt, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'layers.0.attn_norm.weight' is [64] i32, expected [64] f32"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, Fp8WithoutScale) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  ckpt->Remove("layers.0.attn.wkv.scale");
  Status s = BindStatus(*ckpt, TinyQuantConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layers.0.attn.wkv.scale (the block scales of fp8_e4m3 "
                             "'layers.0.attn.wkv.weight')"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, Fp8ScaleWrongShape) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  ckpt->Add("layers.1.attn.wo_b.scale", DType::kE8m0, {2, 2}, std::vector<uint8_t>(4, 127));
  Status s = BindStatus(*ckpt, TinyQuantConfig());
  ASSERT_FALSE(s.ok());
  // Both tilings named: wo_b is [128, 128].
  EXPECT_NE(s.message().find("scale 'layers.1.attn.wo_b.scale' of 'layers.1.attn.wo_b.weight' "
                             "is [2, 2] e8m0, expected [1, 1] (one per 128x128) or [4, 4] (one "
                             "per 32x32), e8m0 or f32"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, Fp4PackedWrongShape) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  ckpt->Add("layers.0.ffn.experts.2.w2.weight", DType::kI8, {128, 128},
            std::vector<uint8_t>(128 * 128));
  Status s = BindStatus(*ckpt, TinyQuantConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'layers.0.ffn.experts.2.w2.weight' is [128, 128] i8, expected "
                             "[128, 128]"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("FP4 e2m1 packed as i8 [N, K/2]"), std::string::npos);
}

TEST(DeepSeekV4WeightsBad, Fp4ScaleMustBeE8m0) {
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  ckpt->Add("layers.0.ffn.experts.0.w1.scale", DType::kF32, {128, 4},
            std::vector<uint8_t>(128 * 4 * 4));
  Status s = BindStatus(*ckpt, TinyQuantConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected [128, 4] e8m0 (one per 32 inputs)"), std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, PackedFp4OutsideRoutedExperts) {
  // FP4 is only a routed-expert format; a packed dense linear is a mismatch.
  auto ckpt = TinyCheckpoint(SynthFormat::kFp8Fp4);
  ckpt->Add("layers.0.ffn.shared_experts.w1.weight", DType::kI8, {128, 64},
            std::vector<uint8_t>(128 * 64));
  Status s = BindStatus(*ckpt, TinyQuantConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'layers.0.ffn.shared_experts.w1.weight' is [128, 64] i8"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, Tid2eidOutOfRange) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  TensorInfo* t = ckpt->Mutable("layers.0.ffn.gate.tid2eid");
  ASSERT_NE(t, nullptr);
  const int64_t bad = 8;  // n_routed_experts is 8
  std::memcpy(const_cast<void*>(t->data), &bad, 8);
  // Entry [0, 0].
  Status s = BindStatus(*ckpt, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("entry [0, 0] = 8 is not an expert id in [0, 8)"), std::string::npos)
      << s.message();
}

TEST(DeepSeekV4WeightsBad, Tid2eidInt32IsAccepted) {
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  std::vector<uint8_t> b(64 * 2 * 4);
  for (int i = 0; i < 128; ++i) {
    const int32_t v = i % 8;
    std::memcpy(b.data() + 4 * i, &v, 4);
  }
  ckpt->Add("layers.0.ffn.gate.tid2eid", DType::kI32, {64, 2}, b);
  auto w = BindWeights(*ckpt, TinyConfig(), BuildLayerPlans(TinyConfig()));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->layers[0].moe.tid2eid[5], 5);
}

TEST(DeepSeekV4WeightsBad, HashLayerWithBiasInsteadOfTable) {
  // The config says 1 hash layer; a checkpoint made for 0 hash layers lacks tid2eid.
  auto ckpt = TinyCheckpoint(SynthFormat::kBf16);
  ckpt->Remove("layers.0.ffn.gate.tid2eid");
  Status s = BindStatus(*ckpt, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layers.0.ffn.gate.tid2eid"), std::string::npos) << s.message();
  EXPECT_NE(s.hint().find("num_hash_layers"), std::string::npos);
}

TEST(DeepSeekV4WeightsBad, NoEmbedding) {
  MemoryCheckpoint empty("empty.safetensors");
  Status s = BindStatus(empty, TinyConfig());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty.safetensors: no embedding tensor"), std::string::npos)
      << s.message();
}

// A file with the GGUF embedding binds by GGUF names alone: what is missing is
// named in that spelling, each stacked expert tensor once.
TEST(DeepSeekV4WeightsBad, GgufMissingTensorsAreNamedInTheGgufSpelling) {
  const DeepSeekV4Config c = TinyConfig();
  MemoryCheckpoint ckpt("model.gguf");
  ckpt.Add("token_embd.weight", DType::kF32, {c.vocab_size, c.hidden_size},
           std::vector<uint8_t>(c.vocab_size * c.hidden_size * 4));
  Status s = BindStatus(ckpt, c);
  ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.message();
  EXPECT_NE(s.message().find("model.gguf: cannot bind the DeepSeek-V4 weights (gguf tensor names)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("layers.0.attn.wq_a.weight (looked for 'blk.0.attn_q_a.weight')"),
            std::string::npos)
      << s.message();
  const std::string exps = "looked for 'blk.0.ffn_gate_exps.weight'";
  const size_t first = s.message().find(exps);
  EXPECT_NE(first, std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(exps, first + 1), std::string::npos) << s.message();
}

// ---- HF names load like official names ----

// Renames an official checkpoint to HF spellings, stacking the routed experts
// into gate_up_proj [E, 2F, D] and down_proj [E, D, F].
std::shared_ptr<MemoryCheckpoint> ToHf(const MemoryCheckpoint& official,
                                       const DeepSeekV4Config& c) {
  auto hf = std::make_shared<MemoryCheckpoint>("hf.safetensors");
  const int64_t E = c.n_routed_experts, F = c.moe_intermediate_size, D = c.hidden_size;
  for (const TensorInfo& t : official.tensors()) {
    auto r = TranslateName(t.name, NameScheme::kHf);
    if (!r || r->hf_stack != HfStack::kNone) continue;
    hf->Add(r->name, t.dtype, t.shape,
            std::vector<uint8_t>(static_cast<const uint8_t*>(t.data),
                                 static_cast<const uint8_t*>(t.data) + t.nbytes));
  }
  const int64_t es = DTypeBytes(DType::kBF16, 1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<uint8_t> gate_up(E * 2 * F * D * es), down(E * D * F * es);
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e);
      const TensorInfo* w1 = official.Find(p + ".w1.weight");
      const TensorInfo* w3 = official.Find(p + ".w3.weight");
      const TensorInfo* w2 = official.Find(p + ".w2.weight");
      std::memcpy(gate_up.data() + e * 2 * F * D * es, w1->data, F * D * es);
      std::memcpy(gate_up.data() + (e * 2 + 1) * F * D * es, w3->data, F * D * es);
      std::memcpy(down.data() + e * D * F * es, w2->data, D * F * es);
    }
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    hf->Add(p + "gate_up_proj", DType::kBF16, {E, 2 * F, D}, gate_up);
    hf->Add(p + "down_proj", DType::kBF16, {E, D, F}, down);
  }
  return hf;
}

TEST(DeepSeekV4Weights, HfNamedCheckpointGivesTheSameLogits) {
  const DeepSeekV4Config c = TinyConfig();
  auto official = TinyCheckpoint(SynthFormat::kBf16, 3);
  auto hf = ToHf(*official, c);
  auto m1 = DeepSeekV4Model::Load(official, c);
  auto m2 = DeepSeekV4Model::Load(hf, c);
  ASSERT_TRUE(m1.ok()) << m1.status().ToString();
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ((*m2)->weights().naming, "hf");
  const std::vector<int32_t> ids = {0, 5, 9, 5, 33, 2, 63, 7};
  std::vector<float> a(ids.size() * 64), b(ids.size() * 64);
  auto ca = (*m1)->NewCache(0), cb = (*m2)->NewCache(0);
  ASSERT_TRUE((*m1)->Forward(ids, *ca, a, true).ok());
  ASSERT_TRUE((*m2)->Forward(ids, *cb, b, true).ok());
  EXPECT_EQ(a, b);
}

TEST(DeepSeekV4WeightsBad, HfStackedExpertsWrongShape) {
  const DeepSeekV4Config c = TinyConfig();
  auto hf = ToHf(*TinyCheckpoint(SynthFormat::kBf16), c);
  hf->Add("model.layers.1.mlp.experts.down_proj", DType::kBF16, {8, 32, 64},
          std::vector<uint8_t>(8 * 32 * 64 * 2));
  Status s = BindStatus(*hf, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'model.layers.1.mlp.experts.down_proj' is [8, 32, 64] bf16, "
                             "expected [8, 64, 32]"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(hf tensor names)"), std::string::npos);
}

// ---- files on disk ----

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("dsv4_v4_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(DeepSeekV4FilesBad, MissingConfig) {
  TempDir dir;
  auto m = LoadDeepSeekV4(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().message();
}

TEST(DeepSeekV4FilesBad, MissingWeights) {
  TempDir dir;
  std::filesystem::copy_file(DataDir() + "/swa_bf16/config.json", dir.path() + "/config.json");
  auto m = LoadDeepSeekV4(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(dir.path()), std::string::npos) << m.status().message();
}

TEST(DeepSeekV4FilesBad, TruncatedSafetensors) {
  TempDir dir;
  std::filesystem::copy_file(DataDir() + "/swa_bf16/config.json", dir.path() + "/config.json");
  std::ifstream in(DataDir() + "/swa_bf16/model.safetensors", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() / 2);
  std::ofstream(dir.path() + "/model.safetensors", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto m = LoadDeepSeekV4(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos)
      << m.status().message();
}

TEST(DeepSeekV4FilesBad, ConfigDoesNotMatchWeights) {
  // The weights of swa_bf16 (4 layers, hidden 64) under the config of swa_bf16_v2.
  TempDir dir;
  std::filesystem::copy_file(DataDir() + "/swa_bf16_v2/config.json", dir.path() + "/config.json");
  std::filesystem::copy_file(DataDir() + "/swa_bf16/model.safetensors",
                             dir.path() + "/model.safetensors");
  auto m = LoadDeepSeekV4(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'embed.weight' is [256, 64] bf16, expected [320, 40]"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace dsv4::deepseek_v4
