#include "model/llama/llama_model.h"

#include <cmath>
#include <string>

#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"

namespace dsv4 {
namespace {

// The KV cache of one sequence: keys and values of every layer, f32.
class LlamaCache final : public SequenceCache {
 public:
  LlamaCache(const LlamaConfig& c, int64_t max_tokens)
      : max_tokens_(max_tokens),
        kv_dim_(c.kv_dim()),
        k_(c.n_layers * max_tokens * c.kv_dim()),
        v_(c.n_layers * max_tokens * c.kv_dim()) {}
  int64_t length() const override { return length_; }
  void Truncate(int64_t n) override {
    CHECK(n >= 0 && n <= length_);
    length_ = n;
  }
  int64_t max_tokens() const { return max_tokens_; }
  // [S, G*E] rows of layer `layer`.
  float* keys(int64_t layer) { return k_.data() + layer * max_tokens_ * kv_dim_; }
  float* values(int64_t layer) { return v_.data() + layer * max_tokens_ * kv_dim_; }
  void Advance(int64_t n) { length_ += n; }

 private:
  int64_t max_tokens_;
  int64_t kv_dim_;
  int64_t length_ = 0;
  std::vector<float> k_;  // [L, S, G*E]
  std::vector<float> v_;  // [L, S, G*E]
};

std::vector<float> ToF32(const TensorView& v) {
  std::vector<float> out(v.numel());
  DequantizeRow(v.dtype, v.data, v.numel(), out.data());
  return out;
}

}  // namespace

Status LlamaConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(std::string("llama config: ") + name + " = " +
                                       std::to_string(v) + " must be positive");
    return Status::Ok();
  };
  RETURN_IF_ERROR(positive("d_model", d_model));
  RETURN_IF_ERROR(positive("d_ff", d_ff));
  RETURN_IF_ERROR(positive("n_layers", n_layers));
  RETURN_IF_ERROR(positive("n_heads", n_heads));
  RETURN_IF_ERROR(positive("n_kv_heads", n_kv_heads));
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("max_context", max_context));
  if (d_model % n_heads != 0 || head_dim() % 2 != 0) {
    return InvalidArgument("llama config: d_model " + std::to_string(d_model) +
                           " is not n_heads " + std::to_string(n_heads) + " × an even head_dim");
  }
  if (n_heads % n_kv_heads != 0) {
    return InvalidArgument("llama config: n_heads " + std::to_string(n_heads) +
                           " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  }
  return Status::Ok();
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(
    std::shared_ptr<const CheckpointReader> reader, const LlamaConfig& c) {
  RETURN_IF_ERROR(c.Validate().WithContext(reader->path()));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = c;
  m->reader_ = reader;
  const int64_t D = c.d_model, F = c.d_ff, QD = c.n_heads * c.head_dim(), KVD = c.kv_dim();

  // Bind every tensor; collect all problems before failing.
  std::string problems;
  auto bind = [&](const std::string& name, std::initializer_list<int64_t> shape) -> TensorView {
    auto r = reader->Get(name, shape);
    if (!r.ok()) {
      problems += "\n  " + r.status().message();
      return TensorView{};
    }
    return *r;
  };
  m->token_embd_ = bind("token_embd.weight", {c.vocab_size, D});
  m->layers_.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m->layers_[l];
    TensorView attn_norm = bind(p + "attn_norm.weight", {D});
    L.wq = bind(p + "attn_q.weight", {QD, D});
    L.wk = bind(p + "attn_k.weight", {KVD, D});
    L.wv = bind(p + "attn_v.weight", {KVD, D});
    L.wo = bind(p + "attn_output.weight", {D, QD});
    TensorView ffn_norm = bind(p + "ffn_norm.weight", {D});
    L.w_gate = bind(p + "ffn_gate.weight", {F, D});
    L.w_up = bind(p + "ffn_up.weight", {F, D});
    L.w_down = bind(p + "ffn_down.weight", {D, F});
    if (attn_norm.data) L.attn_norm = ToF32(attn_norm);
    if (ffn_norm.data) L.ffn_norm = ToF32(ffn_norm);
  }
  TensorView out_norm = bind("output_norm.weight", {D});
  if (out_norm.data) m->output_norm_ = ToF32(out_norm);
  m->output_ = reader->Find("output.weight") ? bind("output.weight", {c.vocab_size, D})
                                             : m->token_embd_;
  if (!problems.empty()) {
    return InvalidArgument(reader->path() + ": cannot bind the llama weights:" + problems,
                           "the file does not match its own header/metadata");
  }

  int64_t n_params = 0;
  for (const TensorInfo& t : reader->tensors()) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    n_params += n;
  }
  m->info_ = ModelInfo{.architecture = "llama",
                       .vocab_size = c.vocab_size,
                       .max_context = c.max_context,
                       .n_params = n_params,
                       .bos_id = c.bos_id,
                       .eos_id = c.eos_id};
  m->pool_ = std::make_unique<ThreadPool>(1);
  return m;
}

void LlamaModel::SetThreads(int n_threads) { pool_ = std::make_unique<ThreadPool>(n_threads); }

std::unique_ptr<SequenceCache> LlamaModel::NewCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > config_.max_context) max_tokens = config_.max_context;
  return std::make_unique<LlamaCache>(config_, max_tokens);
}

void LlamaModel::EnsureScratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  const LlamaConfig& c = config_;
  scratch_tokens_ = n;
  x_.resize(n * c.d_model);
  xb_.resize(n * c.d_model);
  q_.resize(n * c.d_model);
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  att_out_.resize(n * c.d_model);
  hb_.resize(n * c.d_ff);
  hb2_.resize(n * c.d_ff);
  scores_.resize(c.max_context);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, SequenceCache& seq,
                           std::span<float> logits, bool all_logits) {
  const LlamaConfig& c = config_;
  auto& cache = static_cast<LlamaCache&>(seq);
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t pos0 = cache.length();
  if (T == 0) return InvalidArgument("Forward: no tokens");
  if (pos0 + T > cache.max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(pos0 + T) + " tokens > " +
                                 std::to_string(cache.max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  if (static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * c.vocab_size) {
    return InvalidArgument("Forward: logits buffer too small");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  EnsureScratch(T);
  const int64_t D = c.d_model, E = c.head_dim(), H = c.n_heads, G = c.n_kv_heads;
  const int64_t KVD = c.kv_dim(), F = c.d_ff;
  const float sqrt_e = std::sqrt(static_cast<float>(E));
  float* x = x_.data();  // [T, D] residual stream

  for (int64_t t = 0; t < T; ++t) {
    DequantizeRow(token_embd_.dtype, token_embd_[tokens[t]].data, D, x + t * D);
  }

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    // Attention block.
    for (int64_t t = 0; t < T; ++t) {
      ops::ref::RmsNorm(xb_.data() + t * D, x + t * D, L.attn_norm.data(), D, c.norm_eps);
    }
    ops::MatMul(*pool_, q_.data(), xb_.data(), L.wq, T);  // [T, H*E]
    ops::MatMul(*pool_, k_.data(), xb_.data(), L.wk, T);  // [T, G*E]
    ops::MatMul(*pool_, v_.data(), xb_.data(), L.wv, T);  // [T, G*E]
    float* key_cache = cache.keys(l);                      // [S, G*E]
    float* value_cache = cache.values(l);                  // [S, G*E]
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = pos0 + t;
      ops::ref::RopeInterleaved(q_.data() + t * D, H, E, E, pos, c.rope_theta);
      ops::ref::RopeInterleaved(k_.data() + t * KVD, G, E, E, pos, c.rope_theta);
      std::copy_n(k_.data() + t * KVD, KVD, key_cache + pos * KVD);
      std::copy_n(v_.data() + t * KVD, KVD, value_cache + pos * KVD);
    }
    // Causal attention: token t sees positions [0, pos0 + t].
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n_keys = pos0 + t + 1;
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q_.data() + t * D + h * E;
        const int64_t g = h / (H / G);
        float* att = scores_.data();  // [n_keys]
        for (int64_t s = 0; s < n_keys; ++s) {
          const float* kh = key_cache + s * KVD + g * E;
          float dot = 0.0f;
          for (int64_t e = 0; e < E; ++e) dot += qh[e] * kh[e];
          att[s] = dot / sqrt_e;  // divide, as llama2.c does
        }
        ops::ref::Softmax(att, n_keys);
        float* out = att_out_.data() + t * D + h * E;
        std::fill_n(out, E, 0.0f);
        for (int64_t s = 0; s < n_keys; ++s) {
          const float* vh = value_cache + s * KVD + g * E;
          for (int64_t e = 0; e < E; ++e) out[e] += att[s] * vh[e];
        }
      }
    }
    ops::MatMul(*pool_, xb_.data(), att_out_.data(), L.wo, T);  // [T, D]
    for (int64_t i = 0; i < T * D; ++i) x[i] += xb_[i];

    // Feed-forward block: SwiGLU.
    for (int64_t t = 0; t < T; ++t) {
      ops::ref::RmsNorm(xb_.data() + t * D, x + t * D, L.ffn_norm.data(), D, c.norm_eps);
    }
    ops::MatMul(*pool_, hb_.data(), xb_.data(), L.w_gate, T);  // [T, F]
    ops::MatMul(*pool_, hb2_.data(), xb_.data(), L.w_up, T);   // [T, F]
    ops::ref::SwiGlu(hb_.data(), hb_.data(), hb2_.data(), T * F);
    ops::MatMul(*pool_, xb_.data(), hb_.data(), L.w_down, T);  // [T, D]
    for (int64_t i = 0; i < T * D; ++i) x[i] += xb_[i];
  }
  cache.Advance(T);

  // Final norm and classifier, for every row or just the last.
  const int64_t first = all_logits ? 0 : T - 1;
  for (int64_t t = first; t < T; ++t) {
    ops::ref::RmsNorm(xb_.data() + (t - first) * D, x + t * D, output_norm_.data(), D, c.norm_eps);
  }
  ops::MatMul(*pool_, logits.data(), xb_.data(), output_, T - first);
  return Status::Ok();
}

}  // namespace dsv4
