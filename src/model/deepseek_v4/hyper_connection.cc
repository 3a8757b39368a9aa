// mHC coefficient computation, collapse, expansion and head (see hyper_connection.h).
#include "model/deepseek_v4/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/deepseek_v4/numerics.h"
#include "ops/matmul.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// 1 / sqrt(mean(v²) + eps) over n values (reference: x.square().mean(-1)),
// the sum in double by SumOfSquares (numerics.h).
float InvRms(const float* v, int64_t n, float eps) {
  const double ss = SumOfSquares(v, n);
  return 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
}

// Whether fn is a GGUF quant weight whose products quantise their activations
// (ops::KQuantActivations::kQ8K). Then the mHC input is normalised before fn,
// llama.cpp's order (build_hc_pre/build_hc_head: ggml_rms_norm, then
// ggml_mul_mat), not the reference's product of the raw stream scaled by the
// inverse RMS after: equal up to rounding in f32, but not with q8_0/q8_1
// activations (f16 block scales: f16(r · amax / 127) is not r · f16(amax /
// 127)), nor at the rounding ties of any q8 format.
bool NormaliseFirst(const TensorView& fn) {
  return IsGgmlQuant(fn.dtype) && ops::GetKQuantActivations() == ops::KQuantActivations::kQ8K;
}

// mix[T, M] = (x · r_t) · fnᵀ with r_t = InvRms of token t's row, the rows
// normalised into a scratch copy first (ggml_rms_norm: x · r).
void NormalisedMatMul(ThreadPool& pool, float* mix, const float* x, const TensorView& fn,
                      int64_t n_tokens, int64_t cd, float eps) {
  thread_local std::vector<float> xn;
  if (static_cast<int64_t>(xn.size()) < n_tokens * cd) xn.resize(n_tokens * cd);
  float* xs = xn.data();
  pool.ParallelFor(n_tokens, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float r = InvRms(x + t * cd, cd, eps);
      for (int64_t i = 0; i < cd; ++i) xs[t * cd + i] = x[t * cd + i] * r;
    }
  });
  ops::MatMul(pool, mix, xs, fn, n_tokens);
}

}  // namespace

void SinkhornProject(float* comb, int64_t n, int64_t iters, float eps) {
  // comb[j * n + k]: row j, column k. Row softmax over k, then + eps.
  for (int64_t j = 0; j < n; ++j) {
    float* row = comb + j * n;
    float mx = row[0];
    for (int64_t k = 1; k < n; ++k) mx = std::max(mx, row[k]);
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      row[k] = std::exp(row[k] - mx);
      sum += row[k];
    }
    for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int64_t k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += comb[j * n + k];
      for (int64_t j = 0; j < n; ++j) comb[j * n + k] /= sum + eps;
    }
  };
  auto normalize_rows = [&] {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < n; ++k) sum += comb[j * n + k];
      for (int64_t k = 0; k < n; ++k) comb[j * n + k] /= sum + eps;
    }
  };
  normalize_columns();
  for (int64_t i = 0; i < iters - 1; ++i) {
    normalize_rows();
    normalize_columns();
  }
}

void HcSiteCoefficients(ThreadPool& pool, const HcParams& p, const HyperConnectionWeights& w,
                        const float* x, int64_t n_tokens, const HcMix& out) {
  float *mix = out.mix, *pre = out.pre, *post = out.post, *comb = out.comb;
  const int64_t C = p.streams, CD = p.streams * p.hidden, M = (2 + C) * C;
  CHECK(w.fn.sizes[0] == M && w.fn.sizes[1] == CD && w.base.size() == static_cast<size_t>(M) &&
        w.scale.size() == 3);
  const bool normalise_first = NormaliseFirst(w.fn);
  if (normalise_first) {
    NormalisedMatMul(pool, mix, x, w.fn, n_tokens, CD, p.norm_eps);
  } else {
    ops::MatMul(pool, mix, x, w.fn, n_tokens);  // [T, M] = x[T, C·D] · fnᵀ
  }
  pool.ParallelFor(n_tokens, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* m = mix + t * M;
      // The reference multiplies by the inverse RMS after the matvec.
      if (!normalise_first) {
        const float r = InvRms(x + t * CD, CD, p.norm_eps);
        for (int64_t i = 0; i < M; ++i) m[i] *= r;
      }
      for (int64_t c = 0; c < C; ++c) {
        pre[t * C + c] = Sigmoid(m[c] * w.scale[0] + w.base[c]) + p.hc_eps;
        post[t * C + c] = 2.0f * Sigmoid(m[C + c] * w.scale[1] + w.base[C + c]);
      }
      float* cb = comb + t * C * C;  // [C(src j), C(dst k)] = m[2C + j·C + k]
      for (int64_t i = 0; i < C * C; ++i) cb[i] = m[2 * C + i] * w.scale[2] + w.base[2 * C + i];
      SinkhornProject(cb, C, p.sinkhorn_iters, p.hc_eps);
    }
  });
}

void HcCollapse(const HcParams& p, const float* x, const float* pre, int64_t n_tokens, float* u) {
  const int64_t C = p.streams, D = p.hidden;
  CHECK(C <= kMaxHcMult, "mHC: %lld streams, at most %lld", static_cast<long long>(C),
        static_cast<long long>(kMaxHcMult));
  for (int64_t t = 0; t < n_tokens; ++t) {
    // Per feature Σ_c pre_c · x_c from 0 in order of c (ops::LinearCombine:
    // the plain loops' bits, vectorised).
    const float* rows[kMaxHcMult];
    for (int64_t c = 0; c < C; ++c) rows[c] = x + (t * C + c) * D;
    ops::LinearCombine(u + t * D, rows, pre + t * C, C, D);
  }
}

void HcExpand(const HcParams& p, float* x, const float* y, const float* post, const float* comb,
              int64_t n_tokens) {
  const int64_t C = p.streams, D = p.hidden;
  CHECK(C <= kMaxHcMult, "mHC: %lld streams, at most %lld", static_cast<long long>(C),
        static_cast<long long>(kMaxHcMult));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* xt = x + t * C * D;           // [C, D], read as the old residual
    const float* cb = comb + t * C * C;  // [C(src j), C(dst k)]
    // out_k[d] = post_k · y[d] + Σ_j comb[j, k] · x_j[d]: the sum from 0 in
    // order of j, then the post term added (a LinearCombine over the rows
    // x_0 … x_{C−1}, y), all C outputs in one pass over the rows, in place
    // (no scratch, no copy back).
    const float* rows[kMaxHcMult + 1];
    float* outs[kMaxHcMult];
    for (int64_t j = 0; j < C; ++j) rows[j] = outs[j] = xt + j * D;
    rows[C] = y + t * D;
    float coef[kMaxHcMult * (kMaxHcMult + 1)];  // [C(dst k), C + 1]
    for (int64_t k = 0; k < C; ++k) {
      for (int64_t j = 0; j < C; ++j) coef[k * (C + 1) + j] = cb[j * C + k];
      coef[k * (C + 1) + C] = post[t * C + k];
    }
    ops::LinearCombineRows(outs, C, rows, C + 1, coef, D);
  }
}

void HcCollapse(ThreadPool& pool, const HcParams& p, const float* x, const float* pre,
                int64_t n_tokens, float* u) {
  // Tokens over the pool. (A decoded token's features split over 2 threads
  // took as long as on one thread, fork-join included: a loss.)
  const int64_t C = p.streams, D = p.hidden;
  pool.ParallelFor(n_tokens, [&](int64_t b, int64_t e, int) {
    HcCollapse(p, x + b * C * D, pre + b * C, e - b, u + b * D);
  });
}

void HcExpand(ThreadPool& pool, const HcParams& p, float* x, const float* y, const float* post,
              const float* comb, int64_t n_tokens) {
  const int64_t C = p.streams, D = p.hidden;
  pool.ParallelFor(n_tokens, [&](int64_t b, int64_t e, int) {
    HcExpand(p, x + b * C * D, y + b * D, post + b * C, comb + b * C * C, e - b);
  });
}

void HcHead(ThreadPool& pool, const HcParams& p, const HyperConnectionWeights& w, const float* x,
            int64_t n_tokens, const HcMix& out, float* u) {
  float *mix = out.mix, *pre = out.pre;
  const int64_t C = p.streams, CD = p.streams * p.hidden;
  CHECK(w.fn.sizes[0] == C && w.fn.sizes[1] == CD && w.base.size() == static_cast<size_t>(C) &&
        w.scale.size() == 1);
  const bool normalise_first = NormaliseFirst(w.fn);
  if (normalise_first) {
    NormalisedMatMul(pool, mix, x, w.fn, n_tokens, CD, p.norm_eps);
  } else {
    ops::MatMul(pool, mix, x, w.fn, n_tokens);  // [T, C]
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float r = normalise_first ? 1.0f : InvRms(x + t * CD, CD, p.norm_eps);
    for (int64_t c = 0; c < C; ++c) {
      pre[t * C + c] = Sigmoid(mix[t * C + c] * r * w.scale[0] + w.base[c]) + p.hc_eps;
    }
  }
  HcCollapse(p, x, pre, n_tokens, u);
}

}  // namespace dsv4::deepseek_v4
