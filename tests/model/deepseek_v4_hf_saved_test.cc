// Checkpoints written by HF transformers' `save_pretrained` load like the
// official release and give the same logits: tiny DeepSeek-V4 models (every
// layer kind: window, CSA with the indexer, HCA; hash and scored MoE; the MTP
// layer copied back in) saved by transformers in both of its namings, made by
// tools/reference/make_hf_saved_v4.py from the official-name copies in
// tests/data/deepseek_v4/<name>/. Also: a file in neither naming fails with one
// error that lists the declared tensors it lacks and the names it has instead.
#include <gtest/gtest.h>

#include "deepseek_v4_test_util.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::DataDir;
using testing::MemoryCheckpoint;
using testing::ReadIds;

struct Outputs {
  std::vector<float> logits;  // [T, V]
  std::vector<float> draft;   // [T-1, V] MTP logits, when the model has the layer
};

Outputs RunModel(DeepSeekV4Model& m, const std::vector<int32_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.info().vocab_size;
  Outputs out;
  out.logits.resize(T * V);
  auto cache = m.NewCache(T);
  EXPECT_TRUE(m.Forward(ids, *cache, out.logits, true).ok());
  if (m.has_mtp()) {
    const int64_t row = m.config().hc_mult * m.config().hidden_size;
    const std::vector<float> hidden(m.last_hidden().begin(), m.last_hidden().end());
    out.draft.resize((T - 1) * V);
    auto mtp = m.NewMtpCache(T);
    EXPECT_TRUE(m.ForwardMtp(std::span<const int32_t>(ids).subspan(1),
                             std::span<const float>(hidden).first((T - 1) * row), *mtp, out.draft,
                             true)
                    .ok());
  }
  return out;
}

struct Case {
  const char* name;
  const char* mode;    // "default" (mixed naming) or "internal" (HF names)
  const char* naming;  // ModelWeights::naming
};

class HfSaved : public ::testing::TestWithParam<Case> {};

TEST_P(HfSaved, SameLogitsAsTheOfficialNameCopy) {
  const Case& c = GetParam();
  const std::string official_dir = DataDir() + "/" + c.name;
  const std::string hf_dir = DataDir() + "/hf_saved/" + c.name + "/" + c.mode;
  auto official = testing::LoadCheckpointDir(official_dir);
  auto hf = testing::LoadCheckpointDir(hf_dir);
  ASSERT_NE(official, nullptr);
  ASSERT_NE(hf, nullptr);
  EXPECT_EQ(official->weights().naming, "official");
  EXPECT_EQ(hf->weights().naming, c.naming);
  // transformers' config.json (layer_types, compress_rates, rope_parameters)
  // describes the same main layers (its layer_types list has no MTP entry).
  const auto& r = official->config().compress_ratios;
  const int64_t L = official->config().num_hidden_layers;
  EXPECT_EQ(hf->config().num_hidden_layers, L);
  EXPECT_EQ(std::vector<int64_t>(hf->config().compress_ratios.begin(),
                                 hf->config().compress_ratios.begin() + L),
            std::vector<int64_t>(r.begin(), r.begin() + L));
  EXPECT_EQ(hf->config().num_hash_layers, official->config().num_hash_layers);
  EXPECT_EQ(hf->has_mtp(), official->has_mtp());
  const std::vector<int32_t> ids = ReadIds(official_dir + "/input_ids.txt");
  ASSERT_GT(ids.size(), 8u);
  const Outputs a = RunModel(*official, ids), b = RunModel(*hf, ids);
  // The same values under other names (norm vectors widened to f32 exactly,
  // experts stacked): the same kernels on the same bits.
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.draft, b.draft);
  EXPECT_EQ(b.draft.empty(), !official->has_mtp());
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV4, HfSaved,
                         ::testing::Values(Case{"mixed_mtp_bf16", "default", "hf default save"},
                                           Case{"mixed_mtp_bf16", "internal", "hf"},
                                           Case{"swa_bf16_v2", "default", "hf default save"},
                                           Case{"swa_bf16_v2", "internal", "hf"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name) + "_" + i.param.mode;
                         });

// A checkpoint in neither naming: one error that names the missing declared
// tensors (with the spellings looked for) and the file's unmatched names.
TEST(HfSavedBad, UnknownSpellingListsMissingAndUnmatchedNames) {
  const std::string dir = DataDir() + "/hf_saved/mixed_mtp_bf16/internal";
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  ASSERT_TRUE(config.ok());
  auto reader = OpenCheckpointDir(dir);
  ASSERT_TRUE(reader.ok());
  // A copy in which the indexer's head weights use a spelling no release wrote.
  MemoryCheckpoint ckpt("renamed.safetensors");
  for (const TensorInfo& t : (*reader)->tensors()) {
    std::string name = t.name;
    const std::string from = "compressor.indexer.scorer.weights_proj";
    if (auto p = name.find(from); p != std::string::npos) {
      name.replace(p, from.size(), "compressor.indexer.head_proj");
    }
    ckpt.Add(name, t.dtype, t.shape,
             std::vector<uint8_t>(static_cast<const uint8_t*>(t.data),
                                  static_cast<const uint8_t*>(t.data) + t.nbytes));
  }
  Status s = BindWeights(ckpt, *config, BuildLayerPlans(*config)).status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  const std::string& m = s.message();
  EXPECT_NE(m.find("renamed.safetensors: cannot bind"), std::string::npos) << m;
  EXPECT_NE(m.find("1 tensor(s) missing"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.1.attn.indexer.weights_proj.weight (looked for "
                   "'layers.1.attn.indexer.weights_proj.weight', "
                   "'model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight', "
                   "'model.layers.1.attn.indexer.weights_proj.weight')"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("1 tensor(s) in the file matched no declared name:\n"
                   "    model.layers.1.self_attn.compressor.indexer.head_proj.weight"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace dsv4::deepseek_v4
