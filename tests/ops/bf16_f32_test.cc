// The bf16, f32, f16 and q8_0 × f32 matvecs with rows in pairs
// (ops/simd/bf16_f32_x86.cc: row i of a call's first half of rows beside row
// i of its second half; quarters, four streams, for K > kLongX = 4096) against the Highway matvecs
// they stand in for (DenseMatMulKernel of the same dtype), bit for bit: K of 32 or 64 to 8192, N
// from 1 (no pair) to 261 (N % 2 or N % 4 rows left alone), row ranges starting anywhere, unaligned
// weights and x, x with zeros, signs and a wide range of magnitudes, every bf16 bit pattern and
// random f32 ones (infinities, NaNs and subnormals included) as weights; every f16 bit pattern; and
// declining, writing nothing, for T != 1 and K % 64 != 0 (bf16) or K % 32 != 0 (f32, f16, q8_0).
//
// The kernel exists only on x86-64 CPUs with AVX-512; elsewhere its tests are
// reported as skipped with the reason.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "../common/matmul_fixtures.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4 {
namespace {

namespace simd = ::dsv4::ops::simd;
using ::dsv4::testing::MakeWeight;
using ::dsv4::testing::Weight;
using ::dsv4::testing::WideX;

#define DSV4_REQUIRE_BF16_F32()                    \
  DSV4_REQUIRE_KERNEL(simd::Bf16F32MatVecKernel(), \
                      "this CPU lacks AVX-512 (or DSV4_KERNELS=portable)")
#define DSV4_REQUIRE_F32_F32()                    \
  DSV4_REQUIRE_KERNEL(simd::F32F32MatVecKernel(), \
                      "this CPU lacks AVX-512 (or DSV4_KERNELS=portable)")
#define DSV4_REQUIRE_F16_F32()                    \
  DSV4_REQUIRE_KERNEL(simd::F16F32MatVecKernel(), \
                      "this CPU lacks AVX-512 (or DSV4_KERNELS=portable)")
#define DSV4_REQUIRE_Q8_F32()                    \
  DSV4_REQUIRE_KERNEL(simd::Q8F32MatVecKernel(), \
                      "this CPU lacks AVX-512 (or DSV4_KERNELS=portable)")

// The pair kernel for a weight dtype.
simd::TryMatMulFn PairKernel(DType dt) {
  switch (dt) {
    case DType::kBF16:
      return simd::Bf16F32MatVecKernel();
    case DType::kF16:
      return simd::F16F32MatVecKernel();
    case DType::kQ8_0:
      return simd::Q8F32MatVecKernel();
    default:
      return simd::F32F32MatVecKernel();
  }
}

// Rows [b, e) of w · x (n_tokens tokens of x, K apart) by both kernels (w's
// dtype picks the pair; Highway's tiles from two tokens on); equal bits expected.
void ExpectSameBits(const Weight& w, const float* x, int64_t b, int64_t e, const std::string& what,
                    int64_t n_tokens = 1) {
  ::dsv4::testing::ExpectSameBits(simd::DenseMatMulKernel(w.dtype), PairKernel(w.dtype), w, x, b, e,
                                  what, n_tokens);
}

// Every K, N, offset and row range of EqualsHighwayMatVecBitForBit.
void ExpectSameBitsAcrossShapes(DType dt, std::initializer_list<int64_t> ks) {
  uint32_t seed = 1;
  for (const int64_t k : ks) {
    for (const int64_t n : {1, 2, 3, 4, 5, 130, 261}) {
      for (const size_t offset : {size_t{0}, size_t{3}}) {
        Weight w = MakeWeight(dt, n, k, ++seed, offset);
        const std::vector<float> xv = WideX(k, ++seed, offset);
        const float* x = xv.data() + offset;
        const std::string what = "N=" + std::to_string(n) + " K=" + std::to_string(k) + " offset " +
                                 std::to_string(offset);
        ExpectSameBits(w, x, 0, n, what);
        for (const int64_t b : {int64_t{1}, int64_t{2}, int64_t{127}}) {
          if (b < n) ExpectSameBits(w, x, b, n, what + " from row " + std::to_string(b));
          if (b + 1 < n) ExpectSameBits(w, x, b, b + 1, what + " row " + std::to_string(b));
        }
      }
    }
  }
}

// Calls of 2 .. 4 tokens: every token as Highway's tiles compute it (the
// order a token's sums take whatever shares its call).
void ExpectSameBitsForFewTokens(DType dt, std::initializer_list<int64_t> ks) {
  uint32_t seed = 100;
  for (const int64_t k : ks) {
    for (const int64_t n : {1, 3, 130, 261}) {
      Weight w = MakeWeight(dt, n, k, ++seed);
      for (const int64_t t : {2, 3, 4}) {
        const std::vector<float> x = WideX(t * k, ++seed, 0);
        const std::string what =
            "N=" + std::to_string(n) + " K=" + std::to_string(k) + " T=" + std::to_string(t);
        ExpectSameBits(w, x.data(), 0, n, what, t);
        if (n > 2) ExpectSameBits(w, x.data(), 1, n - 1, what + " rows 1..N-1", t);
      }
    }
  }
}

TEST(Bf16F32MatVec, FewTokensEqualHighwayTilesBitForBit) {
  DSV4_REQUIRE_BF16_F32();
  ExpectSameBitsForFewTokens(DType::kBF16, {64, 2048, 4160});
  ExpectSameBitsForFewTokens(DType::kF32, {32, 2048, 8192});
  ExpectSameBitsForFewTokens(DType::kF16, {32, 5632});
  ExpectSameBitsForFewTokens(DType::kQ8_0, {32, 5632});
}

TEST(Bf16F32MatVec, EqualsHighwayMatVecBitForBit) {
  DSV4_REQUIRE_BF16_F32();
  ExpectSameBitsAcrossShapes(DType::kBF16,
                             {64, 128, 192, 2048, 4096, 4160});  // > kLongX: four streams
}

TEST(F32F32MatVec, EqualsHighwayMatVecBitForBit) {
  DSV4_REQUIRE_F32_F32();
  ExpectSameBitsAcrossShapes(DType::kF32, {32, 64, 96, 2048, 8192});
}

TEST(F16F32MatVec, EqualsHighwayMatVecBitForBit) {
  DSV4_REQUIRE_F16_F32();
  ExpectSameBitsAcrossShapes(DType::kF16, {32, 64, 96, 2048, 5632});
}

TEST(Q8F32MatVec, EqualsHighwayMatVecBitForBit) {
  DSV4_REQUIRE_Q8_F32();
  ExpectSameBitsAcrossShapes(DType::kQ8_0, {32, 64, 96, 2048, 5632});
}

// Every f16 bit pattern as a weight (infinities, NaNs and subnormals among them).
TEST(F16F32MatVec, EveryBitPatternEqualsHighway) {
  DSV4_REQUIRE_F16_F32();
  const int64_t n = 512, k = 128;  // 65536 weights: each f16 pattern once
  Weight w = MakeWeight(DType::kF16, n, k, 9);
  uint16_t* p = reinterpret_cast<uint16_t*>(w.bytes.data() + w.offset);
  for (int64_t i = 0; i < n * k; ++i)
    p[i] = static_cast<uint16_t>(i * 40503u);  // odd: a permutation
  const std::vector<float> x = WideX(k, 5, 0);
  ExpectSameBits(w, x.data(), 0, n, "bit patterns");
  ExpectSameBits(w, x.data(), 7, 300, "bit patterns from row 7");
}

// q8_0 blocks with every code and scales over the f16 range (subnormal,
// large, negative, zero, infinity): code · scale stays exact.
TEST(Q8F32MatVec, ExtremeScalesAndCodesEqualHighway) {
  DSV4_REQUIRE_Q8_F32();
  const int64_t n = 64, k = 256;
  Weight w = MakeWeight(DType::kQ8_0, n, k, 9);
  uint8_t* p = w.bytes.data() + w.offset;
  const uint16_t scales[] = {0x0001, 0x03ff, 0x7bff, 0xfbff, 0x0000, 0x8000, 0x3c00, 0x7c00};
  for (int64_t b = 0; b < n * k / 32; ++b) {
    uint8_t* blk = p + b * 34;
    std::memcpy(blk, &scales[b % 8], 2);
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(b * 32 + i);  // every byte
  }
  const std::vector<float> x = WideX(k, 5, 0);
  ExpectSameBits(w, x.data(), 0, n, "extreme blocks");
  ExpectSameBits(w, x.data(), 3, 61, "extreme blocks, rows 3-60");
}

// Random bit patterns as f32 weights: every exponent, the special values
// among them, and each sign.
TEST(F32F32MatVec, RandomBitPatternsEqualHighway) {
  DSV4_REQUIRE_F32_F32();
  const int64_t n = 300, k = 224;
  Weight w = MakeWeight(DType::kF32, n, k, 9);
  uint32_t* p = reinterpret_cast<uint32_t*>(w.bytes.data() + w.offset);
  uint32_t r = 12345;
  for (int64_t i = 0; i < n * k; ++i) {
    r = r * 1664525u + 1013904223u;
    p[i] = r;
  }
  p[0] = 0x7f800000u;  // +inf
  p[1] = 0xffc00000u;  // NaN
  p[2] = 0x00000001u;  // the smallest subnormal
  const std::vector<float> x = WideX(k, 5, 0);
  ExpectSameBits(w, x.data(), 0, n, "bit patterns");
  ExpectSameBits(w, x.data(), 7, 300, "bit patterns from row 7");
}

TEST(Bf16F32MatVec, EveryBitPatternEqualsHighway) {
  DSV4_REQUIRE_BF16_F32();
  const int64_t n = 512, k = 128;  // 65536 weights: each bf16 pattern once
  Weight w = MakeWeight(DType::kBF16, n, k, 9);
  uint16_t* p = reinterpret_cast<uint16_t*>(w.bytes.data() + w.offset);
  for (int64_t i = 0; i < n * k; ++i)
    p[i] = static_cast<uint16_t>(i * 40503u);  // odd: a permutation
  const std::vector<float> x = WideX(k, 5, 0);
  ExpectSameBits(w, x.data(), 0, n, "bit patterns");
  ExpectSameBits(w, x.data(), 7, 300, "bit patterns from row 7");
}

// Each (weight, tokens, why) declined by fn, nothing written.
struct Decline {
  Weight w;
  int64_t t;
  const char* what;
};
void ExpectDeclinesEach(simd::TryMatMulFn fn, const std::vector<Decline>& cases) {
  for (const Decline& c : cases) ::dsv4::testing::ExpectDeclines(fn, c.w, c.t, c.what);
}

TEST(Bf16F32MatVec, DeclinesWritingNothing) {
  DSV4_REQUIRE_BF16_F32();
  ExpectDeclinesEach(simd::Bf16F32MatVecKernel(),
                     {{MakeWeight(DType::kBF16, 8, 256, 1), 5, "five tokens"},
                      {MakeWeight(DType::kBF16, 8, 96, 2), 1, "K % 64 != 0"},
                      {MakeWeight(DType::kBF16, 8, 32, 3), 1, "K = 32"}});
}

TEST(F32F32MatVec, DeclinesWritingNothing) {
  DSV4_REQUIRE_F32_F32();
  ExpectDeclinesEach(simd::F32F32MatVecKernel(),
                     {{MakeWeight(DType::kF32, 8, 256, 1), 5, "five tokens"},
                      {MakeWeight(DType::kF32, 8, 48, 2), 1, "K % 32 != 0"},
                      {MakeWeight(DType::kF32, 8, 16, 3), 1, "K = 16"}});
}

TEST(F16F32MatVec, DeclinesWritingNothing) {
  DSV4_REQUIRE_F16_F32();
  ExpectDeclinesEach(simd::F16F32MatVecKernel(),
                     {{MakeWeight(DType::kF16, 8, 256, 1), 5, "five tokens"},
                      {MakeWeight(DType::kF16, 8, 48, 2), 1, "K % 32 != 0"},
                      {MakeWeight(DType::kBF16, 8, 64, 3), 1, "a bf16 weight"}});
}

TEST(Q8F32MatVec, DeclinesWritingNothing) {
  DSV4_REQUIRE_Q8_F32();
  ExpectDeclinesEach(simd::Q8F32MatVecKernel(),
                     {{MakeWeight(DType::kQ8_0, 8, 256, 1), 5, "five tokens"},
                      {MakeWeight(DType::kF16, 8, 64, 3), 1, "an f16 weight"}});
}

}  // namespace
}  // namespace dsv4
