// GGUF MXFP4 weights × q8_0 activations (llama.cpp's arithmetic):
//   - ops::ref::DotMxfp4Q8_0 against Σ (kvalues·2^(e−128))·(d·q8) in double,
//     within 1e-6 · Σ|…| (one rounding per product and sum per block).
//   - the ops/simd kernel (GgmlMxfp4Q8Kernel) against ops/ref bit for bit on
//     every Highway target this build compiled and this CPU runs: K =
//     32·{1,2,3,5}, 4096 and 7168, N with remainders of the 4-row groups, T =
//     1…5, 17 and 64, row sub-ranges into a wider output stride, misaligned
//     weights, the edge scale bytes 0, 1, 2, 127, 254, 255 and code 8 (−0),
//     all-zero tokens.
//   - ops::MatMul on a ThreadPool and ops::MatMulRows against
//     ops::ref::MatMulGgmlQ8 bit for bit.
// And GGUF q8_0 weights × q8_0 activations on the same file's portable kernel
// (Q8_0Q8PortableKernel): against ops::ref::DotQ8_0Q8_0 bit for bit on every
// target over the same shapes (zero, subnormal and negative f16 scales,
// codes −128 … 127), its activation quantisation (Q8_0QuantizePortableKernel)
// against ops::ref::QuantizeRowQ8_0 byte for byte, and ops::MatMul / MatMulRows against
// ops::ref::MatMulQ8_0Q8_0 bit for bit on this CPU (whichever kernel it takes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/for_each_target.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/ref/kquant_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::ForEachTarget;

constexpr int64_t kBlockBytes = sizeof(BlockMXFP4);  // 17 bytes per 32 values
constexpr int kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr uint8_t kEdgeScales[] = {0, 1, 2, 127, 254, 255};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// [n, k] MXFP4 behind `offset` leading bytes: random codes, scale bytes in
// [118, 132] (values of a few units), or with `edge` cycling through
// kEdgeScales and every third block's codes all 8 (−0) in its low nibbles.
struct Mxfp4Weight {
  int64_t n = 0, k = 0;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
  TensorView view() const {
    return TensorView::Contiguous(bytes.data() + offset, DType::kMXFP4, {n, k});
  }
};

Mxfp4Weight MakeWeight(int64_t n, int64_t k, uint32_t seed, size_t offset = 0, bool edge = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), scale(118, 132);
  Mxfp4Weight w{n, k, offset, {}};
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(DType::kMXFP4, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n * k / 32; ++b) {
    uint8_t* blk = w.bytes.data() + offset + b * kBlockBytes;
    blk[0] = edge ? kEdgeScales[b % 6] : static_cast<uint8_t>(scale(rng));
    if (edge && b % 3 == 0) {
      for (int j = 1; j < kBlockBytes; ++j) blk[j] = static_cast<uint8_t>((blk[j] & 0xF0) | 8);
    }
  }
  return w;
}

// T tokens of K normal values; token 2 (when there) all zeros.
std::vector<float> Activations(int64_t T, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(T * K);
  for (auto& v : x) v = dist(rng);
  if (T > 2) std::fill(x.begin() + 2 * K, x.begin() + 3 * K, 0.0f);
  return x;
}

std::vector<BlockQ8_0> QuantizeTokens(const std::vector<float>& x, int64_t T, int64_t K) {
  std::vector<BlockQ8_0> q(T * K / 32);
  for (int64_t t = 0; t < T; ++t)
    ops::ref::QuantizeRowQ8_0(x.data() + t * K, K, q.data() + t * K / 32);
  return q;
}

const uint8_t* Row(const Mxfp4Weight& w, int64_t n) {
  return static_cast<const uint8_t*>(w.view()[n].data);
}

// out[t·N + n] by DotMxfp4Q8_0.
std::vector<float> RefOut(const Mxfp4Weight& w, const std::vector<BlockQ8_0>& xq, int64_t T) {
  const int64_t N = w.n, K = w.k;
  std::vector<float> out(T * N);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      out[t * N + n] = ops::ref::DotMxfp4Q8_0(Row(w, n), xq.data() + t * (K / 32), K);
    }
  }
  return out;
}

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i]) && ++bad <= 3) {
      ADD_FAILURE() << what << " output " << i << ": got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

ops::simd::MatMulArgs Args(float* out, int64_t out_stride, const TensorView& w, int64_t n_tokens,
                           int64_t row_begin, int64_t row_end) {
  ops::simd::MatMulArgs a;
  a.out = out;
  a.out_stride = out_stride;
  a.n_tokens = n_tokens;
  a.w = w;
  a.row_begin = row_begin;
  a.row_end = row_end;
  return a;
}

// ---- ref against double ----

TEST(Mxfp4Q8RefTest, DotMatchesDoubleSum) {
  const int64_t N = 7, K = 5 * 32 + 4096, T = 4;
  EXPECT_EQ(ops::ref::ActivationFormat(DType::kMXFP4), ops::ref::ActFormat::kQ8_0);
  const Mxfp4Weight w = MakeWeight(N, K, 11, 1);
  const std::vector<float> x = Activations(T, K, 12);
  const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, K);
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* row = Row(w, n);
    for (int64_t t = 0; t < T; ++t) {
      double s = 0, mag = 0;
      for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = row + b * kBlockBytes;
        const double scale = std::ldexp(1.0, blk[0] - 128);
        const BlockQ8_0& xb = xq[t * (K / 32) + b];
        const double dx = F16ToF32(xb.d);
        for (int j = 0; j < 32; ++j) {
          const int code = j < 16 ? (blk[1 + j] & 15) : (blk[1 + j - 16] >> 4);
          const double p = kValues[code] * scale * (dx * xb.qs[j]);
          s += p;
          mag += std::fabs(p);
        }
      }
      const float got = ops::ref::DotMxfp4Q8_0(row, xq.data() + t * (K / 32), K);
      EXPECT_NEAR(got, s, 1e-6 * mag + 1e-30) << "n " << n << " token " << t;
      if (t == 2) {
        EXPECT_EQ(got, 0.0f) << "all-zero token";
      } else {
        EXPECT_GT(mag, 0.0);
      }
    }
  }
}

// ---- SIMD against ref ----

TEST(Mxfp4Q8SimdTest, KernelExistsForMxfp4Only) {
  EXPECT_NE(ops::simd::GgmlMxfp4Q8Kernel(DType::kMXFP4), nullptr);
  for (DType other : {DType::kF32, DType::kQ8_0, DType::kQ4_K, DType::kFp4E2m1, DType::kIQ4_NL}) {
    EXPECT_EQ(ops::simd::GgmlMxfp4Q8Kernel(other), nullptr) << DTypeName(other);
  }
}

TEST(Mxfp4Q8SimdTest, MatchesRefBitForBitOnEveryTarget) {
  struct Shape {
    int64_t K;
    std::vector<int64_t> ns;
  };
  const Shape shapes[] = {{32, {1, 3, 4, 5, 9}}, {64, {1, 6}},   {96, {3, 7}},
                          {160, {2, 5}},         {4096, {5, 8}}, {7168, {3}}};
  for (const Shape& s : shapes) {
    for (int64_t N : s.ns) {
      const Mxfp4Weight w = MakeWeight(N, s.K, static_cast<uint32_t>(s.K + N));
      for (int64_t T : {1, 2, 3, 4, 5, 17, 64}) {
        const std::vector<float> x = Activations(T, s.K, static_cast<uint32_t>(T * 7 + N));
        const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, s.K);
        const std::vector<float> want = RefOut(w, xq, T);
        const std::string what =
            "K=" + std::to_string(s.K) + " N=" + std::to_string(N) + " T=" + std::to_string(T);
        ForEachTarget([&] {
          std::vector<float> got(T * N, NAN);
          ops::simd::GgmlMxfp4Q8Kernel(DType::kMXFP4)(Args(got.data(), N, w.view(), T, 0, N),
                                                      xq.data());
          ExpectSameBits(got, want, what);
        });
      }
    }
  }
}

TEST(Mxfp4Q8SimdTest, EdgeScalesAndNegativeZeroCodes) {
  const int64_t N = 9, K = 12 * 32;
  const Mxfp4Weight w = MakeWeight(N, K, 5, 0, /*edge=*/true);
  for (int64_t T : {1, 3, 17}) {
    const std::vector<float> x = Activations(T, K, 6);
    const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, K);
    const std::vector<float> want = RefOut(w, xq, T);
    ForEachTarget([&] {
      std::vector<float> got(T * N, NAN);
      ops::simd::GgmlMxfp4Q8Kernel(DType::kMXFP4)(Args(got.data(), N, w.view(), T, 0, N),
                                                  xq.data());
      ExpectSameBits(got, want, "edge T=" + std::to_string(T));
    });
  }
  // Every scale byte on its own (a one-block row), against a large activation.
  for (int e_int = 0; e_int < 256; ++e_int) {
    const auto e = static_cast<uint8_t>(e_int);
    Mxfp4Weight one = MakeWeight(1, 32, e);
    one.bytes[0] = e;
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (1000.0f + 37.0f * j);
    const std::vector<BlockQ8_0> xq = QuantizeTokens(x, 1, 32);
    const std::vector<float> want = RefOut(one, xq, 1);
    ForEachTarget([&] {
      std::vector<float> got(1, NAN);
      ops::simd::GgmlMxfp4Q8Kernel(DType::kMXFP4)(Args(got.data(), 1, one.view(), 1, 0, 1),
                                                  xq.data());
      ExpectSameBits(got, want, "scale byte " + std::to_string(e));
    });
  }
}

TEST(Mxfp4Q8SimdTest, MisalignedWeightsAndRowRangeWithWideStride) {
  const int64_t N = 11, K = 7 * 32;
  for (size_t off : {size_t{1}, size_t{3}, size_t{7}}) {
    const Mxfp4Weight w = MakeWeight(N, K, 77 + static_cast<uint32_t>(off), off);
    for (int64_t T : {1, 2, 5, 17}) {
      const std::vector<float> x = Activations(T, K, 5);
      const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, K);
      const std::vector<float> want = RefOut(w, xq, T);
      // Rows [2, 9) into an output with stride 10 (sentinels elsewhere).
      const int64_t begin = 2, end = 9, stride = 10;
      ForEachTarget([&] {
        std::vector<float> got(T * stride, -7.0f);
        ops::simd::GgmlMxfp4Q8Kernel(DType::kMXFP4)(
            Args(got.data(), stride, w.view(), T, begin, end), xq.data());
        for (int64_t tok = 0; tok < T; ++tok) {
          for (int64_t j = 0; j < stride; ++j) {
            const float g = got[tok * stride + j];
            if (j >= end - begin) {
              EXPECT_EQ(g, -7.0f) << "wrote past the row range";
              continue;
            }
            EXPECT_EQ(Bits(g), Bits(want[tok * N + begin + j]))
                << "off " << off << " T " << T << " n " << begin + j;
          }
        }
      });
    }
  }
}

// ops::MatMul (pool of 2) and ops::MatMulRows dispatch to the kernel: bit for
// bit ops::ref::MatMulGgmlQ8.
TEST(Mxfp4Q8SimdTest, OpsMatMulMatchesRefMatMul) {
  ASSERT_EQ(ops::GetKQuantActivations(), ops::KQuantActivations::kQ8K);
  ThreadPool pool(2);
  const int64_t N = 301, K = 4096;
  const Mxfp4Weight w = MakeWeight(N, K, 9);
  for (int64_t T : {1, 4, 11, 40}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, K, 10);
    std::vector<float> want(T * N), got(T * N, NAN), rows(T * N, NAN);
    ops::ref::MatMulGgmlQ8(want.data(), x.data(), w.view(), T);
    ops::MatMul(pool, got.data(), x.data(), w.view(), T);
    ops::MatMulRows(rows.data(), N, x.data(), w.view(), T, 0, N);
    ExpectSameBits(got, want, "MatMul");
    ExpectSameBits(rows, want, "MatMulRows");
  }
}

// ---- q8_0 weights ----

// [n, k] q8_0 behind `offset` leading bytes: random codes, f16 scales of either
// sign in [−0.02, 0.02]; row 0's first block scale 0, its second subnormal.
Mxfp4Weight MakeQ8_0Weight(int64_t n, int64_t k, uint32_t seed, size_t offset = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  Mxfp4Weight w{n, k, offset, {}};
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(DType::kQ8_0, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n * k / 32; ++b) {
    const uint16_t h = F32ToF16(scale(rng));
    std::memcpy(w.bytes.data() + offset + b * sizeof(BlockQ8_0), &h, 2);
  }
  const uint16_t zero = 0, sub = 0x8005;  // 0 and a negative subnormal
  std::memcpy(w.bytes.data() + offset, &zero, 2);
  if (k >= 64) std::memcpy(w.bytes.data() + offset + sizeof(BlockQ8_0), &sub, 2);
  return w;
}

TensorView Q8View(const Mxfp4Weight& w) {
  return TensorView::Contiguous(w.bytes.data() + w.offset, DType::kQ8_0, {w.n, w.k});
}

std::vector<float> RefOutQ8_0(const Mxfp4Weight& w, const std::vector<BlockQ8_0>& xq, int64_t T) {
  const int64_t N = w.n, nb = w.k / 32;
  std::vector<float> out(T * N);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      out[t * N + n] = ops::ref::DotQ8_0Q8_0(static_cast<const uint8_t*>(Q8View(w)[n].data),
                                             xq.data() + t * nb, nb);
    }
  }
  return out;
}

TEST(Q8_0Q8PortableTest, MatchesRefBitForBitOnEveryTarget) {
  ASSERT_NE(ops::simd::Q8_0Q8PortableKernel(), nullptr);
  struct Shape {
    int64_t K;
    std::vector<int64_t> ns;
  };
  const Shape shapes[] = {{32, {1, 3, 4, 5, 9}}, {64, {1, 6}},   {96, {3, 7}},
                          {160, {2, 5}},         {4096, {5, 8}}, {7168, {3}}};
  for (const Shape& s : shapes) {
    for (int64_t N : s.ns) {
      const Mxfp4Weight w = MakeQ8_0Weight(N, s.K, static_cast<uint32_t>(s.K + N));
      for (int64_t T : {1, 2, 3, 4, 5, 17, 64}) {
        const std::vector<float> x = Activations(T, s.K, static_cast<uint32_t>(T * 7 + N));
        const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, s.K);
        const std::vector<float> want = RefOutQ8_0(w, xq, T);
        const std::string what =
            "K=" + std::to_string(s.K) + " N=" + std::to_string(N) + " T=" + std::to_string(T);
        ForEachTarget([&] {
          std::vector<float> got(T * N, NAN);
          ops::simd::Q8_0Q8PortableKernel()(Args(got.data(), N, Q8View(w), T, 0, N), xq.data());
          ExpectSameBits(got, want, what);
        });
      }
    }
  }
}

TEST(Q8_0Q8PortableTest, MisalignedWeightsAndRowRangeWithWideStride) {
  const int64_t N = 11, K = 7 * 32;
  for (size_t off : {size_t{1}, size_t{3}, size_t{7}}) {
    const Mxfp4Weight w = MakeQ8_0Weight(N, K, 77 + static_cast<uint32_t>(off), off);
    for (int64_t T : {1, 2, 5, 17}) {
      const std::vector<float> x = Activations(T, K, 5);
      const std::vector<BlockQ8_0> xq = QuantizeTokens(x, T, K);
      const std::vector<float> want = RefOutQ8_0(w, xq, T);
      const int64_t begin = 2, end = 9, stride = 10;
      ForEachTarget([&] {
        std::vector<float> got(T * stride, -7.0f);
        ops::simd::Q8_0Q8PortableKernel()(Args(got.data(), stride, Q8View(w), T, begin, end),
                                          xq.data());
        for (int64_t tok = 0; tok < T; ++tok) {
          for (int64_t j = 0; j < stride; ++j) {
            const float g = got[tok * stride + j];
            if (j >= end - begin) {
              EXPECT_EQ(g, -7.0f) << "wrote past the row range";
              continue;
            }
            EXPECT_EQ(Bits(g), Bits(want[tok * N + begin + j]))
                << "off " << off << " T " << T << " n " << begin + j;
          }
        }
      });
    }
  }
}

// ops::MatMul (pool of 2) and ops::MatMulRows in the default q8 mode: bit for
// bit ops::ref::MatMulQ8_0Q8_0, on every CPU.
TEST(Q8_0Q8PortableTest, OpsMatMulMatchesRefMatMul) {
  ASSERT_EQ(ops::GetKQuantActivations(), ops::KQuantActivations::kQ8K);
  ThreadPool pool(2);
  const int64_t N = 301, K = 1024;
  const Mxfp4Weight w = MakeQ8_0Weight(N, K, 9);
  for (int64_t T : {1, 4, 11, 40}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, K, 10);
    std::vector<float> want(T * N), got(T * N, NAN), rows(T * N, NAN);
    ops::ref::MatMulQ8_0Q8_0(want.data(), x.data(), Q8View(w), T);
    ops::MatMul(pool, got.data(), x.data(), Q8View(w), T);
    ops::MatMulRows(rows.data(), N, x.data(), Q8View(w), T, 0, N);
    ExpectSameBits(got, want, "MatMul");
    ExpectSameBits(rows, want, "MatMulRows");
  }
}

// The portable activation quantisation against ops::ref::QuantizeRowQ8_0
// byte for byte on every target: normal values, exact ties of x·id (a block
// whose max |x| is 127, so id = 1, holding ±k.5), an all-zero block, tiny and
// large magnitudes.
TEST(Q8_0Q8PortableTest, QuantisationMatchesRefOnEveryTarget) {
  const int64_t K = 7 * 32;
  std::vector<float> x = Activations(1, K, 31);
  for (int j = 0; j < 32; ++j) x[j] = j == 0 ? 127.0f : (j % 2 ? -1.0f : 1.0f) * (0.5f + j);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  for (int j = 64; j < 96; ++j) x[j] *= 1e-30f;
  for (int j = 96; j < 128; ++j) x[j] *= 1e20f;
  for (int j = 128; j < 160; ++j) x[j] = static_cast<float>(j % 7) - 3.0f;  // exact codes
  std::vector<BlockQ8_0> want(K / 32);
  ops::ref::QuantizeRowQ8_0(x.data(), K, want.data());
  ASSERT_NE(ops::simd::Q8_0QuantizePortableKernel(), nullptr);
  ForEachTarget([&] {
    std::vector<BlockQ8_0> got(K / 32);
    ops::simd::Q8_0QuantizePortableKernel()(x.data(), K, got.data());
    for (int64_t b = 0; b < K / 32; ++b) {
      EXPECT_EQ(0, std::memcmp(&got[b], &want[b], sizeof(BlockQ8_0))) << "block " << b;
    }
  });
}

}  // namespace
}  // namespace dsv4
