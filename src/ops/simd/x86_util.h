// Shared by the hand-written x86-64 kernels of ops/simd (bf16dot_x86.cc,
// fp8_f32_x86.cc, bf16_f32_x86.cc, kquant_q8_x86.cc, q8_0_x86.cc): the
// register barrier their weight loads go through, the CPU-feature check and
// the check that the hand-written kernels are on, the weight prefetch, and the integer
// block sums and lanes-tile stores of the int8 kernels.
#ifndef DSV4_OPS_SIMD_X86_UTIL_H_
#define DSV4_OPS_SIMD_X86_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/env.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace dsv4::ops::simd::x86 {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// Whether the CPU has AVX-512 F, BW, DQ and VL, the base every kernel here
// needs (they test their further features with __builtin_cpu_supports, which
// takes only literals).
inline bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// Whether the kernels here may run: the CPU has CpuHasAvx512's features and
// DSV4_KERNELS is not "portable" (base/env.h). Each kernel tests its further
// features beside it.
inline bool KernelsOn() { return !env::PortableKernelsOnly() && CpuHasAvx512(); }

// v as a value the compiler cannot trace back to memory: it would otherwise
// load a weight vector again for each instruction that overwrites a copy of
// it (vpermi2b its index, vpsrlw), and each extra load of a line still on its
// way from memory holds a load-queue entry until it lands.
__attribute__((target("avx512f"))) inline __m512i Opaque(__m512i v) {
  asm("" : "+v"(v));
  return v;
}

// The matvecs' software prefetch of their weight streams, into L2 (T1). A T0
// prefetch (into L1) holds one thread's stream from memory to the few lines
// L1 can have in flight, well below what T1 reads (`matmul_bench 1 128 5 FMT
// 2048 decode:8`); `stream_patterns` (bench/) shows the same for plain row
// sums.
__attribute__((always_inline)) inline void PrefetchWeights(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

// The sum of v's 16 lanes by the tree ((l0 + l8) + (l4 + l12)) + ((l2 +
// l10) + (l6 + l14)) + (the same from l1) — the order _mm512_reduce_add_ps
// takes with GCC, written out so that every compiler takes it, and so that
// Tree16 (below) can do 16 outputs at once in the same order.
__attribute__((target("avx512f"))) inline float ReduceTree(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_shuffle_ps(b, b, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, _MM_SHUFFLE(3, 2, 0, 1))));
}

// Lane i of the result = ReduceTree of the vector at v + 16 i (64-byte
// aligned), for 16 vectors at once by transposing adds: 46 instructions
// instead of 16 × 8 (bf16dot_x86.cc's and matmul_simd.cc's prefill tiles).
__attribute__((target("avx512f"))) inline __m512 Tree16(const float* v) {
  __m512 c[8], d[4], e[2];
  for (int j = 0; j < 8; ++j) {  // l(i + 8) onto li: c[j] = [v(2j) | v(2j + 1)] halves
    const __m512 a = _mm512_load_ps(v + 32 * j), b = _mm512_load_ps(v + 32 * j + 16);
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int j = 0; j < 4; ++j) {  // l(i + 4) onto li: quarter q of d[j] from v(4j + q)
    d[j] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int j = 0; j < 2; ++j) {  // l(i + 2) onto li: the 64-bit halves of each quarter
    const __m512d a = _mm512_castps_pd(d[2 * j]), b = _mm512_castps_pd(d[2 * j + 1]);
    e[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // l1 onto l0: lane 4q + p of f holds the sum of v(4p + q).
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, f);
}

// The int32 sums of four 8-lane vectors, [Σ a, Σ b, Σ c, Σ d] (exact: any
// order): four rows' block products reduced together (the k-quant and q8_0
// one-token products).
__attribute__((target("avx2"))) inline __m128i Sum4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
  const __m256i abcd =
      _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// A lanes tile (rows × 16 tokens, token j in lane j of row r's acc[r]) into
// the outputs: out[j · stride + r] for rows r < n_rows, tokens j < n_tokens
// (the k-quant and q8_0 prefill products).
template <int kRows>
__attribute__((target("avx512f"))) inline void StoreLaneTile(const __m512* acc, int n_rows,
                                                             int n_tokens, float* out,
                                                             int64_t stride) {
  alignas(64) float o[kRows][16];
  for (int r = 0; r < kRows; ++r) _mm512_store_ps(o[r], acc[r]);
  for (int j = 0; j < n_tokens; ++j) {
    for (int r = 0; r < n_rows; ++r) out[j * stride + r] = o[r][j];
  }
}

// A measurement, never a release: in a build with -DDSV4_STREAM_ONLY=ON, the
// one-token matvecs do no arithmetic. Each reads its call's bytes — [p, p +
// bytes), then its block scales' [q, q + q_bytes) — as one stream, fetched
// `ahead` bytes on as the kernels fetch their rows (0: not fetched by
// software, as the FP8/FP4 kernels), and writes 0 to
// its outputs (junk). So a decode measures what the weight streams cost
// without the decoding and products (docs/performance.md, measurement builds).
#if defined(DSV4_STREAM_ONLY) && DSV4_STREAM_ONLY
inline constexpr bool kStreamOnly = true;
#else
inline constexpr bool kStreamOnly = false;
#endif
__attribute__((target("avx512f"))) inline void StreamOnly(const void* p, int64_t bytes,
                                                          const void* q, int64_t q_bytes,
                                                          int64_t ahead, float* out,
                                                          int64_t n_out) {
  for (const auto& [from, n] : {std::pair{p, bytes}, std::pair{q, q_bytes}}) {
    const char* c = static_cast<const char*>(from);
    __m512i acc = _mm512_setzero_si512();
    for (int64_t off = 0; off + 64 <= n; off += 64) {
      if (ahead > 0) PrefetchWeights(c + off + ahead);  // past the end only fetched, never read
      acc = _mm512_xor_si512(acc, _mm512_loadu_si512(c + off));
    }
    asm volatile("" : : "v"(acc));  // the loads stay
  }
  for (int64_t i = 0; i < n_out; ++i) out[i] = 0.0f;
}

#endif

}  // namespace dsv4::ops::simd::x86

#endif  // DSV4_OPS_SIMD_X86_UTIL_H_
