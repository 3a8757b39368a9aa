// The legacy and k-quant GGUF types of tensor/ggml_quants.h (q4_0, q4_1,
// q5_0, q5_1, iq4_nl; q2_K, q3_K, q5_K, iq4_xs):
//   - DequantizeRow bit for bit against gguf-py's values (goldens in
//     tests/data/ggml_quants, tools/reference/make_ggml_quant_goldens.py), as
//     one row and block by block from an odd address;
//   - QuantizeRowQ8_1 against llama.cpp's x86 quantize_row_q8_1 (d = max |x| /
//     127 as f16, codes x · (127 / max |x|) rounded to nearest, ties to even,
//     s = f16(d · Σ codes));
//   - ops::ref::DotBasicQ8 against Σ dequant(w) · dequant(xq) in double,
//     within 1e-5 · Σ |w · x| (fp32 steps per block) plus, for the q8_1 types,
//     |m · s| · 2^-10 per block (s is an f16 of d · Σ codes, not the codes' sum);
//   - the ops/simd kernels (GgmlBasicQ8Kernel) against ops::ref::DotBasicQ8
//     bit for bit on every Highway target this build compiled and this CPU
//     runs: K = block·{1,2,3,5,37} and 4096, N with remainders of the 4-row
//     groups, T = 1…5 and 17, row sub-ranges with a wider output stride,
//     misaligned weight rows, a zero-scale block, all-zero activations;
//   - ops::MatMul on a thread pool: bit for bit ops::ref::MatMulGgmlQ8, and
//     with f32 activations (ScopedKQuantActivations) ops::ref::MatMul on the
//     dequantised weights within 1e-5 · Σ |w · x|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../common/for_each_target.h"
#include "../common/scoped_kquant_activations.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/ref/kquant_ref.h"
#include "ops/ref/ops_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::ForEachTarget;
using ::dsv4::testing::ScopedKQuantActivations;

const DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,  DType::kIQ4_NL,
                        DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kIQ4_XS};

int BlockElems(DType t) { return GetDTypeInfo(t).block_elems; }
int BlockBytes(DType t) { return GetDTypeInfo(t).block_bytes; }

// ---- goldens ----

struct Golden {
  uint32_t ggml_type = 0, block_elems = 0, n_blocks = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

Golden ReadGolden(const std::string& name, DType t) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/ggml_quants/" + name;
  std::ifstream f(path, std::ios::binary);
  Golden g;
  if (!f) {
    ADD_FAILURE() << "cannot open " << path;
    return g;
  }
  char magic[4];
  f.read(magic, 4);
  f.read(reinterpret_cast<char*>(&g.ggml_type), 4);
  f.read(reinterpret_cast<char*>(&g.block_elems), 4);
  f.read(reinterpret_cast<char*>(&g.n_blocks), 4);
  EXPECT_EQ(std::string(magic, 4), "GQG1") << path;
  if (!f || g.n_blocks == 0 || g.n_blocks > 4096 ||
      g.block_elems != static_cast<uint32_t>(BlockElems(t))) {
    ADD_FAILURE() << path << ": bad header";
    return g;
  }
  g.blocks.resize(static_cast<size_t>(g.n_blocks) * BlockBytes(t));
  g.values.resize(static_cast<size_t>(g.n_blocks) * g.block_elems);
  f.read(reinterpret_cast<char*>(g.blocks.data()), static_cast<std::streamsize>(g.blocks.size()));
  f.read(reinterpret_cast<char*>(g.values.data()),
         static_cast<std::streamsize>(g.values.size() * sizeof(float)));
  EXPECT_TRUE(f) << path << ": truncated";
  EXPECT_EQ(f.peek(), EOF) << path << ": trailing bytes";
  return g;
}

void ExpectGoldenBitExact(DType t, const std::string& file, uint32_t ggml_type) {
  SCOPED_TRACE(file);
  const Golden g = ReadGolden(file, t);
  ASSERT_FALSE(g.values.empty());
  EXPECT_EQ(g.ggml_type, ggml_type);
  const int be = BlockElems(t), bb = BlockBytes(t);
  std::vector<float> got(g.values.size());
  DequantizeRow(t, g.blocks.data(), static_cast<int64_t>(got.size()), got.data());
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &g.values[i], 4);
    if (a != b && ++mismatches <= 5) {
      ADD_FAILURE() << DTypeName(t) << " value " << i << " (block " << i / be << "): got " << got[i]
                    << " want " << g.values[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  // Block by block from an odd address.
  std::vector<uint8_t> shifted(g.blocks.size() + 1);
  std::memcpy(shifted.data() + 1, g.blocks.data(), g.blocks.size());
  std::vector<float> one(be);
  for (uint32_t b = 0; b < g.n_blocks; ++b) {
    DequantizeRow(t, shifted.data() + 1 + static_cast<size_t>(b) * bb, be, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), &g.values[static_cast<size_t>(b) * be], be * 4)) << b;
  }
}

TEST(GgmlBasicDequantTest, Q4_0MatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ4_0, "q4_0_golden.bin", 2);
}
TEST(GgmlBasicDequantTest, Q4_1MatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ4_1, "q4_1_golden.bin", 3);
}
TEST(GgmlBasicDequantTest, Q5_0MatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ5_0, "q5_0_golden.bin", 6);
}
TEST(GgmlBasicDequantTest, Q5_1MatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ5_1, "q5_1_golden.bin", 7);
}
TEST(GgmlBasicDequantTest, Q2_KMatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ2_K, "q2_k_golden.bin", 10);
}
TEST(GgmlBasicDequantTest, Q3_KMatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ3_K, "q3_k_golden.bin", 11);
}
TEST(GgmlBasicDequantTest, Q5_KMatchesGgufPy) {
  ExpectGoldenBitExact(DType::kQ5_K, "q5_k_golden.bin", 13);
}
TEST(GgmlBasicDequantTest, IQ4_NLMatchesGgufPy) {
  ExpectGoldenBitExact(DType::kIQ4_NL, "iq4_nl_golden.bin", 20);
}
TEST(GgmlBasicDequantTest, IQ4_XSMatchesGgufPy) {
  ExpectGoldenBitExact(DType::kIQ4_XS, "iq4_xs_golden.bin", 23);
}

// ---- random weights and activations ----

// Byte offsets of a block's f16 fields: the scale d and, where there is one,
// the min m / dmin (−1: none).
void ScaleOffsets(DType t, int* d, int* m) {
  *m = -1;
  switch (t) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ5_K:
      *d = 0;
      *m = 2;
      return;
    case DType::kQ2_K:
      *d = offsetof(BlockQ2_K, d);
      *m = offsetof(BlockQ2_K, dmin);
      return;
    case DType::kQ3_K:
      *d = offsetof(BlockQ3_K, d);
      return;
    default:
      *d = 0;
  }
}

// [n, k] random blocks behind `offset` leading bytes: random codes and packed
// sub-scales, f16 scales (and mins) of either sign around 1e-2; block 1 of
// row 0 (when there is one) has zero scale and min.
struct Weight {
  DType dtype;
  int64_t n = 0, k = 0;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView::Contiguous(bytes.data() + offset, dtype, {n, k}); }
  const uint8_t* row(int64_t i) const { return bytes.data() + offset + i * DTypeBytes(dtype, k); }
};

Weight MakeWeight(DType t, int64_t n, int64_t k, uint32_t seed, size_t offset = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  Weight w{t, n, k, offset, {}};
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(t, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  int d_off, m_off;
  ScaleOffsets(t, &d_off, &m_off);
  const int64_t n_blocks = n * k / BlockElems(t);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = w.bytes.data() + offset + b * BlockBytes(t);
    const bool zero = b == 1 && k / BlockElems(t) > 1;
    const uint16_t d = F32ToF16(zero ? 0.0f : scale(rng)), m = F32ToF16(zero ? 0.0f : scale(rng));
    std::memcpy(blk + d_off, &d, 2);
    if (m_off >= 0) std::memcpy(blk + m_off, &m, 2);
  }
  return w;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// T tokens of K activations quantised for weight type t; the first 32 values
// of token 0 are zero (a zero q8_0 / q8_1 block).
std::vector<uint8_t> Quantised(DType t, const std::vector<float>& x, int64_t n_tokens, int64_t k) {
  const ops::ref::ActFormat f = ops::ref::ActivationFormat(t);
  const int64_t xb = ops::ref::ActivationBytes(f, k);
  std::vector<uint8_t> xq(static_cast<size_t>(n_tokens * xb));
  for (int64_t i = 0; i < n_tokens; ++i) {
    ops::ref::QuantizeActivations(f, x.data() + i * k, k, xq.data() + i * xb);
  }
  return xq;
}

std::vector<float> Activations(int64_t n_tokens, int64_t k, uint32_t seed) {
  std::vector<float> x = RandomFloats(static_cast<size_t>(n_tokens * k), seed);
  std::fill_n(x.begin(), 32, 0.0f);
  return x;
}

// The ref's outputs out[t * N + n].
std::vector<float> RefOutputs(const Weight& w, const std::vector<uint8_t>& xq, int64_t n_tokens) {
  const int64_t xb = ops::ref::ActivationBytes(ops::ref::ActivationFormat(w.dtype), w.k);
  std::vector<float> out(static_cast<size_t>(n_tokens * w.n));
  for (int64_t n = 0; n < w.n; ++n) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      out[t * w.n + n] = ops::ref::DotBasicQ8(w.dtype, w.row(n), xq.data() + t * xb, w.k);
    }
  }
  return out;
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

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// ---- q8_1 ----

TEST(GgmlBasicQ8_1Test, QuantisationFollowsGgml) {
  const int64_t K = 256;
  std::vector<float> x = RandomFloats(K, 5);
  std::fill_n(x.begin() + 32, 32, 0.0f);  // a zero block
  x[64] = 3.0f;                           // a block whose largest value is positive
  // d = 1 exactly: codes on halves, which round to even (llama.cpp's x86
  // quantize_row_q8_1, _mm256_round_ps; ggml's _ref would round them away).
  x[96] = 127.0f;
  x[97] = 2.5f;
  x[98] = -2.5f;
  x[99] = 0.5f;
  std::vector<BlockQ8_1> y(K / 32);
  ops::ref::QuantizeRowQ8_1(x.data(), K, y.data());
  for (int64_t b = 0; b < K / 32; ++b) {
    SCOPED_TRACE(b);
    const float* xb = x.data() + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;  // not 1 / d
    EXPECT_EQ(y[b].d, F32ToF16(d));
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const float v = xb[j] * id;
      EXPECT_EQ(y[b].qs[j], static_cast<int>(std::nearbyint(v))) << j;
      EXPECT_LE(std::fabs(v - y[b].qs[j]), 0.5f);
      EXPECT_LE(std::abs(static_cast<int>(y[b].qs[j])), 127);
      sum += y[b].qs[j];
    }
    EXPECT_EQ(y[b].s, F32ToF16(static_cast<float>(sum) * d));
    if (amax == 0.0f) {
      EXPECT_EQ(F16ToF32(y[b].d), 0.0f);
      EXPECT_EQ(F16ToF32(y[b].s), 0.0f);
    }
  }
  EXPECT_EQ(y[3].qs[0], 127);
  EXPECT_EQ(y[3].qs[1], 2);
  EXPECT_EQ(y[3].qs[2], -2);
  EXPECT_EQ(y[3].qs[3], 0);
  // The activation entry points agree.
  EXPECT_EQ(ops::ref::ActivationFormat(DType::kQ4_1), ops::ref::ActFormat::kQ8_1);
  EXPECT_EQ(ops::ref::ActivationBytes(ops::ref::ActFormat::kQ8_1, K), K / 32 * 36);
  std::vector<BlockQ8_1> z(K / 32);
  ops::ref::QuantizeActivations(ops::ref::ActFormat::kQ8_1, x.data(), K, z.data());
  EXPECT_EQ(0, std::memcmp(y.data(), z.data(), y.size() * sizeof(BlockQ8_1)));
}

// ---- ref dot against the dequantised product ----

// Σ dequant(w) · dequant(xq) in double, its magnitude Σ |·|, and the bound on
// the q8_1 s terms' rounding.
struct Exact {
  double dot = 0, mag = 0, s_err = 0;
};

Exact ExactDot(DType t, const uint8_t* row, const uint8_t* xq, int64_t k) {
  std::vector<float> w(k), x(k);
  DequantizeRow(t, row, k, w.data());
  const ops::ref::ActFormat f = ops::ref::ActivationFormat(t);
  Exact e;
  for (int64_t b = 0; b < k / 32; ++b) {
    if (f == ops::ref::ActFormat::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(xq) + b;
      for (int j = 0; j < 32; ++j) x[b * 32 + j] = F16ToF32(blk->d) * blk->qs[j];
    } else if (f == ops::ref::ActFormat::kQ8_1) {
      const auto* blk = reinterpret_cast<const BlockQ8_1*>(xq) + b;
      for (int j = 0; j < 32; ++j) x[b * 32 + j] = F16ToF32(blk->d) * blk->qs[j];
      // q4_1 / q5_1 keep m at bytes 2..3.
      uint16_t mh;
      std::memcpy(&mh, row + b * BlockBytes(t) + 2, 2);
      e.s_err +=
          std::fabs(static_cast<double>(F16ToF32(mh)) * F16ToF32(blk->s)) * std::ldexp(1.0, -10);
    }
  }
  if (f == ops::ref::ActFormat::kQ8_K) {
    for (int64_t b = 0; b < k / kQK_K; ++b) {
      const auto* blk = reinterpret_cast<const BlockQ8K*>(xq) + b;
      for (int j = 0; j < kQK_K; ++j) x[b * kQK_K + j] = blk->d * blk->qs[j];
    }
  }
  for (int64_t i = 0; i < k; ++i) {
    const double p = static_cast<double>(w[i]) * x[i];
    e.dot += p;
    e.mag += std::fabs(p);
  }
  return e;
}

TEST(GgmlBasicRefTest, DotIsTheDequantisedProduct) {
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t N = 6, T = 3, K = 4 * kQK_K;
    const Weight w = MakeWeight(t, N, K, 21);
    const std::vector<float> x = Activations(T, K, 22);
    const std::vector<uint8_t> xq = Quantised(t, x, T, K);
    const int64_t xb = ops::ref::ActivationBytes(ops::ref::ActivationFormat(t), K);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < T; ++i) {
        const float got = ops::ref::DotBasicQ8(t, w.row(n), xq.data() + i * xb, K);
        const Exact e = ExactDot(t, w.row(n), xq.data() + i * xb, K);
        EXPECT_GT(e.mag, 0.0);
        EXPECT_NEAR(got, e.dot, 1e-5 * e.mag + e.s_err) << "row " << n << " token " << i;
        // And the generic entry point is the same function.
        EXPECT_TRUE(SameBits(got, ops::ref::DotGgmlQ8(t, w.row(n), xq.data() + i * xb, K)));
      }
    }
  }
}

TEST(GgmlBasicRefTest, ZeroActivationsAndZeroScales) {
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t K = 2 * kQK_K;
    const Weight w = MakeWeight(t, 2, K, 23);
    const std::vector<uint8_t> zq = Quantised(t, std::vector<float>(K, 0.0f), 1, K);
    EXPECT_EQ(ops::ref::DotBasicQ8(t, w.row(0), zq.data(), K), 0.0f);
    // A row whose every scale and min is zero.
    Weight z = w;
    int d_off, m_off;
    ScaleOffsets(t, &d_off, &m_off);
    for (int64_t b = 0; b < K / BlockElems(t); ++b) {
      std::memset(z.bytes.data() + b * BlockBytes(t) + d_off, 0, 2);
      if (m_off >= 0) std::memset(z.bytes.data() + b * BlockBytes(t) + m_off, 0, 2);
    }
    const std::vector<uint8_t> xq = Quantised(t, Activations(1, K, 24), 1, K);
    EXPECT_EQ(ops::ref::DotBasicQ8(t, z.row(0), xq.data(), K), 0.0f);
    EXPECT_NE(ops::ref::DotBasicQ8(t, w.row(0), xq.data(), K), 0.0f);
  }
}

// ---- SIMD against ref ----

TEST(GgmlBasicSimdTest, KernelsExistForTheseTypesOnly) {
  for (DType t : kTypes) EXPECT_NE(ops::simd::GgmlBasicQ8Kernel(t), nullptr) << DTypeName(t);
  for (DType t :
       {DType::kF32, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kIQ2_XXS, DType::kIQ1_M}) {
    EXPECT_EQ(ops::simd::GgmlBasicQ8Kernel(t), nullptr) << DTypeName(t);
  }
}

void ExpectSimdMatchesRef(DType t, int64_t N, int64_t K, int64_t T, size_t w_off, uint32_t seed) {
  SCOPED_TRACE(std::string(DTypeName(t)) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
               " T=" + std::to_string(T) + " off=" + std::to_string(w_off));
  const Weight w = MakeWeight(t, N, K, seed, w_off);
  const std::vector<uint8_t> xq = Quantised(t, Activations(T, K, seed + 1), T, K);
  const std::vector<float> want = RefOutputs(w, xq, T);
  const ops::simd::GgmlQ8Fn kernel = ops::simd::GgmlBasicQ8Kernel(t);
  ASSERT_NE(kernel, nullptr);
  std::vector<float> got(want.size(), -1.0f);
  kernel(Args(got.data(), N, w.view(), T, 0, N), xq.data());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!SameBits(got[i], want[i]) && ++bad <= 3) {
      ADD_FAILURE() << "output " << i << ": got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
  // Rows [1, N − 1) into a wider output, the rest untouched.
  if (N >= 3) {
    const int64_t stride = N + 3;
    std::vector<float> sub(static_cast<size_t>(T * stride), 7.0f);
    kernel(Args(sub.data(), stride, w.view(), T, 1, N - 1), xq.data());
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t c = 0; c < stride; ++c) {
        const float v = sub[i * stride + c];
        if (c < N - 2) {
          EXPECT_TRUE(SameBits(v, want[i * N + c + 1])) << "token " << i << " row " << c + 1;
        } else {
          EXPECT_EQ(v, 7.0f) << "token " << i << " column " << c;
        }
      }
    }
  }
}

TEST(GgmlBasicSimdTest, MatchesRefBitForBitOnEveryTarget) {
  ForEachTarget([] {
    for (DType t : kTypes) {
      for (int64_t kb : {1, 2, 3, 5}) {
        const int64_t K = kb * BlockElems(t);
        for (int64_t N : {1, 3, 4, 5, 9}) {
          for (size_t off : {size_t{0}, size_t{1}}) {
            for (int64_t T : {1, 2, 3, 4, 5, 17}) {
              ExpectSimdMatchesRef(t, N, K, T, off,
                                   static_cast<uint32_t>(K * 131 + N * 7 + T + off));
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  });
}

TEST(GgmlBasicSimdTest, WideKMatchesRefBitForBit) {
  ForEachTarget([] {
    for (DType t : kTypes) {
      // 4096, and 37 blocks: the kernels' last chunk of unpacked blocks partial.
      for (int64_t K : {int64_t{4096}, 37 * int64_t{BlockElems(t)}}) {
        for (int64_t T : {1, 2, 3}) {
          ExpectSimdMatchesRef(t, 6, K, T, 3, static_cast<uint32_t>(T + K));
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  });
}

TEST(GgmlBasicSimdTest, ZeroActivationsGiveZero) {
  ForEachTarget([] {
    for (DType t : kTypes) {
      SCOPED_TRACE(std::string(DTypeName(t)));
      const int64_t N = 5, K = 2 * kQK_K, T = 3;
      const Weight w = MakeWeight(t, N, K, 31);
      const std::vector<uint8_t> zq = Quantised(t, std::vector<float>(T * K, 0.0f), T, K);
      std::vector<float> out(T * N, -1.0f);
      ops::simd::GgmlBasicQ8Kernel(t)(Args(out.data(), N, w.view(), T, 0, N), zq.data());
      for (float v : out) EXPECT_EQ(v, 0.0f);
    }
  });
}

// ---- ops::MatMul ----

TEST(GgmlBasicMatMulTest, OpsMatMulMatchesRef) {
  ThreadPool pool(2);
  for (DType t : kTypes) {
    const int64_t N = 77, K = 2 * kQK_K;
    const Weight w = MakeWeight(t, N, K, 41);
    for (int64_t T : {1, 4, 7}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " T=" + std::to_string(T));
      const std::vector<float> x = Activations(T, K, static_cast<uint32_t>(42 + T));
      std::vector<float> want(T * N), got(T * N, -1.0f);
      ops::ref::MatMulGgmlQ8(want.data(), x.data(), w.view(), T);
      ops::MatMul(pool, got.data(), x.data(), w.view(), T);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      {
        ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
        std::vector<float> fwant(T * N), fgot(T * N, -1.0f);
        ops::ref::MatMul(fwant.data(), x.data(), w.view(), T);
        ops::MatMul(pool, fgot.data(), x.data(), w.view(), T);
        std::vector<float> row(K);
        for (int64_t n = 0; n < N; ++n) {
          DequantizeRow(t, w.row(n), K, row.data());
          for (int64_t i = 0; i < T; ++i) {
            double mag = 0;
            for (int64_t k = 0; k < K; ++k)
              mag += std::fabs(static_cast<double>(row[k]) * x[i * K + k]);
            EXPECT_NEAR(fgot[i * N + n], fwant[i * N + n], 1e-5 * mag) << n << " " << i;
          }
        }
      }
      // The q8 path is within the activations' rounding of the f32 one, not on it.
      std::vector<float> fref(T * N);
      ops::ref::MatMul(fref.data(), x.data(), w.view(), T);
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += !SameBits(got[i], fref[i]);
      EXPECT_GT(differ, 0);
    }
  }
}

// Activations quantised once (ops::PreparedActivations) give the bits of a
// product that quantises them itself, for row ranges and every GGUF type the
// model code multiplies; a preparation for another x, token count or dtype is
// not used.
TEST(GgmlBasicMatMulTest, PreparedActivationsGiveTheSameBits) {
  const DType types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_K, DType::kIQ4_XS, DType::kIQ2_XXS,
                         DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kMXFP4};
  for (DType t : types) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t N = 21, K = 2 * kQK_K, T = 3;
    std::vector<uint8_t> bytes(static_cast<size_t>(DTypeBytes(t, N * K)));
    std::mt19937 rng(5);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() & 0x3f);  // small finite scales
    const TensorView w = TensorView::Contiguous(bytes.data(), t, {N, K});
    const std::vector<float> x = Activations(T, K, 77);
    ops::PreparedActivations prepared;
    prepared.Prepare(x.data(), T, K, t);
    const bool quantised = t != DType::kQ8_0 || prepared.For(x.data(), T, w) != nullptr;
    if (t != DType::kQ8_0) ASSERT_NE(prepared.For(x.data(), T, w), nullptr);
    EXPECT_EQ(prepared.For(x.data() + K, T - 1, w), nullptr);
    EXPECT_EQ(prepared.For(x.data(), T - 1, w), nullptr);
    const TensorView other = TensorView::Contiguous(bytes.data(), DType::kF32, {1, K});
    EXPECT_EQ(prepared.For(x.data(), T, other), nullptr);
    std::vector<float> want(T * 10, -1.0f), got(T * 10, -2.0f);
    ops::MatMulRows(want.data(), 10, x.data(), w, T, 5, 15);
    ops::MatMulRows(got.data(), 10, x.data(), w, T, 5, 15, &prepared);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << quantised;
    {
      ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
      ops::PreparedActivations none;
      none.Prepare(x.data(), T, K, t);
      EXPECT_EQ(none.For(x.data(), T, w), nullptr);
    }
  }
}

}  // namespace
}  // namespace dsv4
