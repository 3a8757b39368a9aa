// DeepSeek-V4 reference forward pass (see model.h).
#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <cmath>

#include "base/mapped_file.h"
#include "ops/matmul.h"

#include "io/safetensors.h"  // OpenCheckpointDir

namespace dsv4::deepseek_v4 {
namespace {

// Per-sequence state: the attention state (window ring, compressed entries,
// index keys, compressor tails) of every main layer, fp32.
}  // namespace

class DeepSeekV4Cache final : public SequenceCache {
 public:
  // The states of the main layers (role kMain) or of the first MTP layer (kMtp).
  DeepSeekV4Cache(const DeepSeekV4Model* owner, int64_t max_tokens, LayerRole role)
      : owner_(owner),
        max_tokens_(max_tokens),
        window_(owner->config().sliding_window),
        role_(role) {
    for (const LayerPlan& p : owner->plans()) {
      if (p.role != role) continue;
      if (role == LayerRole::kMtp && !layers_.empty()) break;
      layers_.emplace_back().Init(owner->config(), p);
      compressed_ = compressed_ || p.compress_ratio > 0;
    }
  }

  int64_t length() const override { return length_; }
  // Keeps the first n tokens. Truncate(0) always works. Otherwise it is exact
  // only when nothing the next token needs was overwritten: n == length, or a
  // window-only model whose ring has not wrapped (length ≤ W). Anything else
  // marks the cache stale and the next Forward reports it: the ring and the
  // compressors' running state cannot restore evicted rows.
  void Truncate(int64_t n) override {
    CHECK(n >= 0 && n <= length_, "Truncate(%lld) of a cache of %lld tokens",
          static_cast<long long>(n), static_cast<long long>(length_));
    if (n == 0) {
      for (AttentionState& s : layers_) s.Reset();
      stale_ = false;
    } else if (n != length_ && (compressed_ || length_ > window_)) {
      stale_ = true;
    }
    length_ = n;
  }

  const DeepSeekV4Model* owner() const { return owner_; }
  LayerRole role() const { return role_; }
  int64_t max_tokens() const { return max_tokens_; }
  bool stale() const { return stale_; }
  AttentionState& layer(int64_t l) { return layers_[l]; }
  void Advance(int64_t n) { length_ += n; }

 private:
  const DeepSeekV4Model* owner_;
  int64_t max_tokens_;
  int64_t window_;
  LayerRole role_;
  int64_t length_ = 0;
  bool stale_ = false;
  bool compressed_ = false;
  std::vector<AttentionState> layers_;  // [L] (main) or [1] (MTP)
};

Result<std::unique_ptr<DeepSeekV4Model>> DeepSeekV4Model::Load(
    std::shared_ptr<const CheckpointReader> reader, const DeepSeekV4Config& c,
    const LoadOptions& options) {
  RETURN_IF_ERROR(c.Validate().WithContext(reader->path()));
  RETURN_IF_ERROR(c.CheckForwardSupported().WithContext(reader->path()));
  if (options.numerics.act_quant) {
    // The reference's activation quantisation needs whole 128-blocks along K.
    for (int64_t k : {c.hidden_size, c.q_lora_rank, c.o_groups * c.o_lora_rank,
                      c.moe_intermediate_size}) {
      if (k % 128 != 0) {
        return InvalidArgument(reader->path() + ": FP8 activation quantisation needs input "
                               "widths that are multiples of 128, found " + std::to_string(k),
                               "turn NumericsOptions::act_quant off for this model");
      }
    }
  }
  if (options.numerics.kv_quant && c.head_dim_nope() % 64 != 0) {
    return InvalidArgument(reader->path() + ": the kv FP8 simulation needs head_dim − "
                           "qk_rope_head_dim to be a multiple of 64, found " +
                           std::to_string(c.head_dim_nope()),
                           "turn NumericsOptions::kv_quant off for this model");
  }
  std::unique_ptr<DeepSeekV4Model> m(new DeepSeekV4Model());
  m->config_ = c;
  m->plans_ = BuildLayerPlans(c);
  m->numerics_ = options.numerics;
  m->reader_ = reader;
  ASSIGN_OR_RETURN(m->weights_, BindWeights(*reader, c, m->plans_));

  for (const LayerPlan& p : m->plans_) {
    m->rope_.emplace_back(c.qk_rope_head_dim, p.rope_theta,
                          p.rope_yarn ? &c.rope_scaling : nullptr);
  }
  m->hc_ = HcParams{.streams = c.hc_mult,
                    .hidden = c.hidden_size,
                    .sinkhorn_iters = c.hc_sinkhorn_iters,
                    .hc_eps = static_cast<float>(c.hc_eps),
                    .norm_eps = static_cast<float>(c.rms_norm_eps)};
  int64_t n_params = 0;
  ForEachWeight(c, m->plans_, [&](const WeightDecl& d) {
    if (d.mtp) return;
    int64_t n = 1;
    for (int64_t s : d.shape) n *= s;
    n_params += n;
  });
  const int64_t max_context =
      options.max_context > 0 ? std::min(options.max_context, c.max_position_embeddings)
                              : c.max_position_embeddings;
  m->info_ = ModelInfo{.architecture = "deepseek_v4",
                       .vocab_size = c.vocab_size,
                       .max_context = max_context,
                       .n_params = n_params,
                       .bos_id = c.bos_token_id,
                       .eos_id = c.eos_token_id};
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  return m;
}

void DeepSeekV4Model::SetThreads(int n_threads) {
  pool_ = std::make_unique<ThreadPool>(std::max(1, n_threads));
}

std::unique_ptr<SequenceCache> DeepSeekV4Model::NewCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
  return std::make_unique<DeepSeekV4Cache>(this, max_tokens, LayerRole::kMain);
}

void DeepSeekV4Model::TraceHc(const Tracer& trace, const char* site, int64_t layer,
                              int64_t n_tokens) const {
  if (!trace.on()) return;
  const int64_t C = config_.hc_mult;
  const std::string s(site);
  trace(s + ".pre", layer, pre_.data(), {n_tokens, C});
  trace(s + ".post", layer, post_.data(), {n_tokens, C});
  trace(s + ".comb", layer, comb_.data(), {n_tokens, C, C});
}

void DeepSeekV4Model::EnsureScratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  const DeepSeekV4Config& c = config_;
  scratch_tokens_ = n;
  const int64_t D = c.hidden_size, C = c.hc_mult;
  x_.resize(n * C * D);
  u_.resize(n * D);
  h_.resize(n * D);
  y_.resize(n * D);
  mix_.resize(n * c.hc_mix_dim());
  pre_.resize(n * C);
  post_.resize(n * C);
  comb_.resize(n * C * C);
  hc_tmp_.resize(C * D);
  attn_scratch_.Reserve(c, n);
  moe_scratch_.Reserve(c, n);
}

Result<DeepSeekV4Cache*> DeepSeekV4Model::CheckCall(SequenceCache& seq, LayerRole role,
                                                    std::span<const int32_t> tokens,
                                                    std::span<float> logits,
                                                    bool all_logits) const {
  const DeepSeekV4Config& c = config_;
  const char* what = role == LayerRole::kMain ? "Forward" : "ForwardMtp";
  auto* cache = dynamic_cast<DeepSeekV4Cache*>(&seq);
  if (cache == nullptr || cache->owner() != this || cache->role() != role) {
    return InvalidArgument(std::string("DeepSeek-V4 ") + what + ": the cache was not made by " +
                           "this model's " + (role == LayerRole::kMain ? "NewCache" : "NewMtpCache"));
  }
  if (cache->stale()) {
    return InvalidArgument(std::string("DeepSeek-V4 ") + what +
                               ": the cache was truncated past what it can restore (" +
                               std::to_string(c.sliding_window) +
                               "-token window, compressor state)",
                           "Truncate(0) and run the whole sequence again");
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return InvalidArgument(std::string("DeepSeek-V4 ") + what + ": no tokens");
  if (cache->length() + T > cache->max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(cache->length() + T) +
                                 " tokens > " + std::to_string(cache->max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  const int64_t V = c.vocab_size;
  if (static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * V) {
    return InvalidArgument(std::string("DeepSeek-V4 ") + what + ": logits buffer has " +
                           std::to_string(logits.size()) + " floats, needs " +
                           std::to_string((all_logits ? T : 1) * V));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= V) {
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(V) + ")");
    }
  }
  return cache;
}

void DeepSeekV4Model::RunBlock(const LayerPlan& plan, const LayerWeights& lw,
                               std::span<const int32_t> tokens, int64_t pos0,
                               AttentionState& state, const Tracer& trace) {
  const DeepSeekV4Config& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.hidden_size, C = c.hc_mult;
  const int64_t l = plan.layer;
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  float* x = x_.data();  // [T, C, D]
  float* u = u_.data();  // [T, D]
  float* h = h_.data();  // [T, D]
  float* y = y_.data();  // [T, D]

  // ---- Attention site: mHC pre → attn_norm → attention → mHC post (§2 step 3a–c) ----
  HcSiteCoefficients(pool, hc_, lw.hc_attn, x, T, mix_.data(), pre_.data(), post_.data(),
                     comb_.data());
  TraceHc(trace, "hc_attn", l, T);
  HcCollapse(hc_, x, pre_.data(), T, u);
  trace("hc_attn.collapsed", l, u, {T, D});
  for (int64_t t = 0; t < T; ++t) RmsNorm(h + t * D, u + t * D, lw.attn_norm.data(), D, eps);
  trace("attn_norm_out", l, h, {T, D});
  AttentionForward(pool, c, plan, lw.attn, rope_[l], numerics_, trace, h, T, pos0, state,
                   attn_scratch_, y);
  trace("attn_out", l, y, {T, D});
  HcExpand(hc_, x, y, post_.data(), comb_.data(), T, hc_tmp_.data());
  trace("attn_resid", l, x, {T, C, D});

  // ---- FFN site: mHC pre → ffn_norm → MoE → mHC post (§2 step 3d–f) ----
  HcSiteCoefficients(pool, hc_, lw.hc_ffn, x, T, mix_.data(), pre_.data(), post_.data(),
                     comb_.data());
  TraceHc(trace, "hc_ffn", l, T);
  HcCollapse(hc_, x, pre_.data(), T, u);
  trace("hc_ffn.collapsed", l, u, {T, D});
  for (int64_t t = 0; t < T; ++t) RmsNorm(h + t * D, u + t * D, lw.ffn_norm.data(), D, eps);
  trace("ffn_norm_out", l, h, {T, D});
  MoeForward(pool, c, plan, lw.moe, numerics_, trace, h, tokens, moe_scratch_, y);
  trace("ffn_out", l, y, {T, D});
  HcExpand(hc_, x, y, post_.data(), comb_.data(), T, hc_tmp_.data());
  trace("out", l, x, {T, C, D});
}

void DeepSeekV4Model::Head(const HyperConnectionWeights& hc_head, const std::vector<float>& norm,
                           int64_t layer, int64_t n_tokens, bool all_logits, float* logits,
                           const Tracer& trace) {
  const int64_t D = config_.hidden_size, C = config_.hc_mult;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int64_t first = all_logits ? 0 : n_tokens - 1;
  const int64_t n = n_tokens - first;
  float* u = u_.data();
  float* h = h_.data();
  HcHead(*pool_, hc_, hc_head, x_.data() + first * C * D, n, mix_.data(), pre_.data(), u);
  trace("hc_head_out", layer, u, {n, D});
  for (int64_t t = 0; t < n; ++t) RmsNorm(h + t * D, u + t * D, norm.data(), D, eps);
  trace("final_norm_out", layer, h, {n, D});
  ops::MatMul(*pool_, logits, h, weights_.head, n);  // [n, V], fp32
}

Status DeepSeekV4Model::Forward(std::span<const int32_t> tokens, SequenceCache& seq,
                                std::span<float> logits, bool all_logits) {
  ASSIGN_OR_RETURN(DeepSeekV4Cache * cache,
                   CheckCall(seq, LayerRole::kMain, tokens, logits, all_logits));
  const DeepSeekV4Config& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.hidden_size, C = c.hc_mult;
  const int64_t pos0 = cache->length();
  EnsureScratch(T);
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const ModelWeights& w = weights_;
  float* x = x_.data();  // [T, C, D]
  float* u = u_.data();  // [T, D]

  // ---- Embedding, expanded to C identical streams (spec §3.4, §6.1) ----
  for (int64_t t = 0; t < T; ++t) {
    DequantizeRow(w.embed.dtype, w.embed[tokens[t]].data, D, u + t * D);
    for (int64_t s = 0; s < C; ++s) std::copy_n(u + t * D, D, x + (t * C + s) * D);
  }
  trace("embed", -1, u, {T, D});

  for (const LayerPlan& plan : plans_) {
    if (plan.role != LayerRole::kMain) continue;
    RunBlock(plan, w.layers[plan.layer], tokens, pos0, cache->layer(plan.layer), trace);
  }
  cache->Advance(T);
  hidden_tokens_ = T;  // x_ now holds the final residual streams

  // ---- Head: HC head collapse → final norm → fp32 logits (§3.3, §6.2) ----
  Head(w.hc_head, w.norm, -1, T, all_logits, logits.data(), trace);
  return Status::Ok();
}

std::span<const float> DeepSeekV4Model::last_hidden() const {
  return {x_.data(), static_cast<size_t>(hidden_tokens_ * config_.hc_mult * config_.hidden_size)};
}

std::unique_ptr<SequenceCache> DeepSeekV4Model::NewMtpCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
  return std::make_unique<DeepSeekV4Cache>(this, max_tokens, LayerRole::kMtp);
}

Status DeepSeekV4Model::ForwardMtp(std::span<const int32_t> next_tokens,
                                   std::span<const float> main_hidden, SequenceCache& seq,
                                   std::span<float> logits, bool all_logits) {
  const DeepSeekV4Config& c = config_;
  if (weights_.mtp.empty()) {
    return Unimplemented(reader_->path() + ": the checkpoint has no MTP layer (mtp.0.*)",
                         "speculative decoding needs a checkpoint with the MTP weights");
  }
  ASSIGN_OR_RETURN(DeepSeekV4Cache * cache,
                   CheckCall(seq, LayerRole::kMtp, next_tokens, logits, all_logits));
  const int64_t T = static_cast<int64_t>(next_tokens.size()), D = c.hidden_size;
  const int64_t C = c.hc_mult;
  if (static_cast<int64_t>(main_hidden.size()) != T * C * D) {
    return InvalidArgument("DeepSeek-V4 ForwardMtp: main_hidden has " +
                           std::to_string(main_hidden.size()) + " floats, expected [T, C, D] = " +
                           std::to_string(T * C * D));
  }
  const int64_t pos0 = cache->length();
  EnsureScratch(T);
  if (static_cast<int64_t>(mtp_tmp_.size()) < T * C * D) mtp_tmp_.resize(T * C * D);
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  const MtpWeights& m = weights_.mtp[0];
  const LayerPlan& plan = plans_[c.num_hidden_layers];
  const int64_t l = plan.layer;
  float* x = x_.data();          // [T, C, D]
  float* u = u_.data();          // [T, D]
  float* e = y_.data();          // [T, D]
  float* hs = mtp_tmp_.data();   // [T, C, D]

  // ---- Inputs (spec §6.3): e = e_proj(enorm(Embed[next])), X[c] = h_proj(hnorm(H[c])) + e ----
  for (int64_t t = 0; t < T; ++t) {
    DequantizeRow(weights_.embed.dtype, weights_.embed[next_tokens[t]].data, D, u + t * D);
    RmsNorm(u + t * D, u + t * D, m.enorm.data(), D, eps);
  }
  trace("enorm_out", l, u, {T, D});
  for (int64_t r = 0; r < T * C; ++r) {  // main_hidden may alias x_: read it before writing x_
    RmsNorm(hs + r * D, main_hidden.data() + r * D, m.hnorm.data(), D, eps);
  }
  trace("hnorm_out", l, hs, {T, C, D});
  Linear(pool, e, LinearInput(u, T, m.e_proj, numerics_, mtp_act_), m.e_proj, T);
  Linear(pool, x, LinearInput(hs, T * C, m.h_proj, numerics_, mtp_act_), m.h_proj, T * C);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < C; ++s) {
      float* xs = x + (t * C + s) * D;
      for (int64_t d = 0; d < D; ++d) xs[d] += e[t * D + d];
    }
  }

  // ---- The MTP block and its own head collapse; shared LM head ----
  RunBlock(plan, m.block, next_tokens, pos0, cache->layer(0), trace);
  cache->Advance(T);
  Head(m.hc_head, m.norm, l, T, all_logits, logits.data(), trace);
  return Status::Ok();
}

}  // namespace dsv4::deepseek_v4

namespace dsv4 {

Result<std::unique_ptr<Model>> LoadDeepSeekV4(const std::string& dir,
                                              const deepseek_v4::LoadOptions& options) {
  using deepseek_v4::DeepSeekV4Config;
  ASSIGN_OR_RETURN(DeepSeekV4Config config, DeepSeekV4Config::FromFile(dir + "/config.json"));
  RETURN_IF_ERROR(config.CheckForwardSupported().WithContext(dir + "/config.json"));
  ASSIGN_OR_RETURN(auto reader, OpenCheckpointDir(dir));
  std::shared_ptr<const CheckpointReader> shared(std::move(reader));
  ASSIGN_OR_RETURN(auto model, DeepSeekV4Model::Load(shared, config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace dsv4
