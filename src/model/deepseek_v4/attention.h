// DeepSeek-V4 attention: low-rank query with a per-head unweighted RMS norm,
// one shared K=V head, partial RoPE on the trailing R dims of each head
// (inverse rotation on the output, since V = K carries rotated dims), a learned
// per-head attention sink in the softmax denominator, and the grouped low-rank
// output projection. The keys of a query are the W-token window (every layer),
// plus on HCA layers every visible compressed entry, and on CSA layers the
// compressed entries the lightning indexer picks (compressor.h, indexer.h).
//
// Source: specs/deepseek-v4.md §4.1 (projections), §4.2 (RoPE, rope.h), §4.3 (window),
// §4.6 (key sets, sink), §4.7 (grouped output); gotchas §11 items 4–7, 12–13, 19.
//
// Dimensions: T tokens in the call, D hidden, Q q_lora_rank, H heads,
// A head_dim, R rope dims (the last R of A), G o_groups, O o_lora_rank,
// W window (ring slots), r compress ratio, n compressed entries,
// k index_topk.
#ifndef DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_
#define DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/indexer.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

// Per-sequence attention state of one layer (what its CacheSpec describes).
// Every store is indexed by absolute position, so truncating to an earlier
// length only cuts ends (cache.h).
struct AttentionState {
  // history: RollbackOptions::horizon (rows kept beyond what the next token needs).
  void Init(const DeepSeekV4Config& c, const LayerPlan& plan, int64_t history);
  void Reset();  // a new sequence
  // Capacity for a sequence of up to n tokens (entries; unbounded rows), so
  // nothing reallocates while it grows.
  void Reserve(int64_t n_tokens);
  // Keeps what the first n tokens made (n ≤ the tokens seen).
  void Truncate(int64_t n_tokens);
  // Whether Truncate(n) keeps every row the token at position n needs.
  bool CanTruncate(int64_t n_tokens) const;
  // The rows the token at position n needs, saved / restored (rollback checkpoints).
  struct Saved {
    int64_t n_tokens = 0;
    std::vector<float> ring, compressed_rows, index_rows;
  };
  void Save(int64_t n_tokens, Saved& out) const;
  void Restore(const Saved& saved);
  // Everything held (the ring, compressor rows and entries), and back (a
  // saved sequence state): Read checks it fits this layer's layout and holds
  // exactly the state of `n_tokens` tokens; false otherwise.
  void Write(ByteWriter& w) const;
  [[nodiscard]] bool Read(ByteReader& r, int64_t n_tokens);

  CacheSpec spec;
  RowHistory ring;             // [W + H, A] kv of the newest positions (slot p mod (W + H))
  CompressorState compressed;  // ratio > 0: compressed kv entries [n, A] + compressor rows
  CompressorState index_keys;  // CSA: index keys [n, ID] + the indexer compressor's rows
};

// Per-call scratch, sized for up to `n_tokens` tokens once (grown if needed).
struct AttentionScratch {
  void Reserve(const DeepSeekV4Config& c, int64_t n_tokens);
  // Sizes what grows with the context (one token's key list and its heads'
  // scores per thread, the indexer's scores and one decode query's dots) for
  // caches of up to max_tokens tokens of a model with these layers.
  void ReserveContext(const DeepSeekV4Config& c, std::span<const LayerPlan> plans,
                      int64_t max_tokens, int n_threads);
  int64_t n_tokens = 0;
  std::vector<float> qr;               // [T, Q]
  std::vector<float> q;                // [T, H·A]
  std::vector<float> kv;               // [T, A]
  std::vector<float> o;                // [T, H·A]
  std::vector<float> o_group;          // [G, T, (H/G)·A] each output group's heads
  std::vector<LinearJob> o_jobs;       // [G] the grouped output products (LinearMany)
  std::vector<int64_t> o_job_rows;     // LinearMany's row offsets
  std::vector<LinearJob> proj_jobs;    // the projections' pooled steps (AttentionProject)
  std::vector<int64_t> proj_job_rows;  // their LinearMany row offsets
  std::vector<float> kv_act;           // wkv's input copy when it differs from wq_a's
  std::vector<float> z;                // [T, G·O]
  std::vector<float> scores;       // [threads, H, W + compressed keys] one token's heads' logits
  std::vector<const float*> keys;  // [threads, W + compressed keys] its key rows
  std::vector<float> act;          // activation-quant copies of linear inputs
  std::vector<int32_t> top;        // [T, k] CSA: indexer picks
  CompressorScratch compressor;
  IndexerScratch indexer;
};

// The attention sublayer in three parts, so that a batched step (several
// sequences' tokens concatenated into N rows) reads each projection weight
// once: AttentionProject (the linears into q and kv, all N rows), then
// AttentionCore per sequence on its own rows and cache, then AttentionOutput
// (the grouped output projection, all N rows). AttentionForward is the three
// for one sequence.
//
// s.qr [N, Q] = q_norm(wq_a · x), s.q [N, H·A] = wq_b · qr, s.kv [N, A] = wkv · x;
// on compressing layers also the compressor's and the indexer's products
// (CompressorJobs, IndexerJobs, IndexerQueryJob) into their scratch.
void AttentionProject(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                      int64_t n_rows, AttentionScratch& s);
// One sequence's T tokens at positions pos0 .., rows row0 .. row0+T−1 of the
// projections in s (`run`): norms and RoPE on q/kv, compressor, indexer and
// the attention itself into s.o's rows; appends the kv to `state`.
void AttentionCore(const LayerContext& ctx, const AttentionWeights& w, TokenRun run,
                   AttentionState& state, AttentionScratch& s);
// out [N, D] = wo_b · (grouped wo_a · s.o).
void AttentionOutput(const LayerContext& ctx, const AttentionWeights& w, int64_t n_rows,
                     AttentionScratch& s, float* out);

// The attention sublayer for T consecutive tokens at positions pos0 .. pos0+T−1.
// x: [T, D] (= attn_norm(mHC collapse)); out: [T, D].
// state: the layer's stores holding the kv of positions max(0, pos0−W) ..
// pos0−1 and its compressors' rows and entries for the first pos0 tokens; on
// return they include the T new tokens. Keys of the query at position p: the window positions
// max(0, p−W+1) .. p in ascending order, then (HCA) the compressed entries
// 0 .. (p+1) div r − 1 or (CSA) the indexer's picks among them.
void AttentionForward(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                      int64_t n_tokens, int64_t pos0, AttentionState& state, AttentionScratch& s,
                      float* out);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_ATTENTION_H_
