// ops/simd elementwise kernels (rmsnorm, softmax, SwiGLU, interleaved RoPE,
// dot, axpy), one copy per Highway target, picked at run time. Semantics are
// those of the ops/ref twins; sums run lane-parallel, exp is Highway's
// polynomial (contrib/math, ≤ a few ulp), so results match to the fp32
// elementwise tolerance (NMSE ≤ 1e-7), not bit for bit.
#ifndef DSV4_OPS_SIMD_VEC_SIMD_ONCE_
#define DSV4_OPS_SIMD_VEC_SIMD_ONCE_
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops::simd::detail {
inline constexpr int64_t kMaxRopeDim = 4096;  // rotated dims per head, on the stack
}  // namespace dsv4::ops::simd::detail
#endif  // DSV4_OPS_SIMD_VEC_SIMD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/simd/vec_simd.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace dsv4::ops::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

HWY_INLINE float SumVec(DF d, VF v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

float DotImpl(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return SumVec(d, hn::Add(s0, s1)) + tail;
}

float SumImpl(const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, x + i));
    s1 = hn::Add(s1, hn::LoadU(d, x + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, x + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, x + i + 3 * N));
  }
  for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::LoadU(d, x + i));
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return SumVec(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))) + tail;
}

void AxpyImpl(float* y, float alpha, const float* x, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void RmsNormImpl(float* out, const float* x, const float* weight, int64_t n, float eps) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float ss = DotImpl(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const VF vs = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::Mul(hn::Mul(hn::LoadU(d, x + i), vs), hn::LoadU(d, weight + i));
    hn::StoreU(v, d, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void SoftmaxImpl(float* x, int64_t n) {
  if (n <= 0) return;
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  float mx = x[0];
  int64_t i = 0;
  if (n >= N) {
    VF vm = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) vm = hn::Max(vm, hn::LoadU(d, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const VF vmx = hn::Set(d, mx);
  VF vsum = hn::Zero(d);
  i = 0;
  for (; i + N <= n; i += N) {
    const VF e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  float sum = 0.0f;
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  sum += SumVec(d, vsum);
  const VF vden = hn::Set(d, sum);
  i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Div(hn::LoadU(d, x + i), vden), d, x + i);
  for (; i < n; ++i) x[i] /= sum;
}

void SwiGluImpl(float* out, const float* gate, const float* up, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF one = hn::Set(d, 1.0f);
  // exp(88) is finite; beyond it silu(g) is -0 to within 1e-36 either way.
  const VF lim = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF g = hn::LoadU(d, gate + i);
    const VF e = hn::Exp(d, hn::Min(hn::Neg(g), lim));
    const VF silu = hn::Mul(g, hn::Div(one, hn::Add(one, e)));
    hn::StoreU(hn::Mul(silu, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] * (1.0f / (1.0f + std::exp(-gate[i]))) * up[i];
}

void RopeInterleavedImpl(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                         float theta) {
  CHECK(rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim <= detail::kMaxRopeDim,
        "RoPE: rot_dim %lld must be even and at most head_dim %lld (and %lld)",
        static_cast<long long>(rot_dim), static_cast<long long>(head_dim),
        static_cast<long long>(detail::kMaxRopeDim));
  // cos and ±sin per lane, the same angles as ops::ref::RopeInterleaved.
  HWY_ALIGN float cs[detail::kMaxRopeDim];
  HWY_ALIGN float sn[detail::kMaxRopeDim];
  for (int64_t i = 0; i < rot_dim; i += 2) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rot_dim));
    const float angle = static_cast<float>(pos) * freq;
    const float c = std::cos(angle), s = std::sin(angle);
    cs[i] = c, cs[i + 1] = c;
    sn[i] = -s, sn[i + 1] = s;
  }
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t h = 0; h < n_heads; ++h) {
    float* p = x + h * head_dim;
    int64_t i = 0;
    if (N >= 2) {
      for (; i + N <= rot_dim; i += N) {
        // (a, b) -> (a·c − b·s, b·c + a·s): v·cos + swap(v)·(−s, s).
        const VF v = hn::LoadU(d, p + i);
        const VF sw = hn::Reverse2(d, v);
        hn::StoreU(hn::MulAdd(sw, hn::Load(d, sn + i), hn::Mul(v, hn::Load(d, cs + i))), d, p + i);
      }
    }
    for (; i < rot_dim; i += 2) {
      const float a = p[i], b = p[i + 1];
      p[i] = a * cs[i] + b * sn[i];
      p[i + 1] = a * sn[i + 1] + b * cs[i];
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace dsv4::ops::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv4::ops::simd {

HWY_EXPORT(DotImpl);
HWY_EXPORT(SumImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(RopeInterleavedImpl);

float Dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n);
}
float Sum(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumImpl)(x, n); }
void Axpy(float* y, float alpha, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(y, alpha, x, n);
}
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(out, x, weight, n, eps);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
void SwiGlu(float* out, const float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(out, gate, up, n);
}
void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                     float theta) {
  HWY_DYNAMIC_DISPATCH(RopeInterleavedImpl)(x, n_heads, head_dim, rot_dim, pos, theta);
}

}  // namespace dsv4::ops::simd
#endif  // HWY_ONCE
