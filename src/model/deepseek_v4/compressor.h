// The DeepSeek-V4 KV compressor: turns every `r` consecutive tokens of a layer
// into one compressed entry by a learned, per-channel softmax-gated pooling.
// HCA layers (r ≠ 4) pool each window of r tokens on its own; CSA layers
// (r = 4) pool overlapping windows of 2r slots: the first halves of the
// previous window's rows and the second halves of the current window's rows.
// The lightning indexer (indexer.h) runs a second compressor of its own.
//
// Entries are built token by token from the rows the reference keeps for
// decoding (the current window's, and for CSA the previous window's), held by
// absolute position so that prefill, chunked prefill, decode and a rollback
// (cache.h) give the same entries.
//
// Source: specs/deepseek-v4.md §4.4 (reference `Compressor`), §4.8, §11 items
// 12–15.
//
// Dimensions: T tokens in a call, D hidden, r ratio, c = 2 for CSA (overlap)
// else 1, Wd entry width (head_dim for the main compressor, index_head_dim for
// the indexer's), R rope dims (the last R of Wd).
#ifndef DSV4_MODEL_DEEPSEEK_V4_COMPRESSOR_H_
#define DSV4_MODEL_DEEPSEEK_V4_COMPRESSOR_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"  // CompressorWeights

namespace dsv4::deepseek_v4 {

// What happens to an entry after norm + RoPE.
enum class CompressorKind {
  kMain,     // attention keys: FP8 simulation of the nope dims (block 64) when kv_quant
  kIndexer,  // index keys: Hadamard rotation, then FP4 simulation (block 32) when index_quant
};

// Per-sequence state of one compressor: the un-pooled rows by absolute
// position (cache.h RowHistory: the window being filled, for CSA also the
// previous one, plus the rollback horizon) and the entries built so far.
struct CompressorState {
  // history: rows kept beyond the c·r the pooling needs (RollbackOptions::horizon),
  // or RollbackOptions::kAll.
  void Init(int64_t ratio, int64_t width, int64_t history);
  // Forgets everything (a new sequence).
  void Reset();
  // Keeps what the first n tokens made: entries n div r, rows below n.
  void Truncate(int64_t n_tokens);
  // Whether Truncate(n) leaves every row the next token needs.
  bool CanTruncate(int64_t n_tokens) const;
  int64_t n_entries() const { return static_cast<int64_t>(entries.size()) / width; }
  const float* entry(int64_t i) const { return entries.data() + i * width; }
  // Row p: k [c·Wd] then gate logits + ape [c·Wd].
  const float* row_k(int64_t p) const { return rows.Row(p); }
  const float* row_g(int64_t p) const { return rows.Row(p) + coff * width; }

  int64_t ratio = 0;           // r
  int64_t width = 0;           // Wd
  int64_t coff = 1;            // c
  RowHistory rows;             // [c·r + H, 2·c·Wd] (k | gate + ape) of position p
  std::vector<float> entries;  // [n, Wd] entry i pools window i = tokens [i·r, (i+1)·r)
};

struct CompressorScratch {
  std::vector<float> kv;                // [T, c·Wd]
  std::vector<float> score;             // [T, c·Wd]
  std::vector<float> slots;             // [threads, 2r · lanes] SoftmaxPool's scratch per thread
  std::vector<const float*> slot_rows;  // [threads, 2 · 2r] a window's score, value rows
  std::vector<float> missing;           // [2, Wd] CSA's slots before window 0: gate −inf, value 0
  std::vector<float> entry;             // [windows, Wd] the entries this call completes
  LinearWeight wkv, wgate;              // the jobs' weights (CompressorJobs)
};

// The compressor in two steps, so that its two products run in the pooled
// step of the attention's own projections (one fork-join for all that read
// the attention input x):
//
// CompressorJobs: k = wkv·x and g = wgate·x (fp32: the reference upcasts x
// and the weights) for n_rows rows of x [n_rows, D] into s.kv and s.score
// [n_rows, c·Wd], as two LinearJobs written to jobs[0], jobs[1] (valid while
// s lives). Returns 2.
int64_t CompressorJobs(const CompressorWeights& w, const float* x, int64_t n_rows,
                       CompressorScratch& s, LinearJob* jobs);
// CompressorFinish, after the jobs ran: feeds T tokens at positions pos0 ..
// pos0+T−1 (rows row0 .. row0+T−1 of the jobs' output; pos0 = the state's
// end) to the compressor: g += ape[p mod r]; when (p+1) mod r == 0 the window
// p div r is pooled per channel (softmax of g over its slots, weighted sum of
// k) into a new entry, which is then RMS-normalised, rotated (RoPE on its last
// R dims at position i·r, the window's first token) and post-processed by
// `kind`. Appends to state.entries; the T rows join state.rows.
void CompressorFinish(const LayerContext& ctx, const CompressorWeights& w, CompressorKind kind,
                      TokenRun run, CompressorState& state, CompressorScratch& s);

// y = x · H · n^−½ in place, H the natural-order (Sylvester) ±1 Walsh–Hadamard
// matrix, n a power of two (the reference's `rotate_activation`, spec §4.5).
void HadamardRotate(float* x, int64_t n);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_COMPRESSOR_H_
