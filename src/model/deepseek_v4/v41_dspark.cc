// DeepSeek-V4.1's DSpark draft head (see v41_model.h): the reference's
// DSparkBlock stages and Transformer.forward_spec, and the target features
// its Transformer.forward collects.
#include <algorithm>
#include <string>

#include "base/check.h"
#include "base/log.h"
#include "model/deepseek_v4/dspark.h"
#include "model/deepseek_v4/dspark_session.h"
#include "model/deepseek_v4/v41_model.h"
#include "ops/matmul.h"

namespace dsv4::deepseek_v4 {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

// One sequence's draft state: each stage's ring of kv rows, one per
// committed position (all kept).
class DSparkRings final : public SequenceCache {
 public:
  DSparkRings(const void* owner, int64_t n_stages, int64_t width, int64_t max_tokens)
      : owner_(owner), max_tokens_(max_tokens), rings_(n_stages) {
    for (RowHistory& r : rings_) r.Init(width, 0);
  }
  int64_t length() const override { return length_; }
  void Truncate(int64_t n) override {
    CHECK(n >= 0 && n <= length_, "truncate to %lld of %lld positions", static_cast<long long>(n),
          static_cast<long long>(length_));
    for (RowHistory& r : rings_) r.Truncate(n);
    length_ = n;
  }
  const void* owner() const { return owner_; }
  int64_t max_tokens() const { return max_tokens_; }
  RowHistory& ring(size_t s) { return rings_[s]; }
  void Grew(int64_t n) { length_ += n; }

 private:
  const void* owner_;
  int64_t max_tokens_;
  std::vector<RowHistory> rings_;  // [S]
  int64_t length_ = 0;
};

Status NoDSpark(const std::string& path) {
  return Unimplemented(path + ": the checkpoint has no DSpark module (mtp.*)",
                       "speculative decoding needs a DeepSeek-V4.1 checkpoint with its DSpark "
                       "stages (dspark_block_size > 0 and mtp.0.main_proj.weight)");
}

}  // namespace

void DeepSeekV41Model::CaptureFeatures(int64_t layer, const float* x, int64_t T) {
  if (!has_dspark()) return;
  const std::vector<int64_t>& targets = config_.dspark_target_layer_ids;
  const auto it = std::find(targets.begin(), targets.end(), layer);
  if (it == targets.end()) return;
  const int64_t D = config_.hidden_size, C = config_.hc_mult;
  const int64_t nT = static_cast<int64_t>(targets.size()), i = it - targets.begin();
  Grow(features_all_, T * nT * D);
  const float inv = 1.0f / static_cast<float>(C);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * C * D;  // [C, D]
    float* f = features_all_.data() + (t * nT + i) * D;
    for (int64_t d = 0; d < D; ++d) {
      float sum = 0.0f;
      for (int64_t s = 0; s < C; ++s) sum += xt[s * D + d];
      f[d] = sum * inv;
    }
  }
}

void DeepSeekV41Model::KeepFeatures(int64_t T) {
  const int64_t frow = has_dspark() ? static_cast<int64_t>(config_.dspark_target_layer_ids.size()) *
                                          config_.hidden_size
                                    : 0;
  features_.assign(features_all_.begin(), features_all_.begin() + T * frow);
  entry_rows_ = {0, T};
}

std::span<const float> DeepSeekV41Model::last_features(int64_t entry) const {
  if (!has_dspark() || entry < 0 || entry + 1 >= static_cast<int64_t>(entry_rows_.size())) {
    return {};
  }
  const int64_t frow =
      static_cast<int64_t>(config_.dspark_target_layer_ids.size()) * config_.hidden_size;
  return std::span<const float>(features_).subspan(
      entry_rows_[entry] * frow, (entry_rows_[entry + 1] - entry_rows_[entry]) * frow);
}

Status DeepSeekV41Model::ForwardBatch(std::span<const BatchEntry> entries) {
  std::vector<float> all;
  std::vector<int64_t> rows = {0};
  for (const BatchEntry& e : entries) {
    RETURN_IF_ERROR(Forward(e.tokens, *e.cache, e.logits, e.all_logits));
    all.insert(all.end(), features_.begin(), features_.end());
    rows.push_back(rows.back() + static_cast<int64_t>(e.tokens.size()));
  }
  features_ = std::move(all);
  entry_rows_ = std::move(rows);
  return Status::Ok();
}

std::unique_ptr<DraftSession> DeepSeekV41Model::NewDraftSession(int64_t max_tokens) {
  if (!has_dspark()) return nullptr;
  // A verification is one multi-token call, and with the reference's index-key
  // slot such a call scores other keys than the single-token steps plain
  // decoding runs (csa2.h), so its logits, and greedy speculation's tokens,
  // may differ from plain decoding's.
  if (reading_ == IndexKeyReading::kReference && !warned_reference_slot_) {
    warned_reference_slot_ = true;
    LOG_WARNING(
        "{}: speculative decoding with the reference's index-key slot: a verification call "
        "reads the slot as a multi-token call does, so the output may differ from plain "
        "decoding's; --v41-index-keys owner makes speculation lossless",
        reader_->path());
  }
  return std::make_unique<DSparkDraftSession<DeepSeekV41Model>>(*this, max_tokens);
}

std::unique_ptr<SequenceCache> DeepSeekV41Model::NewMtpCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
  return std::make_unique<DSparkRings>(this, config_.n_draft_layers(), config_.head_dim,
                                       max_tokens);
}

Status DeepSeekV41Model::DSparkObserve(std::span<const float> features, SequenceCache& seq) {
  const DeepSeekV4Config& c = config_;
  if (!has_dspark()) return NoDSpark(reader_->path());
  const int64_t D = c.hidden_size;
  const int64_t frow = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * D;
  if (features.empty() || static_cast<int64_t>(features.size()) % frow != 0) {
    return InvalidArgument(
        "DeepSeek-V4.1 DSparkObserve: features have " + std::to_string(features.size()) +
        " floats, expected a whole number of rows of nT·D = " + std::to_string(frow));
  }
  const int64_t n = static_cast<int64_t>(features.size()) / frow;
  auto* rings = dynamic_cast<DSparkRings*>(&seq);
  if (rings == nullptr || rings->owner() != this) {
    return InvalidArgument(
        "DeepSeek-V4.1 DSparkObserve: the cache was not made by this model's "
        "NewMtpCache");
  }
  if (rings->length() + n > rings->max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(rings->length() + n) +
                                 " draft positions > " + std::to_string(rings->max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  const DSparkWeights& d = *weights_.dspark;
  const Tracer trace(trace_fn_ ? &trace_fn_ : nullptr, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  const int64_t pos0 = rings->length();
  // ---- main_x = main_norm(main_proj · F) [n, D], for every stage ----
  Grow(dspark_x_, n * D);
  float* main_x = dspark_x_.data();
  Linear(pool, main_x,
         LinearInput(pool, features.data(), n, d.main_proj, numerics_, attn_scratch_.act),
         d.main_proj, n);
  for (int64_t t = 0; t < n; ++t) {
    RmsNorm(main_x + t * D, main_x + t * D, d.main_norm.data(), D, eps);
  }
  trace("dspark.main_x", -1, main_x, {n, D});
  for (size_t s = 0; s < d.stages.size(); ++s) {
    const LayerPlan& plan = plans_[c.num_hidden_layers + s];
    const LayerContext ctx{.pool = pool,
                           .config = draft_config_,
                           .plan = plan,
                           .rope = rope_[plan.layer],
                           .numerics = numerics_,
                           .trace = trace};
    Csa2DSparkRingRows(ctx, d.stages[s].attn, main_x, n, pos0, rings->ring(s), attn_scratch_);
  }
  rings->Grew(n);
  return Status::Ok();
}

Status DeepSeekV41Model::DSparkDraft(int32_t anchor, SequenceCache& seq, const DraftPick& pick,
                                     DSparkBlock& out, int64_t rows) {
  const DeepSeekV4Config& c = config_;
  if (!has_dspark()) return NoDSpark(reader_->path());
  auto* rings = dynamic_cast<DSparkRings*>(&seq);
  if (rings == nullptr || rings->owner() != this) {
    return InvalidArgument(
        "DeepSeek-V4.1 DSparkDraft: the cache was not made by this model's "
        "NewMtpCache");
  }
  if (rings->length() == 0) {
    return InvalidArgument("DeepSeek-V4.1 DSparkDraft: no committed position yet",
                           "DSparkObserve the prompt's target features first");
  }
  const int64_t V = c.vocab_size;
  if (anchor < 0 || anchor >= V) {
    return InvalidArgument("token id " + std::to_string(anchor) +
                           " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  const DSparkWeights& d = *weights_.dspark;
  const int64_t B = c.dspark_block_size, D = c.hidden_size, C = c.hc_mult;
  const int64_t p = rings->length() - 1;
  const Tracer trace(trace_fn_ ? &trace_fn_ : nullptr, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  Grow(x_, B * C * D);
  Grow(u_, B * D);
  Grow(h_, B * D);
  Grow(y_, B * D);
  Grow(mix_, B * c.hc_mix_dim());
  for (auto* v : {&pre_a_, &post_a_, &pre_f_, &post_f_, &pre_mix_}) Grow(*v, B * C);
  Grow(comb_a_, B * C * C);
  Grow(comb_f_, B * C * C);
  draft_moe_scratch_.Reserve(draft_config_, B);
  out.tokens.resize(B);
  out.logits.resize(B * V);
  out.markov_bias.resize(B * V);
  out.confidence.resize(B);
  float* x = x_.data();   // [B, C, D]
  float* u = u_.data();   // [B, D]
  float* hn = h_.data();  // [B, D]
  float* y = y_.data();   // [B, D]

  // ---- block input: [anchor, noise, ...] at positions p+1 .. p+B, C copies; one-hot pre ----
  dspark_ids_.assign(B, c.dspark_noise_token_id);
  dspark_ids_[0] = anchor;
  for (int64_t j = 0; j < B; ++j) {
    DequantizeRow(weights_.embed.dtype, weights_.embed[dspark_ids_[j]].data, D, u + j * D);
    for (int64_t s = 0; s < C; ++s) std::copy_n(u + j * D, D, x + (j * C + s) * D);
    for (int64_t s = 0; s < C; ++s) pre_mix_[j * C + s] = s == 0 ? 1.0f : 0.0f;
  }

  // ---- the stages: lagged-mHC blocks, DSpark attention, their own MoE ----
  for (size_t s = 0; s < d.stages.size(); ++s) {
    const LayerPlan& plan = plans_[c.num_hidden_layers + s];
    const LayerWeights& lw = d.stages[s];
    const LayerContext ctx{.pool = pool,
                           .config = draft_config_,
                           .plan = plan,
                           .rope = rope_[plan.layer],
                           .numerics = numerics_,
                           .trace = trace};
    HcSiteCoefficients(pool, hc_, lw.hc_attn, x, B,
                       HcMix{.mix = mix_.data(),
                             .pre = pre_a_.data(),
                             .post = post_a_.data(),
                             .comb = comb_a_.data()});
    HcCollapse(pool, hc_, x, pre_mix_.data(), B, u);
    for (int64_t j = 0; j < B; ++j) RmsNorm(hn + j * D, u + j * D, lw.attn_norm.data(), D, eps);
    Csa2DSparkAttention(ctx, lw.attn, hn, B, p, rings->ring(s), attn_scratch_, y);
    trace("attn_out", plan.layer, y, {B, D});
    HcExpand(pool, hc_, x, y, post_a_.data(), comb_a_.data(), B);
    HcSiteCoefficients(pool, hc_, lw.hc_ffn, x, B,
                       HcMix{.mix = mix_.data(),
                             .pre = pre_f_.data(),
                             .post = post_f_.data(),
                             .comb = comb_f_.data()});
    HcCollapse(pool, hc_, x, pre_a_.data(), B, u);
    for (int64_t j = 0; j < B; ++j) RmsNorm(hn + j * D, u + j * D, lw.ffn_norm.data(), D, eps);
    MoeForward(ctx, lw.moe, hn, dspark_ids_, draft_moe_scratch_, y);
    trace("ffn_out", plan.layer, y, {B, D});
    HcExpand(pool, hc_, x, y, post_f_.data(), comb_f_.data(), B);
    std::copy_n(pre_f_.data(), B * C, pre_mix_.data());
    trace("out", plan.layer, x, {B, C, D});
  }

  // ---- head: the last stage's lagged mix collapses; norm; the shared head, on the
  // rows drafted (every block row attended to all B, so only the head can stop early) ----
  const int64_t n_rows = rows > 0 ? std::min(rows, B) : B;
  HcCollapse(pool, hc_, x, pre_mix_.data(), n_rows, u);
  dspark_y_.assign(u, u + n_rows * D);
  for (int64_t j = 0; j < n_rows; ++j) RmsNorm(hn + j * D, u + j * D, d.norm.data(), D, eps);
  ops::MatMul(pool, out.logits.data(), hn, weights_.head, n_rows);

  return DSparkMarkovLoop(pool, d, anchor, n_rows, D, V, dspark_y_.data(), dspark_e_, pick, out,
                          "DeepSeek-V4.1");
}

}  // namespace dsv4::deepseek_v4
