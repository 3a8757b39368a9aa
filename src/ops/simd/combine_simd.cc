// ops/simd LinearCombine (mHC's stream collapse and expansion), one copy per
// Highway target, picked at run time: out[j] = Σ_i c[i] · x[i][j] from 0 in
// order of the rows, each product rounded before its add — the bits of the
// plain loops of ops::ref::LinearCombine, which baseline x86-64 has no FMA to
// contract into. This file is compiled with -ffp-contract=off
// (src/ops/CMakeLists.txt): GCC would otherwise fuse the Mul and the Add on
// targets with FMA.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/combine_simd.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include "ops/simd/simd_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void LinearCombineImpl(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n) {
  const hn::CappedTag<float, 16> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {  // two vectors per row: 2·n_x loads in flight
    auto a0 = hn::Zero(d), a1 = hn::Zero(d);
    for (int64_t i = 0; i < n_x; ++i) {
      const auto ci = hn::Set(d, c[i]);
      a0 = hn::Add(a0, hn::Mul(ci, hn::LoadU(d, x[i] + j)));
      a1 = hn::Add(a1, hn::Mul(ci, hn::LoadU(d, x[i] + j + N)));
    }
    hn::StoreU(a0, d, out + j);
    hn::StoreU(a1, d, out + j + N);
  }
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n_x; ++i) {
      const float product = c[i] * x[i][j];
      acc += product;
    }
    out[j] = acc;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(LinearCombineImpl);

void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LinearCombineImpl)(out, x, c, n_x, n);
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
