// ops/simd FP8 and FP4 products through bf16 dot products (AVX512-BF16 with
// AVX512-VBMI: recent AMD EPYC/Ryzen, Intel Sapphire Rapids and later), the fast path
// of ops::MatMulFp8Block / MatMulFp4Block when the CPU has them.
//
// Why it is exact. With the reference's activation quantisation on
// (deepseek_v4::NumericsOptions::act_quant, the default for DeepSeek-V4),
// every input of an FP8/FP4 linear is an e4m3 value times a power of two,
// which bf16 holds exactly; so do every e4m3 and e2m1 weight. The product of
// two bf16 numbers is exact in fp32, and vdpbf16ps adds such products into
// fp32 accumulators. So these kernels compute the same products as the fp32
// kernels in ops/simd/matmul_simd.cc and differ only in the order of the sums
// (and flush subnormal sums to zero). A call whose x is not exactly bf16 (a
// subnormal counts as not exact), or whose K is not a multiple of 128, is
// declined and runs on the fp32 kernels.
//
// Why it is fast. Weights are decoded by byte table lookups on 64 bytes at
// once: FP8 by two vpermi2b (a 128-entry table of the high and of the low
// byte of each magnitude's bf16) and a sign merge, byte unpacks then pairing
// the halves into bf16 words; FP4 by one vpermw (a 16-entry word table,
// replicated) per nibble position of the 16-bit words, the input order
// following the nibbles. One vdpbf16ps does 32 multiply-adds. That is about
// half the instructions per weight of the FP8 path and a quarter of the FP4
// path of the fp32 kernels.
//
// Order of the sums, for every output (both paths below, so that a token's
// result does not depend on how many tokens share the call): per group of 128
// inputs, a fresh fp32 vector t takes the group's four bf16 vector pairs in
// order (vdpbf16ps), then acc = t · scale + acc (FMA; FP4: lane i gets the
// scale of block i / 4 of the group, FP8 the block's one scale); the result is
// the horizontal sum of acc by a fixed tree (ReduceTree). FP8 with 32×32
// scale tiles (args.fp8_block 32, Format::kFp8Small) instead takes each half
// of the group (inputs 64h … 64h + 63) on its own: t from its two vector
// pairs, then acc = t · scale + acc, lanes 0–7 with the scale of its first
// 32 inputs and lanes 8–15 of its second (where the byte unpacks put them).
// The prefill tiles fold e8m0 scales into the weights and add t, which is the
// same sum exactly (see "Folded scales").
//
// The weights' order within a group is what the byte unpacks give (they work
// within 128-bit lanes); x is permuted to match once per call (InputOf).
//
// Shapes, outermost first: T tokens, K input features, N output features.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_HAVE_BF16DOT 1
#include <immintrin.h>
// GCC 12 flags the self-initialised "undefined" vectors inside its AVX-512
// intrinsic headers (_mm512_undefined_epi32) as (maybe-)uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define DSV4_HAVE_BF16DOT 0
#endif

namespace dsv4::ops::simd {

namespace bf16dot {

inline constexpr int64_t kGroup = 128;  // inputs per step: 4 vectors of 32 bf16
// Matvec: no software prefetch of the weight streams (the hardware
// prefetcher alone follows them; the FP4 scale rows keep theirs, below).
// A software prefetch into L2 competed with the hardware prefetcher for the
// same lines: the model's decode was faster without it in both memory states,
// for FP8 as for FP4, though a single huge FP8 stream can gain from it.
// Matvec, FP4: rows its software prefetch of the scale rows runs ahead. The
// scale rows are a separate, sparse stream the hardware prefetcher does not
// follow; without the prefetch the MoE steps wait on their misses.
inline constexpr int64_t kScaleRowsAhead = 16;
inline constexpr int kTileTokens = 6;  // tile path: 2 rows × 6 tokens per micro-tile
// Fewer tokens than this take the decode path, which decodes each row once
// for all of them (a panel's decode into scratch would cost more than it
// saves). Tuned with
// `matmul_bench 1 16 5 FORMAT 2048 prefill:T:1024`, decode path against tiles
// for T around this value: from 6 tokens the tiles win for both formats.
inline constexpr int64_t kMinTileTokens = 6;
// Scratch for one block of x as bf16 (per thread); longer calls go block by block.
inline constexpr int64_t kXBlockBytes = int64_t{4} << 20;

// kFp8Small: FP8 weights with 32×32 scale tiles (DeepSeek-V4.1-Flash), which
// decode as kFp8 (DecodeAs) and differ in their scales; kFp8: 128×128 tiles.
enum class Format { kFp8, kFp4, kFp8Small };
constexpr Format DecodeAs(Format f) { return f == Format::kFp8Small ? Format::kFp8 : f; }

// The input (offset within its group) that word w ∈ [0, 128) of a group's
// four bf16 vectors holds: vector w / 32, 128-bit lane L, word j in the lane.
//   FP8: vector 2h + u unpacks bytes [64h, 64h + 64): lane L, half u.
//   FP4: bytes [0, 64) hold inputs 2i (low nibble) and 2i + 1 (high), so
//        word j of them inputs 4j … 4j + 3; vector v takes nibble v of every
//        word: word j of vector v is input 4j + v. Lane L (words 8L … 8L + 7)
//        is then block L (inputs 32L … 32L + 31) in every vector.
inline int InputOf(Format f, int w) {
  const int v = w / 32, lane = (w % 32) / 8, j = w % 8;
  if (f == Format::kFp8) return 64 * (v / 2) + 16 * lane + 8 * (v % 2) + j;
  return 4 * (w % 32) + v;
}

// Whether v is exactly bf16: no f32 mantissa bits below bf16's, and not a
// subnormal (vdpbf16ps reads those as zero).
inline bool ScalarIsBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const bool subnormal = (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
  return (u & 0xffffu) == 0 && !subnormal;
}

}  // namespace bf16dot

#if DSV4_HAVE_BF16DOT
namespace {

using bf16dot::Format;
using bf16dot::kGroup;

#define DSV4_BF16DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,avx512bf16")))

// Tables, built once.
struct Tables {
  alignas(64) uint8_t fp8_hi[128];     // high byte of bf16(e4m3 magnitude code)
  alignas(64) uint8_t fp8_lo[128];     // low byte
  alignas(64) uint16_t fp4_words[32];  // bf16(e2m1 code & 15), × 2
  // x permutation per format: vector v, half h (words 16h … 16h + 15) from
  // natural vectors pair[f][v][h] and + 1, word indices idx[f][v][h][0, 32).
  alignas(64) uint16_t idx[2][4][2][32];
  int pair[2][4][2];
  alignas(64) uint16_t odd[32];  // word 2i + 1: the high half of float i
  // Folded scales (below): bf16 words of the 128 e4m3 magnitudes; byte
  // indices that split 64 words into their low (even) and high (odd) bytes;
  // for FP4, byte indices that put scale byte L in word j of lane L.
  alignas(64) uint16_t fp8_words[128];
  alignas(64) uint8_t even_bytes[64];
  alignas(64) uint8_t odd_bytes[64];
  alignas(64) uint8_t fp4_lane_byte[64];
  // kFp8Small, for the vectors of half h of a group: byte indices that put
  // scale byte 2h + L / 2 in word j of lane L.
  alignas(64) uint8_t fp8s_lane_byte[2][64];
};

uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

const Tables& GetTables() {
  static const Tables t = [] {
    Tables t{};
    for (int c = 0; c < 128; ++c) {
      // NaN codes (0x7f) decode as 480, as the fp32 kernels do.
      const float v = c == 0x7f ? 480.0f : Fp8E4m3ToF32(static_cast<uint8_t>(c));
      const uint16_t b = Bf16Bits(v);
      t.fp8_hi[c] = static_cast<uint8_t>(b >> 8);
      t.fp8_lo[c] = static_cast<uint8_t>(b & 0xff);
      t.fp8_words[c] = b;
    }
    for (int j = 0; j < 64; ++j) {
      t.even_bytes[j] = static_cast<uint8_t>(2 * j);
      t.odd_bytes[j] = static_cast<uint8_t>(2 * j + 1);
      t.fp4_lane_byte[j] = static_cast<uint8_t>(j / 16);  // byte j is in word j / 2, lane j / 16
      for (int h = 0; h < 2; ++h) t.fp8s_lane_byte[h][j] = static_cast<uint8_t>(2 * h + j / 32);
    }
    for (int c = 0; c < 32; ++c)
      t.fp4_words[c] = Bf16Bits(Fp4E2m1ToF32(static_cast<uint8_t>(c & 15)));
    for (int f = 0; f < 2; ++f) {
      for (int v = 0; v < 4; ++v) {
        for (int h = 0; h < 2; ++h) {
          const int first = bf16dot::InputOf(static_cast<Format>(f), 32 * v + 16 * h);
          const int base = 2 * (first / 64);  // natural vectors base, base + 1
          t.pair[f][v][h] = base;
          for (int j = 0; j < 16; ++j) {
            const int n = bf16dot::InputOf(static_cast<Format>(f), 32 * v + 16 * h + j);
            CHECK(n / 64 == base / 2, "bf16dot: x permutation leaves its vector pair");
            t.idx[f][v][h][16 * h + j] = static_cast<uint16_t>(n - 32 * base);
          }
        }
      }
    }
    for (int i = 0; i < 32; ++i) t.odd[i] = static_cast<uint16_t>(2 * i + 1);
    return t;
  }();
  return t;
}

// dst[0, K) = x[0, K) as bf16 (x exactly bf16: its high halves), each group
// of 128 permuted to the weights' order (InputOf).
DSV4_BF16DOT_TARGET void ConvertX(Format f, const float* x, int64_t k_size, uint16_t* dst) {
  const Tables& tb = GetTables();
  const int fi = static_cast<int>(f);
  const __m512i odd = _mm512_load_si512(tb.odd);
  for (int64_t g = 0; g < k_size; g += kGroup) {
    __m512i nat[4];
    for (int q = 0; q < 4; ++q) {
      const __m512i a = _mm512_loadu_si512(x + g + 32 * q);
      const __m512i b = _mm512_loadu_si512(x + g + 32 * q + 16);
      nat[q] = _mm512_permutex2var_epi16(a, odd, b);
    }
    for (int v = 0; v < 4; ++v) {
      const int p0 = tb.pair[fi][v][0], p1 = tb.pair[fi][v][1];
      const __m512i lo =
          _mm512_permutex2var_epi16(nat[p0], _mm512_load_si512(tb.idx[fi][v][0]), nat[p0 + 1]);
      const __m512i hi =
          _mm512_permutex2var_epi16(nat[p1], _mm512_load_si512(tb.idx[fi][v][1]), nat[p1 + 1]);
      _mm512_storeu_si512(dst + g + 32 * v, _mm512_mask_blend_epi16(0xffff0000u, lo, hi));
    }
  }
}

DSV4_BF16DOT_TARGET inline __m512bh AsBh(__m512i v) {
  return (__m512bh)v;  // NOLINT(google-readability-casting): a vector bit cast
}

// The four bf16 weight vectors of one row's group at p.
DSV4_BF16DOT_TARGET inline void DecodeFp8(const uint8_t* p, const __m512i tab[4], __m512i w[4]) {
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int h = 0; h < 2; ++h) {
    const __m512i b = x86::Opaque(_mm512_loadu_si512(p + 64 * h));
    __m512i hi = _mm512_permutex2var_epi8(tab[0], b, tab[1]);
    const __m512i lo = _mm512_permutex2var_epi8(tab[2], b, tab[3]);
    hi = _mm512_ternarylogic_epi32(hi, b, sign, 0xf8);  // hi | (b & 0x80)
    w[2 * h] = _mm512_unpacklo_epi8(lo, hi);
    w[2 * h + 1] = _mm512_unpackhi_epi8(lo, hi);
  }
}

DSV4_BF16DOT_TARGET inline void DecodeFp4(const uint8_t* p, const __m512i tab[1], __m512i w[4]) {
  // Word j of the 64 bytes at p holds inputs 4j … 4j + 3, a nibble each;
  // vector s looks up nibble s of every word (vpermw reads the word's low 5
  // bits: the table repeats). Four shuffles and three shifts per 128 weights,
  // where placing bytes into words first took six shuffles.
  const __m512i b = x86::Opaque(_mm512_loadu_si512(p));
  w[0] = _mm512_permutexvar_epi16(b, tab[0]);
  w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), tab[0]);
  w[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 8), tab[0]);
  w[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 12), tab[0]);
}

// t = the group's four dot products, from zero, in order.
DSV4_BF16DOT_TARGET inline __m512 GroupDot(const __m512i w[4], const __m512i x[4]) {
  __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), AsBh(w[0]), AsBh(x[0]));
  t = _mm512_dpbf16_ps(t, AsBh(w[1]), AsBh(x[1]));
  t = _mm512_dpbf16_ps(t, AsBh(w[2]), AsBh(x[2]));
  return _mm512_dpbf16_ps(t, AsBh(w[3]), AsBh(x[3]));
}

// count e8m0 scales at src as f32 (2^(e − 127) as E8m0ToF32, e = 0 and 255
// included): 16 at a time, the rest (FP8 rows of K 1024: 8 groups) one by
// one. Always inlined: as a call per FP4 row pair its prologue and
// epilogue were a third of its time.
DSV4_BF16DOT_TARGET __attribute__((always_inline)) inline void E8m0Row(const uint8_t* src,
                                                                       int64_t count, float* dst) {
  const __m512i tiny = _mm512_set1_epi32(0x00400000), nan = _mm512_set1_epi32(0x7fc00000);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i e =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    __m512i v = _mm512_slli_epi32(e, 23);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), tiny);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), nan);
    _mm512_storeu_si512(dst + i, v);
  }
  for (; i < count; ++i) dst[i] = E8m0ToF32(src[i]);
}

// Whether a scale tensor is e8m0 with contiguous rows (E8m0Row reads it).
inline bool E8m0Rows(const TensorView& scale) {
  return scale.dtype == DType::kE8m0 && scale.strides[1] == 1;
}

// The row of the scale tensor that holds row n's scales: FP8 its 128-row
// (kFp8Small: 32-row) block's, FP4 its own.
constexpr int64_t ScaleRowOf(Format f, int64_t n) {
  return f == Format::kFp8 ? n / 128 : f == Format::kFp8Small ? n / 32 : n;
}

// The block scales of row n as f32: FP8 one per group, FP4 and kFp8Small
// four per group (one per 32 inputs).
DSV4_BF16DOT_TARGET void RowScales(Format f, const TensorView& scale, int64_t n, int64_t groups,
                                   float* dst) {
  const int64_t row = ScaleRowOf(f, n);
  const int64_t count = f == Format::kFp8 ? groups : 4 * groups;
  if (E8m0Rows(scale)) {
    E8m0Row(static_cast<const uint8_t*>(scale.data) + row * scale.strides[0], count, dst);
    return;
  }
  for (int64_t i = 0; i < count; ++i) dst[i] = ref::ScaleAt(scale, row, i);
}

// The scale vector of group g from RowScales' output: FP8 its one scale in
// every lane, FP4 lane i the scale of block i / 4 (the lanes vdpbf16ps sums
// that block's products into).
template <Format F>
DSV4_BF16DOT_TARGET inline __m512 ScaleVector(const float* s, int64_t g) {
  if constexpr (F == Format::kFp8) {
    return _mm512_set1_ps(s[g]);
  } else {
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(s + 4 * g)));
  }
}

// kFp8Small, for the prefill tiles: the scale vectors of each half of each
// group (RowScales' four per group at s4, two vectors per group at dst,
// 64-byte aligned): vector
// 2g + h has the scale of block 4g + 2h in lanes 0–7 and of 4g + 2h + 1 in
// lanes 8–15, the lanes vdpbf16ps sums those blocks' products into.
DSV4_BF16DOT_TARGET void HalfScaleVectors(const float* s4, int64_t groups, float* dst) {
  const __m512i lo = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i hi = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 q = _mm512_castps128_ps512(_mm_loadu_ps(s4 + 4 * g));
    _mm512_store_ps(dst + 32 * g, _mm512_permutexvar_ps(lo, q));
    _mm512_store_ps(dst + 32 * g + 16, _mm512_permutexvar_ps(hi, q));
  }
}

// The same vector from RowScales' floats, by two broadcasts and a blend: the
// decode path's (from the 4 floats per group, where HalfScaleVectors' 128
// bytes per group, two rows' worth beside x, crowded the one-token matvec's
// weight streams out of L1: `DSV4_BENCH_FP8_BLOCK=32 matmul_bench 1 256 9
// fp8_e4m3 4096 decode`).
DSV4_BF16DOT_TARGET inline __m512 HalfScale(const float* s4, int64_t g, int h) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(s4[4 * g + 2 * h]),
                              _mm512_set1_ps(s4[4 * g + 2 * h + 1]));
}

// kFp8Small: the dot products of half h of a group (its vector pairs 2h and
// 2h + 1), from zero, in order.
DSV4_BF16DOT_TARGET inline __m512 HalfDot(const __m512i w[4], const __m512i x[4], int h) {
  const __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), AsBh(w[2 * h]), AsBh(x[2 * h]));
  return _mm512_dpbf16_ps(t, AsBh(w[2 * h + 1]), AsBh(x[2 * h + 1]));
}

// Whether every byte of p[0, n) lies in [lo, hi].
DSV4_BF16DOT_TARGET inline bool BytesInRange(const uint8_t* p, int64_t n, int lo, int hi) {
  const __m512i vlo = _mm512_set1_epi8(static_cast<char>(lo));
  const __m512i vhi = _mm512_set1_epi8(static_cast<char>(hi));
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(m, p + i);
    if ((_mm512_mask_cmplt_epu8_mask(m, v, vlo) | _mm512_mask_cmpgt_epu8_mask(m, v, vhi)) != 0) {
      return false;
    }
  }
  return true;
}

// Sixteen normal e8m0 scales at p (codes 1 … 254) as f32, the first count of
// them read (count ≤ 16; the lanes past it are 0).
DSV4_BF16DOT_TARGET __attribute__((always_inline)) inline __m512 E8m0Quad(const uint8_t* p,
                                                                          int64_t count) {
  const __mmask16 m = count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1);
  const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

// Rows with the same key have the same scale vectors: FP8's 128-row (32-row)
// blocks share one scale row.
template <Format F>
inline int64_t ScaleKey(int64_t n) {
  return ScaleRowOf(F, n);
}

// Per-thread scratch, grown to the largest need (steady-state calls do not
// allocate): x as bf16 [T, K], a decoded row quad [4, K], scales.
struct Scratch {
  std::vector<uint16_t> x, w;
  std::vector<float> s;
};
Scratch& GetScratch() {
  thread_local Scratch s;
  return s;
}

template <class T>
T* Grow(std::vector<T>& v, int64_t n) {
  // + 32 elements so the data can start on a 64-byte boundary.
  if (v.size() < static_cast<size_t>(n + 32)) v.resize(static_cast<size_t>(n + 32));
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
}

template <Format F>
DSV4_BF16DOT_TARGET inline void LoadTables(__m512i tab[4]) {
  const Tables& tb = GetTables();
  if constexpr (DecodeAs(F) == Format::kFp8) {
    tab[0] = _mm512_load_si512(tb.fp8_hi);
    tab[1] = _mm512_load_si512(tb.fp8_hi + 64);
    tab[2] = _mm512_load_si512(tb.fp8_lo);
    tab[3] = _mm512_load_si512(tb.fp8_lo + 64);
  } else {
    tab[0] = _mm512_load_si512(tb.fp4_words);
  }
}

template <Format F>
DSV4_BF16DOT_TARGET inline void Decode(const uint8_t* p, const __m512i tab[4], __m512i w[4]) {
  if constexpr (DecodeAs(F) == Format::kFp8) {
    DecodeFp8(p, tab, w);
  } else {
    DecodeFp4(p, tab, w);
  }
}

// Bytes of one group of one row.
template <Format F>
inline constexpr int64_t kGroupBytes = DecodeAs(F) == Format::kFp8 ? kGroup : kGroup / 2;

using x86::ReduceTree;
using x86::Tree16;

// A one-token call's rows in pairs (Fp4RowPairs, Fp8RowPairs): row n of the
// range's first half beside row n + half.
struct PairedRowsOf {
  int64_t groups, row_bytes, half;
  const uint8_t* base;
};
inline PairedRowsOf PairedRows(const MatMulArgs& a) {
  return {a.w.sizes[1] / kGroup, DTypeBytes(a.w.dtype, a.w.strides[0]),
          (a.row_end - a.row_begin) / 2, static_cast<const uint8_t*>(a.w.data)};
}

// FP4, one token: rows in pairs, each x vector loaded once for both. The
// FP4 matvec is bound by its instructions, not by memory, and 4 of its 27
// per 64 bytes load x; in pairs those loads are shared. Row i of the range's
// first half goes with row i of its second half, so that the weights stream
// as two sequential reads: adjacent rows interleaved defeat the hardware
// prefetcher. Each row takes the single-row path's operations in
// its order.
// Returns the row the single-row path goes on from (the odd one left, if
// any). s0, s1: room for one row's f32 scales each.
DSV4_BF16DOT_TARGET int64_t Fp4RowPairs(const MatMulArgs& a, const uint16_t* xb,
                                        const __m512i tab[4], float* s0, float* s1) {
  constexpr Format F = Format::kFp4;
  const auto [groups, row_bytes, half, base] = PairedRows(a);
  const uintptr_t scale_rows = reinterpret_cast<uintptr_t>(a.scale.data);
  const int64_t scale_row_bytes = DTypeBytes(a.scale.dtype, a.scale.strides[0]);
  const bool e8m0 = E8m0Rows(a.scale);
  const uint8_t* scale_bytes = static_cast<const uint8_t*>(a.scale.data);
  float* out = a.out;
  __m512i spread[4];  // lane i: scale 4j + i / 4 of a quad
  for (int j = 0; j < 4; ++j) {
    spread[j] = _mm512_add_epi32(_mm512_set1_epi32(4 * j),
                                 _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
  }
  for (int64_t n = a.row_begin; n < a.row_begin + half; ++n) {
    const uint8_t* row0 = base + n * row_bytes;
    const uint8_t* row1 = row0 + half * row_bytes;
    for (const int64_t m : {n, n + half}) {  // as the single-row path, kScaleRowsAhead on
      const int64_t ahead = (m + bf16dot::kScaleRowsAhead) * scale_row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(scale_rows + static_cast<uintptr_t>(ahead)),
                   _MM_HINT_T0);
    }
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const auto group = [&](int64_t g, __m512 scale0, __m512 scale1) DSV4_BF16DOT_TARGET {
      const int64_t off = g * kGroupBytes<F>;
      __m512i x[4], w0[4], w1[4];
      for (int v = 0; v < 4; ++v) x[v] = _mm512_load_si512(xb + g * kGroup + 32 * v);
      Decode<F>(row0 + off, tab, w0);
      Decode<F>(row1 + off, tab, w1);
      acc0 = _mm512_fmadd_ps(GroupDot(w0, x), scale0, acc0);
      acc1 = _mm512_fmadd_ps(GroupDot(w1, x), scale1, acc1);
    };
    const uint8_t* e0 = scale_bytes + n * scale_row_bytes;
    const uint8_t* e1 = scale_bytes + (n + half) * scale_row_bytes;
    // Codes 0 (2^-127, an f32 subnormal) and 255 (NaN) take E8m0Row.
    if (e8m0 && BytesInRange(e0, 4 * groups, 1, 254) && BytesInRange(e1, 4 * groups, 1, 254)) {
      // Four groups' sixteen scales per row in a register, each group's
      // vector permuted from it: the same values as E8m0Row's, with no round
      // trip through memory (that and E8m0Row's special cases were a
      // noticeable share of a pair's instructions, which bound FP4).
      const auto quad = [&](int64_t g, int64_t count) DSV4_BF16DOT_TARGET {
        const __m512 q0 = E8m0Quad(e0 + 4 * g, 4 * count), q1 = E8m0Quad(e1 + 4 * g, 4 * count);
        for (int j = 0; j < count; ++j) {
          group(g + j, _mm512_permutexvar_ps(spread[j], q0), _mm512_permutexvar_ps(spread[j], q1));
        }
      };
      int64_t g = 0;
      for (; g + 4 <= groups; g += 4) quad(g, 4);
      if (g < groups) quad(g, groups - g);
    } else {
      if (e8m0) {
        E8m0Row(e0, 4 * groups, s0);
        E8m0Row(e1, 4 * groups, s1);
      } else {
        RowScales(F, a.scale, n, groups, s0);
        RowScales(F, a.scale, n + half, groups, s1);
      }
      for (int64_t g = 0; g < groups; ++g) group(g, ScaleVector<F>(s0, g), ScaleVector<F>(s1, g));
    }
    out[n - a.row_begin] = ReduceTree(acc0);
    out[n + half - a.row_begin] = ReduceTree(acc1);
  }
  return a.row_begin + 2 * half;
}

// FP8, one token: rows in pairs as Fp4RowPairs (row i of the range's first
// half beside row i of its second half), each x vector loaded once for both;
// each row takes the single-row path's operations in its order. Not for the
// arithmetic (from cache, pairs are no faster than one row at a time) but for
// memory: two sequential streams per thread keep more lines in flight than
// one, where FP8's decoding leaves the loads too sparse for the hardware
// prefetcher alone; the gain is largest when memory is fast.
// s0, s1: room for one row's f32 scales each. Returns the row the single-row
// path goes on from (the odd one left, if any).
template <Format F>
DSV4_BF16DOT_TARGET int64_t Fp8RowPairs(const MatMulArgs& a, const uint16_t* xb,
                                        const __m512i tab[4], float* s0, float* s1) {
  const auto [groups, row_bytes, half, base] = PairedRows(a);
  int64_t key0 = -1, key1 = -1;
  float* out = a.out;
  for (int64_t n = a.row_begin; n < a.row_begin + half; ++n) {
    const uint8_t* row0 = base + n * row_bytes;
    const uint8_t* row1 = row0 + half * row_bytes;
    if (ScaleKey<F>(n) != key0) {
      RowScales(F, a.scale, n, groups, s0);
      key0 = ScaleKey<F>(n);
    }
    if (ScaleKey<F>(n + half) != key1) {
      RowScales(F, a.scale, n + half, groups, s1);
      key1 = ScaleKey<F>(n + half);
    }
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t off = g * kGroupBytes<F>;
      __m512i x[4], w0[4], w1[4];
      for (int v = 0; v < 4; ++v) x[v] = _mm512_load_si512(xb + g * kGroup + 32 * v);
      Decode<F>(row0 + off, tab, w0);
      Decode<F>(row1 + off, tab, w1);
      if constexpr (F == Format::kFp8Small) {
        for (int h = 0; h < 2; ++h) {
          acc0 = _mm512_fmadd_ps(HalfDot(w0, x, h), HalfScale(s0, g, h), acc0);
          acc1 = _mm512_fmadd_ps(HalfDot(w1, x, h), HalfScale(s1, g, h), acc1);
        }
      } else {
        acc0 = _mm512_fmadd_ps(GroupDot(w0, x), _mm512_set1_ps(s0[g]), acc0);
        acc1 = _mm512_fmadd_ps(GroupDot(w1, x), _mm512_set1_ps(s1[g]), acc1);
      }
    }
    out[n - a.row_begin] = ReduceTree(acc0);
    out[n + half - a.row_begin] = ReduceTree(acc1);
  }
  return a.row_begin + 2 * half;
}

// Tokens of the decode path that share one decoding of a row (its calls
// have fewer than kMinTileTokens).
inline constexpr int64_t kSharedDecodeTokens = bf16dot::kMinTileTokens - 1;
static_assert(kSharedDecodeTokens == 5, "RowTokens' cases in MatVec");

// Where RowTokens reads its tokens' bf16 x (K apart) and writes their outputs.
struct RowOut {
  const uint16_t* x;
  int64_t k_size;
  float* out;
  int64_t out_stride;
};

// One row for NT tokens: each group decoded once, then every token's dot
// products and FMA with it. Each token takes the one-token operations in
// their order (t = GroupDot, acc = t · scale + acc, ReduceTree), so its
// result does not depend on the tokens beside it; the decoding, which bounds
// these kernels, is shared.
template <Format F, int NT>
DSV4_BF16DOT_TARGET inline void RowTokens(const uint8_t* row, int64_t groups, const __m512i tab[4],
                                          const float* sbuf, const RowOut& o) {
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i w[4];
    Decode<F>(row + g * kGroupBytes<F>, tab, w);
    if constexpr (F == Format::kFp8Small) {
      const __m512 s0 = HalfScale(sbuf, g, 0), s1 = HalfScale(sbuf, g, 1);
      for (int t = 0; t < NT; ++t) {
        __m512i x[4];
        const uint16_t* xt = o.x + t * o.k_size + g * kGroup;
        for (int v = 0; v < 4; ++v) x[v] = _mm512_load_si512(xt + 32 * v);
        acc[t] = _mm512_fmadd_ps(HalfDot(w, x, 0), s0, acc[t]);
        acc[t] = _mm512_fmadd_ps(HalfDot(w, x, 1), s1, acc[t]);
      }
      continue;
    }
    const __m512 scale = ScaleVector<F>(sbuf, g);
    for (int t = 0; t < NT; ++t) {
      __m512i x[4];
      const uint16_t* xt = o.x + t * o.k_size + g * kGroup;
      for (int v = 0; v < 4; ++v) x[v] = _mm512_load_si512(xt + 32 * v);
      acc[t] = _mm512_fmadd_ps(GroupDot(w, x), scale, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) o.out[t * o.out_stride] = ReduceTree(acc[t]);
}

// Decode path (one token, or a few): one row at a time, decoded in
// registers once for up to kSharedDecodeTokens tokens (RowTokens; one token:
// two rows, Fp4RowPairs / Fp8RowPairs). The weights stream
// through memory in order — one stream per thread (two for row pairs) — which
// the hardware prefetcher follows better than four rows side by side; x
// (bf16, ≤ 16 KiB) stays in L1 for every row.
template <Format F>
DSV4_BF16DOT_TARGET void MatVec(const MatMulArgs& a, const uint16_t* xb, float* sbuf) {
  const int64_t k_size = a.w.sizes[1], groups = k_size / kGroup;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  if constexpr (x86::kStreamOnly) {
    if (a.n_tokens == 1) {
      // The rows' scales: FP4 a row each, FP8 a row per 128-row (32-row) block.
      const int64_t srow = DTypeBytes(a.scale.dtype, a.scale.strides[0]);
      const int64_t s0 = ScaleRowOf(F, a.row_begin), s1 = ScaleRowOf(F, a.row_end - 1) + 1;
      x86::StreamOnly(base + a.row_begin * row_bytes, (a.row_end - a.row_begin) * row_bytes,
                      static_cast<const uint8_t*>(a.scale.data) + s0 * srow, (s1 - s0) * srow,
                      /*ahead=*/0, a.out, a.row_end - a.row_begin);
      return;
    }
  }
  __m512i tab[4];
  LoadTables<F>(tab);
  int64_t key = -1;  // whose scales sbuf holds
  // FP4 rows have scale rows of their own, a second stream beside the
  // weights: prefetched kScaleRowsAhead rows ahead (past the tensor only
  // prefetched, never read).
  const uintptr_t scale_rows = reinterpret_cast<uintptr_t>(a.scale.data);
  const int64_t scale_row_bytes = DTypeBytes(a.scale.dtype, a.scale.strides[0]);
  if constexpr (F == Format::kFp4) {
    // The loop prefetches from kScaleRowsAhead rows on; the first rows' scales
    // (of both halves, for row pairs) all at once here, so that their misses
    // overlap: one at a time they stalled each call's start.
    const int64_t rows = a.row_end - a.row_begin, first = std::min(bf16dot::kScaleRowsAhead, rows);
    for (const int64_t from : {a.row_begin, a.row_begin + rows / 2}) {
      const uintptr_t p = scale_rows + static_cast<uintptr_t>(from * scale_row_bytes);
      for (int64_t b = 0; b < first * scale_row_bytes; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p + static_cast<uintptr_t>(b)), _MM_HINT_T0);
      }
    }
  }
  int64_t n = a.row_begin;
  if (a.n_tokens == 1) {
    if constexpr (F == Format::kFp4) {
      n = Fp4RowPairs(a, xb, tab, sbuf, sbuf + groups * 4);
    } else {
      n = Fp8RowPairs<F>(a, xb, tab, sbuf, sbuf + groups * 4);
    }
  }
  for (; n < a.row_end; ++n) {
    const uint8_t* row = base + n * row_bytes;
    if constexpr (F == Format::kFp4) {
      const int64_t ahead = (n + bf16dot::kScaleRowsAhead) * scale_row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(scale_rows + static_cast<uintptr_t>(ahead)),
                   _MM_HINT_T0);
    }
    if (ScaleKey<F>(n) != key) {
      if constexpr (F != Format::kFp4) {  // the next row block's scales (only prefetched)
        const int64_t next = (ScaleKey<F>(n) + 1) * scale_row_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(scale_rows + static_cast<uintptr_t>(next)),
                     _MM_HINT_T0);
      }
      RowScales(F, a.scale, n, groups, sbuf);
      key = ScaleKey<F>(n);
    }
    for (int64_t t = 0; t < a.n_tokens; t += kSharedDecodeTokens) {
      const int64_t nt = std::min<int64_t>(kSharedDecodeTokens, a.n_tokens - t);
      const RowOut o{.x = xb + t * k_size,
                     .k_size = k_size,
                     .out = a.out + t * a.out_stride + (n - a.row_begin),
                     .out_stride = a.out_stride};
      switch (nt) {
        case 1:
          RowTokens<F, 1>(row, groups, tab, sbuf, o);
          break;
        case 2:
          RowTokens<F, 2>(row, groups, tab, sbuf, o);
          break;
        case 3:
          RowTokens<F, 3>(row, groups, tab, sbuf, o);
          break;
        case 4:
          RowTokens<F, 4>(row, groups, tab, sbuf, o);
          break;
        default:
          RowTokens<F, 5>(row, groups, tab, sbuf, o);
          break;
      }
    }
  }
}

// Folded scales. An e8m0 scale is a power of two 2^(e − 127), so a weight
// times its scale is again exactly a bf16 while it stays a normal number, and
// scaling by a power of two commutes with rounding. So with the scale folded
// into the decoded weights (an integer add to their exponent fields), a
// group's dot products give exactly t · scale, and acc + t is exactly the
// decode path's FMA t · scale + acc — unless a partial sum of the group comes
// within the shift of the subnormal range, which vdpbf16ps flushes (partial
// sums below 2^-94 in magnitude with the range below). The prefill tiles
// fold rows whose scales all lie in that range: a vaddps, which can issue
// beside the dot products, replaces the FMA, which competes with them.
inline constexpr int kFoldMinE = 127 - 32, kFoldMaxE = 127 + 32;

// Row n's e8m0 scale bytes (scale rows contiguous): FP8 its 128-row block's
// row of the scale tensor (one per group), FP4 its own (four per group).
template <Format F>
inline const uint8_t* ScaleBytes(const TensorView& scale, int64_t n) {
  return static_cast<const uint8_t*>(scale.data) + ScaleKey<F>(n) * scale.strides[0];
}

// FP8: LoadTables' hi/lo byte tables of the magnitudes times 2^(e − 127).
DSV4_BF16DOT_TARGET void FoldedFp8Tables(int e, __m512i tab[4]) {
  const Tables& tb = GetTables();
  const __m512i off = _mm512_set1_epi16(static_cast<int16_t>((e - 127) * 128));
  __m512i words[4];
  for (int q = 0; q < 4; ++q) {
    const __m512i b = _mm512_load_si512(tb.fp8_words + 32 * q);
    words[q] = _mm512_mask_add_epi16(b, q == 0 ? 0xfffffffeu : 0xffffffffu, b, off);  // 0 stays 0
  }
  const __m512i even = _mm512_load_si512(tb.even_bytes), odd = _mm512_load_si512(tb.odd_bytes);
  tab[0] = _mm512_permutex2var_epi8(words[0], odd, words[1]);
  tab[1] = _mm512_permutex2var_epi8(words[2], odd, words[3]);
  tab[2] = _mm512_permutex2var_epi8(words[0], even, words[1]);
  tab[3] = _mm512_permutex2var_epi8(words[2], even, words[3]);
}

// FP4: decoded weights w times their blocks' scales, the four e8m0 bytes at e4
// (block L's weights are in 128-bit lane L): (e − 127) · 128 added to the
// bf16 word of every nonzero weight.
// lane_byte: Tables::fp4_lane_byte.
DSV4_BF16DOT_TARGET inline void FoldFp4(const uint8_t* e4, __m512i lane_byte, __m512i w[4]) {
  uint32_t u;
  std::memcpy(&u, e4, 4);
  const __m512i words = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, lane_byte,
                                                      _mm512_set1_epi32(static_cast<int>(u)));
  const __m512i off = _mm512_slli_epi16(_mm512_sub_epi16(words, _mm512_set1_epi16(127)), 7);
  const __m512i mag = _mm512_set1_epi16(0x7fff);
  for (int v = 0; v < 4; ++v) {
    w[v] = _mm512_mask_add_epi16(w[v], _mm512_test_epi16_mask(w[v], mag), w[v], off);
  }
}

// kFp8Small: decoded weights w times their blocks' scales, the four e8m0
// bytes at e4 (vectors 2h and 2h + 1 hold blocks 2h in 128-bit lanes 0, 1
// and 2h + 1 in lanes 2, 3), as FoldFp4. lane_bytes: Tables::fp8s_lane_byte.
DSV4_BF16DOT_TARGET inline void FoldFp8Small(const uint8_t* e4, const __m512i lane_bytes[2],
                                             __m512i w[4]) {
  uint32_t u;
  std::memcpy(&u, e4, 4);
  const __m512i mag = _mm512_set1_epi16(0x7fff);
  for (int h = 0; h < 2; ++h) {
    const __m512i words = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, lane_bytes[h],
                                                        _mm512_set1_epi32(static_cast<int>(u)));
    const __m512i off = _mm512_slli_epi16(_mm512_sub_epi16(words, _mm512_set1_epi16(127)), 7);
    for (int v = 2 * h; v < 2 * h + 2; ++v) {
      w[v] = _mm512_mask_add_epi16(w[v], _mm512_test_epi16_mask(w[v], mag), w[v], off);
    }
  }
}

// Prefill path (T ≥ kMinTileTokens), cache-blocked:
//   for each panel of kPanelRows rows: decode it once (bf16, [P, K], L2) —
//   scales folded in where they fold, scale vectors beside it where not;
//     for each tile of kTileTokens tokens:
//       for each K-block of kKcGroups groups (x of the tile there: L1):
//         for each pair of rows (their weights there: L1): a micro-tile of
//         2 rows × MT tokens, per group the pair's 8 weight vectors in
//         registers and each token's 4 x vectors loaded: t = the four dot
//         products from zero, acc = acc + t (both rows folded) or the decode
//         path's FMA (a folded row's scale vector is 1; kFp8Small: per half
//         group, as the decode path); accumulators carried
//         from K-block to K-block in scratch;
//       then Tree16 sums 16 outputs at a time.
// Storing and reloading an accumulator is exact, so every output takes the
// decode path's operations in its order (up to the folding caveat above).
inline constexpr int64_t kPanelRows = 32;  // even: rows go in pairs
inline constexpr int64_t kKcGroups = 16;   // 2048 inputs per K-block

// Prefetches `lines` cache lines from p into L2 in `steps` equal shares.
class LinePrefetch {
 public:
  LinePrefetch(const uint8_t* p, int64_t lines, int64_t steps)
      : p_(p), lines_(lines), steps_(std::max<int64_t>(steps, 1)) {}
  void Step() {
    const int64_t upto = lines_ * ++step_ / steps_;
    for (; done_ < upto; ++done_)
      _mm_prefetch(reinterpret_cast<const char*>(p_ + 64 * done_), _MM_HINT_T1);
  }

 private:
  const uint8_t* p_;
  int64_t lines_, steps_, step_ = 0, done_ = 0;
};

// kHalves (kFp8Small): t and the scale vectors per half group (s0p, s1p:
// two vectors per group).
template <int MT, bool kFolded, bool kHalves>
DSV4_BF16DOT_TARGET inline void MicroTile(const uint16_t* w0p, const uint16_t* w1p,
                                          const float* s0p, const float* s1p, int64_t ng,
                                          const uint16_t* xp, int64_t x_stride, float* accp,
                                          bool first) {
  __m512 acc[2][MT];
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < MT; ++t) {
      acc[r][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(accp + (t * kPanelRows + r) * 16);
    }
  }
  for (int64_t g = 0; g < ng; ++g) {
    __m512i w0[4], w1[4];
    for (int v = 0; v < 4; ++v) {
      w0[v] = _mm512_load_si512(w0p + g * kGroup + 32 * v);
      w1[v] = _mm512_load_si512(w1p + g * kGroup + 32 * v);
    }
#pragma GCC unroll 8
    for (int t = 0; t < MT; ++t) {
      __m512i x[4];
      for (int v = 0; v < 4; ++v) {
        x[v] = _mm512_load_si512(xp + t * x_stride + g * kGroup + 32 * v);
      }
      if constexpr (kHalves) {
        for (int h = 0; h < 2; ++h) {
          if constexpr (kFolded) {
            acc[0][t] = _mm512_add_ps(acc[0][t], HalfDot(w0, x, h));
            acc[1][t] = _mm512_add_ps(acc[1][t], HalfDot(w1, x, h));
          } else {
            acc[0][t] = _mm512_fmadd_ps(HalfDot(w0, x, h), _mm512_load_ps(s0p + (2 * g + h) * 16),
                                        acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(HalfDot(w1, x, h), _mm512_load_ps(s1p + (2 * g + h) * 16),
                                        acc[1][t]);
          }
        }
      } else if constexpr (kFolded) {
        acc[0][t] = _mm512_add_ps(acc[0][t], GroupDot(w0, x));
        acc[1][t] = _mm512_add_ps(acc[1][t], GroupDot(w1, x));
      } else {
        acc[0][t] = _mm512_fmadd_ps(GroupDot(w0, x), _mm512_load_ps(s0p + g * 16), acc[0][t]);
        acc[1][t] = _mm512_fmadd_ps(GroupDot(w1, x), _mm512_load_ps(s1p + g * 16), acc[1][t]);
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < MT; ++t) _mm512_store_ps(accp + (t * kPanelRows + r) * 16, acc[r][t]);
  }
}

template <int MT, bool kFolded, bool kHalves>
DSV4_BF16DOT_TARGET void MicroTileN(int mt, const uint16_t* w0p, const uint16_t* w1p,
                                    const float* s0p, const float* s1p, int64_t ng,
                                    const uint16_t* xp, int64_t x_stride, float* accp, bool first) {
  if constexpr (MT > 1) {
    if (mt < MT) {
      return MicroTileN<MT - 1, kFolded, kHalves>(mt, w0p, w1p, s0p, s1p, ng, xp, x_stride, accp,
                                                  first);
    }
  }
  MicroTile<MT, kFolded, kHalves>(w0p, w1p, s0p, s1p, ng, xp, x_stride, accp, first);
}

// Scratch of the tile path (floats and bf16 words), per thread.
struct TileScratch {
  uint16_t* w;    // [kPanelRows, K] decoded weights
  float* sv;      // [kPanelRows, groups, 16] scale vectors (1 where folded; kFp8Small: 2 per group)
  float* sf;      // [groups · 4] one row's f32 scales
  float* acc;     // [kTileTokens, kPanelRows, 16] accumulators
  __m512i* ftab;  // [groups, 4] FP8's folded tables of one 128-row block
};

template <Format F>
DSV4_BF16DOT_TARGET void Tiles(const MatMulArgs& a, const uint16_t* xb, const TileScratch& ts) {
  const int64_t k_size = a.w.sizes[1], groups = k_size / kGroup;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  const bool can_fold = a.scale.dtype == DType::kE8m0 && a.scale.strides[1] == 1;
  constexpr int kMT = bf16dot::kTileTokens;
  constexpr bool kHalves = F == Format::kFp8Small;
  constexpr int64_t kSv = kHalves ? 32 : 16;  // scale vector floats per group
  __m512i tab[4];
  LoadTables<F>(tab);
  const __m512i lane_byte = _mm512_load_si512(GetTables().fp4_lane_byte);
  const __m512i fp8s_lane_bytes[2] = {_mm512_load_si512(GetTables().fp8s_lane_byte[0]),
                                      _mm512_load_si512(GetTables().fp8s_lane_byte[1])};
  int64_t ftab_key = -1;  // FP8: the 128-row block whose folded tables ftab holds
  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += kPanelRows) {
    const int64_t rows_here = std::min<int64_t>(kPanelRows, a.row_end - n0);
    const int64_t pairs = (rows_here + 1) / 2;
    bool folded[kPanelRows];
    for (int64_t r = 0; r < 2 * pairs; ++r) {  // an odd last row is repeated; dropped below
      const int64_t n = n0 + std::min<int64_t>(r, rows_here - 1);
      const uint8_t* row = base + n * row_bytes;
      const uint8_t* e = can_fold ? ScaleBytes<F>(a.scale, n) : nullptr;
      folded[r] = can_fold &&
                  BytesInRange(e, F == Format::kFp8 ? groups : 4 * groups, kFoldMinE, kFoldMaxE);
      if (folded[r] && F == Format::kFp8 && ScaleKey<F>(n) != ftab_key) {
        for (int64_t g = 0; g < groups; ++g) FoldedFp8Tables(e[g], ts.ftab + 4 * g);
        ftab_key = ScaleKey<F>(n);
      }
      if (!folded[r]) RowScales(F, a.scale, n, groups, ts.sf);
      if (kHalves) {
        if (folded[r]) {
          std::fill_n(ts.sv + r * groups * kSv, groups * kSv, 1.0f);
        } else {
          HalfScaleVectors(ts.sf, groups, ts.sv + r * groups * kSv);
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const __m512 one = _mm512_set1_ps(1.0f);
        if (!kHalves) {
          _mm512_store_ps(ts.sv + (r * groups + g) * kSv,
                          folded[r] ? one : ScaleVector<F>(ts.sf, g));
        }
        __m512i w[4];
        if constexpr (F == Format::kFp8) {
          Decode<F>(row + g * kGroupBytes<F>, folded[r] ? ts.ftab + 4 * g : tab, w);
        } else if constexpr (F == Format::kFp8Small) {
          Decode<F>(row + g * kGroupBytes<F>, tab, w);
          if (folded[r]) FoldFp8Small(e + 4 * g, fp8s_lane_bytes, w);
        } else {
          Decode<F>(row + g * kGroupBytes<F>, tab, w);
          if (folded[r]) FoldFp4(e + 4 * g, lane_byte, w);
        }
        for (int v = 0; v < 4; ++v) {
          _mm512_store_si512(ts.w + r * k_size + g * kGroup + 32 * v, w[v]);
        }
      }
    }
    // While this panel's tiles run, the next panel's weights come into L2
    // (its decode above would otherwise wait on memory, a large share of the
    // FP4 tiles' time in a long prefill), a share per micro-tile.
    const int64_t next_rows = std::clamp<int64_t>(a.row_end - n0 - kPanelRows, 0, kPanelRows);
    LinePrefetch next{
        base + (n0 + kPanelRows) * row_bytes, (next_rows * row_bytes + 63) / 64,
        (a.n_tokens + kMT - 1) / kMT * ((groups + kKcGroups - 1) / kKcGroups) * pairs};
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kMT) {
      const int mt = static_cast<int>(std::min<int64_t>(kMT, a.n_tokens - t0));
      for (int64_t g0 = 0; g0 < groups; g0 += kKcGroups) {
        const int64_t ng = std::min<int64_t>(kKcGroups, groups - g0);
        for (int64_t pr = 0; pr < pairs; ++pr) {
          next.Step();
          const int64_t r0 = 2 * pr;
          const uint16_t* w0 = ts.w + r0 * k_size + g0 * kGroup;
          const float* s0 = ts.sv + (r0 * groups + g0) * kSv;
          const uint16_t* x = xb + t0 * k_size + g0 * kGroup;
          float* acc = ts.acc + r0 * 16;
          if (folded[r0] && folded[r0 + 1]) {
            MicroTileN<kMT, true, kHalves>(mt, w0, w0 + k_size, s0, s0 + groups * kSv, ng, x,
                                           k_size, acc, g0 == 0);
          } else {
            MicroTileN<kMT, false, kHalves>(mt, w0, w0 + k_size, s0, s0 + groups * kSv, ng, x,
                                            k_size, acc, g0 == 0);
          }
        }
      }
      for (int64_t t = 0; t < mt; ++t) {
        float* out = a.out + (t0 + t) * a.out_stride + (n0 - a.row_begin);
        for (int64_t i0 = 0; i0 < rows_here; i0 += 16) {
          const int64_t cnt = std::min<int64_t>(16, rows_here - i0);
          _mm512_mask_storeu_ps(out + i0, static_cast<__mmask16>((1u << cnt) - 1),
                                Tree16(ts.acc + (t * kPanelRows + i0) * 16));
        }
      }
    }
  }
}

// Whether x[0, n) is all exactly bf16 (ScalarIsBf16), 16 at a time.
DSV4_BF16DOT_TARGET bool AllBf16(const float* x, int64_t n) {
  const __m512i low16 = _mm512_set1_epi32(0xffff), expo = _mm512_set1_epi32(0x7f800000);
  const __m512i mant = _mm512_set1_epi32(0x007f0000);
  __mmask16 bad = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_loadu_si512(x + i);
    bad |= _mm512_test_epi32_mask(v, low16) |
           (_mm512_testn_epi32_mask(v, expo) & _mm512_test_epi32_mask(v, mant));
  }
  for (; i < n; ++i) {
    if (!bf16dot::ScalarIsBf16(x[i])) return false;
  }
  return bad == 0;
}

template <Format F>
bool TryMatMul(const MatMulArgs& a) {
  const int64_t k_size = a.w.sizes[1];
  if (k_size % kGroup != 0 || k_size == 0) return false;
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return true;
  if (!AllBf16(a.x, a.n_tokens * k_size)) return false;  // before anything is written
  Scratch& s = GetScratch();
  const int64_t groups = k_size / kGroup;
  // Tokens in blocks whose bf16 x takes at most kXBlockBytes of scratch (a
  // long prompt in one call would otherwise need T · K · 2 bytes per thread).
  const int64_t block =
      std::max<int64_t>(bf16dot::kMinTileTokens, bf16dot::kXBlockBytes / (2 * k_size));
  uint16_t* xb = Grow(s.x, std::min(block, a.n_tokens) * k_size);
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += block) {
    MatMulArgs b = a;
    b.x = a.x + t0 * k_size;
    b.out = a.out + t0 * a.out_stride;
    b.n_tokens = std::min(block, a.n_tokens - t0);
    for (int64_t t = 0; t < b.n_tokens; ++t) {
      ConvertX(DecodeAs(F), b.x + t * k_size, k_size, xb + t * k_size);
    }
    if (b.n_tokens < bf16dot::kMinTileTokens) {
      MatVec<F>(b, xb, Grow(s.s, groups * 8));  // two rows' f32 scales
    } else {
      const int64_t sv_floats = kPanelRows * groups * (F == Format::kFp8Small ? 32 : 16);
      const int64_t sf_floats = (groups * 4 + 15) / 16 * 16, ftab_floats = groups * 4 * 16;
      const int64_t acc_floats = bf16dot::kTileTokens * kPanelRows * 16;
      float* f = Grow(s.s, sv_floats + sf_floats + ftab_floats + acc_floats);
      Tiles<F>(
          b, xb,
          TileScratch{.w = Grow(s.w, kPanelRows * k_size),
                      .sv = f,
                      .sf = f + sv_floats,
                      .acc = f + sv_floats + sf_floats,
                      .ftab = reinterpret_cast<__m512i*>(f + sv_floats + sf_floats + acc_floats)});
    }
  }
  return true;
}

// The bf16 dot-product roof: 12 independent vdpbf16ps chains (each of 32
// multiply-adds), register-only, as FmaLoop does for fp32 FMA.
DSV4_BF16DOT_TARGET float DotLoop(int64_t macs, int64_t* done) {
  const __m512i ones = _mm512_set1_epi16(0x3f80), tiny = _mm512_set1_epi16(0x3400);  // 1, 2^-23
  __m512 c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_ps(static_cast<float>(i + 1));
  const int64_t iters = std::max<int64_t>(1, macs / (12 * 32));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) c[i] = _mm512_dpbf16_ps(c[i], AsBh(ones), AsBh(tiny));
  }
  *done = iters * 12 * 32;
  __m512 sum = c[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, c[i]);
  return _mm512_reduce_add_ps(sum);
}

bool Enabled() {
  static const bool on = x86::KernelsOn() && __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512bf16");
  return on;
}

// FP8 by its scale tiles: 128×128, or 32×32 (args.fp8_block).
bool TryMatMulFp8(const MatMulArgs& a) {
  return a.fp8_block == 32 ? TryMatMul<Format::kFp8Small>(a) : TryMatMul<Format::kFp8>(a);
}

}  // namespace

TryMatMulFn Fp8Bf16DotKernel() { return Enabled() ? &TryMatMulFp8 : nullptr; }
TryMatMulFn Fp4Bf16DotKernel() { return Enabled() ? &TryMatMul<Format::kFp4> : nullptr; }

float Bf16DotLoop(int64_t macs, int64_t* done) {
  if (!Enabled()) {
    *done = 0;
    return 0.0f;
  }
  return DotLoop(macs, done);
}

#else  // !DSV4_HAVE_BF16DOT

TryMatMulFn Fp8Bf16DotKernel() { return nullptr; }
TryMatMulFn Fp4Bf16DotKernel() { return nullptr; }

float Bf16DotLoop(int64_t /*macs*/, int64_t* done) {
  *done = 0;
  return 0.0f;
}

#endif

}  // namespace dsv4::ops::simd
