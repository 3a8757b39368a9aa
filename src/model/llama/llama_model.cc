#include "model/llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "base/byte_io.h"
#include "base/huge_page_buffer.h"
#include "ops/matmul.h"
#include "ops/vec_ops.h"

namespace dsv4 {
namespace {

// Heads narrower than this keep their keys transposed like the values:
// scoring then runs E vector axpys of length S instead of S dot products of
// length E, each shorter than one SIMD vector (stories260K: E = 8).
constexpr int64_t kNarrowHeadDim = 32;

// The KV cache of one sequence, f32. Keys and values are rows per kv head,
// [G, S, E] (a head reads its keys and values as one contiguous stream; a
// decoded token appends a row to each head's), or for heads narrower than
// kNarrowHeadDim transposed per kv head, [G, E, S]: a head's scores are then E
// axpys and its value mix Σ_s a[s] v[s] E dot products over contiguous rows
// of length S, instead of S products of vectors shorter than one register.
//
// Keys and values are f32 or f16 each (LlamaConfig::cache_k / cache_v,
// llama.cpp's --cache-type-k/v): f16 rows are rounded as written (F32ToF16),
// scored by the f16 matvec kernels and mixed by AxpyManyF16. The transposed
// layout of narrow heads keeps f32.
class LlamaCache final : public SequenceCache {
 public:
  LlamaCache(const LlamaConfig& c, int64_t max_tokens)
      : max_tokens_(max_tokens),
        n_layers_(c.n_layers),
        kv_dim_(c.kv_dim()),
        head_dim_(c.head_dim()),
        keys_transposed_(c.head_dim() < kNarrowHeadDim),
        key_type_(keys_transposed_ ? DType::kF32 : c.cache_k),
        value_type_(keys_transposed_ ? DType::kF32 : c.cache_v),
        k_(static_cast<size_t>(DTypeBytes(key_type_, c.n_layers * max_tokens * c.kv_dim()))),
        v_(static_cast<size_t>(DTypeBytes(value_type_, c.n_layers * max_tokens * c.kv_dim()))) {}
  int64_t length() const override { return length_; }
  void Truncate(int64_t n) override {
    CHECK(n >= 0 && n <= length_);
    length_ = n;
  }
  int64_t max_tokens() const { return max_tokens_; }
  DType key_type() const { return key_type_; }
  DType value_type() const { return value_type_; }
  // [G, S, E] rows of layer `layer` ([G, E, S] when keys_transposed()), f32 caches only.
  float* keys(int64_t layer) {
    CHECK(key_type_ == DType::kF32);
    return reinterpret_cast<float*>(k_.data()) + layer * max_tokens_ * kv_dim_;
  }
  bool keys_transposed() const { return keys_transposed_; }
  // [G, S, E] of layer `layer` like the keys, or with narrow heads [G, E, S]:
  // element (g, e, s) at (g * E + e) * max_tokens() + s. f32 caches only.
  float* values(int64_t layer) {
    CHECK(value_type_ == DType::kF32);
    return reinterpret_cast<float*>(v_.data()) + layer * max_tokens_ * kv_dim_;
  }
  // Row (g, s) of layer `layer`'s [G, S, E] keys / values, in their type.
  uint8_t* key_row(int64_t layer, int64_t g, int64_t s) {
    return k_.data() + DTypeBytes(key_type_, Element(layer, g, s));
  }
  uint8_t* value_row(int64_t layer, int64_t g, int64_t s) {
    return v_.data() + DTypeBytes(value_type_, Element(layer, g, s));
  }
  void Advance(int64_t n) { length_ += n; }

  // The layout, then per layer the keys and values of the first length()
  // positions in their types (the layout's own order).
  Status SaveState(std::vector<uint8_t>& out) const override {
    ByteWriter w(out);
    WriteLayout(w);
    w.Put(length_);
    ForEachSpan(length_, [&](const uint8_t* k, const uint8_t* v, int64_t kb, int64_t vb) {
      w.PutBytes(k, kb);
      w.PutBytes(v, vb);
    });
    return Status::Ok();
  }
  Status LoadState(std::span<const uint8_t> bytes) override {
    length_ = 0;
    ByteReader r(bytes);
    std::vector<uint8_t> layout, expected;
    ByteWriter lw(expected);
    WriteLayout(lw);
    int64_t length = 0;
    if (!r.GetArray(expected.size(), layout) || !r.Get(length)) {
      return DataLoss("llama cache state: truncated header");
    }
    if (layout != expected) {
      return InvalidArgument("llama cache state: another cache layout (layers, heads or types)");
    }
    if (length < 0 || length > max_tokens_) {
      return OutOfRange("llama cache state of " + std::to_string(length) +
                        " tokens; this cache holds " + std::to_string(max_tokens_));
    }
    bool ok = true;
    ForEachSpan(length, [&](uint8_t* k, uint8_t* v, int64_t kb, int64_t vb) {
      ok = ok && r.GetBytes(k, kb) && r.GetBytes(v, vb);
    });
    if (!ok || r.left() != 0) return DataLoss("llama cache state: truncated or trailing data");
    length_ = length;
    return Status::Ok();
  }

 private:
  void WriteLayout(ByteWriter& w) const {
    w.Put(static_cast<uint32_t>(0x31434c4c));  // "LLC1"
    w.Put(n_layers_);
    w.Put(kv_dim_);
    w.Put(head_dim_);
    w.Put(static_cast<int32_t>(keys_transposed_));
    w.Put(static_cast<int32_t>(key_type_));
    w.Put(static_cast<int32_t>(value_type_));
  }
  // f(keys, values, key bytes, value bytes) over the contiguous runs holding
  // the first n positions: a row run [0, n) per (layer, head), or with
  // transposed keys one per (layer, head, element). The pointers are the
  // buffers' own (SaveState reads them, LoadState writes them).
  template <typename F>
  void ForEachSpan(int64_t n, F f) const {
    const int64_t groups = kv_dim_ / head_dim_;
    for (int64_t l = 0; l < n_layers_; ++l) {
      if (keys_transposed_) {
        for (int64_t ge = 0; ge < kv_dim_; ++ge) {
          const int64_t at = (l * kv_dim_ + ge) * max_tokens_;
          f(k_.data() + at * sizeof(float), v_.data() + at * sizeof(float),
            n * static_cast<int64_t>(sizeof(float)), n * static_cast<int64_t>(sizeof(float)));
        }
        continue;
      }
      for (int64_t g = 0; g < groups; ++g) {
        f(k_.data() + DTypeBytes(key_type_, Element(l, g, 0)),
          v_.data() + DTypeBytes(value_type_, Element(l, g, 0)),
          DTypeBytes(key_type_, n * head_dim_), DTypeBytes(value_type_, n * head_dim_));
      }
    }
  }

  int64_t Element(int64_t layer, int64_t g, int64_t s) const {
    return layer * max_tokens_ * kv_dim_ + (g * max_tokens_ + s) * head_dim_;
  }

  int64_t max_tokens_;
  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t head_dim_;
  int64_t length_ = 0;
  bool keys_transposed_;
  DType key_type_, value_type_;
  // In 2 MiB pages, touched as the sequence grows.
  HugePageBuffer k_;  // [L, G, S, E] or [L, G*E, S] of key_type_
  HugePageBuffer v_;  // the same, of value_type_
};

// y[h · y_stride + e] += Σ_k alpha[h · n_keys + k] · v[k][e] for h < n_y,
// e < E: the value rows [0, n_keys) of kv head g in layer l, f32 or f16, in
// order of k (AxpyMany / AxpyManyF16); rows and rows16 hold n_keys pointers.
void MixValues(LlamaCache& cache, int64_t l, int64_t g, int64_t n_keys, int64_t e, float* y,
               int64_t n_y, int64_t y_stride, const float* alpha, const float** rows,
               const uint16_t** rows16) {
  const uint8_t* v = cache.value_row(l, g, 0);  // [S, E]
  const int64_t row_bytes = DTypeBytes(cache.value_type(), e);
  if (cache.value_type() == DType::kF16) {
    for (int64_t k = 0; k < n_keys; ++k) {
      rows16[k] = reinterpret_cast<const uint16_t*>(v + k * row_bytes);
    }
    ops::AxpyManyF16(y, n_y, y_stride, alpha, rows16, n_keys, e);
  } else {
    for (int64_t k = 0; k < n_keys; ++k)
      rows[k] = reinterpret_cast<const float*>(v + k * row_bytes);
    ops::AxpyMany(y, n_y, y_stride, alpha, rows, n_keys, e);
  }
}

// Writes E floats as a cache row of type t (f32 or f16).
void WriteCacheRow(const float* x, DType t, uint8_t* row, int64_t e) {
  if (t == DType::kF16) {
    ops::F32ToF16Row(x, reinterpret_cast<uint16_t*>(row), e);
  } else {
    std::memcpy(row, x, static_cast<size_t>(e) * sizeof(float));
  }
}

// out[T, N] = x[T, K] · w[N, K]ᵀ with the SIMD row kernels, output rows split
// over the pool (small products stay on the calling thread).
void Linear(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens) {
  const int64_t n_out = w.sizes[0];
  // GGUF quant weights: quantised once for every chunk; the workers reach the
  // caller's thread_local through this reference (by name, each sees its own).
  thread_local ops::PreparedActivations own;
  ops::PreparedActivations& prepared = own;
  prepared.Prepare(x, n_tokens, w.sizes[1], w.dtype);
  pool.ParallelFor(
      n_out,
      [&](int64_t begin, int64_t end, int) {
        ops::MatMulRows(out + begin, n_out, x, w, n_tokens, begin, end, &prepared);
      },
      ops::RowGrain(w.sizes[1] * n_tokens), w.data);  // each matrix balances its own split
}

// fn(begin, end) over the rows [0, T) of a step's elementwise work (norms,
// RoPE, cache writes, SwiGLU, residual adds), split over the pool when a
// prompt brings many rows: each row's work is its own, so any split gives the
// same bits. A decoded token (or a few) stays on the calling thread.
template <class F>
void ForRows(ThreadPool& pool, int64_t T, const F& fn) {
  constexpr int64_t kMinSplitRows = 8;
  if (T < kMinSplitRows || pool.size() == 1) {
    fn(int64_t{0}, T);
    return;
  }
  pool.ParallelFor(T, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
}

// A [rows, cols] view of `dtype` whose rows are `row_stride` elements apart.
TensorView RowsView(const void* data, int64_t rows, int64_t cols, int64_t row_stride,
                    DType dtype = DType::kF32) {
  TensorView v;
  v.dtype = dtype;
  v.data = const_cast<void*>(data);
  v.rank = 2;
  v.sizes[0] = rows;
  v.sizes[1] = cols;
  v.strides[0] = row_stride;
  v.strides[1] = 1;
  return v;
}

std::vector<float> ToF32(const TensorView& v) {
  std::vector<float> out(v.numel());
  DequantizeRow(v.dtype, v.data, v.numel(), out.data());
  return out;
}

}  // namespace

LlamaConfig LlamaConfigFromLlama2c(const Llama2cConfig& h) {
  return LlamaConfig{.d_model = h.dim,
                     .d_ff = h.hidden_dim,
                     .n_layers = h.n_layers,
                     .n_heads = h.n_heads,
                     .n_kv_heads = h.n_kv_heads,
                     .vocab_size = h.vocab_size,
                     .max_context = h.seq_len};
}

Status LlamaConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0)
      return InvalidArgument(std::string("llama config: ") + name + " = " + std::to_string(v) +
                             " must be positive");
    return Status::Ok();
  };
  RETURN_IF_ERROR(positive("d_model", d_model));
  RETURN_IF_ERROR(positive("d_ff", d_ff));
  RETURN_IF_ERROR(positive("n_layers", n_layers));
  RETURN_IF_ERROR(positive("n_heads", n_heads));
  RETURN_IF_ERROR(positive("n_kv_heads", n_kv_heads));
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("max_context", max_context));
  if (d_model % n_heads != 0 || head_dim() % 2 != 0) {
    return InvalidArgument("llama config: d_model " + std::to_string(d_model) + " is not n_heads " +
                           std::to_string(n_heads) + " × an even head_dim");
  }
  for (const auto& [name, t] : {std::pair{"cache_k", cache_k}, std::pair{"cache_v", cache_v}}) {
    if (t != DType::kF32 && t != DType::kF16) {
      return InvalidArgument(std::string("llama config: ") + name + " = " +
                             std::string(DTypeName(t)) + "; the KV cache holds f32 or f16");
    }
  }
  if (n_heads % n_kv_heads != 0) {
    return InvalidArgument("llama config: n_heads " + std::to_string(n_heads) +
                           " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  }
  return Status::Ok();
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(std::shared_ptr<const CheckpointReader> reader,
                                                     const LlamaConfig& c) {
  RETURN_IF_ERROR(c.Validate().WithContext(reader->path()));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = c;
  m->reader_ = reader;
  const int64_t D = c.d_model, F = c.d_ff, QD = c.n_heads * c.head_dim(), KVD = c.kv_dim();

  // Bind every tensor; collect all problems before failing.
  std::string problems;
  auto bind = [&](const std::string& name, std::initializer_list<int64_t> shape) -> TensorView {
    auto r = reader->Get(name, shape);
    if (!r.ok()) {
      problems += "\n  " + r.status().message();
      return TensorView{};
    }
    return *r;
  };
  m->token_embd_ = bind("token_embd.weight", {c.vocab_size, D});
  m->layers_.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m->layers_[l];
    TensorView attn_norm = bind(p + "attn_norm.weight", {D});
    L.wq = bind(p + "attn_q.weight", {QD, D});
    L.wk = bind(p + "attn_k.weight", {KVD, D});
    L.wv = bind(p + "attn_v.weight", {KVD, D});
    L.wo = bind(p + "attn_output.weight", {D, QD});
    TensorView ffn_norm = bind(p + "ffn_norm.weight", {D});
    L.w_gate = bind(p + "ffn_gate.weight", {F, D});
    L.w_up = bind(p + "ffn_up.weight", {F, D});
    L.w_down = bind(p + "ffn_down.weight", {D, F});
    if (attn_norm.data) L.attn_norm = ToF32(attn_norm);
    if (ffn_norm.data) L.ffn_norm = ToF32(ffn_norm);
  }
  TensorView out_norm = bind("output_norm.weight", {D});
  if (out_norm.data) m->output_norm_ = ToF32(out_norm);
  m->output_ =
      reader->Find("output.weight") ? bind("output.weight", {c.vocab_size, D}) : m->token_embd_;
  if (!problems.empty()) {
    return InvalidArgument(reader->path() + ": cannot bind the llama weights:" + problems,
                           "the file does not match its own header/metadata");
  }

  int64_t n_params = 0;
  for (const TensorInfo& t : reader->tensors()) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    n_params += n;
  }
  // Every matrix is read once per decoded token; the embedding only one row
  // (unless it doubles as the classifier, which reads all of it).
  int64_t weight_bytes = m->output_.nbytes() + static_cast<int64_t>(sizeof(float)) * D;
  if (m->output_.data != m->token_embd_.data) weight_bytes += DTypeBytes(m->token_embd_.dtype, D);
  for (const Layer& L : m->layers_) {
    weight_bytes += L.wq.nbytes() + L.wk.nbytes() + L.wv.nbytes() + L.wo.nbytes() +
                    L.w_gate.nbytes() + L.w_up.nbytes() + L.w_down.nbytes() +
                    2 * static_cast<int64_t>(sizeof(float)) * D;
  }
  m->info_ = ModelInfo{.architecture = "llama",
                       .vocab_size = c.vocab_size,
                       .max_context = c.max_context,
                       .n_params = n_params,
                       .weight_bytes_per_token = weight_bytes,
                       .bos_id = c.bos_id,
                       .eos_id = c.eos_id};
  m->pool_ = std::make_unique<ThreadPool>(1);
  return m;
}

void LlamaModel::SetThreads(int n_threads) { pool_ = std::make_unique<ThreadPool>(n_threads); }

std::unique_ptr<SequenceCache> LlamaModel::NewCache(int64_t max_tokens) const {
  if (max_tokens <= 0 || max_tokens > config_.max_context) max_tokens = config_.max_context;
  return std::make_unique<LlamaCache>(config_, max_tokens);
}

void LlamaModel::EnsureScratch(int64_t n) {
  const size_t scores_size = static_cast<size_t>(pool_->size()) * kAttendRows *
                             (config_.n_heads / config_.n_kv_heads) * config_.max_context;
  const size_t rows_size =
      static_cast<size_t>(pool_->size()) * 2 * std::max(config_.head_dim(), config_.max_context);
  const size_t rows16_size = static_cast<size_t>(pool_->size()) * config_.max_context;
  if (n <= scratch_tokens_ && scores_.size() >= scores_size && attn_rows_.size() >= rows_size &&
      attn_rows16_.size() >= rows16_size) {
    return;
  }
  n = std::max(n, scratch_tokens_);
  const LlamaConfig& c = config_;
  scratch_tokens_ = n;
  x_.resize(n * c.d_model);
  xb_.resize(n * c.d_model);
  q_.resize(n * c.d_model);
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  att_out_.resize(n * c.d_model);
  hb_.resize(n * c.d_ff);
  hb2_.resize(n * c.d_ff);
  scores_.resize(scores_size);       // [threads, kAttendRows, H/G, S]
  attn_rows_.resize(rows_size);      // [threads, 2, max(E, S)]
  attn_rows16_.resize(rows16_size);  // [threads, S]
  attn_q_.resize(static_cast<size_t>(pool_->size()) * kAttendRows * c.head_dim());
  blocks_.reserve(static_cast<size_t>(n / kAttendRows + 8));
}

// Prefill attention with rows as [G, S, E] (see Run): items are (block of up
// to kAttendRows consecutive rows of one segment, kv head), so that a block's
// rows read each key and value once. Per head: the block's scores against the
// last row's visible keys as one product (ops::MatMulRows over R tokens, each
// row's the same bits as alone), each row's softmax over its own keys (the
// probabilities of keys it does not see set to 0), and the value mix of the
// block's rows at once (AxpyMany: every value row weighted into every row of
// the block, in order of s; the zero weights add +0).
void LlamaModel::AttendBlocks(int64_t l, std::span<const Segment> segments, int64_t heads_per_group,
                              float inv_sqrt_e) {
  const LlamaConfig& c = config_;
  const int64_t D = c.d_model, G = c.n_kv_heads, E = c.head_dim();
  blocks_.clear();
  for (const Segment& sg : segments) {
    const int64_t n = static_cast<int64_t>(sg.tokens.size());
    for (int64_t r = 0; r < n; r += kAttendRows) {
      blocks_.push_back({&sg, sg.row0 + r, std::min(kAttendRows, n - r)});
    }
  }
  const int64_t n_blocks = static_cast<int64_t>(blocks_.size());
  auto work = [&](int64_t begin, int64_t end, int thread) {
    float* att = scores_.data() + thread * kAttendRows * heads_per_group * c.max_context;
    float* qs = attn_q_.data() + thread * kAttendRows * E;  // [R, E]
    const float** value_rows = attn_rows_.data() + thread * 2 * std::max(E, c.max_context);
    const uint16_t** value_rows16 = attn_rows16_.data() + thread * c.max_context;
    for (int64_t item = begin; item < end; ++item) {
      // Blocks zigzag (first, last, second, ...) for equal chunks of keys.
      const int64_t bb = item / G, g = item % G;
      const AttendBlock& blk = blocks_[bb % 2 == 0 ? bb / 2 : n_blocks - 1 - bb / 2];
      const Segment& sg = *blk.segment;
      auto& cache = static_cast<LlamaCache&>(*sg.cache);
      const int64_t R = blk.n_rows;
      const int64_t n_max = sg.pos0 + (blk.row0 + R - 1 - sg.row0) + 1;  // the last row's keys
      const TensorView keys =
          RowsView(cache.key_row(l, g, 0), n_max, E, E, cache.key_type());  // [n_max, E]
      for (int64_t j = 0; j < heads_per_group; ++j) {
        const int64_t head = g * heads_per_group + j;
        for (int64_t r = 0; r < R; ++r) {
          std::copy_n(q_.data() + (blk.row0 + r) * D + head * E, E, qs + r * E);
        }
        float* a = att + j * R * n_max;  // [R, n_max]
        ops::MatMulRows(a, n_max, qs, keys, R, 0, n_max);
        for (int64_t r = 0; r < R; ++r) {
          const int64_t n_keys = sg.pos0 + (blk.row0 + r - sg.row0) + 1;
          float* ar = a + r * n_max;
          for (int64_t s = 0; s < n_keys; ++s) ar[s] *= inv_sqrt_e;
          ops::Softmax(ar, n_keys);
          std::fill(ar + n_keys, ar + n_max, 0.0f);
        }
        float* out = att_out_.data() + blk.row0 * D + head * E;  // R rows, D apart
        for (int64_t r = 0; r < R; ++r) std::fill_n(out + r * D, E, 0.0f);
        MixValues(cache, l, g, n_max, E, out, R, D, a, value_rows, value_rows16);
      }
    }
  };
  pool_->ParallelFor(n_blocks * G, work);
}

Status LlamaModel::CheckCall(std::span<const int32_t> tokens, const SequenceCache& seq,
                             std::span<const float> logits, bool all_logits) const {
  const LlamaConfig& c = config_;
  const auto& cache = static_cast<const LlamaCache&>(seq);
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t pos0 = cache.length();
  if (T == 0) return InvalidArgument("Forward: no tokens");
  if (pos0 + T > cache.max_tokens()) {
    return ResourceExhausted("context full: " + std::to_string(pos0 + T) + " tokens > " +
                                 std::to_string(cache.max_tokens()),
                             "use a shorter prompt or fewer --max-tokens");
  }
  if (static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * c.vocab_size) {
    return InvalidArgument("Forward: logits buffer too small");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, SequenceCache& seq,
                           std::span<float> logits, bool all_logits) {
  RETURN_IF_ERROR(CheckCall(tokens, seq, logits, all_logits));
  const Segment segment{.tokens = tokens,
                        .cache = &seq,
                        .pos0 = seq.length(),
                        .row0 = 0,
                        .logits = logits,
                        .all_logits = all_logits};
  Run(std::span<const Segment>(&segment, 1));
  return Status::Ok();
}

Status LlamaModel::ForwardBatch(std::span<const BatchEntry> entries) {
  if (entries.empty()) return Status::Ok();
  // Messages are built only on error: a decode step allocates nothing.
  auto where = [](size_t i) { return "llama ForwardBatch entry " + std::to_string(i); };
  for (size_t i = 0; i < entries.size(); ++i) {
    const BatchEntry& e = entries[i];
    if (e.cache == nullptr) return InvalidArgument(where(i) + ": no cache");
    if (Status st = CheckCall(e.tokens, *e.cache, e.logits, e.all_logits); !st.ok()) {
      return st.WithContext(where(i));
    }
    for (size_t j = 0; j < i; ++j) {
      if (entries[j].cache == e.cache) {
        return InvalidArgument(where(i) + ": the same cache as entry " + std::to_string(j),
                               "each sequence of a batch needs its own cache");
      }
    }
  }
  batch_.clear();
  int64_t rows = 0;
  for (const BatchEntry& e : entries) {
    batch_.push_back(Segment{.tokens = e.tokens,
                             .cache = e.cache,
                             .pos0 = e.cache->length(),
                             .row0 = rows,
                             .logits = e.logits,
                             .all_logits = e.all_logits});
    rows += static_cast<int64_t>(e.tokens.size());
  }
  Run(batch_);
  return Status::Ok();
}

void LlamaModel::Run(std::span<const Segment> segments) {
  const LlamaConfig& c = config_;
  const Segment& last_segment = segments.back();
  const int64_t T = last_segment.row0 + static_cast<int64_t>(last_segment.tokens.size());
  EnsureScratch(T);
  const int64_t D = c.d_model, E = c.head_dim(), H = c.n_heads, G = c.n_kv_heads;
  const int64_t KVD = c.kv_dim(), F = c.d_ff;
  const float sqrt_e = std::sqrt(static_cast<float>(E));
  const float inv_sqrt_e = 1.0f / sqrt_e;
  float* x = x_.data();  // [T, D] residual stream, all segments' rows in order
  int64_t max_keys = 0;  // the longest attention span of any row
  for (const Segment& sg : segments) {
    for (size_t t = 0; t < sg.tokens.size(); ++t) {
      DequantizeRow(token_embd_.dtype, token_embd_[sg.tokens[t]].data, D,
                    x + (sg.row0 + static_cast<int64_t>(t)) * D);
    }
    max_keys = std::max(max_keys, sg.pos0 + static_cast<int64_t>(sg.tokens.size()));
  }
  // The segment that holds row `row` (segments are few: a linear scan).
  auto segment_of = [&](int64_t row) -> const Segment& {
    size_t i = 0;
    while (row >= segments[i].row0 + static_cast<int64_t>(segments[i].tokens.size())) ++i;
    return segments[i];
  };

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    // Attention block.
    ForRows(*pool_, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        ops::RmsNorm(xb_.data() + t * D, x + t * D, L.attn_norm.data(), D, c.norm_eps);
      }
    });
    Linear(*pool_, q_.data(), xb_.data(), L.wq, T);  // [T, H*E]
    Linear(*pool_, k_.data(), xb_.data(), L.wk, T);  // [T, G*E]
    Linear(*pool_, v_.data(), xb_.data(), L.wv, T);  // [T, G*E]
    ForRows(*pool_, T, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const Segment& sg = segment_of(row);
        auto& cache = static_cast<LlamaCache&>(*sg.cache);
        const int64_t S = cache.max_tokens();
        const int64_t pos = sg.pos0 + (row - sg.row0);
        ops::RopeInterleaved(q_.data() + row * D, H, E, E, pos, c.rope_theta);
        ops::RopeInterleaved(k_.data() + row * KVD, G, E, E, pos, c.rope_theta);
        if (cache.keys_transposed()) {  // [G*E, S] f32
          float* key_cache = cache.keys(l);
          float* values = cache.values(l);
          for (int64_t i = 0; i < KVD; ++i) key_cache[i * S + pos] = k_[row * KVD + i];
          for (int64_t i = 0; i < KVD; ++i) values[i * S + pos] = v_[row * KVD + i];
        } else {  // [G, S, E] rows of the cache's types
          for (int64_t g = 0; g < G; ++g) {
            WriteCacheRow(k_.data() + row * KVD + g * E, cache.key_type(), cache.key_row(l, g, pos),
                          E);
            WriteCacheRow(v_.data() + row * KVD + g * E, cache.value_type(),
                          cache.value_row(l, g, pos), E);
          }
        }
      }
    });
    // Causal attention: row t of a segment sees its cache positions
    // [0, pos0 + t]. Work items are (row, kv-head) pairs split over the pool.
    // Per query head, the scores against all visible keys are one
    // matrix-vector product with the strided key rows as the weight (narrow
    // heads: E axpys over the transposed keys, the group's heads together),
    // and the output the dot products of the probabilities with the E
    // transposed value rows, the group's heads together (no per-thread tile
    // buffer that grows with the context). Each thread scores into its own
    // [H/G, S] slice of scores_. Scores are scaled
    // by 1/√E (llama2.c divides by √E; both agree to an ulp).
    const int64_t heads_per_group = H / G;
    auto attend = [&](int64_t begin, int64_t end, int thread) {
      float* att = scores_.data() + thread * heads_per_group * c.max_context;
      // [E] rows of [S] (narrow heads), then [E] or [S] value rows.
      const float** key_rows = attn_rows_.data() + thread * 2 * std::max(E, c.max_context);
      const float** value_rows = key_rows + E;
      const uint16_t** value_rows16 = attn_rows16_.data() + thread * c.max_context;
      for (int64_t item = begin; item < end; ++item) {
        // Rows zigzag (0, T-1, 1, T-2, ...) so that every contiguous chunk
        // of items has about the same number of keys to score.
        const int64_t tt = item / G, g = item % G;
        const int64_t row = tt % 2 == 0 ? tt / 2 : T - 1 - tt / 2;
        const Segment& sg = segment_of(row);
        auto& cache = static_cast<LlamaCache&>(*sg.cache);
        const int64_t S = cache.max_tokens();
        const int64_t n_keys = sg.pos0 + (row - sg.row0) + 1;
        const float* q_group = q_.data() + row * D + g * heads_per_group * E;  // [H/G, E]
        if (cache.keys_transposed()) {
          // a_j = Σ_e q_j[e] · kt[e], e in order: E axpys per head, the
          // group's heads register-blocked (AxpyMany, bit for bit).
          const float* kt = cache.keys(l) + g * E * S;  // [E, S]
          for (int64_t e = 0; e < E; ++e) key_rows[e] = kt + e * S;
          std::fill_n(att, heads_per_group * n_keys, 0.0f);
          ops::AxpyMany(att, heads_per_group, n_keys, q_group, key_rows, E, n_keys);
        } else {
          const TensorView keys =
              RowsView(cache.key_row(l, g, 0), n_keys, E, E, cache.key_type());  // [n_keys, E]
          for (int64_t j = 0; j < heads_per_group; ++j) {
            ops::MatMulRows(att + j * n_keys, n_keys, q_group + j * E, keys, 1, 0, n_keys);
          }
        }
        for (int64_t j = 0; j < heads_per_group; ++j) {
          float* a = att + j * n_keys;
          for (int64_t s = 0; s < n_keys; ++s) a[s] *= inv_sqrt_e;
          ops::Softmax(a, n_keys);
        }
        float* out = att_out_.data() + row * D + g * heads_per_group * E;  // [H/G, E]
        if (cache.keys_transposed()) {
          // out[j, e] = Dot(p_j, vt[e]) over the visible keys: every head of
          // the group against every value row at once (DotMany).
          const float* vt = cache.values(l) + g * E * S;  // [E, S]
          for (int64_t e = 0; e < E; ++e) value_rows[e] = vt + e * S;
          ops::DotMany(att, heads_per_group, n_keys, value_rows, E, n_keys, out);
        } else {
          // out[j, :] = Σ_s p_j[s] · v[s] in order of s (llama2.c's order),
          // the group's heads together (AxpyMany): each value row read once,
          // and a decoded token appends its values as one row.
          std::fill_n(out, heads_per_group * E, 0.0f);
          MixValues(cache, l, g, n_keys, E, out, heads_per_group, E, att, value_rows, value_rows16);
        }
      }
    };
    const int64_t macs_per_item = 2 * heads_per_group * max_keys * E;
    const int64_t grain =
        std::max<int64_t>(1, ops::kMinMacsPerChunk / std::max<int64_t>(1, macs_per_item));
    if (T > 1 && !static_cast<LlamaCache&>(*segments[0].cache).keys_transposed()) {
      AttendBlocks(l, segments, heads_per_group, inv_sqrt_e);
    } else {
      pool_->ParallelFor(T * G, attend, grain);
    }
    Linear(*pool_, xb_.data(), att_out_.data(), L.wo, T);  // [T, D]
    ForRows(*pool_, T, [&](int64_t t0, int64_t t1) {
      ops::Axpy(x + t0 * D, 1.0f, xb_.data() + t0 * D, (t1 - t0) * D);
    });

    // Feed-forward block: SwiGLU.
    ForRows(*pool_, T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        ops::RmsNorm(xb_.data() + t * D, x + t * D, L.ffn_norm.data(), D, c.norm_eps);
      }
    });
    Linear(*pool_, hb_.data(), xb_.data(), L.w_gate, T);  // [T, F]
    Linear(*pool_, hb2_.data(), xb_.data(), L.w_up, T);   // [T, F]
    ForRows(*pool_, T, [&](int64_t t0, int64_t t1) {
      ops::SwiGlu(hb_.data() + t0 * F, hb_.data() + t0 * F, hb2_.data() + t0 * F, (t1 - t0) * F);
    });
    Linear(*pool_, xb_.data(), hb_.data(), L.w_down, T);  // [T, D]
    ForRows(*pool_, T, [&](int64_t t0, int64_t t1) {
      ops::Axpy(x + t0 * D, 1.0f, xb_.data() + t0 * D, (t1 - t0) * D);
    });
  }
  for (const Segment& sg : segments) {
    static_cast<LlamaCache&>(*sg.cache).Advance(static_cast<int64_t>(sg.tokens.size()));
  }

  // Final norm and classifier over the rows that need logits (every row of an
  // all_logits segment, else its last), gathered into xb_: one pass over the
  // classifier for the whole batch.
  int64_t n_rows = 0;
  for (const Segment& sg : segments) {
    const int64_t len = static_cast<int64_t>(sg.tokens.size());
    for (int64_t t = sg.all_logits ? 0 : len - 1; t < len; ++t, ++n_rows) {
      ops::RmsNorm(xb_.data() + n_rows * D, x + (sg.row0 + t) * D, output_norm_.data(), D,
                   c.norm_eps);
    }
  }
  if (segments.size() == 1) {
    Linear(*pool_, segments[0].logits.data(), xb_.data(), output_, n_rows);
    return;
  }
  const int64_t V = c.vocab_size;
  if (batch_logits_.size() < static_cast<size_t>(n_rows * V)) batch_logits_.resize(n_rows * V);
  Linear(*pool_, batch_logits_.data(), xb_.data(), output_, n_rows);
  int64_t r = 0;
  for (const Segment& sg : segments) {
    const int64_t n = sg.all_logits ? static_cast<int64_t>(sg.tokens.size()) : 1;
    std::copy_n(batch_logits_.data() + r * V, n * V, sg.logits.data());
    r += n;
  }
}

}  // namespace dsv4
