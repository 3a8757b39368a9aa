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
// most 256·63·127·128 < 2³¹. In the lanes (below) activations + 128 (0…255)
// times q6_K codes − 32 (−32…31) or q4_K codes (0…15): pair sums ≤ 2·255·32,
// a sub-block's sum ≤ 16·255·32 before its scale, all far inside int32.
//
// One token (and up to kLaneMinTokens − 1, a token at a time): four rows at a
// time (Q4RowsOneToken4, Q6RowsOneToken4), block by block: the activations
// loaded once for the four, four rows' integer sums reduced together and
// their float steps in the lanes of one vector; fetched ahead by 8 KiB or
// four rows, whichever is further. The last rows % 4 go a row at a time
// (RowOneToken). Per lane the float steps are the ref's, so either way gives
// the same bits.
// More tokens: sixteen in the lanes of a vector (LaneActs, LaneRows, the
// includer's MatMulLanes): eight rows' blocks decoded once per chunk of
// tokens into signed codes in value order, four codes broadcast against
// sixteen tokens' four activation bytes per vpdpbusd, no horizontal sums;
// 8 rows × 16 tokens per pass. The per-token float steps are the same
// either way, so a token's result does not depend on how many tokens share
// the call.
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

// ---------------------------------------------------------------------------
// Several tokens: sixteen in the lanes of a vector. Per 16 tokens and block,
// one vector per four values: lane j holds token j's four activation bytes
// plus 128, as unsigned bytes (vpdpbusd's unsigned operand), so that four
// signed weight codes broadcast to every lane multiply all sixteen tokens at
// once with no horizontal sums. The + 128 adds 128 · Σ codes per row and
// block, which does not depend on the token (LaneRows::wc).
// ---------------------------------------------------------------------------

constexpr int kLaneTokens = 16;

struct alignas(64) LaneActs {
  uint8_t x[64][64];     // [quad q][4j + i]: token j's x8[4q + i] + 128
  int32_t bsum2[4][16];  // [pair p][token j]: bsum32 of sub-blocks 2p (low word), 2p + 1 (high)
  float d[16];           // token j's scale
};

// Tokens [t0, t0 + 16) of xq ([n_tokens, n_blocks]) into o[0 … n_blocks);
// tokens past n_tokens as zeros (codes 0, scale 0).
void LaneLayout(const BlockQ8K* xq, int64_t n_tokens, int64_t t0, int64_t n_blocks, LaneActs* o) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    LaneActs& a = o[b];
    for (int j = 0; j < kLaneTokens; ++j) {
      const int64_t t = t0 + j;
      if (t >= n_tokens) {
        for (int q = 0; q < 64; ++q) std::memset(&a.x[q][4 * j], 0x80, 4);
        for (int p = 0; p < 4; ++p) a.bsum2[p][j] = 0;
        a.d[j] = 0.0f;
        continue;
      }
      const BlockQ8K& x = xq[t * n_blocks + b];
      for (int q = 0; q < 64; ++q) {
        uint32_t v;
        std::memcpy(&v, x.qs + 4 * q, 4);
        v ^= 0x80808080u;  // + 128 per byte
        std::memcpy(&a.x[q][4 * j], &v, 4);
      }
      for (int p = 0; p < 4; ++p) {
        const auto lo = static_cast<uint16_t>(x.bsums[4 * p] + x.bsums[4 * p + 1]);
        const auto hi = static_cast<uint16_t>(x.bsums[4 * p + 2] + x.bsums[4 * p + 3]);
        a.bsum2[p][j] = static_cast<int32_t>(static_cast<uint32_t>(hi) << 16 | lo);
      }
      a.d[j] = x.d;
    }
  }
}

// Per block, eight weight rows decoded for the lanes (the includer's
// LaneDecode): signed codes in value order (q6_K: q − 32; q4_K: q), the
// sub-block scales as int32 (q4_K: 8 of 16 used), q4_K's mins as word pairs,
// wc = 128 · Σ_s sc[s] · Σ_{k in s} code[k], and the f16 scales.
constexpr int kLaneRows = 8;

struct alignas(64) LaneRows {
  int8_t c[kLaneRows][256];
  int32_t sc[kLaneRows][16];
  int32_t m2[kLaneRows][4];  // q4_K: mins 2p (low word), 2p + 1 (high)
  int32_t wc[kLaneRows];
  float d[kLaneRows], dmin[kLaneRows];
};

// Row r of w as zeros (a partial group of rows: its lanes are not stored).
void ZeroLaneRow(LaneRows* w, int r) {
  std::memset(w->c[r], 0, sizeof(w->c[r]));
  std::memset(w->sc[r], 0, sizeof(w->sc[r]));
  std::memset(w->m2[r], 0, sizeof(w->m2[r]));
  w->wc[r] = 0;
  w->d[r] = w->dmin[r] = 0.0f;
}

// Below this many tokens a call multiplies one token at a time.
constexpr int64_t kLaneMinTokens = 6;

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
namespace {
// Whether KQuantQ8KKernel picks the VNNI variant.
bool UseVnni() {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni;
}
}  // namespace

QuantizeQ8KFn QuantizeQ8KKernel() {
  static const bool on = x86::KernelsOn();
  return on ? &QuantizeQ8K : nullptr;
}

KQuantQ8KFn KQuantQ8KKernelVariant(DType w_dtype, bool vnni) {
  static const bool on = x86::KernelsOn();
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

KQuantQ8KFn KQuantQ8KKernel(DType w_dtype) { return KQuantQ8KKernelVariant(w_dtype, UseVnni()); }

float Int8DotLoop(int64_t macs, int64_t* done) {
  if (KQuantQ8KKernel(DType::kQ4_K) == nullptr) {
    *done = 0;
    return 0.0f;
  }
  return UseVnni() ? vnni::DotLoop(macs, done) : plain::DotLoop(macs, done);
}

#else  // !DSV4_HAVE_KQUANT_Q8

QuantizeQ8KFn QuantizeQ8KKernel() { return nullptr; }
KQuantQ8KFn KQuantQ8KKernelVariant(DType, bool) { return nullptr; }
KQuantQ8KFn KQuantQ8KKernel(DType) { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
