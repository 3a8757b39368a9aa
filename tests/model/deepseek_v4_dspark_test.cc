// DSpark (spec §13) against DeepSeek's 0731 reference code on the tiny
// checkpoints of tools/reference/make_tiny_dspark.py: the main model's
// target features, main_x and the stages' rings after the prompt, every
// sub-result of the first draft block, and a whole greedy speculative trace —
// per step the Markov-corrected draft logits, the Markov bias alone, the
// confidence logits, the drafted tokens, the accepted count, the bonus token
// and the main logits of every verified position; the emitted tokens are the
// reference's (= plain greedy decoding). Also the config and checkpoint
// errors of a DSpark module that does not fit its model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/status_matchers.h"
#include "deepseek_v4_test_util.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::DataDir;
using testing::LoadCheckpointDir;
using testing::ReadF32File;
using testing::ReadIds;

// A golden safetensors file's tensors as f32 / i32 vectors.
struct Golden {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<float> F32(const std::string& name) const {
    const TensorInfo* t = file->Find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    std::vector<float> v(t->view().numel());
    DequantizeRow(t->dtype, t->data, static_cast<int64_t>(v.size()), v.data());
    return v;
  }
  std::vector<int32_t> I32(const std::string& name) const {
    const TensorInfo* t = file->Find(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    std::vector<int32_t> v(t->view().numel());
    std::memcpy(v.data(), t->data, v.size() * 4);
    return v;
  }
};

Golden Open(const std::string& path) {
  auto f = OpenSafetensors(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return Golden{f.ok() ? std::move(f).value() : nullptr};
}

// max |a − b| relative to max(1, max |b|).
float RelDiff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float diff = 0.0f, ref = 1.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    ref = std::max(ref, std::fabs(b[i]));
  }
  return diff / ref;
}

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// A golden case: a checkpoint directory's name, or "<name>:gguf" for the same
// checkpoint as llama.cpp's converter writes it (tests/data/deepseek_v4/
// gguf_drafts: the main model as deepseek4, the DSpark module as dflash;
// tools/goldens/ds4_gguf_drafts.py), checked against the directory's goldens.
std::string GoldenDir(const std::string& param) {
  return DataDir() + "/" + param.substr(0, param.find(':'));
}

std::unique_ptr<DeepSeekV4Model> LoadParam(const std::string& param) {
  if (!param.ends_with(":gguf")) return LoadCheckpointDir(GoldenDir(param));
  const std::string dir = DataDir() + "/gguf_drafts/";
  return testing::LoadGgufWithDraft(dir + "dspark_main.gguf", dir + "dspark.gguf");
}

class DSparkGolden : public ::testing::TestWithParam<std::string> {};

// Prompt, target features, main_x, rings, and the first block's sub-results.
TEST_P(DSparkGolden, FeaturesRingsAndFirstDraftMatchTheReference) {
  const std::string dir = GoldenDir(GetParam());
  auto m = LoadParam(GetParam());
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_dspark());
  const DeepSeekV4Config& c = m->config();
  const Golden g = Open(dir + "/dspark_intermediates.safetensors");
  const Golden tr = Open(dir + "/draft_trace.safetensors");
  std::map<std::string, std::vector<float>> traced;
  m->SetTrace(
      [&](std::string_view name, int64_t, const float* data, std::span<const int64_t> dims) {
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        traced[std::string(name)].assign(data, data + n);
      });

  const std::vector<int32_t> ids = ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size;
  auto cache = m->NewCache(T + 16);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, true).ok());
  EXPECT_LE(RelDiff(logits, ReadF32File(dir + "/logits.f32")), 1e-4f);
  const std::vector<float> features(m->last_features().begin(), m->last_features().end());
  EXPECT_LE(RelDiff(features, g.F32("main_hidden_prefill")), 1e-5f);

  auto draft_cache = m->NewMtpCache(T + 16);
  ASSERT_TRUE(m->DSparkObserve(features, *draft_cache).ok());
  EXPECT_EQ(draft_cache->length(), T);
  EXPECT_LE(RelDiff(traced["dspark.main_x"], g.F32("main_x_prefill")), 1e-5f);
  // Each stage's ring: row of position q at q mod W, for the last min(T, W) positions.
  const int64_t W = c.sliding_window, A = c.head_dim;
  for (int64_t s = 0; s < c.n_draft_layers(); ++s) {
    const std::vector<float> ring =
        g.F32("dspark.stage" + std::to_string(s) + ".ring_after_prefill");
    const std::vector<float>& kv = traced["mtp." + std::to_string(s) + ".dspark.main_kv"];
    ASSERT_EQ(static_cast<int64_t>(kv.size()), T * A);
    for (int64_t q = std::max<int64_t>(0, T - W); q < T; ++q) {
      EXPECT_LE(RelDiff(std::span(kv).subspan(q * A, A), std::span(ring).subspan((q % W) * A, A)),
                1e-5f)
          << "stage " << s << " position " << q;
    }
  }

  // The first draft, right after the prompt, from the greedy first token.
  const int32_t anchor = Argmax(std::span(logits).subspan((T - 1) * V, V));
  EXPECT_EQ(anchor, tr.I32("markov_prev_tokens")[0]);
  DeepSeekV4Model::DSparkBlock block;
  traced.clear();
  ASSERT_TRUE(
      m->DSparkDraft(
           anchor, *draft_cache, [](std::span<float> row, int64_t) { return Argmax(row); }, block)
          .ok());
  const int64_t B = c.dspark_block_size;
  EXPECT_LE(RelDiff(traced["dspark.in"], g.F32("draft0.stage0.in")), 1e-6f);
  for (int64_t s = 0; s < c.n_draft_layers(); ++s) {
    const std::string ours = "mtp." + std::to_string(s) + ".";
    const std::string ref = "draft0.stage" + std::to_string(s) + ".";
    for (const char* name : {"attn_norm_out", "attn_out", "ffn_norm_out", "ffn_out", "out"}) {
      EXPECT_LE(RelDiff(traced[ours + name], g.F32(ref + name)), 1e-4f) << ref << name;
    }
    // Routing: the experts chosen (an expert index list of [B, k]).
    const std::vector<float>& chosen = traced[ours + "router_indices"];
    const std::vector<int32_t> want = g.I32(ref + "router_indices");
    ASSERT_EQ(chosen.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<int32_t>(chosen[i]), want[i]);
  }
  EXPECT_LE(RelDiff(traced["dspark.hc_head_out"], g.F32("draft0.hc_head_out")), 1e-4f);
  EXPECT_LE(RelDiff(traced["dspark.final_norm_out"], g.F32("draft0.final_norm_out")), 1e-4f);
  const std::vector<float> want_logits = tr.F32("draft_logits");
  EXPECT_LE(RelDiff(block.logits, std::span(want_logits).first(B * V)), 1e-4f);
  const std::vector<float> want_bias = tr.F32("markov_bias");
  EXPECT_LE(RelDiff(block.markov_bias, std::span(want_bias).first(B * V)), 1e-5f);
  const std::vector<float> want_conf = tr.F32("confidence");
  EXPECT_LE(RelDiff(block.confidence, std::span(want_conf).first(B)), 1e-4f);
  const std::vector<int32_t> want_tokens = tr.I32("drafted_tokens");
  EXPECT_EQ(block.tokens, std::vector<int32_t>(want_tokens.begin(), want_tokens.begin() + B));
}

// The whole greedy speculative trace (spec §13.7): draft, verify the block in
// one main call, accept the longest agreeing prefix, truncate, observe the
// committed positions' features, continue from the bonus token.
TEST_P(DSparkGolden, GreedySpeculativeTraceMatchesTheReference) {
  const std::string dir = GoldenDir(GetParam());
  auto m = LoadParam(GetParam());
  ASSERT_NE(m, nullptr);
  const DeepSeekV4Config& c = m->config();
  const Golden tr = Open(dir + "/draft_trace.safetensors");
  const Golden g = Open(dir + "/dspark_intermediates.safetensors");
  const std::vector<int32_t> ids = ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size;
  const int64_t B = c.dspark_block_size;
  const std::vector<int32_t> start = tr.I32("start_pos"), accepted = tr.I32("accepted");
  const std::vector<int32_t> bonus = tr.I32("bonus"), drafted = tr.I32("drafted_tokens");
  const std::vector<float> draft_logits = tr.F32("draft_logits"), conf = tr.F32("confidence");
  const std::vector<float> verify_logits = g.F32("verify_logits");
  const std::vector<int32_t> verify_pos = g.I32("verify_positions");
  const int64_t n_steps = static_cast<int64_t>(start.size());
  ASSERT_GT(n_steps, 5);

  const int64_t max_tokens = T + (n_steps + 2) * (B + 1);
  auto cache = m->NewCache(max_tokens);
  auto draft_cache = m->NewMtpCache(max_tokens);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(m->Forward(ids, *cache, logits, true).ok());
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft_cache).ok());
  int32_t anchor = Argmax(std::span(logits).subspan((T - 1) * V, V));
  std::vector<int32_t> emitted = {anchor};
  std::map<int64_t, std::vector<float>> main_logits;  // position -> logits
  DeepSeekV4Model::DSparkBlock block;
  std::vector<float> vlogits((B + 1) * V);
  for (int64_t step = 0; step < n_steps; ++step) {
    const int64_t p = draft_cache->length() - 1;
    ASSERT_EQ(p, start[step]) << "step " << step;
    ASSERT_TRUE(
        m->DSparkDraft(
             anchor, *draft_cache, [](std::span<float> row, int64_t) { return Argmax(row); }, block)
            .ok());
    EXPECT_LE(RelDiff(block.logits, std::span(draft_logits).subspan(step * B * V, B * V)), 1e-4f)
        << "step " << step;
    EXPECT_LE(RelDiff(block.confidence, std::span(conf).subspan(step * B, B)), 1e-4f);
    ASSERT_EQ(block.tokens,
              std::vector<int32_t>(drafted.begin() + step * B, drafted.begin() + (step + 1) * B))
        << "step " << step;
    // Verify [anchor, d_1 .. d_B] at positions p+1 .. p+B+1.
    std::vector<int32_t> verify = {anchor};
    verify.insert(verify.end(), block.tokens.begin(), block.tokens.end());
    ASSERT_EQ(cache->length(), p + 1);
    ASSERT_TRUE(m->Forward(verify, *cache, vlogits, true).ok());
    int64_t n = 0;
    while (n < B && Argmax(std::span(vlogits).subspan(n * V, V)) == block.tokens[n]) ++n;
    EXPECT_EQ(n, accepted[step]) << "step " << step;
    const int32_t next = Argmax(std::span(vlogits).subspan(n * V, V));
    EXPECT_EQ(next, bonus[step]) << "step " << step;
    for (int64_t k = 0; k <= n; ++k) {
      main_logits[p + 1 + k].assign(vlogits.begin() + k * V, vlogits.begin() + (k + 1) * V);
    }
    // Commit p+1 .. p+1+n: roll the main model back, feed the draft those rows.
    cache->Truncate(p + 2 + n);
    const int64_t frow = static_cast<int64_t>(m->last_features().size()) / (B + 1);
    ASSERT_TRUE(m->DSparkObserve(m->last_features().first((n + 1) * frow), *draft_cache).ok());
    emitted.insert(emitted.end(), block.tokens.begin(), block.tokens.begin() + n);
    emitted.push_back(next);
    anchor = next;
  }
  // The reference's verified positions' main logits (committed positions).
  int64_t compared = 0;
  for (size_t i = 0; i < verify_pos.size(); ++i) {
    auto it = main_logits.find(verify_pos[i]);
    if (it == main_logits.end()) continue;
    EXPECT_LE(RelDiff(it->second, std::span(verify_logits).subspan(i * V, V)), 1e-4f)
        << "position " << verify_pos[i];
    ++compared;
  }
  EXPECT_GT(compared, 10);
  // The emitted tokens: the reference's (trace.json "emitted"), all of them.
  std::ifstream f(dir + "/trace.json");
  const auto trace = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(trace.is_object());
  const std::vector<int32_t> want_emitted = trace["emitted"].get<std::vector<int32_t>>();
  ASSERT_FALSE(want_emitted.empty());
  EXPECT_EQ(emitted, want_emitted);
}

// Rollback (spec §13.6): a block verified and partly rejected — main cache
// truncated, the draft fed only the committed rows — leaves both exactly as
// if the committed tokens had been run without drafting: the next block's
// draft logits and confidences and the next verification's logits are equal
// bit for bit.
TEST_P(DSparkGolden, RollbackEqualsNeverDrafted) {
  const std::string dir = GoldenDir(GetParam());
  auto m = LoadParam(GetParam());
  ASSERT_NE(m, nullptr);
  const DeepSeekV4Config& c = m->config();
  const std::vector<int32_t> ids = ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size;
  const int64_t B = c.dspark_block_size, max_tokens = T + 4 * (B + 1);
  struct Path {
    std::unique_ptr<SequenceCache> main, draft;
  };
  Path drafted{m->NewCache(max_tokens), m->NewMtpCache(max_tokens)};
  Path plain{m->NewCache(max_tokens), m->NewMtpCache(max_tokens)};
  std::vector<float> logits(T * V);
  for (Path* p : {&drafted, &plain}) {
    ASSERT_TRUE(m->Forward(ids, *p->main, logits, true).ok());
    ASSERT_TRUE(m->DSparkObserve(m->last_features(), *p->draft).ok());
  }
  const int32_t anchor = Argmax(std::span(logits).subspan((T - 1) * V, V));
  const auto greedy = [](std::span<float> row, int64_t) { return Argmax(row); };
  DeepSeekV4Model::DSparkBlock block;
  ASSERT_TRUE(m->DSparkDraft(anchor, *drafted.draft, greedy, block).ok());
  // Keep the anchor and 2 of the B drafts, whatever the verification says.
  const int64_t kept = 3;
  std::vector<int32_t> run = {anchor};
  run.insert(run.end(), block.tokens.begin(), block.tokens.end());
  std::vector<float> vlogits((B + 1) * V);
  ASSERT_TRUE(m->Forward(run, *drafted.main, vlogits, true).ok());
  drafted.main->Truncate(T + kept);
  const int64_t frow = static_cast<int64_t>(m->last_features().size()) / (B + 1);
  ASSERT_TRUE(m->DSparkObserve(m->last_features().first(kept * frow), *drafted.draft).ok());
  // The same tokens committed without a draft.
  run.resize(kept);
  std::vector<float> plogits(kept * V);
  ASSERT_TRUE(m->Forward(run, *plain.main, plogits, true).ok());
  ASSERT_TRUE(m->DSparkObserve(m->last_features(), *plain.draft).ok());
  ASSERT_EQ(drafted.main->length(), plain.main->length());
  ASSERT_EQ(drafted.draft->length(), plain.draft->length());

  const int32_t next = 7;
  DeepSeekV4Model::DSparkBlock a, b;
  ASSERT_TRUE(m->DSparkDraft(next, *drafted.draft, greedy, a).ok());
  ASSERT_TRUE(m->DSparkDraft(next, *plain.draft, greedy, b).ok());
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.confidence, b.confidence);
  EXPECT_EQ(a.tokens, b.tokens);
  std::vector<int32_t> verify = {next};
  verify.insert(verify.end(), a.tokens.begin(), a.tokens.end());
  std::vector<float> la((B + 1) * V), lb((B + 1) * V);
  ASSERT_TRUE(m->Forward(verify, *drafted.main, la, true).ok());
  ASSERT_TRUE(m->Forward(verify, *plain.main, lb, true).ok());
  EXPECT_EQ(la, lb);
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV4, DSparkGolden,
                         ::testing::Values("dspark_mixed_bf16", "dspark_swa_bf16",
                                           "dspark_mixed_bf16:gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), ':', '_');
                           return n;
                         });

}  // namespace
}  // namespace dsv4::deepseek_v4

namespace dsv4::deepseek_v4 {
namespace {

// A checkpoint whose draft module the config does not describe (a DSpark
// checkpoint under a config without the dspark_* keys) still runs its main
// model, with no draft head.
// A DSpark module copied into a transformers save under `model.mtp.*` (the
// default save's prefix; transformers itself drops the draft module, see
// tools/reference/make_hf_saved_v4.py) binds, per tensor, and drafts the same
// block bit for bit.
TEST(DSparkLoad, DraftModuleUnderTheHfPrefixBinds) {
  const std::string dir = testing::DataDir() + "/dspark_mixed_bf16";
  const std::string out =
      (std::filesystem::temp_directory_path() / ("dsv4_dspark_hf_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(dir + "/config.json", out + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  {  // The same file with mtp.* renamed model.mtp.* in its header.
    std::ifstream in(dir + "/model.safetensors", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
    nlohmann::json renamed;
    for (const auto& [k, v] : header.items())
      renamed[k.rfind("mtp.", 0) == 0 ? "model." + k : k] = v;
    std::string h = renamed.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t hn = h.size();
    std::ofstream f(out + "/model.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(&hn), 8);
    f << h << bytes.substr(8 + n);
  }
  auto official = LoadCheckpointDir(dir);
  auto hf = LoadCheckpointDir(out);
  ASSERT_NE(official, nullptr);
  ASSERT_NE(hf, nullptr);
  ASSERT_TRUE(hf->has_dspark());
  const std::vector<int32_t> ids = testing::ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = official->config().vocab_size;
  DeepSeekV4Model::DSparkBlock a, b;
  const auto greedy = [](std::span<float> row, int64_t) { return Argmax(row); };
  for (auto [m, block] : {std::pair{official.get(), &a}, std::pair{hf.get(), &b}}) {
    auto cache = m->NewCache(T + 8);
    auto draft = m->NewMtpCache(T + 8);
    std::vector<float> logits(T * V);
    ASSERT_TRUE(m->Forward(ids, *cache, logits, true).ok());
    ASSERT_TRUE(m->DSparkObserve(m->last_features(), *draft).ok());
    ASSERT_TRUE(m->DSparkDraft(7, *draft, greedy, *block).ok());
  }
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.confidence, b.confidence);
  std::filesystem::remove_all(out);
}

TEST(DSparkLoad, UnknownDraftModuleRunsTheMainModel) {
  const std::string dir = testing::DataDir() + "/dspark_mixed_bf16";
  std::ifstream f(dir + "/config.json");
  auto j = nlohmann::json::parse(f);
  for (const char* k : {"dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids",
                        "dspark_markov_rank"}) {
    j.erase(k);
  }
  j["compress_ratios"] = {0, 4, 8, 0};
  j["num_nextn_predict_layers"] = 0;
  auto c = DeepSeekV4Config::FromJson(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto reader = OpenCheckpointDir(dir);
  ASSERT_TRUE(reader.ok());
  LoadOptions o;
  o.numerics = NumericsOptions{};
  auto m =
      DeepSeekV4Model::Load(std::shared_ptr<const CheckpointReader>(std::move(*reader)), *c, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE((*m)->has_dspark());
  EXPECT_EQ((*m)->draft_model(), nullptr);
  const std::vector<int32_t> ids = testing::ReadIds(dir + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size()), V = c->vocab_size;
  std::vector<float> logits(T * V);
  auto cache = (*m)->NewCache(T);
  ASSERT_TRUE((*m)->Forward(ids, *cache, logits, true).ok());
  EXPECT_LE(RelDiff(logits, testing::ReadF32File(dir + "/logits.f32")), 1e-4f);
}

// DSpark calls that do not fit: no committed position, a bad anchor, a cache
// from elsewhere, features of the wrong width.
TEST(DSparkLoad, BadCallsNameTheProblem) {
  auto m = testing::LoadCheckpointDir(testing::DataDir() + "/dspark_swa_bf16");
  ASSERT_NE(m, nullptr);
  auto draft_cache = m->NewMtpCache(64);
  DeepSeekV4Model::DSparkBlock block;
  const auto greedy = [](std::span<float> row, int64_t) { return Argmax(row); };
  EXPECT_ERROR(m->DSparkDraft(3, *draft_cache, greedy, block), StatusCode::kInvalidArgument,
               "no committed position yet");
  const int64_t frow =
      static_cast<int64_t>(m->config().dspark_target_layer_ids.size()) * m->config().hidden_size;
  std::vector<float> features(2 * frow, 0.0f);
  ASSERT_TRUE(m->DSparkObserve(features, *draft_cache).ok());
  EXPECT_ERROR(m->DSparkDraft(-1, *draft_cache, greedy, block), StatusCode::kInvalidArgument,
               "token id -1 is outside the vocabulary");
  EXPECT_ERROR(m->DSparkObserve(std::vector<float>(frow + 1), *draft_cache),
               StatusCode::kInvalidArgument, "expected a whole number of rows");
  auto main_cache = m->NewCache(16);
  EXPECT_ERROR(m->DSparkObserve(features, *main_cache), StatusCode::kInvalidArgument,
               "not made by this model's NewMtpCache");
  EXPECT_ERROR(
      m->DSparkDraft(
          3, *draft_cache, [](std::span<float>, int64_t) { return int32_t{100000}; }, block),
      StatusCode::kInvalidArgument, "outside [0, 320)");
}

}  // namespace
}  // namespace dsv4::deepseek_v4
