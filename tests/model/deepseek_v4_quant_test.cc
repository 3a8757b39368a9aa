// ops/ref quant_matmul_ref: FP8 (128×128 block scales) and FP4 (per-32
// scales, packed nibbles) dequantization bit-exact against the ml_dtypes
// decode tables of tests/data/dtype times 2^(e−127); the block matmuls
// bit-identical to the dense reference matmul on the dequantized weights;
// the activation QAT simulations on hand-worked values (spec §9.2).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
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
