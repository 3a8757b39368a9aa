// Engram: DeepSeek-V4.1's n-gram hash memory (reference: DeepSeek's
// inference/engram.py, and model.py's Engram / ParallelEngramEmbedding).
//
// At a few layers, each position looks up rows of a large FP8 table by hashes
// of the n-grams (2-gram .. max_ngram-gram) that end there, projects them
// (`wkv`) into one key per hyper-connection copy plus a shared value, and adds
// the value to each copy of the residual stream through a sigmoid gate (a
// normalized dot product of stream and key). The building blocks, in order:
//
//   EngramLayout     the bucket layout (one prime-sized range per layer, n-gram
//                    size and head) and the hash multipliers, from EngramParams
//   EngramHasher     token ids -> hash ids (needs the tokenizer's compressed
//                    token map, tokenizer/token_map.h, passed in by the engine)
//   EngramSequence   one sequence's hashing state across calls (prefill chunks,
//                    decode, truncation)
//   EngramForward    rows -> wkv -> gate, in place on the residual stream
//
// Independent of DeepSeekV4Config: the caller fills EngramParams from its
// config (the engram_* fields of the released config.json).
#ifndef DSV4_MODEL_DEEPSEEK_V4_ENGRAM_H_
#define DSV4_MODEL_DEEPSEEK_V4_ENGRAM_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/deepseek_v4/weights.h"
#include "tensor/tensor.h"

namespace dsv4::deepseek_v4 {

// The engram_* fields of config.json (names without the prefix).
struct EngramParams {
  std::vector<int32_t> layer_ids;       // engram_layer_ids: the layers with an Engram block
  std::vector<int64_t> num_embeddings;  // engram_num_embeddings: table rows, per Engram layer
  int32_t max_ngram_size = 1;           // engram_max_ngram_size: n-grams 2..this are hashed
  int64_t vocab_size = 0;               // engram_vocab_size: where the prime search starts
  int32_t n_heads = 0;                  // engram_n_heads: hashes per n-gram size
  int32_t head_dim = 0;                 // engram_head_dim: table row width
  int32_t pad_id = 2;                   // engram_pad_id: the token filling missing history
  int64_t compressed_vocab_size = 0;    // engram_compressed_vocab_size
};

// Deterministic primality for any 64-bit n (Miller-Rabin with the bases that
// are exact below 2^64).
bool IsPrime64(uint64_t n);

// The hash multipliers of engram.compute_hash_multipliers, [layer][lookback]
// flattened: numpy default_rng(10007 · layer_id).integers(0, bound,
// max_ngram_size, int64) · 2 + 1, bound = max(1, (INT64_MAX //
// compressed_vocab_size) // 2). Odd, and small enough that a compressed id
// times one never overflows int64. compressed_vocab_size >= 1, layer ids >= 0.
std::vector<int64_t> EngramHashMultipliers(std::span<const int32_t> layer_ids,
                                           int32_t max_ngram_size, int64_t compressed_vocab_size);

// engram.EngramLayout plus the hash multipliers and bucket offsets.
struct EngramLayout {
  std::vector<int32_t> layer_ids;
  std::vector<int64_t> num_embeddings;
  int32_t max_ngram_size = 0;
  int32_t n_heads = 0;
  int32_t head_dim = 0;
  int32_t pad_id = 0;
  int64_t compressed_vocab_size = 0;
  // [n_layers][n_cols]: column (i − 2)·n_heads + h is the i-gram's head h. A
  // column's hash lands in [offsets, offsets + primes) of its layer's table.
  std::vector<int64_t> primes;
  std::vector<int64_t> offsets;
  std::vector<int64_t> multipliers;  // [n_layers][max_ngram_size]

  int32_t n_layers() const { return static_cast<int32_t>(layer_ids.size()); }
  // Hash ids per position and Engram layer: (max_ngram_size − 1) · n_heads.
  int32_t n_cols() const { return (max_ngram_size - 1) * n_heads; }
  // The index of `layer_id` among layer_ids; −1 when it has no Engram block.
  int32_t LayerIndex(int32_t layer_id) const;
  // Table bytes read per position and Engram layer: n_cols rows of head_dim
  // FP8 values plus head_dim / 32 one-byte E8M0 scales.
  int64_t BytesPerTokenPerLayer() const { return int64_t{n_cols()} * (head_dim + head_dim / 32); }
};

// EngramLayout.from_args: for each layer, n-gram size and head, the smallest
// prime above a running value that restarts at vocab_size − 1 for every
// (layer, n-gram size), never handing out a prime twice in the whole layout;
// offsets are the exclusive running sum of each layer's primes. Checks the
// params (InvalidArgument naming the engram_* field): at least one layer, ids
// distinct and >= 0, one num_embeddings per layer and each >= the sum of its
// layer's primes, max_ngram_size >= 2, n_heads >= 1, head_dim a positive
// multiple of 32, vocab_size >= 1 with primes below 2^62,
// compressed_vocab_size >= 1, pad_id >= 0.
Result<EngramLayout> MakeEngramLayout(const EngramParams& params);

// Token ids -> hash ids (engram.NgramHashState). Immutable; one per model.
class EngramHasher {
 public:
  // A compressed id that stops every n-gram reaching back over it (an image
  // position: NgramHashState.DEAD).
  static constexpr int32_t kDead = -1;

  // `token_map`: token id -> compressed id (tokenizer/token_map.h);
  // `map_count`: its number of distinct compressed ids, which must equal the
  // layout's compressed_vocab_size (the multipliers derive from it; a mismatch
  // would silently rehash everything). pad_id must be a token of the map.
  static Result<EngramHasher> Make(const EngramLayout& layout, std::vector<int32_t> token_map,
                                   int32_t map_count);

  const EngramLayout& layout() const { return layout_; }
  int32_t vocab_size() const { return static_cast<int32_t>(token_map_.size()); }
  // The compressed id of a token (CHECKs 0 <= token < vocab_size()).
  int32_t Compress(int32_t token) const;
  int32_t pad_compressed() const { return pad_compressed_; }

  // Hash ids of the positions of `current` (compressed ids, kDead allowed),
  // which follow the positions of `context` (the sequence's compressed ids
  // just before them, oldest first; only the last max_ngram_size − 1 are read,
  // and a shorter context means the sequence starts there). Writes
  // out[t][layer][col], n_layers · n_cols values per position.
  void Hash(std::span<const int32_t> context, std::span<const int32_t> current, int64_t* out) const;

 private:
  EngramLayout layout_;
  std::vector<int32_t> token_map_;
  int32_t pad_compressed_ = 0;
};

// One sequence's n-gram history: the compressed ids of every position so far
// (4 bytes a position, so that truncating to any length — a rejected draft, a
// reused prefix — restores exactly the history the next call needs).
class EngramSequence {
 public:
  explicit EngramSequence(const EngramHasher& hasher) : hasher_(&hasher) {}

  int64_t size() const { return static_cast<int64_t>(compressed_.size()); }
  const EngramHasher& hasher() const { return *hasher_; }
  // Keeps the first n positions (n <= size()).
  void Truncate(int64_t n);
  // Appends `tokens` as positions size() .. size() + n − 1 and writes their
  // hash ids ([n][n_layers][n_cols]) to `out`. `live` is empty, or one flag
  // per token: 0 marks a dead position (image span).
  void Append(std::span<const int32_t> tokens, std::span<const uint8_t> live, int64_t* out);

 private:
  const EngramHasher* hasher_;
  std::vector<int32_t> compressed_;
};

// One Engram layer's weights: EngramWeights (weights.h), bound from layers.{i}.engram.*.

// q_weight · k_weight elementwise in fp32 (the reference only uses the
// product), from [hc, dim] f32/bf16/f16 tensors. InvalidArgument when the
// shapes differ from [hc, dim] or the dtype is not a float format.
Result<std::vector<float>> EngramGateWeight(const TensorView& q_weight, const TensorView& k_weight,
                                            int64_t hc, int64_t dim);

// Checks an Engram layer's weights against the layout (`layer_index` among
// its layers), hc and dim: shapes and dtypes, InvalidArgument naming the
// tensor (`prefix`, e.g. "layers.1.engram.") and what was expected.
Status CheckEngramWeights(const EngramWeights& w, const EngramLayout& layout, int32_t layer_index,
                          int64_t hc, int64_t dim, std::string_view prefix);

// Rows and bytes of the table read (EngramGatherRows counts them).
struct EngramReadStats {
  int64_t rows = 0;
  int64_t bytes = 0;
};

// out[t, c·head_dim + j] = embed[ids[t·ids_stride + c], j] · 2^(scale − 127)
// (exact in fp32), for c < n_cols. Reads only those rows of the (mapped) table.
// CHECKs every id against the table's rows.
void EngramGatherRows(const EngramWeights& w, const int64_t* ids, int64_t ids_stride,
                      int64_t n_tokens, int64_t n_cols, float* out, EngramReadStats* stats);

// The gate, in place on h [T, hc, dim], from kv [T, (hc + 1)·dim] (hc keys,
// then the value): per token t and copy c,
//   rstd = rsqrt(mean(h_c²) + eps) · rsqrt(mean(key_c²) + eps)
//   dot  = Σ h_c · qk_c · key_c · rstd · dim^−½
//   h_c += sigmoid(sign(dot) · sqrt(max(|dot|, 1e−6))) · value.
// live: null, or [T] flags; 0 leaves that token's h untouched (gate shut).
void EngramGate(float* h, const float* kv, const float* qk, const uint8_t* live, int64_t n_tokens,
                int64_t hc, int64_t dim, float eps);

// Reusable buffers of EngramForward.
struct EngramScratch {
  std::vector<float> rows;  // [T, n_cols·head_dim]
  std::vector<float> kv;    // [T, (hc + 1)·dim]
};

// Engram.forward in fp32, in place on the residual stream h [T, hc, dim]:
// gather the rows of `ids` (hash ids, n_cols per token, token t at
// ids + t·ids_stride: an EngramSequence's output at column offset
// layer_index·n_cols with stride n_layers·n_cols), FP8-quantize them in
// blocks of 32 when `act_quant` (the reference's act_quant in front of its FP8
// wkv; rows that are FP8 in 32-blocks already come through it unchanged, unless
// a block's amax is under act_quant's 1e-4 floor), kv = wkv(rows), then
// EngramGate. wkv goes through deepseek_v4::Linear, so its format must be one
// LinearRows takes (the 32×32-tile FP8 of V4.1 needs the matmul's support).
void EngramForward(ThreadPool& pool, float* h, const int64_t* ids, int64_t ids_stride,
                   const uint8_t* live, int64_t n_tokens, const EngramWeights& w,
                   const EngramLayout& layout, int64_t hc, int64_t dim, float eps, bool act_quant,
                   EngramScratch& scratch, EngramReadStats* stats);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_ENGRAM_H_
