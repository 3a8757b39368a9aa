// DeepSeek-V4 per-sequence cache (see sequence_cache.h).
#include "model/deepseek_v4/sequence_cache.h"

#include <string>

#include "base/check.h"

namespace dsv4::deepseek_v4 {

DeepSeekV4Cache::DeepSeekV4Cache(const void* owner, const DeepSeekV4Config& config,
                                 std::span<const LayerPlan> plans, RollbackOptions rollback,
                                 int64_t max_tokens, LayerRole role)
    : owner_(owner),
      max_tokens_(max_tokens),
      vocab_size_(config.vocab_size),
      role_(role),
      rollback_(rollback) {
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

namespace {
constexpr uint32_t kStateTag = 0x31433456;  // "V4C1"
}  // namespace

Status DeepSeekV4Cache::SaveState(std::vector<uint8_t>& out) const {
  ByteWriter w(out);
  w.Put(kStateTag);
  w.Put(static_cast<int32_t>(role_));
  w.Put(n_layers());
  w.Put(length_);
  w.Put(computed_);
  w.PutBytes(tokens_.data(), tokens_.size() * sizeof(int32_t));
  for (const AttentionState& s : layers_) s.Write(w);
  return Status::Ok();
}

Status DeepSeekV4Cache::LoadState(std::span<const uint8_t> bytes) {
  Truncate(0);
  checkpoints_.clear();
  ByteReader r(bytes);
  uint32_t tag = 0;
  int32_t role = 0;
  int64_t n_layers = 0, length = 0, computed = 0;
  if (!r.Get(tag) || !r.Get(role) || !r.Get(n_layers) || !r.Get(length) || !r.Get(computed)) {
    return DataLoss("DeepSeek-V4 cache state: truncated header");
  }
  if (tag != kStateTag || role != static_cast<int32_t>(role_) || n_layers != this->n_layers()) {
    return InvalidArgument("DeepSeek-V4 cache state: another cache layout (" +
                           std::to_string(n_layers) + " layers, expected " +
                           std::to_string(this->n_layers()) + ")");
  }
  if (length < 0 || computed < 0 || computed > length) {
    return DataLoss("DeepSeek-V4 cache state: bad lengths");
  }
  if (length > max_tokens_) {
    return OutOfRange("DeepSeek-V4 cache state of " + std::to_string(length) +
                      " tokens; this cache holds " + std::to_string(max_tokens_));
  }
  std::vector<int32_t> tokens;
  if (!r.GetArray(static_cast<uint64_t>(length), tokens)) {
    return DataLoss("DeepSeek-V4 cache state: truncated token ids");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size_) return DataLoss("DeepSeek-V4 cache state: bad token id");
  }
  for (AttentionState& s : layers_) {
    if (!s.Read(r, computed)) {
      for (AttentionState& l : layers_) l.Reset();
      return DataLoss("DeepSeek-V4 cache state: a layer's stores do not fit this cache");
    }
  }
  if (r.left() != 0) {
    for (AttentionState& l : layers_) l.Reset();
    return DataLoss("DeepSeek-V4 cache state: trailing bytes");
  }
  tokens_ = std::move(tokens);
  tokens_.reserve(max_tokens_);
  length_ = length;
  computed_ = computed;
  return Status::Ok();
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
