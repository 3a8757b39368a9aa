// ops/simd matmul kernels: one copy per Highway target (foreach_target), picked
// at run time (HWY_DYNAMIC_DISPATCH). Weight formats: f32, f16, bf16, GGUF q8_0,
// FP8 e4m3 with 128×128 or 32×32 block scales, FP4 e2m1 with per-32 block scales.
//
// Two paths per format, chosen by the number of tokens:
//   - matvec (T = 1, decode): four weight rows at a time, each weight vector
//     decoded in registers, scaled by its block scale and multiplied into one
//     accumulator per row.
//   - tiles (T ≥ 2, prefill), cache-blocked: panels of 32 rows × 768 inputs
//     decoded into a per-thread buffer (L2; f16 instead read in place and
//     converted in the loop), then micro-tiles of 4 rows × 6 tokens (2 on
//     16-register targets) with one vector accumulator each, carried across
//     the K-blocks in a per-thread buffer; the decode cost is shared by up to
//     128 tokens and each token's x is reused by 32 rows.
// Both sum every output in the same order, so they agree bit for bit.
//
// Decoding in registers (exact for every finite value): a small float format
// with e exponent bits and m mantissa bits is moved into the top of an f32's
// exponent/mantissa fields and multiplied by 2^(127 − bias); that maps both
// normal and subnormal codes to their value (FP8 NaN codes, which the
// checkpoints never hold, decode as ±480 instead of NaN).
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_MATMUL_SIMD_ONCE_
#define DSV4_OPS_SIMD_MATMUL_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

namespace dsv4::ops::simd::detail {

inline constexpr int64_t kFp8Block = 128;         // FP8: 128×128 weights share a scale
inline constexpr int64_t kFp8SmallBlock = 32;     // or 32×32 (DeepSeek-V4.1-Flash)
inline constexpr int64_t kFp4Block = 32;          // FP4: 32 inputs of a row share a scale
inline constexpr int64_t kQ8Block = 32;           // GGUF q8_0 block
inline constexpr int64_t kMaxScaleBlocks = 4096;  // scale blocks per row on the stack
inline constexpr int64_t kTileMinTokens = 2;      // from here on, the tile path

// Bytes from one weight row to the next (strides are in elements).
inline int64_t RowBytes(const TensorView& w) { return DTypeBytes(w.dtype, w.strides[0]); }

// scale[row, 0..count) as f32 into dst; one dtype switch per row.
inline void ConvertScaleRow(const TensorView& scale, int64_t row, int64_t count, float* dst) {
  CHECK(count <= kMaxScaleBlocks, "matmul: %lld scale blocks per row exceed %lld",
        static_cast<long long>(count), static_cast<long long>(kMaxScaleBlocks));
  const uint8_t* base = static_cast<const uint8_t*>(scale.data);
  const int64_t s0 = scale.strides[0], s1 = scale.strides[1];
  switch (scale.dtype) {
    case DType::kE8m0:
      for (int64_t i = 0; i < count; ++i) dst[i] = E8m0ToF32(base[row * s0 + i * s1]);
      return;
    case DType::kF32:
      for (int64_t i = 0; i < count; ++i) std::memcpy(&dst[i], base + 4 * (row * s0 + i * s1), 4);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, base + 2 * (row * s0 + i * s1), 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    default:
      CHECK(false, "matmul: block scale must be e8m0, f32 or bf16, got %s",
            scale.ShapeString().c_str());
  }
}

// q8_0 keeps its f16 scale at the start of each 34-byte block.
inline void Q8ScaleRow(const uint8_t* row, int64_t count, float* dst) {
  CHECK(count <= kMaxScaleBlocks, "matmul: %lld q8_0 blocks per row exceed %lld",
        static_cast<long long>(count), static_cast<long long>(kMaxScaleBlocks));
  for (int64_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, row + i * static_cast<int64_t>(sizeof(BlockQ8_0)), 2);
    dst[i] = F16ToF32(h);
  }
}

inline float LoadF32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

}  // namespace dsv4::ops::simd::detail
#endif  // DSV4_OPS_SIMD_MATMUL_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/matmul_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;

// ---------------------------------------------------------------------------
// Weight formats. Weights of a row are addressed from Ptr(row, k0), with k0 a
// multiple of the decode step (for block formats: the start of a block);
// Decode(d, p, j, v0, v1) gives the values of inputs k0 + j … :
//   kPairs = false: v0 = inputs [j, j + lanes).
//   kPairs = true:  v0 = inputs j, j+2, …; v1 = j+1, j+3, … over 2·lanes
//   kWide = true:   v0 = inputs [j, j + lanes), v1 = [j + lanes, j + 2·lanes)
//                   (one decode of 2·lanes inputs; every lane still sums its
//                   inputs in k order, as with one vector per step)
//                   inputs (FP4: the low and high nibbles of lanes bytes).
// Scalar(row, k) is one value for tails. The decoded value times kScaleAdjust
// (a power of two, folded into the block scale) is the stored number.
// ---------------------------------------------------------------------------

struct F32Fmt {
  static constexpr int64_t kBlock = 0;  // no scales
  static constexpr bool kPairs = false;
  static constexpr bool kWide = false;
  static constexpr float kScaleAdjust = 1.0f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) { return row + 4 * k0; }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& /*v1*/) {
    v0 = hn::LoadU(d, reinterpret_cast<const float*>(p) + j);
  }
  static float Scalar(const uint8_t* row, int64_t k) { return detail::LoadF32(row + 4 * k); }
};

// bf16 as pairs: one 32-bit load holds inputs 2i (low half) and 2i + 1 (high
// half); a shift and a mask make both f32 (two ops per 2·lanes weights, no
// widening load).
struct Bf16Fmt {
  static constexpr int64_t kBlock = 0;
  static constexpr bool kPairs = true;
  static constexpr bool kWide = false;
  static constexpr float kScaleAdjust = 1.0f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) { return row + 2 * k0; }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& v1) {
    const DU32 du;
    const auto u = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p + 2 * j));
    v0 = hn::BitCast(d, hn::ShiftLeft<16>(u));
    v1 = hn::BitCast(d, hn::And(u, hn::Set(du, 0xffff0000u)));
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    return Bf16ToF32(detail::LoadU16(row + 2 * k));
  }
};

struct F16Fmt {
  static constexpr int64_t kBlock = 0;
  static constexpr bool kPairs = false;
  static constexpr bool kWide = false;
  static constexpr float kScaleAdjust = 1.0f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) { return row + 2 * k0; }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& /*v1*/) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    v0 = hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + j));
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    return F16ToF32(detail::LoadU16(row + 2 * k));
  }
};

// e4m3 → f16 by bit moves (s.eeee.mmm → s.0eeee.mmm0000000 is the same number
// × 2^-8, subnormals included), then the hardware f16 → f32 conversion. No f32
// subnormal is ever formed, so no denormal-operand slow path.
// On AVX-512 the bit moves run on 32 16-bit lanes at once (kWide): one
// widening load, three bit ops and two f16 → f32 conversions per 32 weights.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kFp8Wide = true;
#else
constexpr bool kFp8Wide = false;
#endif

// kB: the weight tile a scale covers (kB × kB), 128 or 32.
template <int64_t kB>
struct Fp8FmtB {
  static constexpr int64_t kBlock = kB;
  static constexpr bool kPairs = false;
  static constexpr bool kWide = kFp8Wide;
  static constexpr float kScaleAdjust = 256.0f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) { return row + k0; }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& v1) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if constexpr (kWide) {
      const hn::Repartition<int16_t, DF> di16;  // 2·lanes 16-bit lanes
      const hn::Rebind<uint8_t, decltype(di16)> d8;
      const hn::Rebind<uint16_t, decltype(di16)> du16;
      const hn::Half<decltype(di16)> di16h;
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto b = hn::PromoteTo(du16, hn::LoadU(d8, p + j));
      auto h = hn::ShiftRight<1>(hn::BitCast(di16, hn::ShiftLeft<8>(b)));
      h = hn::And(h, hn::Set(di16, static_cast<int16_t>(0xBFFF)));
      v0 = hn::PromoteTo(d, hn::BitCast(dh, hn::LowerHalf(di16h, h)));
      v1 = hn::PromoteTo(d, hn::BitCast(dh, hn::UpperHalf(di16h, h)));
      return;
    }
#endif
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<int16_t, DF> di16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto b = hn::PromoteTo(du16, hn::LoadU(d8, p + j));
    // b << 8, arithmetic >> 1: sign in bits 15 and 14, e and m in 13..7.
    auto h = hn::ShiftRight<1>(hn::BitCast(di16, hn::ShiftLeft<8>(b)));
    h = hn::And(h, hn::Set(di16, static_cast<int16_t>(0xBFFF)));
    v0 = hn::PromoteTo(d, hn::BitCast(dh, h));
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    return Fp8E4m3ToF32(row[k]) * (1.0f / kScaleAdjust);
  }
};
using Fp8Fmt = Fp8FmtB<detail::kFp8Block>;
using Fp8SmallFmt = Fp8FmtB<detail::kFp8SmallBlock>;
template <class Fmt>
inline constexpr bool kIsFp8 = false;
template <int64_t kB>
inline constexpr bool kIsFp8<Fp8FmtB<kB>> = true;

// e2m1 nibbles through a 16-entry table of 2·value: a lane permute on AVX-512
// (16 f32 lanes), a byte shuffle elsewhere, a scalar table on HWY_SCALAR.
alignas(64) constexpr float kFp4Times2F32[16] = {0,     1,  2,  3,  4,  6,  8,  12,
                                                 -0.0f, -1, -2, -3, -4, -6, -8, -12};
alignas(16) constexpr int8_t kFp4Times2I8[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};

struct Fp4Fmt {
  static constexpr int64_t kBlock = detail::kFp4Block;
  static constexpr bool kPairs = true;
  static constexpr bool kWide = false;
  static constexpr float kScaleAdjust = 0.5f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) { return row + k0 / 2; }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& v1) {
#if HWY_TARGET == HWY_SCALAR
    const uint8_t byte = p[j / 2];
    v0 = hn::Set(d, kFp4Times2F32[byte & 0xf]);
    v1 = hn::Set(d, kFp4Times2F32[byte >> 4]);
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const hn::Rebind<uint8_t, DF> d8;
    const DU32 du;
    const auto b = hn::PromoteTo(du, hn::LoadU(d8, p + j / 2));
    const VF table = hn::Load(d, kFp4Times2F32);
    v0 = hn::TableLookupLanes(table, hn::IndicesFromVec(d, hn::And(b, hn::Set(du, 0xfu))));
    v1 = hn::TableLookupLanes(table, hn::IndicesFromVec(d, hn::ShiftRight<4>(b)));
#else
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<int8_t, DF> di8;
    const hn::Full128<int8_t> dtab;
    const DI32 di;
    const auto b = hn::LoadU(d8, p + j / 2);
    const auto table = hn::Load(dtab, kFp4Times2I8);
    const auto lo = hn::BitCast(di8, hn::And(b, hn::Set(d8, 0x0f)));
    const auto hi = hn::BitCast(di8, hn::ShiftRight<4>(b));
    v0 = hn::ConvertTo(d, hn::PromoteTo(di, hn::TableLookupBytes(table, lo)));
    v1 = hn::ConvertTo(d, hn::PromoteTo(di, hn::TableLookupBytes(table, hi)));
#endif
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    const uint8_t byte = row[k / 2];
    return kFp4Times2F32[(k & 1) ? (byte >> 4) : (byte & 0xf)];
  }
};

struct Q8Fmt {
  static constexpr int64_t kBlock = detail::kQ8Block;
  static constexpr bool kPairs = false;
  static constexpr bool kWide = false;
  static constexpr float kScaleAdjust = 1.0f;
  static HWY_INLINE const uint8_t* Ptr(const uint8_t* row, int64_t k0) {
    return row + (k0 / 32) * static_cast<int64_t>(sizeof(BlockQ8_0)) + 2;
  }
  static HWY_INLINE void Decode(DF d, const uint8_t* p, int64_t j, VF& v0, VF& /*v1*/) {
    const hn::Rebind<int8_t, DF> d8;
    const DI32 di;
    v0 = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p) + j)));
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    return static_cast<float>(static_cast<int8_t>(Ptr(row, k / 32 * 32)[k % 32]));
  }
};

// Per-row block scales (times the format's kScaleAdjust) for the rows a kernel
// works on; dense formats have none.
template <class Fmt>
HWY_INLINE const float* RowScales(const MatMulArgs& a, int64_t n, const uint8_t* row, float* buf) {
  const int64_t k_size = a.w.sizes[1];
  int64_t count = 0;
  if constexpr (kIsFp8<Fmt>) {
    count = (k_size + Fmt::kBlock - 1) / Fmt::kBlock;
    detail::ConvertScaleRow(a.scale, n / Fmt::kBlock, count, buf);
  } else if constexpr (std::is_same_v<Fmt, Fp4Fmt>) {
    count = k_size / detail::kFp4Block;
    if (a.scale.dtype == DType::kE8m0 && a.scale.strides[1] == 1) {
      // The common case, vectorised (a scale per 32 weights is no small part
      // of the FP4 matvec's work): 2^(e − 127) · kScaleAdjust, as E8m0ToF32.
      CHECK(count <= detail::kMaxScaleBlocks, "matmul: %lld scale blocks per row exceed %lld",
            static_cast<long long>(count), static_cast<long long>(detail::kMaxScaleBlocks));
      const DF d;
      const DU32 du;
      const hn::Rebind<uint8_t, DF> d8;
      const int64_t L = static_cast<int64_t>(hn::Lanes(d));
      const uint8_t* src = static_cast<const uint8_t*>(a.scale.data) + n * a.scale.strides[0];
      const VF adjust = hn::Set(d, Fmt::kScaleAdjust);
      const VF tiny = hn::BitCast(d, hn::Set(du, 0x00400000u));  // e = 0: 2^-127
      const VF nan = hn::Set(d, std::numeric_limits<float>::quiet_NaN());
      int64_t i = 0;
      for (; i + L <= count; i += L) {
        const auto e = hn::PromoteTo(du, hn::LoadU(d8, src + i));
        VF v = hn::BitCast(d, hn::ShiftLeft<23>(e));
        v = hn::IfThenElse(hn::RebindMask(d, hn::Eq(e, hn::Zero(du))), tiny, v);
        v = hn::IfThenElse(hn::RebindMask(d, hn::Eq(e, hn::Set(du, 255u))), nan, v);
        hn::StoreU(hn::Mul(v, adjust), d, buf + i);
      }
      for (; i < count; ++i) buf[i] = E8m0ToF32(src[i]) * Fmt::kScaleAdjust;
      return buf;
    }
    detail::ConvertScaleRow(a.scale, n, count, buf);
  } else if constexpr (std::is_same_v<Fmt, Q8Fmt>) {
    count = k_size / detail::kQ8Block;
    detail::Q8ScaleRow(row, count, buf);
  } else {
    return nullptr;
  }
  if constexpr (Fmt::kScaleAdjust != 1.0f) {
    for (int64_t i = 0; i < count; ++i) buf[i] *= Fmt::kScaleAdjust;  // exact: a power of two
  }
  return buf;
}

// Whether one Decode yields two vectors (pairs or wide).
template <class Fmt>
inline constexpr bool kTwo = Fmt::kPairs || Fmt::kWide;

// Inputs consumed by one Decode.
HWY_INLINE int64_t StepOf(DF d, bool two) {
  return static_cast<int64_t>(hn::Lanes(d)) * (two ? 2 : 1);
}

// x at k as the Decode of Fmt lays weights out.
template <class Fmt>
HWY_INLINE void LoadX(DF d, const float* x, int64_t k, VF& x0, VF& x1) {
  if constexpr (Fmt::kPairs) {
    hn::LoadInterleaved2(d, x + k, x0, x1);
  } else if constexpr (Fmt::kWide) {
    x0 = hn::LoadU(d, x + k);
    x1 = hn::LoadU(d, x + k + hn::Lanes(d));
  } else {
    x0 = hn::LoadU(d, x + k);
  }
}

template <class Fmt>
HWY_INLINE float ScalarScaled(const uint8_t* row, const float* scales, int64_t k) {
  float v = Fmt::Scalar(row, k);
  if constexpr (Fmt::kBlock > 0) v *= scales[k / Fmt::kBlock];
  return v;
}

// Scaled decoding, block by block: BlockState(scale) once per block and row,
// then DecodeScaled per step. Generic: decode, then multiply by the scale. FP4
// on AVX-512 instead scales its 16-entry table once per block, so the lane
// permute yields scaled weights (the same products: 2v · (s/2) = v · s).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kFp4ScaledTable = true;
#else
constexpr bool kFp4ScaledTable = false;
#endif

template <class Fmt>
HWY_INLINE VF BlockState(DF d, float scale) {
  if constexpr (std::is_same_v<Fmt, Fp4Fmt> && kFp4ScaledTable) {
    return hn::Mul(hn::Load(d, kFp4Times2F32), hn::Set(d, scale));
  } else {
    return hn::Set(d, scale);
  }
}

template <class Fmt>
HWY_INLINE void DecodeScaled(DF d, const uint8_t* p, int64_t j, VF state, VF& v0, VF& v1) {
  if constexpr (Fmt::kBlock == 0) {
    Fmt::Decode(d, p, j, v0, v1);
  } else if constexpr (std::is_same_v<Fmt, Fp4Fmt> && kFp4ScaledTable) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const hn::Rebind<uint8_t, DF> d8;
    const DU32 du;
    const auto b = hn::PromoteTo(du, hn::LoadU(d8, p + j / 2));
    // vpermps reads only the low 4 bits of each index: no mask for the low nibble.
    v0 = VF{_mm512_permutexvar_ps(b.raw, state.raw)};
    v1 = VF{_mm512_permutexvar_ps(hn::ShiftRight<4>(b).raw, state.raw)};
#endif
  } else {
    Fmt::Decode(d, p, j, v0, v1);
    v0 = hn::Mul(v0, state);
    if constexpr (kTwo<Fmt>) v1 = hn::Mul(v1, state);
  }
}

HWY_INLINE VF Fma2(bool pairs, VF w0, VF w1, VF x0, VF x1, VF acc) {
  acc = hn::MulAdd(w0, x0, acc);
  if (pairs) acc = hn::MulAdd(w1, x1, acc);
  return acc;
}

// Every output is summed in one fixed order, whichever path computes it:
// lane j of one accumulator takes (value · scale) · x of the inputs at j (mod
// the step) in k order over the vector part of K (k < k_vec); then a
// horizontal sum; then the scalar tail in k order. The matvec path (decode)
// and the tile path (prefill) therefore give bit-identical results: a token's
// logits do not depend on how many tokens share its Forward call.
//
// Both walk K block by block (one scale per block and row; the whole vector
// part is one block for dense formats), decode steps within the block.
template <class Fmt>
HWY_INLINE int64_t BlockLen(int64_t k_vec) {
  return Fmt::kBlock > 0 ? Fmt::kBlock : std::max<int64_t>(k_vec, 1);
}

// ---------------------------------------------------------------------------
// Matvec path: 4 weight rows at a time, decoded in registers.
// ---------------------------------------------------------------------------

// Inputs ahead of the current block the matvec prefetches (block formats).
inline constexpr int64_t kPrefetchInputs = 512;
// Inputs per prefetch chunk of a dense format (a multiple of every step).
inline constexpr int64_t kDenseChunk = 256;

// next: the first of the next four rows (next_bytes of them), fetched along
// the way; nullptr for none.
template <class Fmt>
HWY_INLINE void Dot4(DF d, const uint8_t* const rows[4], const float* const scales[4],
                     const float* x, int64_t k_size, float out[4], const uint8_t* next,
                     int64_t next_bytes) {
  const int64_t step = StepOf(d, kTwo<Fmt>);
  const int64_t k_vec = k_size / step * step;
  // Dense formats walk K in chunks too, so that the prefetch runs ahead of them.
  const int64_t block = Fmt::kBlock > 0 ? Fmt::kBlock : kDenseChunk;
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (int64_t k0 = 0; k0 < k_vec; k0 += block) {
    const int64_t len = std::min(block, k_vec - k0);
    const uint8_t* p0 = Fmt::Ptr(rows[0], k0);
    const uint8_t* p1 = Fmt::Ptr(rows[1], k0);
    const uint8_t* p2 = Fmt::Ptr(rows[2], k0);
    const uint8_t* p3 = Fmt::Ptr(rows[3], k0);
    const float* xb = x + k0;
    // Four rows stream at once: fetch each a few hundred bytes ahead (the
    // hardware prefetcher alone leaves the quantised formats waiting).
    {
      // Byte distances measured on row 0 (offsets within a row, no pointer
      // arithmetic past it: Ptr() of k0 + kPrefetchInputs is only compared).
      const uintptr_t here = reinterpret_cast<uintptr_t>(p0);
      const int64_t ahead = static_cast<int64_t>(
          reinterpret_cast<uintptr_t>(Fmt::Ptr(rows[0], k0 + kPrefetchInputs)) - here);
      const int64_t bytes =
          static_cast<int64_t>(reinterpret_cast<uintptr_t>(Fmt::Ptr(rows[0], k0 + len)) - here);
      for (int64_t off = 0; off < bytes; off += 64) {
        __builtin_prefetch(p0 + ahead + off);
        __builtin_prefetch(p1 + ahead + off);
        __builtin_prefetch(p2 + ahead + off);
        __builtin_prefetch(p3 + ahead + off);
      }
      // The row-ahead fetches stop at each row's end, so the next four rows
      // would start cold: fetch them along too, as one sequential stream at
      // the same pace (non-temporal); `matmul_bench 2 256 3 FORMAT 2048
      // decode` shows the difference.
      if (next != nullptr) {
        const int64_t b0 = 4 * static_cast<int64_t>(here - reinterpret_cast<uintptr_t>(rows[0]));
        for (int64_t off = b0; off < std::min(next_bytes, b0 + 4 * bytes); off += 64) {
          __builtin_prefetch(next + off, 0, 0);
        }
      }
    }
    if constexpr (kIsFp8<Fmt>) {
      // The four rows share the block's scale (one 128- or 32-row block): scale x
      // instead of each row's weights. s is a power of two, so w·(x·s) and
      // (w·s)·x are the same exact product (the tile path's), barring
      // subnormals.
      const int64_t kb = k0 / Fmt::kBlock;
      const float sc = scales[0][kb];
      if (sc == scales[1][kb] && sc == scales[2][kb] && sc == scales[3][kb]) {
        const VF vs = hn::Set(d, sc);
        for (int64_t j = 0; j < len; j += step) {
          VF x0, x1, w0, w1;
          LoadX<Fmt>(d, xb, j, x0, x1);
          x0 = hn::Mul(x0, vs);
          if constexpr (kTwo<Fmt>) x1 = hn::Mul(x1, vs);
          Fmt::Decode(d, p0, j, w0, w1);
          a0 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a0);
          Fmt::Decode(d, p1, j, w0, w1);
          a1 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a1);
          Fmt::Decode(d, p2, j, w0, w1);
          a2 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a2);
          Fmt::Decode(d, p3, j, w0, w1);
          a3 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a3);
        }
        continue;
      }
    }
    VF s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
    if constexpr (Fmt::kBlock > 0) {
      const int64_t kb = k0 / Fmt::kBlock;
      s0 = BlockState<Fmt>(d, scales[0][kb]), s1 = BlockState<Fmt>(d, scales[1][kb]);
      s2 = BlockState<Fmt>(d, scales[2][kb]), s3 = BlockState<Fmt>(d, scales[3][kb]);
    }
    for (int64_t j = 0; j < len; j += step) {
      VF x0, x1, w0, w1;
      LoadX<Fmt>(d, xb, j, x0, x1);
      DecodeScaled<Fmt>(d, p0, j, s0, w0, w1);
      a0 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a0);
      DecodeScaled<Fmt>(d, p1, j, s1, w0, w1);
      a1 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a1);
      DecodeScaled<Fmt>(d, p2, j, s2, w0, w1);
      a2 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a2);
      DecodeScaled<Fmt>(d, p3, j, s3, w0, w1);
      a3 = Fma2(kTwo<Fmt>, w0, w1, x0, x1, a3);
    }
  }
  float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (int64_t k = k_vec; k < k_size; ++k) {
    t0 += ScalarScaled<Fmt>(rows[0], scales[0], k) * x[k];
    t1 += ScalarScaled<Fmt>(rows[1], scales[1], k) * x[k];
    t2 += ScalarScaled<Fmt>(rows[2], scales[2], k) * x[k];
    t3 += ScalarScaled<Fmt>(rows[3], scales[3], k) * x[k];
  }
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0)) + t0;
  out[1] = hn::GetLane(hn::SumOfLanes(d, a1)) + t1;
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2)) + t2;
  out[3] = hn::GetLane(hn::SumOfLanes(d, a3)) + t3;
}

template <class Fmt>
void MatVecRows(const MatMulArgs& a) {
  const DF d;
  const int64_t k_size = a.w.sizes[1];
  const int64_t row_bytes = detail::RowBytes(a.w);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  HWY_ALIGN float scale_buf[4][Fmt::kBlock > 0 ? detail::kMaxScaleBlocks : 1];
  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += 4) {
    const int64_t rows_here = std::min<int64_t>(4, a.row_end - n0);
    const uint8_t* rows[4];
    const float* scales[4];
    for (int r = 0; r < 4; ++r) {
      if (r < rows_here) {
        rows[r] = base + (n0 + r) * row_bytes;
        scales[r] = RowScales<Fmt>(a, n0 + r, rows[r], scale_buf[r]);
      } else {  // a short last group repeats its first row; results dropped
        rows[r] = rows[0];
        scales[r] = scales[0];
      }
    }
    // The next group of rows, fetched along (one stream ahead of the four).
    const int64_t next_rows = std::clamp<int64_t>(a.row_end - n0 - 4, 0, 4);
    const uint8_t* next = next_rows > 0 ? base + (n0 + 4) * row_bytes : nullptr;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      float res[4];
      Dot4<Fmt>(d, rows, scales, a.x + t * k_size, k_size, res, t == 0 ? next : nullptr,
                next_rows * row_bytes);
      float* o = a.out + t * a.out_stride + (n0 - a.row_begin);
      for (int64_t r = 0; r < rows_here; ++r) o[r] = res[r];
    }
  }
}

// ---------------------------------------------------------------------------
// Tile path (prefill), cache-blocked. Per call (a row range):
//   for each super-block of tokens (pairs formats: x deinterleaved once into
//   a per-thread buffer, at most kPackedXFloats; other formats: all tokens,
//   x read in place):
//     for each panel of up to kPanelRows rows (block scales converted once):
//       for each block of up to kTokenBlock tokens:
//         for each K-block of up to kKc (kDirect: kKcDirect) inputs of the
//         vector part (k < k_vec):
//           decode the panel's weights there, in decode step layout (L2;
//           f16, kDirect: none, the micro-tiles convert the rows in place);
//           for each tile of MT tokens, for each quad of the panel's rows: a
//           4 × MT micro-tile, one vector accumulator per (row, token),
//           carried from K-block to K-block in a per-thread buffer;
//         then each output = horizontal sum of its accumulator + scalar tail.
// A micro-tile's x (MT × kKc floats) stays in L1 while every row quad of the
// panel uses it, and the decoded weights stay in L2 for every token tile, so
// x streams through the caches once per panel rather than once per 4 rows,
// and each weight is decoded once per token block. Storing and reloading an
// accumulator is exact: every lane still takes its products in k order, so
// the results are the matvec path's bit for bit.
// ---------------------------------------------------------------------------

// Blocking. kKc is a multiple of every decode step (2·lanes ≤ 32) and scale
// block (32, 128), so K-blocks start on block boundaries; kPanelRows is a
// multiple of 4. Per thread on AVX-512: decoded weights kPanelRows·kKc floats
// (96 KiB, L2; a micro-tile's x, 6 × kKc floats, stays in L1), accumulators
// up to 132 tokens × kPanelRows vectors (264 KiB, L2), scales, and for pairs
// formats (FP4) up to kPackedXFloats of x (2 MiB). Longer K-blocks store and
// reload the accumulators less often.
// Tuned with `matmul_bench T 8 5 FMT 2048 prefill:128:5632`, alternated:
// 16-row panels or 128-input K-blocks cost more; K-blocks of 512 to 896
// measure alike, 1024 and more worse (the 4 × 6 tile's x must stay in a
// 32 KiB L1); deinterleaving FP4's x once per panel instead of once per
// super-block costs much more; 64-row panels are no better.
inline constexpr int64_t kPanelRows = 32;
inline constexpr int64_t kKc = 768;
// K-blocks of the formats read in place (kDirect, below): no decoded panel
// to keep in L2, only a quad's rows and the micro-tile's x in L1.
inline constexpr int64_t kKcDirect = 1024;
inline constexpr int64_t kTokenBlock = 128;
inline constexpr int64_t kPackedXFloats = int64_t{1} << 19;
// Floats of padding after each deinterleaved x row, so that rows K = 2^n
// apart do not share L1 sets.
inline constexpr int64_t kPackedXPad = 16;

// Tokens per micro-tile: 4 rows × 6 tokens (24 accumulators, 4 weight
// vectors, one x vector: 10 loads per 24 FMAs) fit the 32 registers of
// AVX-512 (and NEON/SVE); x86 targets with 16 registers take 2 tokens.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kTileTokens = 2;
#else
constexpr int kTileTokens = 6;
#endif

// Per-thread scratch of the tile path (floats); grows to the largest need
// seen, so steady-state calls do not allocate.
std::vector<float>& TileBuffer() {
  thread_local std::vector<float> buf;
  return buf;
}

// One token's 4 accumulators, named c<t>0 … c<t>3 (plain variables, not an
// array: scalable vectors cannot form arrays, and registers are the point).
#define DSV4_TILE_ACC(t) VF c##t##0 = z, c##t##1 = z, c##t##2 = z, c##t##3 = z
#define DSV4_TILE_LOAD(t)                                    \
  do {                                                       \
    if constexpr (MT > t) {                                  \
      if (!first) {                                          \
        c##t##0 = hn::Load(d, acc + t * acc_stride);         \
        c##t##1 = hn::Load(d, acc + t * acc_stride + N);     \
        c##t##2 = hn::Load(d, acc + t * acc_stride + 2 * N); \
        c##t##3 = hn::Load(d, acc + t * acc_stride + 3 * N); \
      }                                                      \
    }                                                        \
  } while (0)
#define DSV4_TILE_FMA(t)                                \
  do {                                                  \
    if constexpr (MT > t) {                             \
      const VF xv = hn::LoadU(d, x + t * x_stride + k); \
      c##t##0 = hn::MulAdd(w0, xv, c##t##0);            \
      c##t##1 = hn::MulAdd(w1, xv, c##t##1);            \
      c##t##2 = hn::MulAdd(w2, xv, c##t##2);            \
      c##t##3 = hn::MulAdd(w3, xv, c##t##3);            \
    }                                                   \
  } while (0)
#define DSV4_TILE_STORE(t)                                 \
  do {                                                     \
    if constexpr (MT > t) {                                \
      hn::Store(c##t##0, d, acc + t * acc_stride);         \
      hn::Store(c##t##1, d, acc + t * acc_stride + N);     \
      hn::Store(c##t##2, d, acc + t * acc_stride + 2 * N); \
      hn::Store(c##t##3, d, acc + t * acc_stride + 3 * N); \
    }                                                      \
  } while (0)

// acc[t · acc_stride + i · lanes] (+)= Σ_k w[i · len + k] · x[t · x_stride + k]
// lane by lane in k order, for 4 rows i × MT tokens t (MT ≤ 6) over k in
// [0, len) (whole vectors). first: the accumulators start from zero instead.
template <int MT, class W>
HWY_INLINE void MicroTile(DF d, const W& w, int64_t len, const float* HWY_RESTRICT x,
                          int64_t x_stride, float* HWY_RESTRICT acc, int64_t acc_stride,
                          bool first) {
  static_assert(MT >= 1 && MT <= 6);
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF z = hn::Zero(d);
  DSV4_TILE_ACC(0);
  DSV4_TILE_ACC(1);
  DSV4_TILE_ACC(2);
  DSV4_TILE_ACC(3);
  DSV4_TILE_ACC(4);
  DSV4_TILE_ACC(5);
  DSV4_TILE_LOAD(0);
  DSV4_TILE_LOAD(1);
  DSV4_TILE_LOAD(2);
  DSV4_TILE_LOAD(3);
  DSV4_TILE_LOAD(4);
  DSV4_TILE_LOAD(5);
  for (int64_t k = 0; k < len; k += N) {
    const VF w0 = w.template Get<0>(d, k), w1 = w.template Get<1>(d, k);
    const VF w2 = w.template Get<2>(d, k), w3 = w.template Get<3>(d, k);
    DSV4_TILE_FMA(0);
    DSV4_TILE_FMA(1);
    DSV4_TILE_FMA(2);
    DSV4_TILE_FMA(3);
    DSV4_TILE_FMA(4);
    DSV4_TILE_FMA(5);
  }
  DSV4_TILE_STORE(0);
  DSV4_TILE_STORE(1);
  DSV4_TILE_STORE(2);
  DSV4_TILE_STORE(3);
  DSV4_TILE_STORE(4);
  DSV4_TILE_STORE(5);
}
#undef DSV4_TILE_ACC
#undef DSV4_TILE_LOAD
#undef DSV4_TILE_FMA
#undef DSV4_TILE_STORE

// MicroTile for mt ≤ MT tokens (called with MT = kTileTokens).
template <int MT, class W>
HWY_INLINE void MicroTileN(DF d, int64_t mt, const W& w, int64_t len, const float* HWY_RESTRICT x,
                           int64_t x_stride, float* HWY_RESTRICT acc, int64_t acc_stride,
                           bool first) {
  if constexpr (MT > 1) {
    if (mt < MT) return MicroTileN<MT - 1>(d, mt, w, len, x, x_stride, acc, acc_stride, first);
  }
  MicroTile<MT>(d, w, len, x, x_stride, acc, acc_stride, first);
}

// A micro-tile's four weight rows: decoded ones in the per-thread panel
// (DecodeRow's f32, four rows `len` apart)…
struct PanelRows {
  const float* HWY_RESTRICT w;
  int64_t len;
  template <int R>
  HWY_INLINE VF Get(DF d, int64_t k) const {
    return hn::Load(d, w + R * len + k);
  }
};
// …or, for f16, read in place from the weight rows and converted in the loop
// (one vcvtph2ps per vector, which the core issues beside the FMAs: a 4 × 6
// micro-tile from L1 runs at the FMA peak either way): no panel to write and
// read back, and the rows cross the caches at half the bytes
// (`matmul_bench 1 8 5 f16 2048 prefill:128:5632`). f32 read in place
// measured the same as from the panel, so it keeps the panel.
template <class Fmt>
struct DirectRows {
  const uint8_t* p[4];  // each row at the K-block's first input
  template <int R>
  HWY_INLINE VF Get(DF d, int64_t k) const {
    VF v0, v1;
    Fmt::Decode(d, p[R], k, v0, v1);
    return v0;
  }
};
template <class Fmt>
inline constexpr bool kDirect = std::is_same_v<Fmt, F16Fmt>;

// dst[0, k_end − k_begin) = the row's weights k in [k_begin, k_end) times
// their scales, in decode step layout (k_begin on a step and scale block
// boundary, k_end on a step boundary): for pairs formats, per step, the even
// inputs' weights, then the odd ones.
template <class Fmt>
HWY_INLINE void DecodeRow(DF d, const uint8_t* row, const float* scales, int64_t k_begin,
                          int64_t k_end, float* HWY_RESTRICT dst) {
  const int64_t step = StepOf(d, kTwo<Fmt>);
  const int64_t block = Fmt::kBlock > 0 ? Fmt::kBlock : k_end - k_begin;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += block) {
    const int64_t len = std::min(block, k_end - k0);
    const uint8_t* p = Fmt::Ptr(row, k0);
    float* out = dst + (k0 - k_begin);
    VF s = hn::Zero(d);
    if constexpr (Fmt::kBlock > 0) s = BlockState<Fmt>(d, scales[k0 / Fmt::kBlock]);
    for (int64_t j = 0; j < len; j += step) {
      VF v0, v1;
      DecodeScaled<Fmt>(d, p, j, s, v0, v1);
      hn::Store(v0, d, out + j);
      if constexpr (kTwo<Fmt>) hn::Store(v1, d, out + j + hn::Lanes(d));
    }
  }
}

// dst[t · dst_stride + j] for j < k_vec: x[t · k_size + …] laid out as the
// weights of DecodeRow for a pairs format (per step of 2·lanes inputs: the even
// ones, then the odd ones).
HWY_INLINE void DeinterleaveX(DF d, const float* x, int64_t k_size, int64_t n_tokens, int64_t k_vec,
                              float* HWY_RESTRICT dst, int64_t dst_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * k_size;
    float* o = dst + t * dst_stride;
    for (int64_t j = 0; j < k_vec; j += 2 * N) {
      VF x0, x1;
      hn::LoadInterleaved2(d, src + j, x0, x1);
      hn::Store(x0, d, o + j);
      hn::Store(x1, d, o + j + N);
    }
  }
}

// The next 64-byte boundary at or after p.
inline float* Align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// n split into equal parts of at most max_part (≥ 1), each rounded up to a
// multiple of kTileTokens: the part size.
inline int64_t EvenPart(int64_t n, int64_t max_part) {
  const int64_t parts = (n + max_part - 1) / max_part;
  return ((n + parts - 1) / parts + kTileTokens - 1) / kTileTokens * kTileTokens;
}

template <class Fmt>
void TileRows(const MatMulArgs& a) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t step = StepOf(d, kTwo<Fmt>);
  const int64_t k_size = a.w.sizes[1];
  const int64_t k_vec = k_size / step * step;
  const int64_t row_bytes = detail::RowBytes(a.w);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  // Scale blocks per row: FP8 ceil(K/128) or ceil(K/32), FP4 and q8_0 K/32.
  const int64_t scale_count = Fmt::kBlock > 0 ? k_size / 32 + 1 : 0;
  // x as the micro-tiles read it: pairs formats from the deinterleaved copy.
  const int64_t x_stride = Fmt::kPairs ? k_vec + kPackedXPad : k_size;
  const int64_t super_tokens =
      Fmt::kPairs ? EvenPart(a.n_tokens, std::max<int64_t>(
                                             kPackedXFloats / x_stride / kTileTokens * kTileTokens,
                                             kTileTokens))
                  : a.n_tokens;
  const int64_t block_tokens = EvenPart(super_tokens, kTokenBlock);
  const int64_t acc_token_stride = kPanelRows * N;  // one token's accumulators to the next

  // Scratch, each part 64-byte aligned: decoded weights [kPanelRows, kKc]
  // (none for kDirect formats),
  // accumulators [block_tokens, kPanelRows, N], deinterleaved x
  // [super_tokens, x_stride] (pairs formats), scales [kPanelRows, scale_count].
  constexpr int64_t kc = kDirect<Fmt> ? kKcDirect : kKc;
  const int64_t w_floats = kDirect<Fmt> ? 0 : kPanelRows * kKc;
  const int64_t acc_floats = block_tokens * acc_token_stride;
  const int64_t x_floats = Fmt::kPairs ? super_tokens * x_stride : 0;
  const int64_t s_floats = kPanelRows * scale_count;
  std::vector<float>& buf = TileBuffer();
  const size_t need = static_cast<size_t>(w_floats + acc_floats + x_floats + s_floats + 4 * 16);
  if (buf.size() < need) buf.resize(need);
  float* wbuf = Align64(buf.data());
  float* acc = Align64(wbuf + w_floats);
  float* xbuf = Align64(acc + acc_floats);
  float* sbuf = Align64(xbuf + x_floats);
  CHECK(sbuf + s_floats <= buf.data() + buf.size());

  const uint8_t* rows[kPanelRows];
  const float* scales[kPanelRows];
  for (int64_t sb0 = 0; sb0 < a.n_tokens; sb0 += super_tokens) {
    const int64_t sb = std::min<int64_t>(super_tokens, a.n_tokens - sb0);
    const float* xs = a.x + sb0 * k_size;
    if constexpr (Fmt::kPairs) {
      DeinterleaveX(d, xs, k_size, sb, k_vec, xbuf, x_stride);
      xs = xbuf;
    }
    for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += kPanelRows) {
      const int64_t rows_here = std::min<int64_t>(kPanelRows, a.row_end - n0);
      const int64_t quads = (rows_here + 3) / 4;
      for (int64_t r = 0; r < rows_here; ++r) {
        rows[r] = base + (n0 + r) * row_bytes;
        scales[r] = RowScales<Fmt>(a, n0 + r, rows[r], sbuf + r * scale_count);
      }
      for (int64_t tb0 = 0; tb0 < sb; tb0 += block_tokens) {
        const int64_t tb = std::min<int64_t>(block_tokens, sb - tb0);
        for (int64_t kc0 = 0; kc0 < k_vec; kc0 += kc) {
          const int64_t len = std::min<int64_t>(kc, k_vec - kc0);
          if constexpr (!kDirect<Fmt>) {
            for (int64_t r = 0; r < rows_here; ++r) {
              DecodeRow<Fmt>(d, rows[r], scales[r], kc0, kc0 + len, wbuf + r * len);
            }
            // A short last quad gets zero weights; its results are dropped.
            std::fill(wbuf + rows_here * len, wbuf + quads * 4 * len, 0.0f);
          }
          // kDirect: each quad's rows at this K-block (a short last quad
          // repeats its last row; its results are dropped).
          DirectRows<Fmt> direct[kPanelRows / 4];
          if constexpr (kDirect<Fmt>) {
            for (int64_t r = 0; r < quads * 4; ++r) {
              direct[r / 4].p[r % 4] = Fmt::Ptr(rows[std::min(r, rows_here - 1)], kc0);
            }
          }
          const float* xk = xs + tb0 * x_stride + kc0;
          const bool first = kc0 == 0;
          for (int64_t t0 = 0; t0 < tb; t0 += kTileTokens) {
            const int64_t mt = std::min<int64_t>(kTileTokens, tb - t0);
            const float* xt = xk + t0 * x_stride;
            float* acc_t = acc + t0 * acc_token_stride;
            for (int64_t q = 0; q < quads; ++q) {
              if constexpr (kDirect<Fmt>) {
                MicroTileN<kTileTokens>(d, mt, direct[q], len, xt, x_stride, acc_t + q * 4 * N,
                                        acc_token_stride, first);
              } else {
                MicroTileN<kTileTokens>(d, mt, PanelRows{wbuf + q * 4 * len, len}, len, xt,
                                        x_stride, acc_t + q * 4 * N, acc_token_stride, first);
              }
            }
          }
        }
        // Horizontal sums, then the scalar tail (k ≥ k_vec) in k order.
        for (int64_t t = 0; t < tb; ++t) {
          const int64_t token = sb0 + tb0 + t;
          const float* xt = a.x + token * k_size;
          float* o = a.out + token * a.out_stride + (n0 - a.row_begin);
          // Row r's scalar tail: its inputs past the vector part, in k order.
          const auto tail_of = [&](int64_t r) {
            float tail = 0.0f;
            for (int64_t k = k_vec; k < k_size; ++k) {
              tail += ScalarScaled<Fmt>(rows[r], scales[r], k) * xt[k];
            }
            return tail;
          };
          int64_t r = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
          // Sixteen rows at a time by transposing adds (x86::Tree16: each
          // lane the order of _mm512_reduce_add_ps, which SumOfLanes is
          // here): the one-at-a-time sums below are a visible share of a
          // short-row product's time.
          if (k_vec > 0) {
            for (; r + 16 <= rows_here; r += 16) {
              const __m512 sum16 = x86::Tree16(acc + t * acc_token_stride + r * N);
              if (k_vec == k_size) {  // no tail: the sums + 0.0f (the empty tail, below)
                _mm512_storeu_ps(o + r, _mm512_add_ps(sum16, _mm512_setzero_ps()));
                continue;
              }
              alignas(64) float sums[16];
              _mm512_store_ps(sums, sum16);
              for (int64_t i = 0; i < 16; ++i) o[r + i] = sums[i] + tail_of(r + i);
            }
          }
#endif
          for (; r < rows_here; ++r) {
            const float sum = k_vec > 0 ? hn::GetLane(hn::SumOfLanes(
                                              d, hn::Load(d, acc + t * acc_token_stride + r * N)))
                                        : 0.0f;
            o[r] = sum + tail_of(r);
          }
        }
      }
    }
  }
}

template <class Fmt>
void MatMulRowsT(const MatMulArgs& a) {
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return;
  if (a.n_tokens < detail::kTileMinTokens) {
    MatVecRows<Fmt>(a);
  } else {
    TileRows<Fmt>(a);
  }
}

void MatMulF32(const MatMulArgs& a) { MatMulRowsT<F32Fmt>(a); }
void MatMulBf16(const MatMulArgs& a) { MatMulRowsT<Bf16Fmt>(a); }
void MatMulF16(const MatMulArgs& a) { MatMulRowsT<F16Fmt>(a); }
void MatMulQ8_0(const MatMulArgs& a) { MatMulRowsT<Q8Fmt>(a); }
void MatMulFp8Block(const MatMulArgs& a) {
  if (a.fp8_block == detail::kFp8SmallBlock) {
    MatMulRowsT<Fp8SmallFmt>(a);
  } else {
    MatMulRowsT<Fp8Fmt>(a);
  }
}
void MatMulFp4Block(const MatMulArgs& a) { MatMulRowsT<Fp4Fmt>(a); }

int64_t TargetBit() { return HWY_TARGET; }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(MatMulF32);
HWY_EXPORT(MatMulBf16);
HWY_EXPORT(MatMulF16);
HWY_EXPORT(MatMulQ8_0);
HWY_EXPORT(MatMulFp8Block);
HWY_EXPORT(MatMulFp4Block);
HWY_EXPORT(TargetBit);

void ChooseTarget() {
  static const bool chosen = [] {
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    return true;
  }();
  (void)chosen;
}

MatMulFn DenseMatMulKernel(DType w_dtype) {
  ChooseTarget();
  switch (w_dtype) {
    case DType::kF32:
      return HWY_DYNAMIC_DISPATCH(MatMulF32);
    case DType::kBF16:
      return HWY_DYNAMIC_DISPATCH(MatMulBf16);
    case DType::kF16:
      return HWY_DYNAMIC_DISPATCH(MatMulF16);
    case DType::kQ8_0:
      return HWY_DYNAMIC_DISPATCH(MatMulQ8_0);
    default:
      return nullptr;
  }
}

MatMulFn Fp8BlockMatMulKernel() {
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(MatMulFp8Block);
}
MatMulFn Fp4BlockMatMulKernel() {
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(MatMulFp4Block);
}

const char* ActiveTargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetBit)()); }

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
