// Model: what the engine sees of every model family (Llama baseline,
// DeepSeek-V4, the seed-article family). A model owns its weights (views into
// mapped files) and scratch buffers; per-sequence state lives in a
// SequenceCache it creates.
#ifndef DSV4_MODEL_MODEL_H_
#define DSV4_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/draft.h"
#include "model/runtime_options.h"

namespace dsv4 {

struct ModelInfo {
  std::string architecture;  // "llama", "deepseek_v4", ...
  int64_t vocab_size = 0;    // rows of the LM head
  int64_t max_context = 0;   // positions the model supports
  int64_t n_params = 0;      // total parameter count
  // Bytes of weights one decoded token reads (as stored: dense layers, the
  // classifier, shared experts and top-k routed experts for MoE; embedding
  // lookups count one row). 0 when the model does not report it.
  int64_t weight_bytes_per_token = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// Per-sequence state (KV cache and the like). Tokens are appended in order.
class SequenceCache {
 public:
  virtual ~SequenceCache() = default;
  // Tokens already in the cache (the next token's position).
  virtual int64_t length() const = 0;
  // Forgets everything after the first n tokens (n <= length()). Truncate(0)
  // leaves the cache as NewCache made it, per-sequence state included (the
  // serving engine reuses its slots' caches across requests this way).
  virtual void Truncate(int64_t n) = 0;
  // Whether Truncate(n) with n > 0 leaves the cache exactly as running only
  // the first n tokens would have (the serving engine reuses a slot's prefix
  // only then; EngineOptions::reuse_prefix).
  virtual bool ExactTruncate() const { return true; }
  // The longest m ≤ n such that Truncate(m) keeps the first m tokens' state
  // without recomputing any of it (a cache that holds only recent history
  // would re-run the rest on the next call).
  virtual int64_t KeepablePrefix(int64_t n) const { return n; }
  // Appends the sequence's decoding state to `out`, for LoadState of a cache
  // made by the same model with the same options (prompt states kept on disk,
  // engine/state_file.h): the tokens, the stores' layout and their rows.
  // Unimplemented for caches that cannot be saved.
  virtual Status SaveState(std::vector<uint8_t>& out) const {
    (void)out;
    return Unimplemented("this model's cache cannot be saved",
                         "drop --kv-cache-dir/--prompt-cache");
  }
  // Replaces the state with SaveState's bytes: afterwards the cache holds the
  // saved tokens as if they had been run (Truncate within them exact as in
  // the cache that was saved). Errors: bytes of another layout or model
  // (InvalidArgument), more tokens than this cache holds (OutOfRange),
  // truncated or inconsistent data (DataLoss); the cache is then empty.
  virtual Status LoadState(std::span<const uint8_t> bytes) {
    (void)bytes;
    return Unimplemented("this model's cache cannot be loaded",
                         "drop --kv-cache-dir/--prompt-cache");
  }
};

// What one token costs in weights (dsv4 bench's rooflines), counted from the
// checkpoint's tensors: every 2-D weight a token is multiplied by once, the
// classifier included, top-k of the routed experts (k / E of each MoE layer's),
// draft (MTP) layers excluded.
struct WeightWork {
  // Multiply-adds of weight matrices (prefill FLOPs = 2 × this × tokens;
  // attention over the context not included); embedding lookups excluded; FP4
  // packed two per byte counts both.
  int64_t macs = 0;
  // The part of `macs` on the bf16 dot-product kernels (FP8/FP4 weights with
  // FP8-quantised inputs); 0 when the model or the CPU does not use them.
  int64_t bf16_dot_macs = 0;
  // Bytes read as stored: every dense matrix, norm and the classifier once,
  // one embedding row, shared experts, top-k of the routed experts.
  int64_t bytes = 0;
  // The routed experts' part of `bytes`, and one routed expert's weights as
  // stored (the mean over the MoE layers); 0 without routed experts. A
  // forward that ran n routed experts (Model::routed_experts_run) read about
  // bytes − routed_bytes + n × routed_expert_bytes.
  int64_t routed_bytes = 0;
  int64_t routed_expert_bytes = 0;
};

// KV-cache entries (one per cached token) of a sequence: what the cache holds
// now vs what it would hold without pruning (every token of the sequence).
struct KvUsage {
  int64_t entries = 0;           // live tokens held
  int64_t entries_unpruned = 0;  // the sequence's length
  int64_t peak_entries = 0;      // most live tokens at once
  int64_t evicted = 0;           // entries evicted so far
  int64_t bytes_per_entry = 0;   // K and V over all layers
  bool pruner_on = false;        // a KV pruner runs on this cache
  int64_t bytes() const { return entries * bytes_per_entry; }
  int64_t bytes_unpruned() const { return entries_unpruned * bytes_per_entry; }
};

// Routed experts streamed from the checkpoint under a RAM budget
// (DeepSeek-V4's expert cache, --ram-budget): its size and counters.
struct ExpertStreamStats {
  int64_t slots = 0;               // experts held at once
  int64_t slot_bytes = 0;          // bytes of one slot (an expert's tensors + alignment)
  int64_t hits = 0;                // acquisitions of an expert in a slot (or read ahead into one)
  int64_t misses = 0;              // acquisitions that read the expert
  int64_t ahead_reads = 0;         // experts read ahead for the next layer
  int64_t ahead_used = 0;          // of those, the ones that layer asked for
  int64_t read_bytes = 0;          // bytes read from the checkpoint
  double read_seconds = 0;         // wall time the forward waited for reads
  double read_span_seconds = 0;    // wall time from the reads' start to their end
  bool direct_io = false;          // every file opened with O_DIRECT
  std::vector<std::string> files;  // the checkpoint files read
  double hit_rate() const {
    return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  }
};

// Rows read from a model's large hash tables (DeepSeek-V4.1's Engram), all
// calls so far.
struct TableReads {
  int64_t rows = 0;
  int64_t bytes = 0;
};

// What a model's routers and indexers chose, summed over every call since
// Model::EnableUsageStats: the view of routing skew and of the indexer's
// selections that only trained weights give (`dsv4 inspect --routing-stats`).
struct LayerUsage {
  int64_t layer = 0;   // the plan's index (draft layers follow the main ones)
  bool draft = false;  // an MTP / draft layer
  bool hash_routed = false;
  std::vector<int64_t> expert_picks;  // [E] (token, pick) pairs routed to each expert
  // The indexer (CSA layers), over the queries that saw more compressed
  // entries than it keeps (a real choice): their number, the entries they saw
  // and their picks by age, in entries back from the newest one the query
  // sees: bucket 0 the newest, bucket b ≥ 1 ages [2^(b−1), 2^b).
  int64_t index_queries = 0;
  int64_t index_visible = 0;
  int64_t index_recent = 0;         // picks among the query's newest top-k entries
  double index_recent_uniform = 0;  // that count expected of picks uniform over the entries
  double index_relative_age = 0;    // Σ age / (visible − 1) over the picks (uniform: ½ each)
  std::vector<int64_t> index_age;   // [buckets] picks
  int64_t index_picks() const {
    int64_t n = 0;
    for (int64_t v : index_age) n += v;
    return n;
  }
};
struct UsageStats {
  std::vector<LayerUsage> layers;  // the layers with a router, in plan order
};

// One sequence's share of a batched step (Model::ForwardBatch): its new
// tokens, its cache (distinct per entry) and where its logits go — [T, V] when
// all_logits, else the last token's [V].
struct BatchEntry {
  std::span<const int32_t> tokens;
  SequenceCache* cache = nullptr;
  std::span<float> logits;
  bool all_logits = false;
};

// A process's part of a model split by layers over several processes
// (pipeline parallel; engine/distributed.h sets it up over MPI). The residual
// streams of a call's tokens ([T, C, D] for DeepSeek-V4, with the DSpark
// target features [T, nT·D] after them) go from stage to stage around a ring:
// the front (rank 0) embeds the tokens and runs the first layers, each later
// stage receives, runs its layers and sends on, the last one back to the
// front, which makes the logits. A transport failure ends the job (the link
// reports it and aborts every process): a half-run layer cannot be undone.
class PipelineLink {
 public:
  virtual ~PipelineLink() = default;
  // To the next stage (the last one's: to the front), without waiting for it
  // to be taken (`data` may be reused on return); Flush waits until the next
  // stage has taken every message sent. `what` names the data in a transport
  // error ("residual streams").
  virtual void SendNext(std::span<const float> data, std::string_view what) = 0;
  virtual void Flush() = 0;
  // From the previous stage (the front's: from the last one).
  virtual void RecvPrev(std::span<float> data, std::string_view what) = 0;
};
struct PipelineStage {
  int64_t first_layer = 0;  // the main layers [first_layer, end_layer) run in this process
  int64_t end_layer = 0;
  bool front = true;             // embeds, makes logits, runs the draft head
  PipelineLink* link = nullptr;  // outlives the model's calls
  // Micro-batches: a one-sequence Forward of T tokens runs in pieces of
  // `micro_batch` tokens (kMicroBatchAuto: ceil(T / stages), when that is at
  // least kMicroBatchMin; kMicroBatchOff: one piece); each stage sends a piece
  // on and starts the next while the next stage runs it, and the front makes
  // the logits once the pieces come back. Every stage must be given the same
  // values (the pieces are the messages).
  int64_t stages = 1;
  int64_t micro_batch = kMicroBatchAuto;
  static constexpr int64_t kMicroBatchAuto = 0;
  static constexpr int64_t kMicroBatchOff = -1;
  static constexpr int64_t kMicroBatchMin = 16;
};

// A process's share of a model whose routed experts are split over several
// processes (expert parallel; engine/distributed.h): every process runs every
// layer on every token (attention, routers, shared experts replicated), but a
// MoE layer's routed experts only for the experts it owns — rank r of n owns
// experts [E·r/n, E·(r+1)/n) of every main layer — and then the processes
// exchange those outputs (each has all the routing, so each knows every
// block's size) and each sums every token's experts in the one-process order.
class ExpertLink {
 public:
  virtual ~ExpertLink() = default;
  // In place: `data` holds rank r's block at floats [offsets[r], offsets[r+1])
  // ([ranks + 1] offsets); fills the others' blocks from them; `layer` names
  // the main layer in a transport error. A transport failure ends the job
  // (as PipelineLink).
  virtual void AllGather(std::span<float> data, std::span<const int64_t> offsets,
                         int64_t layer) = 0;
};
struct ExpertShard {
  int rank = 0;
  int ranks = 1;
  ExpertLink* link = nullptr;  // outlives the model's calls
};

// What one process of a model split over several has sent (engine/distributed.h).
struct RankTraffic {
  int64_t bytes = 0;
  int64_t messages = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A cache for one sequence of at most max_tokens tokens (<= info().max_context).
  virtual std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const = 0;
  // Runs `tokens` at positions [cache.length(), cache.length() + T), appending
  // them to `cache`. Writes the logits of every token ([T, V], when all_logits)
  // or of the last one ([V]) into `logits`. Errors: context full, bad token id.
  virtual Status Forward(std::span<const int32_t> tokens, SequenceCache& cache,
                         std::span<float> logits, bool all_logits) = 0;
  // Forward for several sequences in one step: the same results as calling
  // Forward on each entry in order, but a model may run the entries' tokens
  // through each weight together (one weight read per step instead of one per
  // sequence). This default loops over Forward and stops at the first error,
  // so entries before it have run; callers that need to retry entries one by
  // one can Truncate the caches back to their lengths before the call.
  virtual Status ForwardBatch(std::span<const BatchEntry> entries) {
    for (const BatchEntry& e : entries) {
      RETURN_IF_ERROR(Forward(e.tokens, *e.cache, e.logits, e.all_logits));
    }
    return Status::Ok();
  }
  // Threads used by the kernels.
  virtual void SetThreads(int n_threads) = 0;

  // ---- Optional capabilities (the defaults: the model has none) ----
  // Takes the operator's runtime options (runtime_options.h), replacing the
  // previous ones; options left at their defaults keep the model's. Errors:
  // an option the model cannot take (Unimplemented, naming its flag), a value
  // outside what the model allows (InvalidArgument). The default refuses any
  // option set.
  virtual Status ApplyRuntimeOptions(const RuntimeOptions& options) {
    if (!options.any()) return Status::Ok();
    return Unimplemented(std::string(FirstFlag(options)) +
                             " applies to seed-family and DeepSeek-V4 models only (model " +
                             info().architecture + ")",
                         "this model takes no runtime router/KV/CED policies; drop the option");
  }
  // The draft head for speculative decoding (draft.h), or null.
  virtual DraftModel* draft_model() { return nullptr; }
  // Weight work per token (bench), or nullopt when the model does not count it.
  virtual std::optional<WeightWork> weight_work_per_token() const { return std::nullopt; }
  // Routed experts whose weights the model has read, summed over MoE layers
  // and every call since it was made (an expert picked by several tokens of
  // one step counts once); -1 when the model does not count them.
  virtual int64_t routed_experts_run() const { return -1; }
  // The expert cache's counters when the model streams its routed experts
  // (--ram-budget); nullopt otherwise.
  virtual std::optional<ExpertStreamStats> expert_stream_stats() const { return std::nullopt; }
  // Starts counting (on) or stops and clears (off) UsageStats. Errors: a model
  // that does not count them (the default).
  virtual Status EnableUsageStats(bool on) {
    (void)on;
    return Unimplemented(
        "model " + info().architecture + " does not count its routing and indexer choices",
        "routing statistics cover DeepSeek-V4 checkpoints");
  }
  // The counts since EnableUsageStats(true); nullopt while off.
  virtual std::optional<UsageStats> usage_stats() const { return std::nullopt; }
  // Hash-table rows read so far (Engram); nullopt when the model has none.
  virtual std::optional<TableReads> table_reads() const { return std::nullopt; }
  // ---- Split over processes (engine/distributed.h) ----
  // Main layers a pipeline may split (0: the model cannot be split).
  virtual int64_t pipeline_layers() const { return 0; }
  // Runs only `stage`'s layers from now on (model.h PipelineStage). Errors: a
  // model that cannot be split (the default), a range outside its layers.
  virtual Status SetPipelineStage(const PipelineStage& stage) {
    (void)stage;
    return Unimplemented("model " + info().architecture + " cannot be split over processes",
                         "run it in one process (without mpirun), or use a DeepSeek-V4 model");
  }
  // Runs only `shard`'s routed experts of the main layers from now on,
  // exchanging their outputs over its link (ExpertShard). Errors: a model
  // without routed experts to split (the default), a bad rank.
  virtual Status SetExpertShard(const ExpertShard& shard) {
    (void)shard;
    return Unimplemented("model " + info().architecture + " has no experts to split",
                         "run it in one process (without mpirun), or use a DeepSeek-V4 model");
  }
  // Per rank, what each process of a split model has sent since load; empty
  // for a model in one process.
  virtual std::vector<RankTraffic> traffic() { return {}; }
  // KV usage of `cache` (made by this model) for models whose caches can evict
  // entries; nullopt for others.
  virtual std::optional<KvUsage> kv_usage(const SequenceCache& cache) const {
    (void)cache;
    return std::nullopt;
  }
};

}  // namespace dsv4

#endif  // DSV4_MODEL_MODEL_H_
