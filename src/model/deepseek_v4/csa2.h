// DeepSeek-V4.1 attention, CSA2: V4's latent attention (low-rank q, one
// shared K=V head, partial RoPE, a sink per head, grouped output projection)
// over a sliding window plus compressed entries — with the compressed cache
// and the indexer shared across layers. Only kv sources compress (r tokens
// pooled by a softmax gate into one latent, r = 1: a plain projection); every
// later layer of the same ratio reads the latest source's entries. Only index
// sources score those entries: their keys are the key owner's latent through
// wk + k_norm, their queries their own. The candidate source keeps the best
// blocks of entries per query (level one of the top-k); index sources after it
// pick inside them (level two). Other compressed layers attend to the latest
// index source's picks. The QAT roundings of the reference are in the forward:
// window kv to FP8 (blocks of 32), compressed entries to FP4 (groups of 16,
// e4m3 scales), index queries and keys to FP4 (groups of 32, power-of-two).
//
// The index-key slot: the reference hands index keys down the stack through
// one shared slot that a key owner refills only when a compression group
// completes in the call, so on a decode step that completes no group of its
// ratio an index source scores the keys of whichever owner published last
// (another layer's, of the previous step). kReference reproduces that;
// kOwner reads the keys of the layer's own kv source (the architectural
// reading: prefill and decode then agree).
//
// Source: the V4.1 reference inference/model.py (Compressor, Indexer,
// select_candidate_blocks, Attention, SharedAttentionRuntime).
//
// Dimensions: T tokens in the call, D hidden, Q q_lora_rank, H heads,
// A head_dim, R rope dims (the last R of A), G o_groups, O o_lora_rank,
// W window, r compress ratio, n entries, IH / ID index heads / head dim,
// k index_topk, B candidate_block_size.
#ifndef DSV4_MODEL_DEEPSEEK_V4_CSA2_H_
#define DSV4_MODEL_DEEPSEEK_V4_CSA2_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/byte_io.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

enum class IndexKeyReading {
  kReference,  // the reference's shared slot (default)
  kOwner,      // each index source reads its own kv source's keys
};

// One sequence's CSA2 stores of one layer, indexed by absolute position
// (window, compressor rows) or entry index (entries, keys).
struct Csa2LayerState {
  // history: rows kept beyond what the next token needs (rollback).
  void Init(const DeepSeekV4Config& c, const LayerPlan& p, int64_t history);
  void Reset();
  // Keeps what the first n tokens made; CanTruncate says whether the rows the
  // token at position n needs are still held.
  void Truncate(int64_t n_tokens);
  bool CanTruncate(int64_t n_tokens) const;
  int64_t allocated_bytes() const;
  // Every store, and back (a saved sequence state); Read false on a layout mismatch.
  void Write(ByteWriter& w) const;
  [[nodiscard]] bool Read(ByteReader& r);

  int64_t window_size = 0;  // W
  int64_t ratio = 0;        // the layer's own compression (kv sources), else 0
  RowHistory window;        // [W + history, A] kv rows, every layer
  RowHistory pending_kv;    // kv sources, r > 1: [r + history, A] un-pooled compressor rows
  RowHistory pending_gate;  // and their gate logits
  RowHistory entries;       // kv sources: [n, A] compressed kv (after RoPE and QAT)
  RowHistory index_keys;    // key owners: [n, ID] index keys (after RoPE and QAT)
};

// What the layers of one sequence hand down the stack during a call (the
// reference's SharedAttentionRuntime), plus the index-key slot, which outlives
// calls (the sequence cache keeps it).
struct Csa2Shared {
  int64_t key_slot = -1;            // the key owner whose keys the slot holds; −1: none yet
  std::vector<int32_t> picks;       // [T, k] the latest index source's picks (−1: none)
  int64_t picks_width = 0;          // k of `picks`
  std::vector<uint8_t> candidates;  // [T, n] the candidate source's kept entries
  int64_t candidates_width = 0;     // n of `candidates`
};

// Per-call scratch, grown as needed and reused.
struct Csa2Scratch {
  std::vector<float> qr, q, kv, o, z, act, ckv, cgate, latent, iq, iw, scores;
  std::vector<float> o_group, key;
  std::vector<int32_t> order;
};

// The attention sublayer of layer `ctx.plan.layer` for one sequence's T tokens
// at positions pos0 .. pos0+T−1. x: [T, D] (= attn_norm(collapse)); out: [T, D].
// states: every main layer's stores of the sequence (a layer reads its kv
// source's entries and its key owner's keys); the layer's own stores gain the
// T tokens. `reading` picks the index keys an index source scores.
void Csa2Attention(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                   int64_t n_tokens, int64_t pos0, std::span<Csa2LayerState> states,
                   Csa2Shared& shared, IndexKeyReading reading, Csa2Scratch& s, float* out);

// The V4.1 DSpark stage's attention (the reference's DSparkAttention: window
// only, no compression). Its ring holds one kv row per committed position,
// made from the draft's main_x (main_norm(main_proj · target features)):
// Csa2DSparkRingRows appends positions pos0 .. pos0+n−1 (main_x [n, D]):
// kv_norm(wkv · main_x), RoPE, FP8 as the window rows.
void Csa2DSparkRingRows(const LayerContext& ctx, const AttentionWeights& w, const float* main_x,
                        int64_t n, int64_t pos0, RowHistory& ring, Csa2Scratch& s);
// A draft block of B rows at positions p+1 .. p+B (x: [B, D]) attends to the
// ring's rows of positions max(0, p−W+1) .. p and all B block rows (no causal
// mask inside the block), with the sink; out: [B, D]. The ring is not changed.
void Csa2DSparkAttention(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                         int64_t n_rows, int64_t p, const RowHistory& ring, Csa2Scratch& s,
                         float* out);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_CSA2_H_
