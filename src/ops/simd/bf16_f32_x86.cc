// ops/simd bf16, f32, f16 and q8_0 × f32 matvecs on AVX-512: the decode path
// of a bf16 weight (DeepSeek-V4's head, its compressors' wkv and wgate, the MoE
// gate), an f32 one (DeepSeek-V4's mHC mixers, llama2.c checkpoints) or a GGUF
// model's f16 and q8_0 weights, for one token or a few (kMaxTokens).
//
// Bit for bit the Highway matvec (matmul_simd.cc, Bf16Fmt / F32Fmt / F16Fmt /
// Q8Fmt on AVX-512), so that a token's result still does not depend on how
// many tokens share its call (the tile path sums in that order too). That
// order, per output row: lane i of one accumulator takes, in k order, bf16:
// for each 32 inputs j…j+31, FMA(w[j+2i], x[j+2i]) then FMA(w[j+2i+1],
// x[j+2i+1]); f32 and f16: for each 16 inputs j…j+15, FMA(w[j+i], x[j+i]);
// q8_0: the same with w = code · block scale (an exact product: 8 × 11
// significant bits); the output is _mm512_reduce_add_ps of the accumulator,
// plus 0.0f (the empty scalar tail).
//
// Why it is faster. That order is one chain of dependent FMAs per row, one or
// two per 64 bytes of weights: one row at a time waits on the FMA latency.
// Here two chains run side by side: row i of the call's first half of rows
// beside row i of its second half, each half a sequential stream of its own
// (q8_0's also fetched kAheadBytes ahead into L2; see kPrefetch); for rows
// longer than kLongX, four chains (quarters). Rows that lie a few KiB apart and
// advance together — the Highway kernel's four adjacent rows, or the second
// half of row n beside the first half of row n + 1 — defeat the hardware
// prefetcher: one thread then reads them at about half the speed of a plain
// sum of the same bytes, where two far-apart streams read about as fast as
// the plain sum (`stream_patterns 256`, bench/, measures the patterns).
//
// Shapes, outermost first: K input features, N output features.
#include <algorithm>
#include <cstdint>
#include <cstring>
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

#define DSV4_BF16F32_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c")))

// How far each row's prefetch runs ahead of it (for the formats that prefetch,
// see kPrefetch). Distances from 6 to 16 KiB, into L1 or L2, measured within
// a few percent of each other (`matmul_bench T 128 5 FMT 2048 decode:8`).
constexpr int64_t kAheadBytes = 6 * 1024;

// Rows of more inputs than this run as four streams, not two: x (4·K bytes)
// no longer stays in L1 beside two streams of weights, and four rows load it
// once per step instead of two. Below this, x stays in L1 and the extra
// streams only cost; at 4096 the two layouts measure alike (`matmul_bench T
// 256 3 FMT K decode:C`, C = 4·K/1000 MB, two streams against four).
constexpr int64_t kLongX = 4096;

// acc after the 32 weights at w (bf16) against inputs xe (even) and xo (odd).
DSV4_BF16F32_TARGET inline __m512 Step(const uint16_t* w, const float* xe, const float* xo,
                                       __m512 acc) {
  const __m512i u = x86::Opaque(_mm512_loadu_si512(w));
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(0xffff0000u)));
  acc = _mm512_fmadd_ps(even, _mm512_loadu_ps(xe), acc);
  return _mm512_fmadd_ps(odd, _mm512_loadu_ps(xo), acc);
}

// The weight formats. A row is walked in steps of kInputs inputs, kBytes
// bytes (kBytes ≤ 64: one line fetched ahead per step keeps the prefetch
// contiguous); At(p, x, acc) is acc after the step whose weights start at p,
// against x at its first input (as Prepare laid x out). Calls whose K is not
// a multiple of kKMultiple are declined. kPrefetch: whether the two streams
// are fetched kAheadBytes ahead by software. For the 64-byte formats it costs
// more than it gives, in the kernel and in a model's decode: the hardware
// prefetcher follows two far-apart sequential streams by itself, and the
// software fetches only compete with it.
//
// bf16: 32 inputs per 64 bytes, x deinterleaved per step into evens and odds.
struct Bf16 {
  static constexpr DType kDType = DType::kBF16;
  static constexpr int64_t kInputs = 32, kBytes = 64;
  // Two steps: the staggered kernel's half rows needed it; the two-stream loop
  // needs one, but the calls it takes stay as they were (DeclinesWritingNothing
  // asserts K % 64 != 0 declines).
  static constexpr int64_t kKMultiple = 64;
  static constexpr bool kDeinterleaveX = true;
  static constexpr bool kPrefetch = false;
  static DSV4_BF16F32_TARGET __m512 At(const uint8_t* p, const float* x, __m512 acc) {
    return Step(reinterpret_cast<const uint16_t*>(p), x, x + 16, acc);
  }
};

// f32: 16 inputs per 64 bytes.
struct F32 {
  static constexpr DType kDType = DType::kF32;
  static constexpr int64_t kInputs = 16, kBytes = 64, kKMultiple = 32;
  static constexpr bool kDeinterleaveX = false;
  static constexpr bool kPrefetch = false;
  static DSV4_BF16F32_TARGET __m512 At(const uint8_t* p, const float* x, __m512 acc) {
    return _mm512_fmadd_ps(_mm512_castsi512_ps(x86::Opaque(_mm512_loadu_si512(p))),
                           _mm512_loadu_ps(x), acc);
  }
};

// f16: 32 inputs per 64 bytes, converted 16 at a time (vcvtph2ps, exact).
struct F16 {
  static constexpr DType kDType = DType::kF16;
  static constexpr int64_t kInputs = 32, kBytes = 64, kKMultiple = 32;
  static constexpr bool kDeinterleaveX = false;
  static constexpr bool kPrefetch = false;
  static DSV4_BF16F32_TARGET __m512 At(const uint8_t* p, const float* x, __m512 acc) {
    const __m512i u = x86::Opaque(_mm512_loadu_si512(p));
    acc = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(u)), _mm512_loadu_ps(x), acc);
    return _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(u, 1)),
                           _mm512_loadu_ps(x + 16), acc);
  }
};

// q8_0: one 34-byte block per step (an f16 scale d, then 32 int8 codes), 32
// inputs; weights code · d, 16 at a time.
struct Q8_0 {
  static constexpr DType kDType = DType::kQ8_0;
  static constexpr int64_t kInputs = 32, kBytes = 34, kKMultiple = 32;
  static constexpr bool kDeinterleaveX = false;
  static constexpr bool kPrefetch = true;  // not measured without
  static DSV4_BF16F32_TARGET __m512 At(const uint8_t* p, const float* x, __m512 acc) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    const __m128i* q = reinterpret_cast<const __m128i*>(p + 2);
    const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)));
    const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)));
    acc = _mm512_fmadd_ps(_mm512_mul_ps(w0, d), _mm512_loadu_ps(x), acc);
    return _mm512_fmadd_ps(_mm512_mul_ps(w1, d), _mm512_loadu_ps(x + 16), acc);
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

// Calls of up to this many tokens run here, each weight step loaded once
// for all of them (a step's later tokens read it from L1); more go to the
// Highway kernel's tiles.
constexpr int64_t kMaxTokens = 4;

struct Scratch {
  std::vector<float> x;  // per token, x deinterleaved per 32 inputs: evens, then odds
};

// Where the call's tokens' x (as Prepare laid it out, `stride` floats apart)
// and outputs (a.out_stride apart) are.
struct Tokens {
  const float* x;
  int64_t stride;
};

// Row i of each of the S parts of the call's rows side by side: S chains per
// token, each part a sequential stream of its own (rows side by side a few
// KiB apart defeat the hardware prefetcher), q8_0's prefetched kAheadBytes
// ahead, x loaded once per step for the S rows. Each token's chain takes the
// one-token steps in order, so its result does not depend on the tokens
// beside it. Returns the first row not done (the last rows % S).
template <class Fmt, int S, int NT>
DSV4_BF16F32_TARGET int64_t Streams(const MatMulArgs& a, const uint8_t* base, int64_t row_bytes,
                                    const Tokens& xt, int64_t steps, uintptr_t end) {
  const int64_t per = (a.row_end - a.row_begin) / S;  // rows per part
  const int64_t part = per * row_bytes;               // bytes from a row to its partner
  for (int64_t i = 0; i < per; ++i) {
    const uint8_t* r0 = base + (a.row_begin + i) * row_bytes;
    const uintptr_t f0 = reinterpret_cast<uintptr_t>(r0) + kAheadBytes;
    __m512 c[NT][S];
    for (int t = 0; t < NT; ++t) {
      for (int s = 0; s < S; ++s) c[t][s] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < steps; ++j) {
      const int64_t off = j * Fmt::kBytes;
      if constexpr (Fmt::kPrefetch) {
        for (int s = 0; s < S; ++s) Fetch(f0 + static_cast<uintptr_t>(s * part + off), 64, end);
      }
      for (int t = 0; t < NT; ++t) {
        const float* xj = xt.x + t * xt.stride + j * Fmt::kInputs;
        for (int s = 0; s < S; ++s) c[t][s] = Fmt::At(r0 + s * part + off, xj, c[t][s]);
      }
    }
    for (int t = 0; t < NT; ++t) {
      for (int s = 0; s < S; ++s) {
        a.out[t * a.out_stride + i + s * per] = _mm512_reduce_add_ps(c[t][s]) + 0.0f;
      }
    }
  }
  return a.row_begin + S * per;
}

// Rows of x longer than kLongX inputs: four streams (x no longer stays in L1
// beside the weights, and is loaded once per four rows); shorter, two.
template <class Fmt, int NT>
DSV4_BF16F32_TARGET int64_t StreamsFor(const MatMulArgs& a, const uint8_t* base, int64_t row_bytes,
                                       const Tokens& xt, int64_t steps, uintptr_t end) {
  return a.w.sizes[1] > kLongX ? Streams<Fmt, 4, NT>(a, base, row_bytes, xt, steps, end)
                               : Streams<Fmt, 2, NT>(a, base, row_bytes, xt, steps, end);
}

template <class Fmt>
DSV4_BF16F32_TARGET bool TryMatVec(const MatMulArgs& a) {
  const int64_t k_size = a.w.sizes[1];
  if (a.n_tokens < 1 || a.n_tokens > kMaxTokens || a.w.dtype != Fmt::kDType ||
      k_size % Fmt::kKMultiple != 0 || k_size == 0 || a.w.strides[1] != 1) {
    return false;
  }
  if (a.row_end <= a.row_begin) return true;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  if constexpr (x86::kStreamOnly) {
    if (a.n_tokens == 1) {
      x86::StreamOnly(base + a.row_begin * row_bytes, (a.row_end - a.row_begin) * row_bytes,
                      nullptr, 0, kAheadBytes, a.out, a.row_end - a.row_begin);
      return true;
    }
  }
  Tokens xt{a.x, k_size};
  if constexpr (Fmt::kDeinterleaveX) {
    thread_local Scratch s;
    const int64_t stride = (k_size + 15) / 16 * 16;  // 64-byte aligned rows
    const auto need = static_cast<size_t>(a.n_tokens * stride + 16);
    if (s.x.size() < need) s.x.resize(need);
    float* xs =
        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s.x.data()) + 63) & ~uintptr_t{63});
    // Chunk c (inputs 32c…32c + 31): xs[32c + i] = x[32c + 2i], xs[32c + 16 + i] = x[32c + 2i + 1].
    const __m512i even_idx =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd_idx =
        _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* x = a.x + t * k_size;
      float* dst = xs + t * stride;
      for (int64_t k = 0; k < k_size; k += 32) {
        const __m512 lo = _mm512_loadu_ps(x + k), hi = _mm512_loadu_ps(x + k + 16);
        _mm512_store_ps(dst + k, _mm512_permutex2var_ps(lo, even_idx, hi));
        _mm512_store_ps(dst + k + 16, _mm512_permutex2var_ps(lo, odd_idx, hi));
      }
    }
    xt = Tokens{xs, stride};
  }
  const int64_t steps = k_size / Fmt::kInputs;
  const uintptr_t end = reinterpret_cast<uintptr_t>(base + a.row_end * row_bytes);
  int64_t n = 0;
  switch (a.n_tokens) {
    case 1:
      n = StreamsFor<Fmt, 1>(a, base, row_bytes, xt, steps, end);
      break;
    case 2:
      n = StreamsFor<Fmt, 2>(a, base, row_bytes, xt, steps, end);
      break;
    case 3:
      n = StreamsFor<Fmt, 3>(a, base, row_bytes, xt, steps, end);
      break;
    default:
      n = StreamsFor<Fmt, 4>(a, base, row_bytes, xt, steps, end);
      break;
  }
  static_assert(kMaxTokens == 4, "the cases above");
  for (; n < a.row_end; ++n) {  // the last rows
    const uint8_t* r = base + n * row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const float* xd = xt.x + t * xt.stride;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t j = 0; j < steps; ++j)
        acc = Fmt::At(r + j * Fmt::kBytes, xd + j * Fmt::kInputs, acc);
      a.out[t * a.out_stride + n - a.row_begin] = _mm512_reduce_add_ps(acc) + 0.0f;
    }
  }
  return true;
}

}  // namespace

TryMatMulFn Bf16F32MatVecKernel() {
  static const bool on = x86::KernelsOn();
  return on ? &TryMatVec<Bf16> : nullptr;
}

TryMatMulFn F32F32MatVecKernel() {
  static const bool on = x86::KernelsOn();
  return on ? &TryMatVec<F32> : nullptr;
}

TryMatMulFn F16F32MatVecKernel() {
  static const bool on = x86::KernelsOn();
  return on ? &TryMatVec<F16> : nullptr;
}

TryMatMulFn Q8F32MatVecKernel() {
  static const bool on = x86::KernelsOn();
  return on ? &TryMatVec<Q8_0> : nullptr;
}

#else  // !DSV4_HAVE_BF16_F32

TryMatMulFn Bf16F32MatVecKernel() { return nullptr; }
TryMatMulFn F32F32MatVecKernel() { return nullptr; }
TryMatMulFn F16F32MatVecKernel() { return nullptr; }
TryMatMulFn Q8F32MatVecKernel() { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
