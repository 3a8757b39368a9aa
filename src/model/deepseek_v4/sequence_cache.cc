// DeepSeek-V4 per-sequence cache (see sequence_cache.h).
#include "model/deepseek_v4/sequence_cache.h"

#include "base/check.h"

namespace dsv4::deepseek_v4 {

DeepSeekV4Cache::DeepSeekV4Cache(const void* owner, const DeepSeekV4Config& config,
                                 std::span<const LayerPlan> plans, RollbackOptions rollback,
                                 int64_t max_tokens, LayerRole role)
    : owner_(owner), max_tokens_(max_tokens), role_(role), rollback_(rollback) {
  // The MTP layer cannot replay (its input is the main model's hidden state):
  // it keeps every row.
  if (role == LayerRole::kMtp) rollback_.horizon = RollbackOptions::kAll;
  for (const LayerPlan& p : plans) {
    if (p.role != role) continue;
    // A NextN cache holds the first MTP layer; a DSpark cache every stage.
    if (role == LayerRole::kMtp && !config.dspark() && !layers_.empty()) break;
    AttentionState& s = layers_.emplace_back();
    s.Init(config, p, rollback_.horizon);
    s.Reserve(max_tokens);
  }
  tokens_.reserve(max_tokens);
}

int64_t DeepSeekV4Cache::KeepablePrefix(int64_t n) const {
  n = std::min(n, computed_);
  bool in_place = true;
  for (const AttentionState& s : layers_) in_place = in_place && s.CanTruncate(n);
  if (in_place) return n;
  int64_t best = 0;
  for (const Checkpoint& cp : checkpoints_) {
    if (cp.n_tokens <= n) best = cp.n_tokens;
  }
  return best;
}

void DeepSeekV4Cache::Truncate(int64_t n) {
  CHECK(n >= 0 && n <= length_, "Truncate(%lld) of a cache of %lld tokens",
        static_cast<long long>(n), static_cast<long long>(length_));
  length_ = n;
  tokens_.resize(n);
  while (!checkpoints_.empty() && checkpoints_.back().n_tokens > n) checkpoints_.pop_back();
  if (n >= computed_) return;  // only part of a pending replay is dropped
  bool in_place = true;
  for (const AttentionState& s : layers_) in_place = in_place && s.CanTruncate(n);
  if (in_place) {
    for (AttentionState& s : layers_) s.Truncate(n);
    computed_ = n;
  } else if (!checkpoints_.empty()) {
    const Checkpoint& cp = checkpoints_.back();
    for (size_t l = 0; l < layers_.size(); ++l) layers_[l].Restore(cp.layers[l]);
    computed_ = cp.n_tokens;
  } else {
    for (AttentionState& s : layers_) s.Reset();
    computed_ = 0;
  }
}

void DeepSeekV4Cache::Computed(int64_t n) {
  computed_ = n;
  if (checkpointing() && n % rollback_.checkpoint_interval == 0 &&
      (checkpoints_.empty() || checkpoints_.back().n_tokens < n)) {
    Checkpoint& cp = checkpoints_.emplace_back();
    cp.n_tokens = n;
    cp.layers.resize(layers_.size());
    for (size_t l = 0; l < layers_.size(); ++l) layers_[l].Save(n, cp.layers[l]);
  }
}

CacheStats DeepSeekV4Cache::stats() const {
  CacheStats st;
  st.replayed_tokens = replayed_;
  st.checkpoints = static_cast<int64_t>(checkpoints_.size());
  st.allocated_bytes = static_cast<int64_t>(tokens_.capacity() * sizeof(int32_t));
  for (const AttentionState& s : layers_) {
    st.allocated_bytes += s.ring.allocated_bytes();
    for (const CompressorState* c : {&s.compressed, &s.index_keys}) {
      if (c->ratio == 0) continue;
      st.allocated_bytes +=
          c->rows.allocated_bytes() + static_cast<int64_t>(c->entries.capacity() * sizeof(float));
    }
  }
  for (const Checkpoint& cp : checkpoints_) {
    for (const AttentionState::Saved& sv : cp.layers) {
      st.allocated_bytes += static_cast<int64_t>(
          (sv.ring.capacity() + sv.compressed_rows.capacity() + sv.index_rows.capacity()) *
          sizeof(float));
    }
  }
  return st;
}

}  // namespace dsv4::deepseek_v4
