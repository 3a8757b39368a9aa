// ops/simd kernels for GGUF's q4_K and q6_K weights (tensor/dtype.h) ×
// activations quantised to q8_K, llama.cpp's arithmetic, on any CPU: one copy
// per Highway target (foreach_target), picked at run time. The twins of
// ops::ref::DotKQuantQ8K, bit for bit (the float order is documented in
// ops/ref/kquant_ref.h). ops::MatMul takes them where the AVX-512 kernels of
// ops/simd/kquant_q8_x86.cc are not available.
//
// Each weight block (256 values) of a group of kRows rows is decoded once per
// call (per token tile) into int16 weights with the sub-block scale folded in:
//   q4_K:  w[k] = sc[k/32] · q[k]          (0 ≤ w ≤ 63·15)
//   q6_K:  w[k] = sc[k/16] · (q[k] − 32)   (|w| ≤ 128·32)
// and dotted with every token's q8 codes (widened to int16 once per call),
// int32 multiply-adds, so one integer per block, row and token:
//   isum = Σ_k w[k]·x8[k]  (= Σ_s sc[s] · Σ_{k in s} q·x8, ggml's isum exactly)
//   q4_K also imin = Σ_j m[j/2] · bsums[j] over the activations' 16 partial
//   sums (= Σ_s m[s] · Σ_{k in s} x8[k]).
// The integer sums are exact in any order (|isum| < 2^28). The lanes of each
// row's sum are folded by a 4×4 transposition that leaves the kRows rows'
// sums in the lanes of one vector; the float steps run on that vector (one
// lane per row), in the ref's order, per block in block order from acc = 0,
// each rounded (this file is compiled with -ffp-contract=off), dx the
// activations' scale, dw and dmin the block's:
//   q4_K:  acc = acc + (dx·dw)·isum;  acc = acc − (dx·dmin)·imin
//   q6_K:  acc = acc + (dx·dw)·isum
// Tokens are taken two at a time against the kRows rows; a single token's
// blocks are decoded straight into its dot products (no int16 buffer).
//
// The file also holds the portable q8_K activation quantiser (QuantizeQ8K),
// ops::ref::QuantizeRowQ8K bit for bit.
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_KQUANT_Q8_SIMD_ONCE_
#define DSV4_OPS_SIMD_KQUANT_Q8_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/kquant_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"

namespace dsv4::ops::simd::kq_detail {

static_assert(std::endian::native == std::endian::little,
              "q4_K's scales are unpacked as little-endian words");

inline constexpr int kRows = 4;             // weight rows per group: one float lane each
inline constexpr int kPrefetchBlocks = 2;   // blocks fetched ahead per row
inline constexpr int64_t kTileTokens = 32;  // tokens per pass over the rows

inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Per-thread buffers: the tile's activation codes widened to int16 [T, K] and
// the accumulators [T, kRows].
struct Scratch {
  std::vector<int16_t> x;
  std::vector<float> acc;
};
inline Scratch& GetScratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace dsv4::ops::simd::kq_detail
#endif  // DSV4_OPS_SIMD_KQUANT_Q8_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/kquant_q8_simd.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace kq = kq_detail;

#if HWY_TARGET == HWY_SCALAR
// One lane: the scalar twin itself.
template <DType kW>
void KQuantRows(const MatMulArgs& a, const BlockQ8K* xq) {
  const int64_t nb = a.w.sizes[1] / kQK_K;
  const int64_t row_bytes = DTypeBytes(kW, a.w.strides[0]);
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w.data) + n * row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      a.out[t * a.out_stride + (n - a.row_begin)] = ref::DotKQuantQ8K(kW, row, xq + t * nb, nb);
    }
  }
}
void QuantizeQ8K(const float* x, int64_t k, BlockQ8K* y) { ref::QuantizeRowQ8K(x, k, y); }
#else
namespace kq_impl {

// D16, D32, kChunks, Widen, Fold4, SumLanes4:
#include "ops/simd/q8_lanes-inl.h"

// q4_K: 32 values per sub-block s with 6-bit scale sc[s] and min m[s]; qs
// chunk c (32 bytes) holds values 64c … 64c+31 in its low nibbles and
// 64c+32 … 64c+63 in its high ones.
struct Q4KFmt {
  static constexpr int64_t kBytes = sizeof(BlockQ4_K);
  static constexpr bool kHasMin = true;
  // sink(k, v): v = sc·q for the Lanes(D16) values from k, every k of the
  // block once; mins[16] = m[j/2]; *dw, *dmin the f16 scales.
  template <class Sink>
  static HWY_INLINE void Decode(const uint8_t* blk, Sink&& sink, int16_t* HWY_RESTRICT mins,
                                float* dw, float* dmin) {
    const D16 d16;
    const hn::Full128<uint8_t> du8;
    const size_t n16 = hn::Lanes(d16);
    // The 6-bit scales and mins (Q4KScaleMin) unpacked four at a time, as
    // ggml does: sm[0…7] = sc[0…7], sm[8…15] = m[0…7].
    uint32_t u[4];
    std::memcpy(u, blk + offsetof(BlockQ4_K, scales), 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t m_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = m_lo;
    u[0] &= 0x3f3f3f3fu;
    HWY_ALIGN uint8_t sm[16];
    std::memcpy(sm, u, 16);
    const uint8_t* sc = sm;
    const uint8_t* qs = blk + offsetof(BlockQ4_K, qs);
    const auto low4 = hn::Set(du8, uint8_t{0x0F});
    for (int c = 0; c < 4; ++c) {
      const auto sc_lo = hn::Set(d16, static_cast<int16_t>(sc[2 * c]));
      const auto sc_hi = hn::Set(d16, static_cast<int16_t>(sc[2 * c + 1]));
      for (int h = 0; h < 2; ++h) {
        const auto bytes = hn::LoadU(du8, qs + 32 * c + 16 * h);
        V16 lo[kChunks], hi[kChunks];
        Widen(d16, hn::And(bytes, low4), lo);
        Widen(d16, hn::ShiftRight<4>(bytes), hi);
        for (size_t i = 0; i < kChunks; ++i) {
          sink(static_cast<int>(64 * c + 16 * h + i * n16), hn::Mul(lo[i], sc_lo));
          sink(static_cast<int>(64 * c + 32 + 16 * h + i * n16), hn::Mul(hi[i], sc_hi));
        }
      }
    }
    const auto vsm = hn::Load(du8, sm);
    V16 mw[kChunks];
    Widen(d16, hn::InterleaveUpper(du8, vsm, vsm), mw);  // m[j/2] for j < 16
    for (size_t i = 0; i < kChunks; ++i) hn::Store(mw[i], d16, mins + i * n16);
    *dw = kq::F16At(blk + offsetof(BlockQ4_K, d));
    *dmin = kq::F16At(blk + offsetof(BlockQ4_K, dmin));
  }
};

// q6_K: value k = 128h + 32g + l (h < 2, g < 4, l < 32) has its low 4 bits
// in ql[64h + 32(g%2) + l] (low nibble for g < 2, else high), its high 2 bits
// in bits 2g, 2g+1 of qh[32h + l]; int8 scale sc[k/16].
struct Q6KFmt {
  static constexpr int64_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kHasMin = false;
  // sink(k, v): v = sc·(q − 32) for the Lanes(D16) values from k.
  template <class Sink>
  static HWY_INLINE void Decode(const uint8_t* blk, Sink&& sink, int16_t* HWY_RESTRICT /*mins*/,
                                float* dw, float* /*dmin*/) {
    const D16 d16;
    const hn::Full128<uint8_t> du8;
    const size_t n16 = hn::Lanes(d16);
    const uint8_t* ql = blk + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = blk + offsetof(BlockQ6_K, qh);
    const auto* scales = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
    const auto low4 = hn::Set(d16, int16_t{0x0F});
    const auto low2 = hn::Set(d16, int16_t{3});
    const auto k32 = hn::Set(d16, int16_t{32});
    for (int h = 0; h < 2; ++h) {
      for (int lh = 0; lh < 2; ++lh) {
        V16 l0[kChunks], l1[kChunks], hb[kChunks];
        Widen(d16, hn::LoadU(du8, ql + 64 * h + 16 * lh), l0);
        Widen(d16, hn::LoadU(du8, ql + 64 * h + 32 + 16 * lh), l1);
        Widen(d16, hn::LoadU(du8, qh + 32 * h + 16 * lh), hb);
        for (int g = 0; g < 4; ++g) {
          const auto sc = hn::Set(d16, static_cast<int16_t>(scales[8 * h + 2 * g + lh]));
          for (size_t i = 0; i < kChunks; ++i) {
            const V16 lsrc = (g % 2) != 0 ? l1[i] : l0[i];
            const V16 lo = g < 2 ? hn::And(lsrc, low4) : hn::ShiftRight<4>(lsrc);
            const V16 hi = hn::And(hn::ShiftRightSame(hb[i], 2 * g), low2);
            const V16 q = hn::Or(lo, hn::ShiftLeft<4>(hi));
            sink(static_cast<int>(128 * h + 32 * g + 16 * lh + i * n16),
                 hn::Mul(hn::Sub(q, k32), sc));
          }
        }
      }
    }
    *dw = kq::F16At(blk + offsetof(BlockQ6_K, d));
  }
};

// sums[t][r] (lanes to be summed) = w[r·256 + k] · x[t][k] over one block,
// kRows rows × TT tokens.
template <int TT>
HWY_INLINE void DotBlock(const int16_t* HWY_RESTRICT w, const int16_t* const* x,
                         V32 sums[2][kq::kRows]) {
  const D16 d16;
  const D32 d32;
  const size_t n = hn::Lanes(d16);
  V32 acc0[TT][kq::kRows], acc1[TT][kq::kRows];
  for (int t = 0; t < TT; ++t) {
    for (int r = 0; r < kq::kRows; ++r) {
      acc0[t][r] = hn::Zero(d32);
      acc1[t][r] = hn::Zero(d32);
    }
  }
  for (size_t k = 0; k < static_cast<size_t>(kQK_K); k += n) {
    V16 xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = hn::LoadU(d16, x[t] + k);
    for (int r = 0; r < kq::kRows; ++r) {
      const auto wv = hn::Load(d16, w + r * kQK_K + k);
      for (int t = 0; t < TT; ++t) {
        acc0[t][r] = hn::ReorderWidenMulAccumulate(d32, wv, xv[t], acc0[t][r], acc1[t][r]);
      }
    }
  }
  for (int t = 0; t < TT; ++t) {
    for (int r = 0; r < kq::kRows; ++r) sums[t][r] = hn::Add(acc0[t][r], acc1[t][r]);
  }
}

// imin[r] = Σ_j mins[r·16 + j] · bsums[j] in the lanes of one vector.
HWY_INLINE hn::Vec128<int32_t> MinSums(const int16_t* HWY_RESTRICT mins, const int16_t* bsums) {
  const D16 d16;
  const D32 d32;
  const size_t n = hn::Lanes(d16);
  V32 s[kq::kRows];
  for (int r = 0; r < kq::kRows; ++r) {
    V32 sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
    for (size_t j = 0; j < 16; j += n) {
      sum0 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, mins + 16 * r + j),
                                           hn::LoadU(d16, bsums + j), sum0, sum1);
    }
    s[r] = hn::Add(sum0, sum1);
  }
  return SumLanes4(d32, s);
}

template <class Fmt>
void Rows(const MatMulArgs& a, const BlockQ8K* xq) {
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return;
  constexpr int R = kq::kRows;
  const int64_t k_size = a.w.sizes[1];
  DCHECK(k_size % kQK_K == 0);
  const int64_t nb = k_size / kQK_K;
  const int64_t n_tokens = a.n_tokens;
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  const auto* base = static_cast<const uint8_t*>(a.w.data);
  const D32 d32;
  const hn::Full128<float> df;

  // Token tiles of at most kTileTokens, as even as the count allows.
  const int64_t n_tiles = (n_tokens + kq::kTileTokens - 1) / kq::kTileTokens;
  const int64_t tile = (n_tokens + n_tiles - 1) / n_tiles;
  kq::Scratch& s = kq::GetScratch();
  if (s.x.size() < static_cast<size_t>(tile * k_size))
    s.x.resize(static_cast<size_t>(tile * k_size));
  if (s.acc.size() < static_cast<size_t>(tile * R)) s.acc.resize(static_cast<size_t>(tile * R));
  HWY_ALIGN int16_t w[R * kQK_K];
  HWY_ALIGN int16_t mins[R * 16];
  HWY_ALIGN float dw[R];
  HWY_ALIGN float dmin[R];

  for (int64_t t0 = 0; t0 < n_tokens; t0 += tile) {
    const int64_t tt = std::min(tile, n_tokens - t0);
    for (int64_t t = 0; t < tt; ++t) {
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* src = xq[(t0 + t) * nb + b].qs;
        int16_t* dst = s.x.data() + t * k_size + b * kQK_K;
        for (int j = 0; j < kQK_K; ++j) dst[j] = src[j];
      }
    }
    for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += R) {
      const int rows_here = static_cast<int>(std::min<int64_t>(R, a.row_end - n0));
      const uint8_t* rows[R];
      // A short group repeats its last row (its results are not stored).
      for (int r = 0; r < R; ++r) rows[r] = base + (n0 + std::min(r, rows_here - 1)) * row_bytes;
      float* acc = s.acc.data();
      std::fill(acc, acc + tt * R, 0.0f);
      const auto prefetch = [&](const uint8_t* blk, int64_t b) {
        if (b + kq::kPrefetchBlocks < nb) {
          for (int64_t l = 0; l < Fmt::kBytes; l += 64) {
            hwy::Prefetch(blk + kq::kPrefetchBlocks * Fmt::kBytes + l);
          }
        }
      };
      if (tt == 1) {
        // One token: each row's block decoded straight into its dot product.
        const hn::Full128<float> df4;
        auto acc4 = hn::Zero(df4);
        for (int64_t b = 0; b < nb; ++b) {
          const int16_t* x = s.x.data() + b * kQK_K;
          V32 sums[R];
          for (int r = 0; r < R; ++r) {
            const uint8_t* blk = rows[r] + b * Fmt::kBytes;
            prefetch(blk, b);
            V32 sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
            Fmt::Decode(
                blk,
                [&](int k, V16 v) {
                  sum0 = hn::ReorderWidenMulAccumulate(d32, v, hn::LoadU(D16(), x + k), sum0, sum1);
                },
                mins + r * 16, &dw[r], &dmin[r]);
            sums[r] = hn::Add(sum0, sum1);
          }
          const BlockQ8K& xb = xq[t0 * nb + b];
          const auto dx = hn::Set(df4, xb.d);
          const auto isum = hn::ConvertTo(df4, SumLanes4(d32, sums));
          acc4 = hn::Add(acc4, hn::Mul(hn::Mul(dx, hn::Load(df4, dw)), isum));
          if constexpr (Fmt::kHasMin) {
            const auto imin = hn::ConvertTo(df4, MinSums(mins, xb.bsums));
            acc4 = hn::Sub(acc4, hn::Mul(hn::Mul(dx, hn::Load(df4, dmin)), imin));
          }
        }
        hn::StoreU(acc4, df4, acc);
        for (int r = 0; r < rows_here; ++r) {
          a.out[t0 * a.out_stride + (n0 + r - a.row_begin)] = acc[r];
        }
        continue;
      }
      for (int64_t b = 0; b < nb; ++b) {
        for (int r = 0; r < R; ++r) {
          const uint8_t* blk = rows[r] + b * Fmt::kBytes;
          prefetch(blk, b);
          int16_t* wr = w + r * kQK_K;
          Fmt::Decode(
              blk, [&](int k, V16 v) { hn::Store(v, D16(), wr + k); }, mins + r * 16, &dw[r],
              &dmin[r]);
        }
        const auto vdw = hn::Load(df, dw);
        const auto vdmin = hn::Load(df, dmin);
        for (int64_t tp = 0; tp < tt; tp += 2) {
          const int pair = static_cast<int>(std::min<int64_t>(2, tt - tp));
          const int16_t* x[2];
          for (int t = 0; t < pair; ++t) x[t] = s.x.data() + (tp + t) * k_size + b * kQK_K;
          V32 sums[2][R];
          if (pair == 2) {
            DotBlock<2>(w, x, sums);
          } else {
            DotBlock<1>(w, x, sums);
          }
          for (int t = 0; t < pair; ++t) {
            const BlockQ8K& xb = xq[(t0 + tp + t) * nb + b];
            const auto dx = hn::Set(df, xb.d);
            const auto isum = hn::ConvertTo(df, SumLanes4(d32, sums[t]));
            float* acc_t = acc + (tp + t) * R;
            auto v = hn::Add(hn::LoadU(df, acc_t), hn::Mul(hn::Mul(dx, vdw), isum));
            if constexpr (Fmt::kHasMin) {
              const auto imin = hn::ConvertTo(df, MinSums(mins, xb.bsums));
              v = hn::Sub(v, hn::Mul(hn::Mul(dx, vdmin), imin));
            }
            hn::StoreU(v, df, acc_t);
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

}  // namespace kq_impl

// ops::ref::QuantizeRowQ8K bit for bit (finite x): per 256 values max = the
// value of largest magnitude (the first of ties), iscale = −127 / max (a block
// of zeros, or one whose iscale overflows, is all zeros), codes
// min(nearbyint(iscale · x), 127) (round to nearest, ties to even: Round),
// bsums the sums of 16 codes, d = 1 / iscale.
void QuantizeQ8K(const float* x, int64_t k, BlockQ8K* y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t n = hn::Lanes(df);
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const float* xb = x + kQK_K * b;
    BlockQ8K& o = y[b];
    auto vmax = hn::Zero(df);
    for (size_t i = 0; i < kQK_K; i += n) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + i)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    float max = 0.0f;
    for (size_t i = 0; i < kQK_K && amax != 0.0f; i += n) {
      const intptr_t j =
          hn::FindFirstTrue(df, hn::Eq(hn::Abs(hn::LoadU(df, xb + i)), hn::Set(df, amax)));
      if (j >= 0) {
        max = xb[i + static_cast<size_t>(j)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    if (amax == 0.0f || std::isinf(iscale)) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    const auto vscale = hn::Set(df, iscale), top = hn::Set(df, 127.0f);
    for (size_t i = 0; i < kQK_K; i += n) {
      const auto r = hn::Min(hn::Round(hn::Mul(vscale, hn::LoadU(df, xb + i))), top);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, o.qs + i);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      auto sum = hn::Zero(di);
      for (size_t i = 0; i < 16; i += n)
        sum = hn::Add(sum, hn::PromoteTo(di, hn::LoadU(d8, o.qs + 16 * j + i)));
      o.bsums[j] = static_cast<int16_t>(hn::GetLane(hn::SumOfLanes(di, sum)));
    }
    o.d = 1.0f / iscale;
  }
}

template <DType kW>
void KQuantRows(const MatMulArgs& a, const BlockQ8K* xq) {
  if constexpr (kW == DType::kQ4_K) {
    kq_impl::Rows<kq_impl::Q4KFmt>(a, xq);
  } else {
    kq_impl::Rows<kq_impl::Q6KFmt>(a, xq);
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

void Q4KQ8K(const MatMulArgs& a, const BlockQ8K* xq) { KQuantRows<DType::kQ4_K>(a, xq); }
void Q6KQ8K(const MatMulArgs& a, const BlockQ8K* xq) { KQuantRows<DType::kQ6_K>(a, xq); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(Q4KQ8K);
HWY_EXPORT(Q6KQ8K);
HWY_EXPORT(QuantizeQ8K);

QuantizeQ8KFn QuantizeQ8KPortableKernel() {
  ChooseTarget();
  return HWY_DYNAMIC_DISPATCH(QuantizeQ8K);
}

KQuantQ8KFn KQuantQ8KPortableKernel(DType w_dtype) {
  ChooseTarget();
  switch (w_dtype) {
    case DType::kQ4_K:
      return HWY_DYNAMIC_DISPATCH(Q4KQ8K);
    case DType::kQ6_K:
      return HWY_DYNAMIC_DISPATCH(Q6KQ8K);
    default:
      return nullptr;
  }
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
