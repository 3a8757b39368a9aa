// ops/simd kernels for GGUF's grid i-quants (iq2_xxs, iq2_xs, iq2_s, iq3_xxs,
// iq3_s, iq1_s, iq1_m; layouts in tensor/ggml_quants.h) × q8_K activations:
// one copy per Highway target (foreach_target), picked at run time. The twins
// of ops::ref::DotIqQ8K (ops/ref/ggml_dot_iq_ref.cc), bit for bit.
//
// Each weight block (256 values) of a group of kRows rows is decoded once per
// call into int16 weights with the sub-block scale folded in:
//   iq2_*, iq3_*:  w[k] = ±g[k] · ls          (|w| ≤ 62·31)
//   iq1_s, iq1_m:  w[k] = (8·g[k] + δ) · ls   (g ∈ {−1, 0, 1}, δ = ±1 per 8 values)
// and then dotted with every token's q8 codes (widened to int16, int32
// multiply-adds), so one integer per block, row and token:
//   iq2_*, iq3_*:  bsum = Σ_sub ls · Σ ±g·q8, exactly ggml's bsum;
//   iq1_*:         bsum = 8·sumi + sumi1, where ggml forms float(sumi) +
//                  0.125·float(sumi1); both are below 2^24 in magnitude, so
//                  that sum is exact and equals float(bsum) · 0.125 exactly.
// The integer sums are exact in any order (no int32 overflow: |bsum| < 2^27).
// The float steps are ggml's, per block in block order from acc = 0, each
// rounded (this file is compiled with -ffp-contract=off), with d = dw·dx:
//   iq2_*, iq3_*:  acc = acc + d·float(bsum)   then ·0.125 (iq2), ·0.25 (iq3_xxs)
//   iq1_*:         acc = acc + d·(float(bsum)·0.125)
// Blocks are the outer loop (per row group, the tokens' accumulators live in a
// per-thread buffer), tokens are taken two at a time against four rows.
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_GGML_IQ_SIMD_ONCE_
#define DSV4_OPS_SIMD_GGML_IQ_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/ggml_grids.h"
#include "tensor/ggml_quants.h"

namespace dsv4::ops::simd::iq_detail {

static_assert(std::endian::native == std::endian::little,
              "the grids pack value j in byte j of each row");

inline constexpr int kRows = 4;            // weight rows per pass
inline constexpr int kPrefetchBlocks = 4;  // blocks fetched ahead per row

// kSign16.v[s][j]: −1 where bit j of the sign byte s is set, else 1.
struct SignTable {
  int16_t v[256][8];
};
inline constexpr SignTable kSign16 = [] {
  SignTable t{};
  for (int s = 0; s < 256; ++s) {
    for (int j = 0; j < 8; ++j) t.v[s][j] = ((s >> j) & 1) != 0 ? -1 : 1;
  }
  return t;
}();

// kSignK16.v[i][j]: the same for the sign byte kKsignsIq2xs[i] (a 7-bit sign
// index: one table read per group instead of two).
inline constexpr SignTable kSignK16 = [] {
  SignTable t{};
  for (int i = 0; i < 128; ++i) {
    for (int j = 0; j < 8; ++j) t.v[i][j] = ((kKsignsIq2xs[i] >> j) & 1) != 0 ? -1 : 1;
  }
  return t;
}();

inline uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline const int8_t* Bytes(const uint64_t& row) { return reinterpret_cast<const int8_t*>(&row); }

// Per-thread accumulators: kRows × T floats.
inline std::vector<float>& AccBuffer() {
  thread_local std::vector<float> buf;
  return buf;
}

}  // namespace dsv4::ops::simd::iq_detail
#endif  // DSV4_OPS_SIMD_GGML_IQ_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/ggml_iq_simd.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace iq = iq_detail;

// ---- Decoding one block of one row into 256 int16 weights ----

using DG = hn::CappedTag<int16_t, 8>;  // one group of 8 values

// out[j] = g[j] · sign[j] · ls for 8 values (g: 8 unsigned grid bytes < 128).
HWY_INLINE void Group(const int8_t* g, const int16_t* sign, int ls, int16_t* out) {
  const DG d;
  const hn::Rebind<int8_t, DG> d8;
  const auto vls = hn::Set(d, static_cast<int16_t>(ls));
  for (size_t j = 0; j < 8; j += hn::Lanes(d)) {
    const auto gv = hn::PromoteTo(d, hn::LoadU(d8, g + j));
    hn::StoreU(hn::Mul(hn::Mul(gv, hn::LoadU(d, sign + j)), vls), d, out + j);
  }
}

// out[j] = (8·g[j] + delta) · ls for 8 values (g: int8 −1, 0, 1).
HWY_INLINE void GroupIq1(const int8_t* g, int delta, int ls, int16_t* out) {
  const DG d;
  const hn::Rebind<int8_t, DG> d8;
  const auto vls = hn::Set(d, static_cast<int16_t>(ls));
  const auto vdelta = hn::Set(d, static_cast<int16_t>(delta));
  for (size_t j = 0; j < 8; j += hn::Lanes(d)) {
    const auto gv = hn::PromoteTo(d, hn::LoadU(d8, g + j));
    hn::StoreU(hn::Mul(hn::Add(hn::ShiftLeft<3>(gv), vdelta), vls), d, out + j);
  }
}

HWY_INLINE const int16_t* Signs(unsigned byte) { return iq::kSign16.v[byte & 255u]; }
HWY_INLINE const int16_t* SignsK(unsigned index7) { return iq::kSignK16.v[index7 & 127u]; }

// Each format: kBytes per block, kIq1 (the iq1 float step), kFinal (the factor
// applied to the sum at the end, 1 for none) and Decode (returns dw).
struct Iq2xxsFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_XXS);
  static constexpr bool kIq1 = false;
  static constexpr float kFinal = 0.125f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ2_XXS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t idx = iq::U32(qs + 8 * ib), aux = iq::U32(qs + 8 * ib + 4);
      const int ls = 2 * static_cast<int>(aux >> 28) + 1;
      for (int l = 0; l < 4; ++l) {
        Group(iq::Bytes(kIq2xxsGrid[(idx >> (8 * l)) & 255u]), SignsK(aux >> (7 * l)), ls,
              w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq2xsFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_XS);
  static constexpr bool kIq1 = false;
  static constexpr float kFinal = 0.125f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ2_XS, qs);
    const uint8_t* sc = blk + offsetof(BlockIQ2_XS, scales);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls[2] = {2 * (sc[ib] & 15) + 1, 2 * (sc[ib] >> 4) + 1};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = iq::U16(qs + 2 * (4 * ib + l));
        Group(iq::Bytes(kIq2xsGrid[q & 511u]), SignsK(q >> 9), ls[l / 2], w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq2sFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ2_S);
  static constexpr bool kIq1 = false;
  static constexpr float kFinal = 0.125f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ2_S, qs);
    const uint8_t* qh = blk + offsetof(BlockIQ2_S, qh);
    const uint8_t* sc = blk + offsetof(BlockIQ2_S, scales);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls[2] = {2 * (sc[ib] & 15) + 1, 2 * (sc[ib] >> 4) + 1};
      for (int l = 0; l < 4; ++l) {
        const unsigned idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3u) << 8);
        Group(iq::Bytes(kIq2sGrid[idx]), Signs(qs[kQK_K / 8 + 4 * ib + l]), ls[l / 2],
              w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq3xxsFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ3_XXS);
  static constexpr bool kIq1 = false;
  static constexpr float kFinal = 0.25f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* q3 = blk + offsetof(BlockIQ3_XXS, qs);
    const uint8_t* gas = q3 + kQK_K / 4;
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = iq::U32(gas + 4 * ib);
      const int ls = 2 * static_cast<int>(aux >> 28) + 1;
      for (int l = 0; l < 4; ++l) {
        const uint64_t g = kIq3xxsGrid[q3[8 * ib + 2 * l]] |
                           (static_cast<uint64_t>(kIq3xxsGrid[q3[8 * ib + 2 * l + 1]]) << 32);
        Group(iq::Bytes(g), SignsK(aux >> (7 * l)), ls, w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq3sFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ3_S);
  static constexpr bool kIq1 = false;
  static constexpr float kFinal = 1.0f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ3_S, qs);
    const uint8_t* qh = blk + offsetof(BlockIQ3_S, qh);
    const uint8_t* signs = blk + offsetof(BlockIQ3_S, signs);
    const uint8_t* sc = blk + offsetof(BlockIQ3_S, scales);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
      for (int l = 0; l < 4; ++l) {
        const unsigned i0 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1u) << 8);
        const unsigned i1 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1u) << 8);
        const uint64_t g = kIq3sGrid[i0] | (static_cast<uint64_t>(kIq3sGrid[i1]) << 32);
        Group(iq::Bytes(g), Signs(signs[4 * ib + l]), ls, w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq1sFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ1_S);
  static constexpr bool kIq1 = true;
  static constexpr float kFinal = 1.0f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ1_S, qs);
    const uint8_t* qh = blk + offsetof(BlockIQ1_S, qh);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t h = iq::U16(qh + 2 * ib);
      const int ls = 2 * ((h >> 12) & 7) + 1;
      const int delta = (h & 0x8000u) != 0 ? -1 : 1;
      for (int l = 0; l < 4; ++l) {
        const unsigned idx = qs[4 * ib + l] | (((h >> (3 * l)) & 7u) << 8);
        GroupIq1(iq::Bytes(kIq1sGrid[idx]), delta, ls, w + 32 * ib + 8 * l);
      }
    }
    return F16ToF32(iq::U16(blk));
  }
};

struct Iq1mFmt {
  static constexpr int64_t kBytes = sizeof(BlockIQ1_M);
  static constexpr bool kIq1 = true;
  static constexpr float kFinal = 1.0f;
  static HWY_INLINE float Decode(const uint8_t* blk, int16_t* w) {
    const uint8_t* qs = blk + offsetof(BlockIQ1_M, qs);
    const uint8_t* qh = blk + offsetof(BlockIQ1_M, qh);
    const uint8_t* sc = blk + offsetof(BlockIQ1_M, scales);
    uint16_t s[4];
    for (int j = 0; j < 4; ++j) s[j] = iq::U16(sc + 2 * j);
    for (int g16 = 0; g16 < 16; ++g16) {  // 16 values: one 3-bit scale, one qh byte
      const int ls = 2 * ((s[g16 / 4] >> (3 * (g16 % 4))) & 7) + 1;
      for (int l2 = 0; l2 < 2; ++l2) {
        const unsigned nib = (qh[g16] >> (4 * l2)) & 15u;
        const unsigned idx = qs[2 * g16 + l2] | ((nib & 7u) << 8);
        GroupIq1(iq::Bytes(kIq1sGrid[idx]), (nib & 8u) != 0 ? -1 : 1, ls, w + 16 * g16 + 8 * l2);
      }
    }
    const auto dbits = static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00f0u) |
                                             ((s[2] >> 4) & 0x0f00u) | (s[3] & 0xf000u));
    return F16ToF32(dbits);
  }
};

// ---- The integer dot products ----

using D16 = hn::ScalableTag<int16_t>;
using D32 = hn::RepartitionToWide<D16>;
using D8 = hn::Rebind<int8_t, D16>;
using V32 = hn::Vec<D32>;

// sums[r][t] = Σ_k w[r·256 + k] · q8[t][k] over one block, kRows rows × TT tokens.
template <int TT>
HWY_INLINE void DotBlock(const int16_t* HWY_RESTRICT w, const int8_t* const* q8,
                         int32_t sums[iq::kRows][2]) {
  const D16 d16;
  const D32 d32;
  const D8 d8;
  const size_t n = hn::Lanes(d16);
  V32 acc0[iq::kRows][TT], acc1[iq::kRows][TT];
  for (int r = 0; r < iq::kRows; ++r) {
    for (int t = 0; t < TT; ++t) {
      acc0[r][t] = hn::Zero(d32);
      acc1[r][t] = hn::Zero(d32);
    }
  }
  for (size_t k = 0; k < static_cast<size_t>(kQK_K); k += n) {
    hn::Vec<D16> x[TT];
    for (int t = 0; t < TT; ++t) x[t] = hn::PromoteTo(d16, hn::LoadU(d8, q8[t] + k));
    for (int r = 0; r < iq::kRows; ++r) {
      const auto wv = hn::Load(d16, w + r * kQK_K + k);
      for (int t = 0; t < TT; ++t) {
        acc0[r][t] = hn::ReorderWidenMulAccumulate(d32, wv, x[t], acc0[r][t], acc1[r][t]);
      }
    }
  }
  for (int r = 0; r < iq::kRows; ++r) {
    for (int t = 0; t < TT; ++t) {
      sums[r][t] = hn::GetLane(hn::SumOfLanes(d32, hn::Add(acc0[r][t], acc1[r][t])));
    }
  }
}

template <class Fmt>
HWY_INLINE float Step(float d, int32_t bsum) {
  if constexpr (Fmt::kIq1) {
    return d * (static_cast<float>(bsum) * 0.125f);
  } else {
    return d * static_cast<float>(bsum);
  }
}

template <class Fmt>
void IqRows(const MatMulArgs& a, const void* xq_v) {
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return;
  constexpr int R = iq::kRows;
  const int64_t k_size = a.w.sizes[1];
  DCHECK(k_size % kQK_K == 0);
  const int64_t nb = k_size / kQK_K;
  const int64_t n_tokens = a.n_tokens;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const auto* base = static_cast<const uint8_t*>(a.w.data);
  const auto* xq = static_cast<const uint8_t*>(xq_v);
  constexpr int64_t kXb = sizeof(BlockQ8K);

  std::vector<float>& acc_buf = iq::AccBuffer();
  const auto need = static_cast<size_t>(R * n_tokens);
  if (acc_buf.size() < need) acc_buf.resize(need);
  float* acc = acc_buf.data();
  HWY_ALIGN int16_t w[R * kQK_K];

  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += R) {
    const int rows_here = static_cast<int>(std::min<int64_t>(R, a.row_end - n0));
    std::fill(acc, acc + need, 0.0f);
    if (rows_here < R) std::fill(w + rows_here * kQK_K, w + R * kQK_K, int16_t{0});
    const uint8_t* rows[R];
    for (int r = 0; r < rows_here; ++r) rows[r] = base + (n0 + r) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      float dw[R] = {};
      for (int r = 0; r < rows_here; ++r) {
        const uint8_t* blk = rows[r] + b * Fmt::kBytes;
        if (b + iq::kPrefetchBlocks < nb) hwy::Prefetch(blk + iq::kPrefetchBlocks * Fmt::kBytes);
        dw[r] = Fmt::Decode(blk, w + r * kQK_K);
      }
      for (int64_t t0 = 0; t0 < n_tokens; t0 += 2) {
        const int tt = static_cast<int>(std::min<int64_t>(2, n_tokens - t0));
        const uint8_t* xb[2];
        const int8_t* q8[2];
        for (int t = 0; t < tt; ++t) {
          xb[t] = xq + ((t0 + t) * nb + b) * kXb;
          q8[t] = reinterpret_cast<const int8_t*>(xb[t] + offsetof(BlockQ8K, qs));
        }
        int32_t sums[R][2];
        if (tt == 2) {
          DotBlock<2>(w, q8, sums);
        } else {
          DotBlock<1>(w, q8, sums);
        }
        for (int t = 0; t < tt; ++t) {
          float dx;
          std::memcpy(&dx, xb[t] + offsetof(BlockQ8K, d), sizeof(dx));
          for (int r = 0; r < rows_here; ++r) {
            const float d = dw[r] * dx;
            float& s = acc[r * n_tokens + t0 + t];
            s = s + Step<Fmt>(d, sums[r][t]);
          }
        }
      }
    }
    for (int r = 0; r < rows_here; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        float v = acc[r * n_tokens + t];
        if constexpr (Fmt::kFinal != 1.0f) v = Fmt::kFinal * v;
        a.out[t * a.out_stride + (n0 + r - a.row_begin)] = v;
      }
    }
  }
}

void Iq2xxsQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq2xxsFmt>(a, xq); }
void Iq2xsQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq2xsFmt>(a, xq); }
void Iq2sQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq2sFmt>(a, xq); }
void Iq3xxsQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq3xxsFmt>(a, xq); }
void Iq3sQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq3sFmt>(a, xq); }
void Iq1sQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq1sFmt>(a, xq); }
void Iq1mQ8(const MatMulArgs& a, const void* xq) { IqRows<Iq1mFmt>(a, xq); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(Iq2xxsQ8);
HWY_EXPORT(Iq2xsQ8);
HWY_EXPORT(Iq2sQ8);
HWY_EXPORT(Iq3xxsQ8);
HWY_EXPORT(Iq3sQ8);
HWY_EXPORT(Iq1sQ8);
HWY_EXPORT(Iq1mQ8);

GgmlQ8Fn GgmlIqQ8Kernel(DType w_dtype) {
  ChooseTarget();
  switch (w_dtype) {
    case DType::kIQ2_XXS:
      return HWY_DYNAMIC_DISPATCH(Iq2xxsQ8);
    case DType::kIQ2_XS:
      return HWY_DYNAMIC_DISPATCH(Iq2xsQ8);
    case DType::kIQ2_S:
      return HWY_DYNAMIC_DISPATCH(Iq2sQ8);
    case DType::kIQ3_XXS:
      return HWY_DYNAMIC_DISPATCH(Iq3xxsQ8);
    case DType::kIQ3_S:
      return HWY_DYNAMIC_DISPATCH(Iq3sQ8);
    case DType::kIQ1_S:
      return HWY_DYNAMIC_DISPATCH(Iq1sQ8);
    case DType::kIQ1_M:
      return HWY_DYNAMIC_DISPATCH(Iq1mQ8);
    default:
      return nullptr;
  }
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
