// ops/ref against float64 computations written out in the test.
#include "ops/ref/ops_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"

namespace dsv4 {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Normalised mean squared error of `got` against `want`.
double Nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den == 0 ? num : num / den;
}

TEST(OpsRef, MatMulF32MatchesFloat64) {
  const int T = 3, N = 37, K = 70;
  auto x = Random(T * K, 1), w = Random(N * K, 2);
  std::vector<float> out(T * N);
  ops::ref::MatMul(out.data(), x.data(), TensorView::Contiguous(w.data(), DType::kF32, {N, K}), T);
  std::vector<double> want(T * N);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(x[t * K + k]) * w[n * K + k];
      want[t * N + n] = acc;
    }
  EXPECT_LE(Nmse(out, want), 1e-10);
}

TEST(OpsRef, MatMulBf16AndQ8_0DequantizeExactly) {
  const int T = 2, N = 5, K = 64;
  auto x = Random(T * K, 3), w = Random(N * K, 4);
  // bf16 weights: the product must equal the f32 product of the rounded weights.
  std::vector<uint16_t> wb(N * K);
  std::vector<float> wr(N * K);
  for (int i = 0; i < N * K; ++i) {
    wb[i] = F32ToBf16(w[i]);
    wr[i] = Bf16ToF32(wb[i]);
  }
  std::vector<float> a(T * N), b(T * N);
  ops::ref::MatMul(a.data(), x.data(), TensorView::Contiguous(wb.data(), DType::kBF16, {N, K}), T);
  ops::ref::MatMul(b.data(), x.data(), TensorView::Contiguous(wr.data(), DType::kF32, {N, K}), T);
  EXPECT_EQ(a, b);
  // q8_0: blocks of 32 int8 with an f16 scale.
  std::vector<BlockQ8_0> wq(N * K / 32);
  std::vector<float> wqf(N * K);
  for (size_t blk = 0; blk < wq.size(); ++blk) {
    wq[blk].d = F32ToF16(0.01f * float(blk + 1));
    for (int j = 0; j < 32; ++j) {
      wq[blk].qs[j] = static_cast<int8_t>((blk * 7 + j * 13) % 255 - 127);
      wqf[blk * 32 + j] = F16ToF32(wq[blk].d) * wq[blk].qs[j];
    }
  }
  ops::ref::MatMul(a.data(), x.data(), TensorView::Contiguous(wq.data(), DType::kQ8_0, {N, K}), T);
  ops::ref::MatMul(b.data(), x.data(), TensorView::Contiguous(wqf.data(), DType::kF32, {N, K}), T);
  EXPECT_EQ(a, b);
}

// ops::MatMul runs the SIMD kernels (summed in another order than the scalar
// twin, tested in simd_kernels_test): every thread count gives the same bits,
// and all agree with ops::ref to the matmul tolerance.
TEST(OpsRef, ThreadedMatMulEqualsScalar) {
  const int T = 4, N = 301, K = 33;
  auto x = Random(T * K, 5), w = Random(N * K, 6);
  auto wv = TensorView::Contiguous(w.data(), DType::kF32, {N, K});
  std::vector<float> a(T * N), b(T * N), one(T * N);
  ops::ref::MatMul(a.data(), x.data(), wv, T);
  std::vector<double> want(a.begin(), a.end());
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    ops::MatMul(pool, b.data(), x.data(), wv, T);
    if (threads == 1) one = b;
    EXPECT_EQ(one, b) << threads << " threads";
    EXPECT_LE(Nmse(b, want), 1e-10) << threads << " threads";
  }
}

TEST(OpsRef, RmsNorm) {
  const int n = 67;
  auto x = Random(n, 7), w = Random(n, 8);
  std::vector<float> out(n);
  ops::ref::RmsNorm(out.data(), x.data(), w.data(), n, 1e-5f);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double s = 1.0 / std::sqrt(ss / n + 1e-5);
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = x[i] * s * w[i];
  EXPECT_LE(Nmse(out, want), 1e-12);
}

TEST(OpsRef, RopeRotatesPairsAndKeepsNorms) {
  const int heads = 3, hd = 8, rot = 6;
  auto x = Random(heads * hd, 9);
  auto y = x;
  const int pos = 5;
  ops::ref::RopeInterleaved(y.data(), heads, hd, rot, pos, 10000.0f);
  std::vector<double> want(heads * hd);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd; i += 2) {
      const double a = x[h * hd + i], b = x[h * hd + i + 1];
      if (i >= rot) {
        want[h * hd + i] = a;
        want[h * hd + i + 1] = b;
        continue;
      }
      const double ang = pos * std::pow(10000.0, -double(i) / rot);
      want[h * hd + i] = a * std::cos(ang) - b * std::sin(ang);
      want[h * hd + i + 1] = a * std::sin(ang) + b * std::cos(ang);
    }
  EXPECT_LE(Nmse(y, want), 1e-10);
  // Position 0 is the identity.
  auto z = x;
  ops::ref::RopeInterleaved(z.data(), heads, hd, rot, 0, 10000.0f);
  EXPECT_EQ(z, x);
}

TEST(OpsRef, SoftmaxSumsToOneAndMatches) {
  auto x = Random(100, 10, 5.0f);
  auto y = x;
  ops::ref::Softmax(y.data(), 100);
  double mx = -1e30, sum = 0;
  for (float v : x) mx = std::max(mx, double(v));
  for (float v : x) sum += std::exp(v - mx);
  std::vector<double> want(100);
  for (int i = 0; i < 100; ++i) want[i] = std::exp(x[i] - mx) / sum;
  EXPECT_LE(Nmse(y, want), 1e-12);
  // Large values do not overflow.
  std::vector<float> big = {1000.0f, 1000.0f};
  ops::ref::Softmax(big.data(), 2);
  EXPECT_FLOAT_EQ(big[0], 0.5f);
}

TEST(OpsRef, SwiGlu) {
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 5.0f, -0.5f}, out(3);
  ops::ref::SwiGlu(out.data(), g.data(), u.data(), 3);
  for (int i = 0; i < 3; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6);
  }
}

TEST(OpsRef, ArgmaxAndTopKBreakTiesToLowerIndex) {
  std::vector<float> x = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.0f};
  EXPECT_EQ(ops::ref::Argmax(x.data(), 6), 1);
  // NaN is ignored wherever it is; nothing above −inf: 0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> with_nan = {nan, 1.0f, nan, 4.0f, 2.0f};
  EXPECT_EQ(ops::ref::Argmax(with_nan.data(), 5), 3);
  const std::vector<float> none = {nan, -inf, nan};
  EXPECT_EQ(ops::ref::Argmax(none.data(), 3), 0);
  int32_t idx[4];
  ops::ref::TopK(x.data(), 6, 4, idx);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  EXPECT_EQ(idx[2], 2);
  EXPECT_EQ(idx[3], 5);
  int32_t all[8];
  ops::ref::TopK(x.data(), 6, 8, all);  // k > n is clamped to n
  EXPECT_EQ(all[5], 4);
}

}  // namespace
}  // namespace dsv4
