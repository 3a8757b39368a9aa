// ops/simd kernels for the legacy (q4_0, q4_1, q5_0, q5_1, iq4_nl) and
// k-quant (q2_K, q3_K, q5_K, iq4_xs) GGUF weights × activations quantised as
// llama.cpp quantises them (q8_0, q8_1 or q8_K; ops/ref/ggml_dot_ref.h): one
// copy per Highway target (foreach_target), picked at run time
// (HWY_DYNAMIC_DISPATCH). Bit for bit ops::ref::DotBasicQ8, whose comment
// gives each type's integer sums and float steps.
//
// Rows go in groups of kRows = 4 (a short last group repeats its last row and
// drops those results). Per block, each row's codes are unpacked into int16
// (times the sub-block's integer scale where the float steps take one sum per
// block: q2_K, q3_K, q5_K), with the block's f32 scale fields. The integer
// sums are int16 × int16 → int32 pairwise multiply-adds against the widened
// int8 activation codes (and for q2_K / q5_K the mins against q8_K's int16
// block sums), exact whatever the lane order; a transposing reduction then
// puts the 4 rows' sums of one token in the 4 lanes of one vector, and the
// block's float steps run on those lanes: each lane (row) sees the ref's
// operations in the ref's order, so the results are the ref's bits.
//
// Per group of 4 rows, kChunkValues values of each row at a time are unpacked
// into a per-thread buffer (so that the unpacking's stores are long done when
// the dot loads them), the next chunk's bytes are prefetched, and every token
// runs over the chunk, two tokens per pass, its 4 accumulators kept per token
// across chunks. A token takes the same per-output steps whatever T, so its
// result does not depend on how many tokens share the call.
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_GGML_BASIC_SIMD_ONCE_
#define DSV4_OPS_SIMD_GGML_BASIC_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/float_types.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/ggml_quants.h"

namespace dsv4::ops::simd::ggml_basic_detail {

inline constexpr int kRows = 4;           // weight rows per group (the float lanes)
inline constexpr int kChunkValues = 512;  // values per row unpacked at a time

// llama.cpp's kvalues_iq4nl: the 16 levels of iq4_nl and iq4_xs.
alignas(16) inline constexpr int8_t kIq4nlTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                       1,    13,   25,  38,  53,  69,  89,  113};
// Byte i of 16 tests bit i % 8 of byte 2·half + i / 8 of a q5 block's qh.
alignas(16) inline constexpr uint8_t kQhByte[2][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
alignas(16) inline constexpr uint8_t kQhBit[16] = {1, 2, 4, 8, 16, 32, 64, 128,
                                                   1, 2, 4, 8, 16, 32, 64, 128};

inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}
inline float F32At(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// q3_K's 6-bit scale j (0…15) from its 12 packed bytes.
inline int Q3KScale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace dsv4::ops::simd::ggml_basic_detail
#endif  // DSV4_OPS_SIMD_GGML_BASIC_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/ggml_basic_simd.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace gb = ggml_basic_detail;
using gb::kRows;

// One block of kRows rows, unpacked. w[r][k]: row r's integer weight of value
// k (with the sub-block scale for q2_K / q3_K / q5_K); mins[r][i]: the integer
// min that q8_K's bsums[i] meets (q2_K, q5_K); a, b: per-row f32 fields (d and
// m or dmin; ConvertScales); ls[j]: iq4_xs's f32 (ls − 32) of sub-block j per
// row.
template <class Fmt>
struct Decoded {
  alignas(64) int16_t w[kRows][Fmt::kBlock];
  alignas(32) int16_t mins[Fmt::kMins ? kRows : 1][16];
  alignas(16) float a[kRows];
  alignas(16) float b[kRows];
  alignas(16) float ls[Fmt::kSums][kRows];
};

#if HWY_TARGET != HWY_SCALAR
using DU8 = hn::Full128<uint8_t>;
using DI8 = hn::Full128<int8_t>;
using DF4 = hn::Full128<float>;
using DI4 = hn::Full128<int32_t>;
using VU8 = hn::Vec128<uint8_t>;
using VI8 = hn::Vec128<int8_t>;
using VF4 = hn::Vec128<float>;
using VI4 = hn::Vec128<int32_t>;

// The int16 vectors of the dot: at most 16 lanes, so that a vector never
// spans two 16-value sub-blocks.
using D16 = hn::CappedTag<int16_t, 16>;

// 16 int8 codes to 16 int16 at dst (times `scale`): one widening where D16
// holds 16 lanes, two halves where it holds 8.
template <class D = D16>  // a template: the branch not taken is not compiled
HWY_INLINE void StoreWide(VI8 v, int16_t* HWY_RESTRICT dst) {
  const D d16;
  if constexpr (hn::MaxLanes(D()) == 16) {
    hn::Store(hn::PromoteTo(d16, v), d16, dst);
  } else {
    const hn::Full64<int8_t> d8h;
    hn::Store(hn::PromoteTo(d16, hn::LowerHalf(v)), d16, dst);
    hn::Store(hn::PromoteTo(d16, hn::UpperHalf(d8h, v)), d16, dst + 8);
  }
}
template <class D = D16>
HWY_INLINE void StoreWideScaled(VI8 v, int scale, int16_t* HWY_RESTRICT dst) {
  const D d16;
  const auto s = hn::Set(d16, static_cast<int16_t>(scale));
  if constexpr (hn::MaxLanes(D()) == 16) {
    hn::Store(hn::Mul(hn::PromoteTo(d16, v), s), d16, dst);
  } else {
    const hn::Full64<int8_t> d8h;
    hn::Store(hn::Mul(hn::PromoteTo(d16, hn::LowerHalf(v)), s), d16, dst);
    hn::Store(hn::Mul(hn::PromoteTo(d16, hn::UpperHalf(d8h, v)), s), d16, dst + 8);
  }
}

HWY_INLINE VU8 LowNibbles(VU8 v) { return hn::And(v, hn::Set(DU8(), 0x0F)); }
HWY_INLINE VU8 HighNibbles(VU8 v) { return hn::ShiftRight<4>(v); }

// 0x10 in byte i where bit 16·half + i of a q5_0 / q5_1 block's 32-bit qh is set.
HWY_INLINE VU8 FifthBits(const uint8_t* qh, int half) {
  const DU8 du8;
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const VU8 src = hn::BitCast(du8, hn::Set(hn::Full128<uint32_t>(), bits));
  const VU8 bytes = hn::TableLookupBytes(src, hn::Load(du8, gb::kQhByte[half]));
  return hn::IfThenElseZero(hn::TestBit(bytes, hn::Load(du8, gb::kQhBit)), hn::Set(du8, 0x10));
}

// The iq4_nl levels of 16 4-bit indices.
HWY_INLINE VI8 Iq4nl(VU8 idx) {
  const DI8 d;
  return hn::TableLookupBytes(hn::Load(d, gb::kIq4nlTable), hn::BitCast(d, idx));
}

// ---- the types: block layout, unpacking, float steps (lanes = rows) ----
//
// Each: kBlock values in kBytes bytes, f16 scale at byte kDAt and min (or
// dmin) at kMAt (−1: none); activation blocks of kActBytes with their codes
// at kActQs; kSums integer sums per block; kMins: a bsums · mins sum too;
// kPairs: two tokens per pass. Decode unpacks row r's block into o; Step is
// the block's float steps on the 4 rows' lanes.

struct Q4_0Fmt {
  static constexpr int kBlock = 32, kBytes = sizeof(BlockQ4_0), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8_0), kActQs = offsetof(BlockQ8_0, qs);
  static constexpr int kDAt = offsetof(BlockQ4_0, d), kMAt = -1;
  static constexpr bool kMins = false, kPairs = true;
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q4_0Fmt>& o) {
    const VU8 v = hn::LoadU(DU8(), blk + offsetof(BlockQ4_0, qs));
    const VI8 eight = hn::Set(DI8(), 8);
    StoreWide(hn::Sub(hn::BitCast(DI8(), LowNibbles(v)), eight), o.w[r]);
    StoreWide(hn::Sub(hn::BitCast(DI8(), HighNibbles(v)), eight), o.w[r] + 16);
  }
  // acc + (isum·dw)·dx
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q4_0Fmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    const DF4 df;
    const VF4 p = hn::Mul(hn::ConvertTo(df, sums[0]), hn::Load(df, o.a));
    return hn::Add(acc, hn::Mul(p, hn::Set(df, xf[0])));
  }
};

// q4_1 / q5_1 against q8_1: acc + ((dw·dx)·isum + m·s)
template <class Fmt>
HWY_INLINE VF4 StepWithMin(VF4 acc, const Decoded<Fmt>& o, const VI4* sums, const float* xf) {
  const DF4 df;
  const VF4 dd = hn::Mul(hn::Load(df, o.a), hn::Set(df, xf[0]));
  const VF4 ms = hn::Mul(hn::Load(df, o.b), hn::Set(df, xf[1]));
  return hn::Add(acc, hn::Add(hn::Mul(dd, hn::ConvertTo(df, sums[0])), ms));
}

struct Q4_1Fmt {
  static constexpr int kBlock = 32, kBytes = sizeof(BlockQ4_1), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8_1), kActQs = offsetof(BlockQ8_1, qs);
  static constexpr int kDAt = offsetof(BlockQ4_1, d), kMAt = offsetof(BlockQ4_1, m);
  static constexpr bool kMins = false, kPairs = true;
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q4_1Fmt>& o) {
    const VU8 v = hn::LoadU(DU8(), blk + offsetof(BlockQ4_1, qs));
    StoreWide(hn::BitCast(DI8(), LowNibbles(v)), o.w[r]);
    StoreWide(hn::BitCast(DI8(), HighNibbles(v)), o.w[r] + 16);
  }
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q4_1Fmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    return StepWithMin(acc, o, sums, xf);
  }
};

struct Q5_0Fmt {
  static constexpr int kBlock = 32, kBytes = sizeof(BlockQ5_0), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8_0), kActQs = offsetof(BlockQ8_0, qs);
  static constexpr int kDAt = offsetof(BlockQ5_0, d), kMAt = -1;
  static constexpr bool kMins = false, kPairs = true;
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q5_0Fmt>& o) {
    const uint8_t* qh = blk + offsetof(BlockQ5_0, qh);
    const VU8 v = hn::LoadU(DU8(), blk + offsetof(BlockQ5_0, qs));
    const VI8 sixteen = hn::Set(DI8(), 16);
    const VU8 lo = hn::Or(LowNibbles(v), FifthBits(qh, 0));
    const VU8 hi = hn::Or(HighNibbles(v), FifthBits(qh, 1));
    StoreWide(hn::Sub(hn::BitCast(DI8(), lo), sixteen), o.w[r]);
    StoreWide(hn::Sub(hn::BitCast(DI8(), hi), sixteen), o.w[r] + 16);
  }
  // acc + (dw·dx)·isum
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q5_0Fmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    const DF4 df;
    const VF4 dd = hn::Mul(hn::Load(df, o.a), hn::Set(df, xf[0]));
    return hn::Add(acc, hn::Mul(dd, hn::ConvertTo(df, sums[0])));
  }
};

struct Q5_1Fmt {
  static constexpr int kBlock = 32, kBytes = sizeof(BlockQ5_1), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8_1), kActQs = offsetof(BlockQ8_1, qs);
  static constexpr int kDAt = offsetof(BlockQ5_1, d), kMAt = offsetof(BlockQ5_1, m);
  static constexpr bool kMins = false, kPairs = true;
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q5_1Fmt>& o) {
    const uint8_t* qh = blk + offsetof(BlockQ5_1, qh);
    const VU8 v = hn::LoadU(DU8(), blk + offsetof(BlockQ5_1, qs));
    StoreWide(hn::BitCast(DI8(), hn::Or(LowNibbles(v), FifthBits(qh, 0))), o.w[r]);
    StoreWide(hn::BitCast(DI8(), hn::Or(HighNibbles(v), FifthBits(qh, 1))), o.w[r] + 16);
  }
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q5_1Fmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    return StepWithMin(acc, o, sums, xf);
  }
};

struct IQ4_NLFmt {
  static constexpr int kBlock = 32, kBytes = sizeof(BlockIQ4_NL), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8_0), kActQs = offsetof(BlockQ8_0, qs);
  static constexpr int kDAt = offsetof(BlockIQ4_NL, d), kMAt = -1;
  static constexpr bool kMins = false, kPairs = true;
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<IQ4_NLFmt>& o) {
    const VU8 v = hn::LoadU(DU8(), blk + offsetof(BlockIQ4_NL, qs));
    StoreWide(Iq4nl(LowNibbles(v)), o.w[r]);
    StoreWide(Iq4nl(HighNibbles(v)), o.w[r] + 16);
  }
  // acc + (dx·dw)·isum
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<IQ4_NLFmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    const DF4 df;
    const VF4 d = hn::Mul(hn::Set(df, xf[0]), hn::Load(df, o.a));
    return hn::Add(acc, hn::Mul(d, hn::ConvertTo(df, sums[0])));
  }
};

// The 2-bit field g (0…3) of 16 bytes.
template <int G>
HWY_INLINE VU8 Crumb(VU8 v) {
  return hn::And(hn::ShiftRight<2 * G>(v), hn::Set(DU8(), 3));
}

struct Q2_KFmt {
  static constexpr int kBlock = kQK_K, kBytes = sizeof(BlockQ2_K), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8K), kActQs = offsetof(BlockQ8K, qs);
  static constexpr int kDAt = offsetof(BlockQ2_K, d), kMAt = offsetof(BlockQ2_K, dmin);
  static constexpr bool kMins = true, kPairs = false;
  // Value k = 128h + 32g + 16·half + i: bits 2g, 2g+1 of qs[32h + 16·half + i],
  // sub-block k / 16.
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q2_KFmt>& o) {
    const uint8_t* sc = blk + offsetof(BlockQ2_K, scales);
    const uint8_t* qs = blk + offsetof(BlockQ2_K, qs);
    int16_t* w = o.w[r];
    for (int j = 0; j < 16; ++j) o.mins[r][j] = static_cast<int16_t>(sc[j] >> 4);
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        const VU8 v = hn::LoadU(DU8(), qs + 32 * h + 16 * half);
        const int k0 = 128 * h + 16 * half;
        StoreWideScaled(hn::BitCast(DI8(), Crumb<0>(v)), sc[k0 / 16] & 0xF, w + k0);
        StoreWideScaled(hn::BitCast(DI8(), Crumb<1>(v)), sc[k0 / 16 + 2] & 0xF, w + k0 + 32);
        StoreWideScaled(hn::BitCast(DI8(), Crumb<2>(v)), sc[k0 / 16 + 4] & 0xF, w + k0 + 64);
        StoreWideScaled(hn::BitCast(DI8(), Crumb<3>(v)), sc[k0 / 16 + 6] & 0xF, w + k0 + 96);
      }
    }
  }
  // acc + ((dx·dw)·isum − (dx·dmin)·summs)
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q2_KFmt>& o, const VI4* sums, VI4 summs,
                             const float* xf) {
    const DF4 df;
    const VF4 dx = hn::Set(df, xf[0]);
    const VF4 dall = hn::Mul(dx, hn::Load(df, o.a));
    const VF4 dmin = hn::Mul(dx, hn::Load(df, o.b));
    const VF4 t =
        hn::Sub(hn::Mul(dall, hn::ConvertTo(df, sums[0])), hn::Mul(dmin, hn::ConvertTo(df, summs)));
    return hn::Add(acc, t);
  }
};

struct Q3_KFmt {
  static constexpr int kBlock = kQK_K, kBytes = sizeof(BlockQ3_K), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8K), kActQs = offsetof(BlockQ8K, qs);
  static constexpr int kDAt = offsetof(BlockQ3_K, d), kMAt = -1;
  static constexpr bool kMins = false, kPairs = true;
  // Value k = 128h + 32g + 16·half + i: bits 2g, 2g+1 of qs[32h + 16·half + i],
  // minus 4 unless bit 4h + g of hmask[16·half + i]; sub-block k / 16.
  template <int G>
  static HWY_INLINE void Field(VU8 v, VU8 hm, int h, int scale, int16_t* dst) {
    const DU8 du8;
    const VU8 bit = hn::Set(du8, static_cast<uint8_t>(1u << (4 * h + G)));
    const VU8 four = hn::IfThenZeroElse(hn::TestBit(hm, bit), hn::Set(du8, 4));
    StoreWideScaled(hn::Sub(hn::BitCast(DI8(), Crumb<G>(v)), hn::BitCast(DI8(), four)), scale, dst);
  }
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q3_KFmt>& o) {
    const uint8_t* hmask = blk + offsetof(BlockQ3_K, hmask);
    const uint8_t* qs = blk + offsetof(BlockQ3_K, qs);
    const uint8_t* sc = blk + offsetof(BlockQ3_K, scales);
    int scale[16];
    for (int j = 0; j < 16; ++j) scale[j] = gb::Q3KScale(sc, j) - 32;
    int16_t* w = o.w[r];
    for (int half = 0; half < 2; ++half) {
      const VU8 hm = hn::LoadU(DU8(), hmask + 16 * half);
      for (int h = 0; h < 2; ++h) {
        const VU8 v = hn::LoadU(DU8(), qs + 32 * h + 16 * half);
        const int k0 = 128 * h + 16 * half;
        Field<0>(v, hm, h, scale[k0 / 16], w + k0);
        Field<1>(v, hm, h, scale[k0 / 16 + 2], w + k0 + 32);
        Field<2>(v, hm, h, scale[k0 / 16 + 4], w + k0 + 64);
        Field<3>(v, hm, h, scale[k0 / 16 + 6], w + k0 + 96);
      }
    }
  }
  // acc + (dw·dx)·isum
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q3_KFmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    const DF4 df;
    const VF4 d = hn::Mul(hn::Load(df, o.a), hn::Set(df, xf[0]));
    return hn::Add(acc, hn::Mul(d, hn::ConvertTo(df, sums[0])));
  }
};

struct Q5_KFmt {
  static constexpr int kBlock = kQK_K, kBytes = sizeof(BlockQ5_K), kSums = 1;
  static constexpr int kActBytes = sizeof(BlockQ8K), kActQs = offsetof(BlockQ8K, qs);
  static constexpr int kDAt = offsetof(BlockQ5_K, d), kMAt = offsetof(BlockQ5_K, dmin);
  static constexpr bool kMins = true, kPairs = false;
  // Value k = 32j + 16·half + i: nibble j % 2 of qs[32·(j / 2) + 16·half + i]
  // plus 16 where bit j of qh[16·half + i]; sub-block j.
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<Q5_KFmt>& o) {
    const DU8 du8;
    const uint8_t* qh = blk + offsetof(BlockQ5_K, qh);
    const uint8_t* qs = blk + offsetof(BlockQ5_K, qs);
    int scale[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      Q4KScaleMin(blk + offsetof(BlockQ5_K, scales), j, &sc, &m);
      scale[j] = sc;
      o.mins[r][2 * j] = o.mins[r][2 * j + 1] = m;
    }
    int16_t* w = o.w[r];
    const VU8 sixteen = hn::Set(du8, 0x10);
    for (int half = 0; half < 2; ++half) {
      const VU8 hb = hn::LoadU(du8, qh + 16 * half);
      for (int p = 0; p < 4; ++p) {
        const VU8 v = hn::LoadU(du8, qs + 32 * p + 16 * half);
        const VU8 bit_lo = hn::Set(du8, static_cast<uint8_t>(1u << (2 * p)));
        const VU8 bit_hi = hn::Set(du8, static_cast<uint8_t>(1u << (2 * p + 1)));
        const VU8 lo = hn::Or(LowNibbles(v), hn::IfThenElseZero(hn::TestBit(hb, bit_lo), sixteen));
        const VU8 hi = hn::Or(HighNibbles(v), hn::IfThenElseZero(hn::TestBit(hb, bit_hi), sixteen));
        StoreWideScaled(hn::BitCast(DI8(), lo), scale[2 * p], w + 64 * p + 16 * half);
        StoreWideScaled(hn::BitCast(DI8(), hi), scale[2 * p + 1], w + 64 * p + 32 + 16 * half);
      }
    }
  }
  // acc + (dw·dx)·isum, then acc − (dmin·dx)·imin
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<Q5_KFmt>& o, const VI4* sums, VI4 imin,
                             const float* xf) {
    const DF4 df;
    const VF4 dx = hn::Set(df, xf[0]);
    const VF4 d = hn::Mul(hn::Load(df, o.a), dx);
    const VF4 dmin = hn::Mul(hn::Load(df, o.b), dx);
    acc = hn::Add(acc, hn::Mul(d, hn::ConvertTo(df, sums[0])));
    return hn::Sub(acc, hn::Mul(dmin, hn::ConvertTo(df, imin)));
  }
};

struct IQ4_XSFmt {
  static constexpr int kBlock = kQK_K, kBytes = sizeof(BlockIQ4_XS), kSums = 8;
  static constexpr int kActBytes = sizeof(BlockQ8K), kActQs = offsetof(BlockQ8K, qs);
  static constexpr int kDAt = offsetof(BlockIQ4_XS, d), kMAt = -1;
  static constexpr bool kMins = false, kPairs = true;
  // Sub-block j (32 values): kv of the low then the high nibbles of qs[16j …].
  static HWY_INLINE void Decode(const uint8_t* blk, int r, Decoded<IQ4_XSFmt>& o) {
    uint16_t sh;
    std::memcpy(&sh, blk + offsetof(BlockIQ4_XS, scales_h), 2);
    const uint8_t* sl = blk + offsetof(BlockIQ4_XS, scales_l);
    const uint8_t* qs = blk + offsetof(BlockIQ4_XS, qs);
    int16_t* w = o.w[r];
    for (int j = 0; j < 8; ++j) {
      const int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
      o.ls[j][r] = static_cast<float>(ls - 32);
      const VU8 v = hn::LoadU(DU8(), qs + 16 * j);
      StoreWide(Iq4nl(LowNibbles(v)), w + 32 * j);
      StoreWide(Iq4nl(HighNibbles(v)), w + 32 * j + 16);
    }
  }
  // per sub-block j in order: acc + ((dw·dx)·(ls − 32))·isum_j
  static HWY_INLINE VF4 Step(VF4 acc, const Decoded<IQ4_XSFmt>& o, const VI4* sums, VI4,
                             const float* xf) {
    const DF4 df;
    const VF4 d4d8 = hn::Mul(hn::Load(df, o.a), hn::Set(df, xf[0]));
    for (int j = 0; j < 8; ++j) {
      const VF4 dl = hn::Mul(d4d8, hn::Load(df, o.ls[j]));
      acc = hn::Add(acc, hn::Mul(dl, hn::ConvertTo(df, sums[j])));
    }
    return acc;
  }
};

// The 4 blocks' f16 fields at byte `at` (read from the weights, not through
// a store) as 4 floats: F16C conversions where the target has them (exact, as
// F16ToF32), else F16ToF32 (whose Inf / NaN Highway's emulated conversion
// would not give).
HWY_INLINE void F16x4(const uint8_t* const* blk, int at, float* HWY_RESTRICT dst) {
#if HWY_TARGET < HWY_SSE4 && !defined(HWY_DISABLE_F16C)
  uint64_t bits = 0;
  for (int r = 0; r < kRows; ++r) {
    uint16_t h;
    std::memcpy(&h, blk[r] + at, 2);
    bits |= uint64_t{h} << (16 * r);
  }
  const DF4 df;
  const hn::Full64<hwy::float16_t> dh;
  hn::Store(hn::PromoteTo(df, hn::BitCast(dh, hn::Set(hn::Full64<uint64_t>(), bits))), df, dst);
#else
  for (int r = 0; r < kRows; ++r) dst[r] = gb::F16At(blk[r] + at);
#endif
}

// o.a, o.b from the 4 rows' blocks blk[r].
template <class Fmt>
HWY_INLINE void ConvertScales(const uint8_t* const* blk, Decoded<Fmt>& o) {
  F16x4(blk, Fmt::kDAt, o.a);
  if constexpr (Fmt::kMAt >= 0) F16x4(blk, Fmt::kMAt, o.b);
}

// ---- the shared block step ----

// [Σ v0, Σ v1, Σ v2, Σ v3]: each input's lanes summed into one lane (exact
// integer sums: any order).
template <class D32, class V>
HWY_INLINE VI4 Reduce4(D32 d, V v0, V v1, V v2, V v3) {
  const hn::Repartition<int64_t, D32> d64;
  // Per 128-bit block: [v0 0+2, v1 0+2, v0 1+3, v1 1+3] and the same for v2, v3.
  const V s01 = hn::Add(hn::InterleaveLower(d, v0, v1), hn::InterleaveUpper(d, v0, v1));
  const V s23 = hn::Add(hn::InterleaveLower(d, v2, v3), hn::InterleaveUpper(d, v2, v3));
  // Then [Σ v0, Σ v1, Σ v2, Σ v3] per block: 64-bit interleaves, 32-bit adds.
  const V lo =
      hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23)));
  const V hi =
      hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23)));
  const V s = hn::Add(lo, hi);
  if constexpr (hn::MaxLanes(d) == 8) {
    return hn::Add(hn::LowerHalf(s), hn::UpperHalf(hn::Half<D32>(), s));
  } else {
    static_assert(hn::MaxLanes(d) == 4);
    return s;
  }
}

// Σ_{k in [k0, k1)} w[r][k]·x_t[k] for the 4 rows and NT tokens (sharing the
// weight loads), each token's reduced to one vector: out[t].
template <class Fmt, int NT>
HWY_INLINE void RowSums(const int16_t (*w)[Fmt::kBlock], const int8_t* const* x, int k0, int k1,
                        VI4* out) {
  const D16 d16;
  const hn::Rebind<int8_t, D16> d8;
  const hn::RepartitionToWide<D16> d32;
  using V32 = hn::Vec<decltype(d32)>;
  constexpr int kN = static_cast<int>(hn::MaxLanes(d16));
  V32 a[NT][kRows], b[NT][kRows];
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < kRows; ++r) a[t][r] = b[t][r] = hn::Zero(d32);
  }
  for (int k = k0; k < k1; k += kN) {
    const auto w0 = hn::Load(d16, w[0] + k), w1 = hn::Load(d16, w[1] + k);
    const auto w2 = hn::Load(d16, w[2] + k), w3 = hn::Load(d16, w[3] + k);
    for (int t = 0; t < NT; ++t) {
      const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x[t] + k));
      a[t][0] = hn::ReorderWidenMulAccumulate(d32, w0, xv, a[t][0], b[t][0]);
      a[t][1] = hn::ReorderWidenMulAccumulate(d32, w1, xv, a[t][1], b[t][1]);
      a[t][2] = hn::ReorderWidenMulAccumulate(d32, w2, xv, a[t][2], b[t][2]);
      a[t][3] = hn::ReorderWidenMulAccumulate(d32, w3, xv, a[t][3], b[t][3]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = Reduce4(d32, hn::Add(a[t][0], b[t][0]), hn::Add(a[t][1], b[t][1]),
                     hn::Add(a[t][2], b[t][2]), hn::Add(a[t][3], b[t][3]));
  }
}

// Σ_i mins[r][i]·bsums[i] for the 4 rows (q2_K, q5_K).
HWY_INLINE VI4 MinSums(const int16_t (*mins)[16], const int16_t* bsums) {
  const D16 d16;
  const hn::RepartitionToWide<D16> d32;
  constexpr int kN = static_cast<int>(hn::MaxLanes(d16));
  auto a0 = hn::Zero(d32), a1 = hn::Zero(d32), a2 = hn::Zero(d32), a3 = hn::Zero(d32);
  auto b0 = hn::Zero(d32), b1 = hn::Zero(d32), b2 = hn::Zero(d32), b3 = hn::Zero(d32);
  for (int k = 0; k < 16; k += kN) {
    const auto xv = hn::LoadU(d16, bsums + k);
    a0 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, mins[0] + k), xv, a0, b0);
    a1 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, mins[1] + k), xv, a1, b1);
    a2 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, mins[2] + k), xv, a2, b2);
    a3 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, mins[3] + k), xv, a3, b3);
  }
  return Reduce4(d32, hn::Add(a0, b0), hn::Add(a1, b1), hn::Add(a2, b2), hn::Add(a3, b3));
}

// One block of the 4 rows against NT tokens' activation blocks xb[t], whose
// f32 scale fields are xf[t] (ActScales): acc[t] takes the block's float steps.
template <class Fmt, int NT>
HWY_INLINE void BlockStep(const Decoded<Fmt>& o, const uint8_t* const* xb, const float* const* xf,
                          VF4* acc) {
  const int8_t* x[NT];
  for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const int8_t*>(xb[t] + Fmt::kActQs);
  constexpr int kPer = Fmt::kBlock / Fmt::kSums;
  VI4 sums[Fmt::kSums][NT];
  for (int s = 0; s < Fmt::kSums; ++s) RowSums<Fmt, NT>(o.w, x, s * kPer, (s + 1) * kPer, sums[s]);
  for (int t = 0; t < NT; ++t) {
    VI4 mins = hn::Zero(DI4());
    if constexpr (Fmt::kMins) {
      // q8_K's bsums (292-byte blocks keep them 2-byte aligned).
      int16_t bsums[16];
      std::memcpy(bsums, xb[t] + offsetof(BlockQ8K, bsums), sizeof(bsums));
      mins = MinSums(o.mins, bsums);
    }
    VI4 st[Fmt::kSums];
    for (int s = 0; s < Fmt::kSums; ++s) st[s] = sums[s][t];
    acc[t] = Fmt::Step(acc[t], o, st, mins, xf[t]);
  }
}

// An activation block's scale fields as f32: {d, s} for q8_1, {d, 0} else.
template <class Fmt>
HWY_INLINE void ActScales(const uint8_t* xb, float* f) {
  f[1] = 0.0f;
  if constexpr (Fmt::kActBytes == sizeof(BlockQ8_0)) {
    f[0] = gb::F16At(xb + offsetof(BlockQ8_0, d));
  } else if constexpr (Fmt::kActBytes == sizeof(BlockQ8_1)) {
    f[0] = gb::F16At(xb + offsetof(BlockQ8_1, d));
    f[1] = gb::F16At(xb + offsetof(BlockQ8_1, s));
  } else {
    f[0] = gb::F32At(xb + offsetof(BlockQ8K, d));
  }
}

template <class Fmt>
void KernelT(const MatMulArgs& a, const void* xq_v) {
  const int64_t k_size = a.w.sizes[1], nb = k_size / Fmt::kBlock;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const int64_t x_bytes = nb * Fmt::kActBytes;
  const int64_t n_tokens = a.n_tokens;
  const auto* base = static_cast<const uint8_t*>(a.w.data);
  const auto* xq = static_cast<const uint8_t*>(xq_v);
  constexpr int64_t kChunk = gb::kChunkValues / Fmt::kBlock;  // blocks unpacked at a time
  const DF4 df;
  // Per thread: the unpacked chunk of 4 rows, the tokens' accumulators [T][4].
  thread_local std::vector<Decoded<Fmt>> buf;
  thread_local std::vector<float> accs;
  if (buf.size() < static_cast<size_t>(kChunk)) buf.resize(kChunk);
  thread_local std::vector<float> scales;  // [T][nb][2]: ActScales of every block
  if (accs.size() < static_cast<size_t>(kRows * n_tokens)) accs.resize(kRows * n_tokens);
  if (scales.size() < static_cast<size_t>(2 * n_tokens * nb)) scales.resize(2 * n_tokens * nb);
  for (int64_t i = 0; i < n_tokens * nb; ++i) {
    ActScales<Fmt>(xq + (i / nb) * x_bytes + (i % nb) * Fmt::kActBytes, scales.data() + 2 * i);
  }
  float* acc_base = accs.data();
  for (int64_t r0 = a.row_begin; r0 < a.row_end; r0 += kRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kRows, a.row_end - r0));
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = base + (r0 + std::min(r, nr - 1)) * row_bytes;
    std::fill_n(acc_base, kRows * n_tokens, 0.0f);
    for (int64_t c0 = 0; c0 < nb; c0 += kChunk) {
      const int64_t cn = std::min(kChunk, nb - c0);
      // The next chunk's bytes, while this one is unpacked and used.
      if (c0 + kChunk < nb) {
        const int64_t next_bytes = std::min(kChunk, nb - c0 - kChunk) * Fmt::kBytes;
        for (int r = 0; r < kRows; ++r) {
          const uint8_t* p = rows[r] + (c0 + kChunk) * Fmt::kBytes;
          for (int64_t off = 0; off < next_bytes; off += 64) hwy::Prefetch(p + off);
        }
      }
      for (int64_t b = 0; b < cn; ++b) {
        const uint8_t* blk[kRows];
        for (int r = 0; r < kRows; ++r) blk[r] = rows[r] + (c0 + b) * Fmt::kBytes;
        for (int r = 0; r < kRows; ++r) Fmt::Decode(blk[r], r, buf[b]);
        ConvertScales(blk, buf[b]);
      }
      const uint8_t* xc = xq + c0 * Fmt::kActBytes;
      const float* sc = scales.data() + 2 * c0;
      int64_t t = 0;
      for (; Fmt::kPairs && t + 2 <= n_tokens; t += 2) {
        VF4 acc[2] = {hn::LoadU(df, acc_base + kRows * t),
                      hn::LoadU(df, acc_base + kRows * (t + 1))};
        for (int64_t b = 0; b < cn; ++b) {
          const uint8_t* xb[2] = {xc + t * x_bytes + b * Fmt::kActBytes,
                                  xc + (t + 1) * x_bytes + b * Fmt::kActBytes};
          const float* xf[2] = {sc + 2 * (t * nb + b), sc + 2 * ((t + 1) * nb + b)};
          BlockStep<Fmt, 2>(buf[b], xb, xf, acc);
        }
        hn::StoreU(acc[0], df, acc_base + kRows * t);
        hn::StoreU(acc[1], df, acc_base + kRows * (t + 1));
      }
      for (; t < n_tokens; ++t) {
        VF4 acc[1] = {hn::LoadU(df, acc_base + kRows * t)};
        for (int64_t b = 0; b < cn; ++b) {
          const uint8_t* xb[1] = {xc + t * x_bytes + b * Fmt::kActBytes};
          const float* xf[1] = {sc + 2 * (t * nb + b)};
          BlockStep<Fmt, 1>(buf[b], xb, xf, acc);
        }
        hn::StoreU(acc[0], df, acc_base + kRows * t);
      }
    }
    float* out = a.out + (r0 - a.row_begin);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int r = 0; r < nr; ++r) out[t * a.out_stride + r] = acc_base[kRows * t + r];
    }
  }
}

void GgmlQ4_0(const MatMulArgs& a, const void* xq) { KernelT<Q4_0Fmt>(a, xq); }
void GgmlQ4_1(const MatMulArgs& a, const void* xq) { KernelT<Q4_1Fmt>(a, xq); }
void GgmlQ5_0(const MatMulArgs& a, const void* xq) { KernelT<Q5_0Fmt>(a, xq); }
void GgmlQ5_1(const MatMulArgs& a, const void* xq) { KernelT<Q5_1Fmt>(a, xq); }
void GgmlIQ4_NL(const MatMulArgs& a, const void* xq) { KernelT<IQ4_NLFmt>(a, xq); }
void GgmlQ2_K(const MatMulArgs& a, const void* xq) { KernelT<Q2_KFmt>(a, xq); }
void GgmlQ3_K(const MatMulArgs& a, const void* xq) { KernelT<Q3_KFmt>(a, xq); }
void GgmlQ5_K(const MatMulArgs& a, const void* xq) { KernelT<Q5_KFmt>(a, xq); }
void GgmlIQ4_XS(const MatMulArgs& a, const void* xq) { KernelT<IQ4_XSFmt>(a, xq); }

#else  // HWY_TARGET == HWY_SCALAR: one lane, no vectors of 4; the ref itself.

void RefKernel(DType t, const MatMulArgs& a, const void* xq_v) {
  const int64_t k_size = a.w.sizes[1];
  const int64_t row_bytes = DTypeBytes(t, a.w.strides[0]);
  const int64_t x_bytes = ref::ActivationBytes(ref::ActivationFormat(t), k_size);
  const auto* xq = static_cast<const uint8_t*>(xq_v);
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w.data) + n * row_bytes;
    for (int64_t t_i = 0; t_i < a.n_tokens; ++t_i) {
      a.out[t_i * a.out_stride + (n - a.row_begin)] =
          ref::DotBasicQ8(t, row, xq + t_i * x_bytes, k_size);
    }
  }
}

void GgmlQ4_0(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ4_0, a, xq); }
void GgmlQ4_1(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ4_1, a, xq); }
void GgmlQ5_0(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ5_0, a, xq); }
void GgmlQ5_1(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ5_1, a, xq); }
void GgmlIQ4_NL(const MatMulArgs& a, const void* xq) { RefKernel(DType::kIQ4_NL, a, xq); }
void GgmlQ2_K(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ2_K, a, xq); }
void GgmlQ3_K(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ3_K, a, xq); }
void GgmlQ5_K(const MatMulArgs& a, const void* xq) { RefKernel(DType::kQ5_K, a, xq); }
void GgmlIQ4_XS(const MatMulArgs& a, const void* xq) { RefKernel(DType::kIQ4_XS, a, xq); }

#endif  // HWY_TARGET != HWY_SCALAR

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(GgmlQ4_0);
HWY_EXPORT(GgmlQ4_1);
HWY_EXPORT(GgmlQ5_0);
HWY_EXPORT(GgmlQ5_1);
HWY_EXPORT(GgmlIQ4_NL);
HWY_EXPORT(GgmlQ2_K);
HWY_EXPORT(GgmlQ3_K);
HWY_EXPORT(GgmlQ5_K);
HWY_EXPORT(GgmlIQ4_XS);

GgmlQ8Fn GgmlBasicQ8Kernel(DType w_dtype) {
  ChooseTarget();
  switch (w_dtype) {
    case DType::kQ4_0:
      return HWY_DYNAMIC_DISPATCH(GgmlQ4_0);
    case DType::kQ4_1:
      return HWY_DYNAMIC_DISPATCH(GgmlQ4_1);
    case DType::kQ5_0:
      return HWY_DYNAMIC_DISPATCH(GgmlQ5_0);
    case DType::kQ5_1:
      return HWY_DYNAMIC_DISPATCH(GgmlQ5_1);
    case DType::kIQ4_NL:
      return HWY_DYNAMIC_DISPATCH(GgmlIQ4_NL);
    case DType::kQ2_K:
      return HWY_DYNAMIC_DISPATCH(GgmlQ2_K);
    case DType::kQ3_K:
      return HWY_DYNAMIC_DISPATCH(GgmlQ3_K);
    case DType::kQ5_K:
      return HWY_DYNAMIC_DISPATCH(GgmlQ5_K);
    case DType::kIQ4_XS:
      return HWY_DYNAMIC_DISPATCH(GgmlIQ4_XS);
    default:
      return nullptr;
  }
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
