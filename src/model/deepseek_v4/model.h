// DeepSeekV4Model: the DeepSeek-V4 forward pass behind the engine's Model
// interface (model/model.h) — the clear reference path, its matmuls and dot
// products through ops/. It reads like the paper, top to bottom:
//
//   X = expand(Embed(tokens))                 // [T, C, D], C identical copies
//   for each layer:                           // plan.h decides the kinds
//     X = mHC(X, Attention(attn_norm(·)))     // hyper_connection.h, attention.h
//     X = mHC(X, MoE(ffn_norm(·), tokens))    // moe.h
//   logits = head · norm(HcHead(X))           // fp32
//
// Layer kinds: sliding window, CSA (compressed + lightning indexer) and HCA
// (compressed). The MTP layer (speculative decoding) runs through ForwardMtp.
// Caches (cache.h) hold what each layer's CacheSpec says, by absolute
// position, so SequenceCache::Truncate(n) is exact for every n.
//
// Dimensions: T tokens in a call, D hidden, C hc_mult, V vocab, W window,
// A head_dim, L layers.
#ifndef DSV4_MODEL_DEEPSEEK_V4_MODEL_H_
#define DSV4_MODEL_DEEPSEEK_V4_MODEL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/csa2.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/hyper_connection.h"
#include "model/deepseek_v4/moe.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/sequence_cache.h"
#include "model/deepseek_v4/weights.h"
#include "model/draft.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

struct LoadOptions {
  // The QAT simulations (spec §9.2). Unset: the config decides
  // (DeepSeekV4Config::qat_simulation — on for the official FP8 releases).
  std::optional<NumericsOptions> numerics;
  // Overrides NumericsOptions::o_bf16 alone (the CLI's --wo-a-input).
  std::optional<bool> o_bf16;
  int threads = 1;
  int64_t max_context = 0;   // 0: max_position_embeddings
  RollbackOptions rollback;  // how Truncate stays exact (cache.h)
  // DeepSeek-V4.1: which index keys an index source scores (csa2.h).
  IndexKeyReading index_key_reading = IndexKeyReading::kReference;
  // DeepSeek-V4.1 Engram: token id → compressed id over the tokenizer's
  // vocabulary and the number of compressed ids (tokenizer/token_map.h; the
  // engine builds it). Empty: a model with Engram layers does not load.
  std::vector<int32_t> engram_token_map;
  int32_t engram_token_count = 0;
};

// What DeepSeek-V4 and V4.1 models derive alike from their config at load:
// each layer's RoPE (plan.rope_theta, YaRN on compressed layers), the mHC
// parameters, the ModelInfo the engine sees (parameters of the main layers,
// the context LoadOptions::max_context allows), and the bytes of the routed
// experts (what --ram-budget streams).
std::vector<RopeFrequencies> LayerRopes(const DeepSeekV4Config& c,
                                        const std::vector<LayerPlan>& plans);
HcParams MakeHcParams(const DeepSeekV4Config& c);
ModelInfo MakeModelInfo(const DeepSeekV4Config& c, const std::vector<LayerPlan>& plans,
                        std::string architecture, int64_t max_context);
int64_t RoutedExpertBytes(const ModelWeights& w);
// Whether `shard` fits a model (`name`, E routed experts per layer): a rank in
// range with a link, at most E ranks, and no expert streaming (`streamed`).
Status CheckExpertShard(const ExpertShard& shard, const char* name, int64_t E, bool streamed);

class DeepSeekV4Model final : public Model, public DraftModel {
 public:
  // Validates the config (and that the forward supports it), builds the layer
  // plans and binds every weight from `reader`, reporting all problems at once.
  static Result<std::unique_ptr<DeepSeekV4Model>> Load(
      std::shared_ptr<const CheckpointReader> reader, const DeepSeekV4Config& config,
      const LoadOptions& options = {});

  const ModelInfo& info() const override { return info_; }
  const DeepSeekV4Config& config() const { return config_; }
  const std::vector<LayerPlan>& plans() const { return plans_; }
  const ModelWeights& weights() const { return weights_; }
  const NumericsOptions& numerics() const { return numerics_; }
  const RollbackOptions& rollback() const { return rollback_; }
  // The checkpoint the weights are mapped from (its tensor list: dsv4 bench).
  const CheckpointReader& checkpoint() const { return *reader_; }

  // A cache for up to max_tokens tokens (≤ 0: max_context), its stores
  // reserved for that length. Truncate(n) is exact for every n (cache.h).
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override;
  // Runs tokens at positions cache.length() ..; logits [T, V] or [V] (last token).
  // After a Truncate past the rollback horizon it first re-runs the dropped
  // part of the sequence from the last checkpoint (no logits for those).
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override;
  // Several sequences in one pass (continuous batching): their tokens are
  // concatenated into one [N, ...] activation matrix, so every linear layer,
  // routed expert (tokens grouped by expert over the whole batch), shared
  // expert and the LM head reads its weights once per step; attention,
  // compressors and indexers run per sequence on its own cache. Equal to
  // Forward on each entry (up to fp32 summation order in the kernels).
  // Every entry is validated before any runs (distinct caches of this model,
  // room, token ids, logits sizes); on an error no cache has changed. Not
  // traced (SetTrace). Keeps every entry's new rows for the draft head:
  // last_hidden(i) / last_features(i) are entry i's.
  Status ForwardBatch(std::span<const BatchEntry> entries) override;
  // Replays, checkpoints and bytes of a cache made by this model.
  CacheStats GetCacheStats(const SequenceCache& cache) const;
  // Bytes of the per-call scratch sized so far (activations of the longest call).
  int64_t scratch_bytes() const;
  void SetThreads(int n_threads) override;

  // ---- Model capabilities (model/model.h) ----
  // The expert mask and freeze on the scored routers of the main layers
  // (runtime_options.cc; model/runtime_options.h says what is refused).
  // Default options drop them: the checkpoint's routing again.
  Status ApplyRuntimeOptions(const RuntimeOptions& options) override;
  const ScoredRouterOptions* router_options() const {
    return router_options_ ? &*router_options_ : nullptr;
  }
  // The MTP layer drafts (mtp_draft.cc); null without MTP weights.
  DraftModel* draft_model() override { return has_mtp() || has_dspark() ? this : nullptr; }
  std::string_view draft_kind() const override { return has_dspark() ? "dspark" : "mtp"; }
  int64_t max_drafts() const override { return has_dspark() ? config_.dspark_block_size : 0; }
  std::unique_ptr<DraftSession> NewDraftSession(int64_t max_tokens) override;
  // From the checkpoint's tensor list (work_counts.cc).
  std::optional<WeightWork> weight_work_per_token() const override;
  int64_t routed_experts_run() const override { return moe_scratch_.experts_run; }
  // Routing and indexer counts (model/model.h UsageStats), per layer with a
  // router: main layers, then the draft's.
  Status EnableUsageStats(bool on) override;
  std::optional<UsageStats> usage_stats() const override { return usage_; }
  // Pipeline parallel (model/model.h PipelineStage): RunMain runs the stage's
  // layers only, the residual streams (and DSpark features) coming from and
  // going to the link; only the front embeds and makes logits.
  int64_t pipeline_layers() const override { return config_.num_hidden_layers; }
  Status SetPipelineStage(const PipelineStage& stage) override;
  // Expert parallel (model/model.h ExpertShard): the main layers' MoE runs
  // this rank's routed experts and gathers the others' outputs (moe.cc).
  // Errors: a bad rank, more ranks than experts, streamed experts.
  Status SetExpertShard(const ExpertShard& shard) override;

  // ---- Expert streaming (expert_cache.h; --ram-budget) ----
  // Streams the main layers' routed experts from the checkpoint through a
  // cache of `budget_bytes` (replacing an earlier one); 0 turns streaming off
  // (the mapped weights again). `read_ahead`: each layer reads ahead the
  // experts the next one will likely pick (ExpertCache::ReadAhead). Errors:
  // ExpertCache::Make's.
  Status StreamExperts(int64_t budget_bytes, bool read_ahead = false);
  const ExpertCache* expert_cache() const { return expert_cache_.get(); }
  std::optional<ExpertStreamStats> expert_stream_stats() const override {
    if (!expert_cache_) return std::nullopt;
    return expert_cache_->stats();
  }
  // The main layers' routed experts' bytes as stored.
  int64_t routed_expert_bytes() const;

  // ---- Multi-token prediction (spec §6.3; speculative decoding) ----
  // The main model's final residual streams [T, C, D] of the last Forward
  // call's T tokens (before the HC head): the MTP input. After a ForwardBatch,
  // the new tokens of all its entries, in entry order.
  std::span<const float> last_hidden() const;
  // Those of entry `entry` of the last ForwardBatch ([T_entry, C, D]; entry 0
  // after a Forward); empty for an entry that does not exist.
  std::span<const float> last_hidden(int64_t entry) const;
  // The MTP block's output streams [T, C, D] of the last ForwardMtp call
  // (before its HC head): the "hidden state" a chain of drafts feeds back.
  std::span<const float> last_mtp_hidden() const;
  bool has_mtp() const { return !weights_.mtp.empty(); }
  // A cache for the first MTP layer (its own window; keeps every row, so any
  // Truncate is in place).
  std::unique_ptr<SequenceCache> NewMtpCache(int64_t max_tokens) const;
  // Draft logits of the first MTP layer for T positions: row t predicts the
  // token after next_tokens[t], from next_tokens[t] (the token that followed
  // main position t) and main_hidden[t] ([T, C, D], e.g. last_hidden()).
  // Positions continue from mtp_cache.length(). Errors: no MTP weights, wrong
  // sizes, bad ids, full cache.
  Status ForwardMtp(std::span<const int32_t> next_tokens, std::span<const float> main_hidden,
                    SequenceCache& mtp_cache, std::span<float> logits, bool all_logits);

  // ---- DSpark (spec §13; speculative decoding) ----
  bool has_dspark() const { return weights_.dspark.has_value(); }
  // The target features [T, nT·D] of the last Forward call's T tokens: per
  // token, the mean over the C streams of each target layer's output,
  // concatenated in layer order (spec §13.4). Empty without DSpark. After a
  // ForwardBatch, all its entries' new tokens, in entry order.
  std::span<const float> last_features() const { return features_; }
  // Those of entry `entry` of the last ForwardBatch (entry 0 after a Forward).
  std::span<const float> last_features(int64_t entry) const;
  // NewMtpCache makes the DSpark cache too: every stage's ring of main_kv rows
  // (all rows kept, so any Truncate is in place).
  // Appends the rows of the next n committed positions (from
  // draft_cache.length()) to the stages' rings, from their target features
  // [n, nT·D] (e.g. rows of last_features()). Only committed positions may be
  // written (spec §13.6): after a verification, the accepted ones.
  Status DSparkObserve(std::span<const float> features, SequenceCache& draft_cache);
  // One draft block (spec §13.5): the B = dspark_block_size tokens after
  // `anchor`, the token at position p + 1 with p = draft_cache.length() − 1.
  // Row j: logits[j] = the shared head on the draft's output plus the Markov
  // bias of the previous token (the anchor, then the drafts); `pick` chooses
  // token j+1 from that row (argmax for greedy; it may sample, and may read
  // or change the row), which is then the previous token of row j+1;
  // confidence[j] = the confidence logit of row j.
  struct DSparkBlock {
    std::vector<int32_t> tokens;     // [B] d_1 .. d_B
    std::vector<float> logits;       // [B, V] Markov-corrected, fp32
    std::vector<float> markov_bias;  // [B, V] the Markov bias alone
    std::vector<float> confidence;   // [B] raw logits (sigmoid: P(accepted | earlier accepted))
  };
  using DraftPick = std::function<int32_t(std::span<float> logits_row, int64_t row)>;
  // `rows` (≤ B; 0: B) limits the Markov loop: the first `rows` drafts.
  Status DSparkDraft(int32_t anchor, SequenceCache& draft_cache, const DraftPick& pick,
                     DSparkBlock& out, int64_t rows = 0);

  // Named intermediates go to `fn` during Forward, under the golden-dump names
  // of tests/data/deepseek_v4/README.md ("embed", "layers.{i}.hc_attn.pre",
  // "layers.{i}.attn_norm_out", "layers.{i}.attn.q", "layers.{i}.attn_out",
  // "layers.{i}.router_scores", "layers.{i}.out", "hc_head_out",
  // "final_norm_out", ...); an empty fn turns tracing off.
  void SetTrace(TraceFn fn) { trace_fn_ = std::move(fn); }

 private:
  DeepSeekV4Model() = default;
  void EnsureScratch(int64_t n_tokens);
  // A run of one sequence's tokens inside a (batched) call: rows row0 ..
  // row0+n−1 of the activations, positions pos0 .. pos0+n−1 of `cache`.
  struct Segment {
    DeepSeekV4Cache* cache = nullptr;
    int64_t row0 = 0, n = 0, pos0 = 0;
  };
  // Embedding + every main layer for the concatenated `tokens` [N] of the
  // segments (x_ = the final residual streams [N, C, D]). A pipeline stage
  // runs its layers and sends the streams on; with `wait_back` the front then
  // receives the final streams and every stage waits until its sends are
  // taken; without, a micro-batched Forward does both once all pieces ran.
  void RunMain(std::span<const int32_t> tokens, std::span<const Segment> segments,
               const Tracer& trace, bool wait_back = true);
  // Tokens per pipeline micro-batch of a one-sequence call with `work` tokens
  // to run (PipelineStage::micro_batch); `work` when it is not cut.
  int64_t MicroBatch(int64_t work) const;
  // Validates a Forward/ForwardMtp call; returns the cache.
  Result<DeepSeekV4Cache*> CheckCall(SequenceCache& cache, LayerRole role,
                                     std::span<const int32_t> tokens, std::span<float> logits,
                                     bool all_logits) const;
  // A DSpark stage's attention (instead of the segments'): block rows after
  // position p, keys from `ring`.
  struct DraftAttention {
    int64_t p = 0;
    const RowHistory* ring = nullptr;
  };
  // One block (mHC + attention, mHC + MoE) on x_ [N, C, D], in place: the
  // linears over all N rows, attention per segment on its cache's layer state
  // (or, for a DSpark stage, `draft`).
  void RunBlock(const LayerPlan& plan, const LayerWeights& lw, std::span<const int32_t> tokens,
                std::span<const Segment> segments, const Tracer& trace,
                const DraftAttention* draft = nullptr);
  // DSpark target capture after main layer `layer` (spec §13.4): the stream
  // means of x_'s N rows into features_all_.
  void CaptureFeatures(int64_t layer, int64_t n_rows);
  // HC head → norm → logits [n, V] of the residual rows x [n, C, D].
  void Head(const HyperConnectionWeights& hc_head, const std::vector<float>& norm, int64_t layer,
            const float* x, int64_t n, float* logits, const Tracer& trace);
  // Traces the mHC coefficients (pre/post/comb) of the site just computed.
  void TraceHc(const Tracer& trace, const char* site, int64_t layer, int64_t n_tokens) const;

  DeepSeekV4Config config_;
  std::vector<LayerPlan> plans_;
  NumericsOptions numerics_;
  RollbackOptions rollback_;
  ModelInfo info_;
  std::shared_ptr<const CheckpointReader> reader_;  // keeps the mapping alive
  ModelWeights weights_;
  std::vector<RopeFrequencies> rope_;  // per plan (window vs compressed bases), MTP included
  HcParams hc_;
  std::unique_ptr<ThreadPool> pool_;
  TraceFn trace_fn_;
  std::optional<PipelineStage> stage_;  // SetPipelineStage; unset: every layer here
  std::optional<ExpertShard> shard_;    // SetExpertShard; unset: every expert here
  bool front() const { return !stage_ || stage_->front; }
  std::optional<ScoredRouterOptions> router_options_;  // ApplyRuntimeOptions
  std::unique_ptr<ExpertCache> expert_cache_;          // StreamExperts
  bool expert_read_ahead_ = false;                     // StreamExperts

  // Scratch for calls of up to scratch_tokens_ tokens, sized once and grown
  // only when a longer prefill chunk arrives; the attention scratch that
  // scales with the context (key lists, index scores) sized for caches of
  // up to scratch_context_ tokens, so decoding never allocates.
  int64_t scratch_tokens_ = 0;
  int64_t scratch_context_ = 0;
  // ForwardBatch's per-entry bookkeeping (reused).
  struct BatchJob {
    DeepSeekV4Cache* cache;
    const BatchEntry* entry;
    int64_t first_new = 0, end = 0;  // positions of the entry's first new token, and after its last
    int64_t out_row0 = 0;            // its first new token's row in hidden_ / features_
  };
  std::vector<BatchJob> batch_jobs_;
  // After a ForwardBatch round's RunMain: the new tokens' rows of x_ and
  // features_all_ (frow floats a row; 0 without DSpark) into hidden_ / features_.
  void KeepNewRows(std::span<const BatchJob> jobs, int64_t row, int64_t frow);
  void EnsureContextScratch(int64_t max_tokens);
  std::vector<float> x_;               // [T, C, D] residual streams
  std::vector<float> u_;               // [T, D] collapsed stream
  std::vector<float> h_;               // [T, D] normed sublayer input
  std::vector<float> y_;               // [T, D] sublayer output
  std::vector<float> mix_;             // [T, M]
  std::vector<float> pre_;             // [T, C]
  std::vector<float> post_;            // [T, C]
  std::vector<float> comb_;            // [T, C, C]
  std::vector<float> mtp_tmp_;         // [T, C, D] hnorm of the main residual
  std::vector<float> mtp_act_;         // activation-quant copies (MTP projections)
  std::vector<float> hidden_;          // [T, C, D] the last Forward's final residual (new tokens)
  std::vector<int64_t> entry_rows_;    // [entries + 1] entry i's rows of hidden_: [e_i, e_{i+1})
  std::vector<float> mtp_hidden_;      // [T, C, D] the last ForwardMtp's block output
  std::vector<int64_t> piece_ends_;    // Forward: each micro-batch's end position
  std::vector<float> features_all_;    // [N, nT·D] DSpark target features of RunMain's rows
  std::vector<float> features_;        // [T, nT·D] those of the last Forward's new tokens
  std::vector<float> dspark_x_;        // [n, D] main_x of DSparkObserve
  std::vector<float> dspark_kv_;       // [n, A] main_kv
  std::vector<float> dspark_y_;        // [B, D] the draft's HC-head output (confidence input)
  std::vector<float> dspark_e_;        // [r] the Markov embedding of the previous token
  std::vector<int32_t> dspark_ids_;    // [B] the block's ids: anchor, noise ...
  std::vector<int32_t> batch_tokens_;  // [N] ForwardBatch: the segments' tokens
  std::vector<Segment> segments_;      // ForwardBatch: this round's segments
  std::vector<float> head_x_;          // [n, C, D] ForwardBatch: rows that need logits
  std::vector<float> head_logits_;     // [n, V] their logits
  AttentionScratch attn_scratch_;
  MoeScratch moe_scratch_;
  static constexpr int64_t kUsageAgeBuckets = 12;  // LayerUsage::index_age
  std::optional<UsageStats> usage_;                // EnableUsageStats: one entry per plan layer
  // Adds a layer's indexer picks (attn_scratch_.top of a run of T tokens from
  // pos0) and its routing (moe_scratch_.routing of T tokens) to usage_.
  void CountIndexPicks(const LayerPlan& plan, int64_t T, int64_t pos0);
  void CountRouting(const LayerPlan& plan, int64_t T);
};

}  // namespace dsv4::deepseek_v4

namespace dsv4 {

using deepseek_v4::DeepSeekV4Model;

// Loads a DeepSeek-V4 checkpoint directory: config.json plus safetensors
// (model.safetensors, or shards with model.safetensors.index.json), official
// or HF tensor names. Errors name the file and the problem.
Result<std::unique_ptr<Model>> LoadDeepSeekV4(const std::string& dir,
                                              const deepseek_v4::LoadOptions& options = {});
// Loads a llama.cpp `deepseek4` GGUF file (spec §14): the config from its
// metadata, the weights by their GGUF names (Q8_0 dense linears, MXFP4
// routed experts repacked to dsv4's FP4 layout at load). The tokenizer in its
// metadata is not read. `parts`: the file, or the parts of a gguf-split set in
// order (io/gguf.h OpenGgufSplit), the config from the first. `draft_file`:
// the model's draft module as llama.cpp's converter writes it — its NextN MTP
// block (--mtp) or its DSpark module (architecture dflash; gguf_reader.h) —
// or null.
Result<std::unique_ptr<Model>> LoadDeepSeekV4Gguf(std::vector<std::unique_ptr<GgufFile>> parts,
                                                  const deepseek_v4::LoadOptions& options = {},
                                                  std::unique_ptr<GgufFile> draft_file = nullptr);

}  // namespace dsv4

#endif  // DSV4_MODEL_DEEPSEEK_V4_MODEL_H_
