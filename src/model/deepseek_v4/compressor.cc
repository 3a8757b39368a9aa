// The DeepSeek-V4 KV compressor (see compressor.h), in the order of the
// reference `Compressor.forward` decode branch.
#include "model/deepseek_v4/compressor.h"

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/rope.h"
#include "ops/matmul.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {

void CompressorState::Init(int64_t r, int64_t w, int64_t history) {
  ratio = r;
  width = w;
  coff = r == 4 ? 2 : 1;  // CSA overlaps windows (reference: overlap = ratio == 4)
  rows.Init(2 * coff * width,
            history == RollbackOptions::kAll ? 0 : coff * ratio + std::max<int64_t>(0, history));
  Reset();
}

void CompressorState::Reset() {
  rows.Reset();
  entries.clear();
}

void CompressorState::Truncate(int64_t n) {
  rows.Truncate(n);
  entries.resize(std::min<int64_t>(n_entries(), n / ratio) * width);
}

bool CompressorState::CanTruncate(int64_t n) const {
  const int64_t window_start = n / ratio * ratio;
  return rows.Holds(std::max<int64_t>(0, window_start - (coff == 2 ? ratio : 0)), n);
}

void HadamardRotate(float* x, int64_t n) {
  CHECK(n > 0 && (n & (n - 1)) == 0, "Hadamard size %lld is not a power of two",
        static_cast<long long>(n));
  // In-place fast Walsh–Hadamard transform: H_n x in natural (Sylvester) order;
  // H is symmetric, so this is also x · H.
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

int64_t CompressorJobs(const CompressorWeights& w, const float* x, int64_t n_rows,
                       CompressorScratch& s, LinearJob* jobs) {
  const int64_t CW = w.wkv.sizes[0];  // c·Wd
  if (static_cast<int64_t>(s.kv.size()) < n_rows * CW) {
    s.kv.resize(n_rows * CW);
    s.score.resize(n_rows * CW);
  }
  s.wkv = LinearWeight{.weight = w.wkv, .scale = {}, .format = LinearFormat::kDense};
  s.wgate = LinearWeight{.weight = w.wgate, .scale = {}, .format = LinearFormat::kDense};
  jobs[0] = {.w = &s.wkv, .x = x, .out = s.kv.data(), .n_tokens = n_rows};       // [T, c·Wd]
  jobs[1] = {.w = &s.wgate, .x = x, .out = s.score.data(), .n_tokens = n_rows};  // [T, c·Wd]
  return 2;
}

void CompressorFinish(const LayerContext& ctx, const CompressorWeights& w, CompressorKind kind,
                      TokenRun run, CompressorState& st, CompressorScratch& s) {
  ThreadPool& pool = ctx.pool;
  const RopeFrequencies& rope = ctx.rope;
  const NumericsOptions& opts = ctx.numerics;
  const int64_t rope_dim = ctx.config.qk_rope_head_dim;
  const float eps = static_cast<float>(ctx.config.rms_norm_eps);
  const int64_t row0 = run.row0, n_tokens = run.n_tokens, pos0 = run.pos0;
  const int64_t T = n_tokens, r = st.ratio, Wd = st.width, CW = st.coff * Wd;
  const bool overlap = st.coff == 2;
  CHECK(w.wkv.sizes[0] == CW, "compressor: wkv has %lld rows, the state %lld",
        static_cast<long long>(w.wkv.sizes[0]), static_cast<long long>(CW));
  float* const kv = s.kv.data() + row0 * CW;        // [T, c·Wd] this call's k
  float* const score = s.score.data() + row0 * CW;  // [T, c·Wd] its gate logits
  // Row of position p: [k | g + ape[p mod r]]; this call's rows stay in the
  // scratch until the windows are pooled, earlier ones are in st.rows.
  pool.ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* gt = score + t * CW;
      const float* ape = w.ape.data() + ((pos0 + t) % r) * CW;
      for (int64_t i = 0; i < CW; ++i) gt[i] += ape[i];
    }
  });
  const auto row_k = [&](int64_t p) { return p >= pos0 ? kv + (p - pos0) * CW : st.row_k(p); };
  const auto row_g = [&](int64_t p) { return p >= pos0 ? score + (p - pos0) * CW : st.row_g(p); };

  // Windows i0 .. i1 − 1 end in this call (window i: tokens [i·r, (i+1)·r)).
  const int64_t i0 = (pos0 + r) / r - 1, i1 = (pos0 + T) / r;
  CHECK(i0 == st.n_entries(), "compressor at position %lld holds %lld entries",
        static_cast<long long>(pos0), static_cast<long long>(st.n_entries()));
  const int64_t n_slots = overlap ? 2 * r : r;
  if (static_cast<int64_t>(s.slots.size()) < pool.size() * n_slots * ops::simd::kSoftmaxPoolLanes) {
    s.slots.resize(pool.size() * n_slots * ops::simd::kSoftmaxPoolLanes);
    s.slot_rows.resize(pool.size() * 2 * n_slots);
  }
  if (overlap && static_cast<int64_t>(s.missing.size()) != 2 * Wd) {
    s.missing.assign(2 * Wd, 0.0f);
    std::fill_n(s.missing.data(), Wd, -INFINITY);
  }
  if (static_cast<int64_t>(s.entry.size()) < (i1 - i0) * Wd) s.entry.resize((i1 - i0) * Wd);
  pool.ParallelFor(i1 - i0, [&](int64_t b, int64_t e, int thread) {
    float* scratch = s.slots.data() + thread * n_slots * ops::simd::kSoftmaxPoolLanes;
    const float** scores = s.slot_rows.data() + thread * 2 * n_slots;  // [n_slots]
    const float** values = scores + n_slots;                           // [n_slots]
    for (int64_t i = i0 + b; i < i0 + e; ++i) {
      float* entry = s.entry.data() + (i - i0) * Wd;  // [Wd]
      // ---- Pool window i per channel (spec §4.4) ----
      // CSA slots: the previous window's first halves [0, Wd) (value 0, gate
      // −inf before window 0), then this window's second halves [Wd, 2·Wd);
      // HCA: this window's r rows. Per channel: softmax of the gates over
      // the slots, the values weighted by it.
      const int64_t first = i * r;  // the window's first position
      const bool has_prev = overlap && first >= r;
      for (int64_t j = 0; j < n_slots; ++j) {
        if (!overlap) {
          scores[j] = row_g(first + j);
          values[j] = row_k(first + j);
        } else if (j < r) {
          scores[j] = has_prev ? row_g(first - r + j) : s.missing.data();
          values[j] = has_prev ? row_k(first - r + j) : s.missing.data() + Wd;
        } else {
          scores[j] = row_g(first + j - r) + Wd;
          values[j] = row_k(first + j - r) + Wd;
        }
      }
      ops::SoftmaxPool(entry, scores, values, n_slots, Wd, scratch);

      // ---- Post-process: norm, RoPE at the window's first position, QAT sims ----
      RmsNorm(entry, entry, w.norm.data(), Wd, eps);
      rope.Rotate(entry + Wd - rope_dim, first, /*inverse=*/false);
      if (kind == CompressorKind::kMain) {
        if (opts.kv_quant) ops::QuantizeDequantizeFp8(entry, Wd - rope_dim, 64);
      } else {
        HadamardRotate(entry, Wd);
        if (opts.index_quant) ops::QuantizeDequantizeFp4(entry, Wd, 32);
      }
    }
  });

  // The rows and entries join the state in order.
  for (int64_t t = 0; t < T; ++t) {
    float* row = st.rows.Append(pos0 + t);
    std::copy_n(kv + t * CW, CW, row);
    std::copy_n(score + t * CW, CW, row + CW);
  }
  st.entries.insert(st.entries.end(), s.entry.data(), s.entry.data() + (i1 - i0) * Wd);
}

}  // namespace dsv4::deepseek_v4
