// ops/simd LinearCombine and LinearCombineRows (mHC's stream collapse and
// expansion), one copy per Highway target, picked at run time: out[j] =
// Σ_i c[i] · x[i][j] from 0 in order of the rows, each product rounded before
// its add — the bits of the plain loops of ops::ref, which baseline x86-64
// has no FMA to contract into. This file is compiled with -ffp-contract=off
// (src/ops/CMakeLists.txt): GCC would otherwise fuse the Mul and the Add on
// targets with FMA.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/combine_simd.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include "base/check.h"
#include "ops/ref/ops_ref.h"
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

// Per step of 2 vectors: each output's sums into tmp (the x vectors stay in
// L1 after the first output), then tmp to the outputs, so that outputs may
// overwrite inputs. One pass over the x rows where n_out LinearCombines take
// n_out (mHC's expansion: 4 outputs of 5 rows of 2048).
void LinearCombineRowsImpl(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                           const float* c, int64_t n) {
  constexpr int64_t kMaxRows = ref::kMaxCombineRows;
  CHECK(n_out <= kMaxRows && n_x <= 2 * kMaxRows,
        "LinearCombineRows: %lld outputs of %lld rows, at most %lld of %lld",
        static_cast<long long>(n_out), static_cast<long long>(n_x),
        static_cast<long long>(kMaxRows), static_cast<long long>(2 * kMaxRows));
  const hn::CappedTag<float, 16> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN float tmp[kMaxRows * 32];
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    for (int64_t k = 0; k < n_out; ++k) {
      const float* ck = c + k * n_x;
      auto a0 = hn::Zero(d), a1 = hn::Zero(d);
      for (int64_t i = 0; i < n_x; ++i) {
        const auto ci = hn::Set(d, ck[i]);
        a0 = hn::Add(a0, hn::Mul(ci, hn::LoadU(d, x[i] + j)));
        a1 = hn::Add(a1, hn::Mul(ci, hn::LoadU(d, x[i] + j + N)));
      }
      hn::Store(a0, d, tmp + k * 2 * N);
      hn::Store(a1, d, tmp + k * 2 * N + N);
    }
    for (int64_t k = 0; k < n_out; ++k) {
      hn::StoreU(hn::Load(d, tmp + k * 2 * N), d, out[k] + j);
      hn::StoreU(hn::Load(d, tmp + k * 2 * N + N), d, out[k] + j + N);
    }
  }
  if (j == n) return;
  // The remainder: the scalar twin on the rows from j.
  float* out_tail[kMaxRows];
  const float* x_tail[2 * kMaxRows];
  for (int64_t k = 0; k < n_out; ++k) out_tail[k] = out[k] + j;
  for (int64_t i = 0; i < n_x; ++i) x_tail[i] = x[i] + j;
  ref::LinearCombineRows(out_tail, n_out, x_tail, n_x, c, n - j);
}

}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(LinearCombineImpl);
HWY_EXPORT(LinearCombineRowsImpl);

void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LinearCombineImpl)(out, x, c, n_x, n);
}

void LinearCombineRows(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                       const float* c, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LinearCombineRowsImpl)(out, n_out, x, n_x, c, n);
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
