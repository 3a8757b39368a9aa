// ops/simd k-quant × q8_K kernels on AVX-512 (F, BW, DQ, VL): llama.cpp's
// arithmetic for GGUF q4_K / q6_K weights, bit for bit ops::ref's twins
// (QuantizeRowQ8K, DotKQuantQ8K; the order is spelled out in
// ops/ref/kquant_ref.h).
//
// Why it is faster than the f32 kernels (kquant_simd.cc): those form every
// weight as a float (unpack, convert, multiply, subtract) before its
// multiply-add, ~6 vector operations per 16 weights. Here 64 weights at a time
// are multiplied by 64 activation bytes in integers (vpmaddubsw: codes ×
// activations into pair sums; vpmaddwd: pair sums × the sub-block scales into
// int32 lanes; with VNNI, vpdpbusd into dword sums of four, packed into
// words, then vpdpwssd with the scales), 2–3 operations per 64 weights; each
// block of 256 ends in horizontal sums and the float steps of the ref.
//
// Integer ranges: q4_K codes 0…15 and q6_K codes 0…63 (the −32 is taken out
// through the activations' block sums) times activations in −127…127 give
// pair sums ≤ 2·63·127 < 2¹⁵ (no vpmaddubsw saturation); a block's isum is at
// most 256·63·127·128 < 2³¹.
//
// Weights stream one row at a time, one stream through memory, fetched
// 8 KiB ahead (FetchAhead); the row is multiplied by every token's
// activations before the next row, so a token's result does not depend on
// how many tokens share the call. One token: the blocks' integer sums are reduced four blocks at a
// time; several: each block is decoded once per four tokens.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_HAVE_KQUANT_Q8 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define DSV4_HAVE_KQUANT_Q8 0
#endif

namespace dsv4::ops::simd {

#if DSV4_HAVE_KQUANT_Q8
namespace {

#define DSV4_KQ8_PLAIN_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c")))
#define DSV4_KQ8_TARGET DSV4_KQ8_PLAIN_TARGET

// ---------------------------------------------------------------------------
// Activations: ops::ref::QuantizeRowQ8K, vectorised. The scale and codes are
// the same single roundings (iscale·x, then round to nearest even by
// vcvtps2dq), so the bytes are equal for finite x.
// ---------------------------------------------------------------------------

DSV4_KQ8_TARGET void QuantizeBlock(const float* x, BlockQ8K* o) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 vmax = _mm512_setzero_ps();
  for (int i = 0; i < kQK_K; i += 16) {
    vmax = _mm512_max_ps(vmax, _mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask));
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  if (!(amax > 0.0f)) {  // all zero
    std::memset(o, 0, sizeof(*o));
    return;
  }
  // The first value whose magnitude is amax (the ref's strict > scan).
  float max = 0.0f;
  const __m512 vamax = _mm512_set1_ps(amax);
  for (int i = 0; i < kQK_K; i += 16) {
    const __mmask16 hit =
        _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask), vamax, _CMP_EQ_OQ);
    if (hit != 0) {
      max = x[i + __builtin_ctz(hit)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  if (std::isinf(iscale)) {  // denormals: as the ref, zeros
    std::memset(o, 0, sizeof(*o));
    return;
  }
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512i v127 = _mm512_set1_epi32(127);
  for (int i = 0; i < kQK_K; i += 16) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + i)));
    q = _mm512_min_epi32(q, v127);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o->qs + i), _mm512_cvtsepi32_epi8(q));
    // bsums[i / 16]: the 16 codes just made.
    o->bsums[i / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
  }
  o->d = 1.0f / iscale;
}

// ---------------------------------------------------------------------------
// q4_K. A 64-byte load of qs[64p … 64p + 63] holds in its low nibbles values
// 128p … 128p + 31 (bytes 0…31) and 128p + 64 … 128p + 95 (bytes 32…63), in
// its high nibbles the 32 values after each: sub-blocks 4p and 4p + 2, then
// 4p + 1 and 4p + 3. The activations are laid out to match once per call
// (Q4Layout: 4 vectors per block).
// ---------------------------------------------------------------------------

struct alignas(64) Q4Acts {
  int8_t v[4][64];    // lo(qs 0…63), hi(qs 0…63), lo(qs 64…127), hi(qs 64…127)
  int16_t bsum32[8];  // Σ activations per 32-value sub-block
  float d;
};

// Activation bytes of values [a, a + 32) and [b, b + 32) as one vector.
DSV4_KQ8_TARGET inline void Pair(const int8_t* qs, int a, int b, int8_t* out) {
  std::memcpy(out, qs + a, 32);
  std::memcpy(out + 32, qs + b, 32);
}

void Q4Layout(const BlockQ8K& x, Q4Acts* o) {
  Pair(x.qs, 0, 64, o->v[0]);
  Pair(x.qs, 32, 96, o->v[1]);
  Pair(x.qs, 128, 192, o->v[2]);
  Pair(x.qs, 160, 224, o->v[3]);
  for (int s = 0; s < 8; ++s) {
    o->bsum32[s] = static_cast<int16_t>(x.bsums[2 * s] + x.bsums[2 * s + 1]);
  }
  o->d = x.d;
}

// How far ahead of a one-token product's weights the rows are fetched.
constexpr int64_t kFetchAheadBytes = 8192;

// The dot products twice: AVX-512, and AVX-512 with VNNI.
#define DSV4_KQ8_VNNI 0
namespace plain {
#include "ops/simd/kquant_q8_x86-inl.h"  // NOLINT(build/include)
}  // namespace plain
#undef DSV4_KQ8_TARGET
#undef DSV4_KQ8_VNNI
#define DSV4_KQ8_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))
#define DSV4_KQ8_VNNI 1
namespace vnni {
#include "ops/simd/kquant_q8_x86-inl.h"  // NOLINT(build/include)
}  // namespace vnni
#undef DSV4_KQ8_TARGET
#undef DSV4_KQ8_VNNI
#define DSV4_KQ8_TARGET DSV4_KQ8_PLAIN_TARGET

// ---------------------------------------------------------------------------
// Calls.
// ---------------------------------------------------------------------------

DSV4_KQ8_TARGET void QuantizeQ8K(const float* x, int64_t k, BlockQ8K* y) {
  for (int64_t b = 0; b < k / kQK_K; ++b) QuantizeBlock(x + b * kQK_K, y + b);
}

}  // namespace

// F16C (the f16 scales' conversion) is not asked for: every CPU with AVX-512
// has it, and clang's __builtin_cpu_supports does not know the name.
QuantizeQ8KFn QuantizeQ8KKernel() {
  static const bool on = x86::CpuHasAvx512() && !x86::TurnedOff("DSV4_KQUANT_Q8");
  return on ? &QuantizeQ8K : nullptr;
}

KQuantQ8KFn KQuantQ8KKernelVariant(DType w_dtype, bool vnni) {
  static const bool on = x86::CpuHasAvx512() && !x86::TurnedOff("DSV4_KQUANT_Q8");
  static const bool has_vnni = __builtin_cpu_supports("avx512vnni");
  if (!on || (vnni && !has_vnni)) return nullptr;
  switch (w_dtype) {
    case DType::kQ4_K:
      return vnni ? &vnni::MatMulQ8K<DType::kQ4_K> : &plain::MatMulQ8K<DType::kQ4_K>;
    case DType::kQ6_K:
      return vnni ? &vnni::MatMulQ8K<DType::kQ6_K> : &plain::MatMulQ8K<DType::kQ6_K>;
    default:
      return nullptr;
  }
}

KQuantQ8KFn KQuantQ8KKernel(DType w_dtype) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni") && !x86::TurnedOff("DSV4_VNNI");
  return KQuantQ8KKernelVariant(w_dtype, vnni);
}

#else  // !DSV4_HAVE_KQUANT_Q8

QuantizeQ8KFn QuantizeQ8KKernel() { return nullptr; }
KQuantQ8KFn KQuantQ8KKernelVariant(DType, bool) { return nullptr; }
KQuantQ8KFn KQuantQ8KKernel(DType) { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
