// ops/ref quant_matmul_ref: FP8 (128×128 and 32×32 block scales) and FP4
// (per-32 scales, packed nibbles) dequantization bit-exact against the
// ml_dtypes decode tables of tests/data/dtype times 2^(e−127); the block
// matmuls bit-identical to the dense reference matmul on the dequantized
// weights; which FP8 block a scale shape means; the activation QAT
// simulations on hand-worked values (spec §9.2), FP8 in blocks of 32 too.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"

namespace dsv4::ops::ref {
namespace {

std::vector<uint32_t> ReadU32(const std::string& name) {
  std::ifstream f(std::string(DSV4_TEST_DATA_DIR) + "/dtype/" + name, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// value(code) · 2^(e − 127), from the ml_dtypes tables, computed in double and
// exact in f32 for the ranges used here.
float Expected(uint32_t value_bits, uint8_t e8m0) {
  return static_cast<float>(static_cast<double>(std::bit_cast<float>(value_bits)) *
                            std::ldexp(1.0, static_cast<int>(e8m0) - 127));
}

bool SameBits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(QuantMatMulRef, Fp8DequantizeIsBitExactWithPartialBlocks) {
  const std::vector<uint32_t> fp8 = ReadU32("fp8_e4m3fn_to_f32.u32");
  ASSERT_EQ(fp8.size(), 256u);
  const int64_t N = 130, K = 200;  // partial 128-blocks in both directions
  std::mt19937 rng(7);
  std::vector<uint8_t> w(N * K), s(2 * 2);
  for (auto& b : w) {
    do b = static_cast<uint8_t>(rng());
    while ((b & 0x7f) == 0x7f);  // skip NaN codes
  }
  for (auto& e : s) e = static_cast<uint8_t>(110 + rng() % 30);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp8E4m3, {N, K});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {2, 2});
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeFp8BlockRow(wv, sv, n, row.data());
    for (int64_t k = 0; k < K; ++k) {
      const float want = Expected(fp8[w[n * K + k]], s[(n / 128) * 2 + k / 128]);
      ASSERT_TRUE(SameBits(row[k], want))
          << "n " << n << " k " << k << ": " << row[k] << " vs " << want;
    }
  }
}

// DeepSeek-V4.1-Flash: 32×32 tiles, N and K not multiples of 32 (partial
// tiles in both directions), scale [ceil(N/32), ceil(K/32)].
TEST(QuantMatMulRef, Fp8Dequantize32x32IsBitExactWithPartialBlocks) {
  const std::vector<uint32_t> fp8 = ReadU32("fp8_e4m3fn_to_f32.u32");
  ASSERT_EQ(fp8.size(), 256u);
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{70, 96}, {70, 100}, {33, 31}}) {
    const int64_t sn = (N + 31) / 32, sk = (K + 31) / 32;
    std::mt19937 rng(static_cast<uint32_t>(N * K));
    std::vector<uint8_t> w(N * K), s(sn * sk);
    for (auto& b : w) {
      do b = static_cast<uint8_t>(rng());
      while ((b & 0x7f) == 0x7f);  // skip NaN codes
    }
    for (auto& e : s) e = static_cast<uint8_t>(110 + rng() % 30);
    const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp8E4m3, {N, K});
    const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {sn, sk});
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      DequantizeFp8BlockRow(wv, sv, n, row.data(), 32);
      for (int64_t k = 0; k < K; ++k) {
        const float want = Expected(fp8[w[n * K + k]], s[(n / 32) * sk + k / 32]);
        ASSERT_TRUE(SameBits(row[k], want)) << "N " << N << " K " << K << " n " << n << " k " << k
                                            << ": " << row[k] << " vs " << want;
      }
    }
  }
}

// The block a scale shape means for a weight [N, K]: [ceil(N/128),
// ceil(K/128)] is 128, [ceil(N/32), ceil(K/32)] is 32, anything else 0; where
// both shapes are [1, 1] (N, K ≤ 32, one scale either way) 128.
TEST(QuantMatMulRef, Fp8WeightBlockOfScaleShape) {
  EXPECT_EQ(Fp8WeightBlockOf(4096, 7168, 32, 56), 128);
  EXPECT_EQ(Fp8WeightBlockOf(4096, 7168, 128, 224), 32);
  EXPECT_EQ(Fp8WeightBlockOf(70, 96, 1, 1), 128);
  EXPECT_EQ(Fp8WeightBlockOf(70, 96, 3, 3), 32);
  EXPECT_EQ(Fp8WeightBlockOf(70, 96, 3, 1), 0);
  EXPECT_EQ(Fp8WeightBlockOf(70, 96, 1, 3), 0);
  EXPECT_EQ(Fp8WeightBlockOf(32, 64, 1, 2), 32);
  EXPECT_EQ(Fp8WeightBlockOf(32, 32, 1, 1), 128);
  EXPECT_EQ(Fp8WeightBlockOf(4096, 7168, 32, 57), 0);
  EXPECT_TRUE(IsFp8WeightBlock(128));
  EXPECT_TRUE(IsFp8WeightBlock(32));
  EXPECT_FALSE(IsFp8WeightBlock(64));
}

TEST(QuantMatMulRef, Fp8DequantizeWithF32Scales) {
  // -Base checkpoints store the 128×128 scales as f32.
  const std::vector<uint8_t> w = {0x38, 0xb8, 0x40, 0x7e};  // 1, -1, 2, 448
  const std::vector<float> s = {0.375f};
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp8E4m3, {1, 4});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kF32, {1, 1});
  float row[4];
  DequantizeFp8BlockRow(wv, sv, 0, row);
  EXPECT_EQ(row[0], 0.375f);
  EXPECT_EQ(row[1], -0.375f);
  EXPECT_EQ(row[2], 0.75f);
  EXPECT_EQ(row[3], 168.0f);
}

TEST(QuantMatMulRef, Fp4NibbleOrderAndScale) {
  // Byte 0x2F: element 0 = low nibble 0xF = -6, element 1 = high nibble 0x2 = 1.
  std::vector<uint8_t> w(16, 0);
  w[0] = 0x2F;
  w[15] = 0x71;                          // elements 30, 31: 0.5, 6
  const std::vector<uint8_t> s = {128};  // ×2
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp4E2m1, {1, 32});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {1, 1});
  float row[32];
  DequantizeFp4BlockRow(wv, sv, 0, row);
  EXPECT_EQ(row[0], -12.0f);
  EXPECT_EQ(row[1], 2.0f);
  EXPECT_EQ(row[2], 0.0f);
  EXPECT_EQ(row[30], 1.0f);
  EXPECT_EQ(row[31], 12.0f);
}

TEST(QuantMatMulRef, Fp4DequantizeIsBitExact) {
  const std::vector<uint32_t> fp4 = ReadU32("fp4_e2m1fn_to_f32.u32");
  ASSERT_EQ(fp4.size(), 16u);
  const int64_t N = 5, K = 96;
  std::mt19937 rng(11);
  std::vector<uint8_t> w(N * K / 2), s(N * K / 32);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (auto& e : s) e = static_cast<uint8_t>(100 + rng() % 60);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp4E2m1, {N, K});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {N, K / 32});
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeFp4BlockRow(wv, sv, n, row.data());
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = w[(n * K + k) / 2];
      const uint8_t code = k % 2 == 0 ? byte & 0xf : byte >> 4;
      const float want = Expected(fp4[code], s[n * (K / 32) + k / 32]);
      ASSERT_TRUE(SameBits(row[k], want)) << "n " << n << " k " << k;
    }
  }
}

// The block matmuls equal the dense reference matmul on the dequantized
// weights bit for bit (same products, same k order), for any row range.
TEST(QuantMatMulRef, Fp8MatMulEqualsDenseOnDequantized) {
  const int64_t N = 140, K = 136, T = 3;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<uint8_t> w(N * K), s(2 * 2);
  for (auto& b : w) {
    do b = static_cast<uint8_t>(rng());
    while ((b & 0x7f) == 0x7f);
  }
  for (auto& e : s) e = static_cast<uint8_t>(120 + rng() % 10);
  std::vector<float> x(T * K);
  for (auto& v : x) v = normal(rng);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp8E4m3, {N, K});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {2, 2});
  std::vector<float> dense(N * K);
  for (int64_t n = 0; n < N; ++n) DequantizeFp8BlockRow(wv, sv, n, dense.data() + n * K);
  std::vector<float> want(T * N), got(T * N, -1.0f);
  MatMul(want.data(), x.data(), TensorView::Contiguous(dense.data(), DType::kF32, {N, K}), T);
  // Two row ranges crossing the 128-row scale boundary, written into one output.
  MatMulFp8Block(got.data(), N, x.data(), wv, sv, T, 0, 100);
  MatMulFp8Block(got.data() + 100, N, x.data(), wv, sv, T, 100, N);
  for (int64_t i = 0; i < T * N; ++i) ASSERT_TRUE(SameBits(got[i], want[i])) << i;
}

TEST(QuantMatMulRef, Fp8MatMul32x32EqualsDenseOnDequantized) {
  const int64_t N = 70, K = 96, T = 3;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<uint8_t> w(N * K), s(3 * 3);
  for (auto& b : w) {
    do b = static_cast<uint8_t>(rng());
    while ((b & 0x7f) == 0x7f);
  }
  for (auto& e : s) e = static_cast<uint8_t>(120 + rng() % 10);
  std::vector<float> x(T * K);
  for (auto& v : x) v = normal(rng);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp8E4m3, {N, K});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {3, 3});
  std::vector<float> dense(N * K);
  for (int64_t n = 0; n < N; ++n) DequantizeFp8BlockRow(wv, sv, n, dense.data() + n * K, 32);
  std::vector<float> want(T * N), got(T * N, -1.0f);
  MatMul(want.data(), x.data(), TensorView::Contiguous(dense.data(), DType::kF32, {N, K}), T);
  // Row ranges crossing the 32-row scale boundaries, written into one output.
  MatMulFp8Block(got.data(), N, x.data(), wv, sv, T, 0, 45, 32);
  MatMulFp8Block(got.data() + 45, N, x.data(), wv, sv, T, 45, N, 32);
  for (int64_t i = 0; i < T * N; ++i) ASSERT_TRUE(SameBits(got[i], want[i])) << i;
}

TEST(QuantMatMulRef, Fp4MatMulEqualsDenseOnDequantized) {
  const int64_t N = 33, K = 64, T = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<uint8_t> w(N * K / 2), s(N * K / 32);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (auto& e : s) e = static_cast<uint8_t>(120 + rng() % 10);
  std::vector<float> x(T * K);
  for (auto& v : x) v = normal(rng);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kFp4E2m1, {N, K});
  const TensorView sv = TensorView::Contiguous(s.data(), DType::kE8m0, {N, K / 32});
  std::vector<float> dense(N * K);
  for (int64_t n = 0; n < N; ++n) DequantizeFp4BlockRow(wv, sv, n, dense.data() + n * K);
  std::vector<float> want(T * N), got(T * N);
  MatMul(want.data(), x.data(), TensorView::Contiguous(dense.data(), DType::kF32, {N, K}), T);
  MatMulFp4Block(got.data(), N, x.data(), wv, sv, T, 0, 7);
  MatMulFp4Block(got.data() + 7, N, x.data(), wv, sv, T, 7, N);
  for (int64_t i = 0; i < T * N; ++i) ASSERT_TRUE(SameBits(got[i], want[i])) << i;
}

TEST(QuantMatMulRef, Pow2Ceil) {
  EXPECT_EQ(Pow2Ceil(1.0f), 1.0f);
  EXPECT_EQ(Pow2Ceil(1.5f), 2.0f);
  EXPECT_EQ(Pow2Ceil(0.75f), 1.0f);
  EXPECT_EQ(Pow2Ceil(0.5f), 0.5f);
  EXPECT_EQ(Pow2Ceil(5.0f / 448.0f), 0.015625f);  // 2^-6
  EXPECT_EQ(Pow2Ceil(std::nextafter(4.0f, 5.0f)), 8.0f);
}

TEST(QuantMatMulRef, Fp8ActivationSimulation) {
  // amax 5 -> s = 2^ceil(log2(5/448)) = 2^-6; 0.3/s = 19.2 rounds to e4m3 20.
  std::vector<float> x = {1.0f, 0.3f, -5.0f, 0.0f};
  QuantizeDequantizeFp8(x.data(), 4, 4);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 0.3125f);
  EXPECT_EQ(x[2], -5.0f);
  EXPECT_EQ(x[3], 0.0f);
  // Blocks are independent: a tiny block uses its own scale (amax floor 1e-4).
  // 100 with s = 0.25 is 400, halfway between e4m3 384 and 416: ties to even (384).
  std::vector<float> y = {100.0f, 0.0f, 1e-6f, 3e-5f};
  QuantizeDequantizeFp8(y.data(), 4, 2);
  EXPECT_EQ(y[0], 96.0f);
  EXPECT_NEAR(y[3], 3e-5f, 3e-5f / 8);
  EXPECT_NE(y[3], 0.0f);
}

// act_quant with block_size 32 (DeepSeek-V4.1's linears), hand-worked: per
// 32 values amax = max(|x|, 1e-4), s = 2^(exponent − 127 + [mantissa ≠ 0]) of
// the f32 product amax · f32(1/448) (0x3b124925), x ← e4m3(clamp(x/s, ±448))
// · s, ties to even. Cases where that rounding matters:
TEST(QuantMatMulRef, Fp8ActivationSimulationBlocksOf32) {
  std::vector<float> x(5 * 32, 0.0f);
  // Block 0: amax exactly 448 (448 · f32(1/448) = 1 exactly): s = 1. 17 and
  // 19 are ties (e4m3 16, 18, 20): to even, 16 and 20; 0.01 is 5.12 · 2^-9
  // (subnormal e4m3): 5 · 2^-9.
  float* b0 = x.data();
  b0[0] = 448.0f, b0[1] = 17.0f, b0[2] = -19.0f, b0[3] = 0.01f, b0[31] = 447.99f;
  // Block 1: amax 448 + 2^-15 (one ulp up): the product is 1 + 2^-23 (mantissa ≠
  // 0), so s = 2; the max comes back as 448 · 2 · (224/224) = 448 and 0.01
  // as 3 · 2^-9 · 2 (0.005 is 2.56 · 2^-9).
  float* b1 = x.data() + 32;
  b1[5] = std::nextafter(448.0f, 1000.0f), b1[6] = 0.01f, b1[7] = -3.0f;
  // Block 2: amax 56 = 448 · 2^-3: s = 2^-3 exactly; 2.125 = 17 · s, a tie: 16 · s.
  float* b2 = x.data() + 64;
  b2[0] = -56.0f, b2[1] = 2.125f, b2[2] = 2.375f;
  // Block 3: every |x| below the 1e-4 floor: s = 2^-22 (1e-4 · f32(1/448) =
  // 2.23e-7); 3e-5 is 125.8 · s → 128 · s, 1e-6 is 4.19 · s → 4 · s, -2e-5
  // is -83.9 · s → -80 · s.
  float* b3 = x.data() + 96;
  b3[0] = 3e-5f, b3[1] = 1e-6f, b3[2] = -2e-5f;
  // Block 4: amax 1: s = 2^-8; 0.3 is 76.8 · s → 80 · s, -0.7 is -179.2 · s → -176 · s.
  float* b4 = x.data() + 128;
  b4[0] = 1.0f, b4[1] = 0.3f, b4[2] = -0.7f;
  std::vector<float> want(x.size(), 0.0f);
  want[0] = 448.0f, want[1] = 16.0f, want[2] = -20.0f, want[3] = 5.0f / 512.0f, want[31] = 448.0f;
  want[32 + 5] = 448.0f, want[32 + 6] = 6.0f / 512.0f, want[32 + 7] = -3.0f;
  want[64] = -56.0f, want[65] = 2.0f, want[66] = 2.5f;
  want[96] = std::ldexp(128.0f, -22), want[97] = std::ldexp(4.0f, -22);
  want[98] = std::ldexp(-80.0f, -22);
  want[128] = 1.0f, want[129] = 0.3125f, want[130] = -0.6875f;
  QuantizeDequantizeFp8(x.data(), static_cast<int64_t>(x.size()), 32);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(SameBits(x[i], want[i])) << "i " << i << ": " << x[i] << " vs " << want[i];
  }
  // The same values in blocks of 128 share block 0..3's scale (s = 2 from
  // block 1's max): 17 is then 8.5 · s, a tie to 8 · s, and block 3's values
  // fall to zero.
  std::vector<float> z(128, 0.0f);
  z[0] = 17.0f, z[37] = std::nextafter(448.0f, 1000.0f), z[96] = 3e-5f;
  QuantizeDequantizeFp8(z.data(), 128, 128);
  EXPECT_EQ(z[0], 16.0f);
  EXPECT_EQ(z[37], 448.0f);
  EXPECT_EQ(z[96], 0.0f);
}

TEST(QuantMatMulRef, Fp4ActivationSimulationTies) {
  // amax 6 -> s = 1; spec §9.2 ties: .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
  std::vector<float> x = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, -5.0f};
  QuantizeDequantizeFp4(x.data(), 8, 8);
  const std::vector<float> want = {6.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, -4.0f};
  EXPECT_EQ(x, want);
  // amax 12 -> s = 2: 12 -> 6·2, 1 -> 0.5·2.
  std::vector<float> y = {12.0f, 1.0f};
  QuantizeDequantizeFp4(y.data(), 2, 2);
  EXPECT_EQ(y, (std::vector<float>{12.0f, 1.0f}));
}

}  // namespace
}  // namespace dsv4::ops::ref
