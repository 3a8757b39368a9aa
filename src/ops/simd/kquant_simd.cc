// ops/simd matmul kernels for GGUF k-quant weights, q4_K and q6_K (layouts in
// tensor/dtype.h): one copy per Highway target (foreach_target), picked at run
// time (HWY_DYNAMIC_DISPATCH), like ops/simd/matmul_simd.cc.
//
// Weights are dequantised in registers, exactly as DequantizeRow does it:
// per sub-block a multiplier (d·sc) and for q4_K an offset (dmin·m) are formed
// once per block and row; per vector the integer codes are unpacked (nibbles,
// for q6_K plus two high bits and −32), converted to f32 and turned into the
// weight with one Mul (and one Sub for q4_K), the same two roundings as ggml
// and gguf-py. Products accumulate in fp32, lane-parallel.
//
// Two paths, chosen by the number of tokens:
//   - matvec (T = 1, decode): four weight rows at a time, decoded in registers
//     and multiplied into one accumulator per row; no temporary at all. The
//     rows' blocks two ahead are prefetched (each block starts with scalar
//     scale reads that would otherwise stall on every cache miss).
//   - tiles (T ≥ 2, prefill): four rows decoded once per call into a per-thread
//     buffer (4·K floats), then tiles of 4 rows × 2 tokens.
// Both sum each output in the same order (lane i takes k ≡ i mod lanes in k
// order, then a horizontal sum), so they agree bit for bit: a token's result
// does not depend on how many tokens share the call. K is a multiple of 256
// and every vector width divides the 16-value sub-blocks, so there is no tail.
//
// Shapes, outermost first: T tokens, K input features, N output features.

#ifndef DSV4_OPS_SIMD_KQUANT_SIMD_ONCE_
#define DSV4_OPS_SIMD_KQUANT_SIMD_ONCE_
// Target-independent helpers, compiled once.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops::simd::kquant_detail {

inline constexpr int64_t kTileMinTokens = 2;   // from here on, the tile path
inline constexpr int64_t kPrefetchBlocks = 2;  // matvec: blocks fetched ahead per row

// q4_K sub-block j: weight = mul[j]·q − sub[j].
inline void Q4KScales(const uint8_t* blk, float mul[8], float sub[8]) {
  uint16_t hd, hm;
  std::memcpy(&hd, blk, 2);
  std::memcpy(&hm, blk + 2, 2);
  const float d = F16ToF32(hd), dmin = F16ToF32(hm);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    Q4KScaleMin(blk + 4, j, &sc, &m);
    mul[j] = d * static_cast<float>(sc);
    sub[j] = dmin * static_cast<float>(m);
  }
}

// q6_K sub-block j: weight = mul[j]·(q − 32).
inline void Q6KScales(const uint8_t* blk, float mul[16]) {
  uint16_t hd;
  std::memcpy(&hd, blk + offsetof(BlockQ6_K, d), 2);
  const float d = F16ToF32(hd);
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
  for (int j = 0; j < 16; ++j) mul[j] = d * static_cast<float>(sc[j]);
}

// Decoded weights of 4 rows for the tile path, per thread.
inline std::vector<float>& TileBuffer() {
  thread_local std::vector<float> buf;
  return buf;
}

}  // namespace dsv4::ops::simd::kquant_detail
#endif  // DSV4_OPS_SIMD_KQUANT_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/kquant_simd.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

// ---------------------------------------------------------------------------
// Formats. Scales(blk, mul, sub) fills the per-sub-block constants of one
// block; Codes(d, blk, k) gives the integer codes of values [k, k + lanes) of
// the block as f32 (k a multiple of the lane count).
// ---------------------------------------------------------------------------

struct Q4KFmt {
  static constexpr int kSub = 32;  // values per sub-block
  static constexpr int kSubs = 8;  // sub-blocks per block
  static constexpr bool kHasMin = true;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ4_K);
  static HWY_INLINE void Scales(const uint8_t* blk, float* mul, float* sub) {
    kquant_detail::Q4KScales(blk, mul, sub);
  }
  // Value k: nibble (k % 64) / 32 of qs[32·(k / 64) + k % 32].
  static HWY_INLINE VF Codes(DF d, const uint8_t* blk, int k) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const uint8_t* q = blk + offsetof(BlockQ4_K, qs) + 32 * (k / 64) + k % 32;
    auto b = hn::PromoteTo(du, hn::LoadU(d8, q));
    b = (k % 64 >= 32) ? hn::ShiftRight<4>(b) : hn::And(b, hn::Set(du, 0xFu));
    return hn::ConvertTo(d, hn::BitCast(di, b));
  }
};

struct Q6KFmt {
  static constexpr int kSub = 16;
  static constexpr int kSubs = 16;
  static constexpr bool kHasMin = false;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K);
  static HWY_INLINE void Scales(const uint8_t* blk, float* mul, float* /*sub*/) {
    kquant_detail::Q6KScales(blk, mul);
  }
  // Value k (h = k / 128, g = k % 128 / 32, l = k % 32): low 4 bits from
  // nibble g / 2 of ql[64h + 32·(g % 2) + l], high 2 from bits 2g of qh[32h + l].
  static HWY_INLINE VF Codes(DF d, const uint8_t* blk, int k) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const int h = k / 128, g = k % 128 / 32, l = k % 32;
    auto lo = hn::PromoteTo(du, hn::LoadU(d8, blk + 64 * h + 32 * (g % 2) + l));
    lo = (g >= 2) ? hn::ShiftRight<4>(lo) : hn::And(lo, hn::Set(du, 0xFu));
    auto hi = hn::PromoteTo(du, hn::LoadU(d8, blk + offsetof(BlockQ6_K, qh) + 32 * h + l));
    hi = hn::And(hn::ShiftRightSame(hi, 2 * g), hn::Set(du, 3u));
    const auto q = hn::BitCast(di, hn::Or(lo, hn::ShiftLeft<4>(hi)));
    return hn::ConvertTo(d, hn::Sub(q, hn::Set(di, 32)));
  }
};

template <class Fmt>
HWY_INLINE VF Weight(VF codes, VF mul, VF sub) {
  if constexpr (Fmt::kHasMin) {
    return hn::Sub(hn::Mul(codes, mul), sub);
  } else {
    (void)sub;
    return hn::Mul(codes, mul);
  }
}

// ---------------------------------------------------------------------------
// Matvec path: 4 rows at a time, decoded in registers.
// ---------------------------------------------------------------------------

template <class Fmt>
HWY_INLINE void Dot4(DF d, const uint8_t* const rows[4], const float* x, int64_t k_size,
                     float out[4]) {
  const int step = static_cast<int>(hn::Lanes(d));
  HWY_ALIGN float mul[4][Fmt::kSubs];
  HWY_ALIGN float sub[4][Fmt::kSubs];
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  const int64_t n_blocks = k_size / kQK_K;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* b0 = rows[0] + b * Fmt::kBlockBytes;
    const uint8_t* b1 = rows[1] + b * Fmt::kBlockBytes;
    const uint8_t* b2 = rows[2] + b * Fmt::kBlockBytes;
    const uint8_t* b3 = rows[3] + b * Fmt::kBlockBytes;
    // The rows stream from memory; the scalar scale reads at the head of each
    // block would stall on every miss: fetch a few blocks ahead.
    if (b + kquant_detail::kPrefetchBlocks < n_blocks) {
      for (int64_t off = 0; off < Fmt::kBlockBytes; off += 64) {
        hwy::Prefetch(b0 + kquant_detail::kPrefetchBlocks * Fmt::kBlockBytes + off);
        hwy::Prefetch(b1 + kquant_detail::kPrefetchBlocks * Fmt::kBlockBytes + off);
        hwy::Prefetch(b2 + kquant_detail::kPrefetchBlocks * Fmt::kBlockBytes + off);
        hwy::Prefetch(b3 + kquant_detail::kPrefetchBlocks * Fmt::kBlockBytes + off);
      }
    }
    Fmt::Scales(b0, mul[0], sub[0]);
    Fmt::Scales(b1, mul[1], sub[1]);
    Fmt::Scales(b2, mul[2], sub[2]);
    Fmt::Scales(b3, mul[3], sub[3]);
    const float* xb = x + b * kQK_K;
    for (int s = 0; s < Fmt::kSubs; ++s) {
      const VF m0 = hn::Set(d, mul[0][s]), m1 = hn::Set(d, mul[1][s]);
      const VF m2 = hn::Set(d, mul[2][s]), m3 = hn::Set(d, mul[3][s]);
      VF o0 = hn::Zero(d), o1 = o0, o2 = o0, o3 = o0;
      if constexpr (Fmt::kHasMin) {
        o0 = hn::Set(d, sub[0][s]), o1 = hn::Set(d, sub[1][s]);
        o2 = hn::Set(d, sub[2][s]), o3 = hn::Set(d, sub[3][s]);
      }
      for (int j = 0; j < Fmt::kSub; j += step) {
        const int k = s * Fmt::kSub + j;
        const VF xv = hn::LoadU(d, xb + k);
        a0 = hn::MulAdd(Weight<Fmt>(Fmt::Codes(d, b0, k), m0, o0), xv, a0);
        a1 = hn::MulAdd(Weight<Fmt>(Fmt::Codes(d, b1, k), m1, o1), xv, a1);
        a2 = hn::MulAdd(Weight<Fmt>(Fmt::Codes(d, b2, k), m2, o2), xv, a2);
        a3 = hn::MulAdd(Weight<Fmt>(Fmt::Codes(d, b3, k), m3, o3), xv, a3);
      }
    }
  }
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
}

// Row groups of 4 over [row_begin, row_end); a short last group repeats its
// first row and drops those results.
HWY_INLINE void GroupRows(const MatMulArgs& a, int64_t n0, const uint8_t* rows[4],
                          int64_t* rows_here) {
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  const int64_t row_bytes = DTypeBytes(a.w.dtype, a.w.strides[0]);
  *rows_here = std::min<int64_t>(4, a.row_end - n0);
  for (int r = 0; r < 4; ++r) rows[r] = base + (r < *rows_here ? n0 + r : n0) * row_bytes;
}

template <class Fmt>
void MatVecRows(const MatMulArgs& a) {
  const DF d;
  const int64_t k_size = a.w.sizes[1];
  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += 4) {
    const uint8_t* rows[4];
    int64_t rows_here;
    GroupRows(a, n0, rows, &rows_here);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      float res[4];
      Dot4<Fmt>(d, rows, a.x + t * k_size, k_size, res);
      float* o = a.out + t * a.out_stride + (n0 - a.row_begin);
      for (int64_t r = 0; r < rows_here; ++r) o[r] = res[r];
    }
  }
}

// ---------------------------------------------------------------------------
// Tile path (prefill): 4 rows decoded once into a per-thread buffer, then
// tiles of 4 rows × MT tokens (MT ≤ 2: 8 accumulators fit 16 registers).
// ---------------------------------------------------------------------------

template <class Fmt>
HWY_INLINE void DecodeRow(DF d, const uint8_t* row, int64_t k_size, float* HWY_RESTRICT dst) {
  const int step = static_cast<int>(hn::Lanes(d));
  HWY_ALIGN float mul[Fmt::kSubs];
  HWY_ALIGN float sub[Fmt::kSubs];
  for (int64_t b = 0; b < k_size / kQK_K; ++b) {
    const uint8_t* blk = row + b * Fmt::kBlockBytes;
    Fmt::Scales(blk, mul, sub);
    float* out = dst + b * kQK_K;
    for (int s = 0; s < Fmt::kSubs; ++s) {
      const VF m = hn::Set(d, mul[s]);
      const VF o = Fmt::kHasMin ? hn::Set(d, sub[s]) : hn::Zero(d);
      for (int j = 0; j < Fmt::kSub; j += step) {
        const int k = s * Fmt::kSub + j;
        hn::Store(Weight<Fmt>(Fmt::Codes(d, blk, k), m, o), d, out + k);
      }
    }
  }
}

template <int MT>
HWY_INLINE void Tile(DF d, const float* HWY_RESTRICT wbuf, int64_t k_size, const float* x,
                     float out[4][2]) {
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const float* w0 = wbuf;
  const float* w1 = wbuf + k_size;
  const float* w2 = wbuf + 2 * k_size;
  const float* w3 = wbuf + 3 * k_size;
  const float* x0 = x;
  const float* x1 = x + (MT > 1 ? k_size : 0);
  VF c00 = hn::Zero(d), c10 = c00, c20 = c00, c30 = c00;
  VF c01 = c00, c11 = c00, c21 = c00, c31 = c00;
  for (int64_t k = 0; k < k_size; k += step) {
    const VF v0 = hn::Load(d, w0 + k), v1 = hn::Load(d, w1 + k);
    const VF v2 = hn::Load(d, w2 + k), v3 = hn::Load(d, w3 + k);
    const VF xa = hn::LoadU(d, x0 + k);
    c00 = hn::MulAdd(v0, xa, c00);
    c10 = hn::MulAdd(v1, xa, c10);
    c20 = hn::MulAdd(v2, xa, c20);
    c30 = hn::MulAdd(v3, xa, c30);
    if constexpr (MT > 1) {
      const VF xb = hn::LoadU(d, x1 + k);
      c01 = hn::MulAdd(v0, xb, c01);
      c11 = hn::MulAdd(v1, xb, c11);
      c21 = hn::MulAdd(v2, xb, c21);
      c31 = hn::MulAdd(v3, xb, c31);
    }
  }
  out[0][0] = hn::GetLane(hn::SumOfLanes(d, c00));
  out[1][0] = hn::GetLane(hn::SumOfLanes(d, c10));
  out[2][0] = hn::GetLane(hn::SumOfLanes(d, c20));
  out[3][0] = hn::GetLane(hn::SumOfLanes(d, c30));
  if constexpr (MT > 1) {
    out[0][1] = hn::GetLane(hn::SumOfLanes(d, c01));
    out[1][1] = hn::GetLane(hn::SumOfLanes(d, c11));
    out[2][1] = hn::GetLane(hn::SumOfLanes(d, c21));
    out[3][1] = hn::GetLane(hn::SumOfLanes(d, c31));
  }
}

template <class Fmt>
void TileRows(const MatMulArgs& a) {
  const DF d;
  const int64_t k_size = a.w.sizes[1];
  std::vector<float>& buf = kquant_detail::TileBuffer();
  // +16: Load needs a 64-byte aligned start; vector storage is 16-byte aligned at best.
  const size_t need = static_cast<size_t>(4 * k_size + 16);
  if (buf.size() < need) buf.resize(need);
  float* wbuf =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  CHECK(wbuf + 4 * k_size <= buf.data() + buf.size());
  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += 4) {
    const uint8_t* rows[4];
    int64_t rows_here;
    GroupRows(a, n0, rows, &rows_here);
    for (int r = 0; r < 4; ++r) {
      if (r < rows_here) {
        DecodeRow<Fmt>(d, rows[r], k_size, wbuf + r * k_size);
      } else {
        std::copy(wbuf, wbuf + k_size, wbuf + r * k_size);
      }
    }
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += 2) {
      const int64_t mt = std::min<int64_t>(2, a.n_tokens - t0);
      float res[4][2];
      if (mt == 2) {
        Tile<2>(d, wbuf, k_size, a.x + t0 * k_size, res);
      } else {
        Tile<1>(d, wbuf, k_size, a.x + t0 * k_size, res);
      }
      for (int64_t j = 0; j < mt; ++j) {
        float* o = a.out + (t0 + j) * a.out_stride + (n0 - a.row_begin);
        for (int64_t r = 0; r < rows_here; ++r) o[r] = res[r][j];
      }
    }
  }
}

template <class Fmt>
void MatMulRowsT(const MatMulArgs& a) {
  if (a.row_end <= a.row_begin || a.n_tokens <= 0) return;
  if (a.n_tokens < kquant_detail::kTileMinTokens) {
    MatVecRows<Fmt>(a);
  } else {
    TileRows<Fmt>(a);
  }
}

void MatMulQ4K(const MatMulArgs& a) { MatMulRowsT<Q4KFmt>(a); }
void MatMulQ6K(const MatMulArgs& a) { MatMulRowsT<Q6KFmt>(a); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(MatMulQ4K);
HWY_EXPORT(MatMulQ6K);

MatMulFn KQuantMatMulKernel(DType w_dtype) {
  ChooseTarget();
  switch (w_dtype) {
    case DType::kQ4_K:
      return HWY_DYNAMIC_DISPATCH(MatMulQ4K);
    case DType::kQ6_K:
      return HWY_DYNAMIC_DISPATCH(MatMulQ6K);
    default:
      return nullptr;
  }
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
