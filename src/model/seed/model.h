// SeedModel: the seed-article model family (config.h) behind the engine's
// Model interface — a clear scalar reference path, one mechanism per file:
//
//   x = Embed(tokens)                                        [T, H]
//   for each layer l (kinds fixed at load from config + checkpoint):
//     h  = prenorm ? RMSNorm(x) : x                          S-012 / S-013 (CED: no norm)
//     a  = o_proj(Attention(h))                              attention.h: standard or CSA,
//                                                            rope.h: dynamic / linear / segmented
//     x += CED ? c_l · a : a                                 c_l = ced_scale_factor
//     f  = prenorm ? RMSNorm(x) : x (CED: norm only if the checkpoint has one, C-18)
//     x += FFN(f)   dense SwiGLU (+TaskAdapter) | CED fused (ced_mlp.h) |
//                   MoE: router(hidden | HCA(f) | x) → capacity routing → experts (router.h, hca.h)
//   logits = lm_head · RMSNorm(x)
//   SemanticKVPruner (kv_pruner.h): scores from x after the last layer, evicts after the step.
//
// Per-request state lives in SeedCache: slotted K/V (positions never
// renumbered; evicted slots reused), CSA importance per cached token, HCA
// feature history (per-sequence statistics), the TaskAdapter outputs, the
// frozen RoPE parameters, the pruner state (adaptive efficiency factor) and the
// router's reweighting bias (S-053). Theta is frozen per request from
// NewCache(max_tokens) (C-11): max_tokens is the request's expected context.
// Truncate(0) resets all of it, so a cache reused for another request (the
// serving engine's slots) computes exactly as a new one: no request changes
// another's evictions, routing or logits.
//
// HCA statistics are causal by default (C-15, updated across the prompt: each
// token's over the tokens up to it), so they keep prefill == incremental decode.
// Not causal, so prefill and incremental decode differ: capacity per forward
// (S-044: N is the call's token count), HCA statistics under hca.stats
// "whole_call" (a prefill's cover the whole call) or "batch", the seed-literal
// CSA global mode (C-08). With those off, prefill == incremental.
#ifndef DSV4_MODEL_SEED_MODEL_H_
#define DSV4_MODEL_SEED_MODEL_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "model/seed/attention.h"
#include "model/seed/ced_mlp.h"
#include "model/seed/config.h"
#include "model/seed/hca.h"
#include "model/seed/kv_pruner.h"
#include "model/seed/rope.h"
#include "model/seed/router.h"
#include "model/seed/task_adapter.h"

namespace dsv4::seed {

// S-015: which CED MLP path a CED layer takes. kAuto: calls of fewer than
// ced_min_batch tokens take the baseline (unfused gate and up products), larger
// ones the fused product; kFused / kBaseline force one path.
enum class CedDispatch { kAuto, kFused, kBaseline };
std::string_view CedDispatchName(CedDispatch d);  // "auto", "fused", "baseline"

// S-014 profiling: what one block dispatched, counted per call into a kernel
// over all of a Forward call's tokens — the CPU analogue of kernel launches
// (one RMSNorm over T rows is one norm dispatch). Accumulated per layer while
// SeedRuntimeOptions::profile_ops is on; nothing is counted when off.
struct BlockOpCounts {
  int64_t calls = 0;      // Forward calls that ran the block
  int64_t norm = 0;       // RMSNorm / LayerNorm dispatches
  int64_t matmul = 0;     // weight products (projections, MLP/expert products, router)
  int64_t attention = 0;  // attention cores (one per call: every query of the call)
  // Top-level dispatches of the block: its norms plus its two sub-blocks
  // (attention with its projections; the MLP). Pre-norm: 4; CED: 2.
  int64_t top_level = 0;
};

// Runtime options (engine material, not model config): router modes,
// capacity override, pruner switch, CED dispatch, op profiling.
struct SeedRuntimeOptions {
  RouterOptions router;
  bool pruner = true;  // run the SemanticKVPruner when the model has one
  // < 0: the config's kv_budget; else at least kv_pruner.min_budget() (read by
  // NewCache; ApplyEngineOptions validates --kv-budget).
  int64_t pruner_budget = -1;
  bool hca_skip_override = false;
  double hca_skip_threshold = 0;  // with hca_skip_override
  // S-052 Mode C through Forward: layer → weights [N, k] for the next calls'
  // dispatched tokens (validated and renormalised per token; a size other than
  // N·k is an error naming the layer).
  std::map<int64_t, std::vector<float>> external_weights;
  // S-015: the batch is the number of tokens in one Forward call (the rows of
  // the MLP product); SeedModel runs each sequence of a batched step through its
  // own Forward, so sequences are not pooled.
  CedDispatch ced_dispatch = CedDispatch::kAuto;
  int64_t ced_min_batch = 8;
  bool profile_ops = false;  // S-014: count dispatches per block (op_counts())
};

// S-015 counters: CED layer calls that took each path.
struct CedDispatchCounts {
  int64_t fused = 0;
  int64_t baseline = 0;
};

struct SeedLoadOptions {
  int threads = 1;
  // safetensors __metadata__ to read layouts from ("dsv4.layout.<name>"); empty:
  // the reader's own (for readers that wrap a safetensors file).
  std::map<std::string, std::string> metadata;
};

enum class BlockKind { kPreNorm, kCed };
enum class FfnKind { kDense, kCedFused, kMoe };
// C-15: the tokens HCA's μ and σ cover (config hca.stats).
enum class HcaStats { kCausal, kWholeCall, kBatch };
// S-040: what the router reads (config moe.router_input).
enum class RouterInput { kHidden, kHca, kHiddenPlusAttn };
// S-058: the task vector (config task_adapter.task_source).
enum class TaskSource { kFirstToken, kMean };

// What one layer runs, decided at load from the config and the checkpoint, so
// the forward pass compares no config strings.
class Binder;  // model.cc: collects binding problems

struct SeedLayerPlan {
  BlockKind block = BlockKind::kPreNorm;
  FfnKind ffn = FfnKind::kDense;
  bool csa = false;
  CsaGlobal csa_global = CsaGlobal::kCausal;  // C-08: csa.global_mode
  bool csa_layernorm_fusion = false;          // S-021: csa.fusion_mode "residual_layernorm"
  bool hca = false;                           // HCA controller feeds the router
  HcaStats hca_stats = HcaStats::kCausal;
  RouterInput router_input = RouterInput::kHidden;
  bool ced_mlp_norm = false;  // CED block with a norm before the MLP (C-18 auto)
  Layout ced_layout = Layout::kRowMajor;
};

class SeedCache;

// Counters of the last Forward (tests, bench, telemetry).
struct SeedStepStats {
  std::vector<RouteResult> routes;   // per layer (MoE layers; empty elsewhere)
  std::vector<float> pruner_scores;  // [T] this step's tokens
  KvPrunerPolicy::Decision pruner;   // this step's eviction
  int64_t live_tokens = 0;           // after the step
};

class SeedModel final : public Model {
 public:
  static Result<std::unique_ptr<SeedModel>> Load(std::shared_ptr<const CheckpointReader> reader,
                                                 const SeedConfig& config,
                                                 const SeedLoadOptions& options = {});

  const ModelInfo& info() const override { return info_; }
  const SeedConfig& config() const { return config_; }
  const std::vector<SeedLayerPlan>& plans() const { return plans_; }
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override;
  void SetThreads(int n_threads) override;

  // ---- Model capabilities (model/model.h; runtime_options.cc) ----
  // Every runtime option, validated against this model (experts, pruner, CED
  // layers), then SetRuntimeOptions.
  Status ApplyRuntimeOptions(const RuntimeOptions& options) override;
  // Live, unpruned, peak and evicted entries of a SeedCache; nullopt for others.
  std::optional<KvUsage> kv_usage(const SequenceCache& cache) const override;

  void SetRuntimeOptions(const SeedRuntimeOptions& o);
  const SeedRuntimeOptions& runtime_options() const { return runtime_; }
  const SeedStepStats& last_step() const { return stats_; }
  // Router telemetry of layer `layer` over every sequence since load: the
  // cumulative assignment counts (S-046). The selection bias of S-053
  // reweighting is per sequence (SeedCache::router_state).
  const RouterState& router_state(int64_t layer) const { return router_state_[layer]; }
  float ced_scale(int64_t layer) const { return layers_[layer].ced_scale; }
  // The CED MLP weights layer `layer` computes with (views; S-079: over the
  // checkpoint's own mapped bytes unless a layout override made a copy).
  const CedMlpWeights& ced_weights(int64_t layer) const { return layers_[layer].ced; }
  // Bytes of K/V a slot holds over all layers (bench: KV usage).
  int64_t kv_bytes_per_token() const;
  // S-015: CED MLP calls per path since load (or ResetCounters).
  const CedDispatchCounts& ced_dispatch_counts() const { return ced_counts_; }
  // S-014: per-layer dispatch counts while profile_ops is on.
  const std::vector<BlockOpCounts>& op_counts() const { return op_counts_; }
  void ResetCounters();

 private:
  struct Expert {
    TensorView gate, up, down;  // [F, H], [F, H], [H, F]
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // [H] (empty when absent)
    TensorView wq, wk, wv, wo;
    float ced_scale = 1.0f;
    const float* segment_shift = nullptr;  // [nh, d/2]
    std::vector<float> shift_storage;
    TensorView hca_gate_proj;  // [H, H] (CSA importance, HCA)
    HcaWeights hca;
    TensorView gate, up, down;  // dense
    CedMlpWeights ced;
    OwnedMatrix ced_copy;  // when the config forces another layout
    TensorView router;     // [E, H]
    std::vector<Expert> experts;
    float task_alpha = 0.0f;
  };

  // Reused between calls (grow-only), so decode does not allocate in the FFN.
  struct MoeScratch {
    std::vector<float> g, g_hca, w_mean, logits_all, logits, x, out;
    std::vector<double> mu, sigma;
    std::vector<int64_t> rows;
    DispatchScratch dispatch;
    RouteScratch route;
    MlpScratch hca;
  };

  SeedModel() = default;
  // Forward's steps, top to bottom (model.cc); T: this call's tokens.
  Status CheckForward(std::span<const int32_t> tokens, const SeedCache& c, std::span<float> logits,
                      bool all_logits) const;
  void BeginStep(const SeedCache& c, int64_t T);       // stats reset, scratch sized
  Status PrepareTaskAdapter(SeedCache& c, int64_t T);  // S-058, a request's first call
  void TakeSlots(SeedCache& c, int64_t T);             // new_slots for the new tokens
  void CountLayerOps(int64_t l);                       // S-014 (profile_ops)
  void ProjectQkv(int64_t l, int64_t T, SeedCache& c);
  void AttentionBlock(int64_t l, int64_t T, SeedCache& c);  // x += attention
  Status FfnBlock(int64_t l, int64_t T, SeedCache& c);      // x += FFN
  void WriteLogits(int64_t T, std::span<float> logits, bool all_logits);
  void PruneKv(SeedCache& c, int64_t T);  // SemanticKVPruner, write-then-evict
  // Binding (model.cc), once at load: the top-level tensors, then per layer
  // its block, attention and FFN (the layer's modes chosen there), then the
  // model-wide TaskAdapter and KV pruner.
  Status Bind(const CheckpointReader& r, const std::map<std::string, Layout>& layouts);
  void BindBlock(Binder& b, int64_t l);
  void BindAttention(Binder& b, int64_t l, const std::vector<float>& shared_shift);
  void BindFfn(const CheckpointReader& r, Binder& b, int64_t l);
  void BindCedFused(const CheckpointReader& r, Binder& b, int64_t l);
  void BindAdapterAndPruner(Binder& b);
  void Ffn(int64_t l, const float* f, const float* x_after_attn, int64_t T, SeedCache& c,
           float* out, SeedStepStats& stats, Status& status);
  void SwiGluRows(const TensorView& gate, const TensorView& up, const TensorView& down,
                  const float* adapter, float alpha, const float* f, int64_t T, float* out);
  void HcaGating(int64_t l, const float* f, int64_t T, SeedCache& c);
  // S-015: the CED MLP of layer l on T rows through the path the options choose.
  void CedMlp(int64_t l, const float* f, int64_t T, float* out);

  SeedConfig config_;
  std::vector<SeedLayerPlan> plans_;
  MoeModes moe_modes_;  // config_.moe's routing and assign
  TaskSource task_source_ = TaskSource::kFirstToken;
  ModelInfo info_;
  std::shared_ptr<const CheckpointReader> reader_;
  TensorView embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::deque<OwnedMatrix> relaid_;  // row-major copies of col_major tensors (not ced_weight)
  TaskAdapterWeights adapter_;
  PrunerWeights pruner_;
  bool has_pruner_ = false;
  std::vector<RouterState> router_state_;
  SeedRuntimeOptions runtime_;
  RouterOptions router_unfrozen_;  // runtime_.router without freeze (layers not frozen)
  SeedStepStats stats_;
  std::unique_ptr<ThreadPool> pool_;
  AttnScratch attn_scratch_;
  CedScratch ced_scratch_;
  MoeScratch moe_scratch_;
  struct FwdScratch {
    std::vector<float> x, h, q, k, v, att, a, fin, ffn, g, normed, score;
    std::vector<int32_t> new_slots, seed_sel;
    std::vector<int64_t> pos;
  };
  FwdScratch fwd_scratch_;
  MlpScratch pruner_scratch_;
  std::vector<float> swiglu_g_, swiglu_u_;
  CedDispatchCounts ced_counts_;
  bool ced_logged_[2] = {false, false};   // fused, baseline: logged once each
  std::vector<BlockOpCounts> op_counts_;  // [L]
  BlockOpCounts* prof_ = nullptr;         // the block being profiled (null: off)
};

// The per-request state (see the file comment).
class SeedCache final : public SequenceCache {
 public:
  int64_t length() const override { return length_; }
  void Truncate(int64_t n) override;
  // A rollback keeps the pruner's evictions and the router's reweighting.
  bool ExactTruncate() const override { return false; }

  int64_t slots() const { return static_cast<int64_t>(slot_pos_.size()); }
  int64_t live_tokens() const { return static_cast<int64_t>(live_.size()); }
  // Positions held, ascending.
  std::vector<int64_t> live_positions() const;
  bool holds(int64_t pos) const;
  // The slot holding `pos`, or -1.
  int64_t slot_of(int64_t pos) const;
  // S-064: drops the K/V of positions [begin, end) (an "already read" hint).
  // Positions are not renumbered; later tokens keep their rotary positions.
  Status EvictRange(int64_t begin, int64_t end);
  const RopeParams& rope() const { return rope_; }
  double pruner_efficiency() const { return pruner_ ? pruner_->efficiency() : 0.0; }
  int64_t evicted_total() const { return evicted_total_; }
  int64_t peak_live() const { return peak_live_; }
  // The TaskAdapter output of layer l ([F]; empty before the first Forward).
  const std::vector<float>& adapter_out(int64_t l) const { return adapter_out_[l]; }
  // Layer l's router state for this sequence (S-053 reweighting bias, counts).
  const RouterState& router_state(int64_t l) const { return router_[l]; }

 private:
  friend class SeedModel;
  // budget_override >= 0 replaces the config's kv_budget (SeedRuntimeOptions).
  SeedCache(const SeedConfig& c, int64_t max_tokens, int64_t budget_override);
  void Evict(int64_t pos);
  // Truncate(0): every per-request member back to what the constructor made.
  void Reset();

  int64_t length_ = 0;
  int64_t kv_dim_ = 0;
  int64_t hidden_ = 0;
  std::vector<int64_t> slot_pos_;                // [S], -1 free
  std::vector<int32_t> live_;                    // by position
  std::vector<std::vector<float>> k_, v_;        // [L][S · kv_dim]
  std::vector<std::vector<float>> importance_;   // [L][S]
  std::vector<float> prune_score_;               // [S]
  std::vector<std::vector<float>> hca_hist_;     // [L][length · H]
  std::vector<std::vector<float>> adapter_out_;  // [L][F]
  bool adapter_ready_ = false;
  RopeParams rope_;
  std::unique_ptr<KvPrunerPolicy> pruner_;
  std::vector<RouterState> router_;  // [L] (MoE layers: bias and counts sized E)
  int64_t num_experts_ = 0;
  int64_t evicted_total_ = 0;
  int64_t peak_live_ = 0;
};

// S-008: parameter counts from the checkpoint's tensors (declared sizes in the
// config or the articles are ignored). Components, by tensor name: "embedding"
// (embed_tokens), "lm_head", "norm" (every *norm.weight), "attention"
// (self_attn.*, rotary segment_shift), "dense_mlp" (mlp.{gate,up,down}_proj),
// "ced" (mlp.ced_*, ced_scale_factor), "router" (mlp.gate.weight), "experts"
// (mlp.experts.*), "hca" (mlp.hca_*), "task_adapter" (model.task_adapter.*,
// mlp.task_gate_weight), "kv_pruner" (model.kv_pruner.*), "other". The map
// also holds "total" = the sum.
std::map<std::string, int64_t> CountParametersByComponent(const CheckpointReader& reader);

}  // namespace dsv4::seed

namespace dsv4 {

// Loads a seed-family checkpoint directory: config.json (model_type
// "deepseek_v4_seed") plus model.safetensors (or shards). Errors name the file.
Result<std::unique_ptr<Model>> LoadSeedModel(const std::string& dir, int threads = 1);

}  // namespace dsv4

#endif  // DSV4_MODEL_SEED_MODEL_H_
