// engine/synth_model.h (`dsv4 synth-model`): the checkpoint has the official
// DeepSeek-V4 structure and storage (spec §7), realistic weight scales, the
// requested size, shards with an index when asked, loads, and runs — through
// the engine and through `dsv4 run --model DIR --prompt-ids`.
#include "engine/synth_model.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>
#include "../common/status_matchers.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/float_types.h"
#include "engine/bench.h"
#include "engine/generate.h"
#include "engine/loader.h"
#include "engine/speculative.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"
#include "model/draft.h"

#include "../common/locked_memory.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// The smallest model with every feature: window, CSA and HCA layers, a hash
// layer and scored layers, FP8 dense and FP4 experts.
SynthModelOptions Tiny(const std::string& dir) {
  SynthModelOptions o;
  o.out_dir = dir;
  o.d_model = 128;
  o.n_layers = 4;
  o.n_experts = 4;
  o.top_k = 2;
  o.moe_inter = 128;
  o.n_heads = 4;
  o.head_dim = 64;
  o.q_lora_rank = 128;
  o.o_lora_rank = 64;
  o.o_groups = 2;
  o.vocab = 512;
  o.n_hash_layers = 1;
  o.sliding_window = 8;
  o.index_n_heads = 2;
  o.index_head_dim = 64;
  o.index_topk = 4;
  return o;
}

class SynthModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("dsv4_synth_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SynthModelTest, HasTheOfficialStructureAndStorage) {
  auto r = WriteSyntheticDeepSeekV4(Tiny(dir_));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->compress_ratios, (std::vector<int64_t>{0, 0, 4, 128}));
  EXPECT_EQ(r->n_shards, 1);
  auto file = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(static_cast<int64_t>(f.tensors().size()), r->n_tensors);
  auto expect = [&](const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    SCOPED_TRACE(name);
    const TensorInfo* t = f.Find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(f.StoredDType(name), dtype);
    EXPECT_EQ(t->shape, shape);
  };
  expect("embed.weight", "BF16", {512, 128});
  expect("head.weight", "BF16", {512, 128});
  expect("hc_head_fn", "F32", {4, 512});
  expect("layers.0.hc_attn_fn", "F32", {24, 512});
  expect("layers.0.attn.wq_a.weight", "F8_E4M3", {128, 128});
  expect("layers.0.attn.wq_a.scale", "F8_E8M0", {1, 1});
  expect("layers.0.attn.wq_b.weight", "F8_E4M3", {256, 128});
  expect("layers.0.attn.wq_b.scale", "F8_E8M0", {2, 1});
  expect("layers.0.attn.wo_a.weight", "F8_E4M3", {128, 128});
  expect("layers.0.attn.attn_sink", "F32", {4});
  expect("layers.0.ffn.gate.tid2eid", "I64", {512, 2});            // hash layer
  expect("layers.1.ffn.gate.bias", "F32", {4});                    // scored layer
  expect("layers.1.ffn.experts.3.w1.weight", "I8", {128, 64});     // FP4 packed
  expect("layers.1.ffn.experts.3.w1.scale", "F8_E8M0", {128, 4});  // per 32
  expect("layers.1.ffn.experts.3.w2.weight", "I8", {128, 64});
  expect("layers.1.ffn.shared_experts.w2.weight", "F8_E4M3", {128, 128});
  expect("layers.2.attn.compressor.ape", "F32", {4, 128});  // CSA: 2 × head_dim
  expect("layers.2.attn.indexer.wq_b.weight", "F8_E4M3", {128, 128});
  expect("layers.2.attn.indexer.compressor.wkv.weight", "BF16", {128, 128});
  expect("layers.3.attn.compressor.ape", "F32", {128, 64});         // HCA ratio 128
  EXPECT_EQ(f.Find("layers.0.attn.compressor.ape"), nullptr);       // window layer
  EXPECT_EQ(f.Find("layers.3.attn.indexer.wq_b.weight"), nullptr);  // only CSA has one
  EXPECT_EQ(f.Find("layers.1.ffn.gate.tid2eid"), nullptr);

  // Hash routing: k distinct experts in range per token.
  const TensorInfo* tid = f.Find("layers.0.ffn.gate.tid2eid");
  const auto* ids = static_cast<const int64_t*>(tid->data);
  for (int64_t t = 0; t < 512; ++t) {
    EXPECT_NE(ids[2 * t], ids[2 * t + 1]);
    for (int j = 0; j < 2; ++j) ASSERT_TRUE(ids[2 * t + j] >= 0 && ids[2 * t + j] < 4);
  }

  std::ifstream in(dir_ + "/config.json");
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config["model_type"], "deepseek_v4");
  EXPECT_EQ(config["expert_dtype"], "fp4");
  EXPECT_EQ(config["quantization_config"]["scale_fmt"], "ue8m0");
  EXPECT_EQ(config["n_routed_experts"], 4);
}

// Dequantised std of a weight, to compare with 1/√fan_in.
double Fp8Std(const TensorInfo& w, const TensorInfo& scale) {
  const auto* b = static_cast<const uint8_t*>(w.data);
  const float s = E8m0ToF32(*static_cast<const uint8_t*>(scale.data));
  double sum2 = 0;
  for (int64_t i = 0; i < w.nbytes; ++i) sum2 += std::pow(Fp8E4m3ToF32(b[i]) * s, 2);
  return std::sqrt(sum2 / w.nbytes);
}

// --router-skew: the scored layers' selection bias falls as ln(1 + e), and
// the routing follows it (low ids picked most); 0 leaves the bias at zero.
TEST_F(SynthModelTest, RouterSkewFavoursLowExpertIds) {
  SynthModelOptions o = Tiny(dir_);
  o.n_experts = 16;
  o.router_skew = 0.5;
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(o).ok());
  auto file = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  const TensorInfo* bias = (*file)->Find("layers.1.ffn.gate.bias");
  ASSERT_NE(bias, nullptr);
  const auto* b = static_cast<const float*>(bias->data);
  for (int e = 0; e < 16; ++e) {
    EXPECT_FLOAT_EQ(b[e], static_cast<float>(-0.5 * std::log1p(e))) << e;
  }
  // The experts 48 decoded tokens use (each a miss once, through a cache
  // with room for all): fewer with the skew than without.
  auto distinct_experts = [&](double skew) -> int64_t {
    SynthModelOptions so = o;
    so.router_skew = skew;
    so.out_dir = dir_ + "/skew" + std::to_string(skew);
    EXPECT_TRUE(WriteSyntheticDeepSeekV4(so).ok());
    LoadOptions lo;
    lo.model_path = so.out_dir;
    lo.threads = 1;
    auto m = LoadModel(lo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return -1;
    auto* v4 = dynamic_cast<deepseek_v4::DeepSeekV4Model*>(m->model.get());
    EXPECT_TRUE(v4 != nullptr && v4->StreamExperts(int64_t{1} << 30).ok());
    auto cache = m->model->NewCache(64);
    std::vector<float> logits(m->model->info().vocab_size);
    for (int32_t i = 0; i < 48; ++i) {
      const int32_t token[1] = {1 + i * 37 % 400};
      EXPECT_TRUE(m->model->Forward(token, *cache, logits, false).ok());
    }
    return v4->expert_cache()->stats().misses;
  };
  EXPECT_LT(distinct_experts(2.0), distinct_experts(0.0));
}

TEST_F(SynthModelTest, WeightsHaveRealisticScale) {
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(Tiny(dir_)).ok());
  auto file = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  const SafetensorsFile& f = **file;
  const double want = 1.0 / std::sqrt(128.0);
  const double fp8 =
      Fp8Std(*f.Find("layers.1.attn.wq_a.weight"), *f.Find("layers.1.attn.wq_a.scale"));
  EXPECT_GT(fp8, want / 2);
  EXPECT_LT(fp8, want * 2);
  // FP4 expert: two nibbles per byte, one e8m0 scale per 32 inputs.
  const TensorInfo* w = f.Find("layers.1.ffn.experts.0.w1.weight");
  const TensorInfo* s = f.Find("layers.1.ffn.experts.0.w1.scale");
  const auto* wb = static_cast<const uint8_t*>(w->data);
  const auto* sb = static_cast<const uint8_t*>(s->data);
  double sum2 = 0;
  for (int64_t i = 0; i < w->nbytes; ++i) {
    const float scale = E8m0ToF32(sb[i * 2 / 32]);
    sum2 += std::pow(Fp4E2m1ToF32(wb[i] & 15) * scale, 2) +
            std::pow(Fp4E2m1ToF32(wb[i] >> 4) * scale, 2);
  }
  const double fp4 = std::sqrt(sum2 / (2 * w->nbytes));
  EXPECT_GT(fp4, want / 2);
  EXPECT_LT(fp4, want * 2);
  // BF16 compressor weight.
  const TensorInfo* c = f.Find("layers.2.attn.compressor.wkv.weight");
  const auto* cb = static_cast<const uint16_t*>(c->data);
  double c2 = 0;
  for (int64_t i = 0; i < c->nbytes / 2; ++i) c2 += std::pow(Bf16ToF32(cb[i]), 2);
  const double bf16 = std::sqrt(c2 / (c->nbytes / 2));
  EXPECT_GT(bf16, want / 1.5);
  EXPECT_LT(bf16, want * 1.5);
}

TEST_F(SynthModelTest, LoadsAndRunsThroughTheEngine) {
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(Tiny(dir_)).ok());
  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  auto m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->model->info().architecture, "deepseek_v4");
  auto cache = m->model->NewCache(300);
  // 260 tokens: past the window (8) and HCA's ratio (128), so every kind has entries.
  std::vector<int32_t> prompt(260);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 512);
  std::vector<float> logits(512);
  ASSERT_TRUE(m->model->Forward(prompt, *cache, logits, false).ok());
  float lo_v = logits[0], hi_v = logits[0];
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    lo_v = std::min(lo_v, v);
    hi_v = std::max(hi_v, v);
  }
  EXPECT_GT(hi_v - lo_v, 1e-3f);  // not a constant output
  // Weight bytes per token: top-2 of 4 experts.
  auto bytes = WeightBytesPerToken(*m);
  ASSERT_TRUE(bytes.ok());
  EXPECT_GT(*bytes, 0);
}

TEST_F(SynthModelTest, RunsThroughTheCli) {
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(Tiny(dir_)).ok());
  // Greedy: sampling (random seed by default) could end early on an end token.
  const std::string cmd = std::string(DSV4_BIN) + " run --model " + dir_ +
                          " --prompt-ids \"0 5 17 42 99 3 7 8 9 10 11 12\" --max-tokens 6 "
                          "--temperature 0 --threads 1 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  std::istringstream ids(out);
  int n = 0, id;
  while (ids >> id) {
    EXPECT_TRUE(id >= 0 && id < 512) << out;
    ++n;
  }
  EXPECT_EQ(n, 6) << out;
}

TEST_F(SynthModelTest, SizeTargetPicksTheExpertCount) {
  SynthModelOptions o = Tiny(dir_);
  o.n_experts = 0;
  o.size_gb = 0.02;
  auto r = WriteSyntheticDeepSeekV4(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->n_experts, 4);
  EXPECT_NEAR(r->total_bytes / 1e9, 0.02, 0.02 * 0.05);
  std::error_code ec;
  EXPECT_NEAR(static_cast<double>(fs::file_size(dir_ + "/model.safetensors", ec)), r->total_bytes,
              1e6);
}

// The tiny model in shards of at most 400 kB (several, with an index).
Result<SynthModelReport> WriteSharded(const std::string& dir) {
  SynthModelOptions o = Tiny(dir);
  o.shard_bytes = 400'000;
  return WriteSyntheticDeepSeekV4(o);
}

TEST_F(SynthModelTest, ShardsWithAnIndexLoad) {
  auto r = WriteSharded(dir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->n_shards, 1);
  EXPECT_TRUE(fs::exists(dir_ + "/model.safetensors.index.json"));
  auto reader = OpenCheckpointDir(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(static_cast<int64_t>((*reader)->tensors().size()), r->n_tensors);
  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  auto m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
}

using ::dsv4::testing::LockedBytes;

// Whether this process may lock `bytes` more (root, or room under RLIMIT_MEMLOCK).
bool MayLock(int64_t bytes) {
  struct rlimit rl {};
  if (::geteuid() == 0) return true;
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return false;
  return rl.rlim_cur == RLIM_INFINITY ||
         static_cast<int64_t>(rl.rlim_cur) >= LockedBytes() + bytes + (int64_t{1} << 20);
}

TEST_F(SynthModelTest, MlockLocksEveryShard) {
  auto r = WriteSharded(dir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->n_shards, 1);
  int64_t shard_bytes = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
    if (e.path().extension() == ".safetensors") shard_bytes += static_cast<int64_t>(e.file_size());
  }
  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  lo.mlock = true;
  const int64_t before = LockedBytes();
  ASSERT_GE(before, 0) << "no VmLck in /proc/self/status";
  auto m = LoadModel(lo);
  if (MayLock(shard_bytes)) {
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_GE(m->locked_mappings, r->n_shards);
    if (::dsv4::testing::kMlockCountsInVmLck) {
      EXPECT_GE(LockedBytes() - before, shard_bytes);
      m = NotFound("");  // unlocked with the model
      EXPECT_LT(LockedBytes() - before, shard_bytes);
    }
  } else {  // the limit's error, naming itself and the way out
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(m.status().message().find("--mlock"), std::string::npos) << m.status().ToString();
    EXPECT_NE(m.status().message().find("limit"), std::string::npos) << m.status().ToString();
    EXPECT_FALSE(m.status().hint().empty());
  }
}

// With a DSpark module (spec §13): FP8 main_proj and the stages' FP8/FP4
// weights bind, the model drafts blocks of dspark_block, and greedy
// speculative decoding emits plain greedy decoding's tokens.
TEST_F(SynthModelTest, DSparkModuleLoadsAndDraftsLosslessly) {
  SynthModelOptions o = Tiny(dir_);
  o.dspark_stages = 2;
  o.dspark_block = 3;
  o.dspark_markov_rank = 32;
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(o).ok());
  std::ifstream cfg_in(fs::path(dir_) / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(cfg["dspark_target_layer_ids"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(cfg["compress_ratios"].size(), 6u);  // 4 main layers, then 2 window stages
  auto st = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const TensorInfo* proj = (*st)->Find("mtp.0.main_proj.weight");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->dtype, DType::kFp8E4m3);
  EXPECT_EQ(proj->shape, (std::vector<int64_t>{128, 2 * 128}));

  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  auto m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  DraftModel* draft = m->model->draft_model();
  ASSERT_NE(draft, nullptr);
  EXPECT_EQ(draft->draft_kind(), "dspark");
  EXPECT_EQ(draft->max_drafts(), 3);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 511);
  std::vector<int32_t> plain, spec;
  GenerateOptions g;
  g.max_tokens = 16;
  g.sampling.temperature = 0.0f;
  g.stop_at_eos = false;
  ASSERT_TRUE(Generate(*m, prompt, g, [&](int32_t id, std::string_view) {
                if (id >= 0) plain.push_back(id);
              }).ok());
  SpeculativeOptions so;
  so.draft_tokens = 3;
  so.max_tokens = 16;
  so.stop_at_eos = false;
  // Every draft replaced by the model's own next greedy tokens, so blocks get accepted.
  so.edit_drafts = [&](int64_t position, std::span<int32_t> drafts) {
    for (size_t j = 0; j < drafts.size(); ++j) {
      const size_t at = static_cast<size_t>(position) - prompt.size() + j;
      if (at < plain.size()) drafts[j] = plain[at];
    }
  };
  auto r = GenerateSpeculative(*m, prompt, so, [&](int32_t id, std::string_view) {
    if (id >= 0) spec.push_back(id);
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(spec, plain);
  EXPECT_GT(r->accepted, 0);
}

// A DeepSeek-V4.1 with DSpark stages (--arch v4.1 --dspark-stages): the
// config's draft keys (the stages' own MoE sizes, window-only ratios), the
// V4.1 stage tensors (Markov embed / head, no HC head), and greedy speculation
// emits plain greedy decoding's tokens under the owner's index keys.
TEST_F(SynthModelTest, V41DSparkStagesLoadAndDraftLosslessly) {
  SynthModelOptions o = Tiny(dir_);
  o.arch = "v4.1";
  o.n_layers = 6;
  o.n_hash_layers = 0;
  o.n_experts = 6;
  o.top_k = 2;
  o.head_dim = 128;
  o.vocab = 129280;
  o.index_n_heads = 4;
  o.index_topk = 16;
  o.engram_vocab = 500;
  o.sliding_window = 16;
  o.dspark_stages = 2;
  o.dspark_block = 3;
  o.dspark_markov_rank = 32;
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(o).ok());
  std::ifstream cfg_in(fs::path(dir_) / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(cfg["n_mtp_layers"], 2);
  EXPECT_EQ(cfg["dspark_target_layer_ids"], nlohmann::json::array({4, 5}));
  EXPECT_EQ(cfg["compress_ratios"], nlohmann::json::array({0, 0, 2, 2, 1, 1, 0, 0}));
  EXPECT_EQ(cfg["dspark_n_routed_experts"], 2);  // a third of the main model's, at least top-k
  EXPECT_EQ(cfg["dspark_n_activated_experts"], 1);
  auto st = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_NE((*st)->Find("mtp.1.markov_head.embed.weight"), nullptr);
  EXPECT_NE((*st)->Find("mtp.1.ffn.experts.1.w1.weight"), nullptr);
  EXPECT_EQ((*st)->Find("mtp.1.ffn.experts.2.w1.weight"), nullptr);
  EXPECT_EQ((*st)->Find("mtp.1.hc_head_fn"), nullptr);

  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  lo.v41_owner_index_keys = true;
  auto m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->model->info().architecture, "deepseek_v41");
  DraftModel* draft = m->model->draft_model();
  ASSERT_NE(draft, nullptr);
  EXPECT_EQ(draft->draft_kind(), "dspark");
  EXPECT_EQ(draft->max_drafts(), 3);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 511);
  std::vector<int32_t> plain, spec;
  GenerateOptions g;
  g.max_tokens = 12;
  g.sampling.temperature = 0.0f;
  g.stop_at_eos = false;
  ASSERT_TRUE(Generate(*m, prompt, g, [&](int32_t id, std::string_view) {
                if (id >= 0) plain.push_back(id);
              }).ok());
  for (bool edit : {false, true}) {
    SpeculativeOptions so;
    so.draft_tokens = 3;
    so.max_tokens = 12;
    so.stop_at_eos = false;
    if (edit) {  // the model's own next greedy tokens: blocks get accepted
      so.edit_drafts = [&](int64_t position, std::span<int32_t> drafts) {
        for (size_t j = 0; j < drafts.size(); ++j) {
          const size_t at = static_cast<size_t>(position) - prompt.size() + j;
          if (at < plain.size()) drafts[j] = plain[at];
        }
      };
    }
    spec.clear();
    auto r = GenerateSpeculative(*m, prompt, so, [&](int32_t id, std::string_view) {
      if (id >= 0) spec.push_back(id);
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(spec, plain) << (edit ? "edited" : "real") << " drafts";
    if (edit) EXPECT_GT(r->accepted, 0);
  }
}

// With a NextN MTP block (the April release's layout): FP8 e_proj/h_proj and
// the block's own norms and mHC head bind, and the model drafts with it.
TEST_F(SynthModelTest, MtpBlockLoadsAsTheDraftHead) {
  SynthModelOptions o = Tiny(dir_);
  o.mtp_layers = 1;
  ASSERT_TRUE(WriteSyntheticDeepSeekV4(o).ok());
  std::ifstream cfg_in(fs::path(dir_) / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(cfg["num_nextn_predict_layers"], 1);
  EXPECT_EQ(cfg["compress_ratios"].size(), 5u);  // 4 main layers, then the window block
  auto st = OpenSafetensors(dir_ + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  for (const char* name : {"mtp.0.e_proj.weight", "mtp.0.h_proj.weight"}) {
    const TensorInfo* t = (*st)->Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::kFp8E4m3);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{128, 128}));
  }
  LoadOptions lo;
  lo.model_path = dir_;
  lo.threads = 1;
  auto m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  DraftModel* draft = m->model->draft_model();
  ASSERT_NE(draft, nullptr);
  EXPECT_EQ(draft->draft_kind(), "mtp");
}

TEST_F(SynthModelTest, BadOptionsNameTheFlag) {
  SynthModelOptions o = Tiny(dir_);
  o.d_model = 100;
  auto r = WriteSyntheticDeepSeekV4(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--d-model"), std::string::npos) << r.status().ToString();
  o = Tiny(dir_);
  o.top_k = 5;
  r = WriteSyntheticDeepSeekV4(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--top-k"), std::string::npos) << r.status().ToString();
  o = Tiny(dir_);
  o.index_head_dim = 96;
  r = WriteSyntheticDeepSeekV4(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--index-head-dim"), std::string::npos);
  o = Tiny(dir_);
  o.dspark_stages = 5;  // more than the 4 layers that feed them
  EXPECT_ERROR(WriteSyntheticDeepSeekV4(o), StatusCode::kInvalidArgument, "--dspark-stages = 5");
  o = Tiny(dir_);
  o.dspark_stages = 2;
  o.dspark_block = 0;
  EXPECT_ERROR(WriteSyntheticDeepSeekV4(o), StatusCode::kInvalidArgument, "--dspark-block = 0");
  o = Tiny(dir_);
  o.mtp_layers = 1;
  o.dspark_stages = 2;
  EXPECT_ERROR(WriteSyntheticDeepSeekV4(o), StatusCode::kInvalidArgument,
               "--mtp-layers and --dspark-stages both name mtp.* blocks");
  o = Tiny("");
  EXPECT_ERROR(WriteSyntheticDeepSeekV4(o), StatusCode::kInvalidArgument,
               "synth-model: --out is required");
  EXPECT_FALSE(fs::exists(dir_));  // nothing written on bad options
}

}  // namespace
}  // namespace dsv4
