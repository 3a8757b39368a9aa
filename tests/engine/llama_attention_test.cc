// LlamaModel with random weights against a plain scalar transcription of the
// llama2.c forward pass (ops/ref kernels, attention as loops), for both
// attention layouts: narrow heads (E = 8 < 32: keys kept transposed, scores
// by axpys) and wide heads (E = 32: keys as rows, scores by matrix-vector
// products); plus chunked prefill == one-token decode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/llama/llama_model.h"
#include "ops/ref/ops_ref.h"

namespace dsv4 {
namespace {

// A CheckpointReader over f32 tensors held in memory.
class MemoryReader final : public CheckpointReader {
 public:
  void Add(const std::string& name, std::vector<int64_t> shape, std::mt19937& rng, float scale,
           float offset = 0.0f) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    auto data = std::make_unique<std::vector<float>>(n);
    std::uniform_real_distribution<float> u(-scale, scale);
    for (float& v : *data) v = offset + u(rng);
    TensorInfo t;
    t.name = name;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    t.data = data->data();
    t.nbytes = n * 4;
    tensors_.push_back(std::move(t));
    storage_.push_back(std::move(data));
  }
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(std::string_view name) const override {
    for (const TensorInfo& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const float* F32(const std::string& name) const {
    return static_cast<const float*>(Find(name)->data);
  }

 private:
  std::string path_ = "<memory>";
  std::vector<TensorInfo> tensors_;
  std::vector<std::unique_ptr<std::vector<float>>> storage_;
};

std::shared_ptr<MemoryReader> RandomLlama(const LlamaConfig& c, uint32_t seed) {
  auto r = std::make_shared<MemoryReader>();
  std::mt19937 rng(seed);
  const int64_t D = c.d_model, F = c.d_ff, KVD = c.kv_dim();
  const float sd = 1.0f / std::sqrt(static_cast<float>(D));
  r->Add("token_embd.weight", {c.vocab_size, D}, rng, 1.0f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    r->Add(p + "attn_norm.weight", {D}, rng, 0.2f, 1.0f);
    r->Add(p + "attn_q.weight", {D, D}, rng, 2 * sd);
    r->Add(p + "attn_k.weight", {KVD, D}, rng, 2 * sd);
    r->Add(p + "attn_v.weight", {KVD, D}, rng, 2 * sd);
    r->Add(p + "attn_output.weight", {D, D}, rng, sd);
    r->Add(p + "ffn_norm.weight", {D}, rng, 0.2f, 1.0f);
    r->Add(p + "ffn_gate.weight", {F, D}, rng, 2 * sd);
    r->Add(p + "ffn_up.weight", {F, D}, rng, 2 * sd);
    r->Add(p + "ffn_down.weight", {D, F}, rng, 1.0f / std::sqrt(static_cast<float>(F)));
  }
  r->Add("output_norm.weight", {D}, rng, 0.2f, 1.0f);
  r->Add("output.weight", {c.vocab_size, D}, rng, sd);
  return r;
}

// llama2.c run.c's forward pass, token by token, with the scalar kernels.
std::vector<float> Reference(const LlamaConfig& c, const MemoryReader& r,
                             const std::vector<int32_t>& tokens) {
  const int64_t D = c.d_model, F = c.d_ff, H = c.n_heads, G = c.n_kv_heads, E = c.head_dim();
  const int64_t KVD = c.kv_dim(), V = c.vocab_size, T = static_cast<int64_t>(tokens.size());
  auto view = [&](const std::string& name) { return r.Find(name)->view(); };
  std::vector<float> kc(c.n_layers * T * KVD), vc(c.n_layers * T * KVD), logits(T * V);
  std::vector<float> x(D), xb(D), q(D), k(KVD), v(KVD), att(T), o(D), hb(F), hb2(F), xb2(D);
  for (int64_t pos = 0; pos < T; ++pos) {
    std::copy_n(r.F32("token_embd.weight") + tokens[pos] * D, D, x.begin());
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      ops::ref::RmsNorm(xb.data(), x.data(), r.F32(p + "attn_norm.weight"), D, c.norm_eps);
      ops::ref::MatMul(q.data(), xb.data(), view(p + "attn_q.weight"), 1, D);
      ops::ref::MatMul(k.data(), xb.data(), view(p + "attn_k.weight"), 1, KVD);
      ops::ref::MatMul(v.data(), xb.data(), view(p + "attn_v.weight"), 1, KVD);
      ops::ref::RopeInterleaved(q.data(), H, E, E, pos, c.rope_theta);
      ops::ref::RopeInterleaved(k.data(), G, E, E, pos, c.rope_theta);
      float* kl = kc.data() + l * T * KVD;
      float* vl = vc.data() + l * T * KVD;
      std::copy(k.begin(), k.end(), kl + pos * KVD);
      std::copy(v.begin(), v.end(), vl + pos * KVD);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        for (int64_t s = 0; s <= pos; ++s) {
          float dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += q[h * E + e] * kl[s * KVD + g * E + e];
          att[s] = dot / std::sqrt(static_cast<float>(E));
        }
        ops::ref::Softmax(att.data(), pos + 1);
        for (int64_t e = 0; e < E; ++e) {
          float acc = 0;
          for (int64_t s = 0; s <= pos; ++s) acc += att[s] * vl[s * KVD + g * E + e];
          o[h * E + e] = acc;
        }
      }
      ops::ref::MatMul(xb2.data(), o.data(), view(p + "attn_output.weight"), 1, D);
      for (int64_t i = 0; i < D; ++i) x[i] += xb2[i];
      ops::ref::RmsNorm(xb.data(), x.data(), r.F32(p + "ffn_norm.weight"), D, c.norm_eps);
      ops::ref::MatMul(hb.data(), xb.data(), view(p + "ffn_gate.weight"), 1, F);
      ops::ref::MatMul(hb2.data(), xb.data(), view(p + "ffn_up.weight"), 1, F);
      ops::ref::SwiGlu(hb.data(), hb.data(), hb2.data(), F);
      ops::ref::MatMul(xb2.data(), hb.data(), view(p + "ffn_down.weight"), 1, D);
      for (int64_t i = 0; i < D; ++i) x[i] += xb2[i];
    }
    ops::ref::RmsNorm(xb.data(), x.data(), r.F32("output_norm.weight"), D, c.norm_eps);
    ops::ref::MatMul(logits.data() + pos * V, xb.data(), view("output.weight"), 1, V);
  }
  return logits;
}

class LlamaAttentionTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

LlamaConfig Config(int head_dim) {
  LlamaConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_model = c.n_heads * head_dim;
  c.d_ff = 3 * c.d_model / 2 + 4;  // not a multiple of the vector width
  c.n_layers = 2;
  c.vocab_size = 97;
  c.max_context = 96;
  return c;
}

TEST_P(LlamaAttentionTest, MatchesScalarReferenceAndDecodeEqualsPrefill) {
  const auto [head_dim, threads] = GetParam();
  const LlamaConfig c = Config(head_dim);
  auto reader = RandomLlama(c, 1234 + head_dim);
  auto model = LlamaModel::Load(reader, c);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  (*model)->SetThreads(threads);
  std::vector<int32_t> tokens(70);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 31 + 7) % 97);
  const auto want = Reference(c, *reader, tokens);
  const int64_t V = c.vocab_size, T = static_cast<int64_t>(tokens.size());

  auto cache = (*model)->NewCache(c.max_context);
  std::vector<float> all(T * V);
  ASSERT_TRUE((*model)->Forward(tokens, *cache, all, true).ok());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max<double>(max_abs, std::fabs(want[i]));
    max_diff = std::max<double>(max_diff, std::fabs(all[i] - want[i]));
  }
  EXPECT_GT(max_abs, 0.5);  // the logits are not all tiny
  EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_abs)) << "head_dim " << head_dim;

  // Chunked prefill (37 tokens, then 16), then one token at a time.
  auto inc = (*model)->NewCache(c.max_context);
  std::vector<float> got;
  std::vector<float> buf(37 * V);
  ASSERT_TRUE((*model)->Forward(std::span(tokens).subspan(0, 37), *inc, buf, true).ok());
  got.insert(got.end(), buf.begin(), buf.end());
  buf.resize(16 * V);
  ASSERT_TRUE((*model)->Forward(std::span(tokens).subspan(37, 16), *inc, buf, true).ok());
  got.insert(got.end(), buf.begin(), buf.end());
  for (int64_t t = 53; t < T; ++t) {
    std::vector<float> one(V);
    ASSERT_TRUE((*model)->Forward(std::span(tokens).subspan(t, 1), *inc, one, false).ok());
    got.insert(got.end(), one.begin(), one.end());
  }
  ASSERT_EQ(got.size(), all.size());
  double inc_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    inc_diff = std::max<double>(inc_diff, std::fabs(got[i] - all[i]));
  }
  EXPECT_LE(inc_diff, 1e-5 * std::max(1.0, max_abs)) << "head_dim " << head_dim;
}

// head_dim 8: narrow layout; 32 and 48: wide layout (48: not a power of two).
INSTANTIATE_TEST_SUITE_P(HeadDimsAndThreads, LlamaAttentionTest,
                         ::testing::Combine(::testing::Values(8, 32, 48), ::testing::Values(1, 2)));

}  // namespace
}  // namespace dsv4
