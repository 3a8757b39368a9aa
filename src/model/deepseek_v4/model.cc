// DeepSeek-V4 reference forward pass (see model.h).
#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/mapped_file.h"
#include "model/deepseek_v4/dspark.h"
#include "ops/matmul.h"

#include "io/safetensors.h"  // OpenCheckpointDir
#include "model/deepseek_v4/gguf_reader.h"

namespace dsv4::deepseek_v4 {

Result<std::unique_ptr<DeepSeekV4Model>> DeepSeekV4Model::Load(
    std::shared_ptr<const CheckpointReader> reader, const DeepSeekV4Config& c,
    const LoadOptions& options) {
  RETURN_IF_ERROR(c.Validate().WithContext(reader->path()));
  RETURN_IF_ERROR(c.CheckForwardSupported().WithContext(reader->path()));
  // QAT simulations: the caller's choice, else the config's (spec §9.2).
  const bool from_config = !options.numerics.has_value();
  NumericsOptions numerics = options.numerics.value_or(DefaultNumerics(c.qat_simulation));
  if (options.o_bf16.has_value()) numerics.o_bf16 = *options.o_bf16;
  const std::string off_hint =
      from_config ? "set \"qat_simulation\": false in config.json (the model was not trained "
                    "with them) or pass explicit NumericsOptions"
                  : "turn NumericsOptions::act_quant off for this model";
  if (numerics.act_quant) {
    // The reference's activation quantisation needs whole 128-blocks along K.
    for (int64_t k :
         {c.hidden_size, c.q_lora_rank, c.o_groups * c.o_lora_rank, c.moe_intermediate_size}) {
      if (k % 128 != 0) {
        return InvalidArgument(reader->path() +
                                   ": FP8 activation quantisation needs input "
                                   "widths that are multiples of 128, found " +
                                   std::to_string(k),
                               off_hint);
      }
    }
  }
  if (numerics.kv_quant && c.head_dim_nope() % 64 != 0) {
    return InvalidArgument(reader->path() +
                               ": the kv FP8 simulation needs head_dim − "
                               "qk_rope_head_dim to be a multiple of 64, found " +
                               std::to_string(c.head_dim_nope()),
                           off_hint);
  }
  if (numerics.index_quant && c.index_head_dim % 32 != 0) {
    return InvalidArgument(reader->path() +
                               ": the indexer FP4 simulation needs index_head_dim "
                               "to be a multiple of 32, found " +
                               std::to_string(c.index_head_dim),
                           off_hint);
  }
  if (options.rollback.horizon < 0 && options.rollback.horizon != RollbackOptions::kAll) {
    return InvalidArgument(
        "DeepSeek-V4 rollback horizon " + std::to_string(options.rollback.horizon) + " is negative",
        "use ≥ 0, or RollbackOptions::kAll to keep every row");
  }
  if (options.rollback.checkpoint_interval < 0) {
    return InvalidArgument("DeepSeek-V4 checkpoint interval " +
                               std::to_string(options.rollback.checkpoint_interval) +
                               " is negative",
                           "use 0 (no checkpoints) or a positive token count");
  }
  std::unique_ptr<DeepSeekV4Model> m(new DeepSeekV4Model());
  m->config_ = c;
  m->plans_ = BuildLayerPlans(c);
  m->numerics_ = numerics;
  m->rollback_ = options.rollback;
  m->reader_ = reader;
  ASSIGN_OR_RETURN(m->weights_, BindWeights(*reader, c, m->plans_));

  m->rope_ = LayerRopes(c, m->plans_);
  m->hc_ = MakeHcParams(c);
  m->info_ = MakeModelInfo(c, m->plans_, "deepseek_v4", options.max_context);
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  return m;
}

void DeepSeekV4Model::SetThreads(int n_threads) {
  pool_ = std::make_unique<ThreadPool>(std::max(1, n_threads));
  // Scratch is sized again on the next call (attention's per thread).
  scratch_tokens_ = 0;
  scratch_context_ = 0;
}

std::unique_ptr<SequenceCache> DeepSeekV4Model::NewCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
  return std::make_unique<DeepSeekV4Cache>(this, config_, plans_, rollback_, max_tokens,
                                           LayerRole::kMain);
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
                           "this model's " +
                           (role == LayerRole::kMain ? "NewCache" : "NewMtpCache"));
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return InvalidArgument(std::string("DeepSeek-V4 ") + what + ": no tokens");
  if (cache->length() + T > cache->max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(cache->length() + T) + " tokens > " +
                                 std::to_string(cache->max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  const int64_t V = c.vocab_size;
  if (front() && static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * V) {
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
                               std::span<const int32_t> tokens, std::span<const Segment> segments,
                               const Tracer& trace, const DraftAttention* draft) {
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
  const bool read_ahead = expert_cache_ && expert_read_ahead_ && plan.role == LayerRole::kMain &&
                          l + 1 < c.num_hidden_layers;
  const HcMix mix{
      .mix = mix_.data(), .pre = pre_.data(), .post = post_.data(), .comb = comb_.data()};
  const LayerContext ctx{
      .pool = pool,
      .config = c,
      .plan = plan,
      .rope = rope_[l],
      .numerics = numerics_,
      .trace = trace,
      .router_options =
          plan.role != LayerRole::kMtp && router_options_ ? &*router_options_ : nullptr,
      .expert_cache = plan.role != LayerRole::kMtp ? expert_cache_.get() : nullptr,
      .next_plan = read_ahead ? &plans_[l + 1] : nullptr,
      .next_moe = read_ahead ? &weights_.layers[l + 1].moe : nullptr,
      .expert_shard = plan.role == LayerRole::kMain && shard_ ? &*shard_ : nullptr};
  HcSiteCoefficients(pool, hc_, lw.hc_attn, x, T, mix);
  TraceHc(trace, "hc_attn", l, T);
  HcCollapse(pool, hc_, x, pre_.data(), T, u);
  trace("hc_attn.collapsed", l, u, {T, D});
  pool.ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) RmsNorm(h + t * D, u + t * D, lw.attn_norm.data(), D, eps);
  });
  trace("attn_norm_out", l, h, {T, D});
  // The projections over all rows; attention per sequence on its own cache
  // (the MTP cache holds the one MTP layer at index 0).
  AttentionProject(ctx, lw.attn, h, T, attn_scratch_);
  if (draft != nullptr) DSparkAttentionCore(ctx, lw.attn, draft->p, T, *draft->ring, attn_scratch_);
  for (const Segment& sg : segments) {
    AttentionState& state = sg.cache->layer(plan.role == LayerRole::kMtp ? 0 : l);
    AttentionCore(ctx, lw.attn, TokenRun{.row0 = sg.row0, .n_tokens = sg.n, .pos0 = sg.pos0}, state,
                  attn_scratch_);
    if (usage_ && plan.has_indexer) CountIndexPicks(plan, sg.n, sg.pos0);
  }
  AttentionOutput(ctx, lw.attn, T, attn_scratch_, y);
  trace("attn_out", l, y, {T, D});
  HcExpand(pool, hc_, x, y, post_.data(), comb_.data(), T);
  trace("attn_resid", l, x, {T, C, D});

  // ---- FFN site: mHC pre → ffn_norm → MoE → mHC post (§2 step 3d–f) ----
  HcSiteCoefficients(pool, hc_, lw.hc_ffn, x, T, mix);
  TraceHc(trace, "hc_ffn", l, T);
  HcCollapse(pool, hc_, x, pre_.data(), T, u);
  trace("hc_ffn.collapsed", l, u, {T, D});
  pool.ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) RmsNorm(h + t * D, u + t * D, lw.ffn_norm.data(), D, eps);
  });
  trace("ffn_norm_out", l, h, {T, D});
  MoeForward(ctx, lw.moe, h, tokens, moe_scratch_, y);
  if (usage_) CountRouting(plan, T);
  trace("ffn_out", l, y, {T, D});
  HcExpand(pool, hc_, x, y, post_.data(), comb_.data(), T);
  trace("out", l, x, {T, C, D});
}

Status DeepSeekV4Model::EnableUsageStats(bool on) {
  usage_.reset();
  if (!on) return Status::Ok();
  const DeepSeekV4Config& c = config_;
  UsageStats u;
  for (const LayerPlan& plan : plans_) {
    LayerUsage& l = u.layers.emplace_back();
    l.layer = plan.layer;
    l.draft = plan.role != LayerRole::kMain;
    l.hash_routed = plan.router == RouterKind::kHash;
    l.expert_picks.assign(c.n_routed_experts, 0);
    if (plan.has_indexer) l.index_age.assign(kUsageAgeBuckets, 0);
  }
  usage_ = std::move(u);
  return Status::Ok();
}

void DeepSeekV4Model::CountIndexPicks(const LayerPlan& plan, int64_t T, int64_t pos0) {
  LayerUsage& u = usage_->layers[plan.layer];
  const int64_t k = config_.index_topk, r = plan.compress_ratio;
  const int32_t* top = attn_scratch_.top.data();  // [T, k]
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = (pos0 + t + 1) / r;  // entries the query sees
    if (n <= k) continue;                  // all of them: no choice made
    ++u.index_queries;
    u.index_visible += n;
    u.index_recent_uniform += static_cast<double>(k * k) / static_cast<double>(n);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = top[t * k + j];
      if (id < 0) continue;
      const int64_t age = n - 1 - id;
      // bucket 0: age 0; bucket b: ages [2^(b−1), 2^b), the last one open-ended
      ++u.index_age[std::min<int64_t>(std::bit_width(static_cast<uint64_t>(age)),
                                      kUsageAgeBuckets - 1)];
      if (age < k) ++u.index_recent;
      u.index_relative_age += static_cast<double>(age) / static_cast<double>(n - 1);
    }
  }
}

void DeepSeekV4Model::CountRouting(const LayerPlan& plan, int64_t T) {
  LayerUsage& u = usage_->layers[plan.layer];
  const int64_t k = config_.num_experts_per_tok;
  const std::vector<int32_t>& experts = moe_scratch_.routing.experts;  // [T, k]
  for (int64_t i = 0; i < T * k; ++i) ++u.expert_picks[experts[i]];
}

void DeepSeekV4Model::Head(const HyperConnectionWeights& hc_head, const std::vector<float>& norm,
                           int64_t layer, const float* x, int64_t n, float* logits,
                           const Tracer& trace) {
  if (!front()) return;  // a later pipeline stage makes no logits
  const int64_t D = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* u = u_.data();
  float* h = h_.data();
  HcHead(*pool_, hc_, hc_head, x, n, HcMix{.mix = mix_.data(), .pre = pre_.data()}, u);
  trace("hc_head_out", layer, u, {n, D});
  for (int64_t t = 0; t < n; ++t) RmsNorm(h + t * D, u + t * D, norm.data(), D, eps);
  trace("final_norm_out", layer, h, {n, D});
  ops::MatMul(*pool_, logits, h, weights_.head, n);  // [n, V], fp32
}

void DeepSeekV4Model::EnsureContextScratch(int64_t max_tokens) {
  if (max_tokens <= scratch_context_) return;
  scratch_context_ = max_tokens;
  attn_scratch_.ReserveContext(config_, plans_, max_tokens, pool_->size());
}

void DeepSeekV4Model::RunMain(std::span<const int32_t> tokens, std::span<const Segment> segments,
                              const Tracer& trace, bool wait_back) {
  const DeepSeekV4Config& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.hidden_size, C = c.hc_mult;
  const ModelWeights& w = weights_;
  EnsureScratch(T);
  for (const Segment& sg : segments) EnsureContextScratch(sg.cache->max_tokens());
  float* x = x_.data();  // [T, C, D]
  float* u = u_.data();  // [T, D]

  // Pipeline parallel: the DSpark target features [T, nT·D] travel with x.
  const int64_t frow =
      has_dspark() ? static_cast<int64_t>(c.dspark_target_layer_ids.size()) * D : 0;
  if (static_cast<int64_t>(features_all_.size()) < T * frow) features_all_.resize(T * frow);
  const std::span<float> xs(x, T * C * D), fs(features_all_.data(), T * frow);

  if (!stage_ || stage_->first_layer == 0) {
    // ---- Embedding, expanded to C identical streams (spec §3.4, §6.1) ----
    for (int64_t t = 0; t < T; ++t) {
      DequantizeRow(w.embed.dtype, w.embed[tokens[t]].data, D, u + t * D);
      for (int64_t s = 0; s < C; ++s) std::copy_n(u + t * D, D, x + (t * C + s) * D);
    }
    trace("embed", -1, u, {T, D});
  } else {
    // ---- a later stage: the previous one's streams ----
    stage_->link->RecvPrev(xs, "residual streams");
    if (frow > 0) stage_->link->RecvPrev(fs, "DSpark target features");
  }

  for (const LayerPlan& plan : plans_) {
    if (plan.role != LayerRole::kMain) continue;
    if (stage_ && (plan.layer < stage_->first_layer || plan.layer >= stage_->end_layer)) continue;
    RunBlock(plan, w.layers[plan.layer], tokens, segments, trace);
    if (has_dspark()) CaptureFeatures(plan.layer, T);
  }

  if (stage_ &&
      stage_->link != nullptr) {  // ---- on to the next stage; the front gets the end ----
    stage_->link->SendNext(xs, "residual streams");
    if (frow > 0) stage_->link->SendNext(fs, "DSpark target features");
    if (!wait_back) return;
    if (front()) {
      stage_->link->RecvPrev(xs, "residual streams");
      if (frow > 0) stage_->link->RecvPrev(fs, "DSpark target features");
    }
    stage_->link->Flush();
  }
}

int64_t DeepSeekV4Model::MicroBatch(int64_t work) const {
  if (!stage_ || stage_->link == nullptr || stage_->micro_batch == PipelineStage::kMicroBatchOff) {
    return work;
  }
  if (stage_->micro_batch > 0) return std::min(work, stage_->micro_batch);
  const int64_t n = (work + stage_->stages - 1) / std::max<int64_t>(stage_->stages, 1);
  return n >= PipelineStage::kMicroBatchMin ? n : work;
}

Status DeepSeekV4Model::SetPipelineStage(const PipelineStage& stage) {
  const int64_t L = config_.num_hidden_layers;
  if (stage.first_layer < 0 || stage.first_layer > stage.end_layer || stage.end_layer > L) {
    return InvalidArgument("DeepSeek-V4 pipeline stage: layers [" +
                               std::to_string(stage.first_layer) + ", " +
                               std::to_string(stage.end_layer) + ") are outside the model's [0, " +
                               std::to_string(L) + ")",
                           "give each rank a part of the layers (--layers-split)");
  }
  if ((stage.first_layer > 0 || stage.end_layer < L) && stage.link == nullptr) {
    return InvalidArgument(
        "DeepSeek-V4 pipeline stage: a stage of part of the layers needs a link");
  }
  stage_ = stage;
  return Status::Ok();
}

Status DeepSeekV4Model::SetExpertShard(const ExpertShard& shard) {
  RETURN_IF_ERROR(
      CheckExpertShard(shard, "DeepSeek-V4", config_.n_routed_experts, expert_cache_ != nullptr));
  shard_ = shard;
  return Status::Ok();
}

void DeepSeekV4Model::CaptureFeatures(int64_t layer, int64_t n_rows) {
  const std::vector<int64_t>& targets = config_.dspark_target_layer_ids;
  const auto it = std::find(targets.begin(), targets.end(), layer);
  if (it == targets.end()) return;
  const int64_t D = config_.hidden_size, C = config_.hc_mult;
  const int64_t nT = static_cast<int64_t>(targets.size()), i = it - targets.begin();
  if (static_cast<int64_t>(features_all_.size()) < n_rows * nT * D) {
    features_all_.resize(n_rows * nT * D);
  }
  const float inv = 1.0f / static_cast<float>(C);
  for (int64_t t = 0; t < n_rows; ++t) {
    const float* xt = x_.data() + t * C * D;  // [C, D]
    float* f = features_all_.data() + (t * nT + i) * D;
    for (int64_t d = 0; d < D; ++d) {
      float sum = 0.0f;
      for (int64_t c = 0; c < C; ++c) sum += xt[c * D + d];
      f[d] = sum * inv;
    }
  }
}

Status DeepSeekV4Model::Forward(std::span<const int32_t> tokens, SequenceCache& seq,
                                std::span<float> logits, bool all_logits) {
  ASSIGN_OR_RETURN(DeepSeekV4Cache * cache,
                   CheckCall(seq, LayerRole::kMain, tokens, logits, all_logits));
  const DeepSeekV4Config& c = config_;
  const int64_t T = static_cast<int64_t>(tokens.size()), V = c.vocab_size;
  const int64_t row = c.hc_mult * c.hidden_size;
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const int64_t first_new = cache->length();  // position of tokens[0]
  cache->CountReplay(first_new - cache->computed());
  cache->Append(tokens);
  const int64_t end = cache->length();
  hidden_.resize(T * row);  // [T, C, D]; keeps its capacity
  const int64_t frow =
      has_dspark() ? static_cast<int64_t>(c.dspark_target_layer_ids.size()) * c.hidden_size : 0;
  features_.resize(T * frow);  // [T, nT·D]
  entry_rows_.assign({0, T});

  // A replay of [computed, first_new) after a deep Truncate, then the new
  // tokens, in segments that end at the rollback checkpoints and, in a
  // pipeline, at every micro-batch's end (MicroBatch; one RunMain per piece).
  const int64_t start = cache->computed();
  const int64_t piece = MicroBatch(end - start);
  const bool pieces = piece < end - start;
  // The final residual streams [n, C, D] of [pos0, pos0 + n) at `x`: the new
  // tokens' rows kept (the MTP input), their logits made.
  const auto finish = [&](int64_t pos0, int64_t n, const float* x) {
    const int64_t seg_end = pos0 + n, b = std::max(pos0, first_new);
    if (b >= seg_end) return;
    std::copy_n(x + (b - pos0) * row, (seg_end - b) * row, hidden_.data() + (b - first_new) * row);
    std::copy_n(features_all_.data() + (b - pos0) * frow, (seg_end - b) * frow,
                features_.data() + (b - first_new) * frow);
    // ---- Head: HC head collapse → final norm → fp32 logits (§3.3, §6.2) ----
    if (!front()) return;  // a later pipeline stage makes no logits
    if (all_logits) {
      Head(weights_.hc_head, weights_.norm, -1, x + (b - pos0) * row, seg_end - b,
           logits.data() + (b - first_new) * V, trace);
    } else if (seg_end == end) {
      Head(weights_.hc_head, weights_.norm, -1, x + (seg_end - 1 - pos0) * row, 1, logits.data(),
           trace);
    }
  };
  piece_ends_.clear();
  while (cache->computed() < end) {
    const int64_t pos0 = cache->computed();
    const int64_t seg_end = std::min(cache->SegmentEnd(pos0, end), pos0 + piece);
    const Segment seg{.cache = cache, .row0 = 0, .n = seg_end - pos0, .pos0 = pos0};
    RunMain(cache->tokens().subspan(pos0, seg_end - pos0), {&seg, 1}, trace,
            /*wait_back=*/!pieces);
    cache->Computed(seg_end);
    if (pieces) {
      piece_ends_.push_back(seg_end);
    } else {
      finish(pos0, seg_end - pos0, x_.data());
    }
  }
  if (pieces) {
    // ---- Micro-batches: the front gets the pieces' final streams in order ----
    for (size_t i = 0; i < piece_ends_.size() && front(); ++i) {
      const int64_t b = i == 0 ? start : piece_ends_[i - 1], n = piece_ends_[i] - b;
      stage_->link->RecvPrev(std::span<float>(x_.data(), n * row), "residual streams");
      if (frow > 0) {
        stage_->link->RecvPrev(std::span<float>(features_all_.data(), n * frow),
                               "DSpark target features");
      }
      finish(b, n, x_.data());
    }
    stage_->link->Flush();
  }
  return Status::Ok();
}

void DeepSeekV4Model::KeepNewRows(std::span<const BatchJob> jobs, int64_t row, int64_t frow) {
  for (const Segment& sg : segments_) {
    const BatchJob& j = *std::find_if(jobs.begin(), jobs.end(),
                                      [&](const BatchJob& jj) { return jj.cache == sg.cache; });
    const int64_t seg_end = sg.pos0 + sg.n, b = std::max(sg.pos0, j.first_new);
    if (b >= seg_end) continue;  // a replay of dropped positions
    const int64_t from = sg.row0 + b - sg.pos0, to = j.out_row0 + b - j.first_new;
    std::copy_n(x_.data() + from * row, (seg_end - b) * row, hidden_.data() + to * row);
    std::copy_n(features_all_.data() + from * frow, (seg_end - b) * frow,
                features_.data() + to * frow);
  }
}

Status DeepSeekV4Model::ForwardBatch(std::span<const BatchEntry> entries) {
  if (entries.size() == 1) {
    const BatchEntry& e = entries[0];
    if (e.cache == nullptr)
      return InvalidArgument("DeepSeek-V4 ForwardBatch: entry 0 has no cache");
    return Forward(e.tokens, *e.cache, e.logits, e.all_logits);
  }
  const DeepSeekV4Config& c = config_;
  const int64_t V = c.vocab_size, row = c.hc_mult * c.hidden_size;
  // Validate everything first, so an error leaves every cache as it was.
  std::vector<BatchJob>& jobs = batch_jobs_;  // keeps its capacity: no allocation per step
  jobs.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    const BatchEntry& e = entries[i];
    const auto where = [i] { return "DeepSeek-V4 ForwardBatch entry " + std::to_string(i); };
    if (e.cache == nullptr) return InvalidArgument(where() + ": no cache");
    Result<DeepSeekV4Cache*> cache =
        CheckCall(*e.cache, LayerRole::kMain, e.tokens, e.logits, e.all_logits);
    if (!cache.ok()) return cache.status().WithContext(where());
    for (const BatchJob& j : jobs) {
      if (j.cache == *cache) {
        return InvalidArgument(where() + ": its cache is also used by an earlier entry",
                               "give each sequence of a batch its own cache");
      }
    }
    jobs.push_back(BatchJob{.cache = *cache, .entry = &e});
  }
  // The new tokens' final residuals and target features, entry after entry
  // (the draft head's input: last_hidden(i), last_features(i)).
  const int64_t frow =
      has_dspark() ? static_cast<int64_t>(c.dspark_target_layer_ids.size()) * c.hidden_size : 0;
  entry_rows_.assign(1, 0);
  for (BatchJob& j : jobs) {
    j.first_new = j.cache->length();
    j.cache->CountReplay(j.first_new - j.cache->computed());
    j.cache->Append(j.entry->tokens);
    j.end = j.cache->length();
    j.out_row0 = entry_rows_.back();
    entry_rows_.push_back(j.out_row0 + j.end - j.first_new);
  }
  hidden_.resize(entry_rows_.back() * row);
  features_.resize(entry_rows_.back() * frow);
  const Tracer no_trace;

  // Rounds: each sequence with work left brings its next segment (a replay
  // after a deep Truncate, then its new tokens, cut at its rollback
  // checkpoints); one RunMain runs the concatenation of all of them.
  while (true) {
    segments_.clear();
    batch_tokens_.clear();
    for (const BatchJob& j : jobs) {
      const int64_t pos0 = j.cache->computed();
      if (pos0 >= j.end) continue;
      const int64_t seg_end = j.cache->SegmentEnd(pos0, j.end);
      segments_.push_back(Segment{.cache = j.cache,
                                  .row0 = static_cast<int64_t>(batch_tokens_.size()),
                                  .n = seg_end - pos0,
                                  .pos0 = pos0});
      const std::span<const int32_t> t = j.cache->tokens().subspan(pos0, seg_end - pos0);
      batch_tokens_.insert(batch_tokens_.end(), t.begin(), t.end());
    }
    if (segments_.empty()) break;
    RunMain(batch_tokens_, segments_, no_trace);
    KeepNewRows(jobs, row, frow);

    // ---- Head over the rows that need logits, gathered from all segments ----
    int64_t n_head = 0;
    for (const Segment& sg : segments_) {
      const BatchJob& j = *std::find_if(jobs.begin(), jobs.end(),
                                        [&](const BatchJob& jj) { return jj.cache == sg.cache; });
      const int64_t seg_end = sg.pos0 + sg.n;
      const int64_t b = j.entry->all_logits ? std::max(sg.pos0, j.first_new) : j.end - 1;
      if (b >= seg_end || b < sg.pos0) continue;
      n_head += seg_end - b;
    }
    if (static_cast<int64_t>(head_x_.size()) < n_head * row) head_x_.resize(n_head * row);
    if (static_cast<int64_t>(head_logits_.size()) < n_head * V) head_logits_.resize(n_head * V);
    int64_t at = 0;
    for (const Segment& sg : segments_) {
      const BatchJob& j = *std::find_if(jobs.begin(), jobs.end(),
                                        [&](const BatchJob& jj) { return jj.cache == sg.cache; });
      const int64_t seg_end = sg.pos0 + sg.n;
      const int64_t b = j.entry->all_logits ? std::max(sg.pos0, j.first_new) : j.end - 1;
      if (b >= seg_end || b < sg.pos0) continue;
      std::copy_n(x_.data() + (sg.row0 + b - sg.pos0) * row, (seg_end - b) * row,
                  head_x_.data() + at * row);
      at += seg_end - b;
    }
    if (n_head > 0) {
      Head(weights_.hc_head, weights_.norm, -1, head_x_.data(), n_head, head_logits_.data(),
           no_trace);
    }
    at = 0;
    for (const Segment& sg : segments_) {
      const BatchJob& j = *std::find_if(jobs.begin(), jobs.end(),
                                        [&](const BatchJob& jj) { return jj.cache == sg.cache; });
      const int64_t seg_end = sg.pos0 + sg.n;
      sg.cache->Computed(seg_end);
      const int64_t b = j.entry->all_logits ? std::max(sg.pos0, j.first_new) : j.end - 1;
      if (b >= seg_end || b < sg.pos0 || !front()) continue;
      float* dst = j.entry->logits.data() + (j.entry->all_logits ? (b - j.first_new) * V : 0);
      std::copy_n(head_logits_.data() + at * V, (seg_end - b) * V, dst);
      at += seg_end - b;
    }
  }
  return Status::Ok();
}

CacheStats DeepSeekV4Model::GetCacheStats(const SequenceCache& seq) const {
  const auto* cache = dynamic_cast<const DeepSeekV4Cache*>(&seq);
  CHECK(cache != nullptr && cache->owner() == this, "GetCacheStats: not this model's cache");
  return cache->stats();
}

int64_t DeepSeekV4Model::scratch_bytes() const {
  const AttentionScratch& a = attn_scratch_;
  size_t n = x_.capacity() + u_.capacity() + h_.capacity() + y_.capacity() + mix_.capacity() +
             pre_.capacity() + post_.capacity() + comb_.capacity() + mtp_tmp_.capacity() +
             mtp_act_.capacity() + hidden_.capacity() + mtp_hidden_.capacity() +
             head_x_.capacity() + head_logits_.capacity() + a.qr.capacity() + a.q.capacity() +
             a.kv.capacity() + a.o.capacity() + a.o_group.capacity() + a.z.capacity() +
             a.scores.capacity() + a.act.capacity() + a.compressor.kv.capacity() +
             a.compressor.score.capacity() + a.indexer.q.capacity() +
             a.indexer.head_weight.capacity() + a.indexer.scores.capacity() +
             a.indexer.act.capacity() + a.indexer.compressor.kv.capacity() +
             a.indexer.compressor.score.capacity();
  return static_cast<int64_t>(n * sizeof(float) + a.keys.capacity() * sizeof(const float*) +
                              a.top.capacity() * sizeof(int32_t)) +
         moe_scratch_.bytes();
}

std::span<const float> DeepSeekV4Model::last_hidden() const { return hidden_; }

std::span<const float> DeepSeekV4Model::last_hidden(int64_t entry) const {
  if (entry < 0 || entry + 1 >= static_cast<int64_t>(entry_rows_.size())) return {};
  const int64_t row = config_.hc_mult * config_.hidden_size;
  return std::span<const float>(hidden_).subspan(
      entry_rows_[entry] * row, (entry_rows_[entry + 1] - entry_rows_[entry]) * row);
}

std::span<const float> DeepSeekV4Model::last_features(int64_t entry) const {
  if (!has_dspark() || entry < 0 || entry + 1 >= static_cast<int64_t>(entry_rows_.size())) {
    return {};
  }
  const int64_t frow =
      static_cast<int64_t>(config_.dspark_target_layer_ids.size()) * config_.hidden_size;
  return std::span<const float>(features_).subspan(
      entry_rows_[entry] * frow, (entry_rows_[entry + 1] - entry_rows_[entry]) * frow);
}

std::span<const float> DeepSeekV4Model::last_mtp_hidden() const { return mtp_hidden_; }

std::unique_ptr<SequenceCache> DeepSeekV4Model::NewMtpCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > info_.max_context) max_tokens = info_.max_context;
  return std::make_unique<DeepSeekV4Cache>(this, config_, plans_, rollback_, max_tokens,
                                           LayerRole::kMtp);
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
                           std::to_string(main_hidden.size()) +
                           " floats, expected [T, C, D] = " + std::to_string(T * C * D));
  }
  const int64_t pos0 = cache->length();
  EnsureScratch(T);
  EnsureContextScratch(cache->max_tokens());
  if (static_cast<int64_t>(mtp_tmp_.size()) < T * C * D) mtp_tmp_.resize(T * C * D);
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  const MtpWeights& m = weights_.mtp[0];
  const LayerPlan& plan = plans_[c.num_hidden_layers];
  const int64_t l = plan.layer;
  float* x = x_.data();         // [T, C, D]
  float* u = u_.data();         // [T, D]
  float* e = y_.data();         // [T, D]
  float* hs = mtp_tmp_.data();  // [T, C, D]

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
  Linear(pool, e, LinearInput(pool, u, T, m.e_proj, numerics_, mtp_act_), m.e_proj, T);
  Linear(pool, x, LinearInput(pool, hs, T * C, m.h_proj, numerics_, mtp_act_), m.h_proj, T * C);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < C; ++s) {
      float* xs = x + (t * C + s) * D;
      for (int64_t d = 0; d < D; ++d) xs[d] += e[t * D + d];
    }
  }

  // ---- The MTP block and its own head collapse; shared LM head ----
  const Segment seg{.cache = cache, .row0 = 0, .n = T, .pos0 = pos0};
  RunBlock(plan, m.block, next_tokens, {&seg, 1}, trace);
  cache->Append(next_tokens);
  cache->Computed(cache->length());
  mtp_hidden_.assign(x, x + T * C * D);
  Head(m.hc_head, m.norm, l, x + (all_logits ? 0 : T - 1) * C * D, all_logits ? T : 1,
       logits.data(), trace);
  return Status::Ok();
}

Status DeepSeekV4Model::DSparkObserve(std::span<const float> features, SequenceCache& seq) {
  const DeepSeekV4Config& c = config_;
  if (!has_dspark()) {
    return Unimplemented(reader_->path() + ": the checkpoint has no DSpark module (mtp.*)",
                         "speculative decoding with DSpark needs a -DSpark / 0731 checkpoint");
  }
  const int64_t D = c.hidden_size;
  const int64_t frow = static_cast<int64_t>(c.dspark_target_layer_ids.size()) * D;
  if (features.empty() || static_cast<int64_t>(features.size()) % frow != 0) {
    return InvalidArgument(
        "DeepSeek-V4 DSparkObserve: features have " + std::to_string(features.size()) +
        " floats, expected a whole number of rows of nT·D = " + std::to_string(frow));
  }
  const int64_t n = static_cast<int64_t>(features.size()) / frow;
  auto* cache = dynamic_cast<DeepSeekV4Cache*>(&seq);
  if (cache == nullptr || cache->owner() != this || cache->role() != LayerRole::kMtp) {
    return InvalidArgument(
        "DeepSeek-V4 DSparkObserve: the cache was not made by this model's "
        "NewMtpCache");
  }
  if (cache->length() + n > cache->max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(cache->length() + n) +
                                 " draft positions > " + std::to_string(cache->max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  const DSparkWeights& d = *weights_.dspark;
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  const int64_t pos0 = cache->length();
  // ---- main_x = main_norm(main_proj · F) -> [n, D], one for every stage ----
  if (static_cast<int64_t>(dspark_x_.size()) < n * D) dspark_x_.resize(n * D);
  float* main_x = dspark_x_.data();
  Linear(pool, main_x, LinearInput(pool, features.data(), n, d.main_proj, numerics_, mtp_act_),
         d.main_proj, n);
  for (int64_t t = 0; t < n; ++t)
    RmsNorm(main_x + t * D, main_x + t * D, d.main_norm.data(), D, eps);
  trace("dspark.main_x", -1, main_x, {n, D});
  for (size_t s = 0; s < d.stages.size(); ++s) {
    const LayerPlan& plan = plans_[c.num_hidden_layers + s];
    const LayerContext ctx{.pool = pool,
                           .config = c,
                           .plan = plan,
                           .rope = rope_[plan.layer],
                           .numerics = numerics_,
                           .trace = trace};
    DSparkRingRows(ctx, d.stages[s].attn, main_x, n, pos0, cache->layer(s).ring, dspark_kv_,
                   mtp_act_);
  }
  // The cache counts positions; its ids are not used (the rings never replay).
  dspark_ids_.assign(n, 0);
  cache->Append(dspark_ids_);
  cache->Computed(cache->length());
  return Status::Ok();
}

Status DeepSeekV4Model::DSparkDraft(int32_t anchor, SequenceCache& seq, const DraftPick& pick,
                                    DSparkBlock& out, int64_t rows) {
  const DeepSeekV4Config& c = config_;
  if (!has_dspark()) {
    return Unimplemented(reader_->path() + ": the checkpoint has no DSpark module (mtp.*)",
                         "speculative decoding with DSpark needs a -DSpark / 0731 checkpoint");
  }
  auto* cache = dynamic_cast<DeepSeekV4Cache*>(&seq);
  if (cache == nullptr || cache->owner() != this || cache->role() != LayerRole::kMtp) {
    return InvalidArgument(
        "DeepSeek-V4 DSparkDraft: the cache was not made by this model's "
        "NewMtpCache");
  }
  if (cache->length() == 0) {
    return InvalidArgument("DeepSeek-V4 DSparkDraft: no committed position yet",
                           "DSparkObserve the prompt's target features first");
  }
  const int64_t V = c.vocab_size;
  if (anchor < 0 || anchor >= V) {
    return InvalidArgument("token id " + std::to_string(anchor) +
                           " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  const DSparkWeights& d = *weights_.dspark;
  const int64_t B = c.dspark_block_size, D = c.hidden_size, C = c.hc_mult;
  const int64_t p = cache->length() - 1;
  const Tracer trace(&trace_fn_, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  ThreadPool& pool = *pool_;
  EnsureScratch(B);
  EnsureContextScratch(cache->max_tokens());
  out.tokens.resize(B);
  out.logits.resize(B * V);
  out.markov_bias.resize(B * V);
  out.confidence.resize(B);

  // ---- Block input: [anchor, noise, ...] at positions p+1 .. p+B, C copies ----
  dspark_ids_.assign(B, c.dspark_noise_token_id);
  dspark_ids_[0] = anchor;
  float* x = x_.data();  // [B, C, D]
  float* u = u_.data();  // [B, D]
  for (int64_t j = 0; j < B; ++j) {
    DequantizeRow(weights_.embed.dtype, weights_.embed[dspark_ids_[j]].data, D, u + j * D);
    for (int64_t s = 0; s < C; ++s) std::copy_n(u + j * D, D, x + (j * C + s) * D);
  }
  trace("dspark.in", -1, x, {B, C, D});

  // ---- The stages: mHC blocks with DSpark attention and scored MoE ----
  for (size_t s = 0; s < d.stages.size(); ++s) {
    const LayerPlan& plan = plans_[c.num_hidden_layers + s];
    const DraftAttention draft{.p = p, .ring = &cache->layer(s).ring};
    RunBlock(plan, d.stages[s], dspark_ids_, {}, trace, &draft);
  }

  // ---- Head: y = hc_head(X) [B, D]; U = norm(y) · headᵀ [B, V] (the shared head) ----
  HcHead(pool, hc_, d.hc_head, x, B, HcMix{.mix = mix_.data(), .pre = pre_.data()}, u);
  trace("dspark.hc_head_out", -1, u, {B, D});
  dspark_y_.assign(u, u + B * D);
  float* h = h_.data();
  for (int64_t j = 0; j < B; ++j) RmsNorm(h + j * D, u + j * D, d.norm.data(), D, eps);
  trace("dspark.final_norm_out", -1, h, {B, D});
  ops::MatMul(pool, out.logits.data(), h, weights_.head, B);

  const int64_t n_rows = rows > 0 ? std::min(rows, B) : B;
  return DSparkMarkovLoop(pool, d, anchor, n_rows, D, V, dspark_y_.data(), dspark_e_, pick, out,
                          "DeepSeek-V4");
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

Status DeepSeekV4Model::StreamExperts(int64_t budget_bytes, bool read_ahead) {
  expert_cache_.reset();
  expert_read_ahead_ = read_ahead;
  if (budget_bytes <= 0) return Status::Ok();
  std::vector<const MoeWeights*> layers;
  for (const LayerWeights& lw : weights_.layers) layers.push_back(&lw.moe);
  ASSIGN_OR_RETURN(expert_cache_,
                   ExpertCache::Make(layers, budget_bytes, config_.num_experts_per_tok));
  return Status::Ok();
}

int64_t DeepSeekV4Model::routed_expert_bytes() const { return RoutedExpertBytes(weights_); }

namespace deepseek_v4 {

std::vector<RopeFrequencies> LayerRopes(const DeepSeekV4Config& c,
                                        const std::vector<LayerPlan>& plans) {
  std::vector<RopeFrequencies> rope;
  for (const LayerPlan& p : plans) {
    rope.emplace_back(c.qk_rope_head_dim, p.rope_theta, p.rope_yarn ? &c.rope_scaling : nullptr);
  }
  return rope;
}

HcParams MakeHcParams(const DeepSeekV4Config& c) {
  return HcParams{.streams = c.hc_mult,
                  .hidden = c.hidden_size,
                  .sinkhorn_iters = c.hc_sinkhorn_iters,
                  .hc_eps = static_cast<float>(c.hc_eps),
                  .norm_eps = static_cast<float>(c.rms_norm_eps)};
}

ModelInfo MakeModelInfo(const DeepSeekV4Config& c, const std::vector<LayerPlan>& plans,
                        std::string architecture, int64_t max_context) {
  int64_t n_params = 0;
  ForEachWeight(c, plans, [&](const WeightDecl& d) {
    if (d.mtp) return;
    int64_t n = 1;
    for (int64_t s : d.shape) n *= s;
    n_params += n;
  });
  return ModelInfo{.architecture = std::move(architecture),
                   .vocab_size = c.vocab_size,
                   .max_context = max_context > 0 ? std::min(max_context, c.max_position_embeddings)
                                                  : c.max_position_embeddings,
                   .n_params = n_params,
                   .bos_id = c.bos_token_id,
                   .eos_id = c.eos_token_id};
}

Status CheckExpertShard(const ExpertShard& shard, const char* name, int64_t E, bool streamed) {
  if (shard.ranks < 1 || shard.rank < 0 || shard.rank >= shard.ranks ||
      (shard.ranks > 1 && shard.link == nullptr)) {
    return InvalidArgument(std::string(name) + " expert shard: rank " + std::to_string(shard.rank) +
                           " of " + std::to_string(shard.ranks) + " without a link");
  }
  if (shard.ranks > E) {
    return InvalidArgument(std::to_string(shard.ranks) + " ranks but the model has only " +
                               std::to_string(E) + " routed experts per layer to split",
                           "start at most as many processes as there are experts (mpirun -n)");
  }
  if (streamed) {
    return Unimplemented(
        "--parallel expert with routed experts streamed (--ram-budget) is not offered",
        "pass --ram-budget off");
  }
  return Status::Ok();
}

int64_t RoutedExpertBytes(const ModelWeights& weights) {
  int64_t n = 0;
  for (const LayerWeights& lw : weights.layers) {
    for (const ExpertWeights& e : lw.moe.experts) {
      for (const LinearWeight* w : {&e.w1, &e.w3, &e.w2}) {
        n += w->weight.nbytes() + (w->scale.data != nullptr ? w->scale.nbytes() : 0);
      }
    }
  }
  return n;
}

}  // namespace deepseek_v4

Result<std::unique_ptr<Model>> LoadDeepSeekV4Gguf(std::vector<std::unique_ptr<GgufFile>> parts,
                                                  const deepseek_v4::LoadOptions& options,
                                                  std::unique_ptr<GgufFile> draft_file) {
  using deepseek_v4::DeepSeekV4Config;
  if (parts.empty()) return InvalidArgument("LoadDeepSeekV4Gguf: no file given");
  ASSIGN_OR_RETURN(DeepSeekV4Config config,
                   draft_file ? DeepSeekV4Config::FromGguf(*parts.front(), *draft_file)
                              : DeepSeekV4Config::FromGguf(*parts.front()));
  RETURN_IF_ERROR(config.CheckForwardSupported().WithContext(parts.front()->path()));
  // The MXFP4 experts as stored (q8_0 activations, llama.cpp's arithmetic),
  // or, with f32 activations (--kquant-activations f32), repacked for the FP4
  // kernels' exact products.
  const auto layout = ops::GetKQuantActivations() == ops::KQuantActivations::kF32
                          ? deepseek_v4::Mxfp4Layout::kFp4
                          : deepseek_v4::Mxfp4Layout::kNative;
  ASSIGN_OR_RETURN(auto reader,
                   deepseek_v4::GgufDeepSeekV4Reader::Create(std::move(parts), layout));
  if (draft_file) {
    RETURN_IF_ERROR(reader->AddDraftFile(std::move(draft_file), config.num_hidden_layers, layout));
  }
  std::shared_ptr<const CheckpointReader> shared(std::move(reader));
  ASSIGN_OR_RETURN(auto model, DeepSeekV4Model::Load(shared, config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace dsv4
