// ops/simd elementwise kernels (rmsnorm, softmax, SwiGLU, interleaved RoPE,
// dot, axpy and their register-blocked many-row forms), one copy per Highway
// target, picked at run time. Semantics are those of the ops/ref twins; sums
// run lane-parallel, exp is Highway's polynomial (contrib/math, ≤ a few ulp),
// so results match to the fp32 elementwise tolerance (NMSE ≤ 1e-7), not bit
// for bit. DotMany and AxpyMany do match Dot and Axpy bit for bit (same
// operations in the same order per output), so batching them changes nothing.
#ifndef DSV4_OPS_SIMD_VEC_SIMD_ONCE_
#define DSV4_OPS_SIMD_VEC_SIMD_ONCE_
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops::simd::detail {
inline constexpr int64_t kMaxRopeDim = 4096;  // rotated dims per head, on the stack
}  // namespace dsv4::ops::simd::detail
#endif  // DSV4_OPS_SIMD_VEC_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/vec_simd.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

HWY_INLINE float SumVec(DF d, VF v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

// The end of a dot product: lane sum of s0 + s1, plus the scalar tail
// a[i, n) · b[i, n) summed in order. Shared by DotImpl and DotManyImpl so
// that their results agree bit for bit.
HWY_INLINE float FinishDot(DF d, VF s0, VF s1, const float* a, const float* b, int64_t i,
                           int64_t n) {
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return SumVec(d, hn::Add(s0, s1)) + tail;
}

float DotImpl(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  return FinishDot(d, s0, s1, a, b, i, n);
}

// kAhead > 0: each step also fetches the line kAhead bytes on, non-temporal
// (only fetched, never read, past the end). The sums are the same either way.
template <int64_t kAhead>
HWY_INLINE float SumWith(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    if constexpr (kAhead > 0) {
      const char* ahead = reinterpret_cast<const char*>(x + i) + kAhead;
      for (int64_t b = 0; b < 16 * N; b += 64) __builtin_prefetch(ahead + b, 0, 0);
    }
    s0 = hn::Add(s0, hn::LoadU(d, x + i));
    s1 = hn::Add(s1, hn::LoadU(d, x + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, x + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, x + i + 3 * N));
  }
  for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::LoadU(d, x + i));
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return SumVec(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))) + tail;
}

float SumImpl(const float* x, int64_t n) { return SumWith<0>(x, n); }
float SumAheadImpl(const float* x, int64_t n) { return SumWith<8192>(x, n); }

// Axpy's scalar tail, y[i, n) += alpha · x[i, n); shared by AxpyImpl and
// AxpyManyImpl so that their results agree bit for bit.
HWY_INLINE void AxpyTail(float* y, float alpha, const float* x, int64_t i, int64_t n) {
  for (; i < n; ++i) y[i] += alpha * x[i];
}
// The same over f16 x (each value converted exactly, then as above).
HWY_INLINE void AxpyTail(float* y, float alpha, const uint16_t* x, int64_t i, int64_t n) {
  for (; i < n; ++i) y[i] += alpha * F16ToF32(x[i]);
}

void AxpyImpl(float* y, float alpha, const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  }
  AxpyTail(y, alpha, x, i, n);
}

// DotMany / AxpyMany register blocking: 4 queries (rows of y) fit the 32
// registers of AVX-512 (and NEON/SVE): DotTile holds 16 accumulators, 4 key
// vectors and 2 query vectors, AxpyTile 16 accumulators, 4 x vectors and an
// alpha. x86 targets with 16 registers take 2.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kManyRows = 2;
#else
constexpr int kManyRows = 4;
#endif
// Keys per DotMany pass over the query tiles: 8 keys of 512 floats (16 KiB)
// stay in L1 while every query tile reads them; passes of 2 or 32 keys were
// slower with many heads, alike with few.
constexpr int64_t kDotKeyChunk = 8;

// A vector loaded once for several FMAs. GCC would otherwise fold the load
// into each FMA that uses it as a memory operand, loading it again for every
// key (20 loads per 16 FMAs in DotTile instead of 12); an empty asm makes the
// value opaque, so it stays in a register. The bits are untouched.
HWY_INLINE VF LoadReused(DF d, const float* p) {
  VF v = hn::LoadU(d, p);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  asm("" : "+v"(v.raw));
#endif
  return v;
}

// DotImpl's two accumulators for query r against key k: s<r><k>0 (even
// vectors and the remainder vector) and s<r><k>1 (odd vectors). Plain
// variables, not an array: scalable vectors cannot form arrays.
#define DSV4_DOT_ACC(r) VF s##r##00 = z, s##r##01 = z, s##r##10 = z, s##r##11 = z
// DotImpl's two-vector step at i for query r against keys 0 and 1.
#define DSV4_DOT_STEP2(r)                         \
  do {                                            \
    if constexpr (MQ > r) {                       \
      const VF a0 = LoadReused(d, qp##r + i);     \
      const VF a1 = LoadReused(d, qp##r + i + N); \
      s##r##00 = hn::MulAdd(a0, b00, s##r##00);   \
      s##r##01 = hn::MulAdd(a1, b01, s##r##01);   \
      if constexpr (MK > 1) {                     \
        s##r##10 = hn::MulAdd(a0, b10, s##r##10); \
        s##r##11 = hn::MulAdd(a1, b11, s##r##11); \
      }                                           \
    }                                             \
  } while (0)
// DotImpl's remainder vector at i, into the first accumulator.
#define DSV4_DOT_STEP1(r)                                             \
  do {                                                                \
    if constexpr (MQ > r) {                                           \
      const VF a0 = LoadReused(d, qp##r + i);                         \
      s##r##00 = hn::MulAdd(a0, b00, s##r##00);                       \
      if constexpr (MK > 1) s##r##10 = hn::MulAdd(a0, b10, s##r##10); \
    }                                                                 \
  } while (0)
#define DSV4_DOT_FINISH(r)                                                            \
  do {                                                                                \
    if constexpr (MQ > r) {                                                           \
      out[r * out_stride] = FinishDot(d, s##r##00, s##r##01, qp##r, kp0, i, n);       \
      if constexpr (MK > 1) {                                                         \
        out[r * out_stride + 1] = FinishDot(d, s##r##10, s##r##11, qp##r, kp1, i, n); \
      }                                                                               \
    }                                                                                 \
  } while (0)

// out[r · out_stride + k] = DotImpl(q + r · q_stride, keys[k], n) for MQ
// queries r × MK keys k (MQ ≤ 4, MK ≤ 2), bit for bit: each product runs
// DotImpl's own sequence (two accumulators over alternating vectors, the
// remainder vector into the first, FinishDot), while every loaded vector
// feeds MK or MQ of them.
template <int MQ, int MK>
HWY_INLINE void DotTile(DF d, const float* q, int64_t q_stride, const float* const* keys, int64_t n,
                        float* out, int64_t out_stride) {
  static_assert(MQ >= 1 && MQ <= 4 && MK >= 1 && MK <= 2);
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF z = hn::Zero(d);
  const float* qp0 = q;
  const float* qp1 = q + (MQ > 1 ? q_stride : 0);
  const float* qp2 = q + (MQ > 2 ? 2 * q_stride : 0);
  const float* qp3 = q + (MQ > 3 ? 3 * q_stride : 0);
  const float* kp0 = keys[0];
  const float* kp1 = keys[MK - 1];
  DSV4_DOT_ACC(0);
  DSV4_DOT_ACC(1);
  DSV4_DOT_ACC(2);
  DSV4_DOT_ACC(3);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF b00 = hn::LoadU(d, kp0 + i), b01 = hn::LoadU(d, kp0 + i + N);
    const VF b10 = MK > 1 ? hn::LoadU(d, kp1 + i) : z;
    const VF b11 = MK > 1 ? hn::LoadU(d, kp1 + i + N) : z;
    DSV4_DOT_STEP2(0);
    DSV4_DOT_STEP2(1);
    DSV4_DOT_STEP2(2);
    DSV4_DOT_STEP2(3);
  }
  for (; i + N <= n; i += N) {
    const VF b00 = hn::LoadU(d, kp0 + i);
    const VF b10 = MK > 1 ? hn::LoadU(d, kp1 + i) : z;
    DSV4_DOT_STEP1(0);
    DSV4_DOT_STEP1(1);
    DSV4_DOT_STEP1(2);
    DSV4_DOT_STEP1(3);
  }
  DSV4_DOT_FINISH(0);
  DSV4_DOT_FINISH(1);
  DSV4_DOT_FINISH(2);
  DSV4_DOT_FINISH(3);
}
#undef DSV4_DOT_ACC
#undef DSV4_DOT_STEP2
#undef DSV4_DOT_STEP1
#undef DSV4_DOT_FINISH

// DotTile for mq ≤ MQ queries.
template <int MQ, int MK>
HWY_INLINE void DotTileN(DF d, int64_t mq, const float* q, int64_t q_stride,
                         const float* const* keys, int64_t n, float* out, int64_t out_stride) {
  if constexpr (MQ > 1) {
    if (mq < MQ) return DotTileN<MQ - 1, MK>(d, mq, q, q_stride, keys, n, out, out_stride);
  }
  DotTile<MQ, MK>(d, q, q_stride, keys, n, out, out_stride);
}

// DotMany's keys are rows of a KV cache listed by pointer — MQA attention's
// window ring and its compressed entries, the CSA ones in top-k order, not
// in memory order — which the hardware prefetcher does not follow from one
// row to the next. So the first kKeyPrefetchLines lines of each key row
// kKeyPrefetchChunks chunks ahead are fetched into L1 by software (the
// prefetcher then follows each row); the sums do not depend on it.
constexpr int64_t kKeyPrefetchLines = 8, kKeyPrefetchChunks = 4;

HWY_INLINE void PrefetchKeys(const float* const* keys, int64_t k_begin, int64_t k_end, int64_t n) {
  const int64_t bytes = std::min<int64_t>(64 * kKeyPrefetchLines, 4 * n);
  for (int64_t k = k_begin; k < k_end; ++k) {
    for (int64_t b = 0; b < bytes; b += 64) {
      __builtin_prefetch(reinterpret_cast<const char*>(keys[k]) + b, 0, 3);
    }
  }
}

void DotManyImpl(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
                 int64_t n_keys, int64_t n, float* out) {
  const DF d;
  constexpr int64_t kAhead = kKeyPrefetchChunks * kDotKeyChunk;  // keys
  PrefetchKeys(keys, 0, std::min(n_keys, kAhead), n);
  for (int64_t k0 = 0; k0 < n_keys; k0 += kDotKeyChunk) {
    const int64_t k1 = std::min(n_keys, k0 + kDotKeyChunk);
    PrefetchKeys(keys, std::min(n_keys, k0 + kAhead), std::min(n_keys, k1 + kAhead), n);
    for (int64_t h = 0; h < n_q; h += kManyRows) {
      const int64_t mq = std::min<int64_t>(kManyRows, n_q - h);
      const float* qh = q + h * q_stride;
      float* oh = out + h * n_keys;
      int64_t k = k0;
      for (; k + 2 <= k1; k += 2) {
        DotTileN<kManyRows, 2>(d, mq, qh, q_stride, keys + k, n, oh + k, n_keys);
      }
      if (k < k1) DotTileN<kManyRows, 1>(d, mq, qh, q_stride, keys + k, n, oh + k, n_keys);
    }
  }
}

// Row r's accumulators: y vectors at j, j + N, j + 2N, j + 3N.
#define DSV4_AXPY_ACC(r) VF c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z
#define DSV4_AXPY_LOAD(r)                                       \
  do {                                                          \
    if constexpr (MY > r) {                                     \
      const float* yr = y + r * y_stride + j;                   \
      c##r##0 = hn::LoadU(d, yr);                               \
      if constexpr (MV > 1) c##r##1 = hn::LoadU(d, yr + N);     \
      if constexpr (MV > 2) c##r##2 = hn::LoadU(d, yr + 2 * N); \
      if constexpr (MV > 3) c##r##3 = hn::LoadU(d, yr + 3 * N); \
    }                                                           \
  } while (0)
// AxpyImpl's MulAdd(alpha, x, y) of key i on row r.
#define DSV4_AXPY_FMA(r)                                           \
  do {                                                             \
    if constexpr (MY > r) {                                        \
      const VF va = hn::Set(d, alpha[r * n_keys + i]);             \
      c##r##0 = hn::MulAdd(va, x0, c##r##0);                       \
      if constexpr (MV > 1) c##r##1 = hn::MulAdd(va, x1, c##r##1); \
      if constexpr (MV > 2) c##r##2 = hn::MulAdd(va, x2, c##r##2); \
      if constexpr (MV > 3) c##r##3 = hn::MulAdd(va, x3, c##r##3); \
    }                                                              \
  } while (0)
#define DSV4_AXPY_STORE(r)                                      \
  do {                                                          \
    if constexpr (MY > r) {                                     \
      float* yr = y + r * y_stride + j;                         \
      hn::StoreU(c##r##0, d, yr);                               \
      if constexpr (MV > 1) hn::StoreU(c##r##1, d, yr + N);     \
      if constexpr (MV > 2) hn::StoreU(c##r##2, d, yr + 2 * N); \
      if constexpr (MV > 3) hn::StoreU(c##r##3, d, yr + 3 * N); \
    }                                                           \
  } while (0)

// y[r · y_stride + j, + MV·N) += Σ_i alpha[r · n_keys + i] · x[i][j, + MV·N)
// for MY rows r (MY ≤ 4, MV ≤ 4 vectors), the tile held in registers across
// all keys, which run in order: each y value sees the MulAdds of n_keys
// AxpyImpl calls, in their order, and each x vector is loaded once per tile.
// N values of x at p as f32: f32 as they are, f16 (uint16_t bits) converted
// exactly.
HWY_INLINE VF LoadAsF32(DF d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadAsF32(DF d, const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

template <int MY, int MV, typename X>
HWY_INLINE void AxpyTile(DF d, float* y, int64_t y_stride, const float* alpha, const X* const* x,
                         int64_t n_keys, int64_t j) {
  static_assert(MY >= 1 && MY <= 4 && MV >= 1 && MV <= 4);
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF z = hn::Zero(d);
  DSV4_AXPY_ACC(0);
  DSV4_AXPY_ACC(1);
  DSV4_AXPY_ACC(2);
  DSV4_AXPY_ACC(3);
  DSV4_AXPY_LOAD(0);
  DSV4_AXPY_LOAD(1);
  DSV4_AXPY_LOAD(2);
  DSV4_AXPY_LOAD(3);
  for (int64_t i = 0; i < n_keys; ++i) {
    const X* xi = x[i] + j;
    const VF x0 = LoadAsF32(d, xi);
    const VF x1 = MV > 1 ? LoadAsF32(d, xi + N) : z;
    const VF x2 = MV > 2 ? LoadAsF32(d, xi + 2 * N) : z;
    const VF x3 = MV > 3 ? LoadAsF32(d, xi + 3 * N) : z;
    DSV4_AXPY_FMA(0);
    DSV4_AXPY_FMA(1);
    DSV4_AXPY_FMA(2);
    DSV4_AXPY_FMA(3);
  }
  DSV4_AXPY_STORE(0);
  DSV4_AXPY_STORE(1);
  DSV4_AXPY_STORE(2);
  DSV4_AXPY_STORE(3);
}
#undef DSV4_AXPY_ACC
#undef DSV4_AXPY_LOAD
#undef DSV4_AXPY_FMA
#undef DSV4_AXPY_STORE

// AxpyTile for my ≤ MY rows.
template <int MY, int MV, typename X>
HWY_INLINE void AxpyTileN(DF d, int64_t my, float* y, int64_t y_stride, const float* alpha,
                          const X* const* x, int64_t n_keys, int64_t j) {
  if constexpr (MY > 1) {
    if (my < MY) return AxpyTileN<MY - 1, MV>(d, my, y, y_stride, alpha, x, n_keys, j);
  }
  AxpyTile<MY, MV>(d, y, y_stride, alpha, x, n_keys, j);
}

template <typename X>
HWY_INLINE void AxpyManyOf(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                           const X* const* x, int64_t n_keys, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // Column tiles outermost: every row tile reads the same slice of the x
  // rows, which stays in cache between them.
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    for (int64_t h = 0; h < n_y; h += kManyRows) {
      AxpyTileN<kManyRows, 4>(d, std::min<int64_t>(kManyRows, n_y - h), y + h * y_stride, y_stride,
                              alpha + h * n_keys, x, n_keys, j);
    }
  }
  for (; j + N <= n; j += N) {
    for (int64_t h = 0; h < n_y; h += kManyRows) {
      AxpyTileN<kManyRows, 1>(d, std::min<int64_t>(kManyRows, n_y - h), y + h * y_stride, y_stride,
                              alpha + h * n_keys, x, n_keys, j);
    }
  }
  if (j == n) return;
  for (int64_t h = 0; h < n_y; ++h) {
    for (int64_t i = 0; i < n_keys; ++i) {
      AxpyTail(y + h * y_stride, alpha[h * n_keys + i], x[i], j, n);
    }
  }
}

void AxpyManyImpl(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                  const float* const* x, int64_t n_keys, int64_t n) {
  AxpyManyOf(y, n_y, y_stride, alpha, x, n_keys, n);
}

void AxpyManyF16Impl(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                     const uint16_t* const* x, int64_t n_keys, int64_t n) {
  AxpyManyOf(y, n_y, y_stride, alpha, x, n_keys, n);
}

// Channels a vector at a time: the max over the slots, then each slot's
// exp (kept in scratch) into the sum, then the weighted sum, each in order
// of j as the scalar twin; the tail channels take the twin's own loop.
void SoftmaxPoolImpl(float* out, const float* const* scores, const float* const* values,
                     int64_t n_slots, int64_t n, float* scratch) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t c = 0;
  for (; c + N <= n; c += N) {
    VF mx = neg_inf;
    for (int64_t j = 0; j < n_slots; ++j) {
      const VF v = hn::LoadU(d, scores[j] + c);
      mx = hn::IfThenElse(hn::Lt(mx, v), v, mx);  // std::max(mx, v)
    }
    VF sum = hn::Zero(d);
    for (int64_t j = 0; j < n_slots; ++j) {
      // exp(−inf) = 0: a missing slot (score −inf) adds nothing.
      const VF x = hn::Sub(hn::LoadU(d, scores[j] + c), mx);
      const VF e = hn::IfThenElseZero(hn::Ne(x, neg_inf), hn::Exp(d, x));
      hn::StoreU(e, d, scratch + j * N);
      sum = hn::Add(sum, e);
    }
    VF acc = hn::Zero(d);
    for (int64_t j = 0; j < n_slots; ++j) {
      const VF w = hn::Div(hn::LoadU(d, scratch + j * N), sum);
      acc = hn::Add(acc, hn::Mul(hn::LoadU(d, values[j] + c), w));
    }
    hn::StoreU(acc, d, out + c);
  }
  for (; c < n; ++c) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_slots; ++j) mx = std::max(mx, scores[j][c]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_slots; ++j) sum += std::exp(scores[j][c] - mx);
    float acc = 0.0f;
    for (int64_t j = 0; j < n_slots; ++j) acc += values[j][c] * (std::exp(scores[j][c] - mx) / sum);
    out[c] = acc;
  }
}

// Two passes: the largest value (a lane keeps its own where the new one is
// not greater, so NaN never enters), then the first index holding it.
int64_t ArgmaxImpl(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF m = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    m = hn::IfThenElse(hn::Gt(v, m), v, m);
  }
  float best = hn::GetLane(hn::MaxOfLanes(d, m));  // no NaN lanes
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  if (!(best > -std::numeric_limits<float>::infinity())) return 0;
  const VF vb = hn::Set(d, best);
  for (i = 0; i + N <= n; i += N) {
    const intptr_t j = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), vb));
    if (j >= 0) return i + j;
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // not reached: best is one of x
}

void RmsNormImpl(float* out, const float* x, const float* weight, int64_t n, float eps) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float ss = DotImpl(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const VF vs = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::Mul(hn::Mul(hn::LoadU(d, x + i), vs), hn::LoadU(d, weight + i));
    hn::StoreU(v, d, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// The softmaxes' passes: x[i] = exp(x[i] − mx), returning their sum (lanes,
// then the scalar tail); x[i] *= inv.
HWY_INLINE float ExpMinusMax(DF d, float* x, int64_t n, float mx) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vmx = hn::Set(d, mx);
  VF vsum = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  float sum = 0.0f;
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  return sum + SumVec(d, vsum);
}

HWY_INLINE void ScaleInPlace(DF d, float* x, int64_t n, float inv) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vinv = hn::Set(d, inv);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

void SoftmaxImpl(float* x, int64_t n) {
  if (n <= 0) return;
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  float mx = x[0];
  int64_t i = 0;
  if (n >= N) {
    VF vm = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) vm = hn::Max(vm, hn::LoadU(d, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const float sum = ExpMinusMax(d, x, n, mx);
  // One division, then multiplications (the twin divides each, as llama2.c
  // does: the two differ by at most an ulp, and a vector division per 16
  // values was half the time of this kernel).
  const float inv = 1.0f / sum;
  ScaleInPlace(d, x, n, inv);
}

// SoftmaxImpl's passes with the scale folded into the first and the sink
// into the denominator, vectorised: a scalar exp per key was a visible share
// of DeepSeek-V4's decode attention.
void SoftmaxWithSinkImpl(float* x, int64_t n, float scale, float sink) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vscale = hn::Set(d, scale);
  VF vm = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::Mul(hn::LoadU(d, x + i), vscale);
    hn::StoreU(v, d, x + i);
    vm = hn::IfThenElse(hn::Lt(vm, v), v, vm);  // std::max(vm, v)
  }
  float mx = hn::GetLane(hn::MaxOfLanes(d, vm));
  for (; i < n; ++i) {
    x[i] *= scale;
    mx = std::max(mx, x[i]);
  }
  const float sum = ExpMinusMax(d, x, n, mx);
  const float inv = 1.0f / (sum + std::exp(sink - mx));
  ScaleInPlace(d, x, n, inv);
}

// silu(g) · u as SwiGluImpl computes it.
HWY_INLINE VF SiluTimes(DF d, VF g, VF u) {
  const VF one = hn::Set(d, 1.0f);
  // exp(88) is finite; beyond it silu(g) is -0 to within 1e-36 either way.
  const VF e = hn::Exp(d, hn::Min(hn::Neg(g), hn::Set(d, 88.0f)));
  return hn::Mul(hn::Mul(g, hn::Div(one, hn::Add(one, e))), u);
}

void SwiGluImpl(float* out, const float* gate, const float* up, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(SiluTimes(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] * (1.0f / (1.0f + std::exp(-gate[i]))) * up[i];
}

// One pass for what DeepSeek-V4's MoE did in four (the two limits, SwiGlu,
// the routed weight): min and clamp as std::min and std::clamp compare
// (NaN passes through), the scale last.
void SwiGluLimitedImpl(float* out, const float* gate, const float* up, int64_t n, float limit,
                       float scale) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const bool limited = limit > 0.0f;
  const VF hi = hn::Set(d, limit), lo = hn::Set(d, -limit), vs = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    VF g = hn::LoadU(d, gate + i), u = hn::LoadU(d, up + i);
    if (limited) {
      g = hn::IfThenElse(hn::Lt(hi, g), hi, g);  // std::min(g, limit)
      u = hn::IfThenElse(hn::Lt(u, lo), lo, hn::IfThenElse(hn::Lt(hi, u), hi, u));  // std::clamp
    }
    hn::StoreU(hn::Mul(SiluTimes(d, g, u), vs), d, out + i);
  }
  for (; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limited) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = g * (1.0f / (1.0f + std::exp(-g))) * u * scale;
  }
}

// f32 → f16 rounded to nearest even: vcvtps2ph on x86 targets from AVX2 up
// (F16C), the scalar twin elsewhere (Highway's emulation on SSE4 truncates
// and drops the sign of −0) and for the tail. A NaN stays a NaN (its payload
// may differ from F32ToF16's 0x7e00).
void F32ToF16RowImpl(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, x + i)), dh,
               reinterpret_cast<hwy::float16_t*>(out + i));
  }
#endif
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

// out[i] = x[i] rounded to bf16, as f32 (Bf16ToF32(F32ToBf16(x[i]))): round
// to nearest even on the bits, a NaN made quiet (its payload's top bits kept).
// out may be x.
void RoundToBf16RowImpl(const float* x, float* out, int64_t n) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto abs_mask = hn::Set(di, 0x7fffffff), inf = hn::Set(di, 0x7f800000);
  const auto keep = hn::Set(di, static_cast<int32_t>(0xffff0000u));
  const auto half = hn::Set(di, 0x7fff), one = hn::Set(di, 1), quiet = hn::Set(di, 0x00400000);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(di, hn::LoadU(d, x + i));
    const auto nan = hn::Gt(hn::And(u, abs_mask), inf);
    // u + 0x7fff + bit 16 of u: carries into the kept half exactly when the
    // dropped half is above the tie, or at the tie with an odd kept half.
    const auto rounded =
        hn::And(hn::Add(u, hn::Add(half, hn::And(hn::ShiftRight<16>(u), one))), keep);
    const auto r = hn::IfThenElse(nan, hn::And(hn::Or(u, quiet), keep), rounded);
    hn::StoreU(hn::BitCast(d, r), d, out + i);
  }
  for (; i < n; ++i) out[i] = Bf16ToF32(F32ToBf16(x[i]));
}

void RopeInterleavedImpl(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                         float theta) {
  CHECK(rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim <= detail::kMaxRopeDim,
        "RoPE: rot_dim %lld must be even and at most head_dim %lld (and %lld)",
        static_cast<long long>(rot_dim), static_cast<long long>(head_dim),
        static_cast<long long>(detail::kMaxRopeDim));
  // cos and ±sin per lane, the same angles as ops::ref::RopeInterleaved.
  HWY_ALIGN float cs[detail::kMaxRopeDim];
  HWY_ALIGN float sn[detail::kMaxRopeDim];
  for (int64_t i = 0; i < rot_dim; i += 2) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rot_dim));
    const float angle = static_cast<float>(pos) * freq;
    const float c = std::cos(angle), s = std::sin(angle);
    cs[i] = c, cs[i + 1] = c;
    sn[i] = -s, sn[i + 1] = s;
  }
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t h = 0; h < n_heads; ++h) {
    float* p = x + h * head_dim;
    int64_t i = 0;
    if (N >= 2) {
      for (; i + N <= rot_dim; i += N) {
        // (a, b) -> (a·c − b·s, b·c + a·s): v·cos + swap(v)·(−s, s).
        const VF v = hn::LoadU(d, p + i);
        const VF sw = hn::Reverse2(d, v);
        hn::StoreU(hn::MulAdd(sw, hn::Load(d, sn + i), hn::Mul(v, hn::Load(d, cs + i))), d, p + i);
      }
    }
    for (; i < rot_dim; i += 2) {
      const float a = p[i], b = p[i + 1];
      p[i] = a * cs[i] + b * sn[i];
      p[i + 1] = a * sn[i + 1] + b * cs[i];
    }
  }
}

// Activation quantise-dequantise per block to a small float format with
// kMantissa mantissa bits, no infinities, largest magnitude `max_value`,
// smallest normal `min_normal` (the ops::ref twins, bit for bit for inputs
// without NaN): s = 2^ceil(log2(max(amax, amax_floor) / max_value)); x =
// format(clamp(x / s, ±max_value)) · s. s is a power of two whose inverse is
// a normal float, so x · (1/s) is x / s exactly. Rounding in f32 bits:
// normals keep kMantissa bits (round to nearest even on the 23 − kMantissa
// dropped bits, the carry running into the exponent); below min_normal the
// grid is steps of min_normal / 2^kMantissa (Round, to nearest even).
// `scalar(q)` rounds one value for the block's tail.
template <int kMantissa, class Scalar>
HWY_INLINE void QuantizeDequantizeMini(float* x, int64_t n, int64_t block, float max_value,
                                       float min_normal, float amax_floor, const Scalar& scalar) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr int kDropped = 23 - kMantissa;
  const float step = std::ldexp(min_normal, -kMantissa);
  const VF lim = hn::Set(d, max_value), vmin_normal = hn::Set(d, min_normal);
  const VF inv_step = hn::Set(d, 1.0f / step), vstep = hn::Set(d, step);
  const auto round_bias = hn::Set(du, (1u << (kDropped - 1)) - 1);
  const auto keep = hn::Set(du, ~((1u << kDropped) - 1));
  const auto one = hn::Set(du, 1u);
  for (int64_t b = 0; b < n; b += block) {
    float* p = x + b;
    VF vmax = hn::Set(d, amax_floor);
    int64_t i = 0;
    for (; i + N <= block; i += N) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(d, p + i)));
    float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; i < block; ++i) amax = std::max(amax, std::fabs(p[i]));
    const float scale = ops::ref::Pow2Ceil(amax * (1.0f / max_value));
    const float inv = 1.0f / scale;
    const VF vs = hn::Set(d, scale), vinv = hn::Set(d, inv);
    i = 0;
    for (; i + N <= block; i += N) {
      const VF q = hn::Min(hn::Max(hn::Mul(hn::LoadU(d, p + i), vinv), hn::Neg(lim)), lim);
      const VF a = hn::Abs(q);
      const auto au = hn::BitCast(du, a);
      const auto rounded = hn::And(
          hn::Add(au, hn::Add(round_bias, hn::And(hn::ShiftRight<kDropped>(au), one))), keep);
      const VF normal = hn::BitCast(d, rounded);
      const VF sub = hn::Mul(hn::Round(hn::Mul(a, inv_step)), vstep);
      const VF mag = hn::IfThenElse(hn::Lt(a, vmin_normal), sub, normal);
      hn::StoreU(hn::Mul(hn::CopySignToAbs(mag, q), vs), d, p + i);
    }
    for (; i < block; ++i) p[i] = scalar(std::clamp(p[i] * inv, -max_value, max_value)) * scale;
  }
}

// FP8 e4m3 (ops::ref::QuantizeDequantizeFp8): 3 mantissa bits, max 448,
// smallest normal 2^-6, amax at least 1e-4.
void QuantizeDequantizeFp8Impl(float* x, int64_t n, int64_t block) {
  CHECK(block > 0 && n % block == 0, "FP8 act quant: %lld values, block %lld",
        static_cast<long long>(n), static_cast<long long>(block));
  QuantizeDequantizeMini<3>(x, n, block, 448.0f, 0.015625f, 1e-4f,
                            [](float q) { return Fp8E4m3ToF32(F32ToFp8E4m3(q)); });
}

// FP4 e2m1 (ops::ref::QuantizeDequantizeFp4; DeepSeek-V4's indexer and its
// compressor, index_quant): 1 mantissa bit, max 6, smallest normal 1, amax
// at least 6 · 2^-126.
void QuantizeDequantizeFp4Impl(float* x, int64_t n, int64_t block) {
  CHECK(block > 0 && n % block == 0, "FP4 act quant: %lld values, block %lld",
        static_cast<long long>(n), static_cast<long long>(block));
  QuantizeDequantizeMini<1>(x, n, block, 6.0f, 1.0f, 6.0f * std::ldexp(1.0f, -126),
                            [](float q) { return Fp4E2m1ToF32(F32ToFp4E2m1(q)); });
}

float FmaLoopImpl(int64_t fmas, int64_t* done) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF m = hn::Set(d, 0.999999f), a = hn::Set(d, 1e-7f);
  // Distinct starting values: equal chains would be merged by the compiler.
  const VF step = hn::Set(d, 0.01f);
  VF c0 = hn::Set(d, 1.0f), c1 = hn::Add(c0, step), c2 = hn::Add(c1, step);
  VF c3 = hn::Add(c2, step), c4 = hn::Add(c3, step), c5 = hn::Add(c4, step);
  VF c6 = hn::Add(c5, step), c7 = hn::Add(c6, step), c8 = hn::Add(c7, step);
  VF c9 = hn::Add(c8, step), c10 = hn::Add(c9, step), c11 = hn::Add(c10, step);
  VF c12 = hn::Add(c11, step), c13 = hn::Add(c12, step), c14 = hn::Add(c13, step);
  VF c15 = hn::Add(c14, step);
  const int64_t iters = std::max<int64_t>(1, fmas / (16 * N));
  for (int64_t i = 0; i < iters; ++i) {
    c0 = hn::MulAdd(c0, m, a), c1 = hn::MulAdd(c1, m, a), c2 = hn::MulAdd(c2, m, a);
    c3 = hn::MulAdd(c3, m, a), c4 = hn::MulAdd(c4, m, a), c5 = hn::MulAdd(c5, m, a);
    c6 = hn::MulAdd(c6, m, a), c7 = hn::MulAdd(c7, m, a), c8 = hn::MulAdd(c8, m, a);
    c9 = hn::MulAdd(c9, m, a), c10 = hn::MulAdd(c10, m, a), c11 = hn::MulAdd(c11, m, a);
    c12 = hn::MulAdd(c12, m, a), c13 = hn::MulAdd(c13, m, a), c14 = hn::MulAdd(c14, m, a);
    c15 = hn::MulAdd(c15, m, a);
  }
  *done = iters * 16 * N;
  const VF s = hn::Add(
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
      hn::Add(hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)),
              hn::Add(hn::Add(c12, c13), hn::Add(c14, c15))));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(DotImpl);
HWY_EXPORT(SumImpl);
HWY_EXPORT(SumAheadImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(DotManyImpl);
HWY_EXPORT(AxpyManyImpl);
HWY_EXPORT(AxpyManyF16Impl);
HWY_EXPORT(F32ToF16RowImpl);
HWY_EXPORT(RoundToBf16RowImpl);
HWY_EXPORT(ArgmaxImpl);
HWY_EXPORT(SoftmaxPoolImpl);
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SoftmaxWithSinkImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(SwiGluLimitedImpl);
HWY_EXPORT(RopeInterleavedImpl);
HWY_EXPORT(QuantizeDequantizeFp8Impl);
HWY_EXPORT(QuantizeDequantizeFp4Impl);
HWY_EXPORT(FmaLoopImpl);

float Dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n);
}
float Sum(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumImpl)(x, n); }
float SumAhead(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumAheadImpl)(x, n); }
void Axpy(float* y, float alpha, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(y, alpha, x, n);
}
void DotMany(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
             int64_t n_keys, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotManyImpl)(q, n_q, q_stride, keys, n_keys, n, out);
}
void AxpyMany(float* y, int64_t n_y, int64_t y_stride, const float* alpha, const float* const* x,
              int64_t n_keys, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyManyImpl)(y, n_y, y_stride, alpha, x, n_keys, n);
}
void AxpyManyF16(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                 const uint16_t* const* x, int64_t n_keys, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyManyF16Impl)(y, n_y, y_stride, alpha, x, n_keys, n);
}
void F32ToF16Row(const float* x, uint16_t* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToF16RowImpl)(x, out, n);
}
void RoundToBf16Row(const float* x, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RoundToBf16RowImpl)(x, out, n);
}
int64_t Argmax(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(ArgmaxImpl)(x, n); }
void SoftmaxPool(float* out, const float* const* scores, const float* const* values,
                 int64_t n_slots, int64_t n, float* scratch) {
  HWY_DYNAMIC_DISPATCH(SoftmaxPoolImpl)(out, scores, values, n_slots, n, scratch);
}
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(out, x, weight, n, eps);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
void SoftmaxWithSink(float* x, int64_t n, float scale, float sink) {
  HWY_DYNAMIC_DISPATCH(SoftmaxWithSinkImpl)(x, n, scale, sink);
}
void SwiGlu(float* out, const float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(out, gate, up, n);
}
void SwiGluLimited(float* out, const float* gate, const float* up, int64_t n, float limit,
                   float scale) {
  HWY_DYNAMIC_DISPATCH(SwiGluLimitedImpl)(out, gate, up, n, limit, scale);
}
void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                     float theta) {
  HWY_DYNAMIC_DISPATCH(RopeInterleavedImpl)(x, n_heads, head_dim, rot_dim, pos, theta);
}

void QuantizeDequantizeFp8(float* x, int64_t n, int64_t block) {
  HWY_DYNAMIC_DISPATCH(QuantizeDequantizeFp8Impl)(x, n, block);
}

void QuantizeDequantizeFp4(float* x, int64_t n, int64_t block) {
  HWY_DYNAMIC_DISPATCH(QuantizeDequantizeFp4Impl)(x, n, block);
}

float FmaLoop(int64_t fmas, int64_t* done) { return HWY_DYNAMIC_DISPATCH(FmaLoopImpl)(fmas, done); }

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
