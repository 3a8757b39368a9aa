// Highway helpers shared by the portable q8 kernels (ops/simd/kquant_q8_simd.cc,
// ops/simd/mxfp4_q8_simd.cc): int16 products of q8 activations and decoded
// weights, summed into int32 lanes. A fragment, not a header: each includer
// includes it inside its per-target namespace (after `namespace hn =
// hwy::HWY_NAMESPACE;`), once per Highway target, so it has no include guard.

// int16 vectors of at most 16 lanes: one (AVX2, AVX-512) or two (128-bit
// targets) per 16 values.
using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::RepartitionToWide<D16>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;
constexpr size_t kChunks = 16 / hn::MaxLanes(D16());  // vectors per 16 values
static_assert(kChunks == 1 || kChunks == 2);

// The 16 bytes of v (int8 or uint8) as kChunks int16 vectors.
template <class D, typename T>
HWY_INLINE void Widen(D d16, hn::Vec128<T> v, hn::VFromD<D>* out) {
  if constexpr (hn::MaxLanes(D()) == 16) {
    out[0] = hn::PromoteTo(d16, v);
  } else {
    out[0] = hn::PromoteTo(d16, hn::LowerHalf(v));
    out[1] = hn::PromoteTo(d16, hn::UpperHalf(hn::Half<hn::Full128<T> >(), v));
  }
}

// Per 128-bit block of the result, lane r < 4: the sum of the lanes of v[r]
// in that block (a 4×4 transposition; int32, exact in any order).
template <class DW>
HWY_INLINE hn::VFromD<DW> Fold4(DW d, const hn::VFromD<DW>* v) {
  const hn::Repartition<int64_t, DW> d64;
  // Lanes (v0_0+v0_2, v1_0+v1_2, v0_1+v0_3, v1_1+v1_3) per block, the same for v2, v3.
  const auto a01 = hn::Add(hn::InterleaveLower(d, v[0], v[1]), hn::InterleaveUpper(d, v[0], v[1]));
  const auto a23 = hn::Add(hn::InterleaveLower(d, v[2], v[3]), hn::InterleaveUpper(d, v[2], v[3]));
  const auto lo = hn::InterleaveLower(d64, hn::BitCast(d64, a01), hn::BitCast(d64, a23));
  const auto hi = hn::InterleaveUpper(d64, hn::BitCast(d64, a01), hn::BitCast(d64, a23));
  return hn::Add(hn::BitCast(d, lo), hn::BitCast(d, hi));
}

// Lane r: the sum of all lanes of v[r], r < 4.
template <class DW>
HWY_INLINE hn::Vec128<int32_t> SumLanes4(DW d, const hn::VFromD<DW>* v) {
  const auto b = Fold4(d, v);
  if constexpr (hn::MaxLanes(DW()) == 8) {
    return hn::Add(hn::LowerHalf(b), hn::UpperHalf(hn::Half<DW>(), b));
  } else {
    return b;
  }
}
