// ops/simd kernels for GGUF weights in 32-value blocks × activations
// quantised to q8_0 (BlockQ8_0: f16 scale, 32 int8 codes), as llama.cpp's CPU
// backend multiplies them: one copy per Highway target (foreach_target),
// picked at run time.
//   MXFP4 (tensor/ggml_quants.h: one e8m0 scale byte e, then 16 bytes of e2m1
//   codes, value j in the low nibble of byte j, value j + 16 in the high
//   nibble): the twin of ops::ref::DotMxfp4Q8_0, bit for bit.
//   q8_0 (f16 scale, 32 int8 codes): the twin of ops::ref::DotQ8_0Q8_0 (and
//   so of ref::MatMulQ8_0Q8_0), bit for bit.
//
// Per 32-value block b of a weight row and a token's q8_0 block:
//   mxfp4:  isum = Σ_j kvalues[code_j] · x8_j   (kvalues = 2·e2m1: 0, ±1 … ±12)
//           d    = f16(x.d) · 2^(e − 128)       (ggml's E8M0_TO_FP32_HALF)
//   q8_0:   isum = Σ_j w8_j · x8_j,  d = f16(w.d) · f16(x.d)
//   acc = acc + d · float(isum)
// from acc = 0, blocks in order, each product rounded (this file is compiled
// with -ffp-contract=off; the products of d are commutative, so either
// operand order gives the ref's bits). isum is exact in any order
// (|isum| ≤ 32·128·128) and so is float(isum).
//
// The codes of a block are decoded once per call (per token tile of at most
// kTileTokens) into int16 (mxfp4 through a 16-entry byte table), for a group
// of kRows = 4 rows, and dotted with each token's codes (widened to int16
// once per call): int32 multiply-adds whose lanes are summed by a 4×4
// transposition per 128-bit block (Fold4), which leaves the four rows' isums
// in the lanes of one vector. Two such units are folded and stored together:
// two tokens of one block, or for a single token two consecutive blocks. The
// float steps then run on those lanes (one per row and token or block), each
// lane in the ref's order: a single token's two blocks are added to its
// accumulators one after the other.
//
// On x86 with AVX2 (the AVX2 and AVX-512 targets) a single token's mxfp4
// blocks skip the int16 widening: one 256-bit table lookup gives the block's
// 32 values as bytes, multiplied by vpmaddubsw as |x|·(w·sign(x)) (exact for
// any int8 x since |w| ≤ 12: a pair of products stays within int16), the pairs
// summed in int32 as before.
//
// The file also holds the portable q8_0 activation quantiser (QuantizeQ8_0),
// ops::ref::QuantizeRowQ8_0 bit for bit.
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_MXFP4_Q8_SIMD_ONCE_
#define DSV4_OPS_SIMD_MXFP4_Q8_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/ref/kquant_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/ggml_quants.h"

namespace dsv4::ops::simd::mxfp4_detail {

inline constexpr int kRows = 4;                    // weight rows per group: one float lane each
inline constexpr int64_t kBlockBytes = 17;         // sizeof(BlockMXFP4)
inline constexpr int64_t kPrefetchAhead = 4 * 64;  // bytes ahead in each row
inline constexpr int64_t kTileTokens = 32;         // tokens per pass over the rows
inline constexpr int64_t kOneTokenMax = 3;  // tiles of up to this many tokens: token by token
static_assert(sizeof(BlockMXFP4) == kBlockBytes);

// kvalues_mxfp4: the e2m1 values doubled, indexed by the 4-bit code.
alignas(16) inline constexpr int8_t kValues[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                   0, -1, -2, -3, -4, -6, -8, -12};

// Per-thread buffers: the tile's activation codes widened to int16 [T, K],
// their block scales as f32 [T, K/32], the accumulators [T, kRows].
struct Scratch {
  std::vector<int16_t> x;
  std::vector<float> xd;
  std::vector<float> acc;
};
inline Scratch& GetScratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace dsv4::ops::simd::mxfp4_detail
#endif  // DSV4_OPS_SIMD_MXFP4_Q8_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/mxfp4_q8_simd.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace mx = mxfp4_detail;

#if HWY_TARGET == HWY_SCALAR
// One lane: the scalar twins themselves.
template <bool kMxfp4>
void RefRows(const MatMulArgs& a, const BlockQ8_0* xq) {
  const int64_t k_size = a.w.sizes[1], nb = k_size / 32;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w.data) + n * row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      a.out[t * a.out_stride + (n - a.row_begin)] =
          kMxfp4 ? ref::DotMxfp4Q8_0(row, xq + t * nb, k_size)
                 : ref::DotQ8_0Q8_0(row, xq + t * nb, nb);
    }
  }
}
void Mxfp4Q8(const MatMulArgs& a, const void* xq) {
  RefRows<true>(a, static_cast<const BlockQ8_0*>(xq));
}
void Q8_0Q8(const MatMulArgs& a, const void* xq) {
  RefRows<false>(a, static_cast<const BlockQ8_0*>(xq));
}
void QuantizeQ8_0(const float* x, int64_t k, BlockQ8_0* y) { ref::QuantizeRowQ8_0(x, k, y); }
#else
// x86 with AVX2: one token's mxfp4 blocks multiply as bytes (vpmaddubsw on
// |x| and w·sign(x): exact, |w| ≤ 12 keeps each pair of products within int16).
#undef DSV4_MXFP4_I8DOT
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define DSV4_MXFP4_I8DOT 1
#else
#define DSV4_MXFP4_I8DOT 0
#endif
namespace mxfp4_impl {

// D16, D32, kChunks, Widen, Fold4, SumLanes4:
#include "ops/simd/q8_lanes-inl.h"

// we[i] = 2^(e_i − 128) (ggml's E8M0_TO_FP32_HALF, as ops/ref computes it) for
// the eight scale bytes e_i packed little-endian in packed[0], computed in vectors:
// the scales reach the float steps through one 8-byte store and vector
// stores, never as eight scalar stores that one vector load would read back.
HWY_INLINE void ScalesFromBytes(const uint64_t* packed, float* HWY_RESTRICT we) {
  const hn::CappedTag<int32_t, 8> di;
  const hn::RebindToUnsigned<decltype(di)> du;
  const hn::RebindToFloat<decltype(di)> df;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  HWY_ALIGN uint8_t bytes[8];
  std::memcpy(bytes, packed, 8);
  for (size_t i = 0; i < 8; i += hn::Lanes(di)) {
    const auto e = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, bytes + i)));
    // e < 2: the subnormals 2^-128 (bit 21) and 2^-127 (bit 22); else exponent e − 1.
    const auto sub =
        hn::IfThenElse(hn::Eq(e, hn::Zero(di)), hn::Set(di, 0x00200000), hn::Set(di, 0x00400000));
    const auto bits = hn::IfThenElse(hn::Lt(e, hn::Set(di, 2)), sub,
                                     hn::ShiftLeft<23>(hn::Sub(e, hn::Set(di, 1))));
    hn::Store(hn::BitCast(df, bits), df, we + i);
  }
}

// we[i] = the f16 values h_i (i < 8) packed little-endian in packed[0]
// (i < 4) and packed[1], converted exactly (F16ToF32's values) in vectors, for
// the same reason.
template <class DF8 = hn::CappedTag<float, 8> >
HWY_INLINE void ScalesFromHalves(const uint64_t* packed, float* HWY_RESTRICT we) {
  const DF8 df8;
  const hn::Full128<float> d4;
  const hn::Rebind<hwy::float16_t, decltype(d4)> dh;
  HWY_ALIGN uint64_t words[2] = {packed[0], packed[1]};
  const auto lo = hn::PromoteTo(d4, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(words)));
  const auto hi =
      hn::PromoteTo(d4, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(words + 1)));
  if constexpr (hn::MaxLanes(DF8()) == 8) {
    hn::Store(hn::Combine(df8, hi, lo), df8, we);
  } else {
    hn::Store(lo, d4, we);
    hn::Store(hi, d4, we + 4);
  }
}

// Each format: kBytes per block, Decode (the 32 codes as int16: w[h·kChunks +
// c] the values 16h + …), and the block scale as raw bits (kScaleBits wide,
// ScaleBits) that Scales turns into eight floats at once from the packed bits
// of eight blocks (Pack).
//
// MXFP4: the codes through the byte table (h = 0 the low nibbles, 1 the high
// ones); the scale byte e, 2^(e − 128).
struct Mxfp4Fmt {
  static constexpr int64_t kBytes = mx::kBlockBytes;
  static constexpr int64_t kPrefetchEvery = 3;  // blocks per 64-byte line, rounded down
  static constexpr int kScaleBits = 8;
  static constexpr bool kI8Dot = true;  // |w| ≤ 12: byte products in int16 pairs (I8Dot)
  static HWY_INLINE uint64_t ScaleBits(const uint8_t* blk) { return blk[0]; }
#if DSV4_MXFP4_I8DOT
  // The 32 values as int8, in order: [low nibbles | high nibbles] through the table.
  static HWY_INLINE __m256i DecodeI8(const uint8_t* blk) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(c), _mm_srli_epi16(c, 4), 1);
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(mx::kValues)));
    return _mm256_shuffle_epi8(table, _mm256_and_si256(v, _mm256_set1_epi8(0x0F)));
  }
#endif
  static HWY_INLINE void Scales(const uint64_t* packed, float* we) { ScalesFromBytes(packed, we); }
  static HWY_INLINE void Decode(const uint8_t* blk, V16* w) {
    const D16 d16;
    const hn::Full128<uint8_t> du8;
    const hn::Full128<int8_t> di8;
    const auto table = hn::Load(di8, mx::kValues);
    const auto codes = hn::LoadU(du8, blk + 1);
    const auto lo = hn::TableLookupBytes(table, hn::BitCast(di8, hn::And(codes, hn::Set(du8, 15))));
    const auto hi = hn::TableLookupBytes(table, hn::BitCast(di8, hn::ShiftRight<4>(codes)));
    Widen(d16, lo, w);
    Widen(d16, hi, w + kChunks);
  }
};

// q8_0: the f16 scale, then 32 int8 codes.
struct Q8_0Fmt {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr int64_t kPrefetchEvery = 1;
  static constexpr int kScaleBits = 16;
  static constexpr bool kI8Dot = false;  // −128·−128 would overflow the int16 pairs
  static HWY_INLINE uint64_t ScaleBits(const uint8_t* blk) {
    uint16_t h;
    std::memcpy(&h, blk + offsetof(BlockQ8_0, d), 2);
    return h;
  }
  static HWY_INLINE void Scales(const uint64_t* packed, float* we) { ScalesFromHalves(packed, we); }
  static HWY_INLINE void Decode(const uint8_t* blk, V16* w) {
    const D16 d16;
    const hn::Full128<int8_t> di8;
    const auto* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
    Widen(d16, hn::LoadU(di8, qs), w);
    Widen(d16, hn::LoadU(di8, qs + 16), w + kChunks);
  }
};

// Puts block i's scale bits (i < 8) into packed[2], little-endian.
template <class Fmt>
HWY_INLINE void Pack(uint64_t* packed, int i, uint64_t bits) {
  packed[(i * Fmt::kScaleBits) / 64] |= bits << ((i * Fmt::kScaleBits) % 64);
}

// out[4j + r] = the sum of all lanes of the vector that Fold4 folded into
// b[j] at lane r (j < 2, r < 4).
template <class DW>
HWY_INLINE void Store8(DW d, const hn::VFromD<DW>* b, int32_t* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(DW()) == 8) {
    hn::Store(hn::Add(hn::ConcatLowerLower(d, b[1], b[0]), hn::ConcatUpperUpper(d, b[1], b[0])), d,
              out);
  } else {
    hn::Store(b[0], d, out);
    hn::Store(b[1], d, out + 4);
  }
}

// sums[i] (lanes to be summed) = w[i] · xv over one block (2·kChunks vectors each).
HWY_INLINE V32 DotBlock(const V16* w, const V16* xv) {
  const D32 d32;
  V32 sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
  for (size_t i = 0; i < 2 * kChunks; ++i) {
    sum0 = hn::ReorderWidenMulAccumulate(d32, w[i], xv[i], sum0, sum1);
  }
  return hn::Add(sum0, sum1);
}

// out[i] = d8[i]·float(isum[i]) for i < 8, where d8[i] = xd8[i]·we8[i]: two
// (row group, token or block) units' products, each rounded.
HWY_INLINE void Products8(const float* xd8, const float* we8, const int32_t* isum,
                          float* HWY_RESTRICT out) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  for (size_t i = 0; i < 8; i += hn::Lanes(df)) {
    const auto d = hn::Mul(hn::LoadU(df, xd8 + i), hn::LoadU(df, we8 + i));
    hn::Store(hn::Mul(d, hn::ConvertTo(df, hn::Load(di, isum + i))), df, out + i);
  }
}

#if DSV4_MXFP4_I8DOT
// Σ over lanes = Σ_k w[k]·x[k] for int8 w with |w| ≤ 127 and any int8 x:
// |x| (ax) times w·sign(x) in byte pairs (each pair's sum within int16 when
// |w| ≤ 12), then the pairs' sums in int32.
HWY_INLINE V32 I8Dot(__m256i w, __m256i x, __m256i ax) {
  return V32{
      _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x)), _mm256_set1_epi16(1))};
}
#endif

// sums[r] (lanes to be summed) for block b of the four rows against one
// token's block (its codes as int16, xt16, and as int8, x8); the rows' scale
// bits packed at base + r.
template <class Fmt>
HWY_INLINE void RowSums(const uint8_t* const* rows, int64_t b, const int16_t* xt16,
                        const int8_t* x8, uint64_t* packed, int base, bool prefetch, V32* sums) {
#if DSV4_MXFP4_I8DOT
  if constexpr (Fmt::kI8Dot) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x8));
    const __m256i ax = _mm256_abs_epi8(xv);
    for (int r = 0; r < mx::kRows; ++r) {
      const uint8_t* blk = rows[r] + b * Fmt::kBytes;
      if (prefetch) hwy::Prefetch(blk + mx::kPrefetchAhead);
      Pack<Fmt>(packed, base + r, Fmt::ScaleBits(blk));
      sums[r] = I8Dot(Fmt::DecodeI8(blk), xv, ax);
    }
    return;
  }
#endif
  (void)x8;
  const D16 d16;
  const size_t n16 = hn::Lanes(d16);
  V16 xv[2 * kChunks];
  for (size_t i = 0; i < 2 * kChunks; ++i) xv[i] = hn::LoadU(d16, xt16 + i * n16);
  for (int r = 0; r < mx::kRows; ++r) {
    const uint8_t* blk = rows[r] + b * Fmt::kBytes;
    if (prefetch) hwy::Prefetch(blk + mx::kPrefetchAhead);
    V16 w[2 * kChunks];
    Fmt::Decode(blk, w);
    Pack<Fmt>(packed, base + r, Fmt::ScaleBits(blk));
    sums[r] = DotBlock(w, xv);
  }
}

template <class Fmt>
void Block32Rows(const MatMulArgs& a, const BlockQ8_0* xq) {
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return;
  constexpr int R = mx::kRows;
  static_assert(R == 4, "Fold4 folds four rows");
  const int64_t k_size = a.w.sizes[1];
  DCHECK(k_size % 32 == 0);
  const int64_t nb = k_size / 32;
  const int64_t n_tokens = a.n_tokens;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const auto* base = static_cast<const uint8_t*>(a.w.data);

  const D16 d16;
  const D32 d32;
  const hn::Full128<float> df;
  const size_t n16 = hn::Lanes(d16);

  // Token tiles of at most kTileTokens, as even as the count allows.
  const int64_t n_tiles = (n_tokens + mx::kTileTokens - 1) / mx::kTileTokens;
  const int64_t tile = (n_tokens + n_tiles - 1) / n_tiles;

  // The tile's activations: x[(b·tt + t)·32 + j] the codes as int16 (block
  // major: a block's tokens are consecutive); the scales four times each (one
  // per row lane) in two orders, so that two tokens' scales of a block
  // (xd_bt[(b·tt + t)·4 + i]) and two blocks' scales of a token
  // (xd_tb[(t·nb + b)·4 + i]) are eight consecutive floats.
  mx::Scratch& s = mx::GetScratch();
  if (s.x.size() < static_cast<size_t>(tile * k_size)) {
    s.x.resize(static_cast<size_t>(tile * k_size));
  }
  const auto xd_need = static_cast<size_t>(2 * (tile * nb * R + 2 * R));
  if (s.xd.size() < xd_need) s.xd.resize(xd_need);
  if (s.acc.size() < static_cast<size_t>(tile * R)) s.acc.resize(static_cast<size_t>(tile * R));
  float* xd_bt = s.xd.data();
  float* xd_tb = s.xd.data() + xd_need / 2;

  HWY_ALIGN int32_t isum[2 * R];
  HWY_ALIGN float prod[2 * R];
  HWY_ALIGN float we[2 * R];

  for (int64_t t0 = 0; t0 < n_tokens; t0 += tile) {
    const int64_t tt = std::min(tile, n_tokens - t0);
    for (int64_t t = 0; t < tt; ++t) {
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_0& xb = xq[(t0 + t) * nb + b];
        int16_t* dst = s.x.data() + (b * tt + t) * 32;
        for (int j = 0; j < 32; ++j) dst[j] = xb.qs[j];
        const float xd = F16ToF32(xb.d);
        for (int i = 0; i < R; ++i) {
          xd_bt[(b * tt + t) * R + i] = xd;
          xd_tb[(t * nb + b) * R + i] = xd;
        }
      }
    }
    for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += R) {
      const int rows_here = static_cast<int>(std::min<int64_t>(R, a.row_end - n0));
      const uint8_t* rows[R];
      // A short group repeats its last row (its results are not stored).
      for (int r = 0; r < R; ++r) rows[r] = base + (n0 + std::min(r, rows_here - 1)) * row_bytes;
      float* acc = s.acc.data();
      if (tt <= mx::kOneTokenMax) {
        // Few tokens: each on its own, blocks in pairs, each decoded and
        // dotted at once; the pair's eight sums folded together, its products
        // added in block order. (The same float steps as below, so a token's
        // bits do not depend on the path.)
        for (int64_t t = 0; t < tt; ++t) {
          const BlockQ8_0* xqt = xq + (t0 + t) * nb;
          const float* xd8 = xd_tb + t * nb * R;
          auto acc4 = hn::Zero(df);
          int64_t b = 0;
          for (; b + 1 < nb; b += 2) {
            V32 folded[2];
            uint64_t packed[2] = {0, 0};
            for (int j = 0; j < 2; ++j) {
              V32 sums[R];
              // One prefetch per row and 64 bytes, for the first token.
              const bool prefetch = t == 0 && (j == 0 || Fmt::kBytes > 32);
              RowSums<Fmt>(rows, b + j, s.x.data() + ((b + j) * tt + t) * 32, xqt[b + j].qs, packed,
                           j * R, prefetch, sums);
              folded[j] = Fold4(d32, sums);
            }
            Fmt::Scales(packed, we);
            Store8(d32, folded, isum);
            Products8(xd8 + b * R, we, isum, prod);
            acc4 = hn::Add(acc4, hn::Load(df, prod));
            acc4 = hn::Add(acc4, hn::Load(df, prod + R));
          }
          if (b < nb) {
            V32 sums[R];
            uint64_t packed[2] = {0, 0};
            RowSums<Fmt>(rows, b, s.x.data() + (b * tt + t) * 32, xqt[b].qs, packed, 0, false,
                         sums);
            Fmt::Scales(packed, we);
            const auto d = hn::Mul(hn::LoadU(df, xd8 + b * R), hn::Load(df, we));
            acc4 = hn::Add(acc4, hn::Mul(d, hn::ConvertTo(df, SumLanes4(d32, sums))));
          }
          hn::StoreU(acc4, df, acc + t * R);
        }
      } else {
        // Several tokens: each block decoded once for the group, the tokens
        // in pairs (one pair's eight sums folded together, its products in
        // the pair's two accumulators, eight consecutive floats).
        std::fill(acc, acc + tt * R, 0.0f);
        for (int64_t b = 0; b < nb; ++b) {
          V16 w[R][2 * kChunks];
          uint64_t packed[2] = {0, 0};
          for (int r = 0; r < R; ++r) {
            const uint8_t* blk = rows[r] + b * Fmt::kBytes;
            if (b % Fmt::kPrefetchEvery == 0) hwy::Prefetch(blk + mx::kPrefetchAhead);
            Fmt::Decode(blk, w[r]);
            Pack<Fmt>(packed, r, Fmt::ScaleBits(blk));  // and again as blocks 4…7
            Pack<Fmt>(packed, R + r, Fmt::ScaleBits(blk));
          }
          Fmt::Scales(packed, we);
          const int16_t* xb = s.x.data() + b * tt * 32;
          int64_t t = 0;
          for (; t + 1 < tt; t += 2) {
            V32 folded[2];
            for (int j = 0; j < 2; ++j) {
              const int16_t* xt = xb + (t + j) * 32;
              V16 xv[2 * kChunks];
              for (size_t i = 0; i < 2 * kChunks; ++i) xv[i] = hn::LoadU(d16, xt + i * n16);
              V32 sums[R];
              for (int r = 0; r < R; ++r) sums[r] = DotBlock(w[r], xv);
              folded[j] = Fold4(d32, sums);
            }
            Store8(d32, folded, isum);
            Products8(xd_bt + (b * tt + t) * R, we, isum, prod);
            const hn::CappedTag<float, 8> df8;
            for (size_t i = 0; i < 2 * R; i += hn::Lanes(df8)) {
              float* at = acc + t * R + i;
              hn::StoreU(hn::Add(hn::LoadU(df8, at), hn::Load(df8, prod + i)), df8, at);
            }
          }
          if (t < tt) {
            const int16_t* xt = xb + t * 32;
            V16 xv[2 * kChunks];
            for (size_t i = 0; i < 2 * kChunks; ++i) xv[i] = hn::LoadU(d16, xt + i * n16);
            V32 sums[R];
            for (int r = 0; r < R; ++r) sums[r] = DotBlock(w[r], xv);
            const auto d = hn::Mul(hn::LoadU(df, xd_bt + (b * tt + t) * R), hn::Load(df, we));
            const auto p = hn::Mul(d, hn::ConvertTo(df, SumLanes4(d32, sums)));
            hn::StoreU(hn::Add(hn::LoadU(df, acc + t * R), p), df, acc + t * R);
          }
        }
      }
      for (int r = 0; r < rows_here; ++r) {
        for (int64_t t = 0; t < tt; ++t) {
          a.out[(t0 + t) * a.out_stride + (n0 + r - a.row_begin)] = acc[t * R + r];
        }
      }
    }
  }
}

}  // namespace mxfp4_impl

// ops::ref::QuantizeRowQ8_0 bit for bit (finite x): per 32 values amax =
// max |x| (exact in any order), d = amax / 127, id = 127 / amax (0 for
// amax = 0), the scale f16(d), codes x · id rounded to nearest, ties to even
// (llama.cpp's x86 quantize_row_q8_0).
void QuantizeQ8_0(const float* x, int64_t k, BlockQ8_0* y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t n = hn::Lanes(df);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    auto vmax = hn::Zero(df);
    for (size_t i = 0; i < 32; i += n) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + i)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = F32ToF16(d);
    const auto vid = hn::Set(df, id);
    for (size_t i = 0; i < 32; i += n) {
      const auto v = hn::Mul(hn::LoadU(df, xb + i), vid);
      const auto r = hn::Round(v);  // to nearest, ties to even
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, y[b].qs + i);
    }
  }
}

void Mxfp4Q8(const MatMulArgs& a, const void* xq) {
  mxfp4_impl::Block32Rows<mxfp4_impl::Mxfp4Fmt>(a, static_cast<const BlockQ8_0*>(xq));
}
void Q8_0Q8(const MatMulArgs& a, const void* xq) {
  mxfp4_impl::Block32Rows<mxfp4_impl::Q8_0Fmt>(a, static_cast<const BlockQ8_0*>(xq));
}

#endif  // HWY_TARGET == HWY_SCALAR

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(Mxfp4Q8);
HWY_EXPORT(Q8_0Q8);
HWY_EXPORT(QuantizeQ8_0);

GgmlQ8Fn GgmlMxfp4Q8Kernel(DType w_dtype) {
  if (w_dtype != DType::kMXFP4) return nullptr;
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(Mxfp4Q8);
}

GgmlQ8Fn Q8_0Q8PortableKernel() {
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(Q8_0Q8);
}

Q8_0QuantizeFn Q8_0QuantizePortableKernel() {
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(QuantizeQ8_0);
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
