// DeepSeekV4Cache: one sequence's decoding state for a DeepSeek-V4 model —
// the attention stores of every main layer (or of the first MTP layer), the
// token ids (for replays after a deep truncation) and the rollback
// checkpoints. cache.h describes what each layer keeps and how Truncate stays
// exact.
#ifndef DSV4_MODEL_DEEPSEEK_V4_SEQUENCE_CACHE_H_
#define DSV4_MODEL_DEEPSEEK_V4_SEQUENCE_CACHE_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/plan.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

// What a cache holds beyond its length (tests, benchmarks).
struct CacheStats {
  int64_t replayed_tokens = 0;  // re-run by Forward after truncations past the horizon
  int64_t checkpoints = 0;      // rollback checkpoints held
  int64_t allocated_bytes = 0;  // every store, checkpoints and token ids (capacity)
};

// Per-sequence state: the attention stores of every main layer (or of the
// first MTP layer), the token ids (for replays) and the rollback checkpoints.
// See cache.h for how Truncate stays exact. Made by DeepSeekV4Model::NewCache
// (main layers) and NewMtpCache (the MTP layer).
class DeepSeekV4Cache final : public SequenceCache {
 public:
  // `owner` identifies the model that made the cache (its calls check it).
  DeepSeekV4Cache(const void* owner, const DeepSeekV4Config& config,
                  std::span<const LayerPlan> plans, RollbackOptions rollback, int64_t max_tokens,
                  LayerRole role);

  int64_t length() const override { return length_; }

  // Keeps the first n tokens, exactly: in place when every layer still holds
  // the rows position n needs (within the rollback horizon), else from the
  // last checkpoint ≤ n (or from scratch), replaying up to n on the next call.
  void Truncate(int64_t n) override;
  // n when every layer still holds what position n needs (within the rollback
  // horizon), else the last checkpoint ≤ n (0 without one); never past the
  // tokens computed.
  int64_t KeepablePrefix(int64_t n) const override;
  // The tokens, the tokens computed and every layer's stores (not the
  // rollback checkpoints: a deeper Truncate of a loaded cache replays from 0).
  Status SaveState(std::vector<uint8_t>& out) const override;
  Status LoadState(std::span<const uint8_t> bytes) override;

  const void* owner() const { return owner_; }
  LayerRole role() const { return role_; }
  int64_t max_tokens() const { return max_tokens_; }
  AttentionState& layer(int64_t l) { return layers_[l]; }
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }

  // Tokens the layers hold; [computed, length) are replayed by the next Forward.
  int64_t computed() const { return computed_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  void Append(std::span<const int32_t> t) {
    tokens_.insert(tokens_.end(), t.begin(), t.end());
    length_ += static_cast<int64_t>(t.size());
  }
  // Where a segment of work starting at `pos` must stop: the next checkpoint.
  int64_t SegmentEnd(int64_t pos, int64_t end) const {
    if (!checkpointing()) return end;
    const int64_t p = rollback_.checkpoint_interval;
    return std::min(end, (pos / p + 1) * p);
  }
  // The layers now hold the first `n` tokens; a checkpoint is taken at multiples of P.
  void Computed(int64_t n);
  void CountReplay(int64_t n) { replayed_ += n; }

  CacheStats stats() const;

 private:
  struct Checkpoint {
    int64_t n_tokens = 0;
    std::vector<AttentionState::Saved> layers;
  };
  bool checkpointing() const {
    return rollback_.horizon != RollbackOptions::kAll && rollback_.checkpoint_interval > 0;
  }

  const void* owner_;
  int64_t max_tokens_;
  int64_t vocab_size_;
  LayerRole role_;
  RollbackOptions rollback_;
  int64_t length_ = 0;                   // tokens in the sequence
  int64_t computed_ = 0;                 // tokens whose state the layers hold
  int64_t replayed_ = 0;                 // tokens re-run after deep truncations
  std::vector<int32_t> tokens_;          // [length] ids, for replays
  std::vector<Checkpoint> checkpoints_;  // ascending n_tokens, every P tokens
  std::vector<AttentionState> layers_;   // [L] (main) or [1] (MTP)
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_SEQUENCE_CACHE_H_
