// ops/simd bf16 × f32 matvec on AVX-512: the decode path of a bf16 weight
// (DeepSeek-V4's head, its compressors' wkv and wgate, the MoE gate) for one
// token.
//
// Bit for bit the Highway matvec (matmul_simd.cc, Bf16Fmt on AVX-512), so that
// a token's result still does not depend on how many tokens share its call
// (the tile path sums in that order too). That order, per output row: lane i
// of one accumulator takes, for each 32 inputs j…j+31 in k order,
// FMA(w[j+2i], x[j+2i]) then FMA(w[j+2i+1], x[j+2i+1]); the output is
// _mm512_reduce_add_ps of the accumulator, plus 0.0f (the empty scalar tail).
//
// Why it is faster. That order is one chain of dependent FMAs per row, two per
// 64 bytes of weights: one row at a time waits on the FMA latency, and the
// Highway kernel's four rows side by side are four streams through memory,
// which the memory system serves more slowly than one. Here two chains run
// staggered by half a row: the second half of row n beside the first half of
// row n + 1. Their bytes, [row n + R/2, row n + 1 + R/2), are one contiguous
// window, so the weights are read as one stream, prefetched into L1
// kAheadBytes ahead in address order, two lines per step.
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

// How far the prefetch stream runs ahead of the leading half row. Tuned on
// Zen 5 with model decode (`dsv4 bench`, 4 GB synthetic V4, 2 threads, K =
// 2048, fast memory state, interleaved): 6 KiB 102.4 tok/s, 14 KiB 101.1;
// with one thread `matmul_bench 1 134 3 bf16 2048 decode` read 2–20 KiB
// within noise.
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

// The prefetch stream: lines [from, from + bytes) of the window ahead, if they
// lie before `end` (addresses, not pointers: past the weights they are only
// prefetched, never read).
DSV4_BF16F32_TARGET inline void Fetch(uintptr_t from, int64_t bytes, uintptr_t end) {
  for (int64_t b = 0; b < bytes; b += 64) {
    if (from + static_cast<uintptr_t>(b) < end) {
      _mm_prefetch(reinterpret_cast<const char*>(from + static_cast<uintptr_t>(b)), _MM_HINT_T0);
    }
  }
}

struct Scratch {
  std::vector<float> x;  // x deinterleaved per 32 inputs: evens, then odds
};

DSV4_BF16F32_TARGET bool TryMatVec(const MatMulArgs& a) {
  const int64_t k_size = a.w.sizes[1];
  if (a.n_tokens != 1 || a.w.dtype != DType::kBF16 || k_size % 64 != 0 || k_size == 0 ||
      a.w.strides[1] != 1) {
    return false;
  }
  if (a.row_end <= a.row_begin) return true;
  thread_local Scratch s;
  if (s.x.size() < static_cast<size_t>(k_size + 16)) s.x.resize(static_cast<size_t>(k_size + 16));
  float* xd =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s.x.data()) + 63) & ~uintptr_t{63});
  // Chunk c (inputs 32c…32c + 31): xd[32c + i] = x[32c + 2i], xd[32c + 16 + i] = x[32c + 2i + 1].
  const __m512i even_idx =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_idx =
      _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t k = 0; k < k_size; k += 32) {
    const __m512 lo = _mm512_loadu_ps(a.x + k), hi = _mm512_loadu_ps(a.x + k + 16);
    _mm512_store_ps(xd + k, _mm512_permutex2var_ps(lo, even_idx, hi));
    _mm512_store_ps(xd + k + 16, _mm512_permutex2var_ps(lo, odd_idx, hi));
  }
  const int64_t row_elems = a.w.strides[0];
  const uint16_t* base = static_cast<const uint16_t*>(a.w.data);
  const int64_t half = k_size / 2;  // inputs per half row, a multiple of 32
  const uintptr_t end = reinterpret_cast<uintptr_t>(base + a.row_end * row_elems);
  // The stream runs this far ahead of the trailing half row.
  const int64_t ahead = 2 * half + kAheadBytes;
  // Window of rows n (second half) and n + 1 (first half) starts at row n + R/2.
  auto window = [&](int64_t n) { return reinterpret_cast<uintptr_t>(base + n * row_elems + half); };
  // Row row_begin's first half alone (the stream starts at the row).
  __m512 lead = _mm512_setzero_ps();
  {
    const uint16_t* row = base + a.row_begin * row_elems;
    const uintptr_t from = reinterpret_cast<uintptr_t>(row) + ahead;
    Fetch(reinterpret_cast<uintptr_t>(row), ahead, end);
    for (int64_t k = 0; k < half; k += 32) {
      Fetch(from + static_cast<uintptr_t>(2 * k), 64, end);
      lead = Step(row + k, xd + k, xd + k + 16, lead);
    }
  }
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint16_t* tail_row = base + n * row_elems + half;  // row n, second half
    __m512 tail = lead;
    lead = _mm512_setzero_ps();
    const uintptr_t from = window(n) + ahead;
    if (n + 1 < a.row_end) {
      const uint16_t* lead_row = base + (n + 1) * row_elems;  // row n + 1, first half
      for (int64_t k = 0; k < half; k += 32) {
        Fetch(from + static_cast<uintptr_t>(4 * k), 128, end);
        tail = Step(tail_row + k, xd + half + k, xd + half + k + 16, tail);
        lead = Step(lead_row + k, xd + k, xd + k + 16, lead);
      }
    } else {
      for (int64_t k = 0; k < half; k += 32) {
        tail = Step(tail_row + k, xd + half + k, xd + half + k + 16, tail);
      }
    }
    a.out[n - a.row_begin] = _mm512_reduce_add_ps(tail) + 0.0f;
  }
  return true;
}

}  // namespace

TryMatMulFn Bf16F32MatVecKernel() {
  static const bool on = x86::CpuHasAvx512() && !x86::TurnedOff("DSV4_BF16_F32_MATVEC");
  return on ? &TryMatVec : nullptr;
}

#else  // !DSV4_HAVE_BF16_F32

TryMatMulFn Bf16F32MatVecKernel() { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
