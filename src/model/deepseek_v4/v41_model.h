// DeepSeekV41Model: the DeepSeek-V4.1 forward pass behind the engine's Model
// interface. It reads like the reference's Transformer.forward:
//
//   X = expand(Embed(tokens)); pre = one-hot   // [T, C, D]; the first layer collapses stream 0
//   for each layer:
//     X = X + Engram(X, n-gram hashes)         // Engram layers only (engram.h)
//     (pre_a, post_a, comb_a) = mixes(X)       // this attention's mixes ...
//     X = post_a·Attn(norm(Σ pre·X)) + comb_aᵀX   // ... but the collapse uses the previous pre
//     (pre_f, post_f, comb_f) = mixes(X)
//     X = post_f·MoE(norm(Σ pre_a·X)) + comb_fᵀX  // lagged by one sublayer
//     pre = pre_f
//   logits = head · norm(Σ pre·X)               // no hc_head: the last FFN's mix collapses
//
// Attention is CSA2 (csa2.h); the MoE, mHC mixes, RoPE and weights are V4's.
// The DSpark stages draft for speculative decoding (v41_dspark.cc); the vision
// tower of the release is not run.
//
// Dimensions: T tokens in a call, D hidden, C hc_mult, V vocab.
#ifndef DSV4_MODEL_DEEPSEEK_V4_V41_MODEL_H_
#define DSV4_MODEL_DEEPSEEK_V4_V41_MODEL_H_

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/csa2.h"
#include "model/deepseek_v4/engram.h"
#include "model/deepseek_v4/expert_cache.h"
#include "model/deepseek_v4/hyper_connection.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/moe.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/weights.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

// One sequence's DeepSeek-V4.1 state: every main layer's CSA2 stores, the
// token ids (Engram's n-gram history; replays after a deep truncation) and the
// reference's index-key slot after each call.
class DeepSeekV41Cache final : public SequenceCache {
 public:
  DeepSeekV41Cache(const void* owner, const DeepSeekV4Config& c, std::span<const LayerPlan> plans,
                   int64_t history, int64_t max_tokens);
  int64_t length() const override { return static_cast<int64_t>(tokens_.size()); }
  // In place when every layer still holds what position n needs, else the
  // stores restart and the next Forward re-runs the first n tokens.
  void Truncate(int64_t n) override;
  int64_t KeepablePrefix(int64_t n) const override;
  // The tokens, the layers' stores and the index-key slot (prompt states on
  // disk, engine/state_file.h).
  Status SaveState(std::vector<uint8_t>& out) const override;
  Status LoadState(std::span<const uint8_t> bytes) override;

  const void* owner() const { return owner_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t computed() const { return computed_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<Csa2LayerState> layers() { return layers_; }
  int64_t key_slot() const { return key_slot_; }
  // The layers now hold the first n tokens (one call ended there), with the
  // index-key slot as the call left it.
  void Computed(int64_t n, int64_t key_slot);
  void Append(std::span<const int32_t> t) { tokens_.insert(tokens_.end(), t.begin(), t.end()); }
  int64_t allocated_bytes() const;
  // The n-gram history of the Engram layers (empty without them).
  std::optional<EngramSequence>& engram() { return engram_; }

 private:
  // The slot as single-token calls up to position n would leave it (a
  // truncation inside a call): the last owner whose group completed.
  int64_t SlotAfterSteps(int64_t n) const;

  const void* owner_;
  int64_t max_tokens_;
  int64_t vocab_size_;
  std::vector<LayerPlan> plans_;
  std::vector<Csa2LayerState> layers_;                 // [L]
  std::vector<int32_t> tokens_;                        // [length]
  int64_t computed_ = 0;                               // tokens the layers hold
  int64_t key_slot_ = -1;                              // the index-key slot after the last call
  std::vector<std::pair<int64_t, int64_t>> slot_log_;  // (end of a call, slot after it)
  std::optional<EngramSequence> engram_;
};

class DeepSeekV41Model final : public Model, public DraftModel {
 public:
  static Result<std::unique_ptr<DeepSeekV41Model>> Load(
      std::shared_ptr<const CheckpointReader> reader, const DeepSeekV4Config& config,
      const LoadOptions& options = {});

  const ModelInfo& info() const override { return info_; }
  const DeepSeekV4Config& config() const { return config_; }
  const std::vector<LayerPlan>& plans() const { return plans_; }
  const NumericsOptions& numerics() const { return numerics_; }
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override;
  void SetThreads(int n_threads) override;
  std::optional<WeightWork> weight_work_per_token() const override;
  int64_t routed_experts_run() const override { return moe_scratch_.experts_run; }
  // Engram rows and bytes read so far (all calls); nullopt without Engram.
  std::optional<TableReads> table_reads() const override {
    if (engram_.layout().n_layers() == 0) return std::nullopt;
    return engram_reads_;
  }
  // ---- Expert streaming (expert_cache.h; --ram-budget), as V4's ----
  Status StreamExperts(int64_t budget_bytes);
  std::optional<ExpertStreamStats> expert_stream_stats() const override {
    if (!expert_cache_) return std::nullopt;
    return expert_cache_->stats();
  }
  int64_t routed_expert_bytes() const;
  // The Engram tables' bytes (read a few rows a token; they stay on disk).
  int64_t engram_table_bytes() const;
  // Intermediates by golden-dump name (tests); null: off.
  void SetTrace(TraceFn fn) { trace_fn_ = std::move(fn); }
  // The entries one after another; each entry's target features kept
  // (last_features(entry)) for the draft head.
  Status ForwardBatch(std::span<const BatchEntry> entries) override;

  // ---- DSpark (the reference's DSparkBlock, forward_spec; v41_dspark.cc) ----
  // As V4's (model.h, spec §13) but with lagged mHC in the stages, no HC head
  // (the last stage's lagged mix collapses), CSA2's window numerics, the
  // stages' own MoE sizes, and target features read at the *input* of each
  // target layer (after its Engram).
  DraftModel* draft_model() override { return has_dspark() ? this : nullptr; }
  std::string_view draft_kind() const override { return "dspark"; }
  int64_t max_drafts() const override { return config_.dspark_block_size; }
  std::unique_ptr<DraftSession> NewDraftSession(int64_t max_tokens) override;
  bool has_dspark() const { return weights_.dspark.has_value(); }
  // The target features [T, nT·D] of entry `entry` of the last Forward /
  // ForwardBatch's new tokens: per token, the mean over the C streams of each
  // target layer's input, concatenated in layer order. Empty without DSpark.
  std::span<const float> last_features(int64_t entry = 0) const;
  // The draft cache: every stage's ring of kv rows from main_x (all kept, so
  // any Truncate is in place).
  std::unique_ptr<SequenceCache> NewMtpCache(int64_t max_tokens) const;
  // Appends the next n committed positions (from draft_cache.length()) to the
  // stages' rings, from their target features [n, nT·D].
  Status DSparkObserve(std::span<const float> features, SequenceCache& draft_cache);
  // One draft block after `anchor` (the token at position p + 1, p =
  // draft_cache.length() − 1); see DeepSeekV4Model::DSparkDraft. confidence:
  // the confidence head on [the collapsed stream before the norm ; the Markov
  // embedding]. `rows` (≤ B; 0: B) limits the head and the Markov loop to the
  // first `rows` drafts (the stages run all B rows); later rows of `out` are
  // not written.
  using DSparkBlock = DeepSeekV4Model::DSparkBlock;
  using DraftPick = DeepSeekV4Model::DraftPick;
  Status DSparkDraft(int32_t anchor, SequenceCache& draft_cache, const DraftPick& pick,
                     DSparkBlock& out, int64_t rows = 0);
  // ---- Split over processes (model/model.h): expert parallel only ----
  // A pipeline stage of every layer (the front makes logits, the others not);
  // a part of the layers is refused: later layers read the compressed caches
  // and index keys of earlier source layers (CSA2), which stay on their rank.
  int64_t pipeline_layers() const override { return config_.num_hidden_layers; }
  Status SetPipelineStage(const PipelineStage& stage) override;
  Status SetExpertShard(const ExpertShard& shard) override;

 private:
  DeepSeekV41Model() = default;
  // Runs T tokens at pos0 on `cache`; logits of rows [first_logit, T) into `logits`.
  void Run(std::span<const int32_t> tokens, int64_t pos0, DeepSeekV41Cache& cache,
           int64_t first_logit, float* logits);
  // DSpark: the stream means of x [T, C, D] into features_all_ when `layer`
  // is a target; after a Forward, its T rows as the new tokens' features.
  void CaptureFeatures(int64_t layer, const float* x, int64_t T);
  void KeepFeatures(int64_t T);

  DeepSeekV4Config config_;
  std::vector<LayerPlan> plans_;
  NumericsOptions numerics_;
  IndexKeyReading reading_ = IndexKeyReading::kReference;
  int64_t history_ = 16;
  std::shared_ptr<const CheckpointReader> reader_;
  ModelWeights weights_;
  std::vector<RopeFrequencies> rope_;  // [L] per layer
  HcParams hc_;
  EngramHasher engram_;
  TableReads engram_reads_;
  ModelInfo info_;
  std::unique_ptr<ThreadPool> pool_;
  TraceFn trace_fn_;
  std::unique_ptr<ExpertCache> expert_cache_;  // StreamExperts
  bool front_ = true;                          // SetPipelineStage: makes the logits
  std::optional<ExpertShard> shard_;           // SetExpertShard; unset: every expert here
  // scratch
  std::vector<float> x_, u_, h_, y_, mix_, pre_a_, post_a_, comb_a_, pre_f_, post_f_, comb_f_,
      pre_mix_;
  std::vector<int64_t> hashes_;
  // DSpark: the stages' config (their MoE sizes), target features of the
  // last Run [T, nT·D], the new tokens' of the last Forward / ForwardBatch,
  // entry i's rows of them [e_i, e_{i+1}).
  DeepSeekV4Config draft_config_;
  std::vector<float> features_all_, features_;
  std::vector<int64_t> entry_rows_;
  std::vector<float> dspark_x_, dspark_y_, dspark_e_;
  std::vector<int32_t> dspark_ids_;
  MoeScratch draft_moe_scratch_;
  bool warned_reference_slot_ = false;
  Csa2Shared shared_;
  Csa2Scratch attn_scratch_;
  MoeScratch moe_scratch_;
  EngramScratch engram_scratch_;
};

}  // namespace dsv4::deepseek_v4

namespace dsv4 {
// A DeepSeek-V4.1 checkpoint directory: config.json (model_type deepseek_v41)
// and safetensors in the official naming.
Result<std::unique_ptr<Model>> LoadDeepSeekV41(const std::string& dir,
                                               const deepseek_v4::LoadOptions& options);
}  // namespace dsv4

#endif  // DSV4_MODEL_DEEPSEEK_V4_V41_MODEL_H_
