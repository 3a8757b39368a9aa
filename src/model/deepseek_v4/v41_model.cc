// DeepSeek-V4.1 forward pass; see v41_model.h.
#include "model/deepseek_v4/v41_model.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/work_counts.h"
#include "ops/matmul.h"
#include "tensor/dtype.h"

namespace dsv4::deepseek_v4 {

// ---------------------------------------------------------------------------
// DeepSeekV41Cache
// ---------------------------------------------------------------------------

DeepSeekV41Cache::DeepSeekV41Cache(const void* owner, const DeepSeekV4Config& c,
                                   std::span<const LayerPlan> plans, int64_t history,
                                   int64_t max_tokens)
    : owner_(owner), max_tokens_(max_tokens), vocab_size_(c.vocab_size) {
  for (const LayerPlan& p : plans) {
    if (p.role != LayerRole::kMain) continue;
    plans_.push_back(p);
    layers_.emplace_back();
    layers_.back().Init(c, p, history);
  }
  tokens_.reserve(max_tokens);
}

void DeepSeekV41Cache::Computed(int64_t n, int64_t key_slot) {
  computed_ = n;
  key_slot_ = key_slot;
  while (!slot_log_.empty() && slot_log_.back().first >= n) slot_log_.pop_back();
  slot_log_.emplace_back(n, key_slot);
}

int64_t DeepSeekV41Cache::SlotAfterSteps(int64_t n) const {
  for (int64_t m = n; m >= 1; --m) {
    for (auto it = plans_.rbegin(); it != plans_.rend(); ++it) {
      if (it->csa2.owns_index_keys && m % it->compress_ratio == 0) return it->layer;
    }
  }
  return -1;
}

int64_t DeepSeekV41Cache::KeepablePrefix(int64_t n) const {
  n = std::min(n, computed_);
  for (const Csa2LayerState& l : layers_) {
    if (!l.CanTruncate(n)) return 0;
  }
  return n;
}

void DeepSeekV41Cache::Truncate(int64_t n) {
  CHECK(n >= 0 && n <= length(), "truncate to %lld of %lld tokens", static_cast<long long>(n),
        static_cast<long long>(length()));
  tokens_.resize(n);
  if (engram_) engram_->Truncate(std::min(n, engram_->size()));
  if (n == 0 || KeepablePrefix(n) < n) {
    for (Csa2LayerState& l : layers_) l.Reset();
    computed_ = 0;
    key_slot_ = -1;
    slot_log_.clear();
    return;
  }
  for (Csa2LayerState& l : layers_) l.Truncate(n);
  computed_ = n;
  while (!slot_log_.empty() && slot_log_.back().first > n) slot_log_.pop_back();
  key_slot_ = !slot_log_.empty() && slot_log_.back().first == n ? slot_log_.back().second
                                                                : SlotAfterSteps(n);
}

namespace {
constexpr uint32_t kV41StateTag = 0x31344356;  // "VC41"
}  // namespace

Status DeepSeekV41Cache::SaveState(std::vector<uint8_t>& out) const {
  ByteWriter w(out);
  w.Put(kV41StateTag);
  w.Put(static_cast<int64_t>(layers_.size()));
  w.Put(length());
  w.Put(computed_);
  w.Put(key_slot_);
  w.PutBytes(tokens_.data(), tokens_.size() * sizeof(int32_t));
  w.Put(static_cast<int64_t>(slot_log_.size()));
  for (const auto& [end, slot] : slot_log_) {
    w.Put(end);
    w.Put(slot);
  }
  for (const Csa2LayerState& l : layers_) l.Write(w);
  return Status::Ok();
}

Status DeepSeekV41Cache::LoadState(std::span<const uint8_t> bytes) {
  Truncate(0);
  ByteReader r(bytes);
  uint32_t tag = 0;
  int64_t n_layers = 0, length = 0, computed = 0, slot = -1, n_log = 0;
  if (!r.Get(tag) || !r.Get(n_layers) || !r.Get(length) || !r.Get(computed) || !r.Get(slot)) {
    return DataLoss("DeepSeek-V4.1 cache state: truncated header");
  }
  if (tag != kV41StateTag || n_layers != static_cast<int64_t>(layers_.size())) {
    return InvalidArgument("DeepSeek-V4.1 cache state: another cache layout (" +
                           std::to_string(n_layers) + " layers, expected " +
                           std::to_string(layers_.size()) + ")");
  }
  if (length < 0 || computed < 0 || computed > length) {
    return DataLoss("DeepSeek-V4.1 cache state: bad lengths");
  }
  if (length > max_tokens_) {
    return OutOfRange("DeepSeek-V4.1 cache state of " + std::to_string(length) +
                      " tokens; this cache holds " + std::to_string(max_tokens_));
  }
  std::vector<int32_t> tokens;
  if (!r.GetArray(static_cast<uint64_t>(length), tokens) || !r.Get(n_log) || n_log < 0 ||
      n_log > length + 1) {
    return DataLoss("DeepSeek-V4.1 cache state: truncated token ids or slot log");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size_) return DataLoss("DeepSeek-V4.1 cache state: bad token id");
  }
  std::vector<std::pair<int64_t, int64_t>> log(n_log);
  for (auto& [end, s] : log) {
    if (!r.Get(end) || !r.Get(s)) return DataLoss("DeepSeek-V4.1 cache state: truncated slot log");
  }
  for (Csa2LayerState& l : layers_) {
    if (!l.Read(r)) {
      for (Csa2LayerState& x : layers_) x.Reset();
      return DataLoss("DeepSeek-V4.1 cache state: a layer's stores do not fit this cache");
    }
  }
  if (r.left() != 0) {
    for (Csa2LayerState& x : layers_) x.Reset();
    return DataLoss("DeepSeek-V4.1 cache state: trailing bytes");
  }
  tokens_ = std::move(tokens);
  tokens_.reserve(max_tokens_);
  computed_ = computed;
  key_slot_ = slot;
  slot_log_ = std::move(log);
  if (engram_) {  // the n-gram history is the computed tokens' compressed ids
    std::vector<int64_t> ids(computed * engram_->hasher().layout().n_layers() *
                             engram_->hasher().layout().n_cols());
    engram_->Truncate(0);
    engram_->Append(std::span<const int32_t>(tokens_).first(computed), {}, ids.data());
  }
  return Status::Ok();
}

int64_t DeepSeekV41Cache::allocated_bytes() const {
  int64_t b = static_cast<int64_t>(tokens_.capacity() * sizeof(int32_t));
  for (const Csa2LayerState& l : layers_) b += l.allocated_bytes();
  return b;
}

// ---------------------------------------------------------------------------
// DeepSeekV41Model
// ---------------------------------------------------------------------------

Result<std::unique_ptr<DeepSeekV41Model>> DeepSeekV41Model::Load(
    std::shared_ptr<const CheckpointReader> reader, const DeepSeekV4Config& c,
    const LoadOptions& options) {
  RETURN_IF_ERROR(c.Validate().WithContext(reader->path()));
  if (!c.v41()) {
    return InvalidArgument(
        reader->path() + ": model_type \"" + c.model_type + "\" is not DeepSeek-V4.1",
        "load it as a DeepSeek-V4 model");
  }
  NumericsOptions numerics = options.numerics.value_or(DefaultNumerics(c.qat_simulation));
  numerics.act_block = 32;
  numerics.o_bf16 = false;
  const std::string off_hint =
      "set \"qat_simulation\": false in config.json (the model was not trained with the "
      "reference's roundings)";
  std::vector<int64_t> widths;  // what each rounding splits into blocks of 32
  if (numerics.act_quant && (c.dense_fp8() || c.expert_dtype != ExpertDType::kDefault)) {
    widths = {c.hidden_size, c.q_lora_rank, c.o_groups * c.o_lora_rank, c.moe_intermediate_size};
  }
  if (numerics.kv_quant) widths.push_back(c.head_dim);
  if (numerics.index_quant) widths.push_back(c.index_head_dim);
  {
    for (int64_t k : widths) {
      if (k % 32 != 0) {
        return InvalidArgument(reader->path() +
                                   ": the QAT roundings of DeepSeek-V4.1 need widths that are "
                                   "multiples of 32, found " +
                                   std::to_string(k),
                               off_hint);
      }
    }
  }
  std::unique_ptr<DeepSeekV41Model> m(new DeepSeekV41Model());
  m->config_ = c;
  m->plans_ = BuildLayerPlans(c);
  m->numerics_ = numerics;
  m->reading_ = options.index_key_reading;
  m->history_ = options.rollback.horizon >= 0 ? options.rollback.horizon : 16;
  m->reader_ = reader;
  ASSIGN_OR_RETURN(m->weights_, BindWeights(*reader, c, m->plans_));
  if (!c.engram_layer_ids.empty()) {
    EngramParams ep;
    for (int64_t l : c.engram_layer_ids) ep.layer_ids.push_back(static_cast<int32_t>(l));
    ep.num_embeddings = c.engram_num_embeddings;
    ep.max_ngram_size = static_cast<int32_t>(c.engram_max_ngram_size);
    ep.vocab_size = c.engram_vocab_size;
    ep.n_heads = static_cast<int32_t>(c.engram_n_heads);
    ep.head_dim = static_cast<int32_t>(c.engram_head_dim);
    ep.pad_id = c.engram_pad_id;
    ep.compressed_vocab_size = c.engram_compressed_vocab_size;
    Result<EngramLayout> made = MakeEngramLayout(ep);
    if (!made.ok()) return made.status().WithContext(reader->path());
    const EngramLayout layout = std::move(made).value();
    if (options.engram_token_map.empty()) {
      return InvalidArgument(
          reader->path() + ": the Engram layers need the tokenizer's compressed token map",
          "load the model with its tokenizer (tokenizer.json beside it)");
    }
    Result<EngramHasher> hasher =
        EngramHasher::Make(layout, options.engram_token_map, options.engram_token_count);
    if (!hasher.ok()) return hasher.status().WithContext(reader->path());
    m->engram_ = std::move(hasher).value();
    for (const LayerPlan& p : m->plans_) {
      if (p.engram < 0) continue;
      RETURN_IF_ERROR(CheckEngramWeights(m->weights_.layers[p.layer].engram, layout,
                                         static_cast<int32_t>(p.engram), c.hc_mult, c.hidden_size,
                                         p.prefix + "engram.")
                          .WithContext(reader->path()));
    }
  }
  m->rope_ = LayerRopes(c, m->plans_);
  m->hc_ = MakeHcParams(c);
  m->info_ = MakeModelInfo(c, m->plans_, "deepseek_v41", options.max_context);
  m->draft_config_ = c;
  m->draft_config_.n_routed_experts = c.draft_routed_experts();
  m->draft_config_.num_experts_per_tok = c.draft_experts_per_tok();
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  return m;
}

void DeepSeekV41Model::SetThreads(int n_threads) {
  pool_ = std::make_unique<ThreadPool>(std::max(1, n_threads));
}

std::unique_ptr<SequenceCache> DeepSeekV41Model::NewCache(int64_t max_tokens) const {
  if (max_tokens <= 0) max_tokens = info_.max_context;
  auto cache = std::make_unique<DeepSeekV41Cache>(this, config_, plans_, history_, max_tokens);
  if (!config_.engram_layer_ids.empty()) cache->engram().emplace(engram_);
  return cache;
}

Status DeepSeekV41Model::StreamExperts(int64_t budget_bytes) {
  expert_cache_.reset();
  if (budget_bytes <= 0) return Status::Ok();
  std::vector<const MoeWeights*> layers;
  for (const LayerWeights& lw : weights_.layers) layers.push_back(&lw.moe);
  ASSIGN_OR_RETURN(expert_cache_,
                   ExpertCache::Make(layers, budget_bytes, config_.num_experts_per_tok));
  return Status::Ok();
}

int64_t DeepSeekV41Model::routed_expert_bytes() const { return RoutedExpertBytes(weights_); }

int64_t DeepSeekV41Model::engram_table_bytes() const {
  int64_t n = 0;
  for (const LayerWeights& lw : weights_.layers) {
    if (lw.engram.embed.data == nullptr) continue;
    n += lw.engram.embed.nbytes() +
         (lw.engram.embed_scale.data != nullptr ? lw.engram.embed_scale.nbytes() : 0);
  }
  return n;
}

std::optional<WeightWork> DeepSeekV41Model::weight_work_per_token() const {
  // The Engram tables are read a few rows a token: counted as those rows.
  std::vector<TensorInfo> tensors;
  for (const TensorInfo& t : reader_->tensors()) {
    if (t.name.find(".engram.embed.") == std::string::npos) tensors.push_back(t);
  }
  WeightWork w =
      CountWeightWork(tensors, config_.n_routed_experts, config_.num_experts_per_tok, numerics_);
  w.bytes += engram_.layout().n_layers() * engram_.layout().BytesPerTokenPerLayer();
  return w;
}

Status DeepSeekV41Model::Forward(std::span<const int32_t> tokens, SequenceCache& seq,
                                 std::span<float> logits, bool all_logits) {
  auto* cache = static_cast<DeepSeekV41Cache*>(&seq);
  if (cache->owner() != this) {
    return InvalidArgument("DeepSeek-V4.1 Forward: the cache was made by another model",
                           "use this model's NewCache");
  }
  const int64_t T = static_cast<int64_t>(tokens.size()), V = config_.vocab_size;
  if (T == 0) return InvalidArgument("DeepSeek-V4.1 Forward: no tokens");
  if (cache->length() + T > cache->max_tokens()) {
    return OutOfRange("DeepSeek-V4.1 context full: " + std::to_string(cache->length()) + " + " +
                          std::to_string(T) + " tokens > " + std::to_string(cache->max_tokens()),
                      "start a new sequence or raise the context size");
  }
  if (front_ && static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * V) {
    return InvalidArgument("DeepSeek-V4.1 Forward: logits buffer too small");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= V) {
      return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary [0, " +
                             std::to_string(V) + ")");
    }
  }
  // After a truncation the stores could not keep: re-run the kept tokens first.
  if (cache->computed() < cache->length()) {
    std::vector<int32_t> replay(cache->tokens().begin() + cache->computed(), cache->tokens().end());
    Run(replay, cache->computed(), *cache, static_cast<int64_t>(replay.size()), nullptr);
  }
  cache->Append(tokens);
  Run(tokens, cache->length() - T, *cache, all_logits ? 0 : T - 1,
      front_ ? logits.data() : nullptr);
  KeepFeatures(T);
  return Status::Ok();
}

Status DeepSeekV41Model::SetPipelineStage(const PipelineStage& stage) {
  if (stage.first_layer != 0 || stage.end_layer != config_.num_hidden_layers) {
    return Unimplemented(
        "DeepSeek-V4.1 cannot be split by layers: its later layers read the compressed caches "
        "and index keys of earlier source layers (CSA2)",
        "use --parallel expert");
  }
  front_ = stage.front;
  return Status::Ok();
}

Status DeepSeekV41Model::SetExpertShard(const ExpertShard& shard) {
  RETURN_IF_ERROR(
      CheckExpertShard(shard, "DeepSeek-V4.1", config_.n_routed_experts, expert_cache_ != nullptr));
  shard_ = shard;
  return Status::Ok();
}

void DeepSeekV41Model::Run(std::span<const int32_t> tokens, int64_t pos0, DeepSeekV41Cache& cache,
                           int64_t first_logit, float* logits) {
  const DeepSeekV4Config& c = config_;
  const ModelWeights& w = weights_;
  ThreadPool& pool = *pool_;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.hidden_size, C = c.hc_mult;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tracer trace(trace_fn_ ? &trace_fn_ : nullptr, c.num_hidden_layers);
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(x_, T * C * D);
  grow(u_, T * D);
  grow(h_, T * D);
  grow(y_, T * D);
  grow(mix_, T * c.hc_mix_dim());
  for (auto* v : {&pre_a_, &post_a_, &pre_f_, &post_f_, &pre_mix_}) grow(*v, T * C);
  grow(comb_a_, T * C * C);
  grow(comb_f_, T * C * C);
  moe_scratch_.Reserve(c, T);
  float* x = x_.data();
  float* u = u_.data();
  float* hn = h_.data();
  float* y = y_.data();

  // ---- embedding, C copies; the first collapse takes copy 0 ----
  for (int64_t t = 0; t < T; ++t) {
    DequantizeRow(w.embed.dtype, w.embed[tokens[t]].data, D, u + t * D);
    for (int64_t s = 0; s < C; ++s) std::copy_n(u + t * D, D, x + (t * C + s) * D);
    for (int64_t s = 0; s < C; ++s) pre_mix_[t * C + s] = s == 0 ? 1.0f : 0.0f;
  }
  trace("embed", -1, u, {T, D});

  // ---- Engram hash ids of the call's positions ----
  const int64_t n_eng = engram_.layout().n_layers(), n_cols = engram_.layout().n_cols();
  if (n_eng > 0) {
    hashes_.resize(T * n_eng * n_cols);
    EngramSequence& es = *cache.engram();
    es.Truncate(pos0);
    es.Append(tokens, {}, hashes_.data());
  }

  shared_.key_slot = cache.key_slot();
  std::span<Csa2LayerState> states = cache.layers();
  for (const LayerPlan& plan : plans_) {
    if (plan.role != LayerRole::kMain) continue;
    const int64_t l = plan.layer;
    const LayerWeights& lw = w.layers[l];
    const LayerContext ctx{.pool = pool,
                           .config = c,
                           .plan = plan,
                           .rope = rope_[l],
                           .numerics = numerics_,
                           .trace = trace,
                           .expert_cache = expert_cache_.get(),
                           .expert_shard = shard_ ? &*shard_ : nullptr};
    if (plan.engram >= 0) {
      EngramReadStats stats;
      EngramForward(pool, x, hashes_.data() + plan.engram * n_cols, n_eng * n_cols, nullptr, T,
                    lw.engram, engram_.layout(), C, D, eps, numerics_.act_quant, engram_scratch_,
                    &stats);
      engram_reads_.rows += stats.rows;
      engram_reads_.bytes += stats.bytes;
      trace("engram_out", l, x, {T, C, D});
    }
    CaptureFeatures(l, x, T);
    // attention: its own mixes, the collapse by the previous sublayer's pre
    HcSiteCoefficients(pool, hc_, lw.hc_attn, x, T,
                       HcMix{.mix = mix_.data(),
                             .pre = pre_a_.data(),
                             .post = post_a_.data(),
                             .comb = comb_a_.data()});
    HcCollapse(pool, hc_, x, pre_mix_.data(), T, u);
    for (int64_t t = 0; t < T; ++t) RmsNorm(hn + t * D, u + t * D, lw.attn_norm.data(), D, eps);
    Csa2Attention(ctx, lw.attn, hn, T, pos0, states, shared_, reading_, attn_scratch_, y);
    trace("attn_out", l, y, {T, D});
    HcExpand(pool, hc_, x, y, post_a_.data(), comb_a_.data(), T);
    // FFN: collapse by the attention's pre
    HcSiteCoefficients(pool, hc_, lw.hc_ffn, x, T,
                       HcMix{.mix = mix_.data(),
                             .pre = pre_f_.data(),
                             .post = post_f_.data(),
                             .comb = comb_f_.data()});
    HcCollapse(pool, hc_, x, pre_a_.data(), T, u);
    for (int64_t t = 0; t < T; ++t) RmsNorm(hn + t * D, u + t * D, lw.ffn_norm.data(), D, eps);
    MoeForward(ctx, lw.moe, hn, tokens, moe_scratch_, y);
    trace("ffn_out", l, y, {T, D});
    HcExpand(pool, hc_, x, y, post_f_.data(), comb_f_.data(), T);
    std::copy_n(pre_f_.data(), T * C, pre_mix_.data());
    trace("out", l, x, {T, C, D});
    trace("pre_mix", l, pre_mix_.data(), {T, C});
  }
  cache.Computed(pos0 + T, shared_.key_slot);

  // ---- head: the last FFN's pre collapses the streams ----
  if (logits == nullptr || first_logit >= T) return;
  const int64_t n = T - first_logit;
  HcCollapse(pool, hc_, x + first_logit * C * D, pre_mix_.data() + first_logit * C, n, u);
  for (int64_t t = 0; t < n; ++t) RmsNorm(hn + t * D, u + t * D, w.norm.data(), D, eps);
  ops::MatMul(pool, logits, hn, w.head, n);
}

}  // namespace dsv4::deepseek_v4

namespace dsv4 {

Result<std::unique_ptr<Model>> LoadDeepSeekV41(const std::string& dir,
                                               const deepseek_v4::LoadOptions& options) {
  using deepseek_v4::DeepSeekV4Config;
  ASSIGN_OR_RETURN(DeepSeekV4Config config, DeepSeekV4Config::FromFile(dir + "/config.json"));
  ASSIGN_OR_RETURN(auto reader, OpenCheckpointDir(dir));
  std::shared_ptr<const CheckpointReader> shared(std::move(reader));
  ASSIGN_OR_RETURN(auto model, deepseek_v4::DeepSeekV41Model::Load(shared, config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace dsv4
