// The q8_0 × q8_0 path (llama.cpp's arithmetic for GGUF q8_0 weights, the
// default with q8 activations): the ref quantisation against gguf-py's port of
// ggml's quantize_row_q8_0_ref (tests/data/kquant/q8_0_act_golden.bin,
// tools/reference/make_q8_0_goldens.py): its scales bit for bit, its codes but
// at the halves, which the ref rounds to even as llama.cpp's x86 CPU backend
// does (quantize_row_q8_0, AVX2; id = 127 / max |x|); the ref dot against the dequantised
// weights times the dequantised activations in double; the AVX-512 VNNI
// kernels (ops/simd/q8_0_x86.cc) against the ref bit for bit: the activation
// quantisation, and products over K = 32…5632, N with remainders of the
// 8-row panels, T = 1…40 (the one-token path below 6 tokens, the 16-token
// lanes from 6), row sub-ranges with a wider output stride, misaligned
// weights; ops::MatMul through the pool in the default mode, and the f32
// mode still taking the f32 kernels.
//
// The kernels exist only on x86-64 CPUs with AVX-512 VNNI; elsewhere their
// tests are reported as skipped with the reason. ops:: then runs the portable
// kernels (ops/simd/mxfp4_q8_simd.cc, tested in mxfp4_q8_test.cc), the same
// bits, so the ops::MatMul test runs on every CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../common/matmul_fixtures.h"
#include "../common/scoped_kquant_activations.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/kquant_ref.h"
#include "ops/ref/ops_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"

namespace dsv4 {
namespace {

namespace simd = ::dsv4::ops::simd;
using ::dsv4::testing::KernelArgs;
using ::dsv4::testing::MakeWeight;
using ::dsv4::testing::ScopedKQuantActivations;
using ::dsv4::testing::Weight;

#define DSV4_REQUIRE_Q8_0_Q8() \
  DSV4_REQUIRE_KERNEL(simd::Q8_0Q8MatMulKernel(), "no AVX-512 VNNI (or DSV4_KERNELS=portable)")

struct Golden {
  std::vector<float> x;
  std::vector<BlockQ8_0> q;
};

Golden ReadGolden() {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/kquant/q8_0_act_golden.bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  char magic[4];
  uint32_t n = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&n), 4);
  EXPECT_EQ(std::string(magic, 4), "Q80G");
  Golden g;
  g.x.resize(size_t{n} * 32);
  g.q.resize(n);
  in.read(reinterpret_cast<char*>(g.x.data()), static_cast<std::streamsize>(g.x.size() * 4));
  in.read(reinterpret_cast<char*>(g.q.data()), static_cast<std::streamsize>(g.q.size() * 34));
  EXPECT_TRUE(in.good()) << path;
  EXPECT_EQ(in.peek(), EOF) << path;
  return g;
}

void ExpectSameBlocks(const BlockQ8_0* got, const BlockQ8_0* want, size_t n, const char* what) {
  for (size_t b = 0; b < n; ++b) {
    ASSERT_EQ(got[b].d, want[b].d) << what << " block " << b;
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(got[b].qs[i], want[b].qs[i]) << what << " block " << b << " value " << i;
    }
  }
}

// The ref follows llama.cpp's x86 quantize_row_q8_0 (AVX2: id = 127 / amax,
// ties to even), not ggml's quantize_row_q8_0_ref that gguf-py ports
// (id = 1 / d, ties away from zero): the scales are gguf-py's bit for bit,
// every code is x · (127 / amax) rounded to nearest even, and a code differs
// from gguf-py's only where gguf-py's x · (1 / d) is within 2^-16 of a half
// (an exact tie, or one the two ids' last bit puts on either side of it). The
// golden holds such ties, so the two rules are told apart.
TEST(Q8_0Q8, RefQuantisationIsLlamaCppX86s) {
  const Golden g = ReadGolden();
  ASSERT_GT(g.q.size(), 40u);
  std::vector<BlockQ8_0> got(g.q.size());
  ops::ref::QuantizeRowQ8_0(g.x.data(), static_cast<int64_t>(g.x.size()), got.data());
  int differing = 0;
  for (size_t b = 0; b < g.q.size(); ++b) {
    ASSERT_EQ(got[b].d, g.q[b].d) << "block " << b;
    const float* xb = g.x.data() + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f, id_ref = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(got[b].qs[i], static_cast<int8_t>(std::nearbyint(xb[i] * id)))
          << "block " << b << " value " << i;
      if (got[b].qs[i] != g.q[b].qs[i]) {
        const float v = std::fabs(xb[i] * id_ref);
        EXPECT_LE(std::fabs(v - std::trunc(v) - 0.5f), 0x1p-16f) << "block " << b << " value " << i;
        ++differing;
      }
    }
  }
  EXPECT_GT(differing, 0);  // the golden's ties: ggml's _ref rounds them away from zero
}

TEST(Q8_0Q8, SimdQuantisationMatchesRef) {
  DSV4_REQUIRE_Q8_0_Q8();
  const Golden g = ReadGolden();
  std::vector<BlockQ8_0> got(g.q.size());
  simd::Q8_0QuantizeKernel()(g.x.data(), static_cast<int64_t>(g.x.size()), got.data());
  std::vector<BlockQ8_0> ref_q(g.q.size());
  ops::ref::QuantizeRowQ8_0(g.x.data(), static_cast<int64_t>(g.x.size()), ref_q.data());
  ExpectSameBlocks(got.data(), ref_q.data(), got.size(), "simd vs ref on the golden's values");
  // Random rows of many magnitudes, and every tie x = (k + 1/2) · d.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 400);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / 32 % 40) - 20);
  }
  for (int k = 0; k < 32; ++k) x[k] = (k == 0) ? 127.0f : static_cast<float>(k - 16) + 0.5f;
  std::vector<BlockQ8_0> want(x.size() / 32), simd_q(x.size() / 32);
  ops::ref::QuantizeRowQ8_0(x.data(), static_cast<int64_t>(x.size()), want.data());
  simd::Q8_0QuantizeKernel()(x.data(), static_cast<int64_t>(x.size()), simd_q.data());
  ExpectSameBlocks(simd_q.data(), want.data(), want.size(), "simd vs ref");
}

// The ref's integer dot and float steps against the dequantised operands in
// double: (dw·dx)·isum per block is that block's exact product sum, rounded.
TEST(Q8_0Q8, RefDotMatchesDequantisedOperands) {
  const int64_t k = 2048, n_blocks = k / 32;
  const Weight w = MakeWeight(DType::kQ8_0, 3, k, 7);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(k);
  for (float& v : x) v = normal(rng);
  std::vector<BlockQ8_0> xq(n_blocks);
  ops::ref::QuantizeRowQ8_0(x.data(), k, xq.data());
  std::vector<float> wf(k), xf(k);
  DequantizeRow(DType::kQ8_0, xq.data(), k, xf.data());
  for (int64_t r = 0; r < 3; ++r) {
    const uint8_t* row = w.bytes.data() + w.offset + r * DTypeBytes(DType::kQ8_0, k);
    DequantizeRow(DType::kQ8_0, row, k, wf.data());
    double exact = 0, norm = 0;
    for (int64_t i = 0; i < k; ++i) {
      exact += double{wf[i]} * xf[i];
      norm += std::fabs(double{wf[i]} * xf[i]);
    }
    const float got = ops::ref::DotQ8_0Q8_0(row, xq.data(), n_blocks);
    EXPECT_LE(std::fabs(got - exact), 1e-5 * norm) << "row " << r;
  }
}

// out for rows [b, e) and T tokens, out_stride = e − b + 3: the kernel against
// ops::ref::MatMulQ8_0Q8_0, bit for bit; nothing written outside.
void ExpectKernelEqualsRef(const Weight& w, int64_t t, int64_t b, int64_t e, uint32_t seed) {
  const int64_t k = w.k, stride = e - b + 3;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(t * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 97 == 5 ? 30.0f : 1.0f);
  std::vector<float> want(t * w.n);
  ops::ref::MatMulQ8_0Q8_0(want.data(), x.data(), w.view(), t);
  const float kUnwritten = -7.0f;
  std::vector<float> got(t * stride, kUnwritten);
  ASSERT_TRUE(simd::Q8_0Q8MatMulKernel()(KernelArgs(w, got.data(), stride, x.data(), t, b, e)));
  const std::string what = "N=" + std::to_string(w.n) + " K=" + std::to_string(k) +
                           " T=" + std::to_string(t) + " rows " + std::to_string(b) + "-" +
                           std::to_string(e);
  for (int64_t tt = 0; tt < t; ++tt) {
    for (int64_t n = b; n < e; ++n) {
      const float g = got[tt * stride + (n - b)], wv = want[tt * w.n + n];
      ASSERT_EQ(std::memcmp(&g, &wv, 4), 0)
          << what << " t=" << tt << " n=" << n << ": " << g << " vs ref " << wv;
    }
    for (int64_t j = e - b; j < stride; ++j) {
      ASSERT_EQ(got[tt * stride + j], kUnwritten) << what << ": wrote past the row range";
    }
  }
}

TEST(Q8_0Q8, KernelEqualsRefBitForBit) {
  DSV4_REQUIRE_Q8_0_Q8();
  uint32_t seed = 11;
  for (const int64_t k : {32, 64, 96, 160, 2048, 5632}) {
    for (const int64_t n : {1, 7, 8, 9, 33}) {
      for (const size_t offset : {size_t{0}, size_t{5}}) {
        const Weight w = MakeWeight(DType::kQ8_0, n, k, ++seed, offset);
        for (const int64_t t : {1, 2, 5, 6, 7, 16, 17, 40}) {
          if (k == 5632 && t > 7 && n > 9) continue;  // the big shapes once is enough
          ExpectKernelEqualsRef(w, t, 0, n, ++seed);
          if (n > 2) ExpectKernelEqualsRef(w, t, 1, n - 1, ++seed);
        }
      }
    }
  }
}

TEST(Q8_0Q8, DeclinesOtherWeights) {
  DSV4_REQUIRE_Q8_0_Q8();
  ::dsv4::testing::ExpectDeclines(simd::Q8_0Q8MatMulKernel(), MakeWeight(DType::kF16, 8, 64, 1), 1,
                                  "an f16 weight");
}

// ops::MatMul on a q8_0 weight: in the default q8 mode the q8_0 × q8_0 path
// (the ref's bits, 2 threads, prefill- and decode-shaped); with f32
// activations the f32 kernels (the dequantised weights' products).
TEST(Q8_0Q8, MatMulTakesThePathItsModeNames) {
  ThreadPool pool(2);
  const int64_t n = 300, k = 1024;
  const Weight w = MakeWeight(DType::kQ8_0, n, k, 21);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t t : {1, 24}) {
    std::vector<float> x(t * k);
    for (float& v : x) v = normal(rng);
    std::vector<float> want(t * n), got(t * n), f32(t * n), f32_ref(t * n);
    ops::ref::MatMulQ8_0Q8_0(want.data(), x.data(), w.view(), t);
    {
      const ScopedKQuantActivations q8(ops::KQuantActivations::kQ8K);
      ops::MatMul(pool, got.data(), x.data(), w.view(), t);
    }
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "T=" << t << " i=" << i;
    }
    {
      const ScopedKQuantActivations f(ops::KQuantActivations::kF32);
      ops::MatMul(pool, f32.data(), x.data(), w.view(), t);
    }
    ops::ref::MatMul(f32_ref.data(), x.data(), w.view(), t, n);
    double max_q8 = 0, max_f32 = 0, mag = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_q8 = std::max<double>(max_q8, std::fabs(got[i] - f32_ref[i]));
      max_f32 = std::max<double>(max_f32, std::fabs(f32[i] - f32_ref[i]));
      mag = std::max<double>(mag, std::fabs(f32_ref[i]));
    }
    EXPECT_LE(max_f32, 1e-5 * mag) << "T=" << t;   // f32 mode: the f32 kernels
    EXPECT_GT(max_q8, 10 * max_f32) << "T=" << t;  // q8 mode: the activations' rounding shows
    EXPECT_LE(max_q8, 2e-2 * mag) << "T=" << t;
  }
}

}  // namespace
}  // namespace dsv4
