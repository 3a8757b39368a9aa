// ops/simd bf16 × f32 and f32 × f32 matvecs on AVX-512: the decode path of a
// bf16 weight (DeepSeek-V4's head, its compressors' wkv and wgate, the MoE
// gate) or an f32 one (DeepSeek-V4's mHC mixers, llama2.c checkpoints) for one
// token.
//
// Bit for bit the Highway matvec (matmul_simd.cc, Bf16Fmt / F32Fmt on
// AVX-512), so that a token's result still does not depend on how many tokens
// share its call (the tile path sums in that order too). That order, per
// output row: lane i of one accumulator takes, in k order, bf16: for each 32
// inputs j…j+31, FMA(w[j+2i], x[j+2i]) then FMA(w[j+2i+1], x[j+2i+1]); f32:
// for each 16 inputs j…j+15, FMA(w[j+i], x[j+i]); the output is
// _mm512_reduce_add_ps of the accumulator, plus 0.0f (the empty scalar tail).
//
// Why it is faster. That order is one chain of dependent FMAs per row, one or
// two per 64 bytes of weights: one row at a time waits on the FMA latency.
// Here two chains run side by side: row i of the call's first half of rows
// beside row i of its second half, each row a sequential stream of its own,
// prefetched kAheadBytes ahead (into L2). Rows that lie a few KiB apart and
// advance together — the Highway kernel's four adjacent rows, or the second
// half of row n beside the first half of row n + 1, which this kernel did
// until session 15 — defeat the hardware prefetcher on Zen 4: without a
// software prefetch one thread reads them at 15–16 GB/s from memory, where a
// plain sum reads 27–32 and the two far-apart streams 26–31
// (`stream_patterns 256`, bench/). `matmul_bench T 128 5 bf16 2048 decode:8`,
// before → after, medians of six alternations: 1 thread 19.7 → 24.5 GB/s,
// 2 threads 29.4 → 34.0 (docs/benchmarks.md, session 15).
//
// Shapes, outermost first: K input features, N output features.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_HAVE_BF16_F32 1
#include <immintrin.h>
// GCC 12 flags the self-initialised "undefined" vectors inside its AVX-512
// intrinsic headers as (maybe-)uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define DSV4_HAVE_BF16_F32 0
#endif

namespace dsv4::ops::simd {

#if DSV4_HAVE_BF16_F32
namespace {

#define DSV4_BF16F32_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

// How far each row's prefetch runs ahead of it. On Zen 5, for the staggered
// kernel's window (before session 15), with model decode (`dsv4 bench`, 4 GB synthetic V4, 2
// threads, K = 2048, fast memory state, interleaved): 6 KiB 102.4 tok/s,
// 14 KiB 101.1. On Zen 4 for the two streams (`matmul_bench T 128 5 bf16 2048
// decode:8`, medians of five alternations, hint and distance set by
// environment variables in an edit not kept): 6 KiB into L1 30.9 (1 thread)
// and 38.6 GB/s (2), into L2 32.7 and 39.9; 16 KiB into L2 31.7 and 39.6.
constexpr int64_t kAheadBytes = 6 * 1024;

// acc after the 32 weights at w (bf16) against inputs xe (even) and xo (odd).
DSV4_BF16F32_TARGET inline __m512 Step(const uint16_t* w, const float* xe, const float* xo,
                                       __m512 acc) {
  const __m512i u = x86::Opaque(_mm512_loadu_si512(w));
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(0xffff0000u)));
  acc = _mm512_fmadd_ps(even, _mm512_loadu_ps(xe), acc);
  return _mm512_fmadd_ps(odd, _mm512_loadu_ps(xo), acc);
}

// acc after the 16 weights at w (f32) against inputs x (64 bytes, as one bf16 step).
DSV4_BF16F32_TARGET inline __m512 Step(const float* w, const float* x, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_castsi512_ps(x86::Opaque(_mm512_loadu_si512(w))),
                         _mm512_loadu_ps(x), acc);
}

// The weight formats: bf16 (32 inputs per 64-byte step, x deinterleaved into
// evens and odds per step) and f32 (16 inputs per step, x as it is).
template <typename W>
struct Format {
  static constexpr int64_t kStep = 64 / sizeof(W);  // inputs per 64 bytes of a row
  static constexpr DType kDType = sizeof(W) == 2 ? DType::kBF16 : DType::kF32;
  // acc after the step of row w at input k, against x as Prepare laid it out.
  static DSV4_BF16F32_TARGET __m512 At(const W* w, const float* x, int64_t k, __m512 acc) {
    if constexpr (sizeof(W) == 2) {
      return Step(w + k, x + k, x + k + 16, acc);
    } else {
      return Step(w + k, x + k, acc);
    }
  }
};

// The prefetch: lines [from, from + bytes) ahead of a row, if they
// lie before `end` (addresses, not pointers: past the weights they are only
// prefetched, never read).
DSV4_BF16F32_TARGET inline void Fetch(uintptr_t from, int64_t bytes, uintptr_t end) {
  for (int64_t b = 0; b < bytes; b += 64) {
    if (from + static_cast<uintptr_t>(b) < end) {
      x86::PrefetchWeights(reinterpret_cast<const char*>(from + static_cast<uintptr_t>(b)));
    }
  }
}

struct Scratch {
  std::vector<float> x;  // x deinterleaved per 32 inputs: evens, then odds
};

template <typename W>
DSV4_BF16F32_TARGET bool TryMatVec(const MatMulArgs& a) {
  using Fmt = Format<W>;
  constexpr int64_t kStep = Fmt::kStep;
  const int64_t k_size = a.w.sizes[1];
  // K a multiple of two steps: the staggered kernel's half rows needed it; the
  // two-stream loop needs one step, but the calls it takes stay as they were
  // (DeclinesWritingNothing asserts bf16 K % 64 != 0 declines).
  if (a.n_tokens != 1 || a.w.dtype != Fmt::kDType || k_size % (2 * kStep) != 0 || k_size == 0 ||
      a.w.strides[1] != 1) {
    return false;
  }
  if (a.row_end <= a.row_begin) return true;
  if constexpr (x86::kStreamOnly) {
    const W* rows = static_cast<const W*>(a.w.data) + a.row_begin * a.w.strides[0];
    x86::StreamOnly(rows, (a.row_end - a.row_begin) * a.w.strides[0] * int64_t{sizeof(W)}, nullptr,
                    0, kAheadBytes, a.out, a.row_end - a.row_begin);
    return true;
  }
  const float* xd = a.x;
  if constexpr (sizeof(W) == 2) {
    thread_local Scratch s;
    if (s.x.size() < static_cast<size_t>(k_size + 16)) s.x.resize(static_cast<size_t>(k_size + 16));
    float* xs =
        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s.x.data()) + 63) & ~uintptr_t{63});
    // Chunk c (inputs 32c…32c + 31): xs[32c + i] = x[32c + 2i], xs[32c + 16 + i] = x[32c + 2i + 1].
    const __m512i even_idx =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd_idx =
        _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t k = 0; k < k_size; k += 32) {
      const __m512 lo = _mm512_loadu_ps(a.x + k), hi = _mm512_loadu_ps(a.x + k + 16);
      _mm512_store_ps(xs + k, _mm512_permutex2var_ps(lo, even_idx, hi));
      _mm512_store_ps(xs + k + 16, _mm512_permutex2var_ps(lo, odd_idx, hi));
    }
    xd = xs;
  }
  const int64_t row_elems = a.w.strides[0];
  const W* base = static_cast<const W*>(a.w.data);
  const uintptr_t end = reinterpret_cast<uintptr_t>(base + a.row_end * row_elems);
  // Row i of the range's first half beside row i of its second half: two
  // chains, each a sequential stream (rows side by side a few KiB apart
  // defeat the hardware prefetcher), each prefetched kAheadBytes ahead.
  const int64_t pairs = (a.row_end - a.row_begin) / 2;
  const int64_t second = pairs * row_elems;  // elements from a row to its partner
  for (int64_t i = 0; i < pairs; ++i) {
    const W* r0 = base + (a.row_begin + i) * row_elems;
    const W* r1 = r0 + second;
    const uintptr_t f0 = reinterpret_cast<uintptr_t>(r0) + kAheadBytes;
    const uintptr_t f1 = reinterpret_cast<uintptr_t>(r1) + kAheadBytes;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t k = 0; k < k_size; k += kStep) {
      const uintptr_t off = static_cast<uintptr_t>(k) * sizeof(W);
      Fetch(f0 + off, 64, end);
      Fetch(f1 + off, 64, end);
      acc0 = Fmt::At(r0, xd, k, acc0);
      acc1 = Fmt::At(r1, xd, k, acc1);
    }
    a.out[i] = _mm512_reduce_add_ps(acc0) + 0.0f;
    a.out[i + pairs] = _mm512_reduce_add_ps(acc1) + 0.0f;
  }
  for (int64_t n = a.row_begin + 2 * pairs; n < a.row_end; ++n) {  // the odd row left
    const W* r = base + n * row_elems;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < k_size; k += kStep) acc = Fmt::At(r, xd, k, acc);
    a.out[n - a.row_begin] = _mm512_reduce_add_ps(acc) + 0.0f;
  }
  return true;
}

}  // namespace

TryMatMulFn Bf16F32MatVecKernel() {
  static const bool on = x86::CpuHasAvx512() && !x86::TurnedOff("DSV4_BF16_F32_MATVEC");
  return on ? &TryMatVec<uint16_t> : nullptr;
}

TryMatMulFn F32F32MatVecKernel() {
  static const bool on = x86::CpuHasAvx512() && !x86::TurnedOff("DSV4_F32_MATVEC");
  return on ? &TryMatVec<float> : nullptr;
}

#else  // !DSV4_HAVE_BF16_F32

TryMatMulFn Bf16F32MatVecKernel() { return nullptr; }
TryMatMulFn F32F32MatVecKernel() { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
