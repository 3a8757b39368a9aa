// Engram (engram.h): layout, hashing, table lookup and the gated write into
// the residual stream.
#include "model/deepseek_v4/engram.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include "base/check.h"
#include "base/float_types.h"
#include "base/numpy_random.h"
#include "fmt/format.h"
#include "ops/vec_ops.h"
#include "tensor/dtype.h"

namespace dsv4::deepseek_v4 {
namespace {

constexpr int64_t kScaleBlock = 32;              // one E8M0 scale per 32 table values
constexpr int64_t kMaxPrime = int64_t{1} << 62;  // primes are searched below this
constexpr float kGateClamp = 1e-6f;              // Engram.clamp_value

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t PowMod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e != 0) {
    if (e & 1) r = MulMod(r, a, m);
    a = MulMod(a, a, m);
    e >>= 1;
  }
  return r;
}

Status EngramError(const std::string& what, const std::string& hint = {}) {
  return InvalidArgument("engram config: " + what, hint);
}

}  // namespace

bool IsPrime64(uint64_t n) {
  if (n < 2) return false;
  static constexpr uint64_t kSmall[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (uint64_t p : kSmall) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  // These bases decide primality for every n < 2^64 (Sinclair / Jaeschke).
  for (uint64_t a : kSmall) {
    uint64_t x = PowMod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = MulMod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

std::vector<int64_t> EngramHashMultipliers(std::span<const int32_t> layer_ids,
                                           int32_t max_ngram_size, int64_t compressed_vocab_size) {
  CHECK(compressed_vocab_size >= 1 && max_ngram_size >= 1, "bad engram multiplier arguments");
  const int64_t bound =
      std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
  std::vector<int64_t> out;
  out.reserve(layer_ids.size() * static_cast<size_t>(max_ngram_size));
  for (int32_t layer_id : layer_ids) {
    CHECK(layer_id >= 0, "engram layer id %d < 0", layer_id);
    NumpyPcg64 rng(uint64_t{10007} * static_cast<uint64_t>(layer_id));
    for (int64_t v : rng.IntegersInt64(0, bound, max_ngram_size)) out.push_back(v * 2 + 1);
  }
  return out;
}

int32_t EngramLayout::LayerIndex(int32_t layer_id) const {
  auto it = std::find(layer_ids.begin(), layer_ids.end(), layer_id);
  return it == layer_ids.end() ? -1 : static_cast<int32_t>(it - layer_ids.begin());
}

Result<EngramLayout> MakeEngramLayout(const EngramParams& p) {
  if (p.layer_ids.empty()) {
    return EngramError("engram_layer_ids is empty",
                       "a model without Engram layers needs no Engram layout");
  }
  for (size_t i = 0; i < p.layer_ids.size(); ++i) {
    if (p.layer_ids[i] < 0) {
      return EngramError(fmt::format("engram_layer_ids[{}] = {} is negative", i, p.layer_ids[i]));
    }
    for (size_t j = 0; j < i; ++j) {
      if (p.layer_ids[j] == p.layer_ids[i]) {
        return EngramError(fmt::format("engram_layer_ids lists layer {} twice", p.layer_ids[i]));
      }
    }
  }
  if (p.num_embeddings.size() != p.layer_ids.size()) {
    return EngramError(fmt::format("engram_num_embeddings has {} entries for {} engram_layer_ids",
                                   p.num_embeddings.size(), p.layer_ids.size()),
                       "one table size per Engram layer");
  }
  if (p.max_ngram_size < 2) {
    return EngramError(fmt::format("engram_max_ngram_size = {} (need >= 2)", p.max_ngram_size));
  }
  if (p.n_heads < 1) return EngramError(fmt::format("engram_n_heads = {} (need >= 1)", p.n_heads));
  if (p.head_dim < kScaleBlock || p.head_dim % kScaleBlock != 0) {
    return EngramError(
        fmt::format("engram_head_dim = {} (need a positive multiple of 32)", p.head_dim),
        "table rows carry one scale per 32 values");
  }
  if (p.vocab_size < 1 || p.vocab_size >= kMaxPrime / 2) {
    return EngramError(fmt::format("engram_vocab_size = {} (need 1 .. 2^61)", p.vocab_size));
  }
  if (p.compressed_vocab_size < 1) {
    return EngramError(
        fmt::format("engram_compressed_vocab_size = {} (need >= 1)", p.compressed_vocab_size));
  }
  if (p.pad_id < 0) return EngramError(fmt::format("engram_pad_id = {} is negative", p.pad_id));

  EngramLayout l;
  l.layer_ids = p.layer_ids;
  l.num_embeddings = p.num_embeddings;
  l.max_ngram_size = p.max_ngram_size;
  l.n_heads = p.n_heads;
  l.head_dim = p.head_dim;
  l.pad_id = p.pad_id;
  l.compressed_vocab_size = p.compressed_vocab_size;
  const int64_t n_cols = l.n_cols();
  std::unordered_set<int64_t> seen;
  for (int32_t li = 0; li < l.n_layers(); ++li) {
    int64_t total = 0;
    for (int32_t ng = 0; ng + 1 < p.max_ngram_size; ++ng) {
      int64_t current = p.vocab_size - 1;
      for (int32_t h = 0; h < p.n_heads; ++h) {
        int64_t candidate = current + 1;
        while (!IsPrime64(static_cast<uint64_t>(candidate)) || seen.count(candidate) != 0) {
          if (++candidate >= kMaxPrime) {
            return EngramError(
                fmt::format("no bucket prime below 2^62 above engram_vocab_size {}", p.vocab_size));
          }
        }
        seen.insert(candidate);
        current = candidate;
        l.primes.push_back(candidate);
        l.offsets.push_back(total);
        total += candidate;
      }
    }
    if (total > p.num_embeddings[li]) {
      return EngramError(
          fmt::format("layer {}: the hash buckets need {} table rows, engram_num_embeddings[{}] "
                      "is {}",
                      p.layer_ids[li], total, li, p.num_embeddings[li]),
          "engram_vocab_size, engram_n_heads and engram_max_ngram_size must match the table");
    }
  }
  CHECK(static_cast<int64_t>(l.primes.size()) == l.n_layers() * n_cols, "engram layout size");
  l.multipliers = EngramHashMultipliers(l.layer_ids, l.max_ngram_size, l.compressed_vocab_size);
  return l;
}

// ---------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------

Result<EngramHasher> EngramHasher::Make(const EngramLayout& layout, std::vector<int32_t> token_map,
                                        int32_t map_count) {
  if (map_count != layout.compressed_vocab_size) {
    return InvalidArgument(
        fmt::format("engram: the tokenizer's compressed token map has {} ids, the model's "
                    "engram_compressed_vocab_size is {}",
                    map_count, layout.compressed_vocab_size),
        "use the tokenizer the model was released with");
  }
  if (layout.pad_id >= static_cast<int64_t>(token_map.size())) {
    return InvalidArgument(
        fmt::format("engram: engram_pad_id {} is not a token of the {}-token "
                    "vocabulary",
                    layout.pad_id, token_map.size()));
  }
  for (size_t i = 0; i < token_map.size(); ++i) {
    if (token_map[i] < 0 || token_map[i] >= map_count) {
      return InvalidArgument(fmt::format("engram: compressed id {} of token {} is outside [0, {})",
                                         token_map[i], i, map_count));
    }
  }
  EngramHasher h;
  h.layout_ = layout;
  h.pad_compressed_ = token_map[static_cast<size_t>(layout.pad_id)];
  h.token_map_ = std::move(token_map);
  return h;
}

int32_t EngramHasher::Compress(int32_t token) const {
  CHECK(token >= 0 && token < vocab_size(), "engram: token %d outside the vocabulary of %d", token,
        vocab_size());
  return token_map_[static_cast<size_t>(token)];
}

void EngramHasher::Hash(std::span<const int32_t> context, std::span<const int32_t> current,
                        int64_t* out) const {
  const int32_t n = layout_.max_ngram_size;
  const int32_t n_layers = layout_.n_layers();
  const int32_t heads = layout_.n_heads;
  const int64_t n_cols = layout_.n_cols();
  // The last n − 1 context ids, then the current ones: position k of `seq` is
  // current position k − n_ctx.
  const size_t n_ctx = std::min(context.size(), static_cast<size_t>(n - 1));
  std::vector<int32_t> seq(context.end() - static_cast<std::ptrdiff_t>(n_ctx), context.end());
  seq.insert(seq.end(), current.begin(), current.end());
  std::vector<int64_t> tokens(static_cast<size_t>(n));
  for (size_t t = 0; t < current.size(); ++t) {
    const int64_t pos = static_cast<int64_t>(n_ctx + t);
    bool blocked = false;
    for (int32_t shift = 0; shift < n; ++shift) {
      const int64_t src = pos - shift;
      // Before the context is before the sequence when the context is short,
      // and never read otherwise (shift < n).
      blocked = blocked || src < 0 || seq[static_cast<size_t>(src)] == kDead;
      tokens[shift] = blocked ? pad_compressed_ : seq[static_cast<size_t>(src)];
    }
    int64_t* o = out + static_cast<int64_t>(t) * n_layers * n_cols;
    for (int32_t l = 0; l < n_layers; ++l) {
      const int64_t* mult = layout_.multipliers.data() + static_cast<int64_t>(l) * n;
      const int64_t* primes = layout_.primes.data() + l * n_cols;
      const int64_t* offsets = layout_.offsets.data() + l * n_cols;
      // Non-negative: ids < compressed_vocab_size, multipliers < INT64_MAX / it.
      int64_t rolling = tokens[0] * mult[0];
      for (int32_t i = 1; i < n; ++i) {
        rolling ^= tokens[i] * mult[i];
        for (int32_t h = 0; h < heads; ++h) {
          const int64_t c = static_cast<int64_t>(i - 1) * heads + h;
          o[l * n_cols + c] = rolling % primes[c] + offsets[c];
        }
      }
    }
  }
}

void EngramSequence::Truncate(int64_t n) {
  CHECK(n >= 0 && n <= size(), "EngramSequence::Truncate(%lld) of %lld positions",
        static_cast<long long>(n), static_cast<long long>(size()));
  compressed_.resize(static_cast<size_t>(n));
}

void EngramSequence::Append(std::span<const int32_t> tokens, std::span<const uint8_t> live,
                            int64_t* out) {
  CHECK(live.empty() || live.size() == tokens.size(),
        "EngramSequence::Append: %zu flags for %zu "
        "tokens",
        live.size(), tokens.size());
  const size_t before = compressed_.size();
  compressed_.reserve(before + tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    compressed_.push_back(!live.empty() && live[i] == 0 ? EngramHasher::kDead
                                                        : hasher_->Compress(tokens[i]));
  }
  const std::span<const int32_t> all(compressed_);
  hasher_->Hash(all.first(before), all.subspan(before), out);
}

// ---------------------------------------------------------------------------
// Weights, lookup, gate
// ---------------------------------------------------------------------------

Result<std::vector<float>> EngramGateWeight(const TensorView& q_weight, const TensorView& k_weight,
                                            int64_t hc, int64_t dim) {
  std::vector<float> q(static_cast<size_t>(hc * dim)), k(q.size());
  for (auto [t, name, dst] : {std::tuple{&q_weight, "q_weight", &q}, {&k_weight, "k_weight", &k}}) {
    const bool float_dtype =
        t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16;
    if (t->rank != 2 || t->sizes[0] != hc || t->sizes[1] != dim || !t->is_contiguous() ||
        !float_dtype) {
      return InvalidArgument(
          fmt::format("engram {}: expected a contiguous f32/bf16/f16 [{}, {}] tensor, got {} {}",
                      name, hc, dim, DTypeName(t->dtype), t->ShapeString()));
    }
    DequantizeRow(t->dtype, t->data, hc * dim, dst->data());
  }
  for (size_t i = 0; i < q.size(); ++i) q[i] *= k[i];
  return q;
}

Status CheckEngramWeights(const EngramWeights& w, const EngramLayout& layout, int32_t layer_index,
                          int64_t hc, int64_t dim, std::string_view prefix) {
  if (layer_index < 0 || layer_index >= layout.n_layers()) {
    return InvalidArgument(fmt::format("{}: no Engram layer with index {}", prefix, layer_index));
  }
  const int64_t rows = layout.num_embeddings[static_cast<size_t>(layer_index)];
  const int64_t hd = layout.head_dim;
  auto shape_error = [&](std::string_view name, const TensorView& t, const std::string& want) {
    return InvalidArgument(fmt::format("{}{}: expected {}, got {} {}", prefix, name, want,
                                       DTypeName(t.dtype), t.ShapeString()),
                           "the engram_* fields of config.json must match the checkpoint");
  };
  // A table may be padded past the rows the hash reaches (sharding rounds up).
  if (w.embed.rank != 2 || w.embed.dtype != DType::kFp8E4m3 || w.embed.sizes[0] < rows ||
      w.embed.sizes[1] != hd || !w.embed.is_contiguous()) {
    return shape_error("embed.weight", w.embed, fmt::format("fp8_e4m3 [>= {}, {}]", rows, hd));
  }
  if (w.embed_scale.rank != 2 ||
      (w.embed_scale.dtype != DType::kE8m0 && w.embed_scale.dtype != DType::kF32) ||
      w.embed_scale.sizes[0] != w.embed.sizes[0] || w.embed_scale.sizes[1] != hd / kScaleBlock ||
      !w.embed_scale.is_contiguous()) {
    return shape_error("embed.scale", w.embed_scale,
                       fmt::format("e8m0 [{}, {}]", w.embed.sizes[0], hd / kScaleBlock));
  }
  if (w.wkv.rows() != (hc + 1) * dim || w.wkv.cols() != int64_t{layout.n_cols()} * hd) {
    return shape_error("wkv.weight", w.wkv.weight,
                       fmt::format("[{}, {}]", (hc + 1) * dim, int64_t{layout.n_cols()} * hd));
  }
  if (static_cast<int64_t>(w.qk.size()) != hc * dim) {
    return InvalidArgument(fmt::format("{}q_weight · k_weight: {} values, expected {}", prefix,
                                       w.qk.size(), hc * dim));
  }
  return Status::Ok();
}

void EngramGatherRows(const EngramWeights& w, const int64_t* ids, int64_t ids_stride,
                      int64_t n_tokens, int64_t n_cols, float* out, EngramReadStats* stats) {
  const int64_t rows = w.embed.sizes[0];
  const int64_t hd = w.embed.sizes[1];
  const int64_t n_scales = hd / kScaleBlock;
  const bool f32_scale = w.embed_scale.dtype == DType::kF32;
  const int64_t scale_bytes = f32_scale ? 4 : 1;
  const auto* table = static_cast<const uint8_t*>(w.embed.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < n_cols; ++c) {
      const int64_t id = ids[t * ids_stride + c];
      CHECK(id >= 0 && id < rows, "engram hash id %lld outside the table's %lld rows",
            static_cast<long long>(id), static_cast<long long>(rows));
      const uint8_t* q = table + id * hd;
      float* o = out + (t * n_cols + c) * hd;
      for (int64_t b = 0; b < n_scales; ++b) {
        const float s =
            f32_scale
                ? static_cast<const float*>(w.embed_scale.data)[id * n_scales + b]
                : E8m0ToF32(static_cast<const uint8_t*>(w.embed_scale.data)[id * n_scales + b]);
        for (int64_t j = b * kScaleBlock; j < (b + 1) * kScaleBlock; ++j) {
          o[j] = Fp8E4m3ToF32(q[j]) * s;
        }
      }
    }
  }
  if (stats != nullptr) {
    stats->rows += n_tokens * n_cols;
    stats->bytes += n_tokens * n_cols * (hd + n_scales * scale_bytes);
  }
}

void EngramGate(float* h, const float* kv, const float* qk, const uint8_t* live, int64_t n_tokens,
                int64_t hc, int64_t dim, float eps) {
  const float inv_sqrt_dim = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (live != nullptr && live[t] == 0) continue;
    const float* key = kv + t * (hc + 1) * dim;
    const float* value = key + hc * dim;
    for (int64_t c = 0; c < hc; ++c) {
      float* hc_row = h + (t * hc + c) * dim;
      const float* k = key + c * dim;
      const float* w = qk + c * dim;
      double hh = 0, kk = 0, dot = 0;
      for (int64_t j = 0; j < dim; ++j) {
        hh += static_cast<double>(hc_row[j]) * hc_row[j];
        kk += static_cast<double>(k[j]) * k[j];
        dot += static_cast<double>(hc_row[j] * w[j] * k[j]);
      }
      const float mean_hh = static_cast<float>(hh / static_cast<double>(dim));
      const float mean_kk = static_cast<float>(kk / static_cast<double>(dim));
      const float rstd = (1.0f / std::sqrt(mean_hh + eps)) * (1.0f / std::sqrt(mean_kk + eps));
      const float d = static_cast<float>(dot) * rstd * inv_sqrt_dim;
      const float mag = std::sqrt(std::max(std::fabs(d), kGateClamp));
      const float gate = 1.0f / (1.0f + std::exp(-std::copysign(mag, d)));
      for (int64_t j = 0; j < dim; ++j) hc_row[j] += gate * value[j];
    }
  }
}

void EngramForward(ThreadPool& pool, float* h, const int64_t* ids, int64_t ids_stride,
                   const uint8_t* live, int64_t n_tokens, const EngramWeights& w,
                   const EngramLayout& layout, int64_t hc, int64_t dim, float eps, bool act_quant,
                   EngramScratch& scratch, EngramReadStats* stats) {
  if (n_tokens <= 0) return;
  const int64_t n_cols = layout.n_cols();
  const int64_t k = n_cols * layout.head_dim;
  CHECK(w.wkv.cols() == k && w.wkv.rows() == (hc + 1) * dim && w.embed.sizes[1] == layout.head_dim,
        "engram weights do not match the layout (CheckEngramWeights)");
  scratch.rows.resize(static_cast<size_t>(n_tokens * k));
  scratch.kv.resize(static_cast<size_t>(n_tokens * (hc + 1) * dim));
  float* rows = scratch.rows.data();
  const float* kv = scratch.kv.data();
  // Tokens are independent in the gather and the gate: split them over the
  // pool (a decoded token stays on the caller).
  pool.ParallelFor(
      n_tokens,
      [&](int64_t t0, int64_t t1, int) {
        EngramGatherRows(w, ids + t0 * ids_stride, ids_stride, t1 - t0, n_cols, rows + t0 * k,
                         nullptr);
        if (act_quant) {
          for (int64_t t = t0; t < t1; ++t)
            ops::QuantizeDequantizeFp8(rows + t * k, k, kScaleBlock);
        }
      },
      4);
  if (stats != nullptr) {
    const int64_t scale_bytes = w.embed_scale.dtype == DType::kF32 ? 4 : 1;
    stats->rows += n_tokens * n_cols;
    stats->bytes +=
        n_tokens * n_cols * (layout.head_dim + layout.head_dim / kScaleBlock * scale_bytes);
  }
  Linear(pool, scratch.kv.data(), rows, w.wkv, n_tokens);
  pool.ParallelFor(
      n_tokens,
      [&](int64_t t0, int64_t t1, int) {
        EngramGate(h + t0 * hc * dim, kv + t0 * (hc + 1) * dim, w.qk.data(),
                   live == nullptr ? nullptr : live + t0, t1 - t0, hc, dim, eps);
      },
      4);
}

}  // namespace dsv4::deepseek_v4
