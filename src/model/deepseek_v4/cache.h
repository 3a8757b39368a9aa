// DeepSeek-V4 per-sequence cache pieces and their sizes: RowHistory (rows kept
// by absolute position, the store behind the window ring and the compressor
// state), the rollback policy, and the byte counts of a layer's CacheSpec —
// in the reference layout of spec §4.9 (bf16 values, fp32 compressor state)
// and in this engine's layout (fp32, plus what exact rollback keeps).
//
// Exact rollback (SequenceCache::Truncate to any earlier length n):
//   - every store is indexed by absolute position, so a truncation within the
//     rollback horizon H only moves the end: the window ring keeps W + H rows,
//     each compressor keeps c·r + H un-pooled rows, and compressed entries /
//     index keys are cut to n div r (entry i depends on tokens < (i+1)·r only);
//   - a deeper truncation restores the last checkpoint at or before n (the
//     rows the next token needs, saved every P tokens) and replays the tokens
//     from there to n on the next Forward — the cache keeps every token id.
// The MTP layer's cache cannot replay (its input is the main model's hidden
// state), so it keeps every row (horizon "all").
//
// Dimensions: W window, A head_dim, r ratio, c = 2 for CSA else 1, ID index
// head dim, H rollback horizon, P checkpoint interval, N context tokens.
#ifndef DSV4_MODEL_DEEPSEEK_V4_CACHE_H_
#define DSV4_MODEL_DEEPSEEK_V4_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/byte_io.h"
#include "base/check.h"
#include "model/deepseek_v4/plan.h"

namespace dsv4::deepseek_v4 {

// How far back a cache can be truncated in place, and how it gets further.
struct RollbackOptions {
  // H: tokens a Truncate can drop without a replay (speculative decoding drops
  // at most its draft length). kAll keeps every row (no replay ever, memory
  // grows by the window kv and compressor rows per token).
  int64_t horizon = 16;
  // P: a checkpoint of the rows the next token needs every P tokens; a deeper
  // Truncate(n) replays from the last one ≤ n (< P tokens). 0: no checkpoints
  // (replay from 0). A checkpoint holds W window rows per layer: at 16384 they
  // add about 5 % to V4-Flash's per-token cache growth (`dsv4 inspect --context`).
  int64_t checkpoint_interval = 16384;
  static constexpr int64_t kAll = -1;
};

// Rows of `width` floats kept by absolute position: the newest `slots`
// positions in a ring (position p in slot p mod slots), or every position
// (slots = 0, grown on demand). Knows which positions it still holds, so a
// cache can tell whether a truncation is possible in place.
class RowHistory {
 public:
  void Init(int64_t width, int64_t slots);
  // Holds nothing; the next Append is position `first` (a restart or a restore).
  void Reset(int64_t first = 0);
  // Unbounded histories: room for positions < n without reallocating.
  void Reserve(int64_t n);

  // The row of position p = end() for writing; afterwards end() = p + 1 and
  // the oldest position held is max(begin(), p + 1 − slots).
  float* Append(int64_t p);
  const float* Row(int64_t p) const {
    DCHECK(p >= begin_ && p < end_, "row %lld not held [%lld, %lld)", static_cast<long long>(p),
           static_cast<long long>(begin_), static_cast<long long>(end_));
    return data_.data() + Slot(p) * width_;
  }
  // Drops the rows of positions ≥ p.
  void Truncate(int64_t p);
  bool Holds(int64_t first, int64_t last) const {  // every position in [first, last)
    return first >= last || (first >= begin_ && last <= end_);
  }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int64_t width() const { return width_; }
  bool unbounded() const { return slots_ == 0; }
  // Copies rows [first, last) out (appending to `out`) / back in, as the only rows held.
  void Save(int64_t first, int64_t last, std::vector<float>& out) const;
  void Restore(int64_t first, int64_t last, const float* rows);
  int64_t allocated_bytes() const { return static_cast<int64_t>(data_.capacity() * sizeof(float)); }
  // Every row held, with its positions (a saved sequence state), and back:
  // Read takes rows of the same width only, keeps the newest `slots` of them
  // in a ring, and returns false on a width mismatch or data past the end.
  void Write(ByteWriter& w) const;
  [[nodiscard]] bool Read(ByteReader& r);

 private:
  int64_t Slot(int64_t p) const { return slots_ == 0 ? p : p % slots_; }
  int64_t width_ = 0;
  int64_t slots_ = 0;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  std::vector<float> data_;  // [slots or N, width]
};

// Bytes of one layer's cache, by part.
struct CacheBytes {
  int64_t ring = 0;         // window kv (+ the rollback horizon here)
  int64_t compressed = 0;   // compressed kv entries
  int64_t index_keys = 0;   // indexer keys
  int64_t state = 0;        // compressor state: un-pooled rows (k and gate)
  int64_t checkpoints = 0;  // rollback checkpoints (this engine only)
  int64_t total() const { return ring + compressed + index_keys + state + checkpoints; }
  CacheBytes& operator+=(const CacheBytes& o);
};

// The reference layout of spec §4.9 for a sequence of n tokens: ring W × A and
// entries in bf16, compressor state c·r rows × c·width × (k, gate) in fp32.
CacheBytes ReferenceCacheBytes(const CacheSpec& spec, int64_t n_tokens);
// This engine's layout: fp32 values, W + H ring rows, c·r + H compressor rows
// (all rows of n tokens with horizon kAll), and one checkpoint per P tokens.
CacheBytes EngineCacheBytes(const CacheSpec& spec, int64_t n_tokens, const RollbackOptions& rb);

// Positions of the rows a layer needs to continue after n tokens: the window
// [n − W, n) and the compressor rows from the start of the window being filled
// (CSA: of the previous, complete one) to n.
int64_t RingRowsFrom(const CacheSpec& spec, int64_t n_tokens);
int64_t CompressorRowsFrom(const CacheSpec& spec, int64_t n_tokens);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_CACHE_H_
