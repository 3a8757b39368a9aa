// DeepSeek-V4 cache pieces and their sizes (see cache.h).
#include "model/deepseek_v4/cache.h"

#include <algorithm>
#include <cstring>

namespace dsv4::deepseek_v4 {

void RowHistory::Init(int64_t width, int64_t slots) {
  CHECK(width > 0 && slots >= 0);
  width_ = width;
  slots_ = slots;
  data_.assign(slots * width, 0.0f);
  Reset();
}

void RowHistory::Reset(int64_t first) { begin_ = end_ = first; }

void RowHistory::Reserve(int64_t n) {
  if (slots_ == 0 && static_cast<int64_t>(data_.capacity()) < n * width_) data_.reserve(n * width_);
}

float* RowHistory::Append(int64_t p) {
  CHECK(p == end_, "RowHistory: append of position %lld, expected %lld", static_cast<long long>(p),
        static_cast<long long>(end_));
  if (slots_ == 0) {
    if (static_cast<int64_t>(data_.size()) < (p + 1) * width_) {
      // Geometric growth unless Reserve sized it; new rows are written at once.
      if (static_cast<int64_t>(data_.capacity()) < (p + 1) * width_) {
        data_.reserve(std::max<int64_t>(2 * data_.capacity(), (p + 1) * width_));
      }
      data_.resize((p + 1) * width_);
    }
  }
  end_ = p + 1;
  if (slots_ > 0) begin_ = std::max(begin_, end_ - slots_);
  return data_.data() + Slot(p) * width_;
}

void RowHistory::Truncate(int64_t p) {
  if (p <= begin_) {
    Reset(p);  // nothing below p is held
  } else {
    end_ = std::min(end_, p);
  }
}

void RowHistory::Save(int64_t first, int64_t last, std::vector<float>& out) const {
  CHECK(Holds(first, last));
  for (int64_t p = first; p < last; ++p) {
    const float* row = Row(p);
    out.insert(out.end(), row, row + width_);
  }
}

void RowHistory::Restore(int64_t first, int64_t last, const float* rows) {
  Reset(first);
  for (int64_t p = first; p < last; ++p) {
    std::memcpy(Append(p), rows + (p - first) * width_, width_ * sizeof(float));
  }
}

void RowHistory::Write(ByteWriter& w) const {
  w.Put(width_);
  w.Put(begin_);
  w.Put(end_);
  for (int64_t p = begin_; p < end_; ++p) w.PutBytes(Row(p), width_ * sizeof(float));
}

bool RowHistory::Read(ByteReader& r) {
  int64_t width = 0, begin = 0, end = 0;
  if (!r.Get(width) || !r.Get(begin) || !r.Get(end)) return false;
  if (width != width_ || begin < 0 || end < begin) return false;
  if (width == 0) {  // a store the layer does not have
    Reset(end);
    return true;
  }
  const uint64_t bytes = static_cast<uint64_t>(end - begin) * width * sizeof(float);
  if (bytes / sizeof(float) / width != static_cast<uint64_t>(end - begin) || bytes > r.left()) {
    return false;
  }
  Reset(begin);
  if (slots_ == 0) Reserve(end);
  std::vector<float> skip(width);
  for (int64_t p = begin; p < end; ++p) {
    // A ring keeps the newest `slots` rows; older ones are read past.
    const bool kept = slots_ == 0 || p >= end - slots_;
    if (!kept) {
      if (!r.GetBytes(skip.data(), width * sizeof(float))) return false;
      Reset(p + 1);
      continue;
    }
    if (!r.GetBytes(Append(p), width * sizeof(float))) return false;
  }
  return true;
}

CacheBytes& CacheBytes::operator+=(const CacheBytes& o) {
  ring += o.ring;
  compressed += o.compressed;
  index_keys += o.index_keys;
  state += o.state;
  checkpoints += o.checkpoints;
  return *this;
}

int64_t RingRowsFrom(const CacheSpec& s, int64_t n) { return std::max<int64_t>(0, n - s.window); }

int64_t CompressorRowsFrom(const CacheSpec& s, int64_t n) {
  if (s.compress_ratio == 0) return n;
  const int64_t window_start = n / s.compress_ratio * s.compress_ratio;
  return std::max<int64_t>(0, window_start - (s.overlap ? s.compress_ratio : 0));
}

CacheBytes ReferenceCacheBytes(const CacheSpec& s, int64_t n) {
  constexpr int64_t kBf16 = 2, kF32 = 4;
  CacheBytes b;
  b.ring = s.window * s.head_dim * kBf16;
  if (s.compress_ratio > 0) {
    const int64_t entries = n / s.compress_ratio;
    const int64_t rows = s.state_rows();
    b.compressed = entries * s.head_dim * kBf16;
    b.state = rows * s.coff() * s.head_dim * kF32 * 2;
    if (s.indexer_head_dim > 0) {
      b.index_keys = entries * s.indexer_head_dim * kBf16;
      b.state += rows * s.coff() * s.indexer_head_dim * kF32 * 2;
    }
  }
  return b;
}

CacheBytes EngineCacheBytes(const CacheSpec& s, int64_t n, const RollbackOptions& rb) {
  constexpr int64_t kF32 = 4;
  const bool all = rb.horizon == RollbackOptions::kAll;
  CacheBytes b;
  const int64_t ring_rows = all ? n : s.window + rb.horizon;
  b.ring = ring_rows * s.head_dim * kF32;
  // Compressor rows hold k and gate+ape, c·width each.
  const int64_t row_values = s.coff() * (s.head_dim + s.indexer_head_dim) * 2;
  if (s.compress_ratio > 0) {
    const int64_t entries = n / s.compress_ratio;
    b.compressed = entries * s.head_dim * kF32;
    b.index_keys = entries * s.indexer_head_dim * kF32;
    b.state = (all ? n : s.state_rows() + rb.horizon) * row_values * kF32;
  }
  if (!all && rb.checkpoint_interval > 0) {
    for (int64_t p = rb.checkpoint_interval; p <= n; p += rb.checkpoint_interval) {
      b.checkpoints += (p - RingRowsFrom(s, p)) * s.head_dim * kF32;
      if (s.compress_ratio > 0) b.checkpoints += (p - CompressorRowsFrom(s, p)) * row_values * kF32;
    }
  }
  return b;
}

}  // namespace dsv4::deepseek_v4
