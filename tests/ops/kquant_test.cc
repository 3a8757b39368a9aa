// GGUF k-quants (q4_K, q6_K): the scalar dequantisation against goldens from
// gguf-py (tests/data/kquant, tools/reference/make_kquant_goldens.py) bit for
// bit; ops/ref MatMulKQuant against ops/ref MatMul; the ops/simd kernels
// against ops/ref on every Highway target this build compiled and this CPU
// runs: K = 256·{1,2,3,5}, N with remainders of the 4-row groups, T = 1…5,
// misaligned weights and activations, row sub-ranges with a wider output
// stride. Tolerance (oracles/README.md, fp32 accumulation in another order):
// |simd − ref| ≤ 1e-5 · Σ_k |w·x| per output. The in-register dequantisation is
// checked bit for bit with one-hot activations.
//
// The q8_K path (llama.cpp's arithmetic, the default): the ref quantisation
// against ggml's definition (the largest magnitude to −127, ties to even,
// block sums), the ref's integer dot against the dequantised weights
// (DequantizeRow) times the dequantised activations in double, the AVX-512
// kernels against the ref bit for bit, and the distance to the f32 path
// within the activations' rounding.
#include <gtest/gtest.h>

#include <hwy/highway.h>
#include <hwy/targets.h>
#include "../common/for_each_target.h"
#include "../common/scoped_kquant_activations.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/kquant_ref.h"
#include "ops/ref/ops_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::ForEachTarget;

// ---- goldens ----

struct Golden {
  uint32_t ggml_type = 0;
  uint32_t n_blocks = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

Golden ReadGolden(const std::string& name, int block_bytes) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/kquant/" + name;
  std::ifstream f(path, std::ios::binary);
  Golden g;
  if (!f) {
    ADD_FAILURE() << "cannot open " << path;
    return g;
  }
  char magic[4];
  f.read(magic, 4);
  f.read(reinterpret_cast<char*>(&g.ggml_type), 4);
  f.read(reinterpret_cast<char*>(&g.n_blocks), 4);
  EXPECT_EQ(std::string(magic, 4), "KQG1") << path;
  if (!f || g.n_blocks == 0 || g.n_blocks > 1024) {
    ADD_FAILURE() << path << ": bad header";
    return g;
  }
  g.blocks.resize(static_cast<size_t>(g.n_blocks) * block_bytes);
  g.values.resize(static_cast<size_t>(g.n_blocks) * kQK_K);
  f.read(reinterpret_cast<char*>(g.blocks.data()), static_cast<std::streamsize>(g.blocks.size()));
  f.read(reinterpret_cast<char*>(g.values.data()),
         static_cast<std::streamsize>(g.values.size() * sizeof(float)));
  EXPECT_TRUE(f) << path << ": truncated";
  EXPECT_EQ(f.peek(), EOF) << path << ": trailing bytes";
  return g;
}

void ExpectGoldenBitExact(DType dtype, const std::string& file, uint32_t ggml_type) {
  const Golden g = ReadGolden(file, GetDTypeInfo(dtype).block_bytes);
  ASSERT_FALSE(g.values.empty());
  EXPECT_EQ(g.ggml_type, ggml_type);
  // As one row, and block by block from an odd address.
  std::vector<float> got(g.values.size());
  DequantizeRow(dtype, g.blocks.data(), static_cast<int64_t>(got.size()), got.data());
  std::vector<uint8_t> shifted(g.blocks.size() + 1);
  std::memcpy(shifted.data() + 1, g.blocks.data(), g.blocks.size());
  std::vector<float> one(kQK_K);
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &g.values[i], 4);
    if (a != b && ++mismatches <= 5) {
      ADD_FAILURE() << DTypeName(dtype) << " value " << i << " (block " << i / kQK_K << "): got "
                    << got[i] << " want " << g.values[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  for (uint32_t b = 0; b < g.n_blocks; ++b) {
    DequantizeRow(dtype, shifted.data() + 1 + b * GetDTypeInfo(dtype).block_bytes, kQK_K,
                  one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), &g.values[b * kQK_K], kQK_K * sizeof(float))) << b;
  }
}

TEST(KQuantDequantTest, Q4KMatchesGgufPyBitForBit) {
  ExpectGoldenBitExact(DType::kQ4_K, "q4_k_golden.bin", 12);
}

TEST(KQuantDequantTest, Q6KMatchesGgufPyBitForBit) {
  ExpectGoldenBitExact(DType::kQ6_K, "q6_k_golden.bin", 14);
}

TEST(KQuantDequantTest, DTypeTable) {
  EXPECT_EQ(DTypeName(DType::kQ4_K), "q4_K");
  EXPECT_EQ(DTypeName(DType::kQ6_K), "q6_K");
  EXPECT_EQ(DTypeBytes(DType::kQ4_K, 512), 288);
  EXPECT_EQ(DTypeBytes(DType::kQ6_K, 768), 630);
  EXPECT_EQ(DTypeFromName("q4_K"), DType::kQ4_K);
  EXPECT_EQ(DTypeFromName("q6_K"), DType::kQ6_K);
}

// ---- random weights ----

// [n, k] random blocks behind `offset` leading bytes: random codes and packed
// scales, f16 super-scales of either sign around 1e-2 (q4_K dmin too).
struct KWeight {
  DType dtype;
  int64_t n = 0, k = 0;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView::Contiguous(bytes.data() + offset, dtype, {n, k}); }
};

KWeight MakeKWeight(DType dtype, int64_t n, int64_t k, uint32_t seed, size_t offset = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  KWeight w{dtype, n, k, offset, {}};
  const int block_bytes = GetDTypeInfo(dtype).block_bytes;
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(dtype, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n * k / kQK_K; ++b) {
    uint8_t* blk = w.bytes.data() + offset + b * block_bytes;
    const uint16_t d = F32ToF16(scale(rng)), dmin = F32ToF16(scale(rng));
    if (dtype == DType::kQ4_K) {
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
    } else {
      std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
    }
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

// Σ_k |w[n, k] · x[t, k]| per output, in double: the dot's magnitude.
std::vector<double> AbsDots(const TensorView& w, const float* x, int64_t n_tokens) {
  const int64_t N = w.sizes[0], K = w.sizes[1];
  std::vector<float> row(K);
  std::vector<double> out(n_tokens * N);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeRow(w.dtype, w[n].data, K, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(row[k]) * x[t * K + k]);
      out[t * N + n] = s;
    }
  }
  return out;
}

constexpr double kRelTol = 1e-5;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::vector<double>& mag, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), mag.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= kRelTol * mag[i] + 1e-30) && ++bad <= 3) {
      ADD_FAILURE() << what << " output " << i << ": got " << got[i] << " want " << want[i]
                    << " (|w·x| sum " << mag[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

const DType kKQuants[] = {DType::kQ4_K, DType::kQ6_K};

TEST(KQuantRefTest, MatMulKQuantEqualsRefMatMul) {
  for (DType dt : kKQuants) {
    SCOPED_TRACE(DTypeName(dt));
    const KWeight w = MakeKWeight(dt, 7, 768, 11);
    const std::vector<float> x = RandomFloats(3 * 768, 12);
    std::vector<float> a(3 * 7), b(3 * 7);
    ops::ref::MatMulKQuant(a.data(), x.data(), w.view(), 3);
    ops::ref::MatMul(b.data(), x.data(), w.view(), 3);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    // And close to the exact dot in double.
    std::vector<float> row(768);
    for (int64_t n = 0; n < 7; ++n) {
      DequantizeRow(dt, w.view()[n].data, 768, row.data());
      for (int64_t t = 0; t < 3; ++t) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < 768; ++k) {
          s += static_cast<double>(row[k]) * x[t * 768 + k];
          mag += std::fabs(static_cast<double>(row[k]) * x[t * 768 + k]);
        }
        EXPECT_NEAR(a[t * 7 + n], s, kRelTol * mag);
        EXPECT_GT(mag, 0.0);
      }
    }
  }
}

TEST(KQuantRefTest, IsKQuant) {
  EXPECT_TRUE(ops::ref::IsKQuant(DType::kQ4_K));
  EXPECT_TRUE(ops::ref::IsKQuant(DType::kQ6_K));
  EXPECT_FALSE(ops::ref::IsKQuant(DType::kQ8_0));
  EXPECT_EQ(ops::simd::KQuantMatMulKernel(DType::kQ8_0), nullptr);
  EXPECT_EQ(ops::simd::KQuantMatMulKernel(DType::kF32), nullptr);
}

// ---- SIMD against ref ----

ops::simd::MatMulArgs Args(float* out, int64_t out_stride, const float* x, const TensorView& w,
                           int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  ops::simd::MatMulArgs a;
  a.out = out;
  a.out_stride = out_stride;
  a.x = x;
  a.n_tokens = n_tokens;
  a.w = w;
  a.row_begin = row_begin;
  a.row_end = row_end;
  return a;
}

TEST(KQuantSimdTest, MatchesRefOnEveryTarget) {
  ForEachTarget([] {
    for (DType dt : kKQuants) {
      for (int64_t kb : {1, 2, 3, 5}) {
        const int64_t K = kb * kQK_K;
        for (int64_t N : {1, 3, 4, 5, 9, 14}) {
          for (size_t w_off : {size_t{0}, size_t{1}}) {
            const KWeight w = MakeKWeight(dt, N, K, static_cast<uint32_t>(K * 31 + N + w_off));
            for (int64_t T = 1; T <= 5; ++T) {
              // x misaligned by one float.
              std::vector<float> xs = RandomFloats(T * K + 1, static_cast<uint32_t>(T + K));
              const float* x = xs.data() + 1;
              std::vector<float> want(T * N), got(T * N, NAN);
              ops::ref::MatMulKQuant(want.data(), x, w.view(), T);
              ops::simd::KQuantMatMulKernel(dt)(Args(got.data(), N, x, w.view(), T, 0, N));
              ExpectClose(got, want, AbsDots(w.view(), x, T),
                          std::string(DTypeName(dt)) + " K=" + std::to_string(K) +
                              " N=" + std::to_string(N) + " T=" + std::to_string(T) +
                              " w_off=" + std::to_string(w_off));
            }
          }
        }
      }
    }
  });
}

TEST(KQuantSimdTest, MisalignedWeightsAndRowRangeWithWideStride) {
  ForEachTarget([] {
    for (DType dt : kKQuants) {
      const int64_t N = 11, K = 3 * kQK_K;
      for (size_t off : {size_t{1}, size_t{3}, size_t{7}}) {
        const KWeight w = MakeKWeight(dt, N, K, 77 + static_cast<uint32_t>(off), off);
        for (int64_t T : {1, 2, 3}) {
          const std::vector<float> x = RandomFloats(T * K, 5);
          std::vector<float> want(T * N);
          ops::ref::MatMulKQuant(want.data(), x.data(), w.view(), T);
          // Rows [2, 9) into an output with stride 10 (sentinels elsewhere).
          const int64_t begin = 2, end = 9, stride = 10;
          std::vector<float> got(T * stride, -7.0f);
          ops::simd::KQuantMatMulKernel(dt)(
              Args(got.data(), stride, x.data(), w.view(), T, begin, end));
          const std::vector<double> mag = AbsDots(w.view(), x.data(), T);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t j = 0; j < stride; ++j) {
              const float g = got[t * stride + j];
              if (j >= end - begin) {
                EXPECT_EQ(g, -7.0f) << "wrote past the row range";
                continue;
              }
              const int64_t n = begin + j;
              EXPECT_NEAR(g, want[t * N + n], kRelTol * mag[t * N + n])
                  << DTypeName(dt) << " off " << off << " T " << T << " n " << n;
            }
          }
        }
      }
    }
  });
}

// One-hot activations pick single weights: the in-register dequantisation
// must equal DequantizeRow exactly, at every position of a block, on both paths.
TEST(KQuantSimdTest, DequantisationIsBitExact) {
  ForEachTarget([] {
    for (DType dt : kKQuants) {
      const int64_t N = 5, K = 2 * kQK_K;
      const KWeight w = MakeKWeight(dt, N, K, 3);
      std::vector<float> want(N * K);
      for (int64_t n = 0; n < N; ++n) {
        DequantizeRow(dt, w.view()[n].data, K, want.data() + n * K);
      }
      const int64_t T = 2;  // T = 2 takes the tile path; its first token alone the matvec one
      std::vector<float> x(T * K);
      int bad = 0;
      for (int64_t k = 0; k < K; ++k) {
        std::fill(x.begin(), x.end(), 0.0f);
        x[k] = 1.0f;
        x[K + (K - 1 - k)] = 1.0f;
        std::vector<float> tile(T * N), vec(N);
        ops::simd::KQuantMatMulKernel(dt)(Args(tile.data(), N, x.data(), w.view(), T, 0, N));
        ops::simd::KQuantMatMulKernel(dt)(Args(vec.data(), N, x.data(), w.view(), 1, 0, N));
        for (int64_t n = 0; n < N; ++n) {
          const float a = want[n * K + k], b = want[n * K + (K - 1 - k)];
          if ((vec[n] != a || tile[n] != a || tile[N + n] != b) && ++bad <= 3) {
            ADD_FAILURE() << DTypeName(dt) << " k " << k << " n " << n << ": matvec " << vec[n]
                          << " tile " << tile[n] << "/" << tile[N + n] << " want " << a << "/" << b;
          }
        }
      }
      EXPECT_EQ(bad, 0) << DTypeName(dt);
    }
  });
}

// A token's result does not depend on how many tokens share the call.
TEST(KQuantSimdTest, MatvecAndTilePathsAgreeBitForBit) {
  ForEachTarget([] {
    for (DType dt : kKQuants) {
      const int64_t N = 9, K = 5 * kQK_K, T = 5;
      const KWeight w = MakeKWeight(dt, N, K, 21);
      const std::vector<float> x = RandomFloats(T * K, 22);
      std::vector<float> all(T * N);
      ops::simd::KQuantMatMulKernel(dt)(Args(all.data(), N, x.data(), w.view(), T, 0, N));
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> one(N);
        ops::simd::KQuantMatMulKernel(dt)(Args(one.data(), N, x.data() + t * K, w.view(), 1, 0, N));
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * N, N * sizeof(float)))
            << DTypeName(dt) << " token " << t;
      }
    }
  });
}

using ::dsv4::testing::ScopedKQuantActivations;

// ops::MatMul and ops::MatMulRows pick the k-quant kernels (pool of 2): the
// f32 ones with f32 activations, the q8_K path by default.
TEST(KQuantSimdTest, OpsMatMulDispatches) {
  EXPECT_EQ(ops::GetKQuantActivations(), ops::KQuantActivations::kQ8K);  // the default
  ThreadPool pool(2);
  for (DType dt : kKQuants) {
    const int64_t N = 300, K = 2 * kQK_K;
    const KWeight w = MakeKWeight(dt, N, K, 9);
    for (int64_t T : {1, 4, 11}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + " T=" + std::to_string(T));
      const std::vector<float> x = RandomFloats(T * K, 10);
      std::vector<float> want(T * N), got(T * N), rows(T * N), simd(T * N);
      {
        ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
        ops::ref::MatMulKQuant(want.data(), x.data(), w.view(), T);
        ops::MatMul(pool, got.data(), x.data(), w.view(), T);
        ops::MatMulRows(rows.data(), N, x.data(), w.view(), T, 0, N);
        ops::simd::KQuantMatMulKernel(dt)(Args(simd.data(), N, x.data(), w.view(), T, 0, N));
        ExpectClose(got, want, AbsDots(w.view(), x.data(), T), std::string(DTypeName(dt)));
        // The same kernel whichever entry point: identical bits.
        EXPECT_EQ(0, std::memcmp(got.data(), simd.data(), got.size() * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(rows.data(), simd.data(), rows.size() * sizeof(float)));
      }
      // q8_K: bit for bit the ref twin, whichever entry point.
      ops::ref::MatMulKQuantQ8K(want.data(), x.data(), w.view(), T);
      ops::MatMul(pool, got.data(), x.data(), w.view(), T);
      ops::MatMulRows(rows.data(), N, x.data(), w.view(), T, 0, N);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(rows.data(), want.data(), rows.size() * sizeof(float)));
    }
  }
}

// ---- the q8_K path ----

// Activations of every kind a block can hold: normal values of one block
// scale per block (1e-3 … 1e3), a block of zeros, one with a single nonzero
// value, one whose largest magnitudes tie with opposite signs, one of values
// iscale maps onto halves (ties to even), and one of denormals (whose iscale
// would overflow: ggml's codes are undefined there, ours are zeros).
std::vector<float> Q8KActivations(int64_t n_blocks, uint32_t seed) {
  std::vector<float> x = RandomFloats(n_blocks * kQK_K, seed);
  for (int64_t b = 0; b < n_blocks; ++b) {
    float* xb = x.data() + b * kQK_K;
    switch (b % 6) {
      case 1:
        std::fill_n(xb, kQK_K, 0.0f);
        break;
      case 2:
        std::fill_n(xb, kQK_K, 0.0f);
        xb[77] = -0.5f;
        break;
      case 3:
        xb[40] = -9.0f;
        xb[200] = 9.0f;
        break;
      case 4:  // max 127: iscale = -1, so x ± 0.5 lands on halves
        for (int i = 0; i < kQK_K; ++i) xb[i] = static_cast<float>(i % 253 - 126) + 0.5f;
        xb[3] = 127.0f;
        break;
      case 5:  // so small that −127 / max overflows: zeros
        for (int i = 0; i < kQK_K; ++i) xb[i] *= 1e-40f;
        break;
      default:
        for (int i = 0; i < kQK_K; ++i) xb[i] *= std::pow(10.0f, static_cast<float>(b % 7 - 3));
    }
  }
  return x;
}

TEST(KQuantQ8KTest, RefQuantisationFollowsGgml) {
  std::vector<float> x = Q8KActivations(6, 5);
  std::vector<BlockQ8K> q(6);
  ops::ref::QuantizeRowQ8K(x.data(), 6 * kQK_K, q.data());
  for (int64_t b = 0; b < 6; ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    const float* xb = x.data() + b * kQK_K;
    const BlockQ8K& o = q[b];
    if (b == 1 || b == 5) {  // all zero, or denormal: d = 0, codes 0
      EXPECT_EQ(o.d, 0.0f);
      for (int i = 0; i < kQK_K; ++i) EXPECT_EQ(o.qs[i], 0);
      continue;
    }
    // The first value of largest magnitude maps to −127: d = −max/127.
    int arg = 0;
    for (int i = 1; i < kQK_K; ++i) arg = std::fabs(xb[i]) > std::fabs(xb[arg]) ? i : arg;
    EXPECT_EQ(o.qs[arg], -127);
    EXPECT_EQ(o.d, 1.0f / (-127.0f / xb[arg]));
    if (b == 3) {
      EXPECT_EQ(o.qs[200], 127);  // the tie's second, opposite sign
    }
    for (int i = 0; i < kQK_K; ++i) {
      // Every code within half a step of its value.
      const double v = static_cast<double>(xb[i]) * (-127.0 / xb[arg]);
      EXPECT_LE(std::fabs(o.qs[i] - v), 0.5 + 1e-4) << i;
    }
    if (b == 4) {
      EXPECT_EQ(o.qs[0], 126);  // −125.5 · −1 = 125.5: ties to even
      EXPECT_EQ(o.qs[1], 124);  // 124.5 → 124
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += o.qs[16 * j + i];
      EXPECT_EQ(o.bsums[j], sum);
    }
  }
}

TEST(KQuantQ8KTest, SimdQuantisationMatchesRefBitForBit) {
  const ops::simd::QuantizeQ8KFn quantize = ops::simd::QuantizeQ8KKernel();
  if (quantize == nullptr) GTEST_SKIP() << "no AVX-512 on this CPU: ops::ref runs instead";
  for (int64_t n_blocks : {1, 6, 13}) {
    std::vector<float> xs = Q8KActivations(n_blocks, static_cast<uint32_t>(n_blocks));
    xs.insert(xs.begin(), 0.0f);  // misaligned by one float
    std::vector<BlockQ8K> want(n_blocks), got(n_blocks);
    ops::ref::QuantizeRowQ8K(xs.data() + 1, n_blocks * kQK_K, want.data());
    quantize(xs.data() + 1, n_blocks * kQK_K, got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), n_blocks * sizeof(BlockQ8K))) << n_blocks;
  }
}

// The integer form is the dot of the exactly dequantised weights (DequantizeRow,
// itself bit for bit gguf-py's) with the dequantised activations (d·q): in
// double, to within float rounding.
TEST(KQuantQ8KTest, RefDotIsTheDequantisedProduct) {
  for (DType dt : kKQuants) {
    const int64_t N = 6, K = 4 * kQK_K, nb = K / kQK_K;
    const KWeight w = MakeKWeight(dt, N, K, 31);
    const std::vector<float> x = Q8KActivations(nb, 32);
    std::vector<BlockQ8K> q(nb);
    ops::ref::QuantizeRowQ8K(x.data(), K, q.data());
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      DequantizeRow(dt, w.view()[n].data, K, row.data());
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = static_cast<double>(q[k / kQK_K].d) * q[k / kQK_K].qs[k % kQK_K];
        want += row[k] * a;
        mag += std::fabs(row[k] * a);
      }
      const float got =
          ops::ref::DotKQuantQ8K(dt, static_cast<const uint8_t*>(w.view()[n].data), q.data(), nb);
      EXPECT_NEAR(got, want, 1e-5 * mag + 1e-30) << DTypeName(dt) << " row " << n;
      EXPECT_GT(mag, 0.0);
    }
  }
}

// Both variants (with and without VNNI) where the CPU has them.
TEST(KQuantQ8KTest, SimdMatchesRefBitForBit) {
  if (ops::simd::KQuantQ8KKernel(DType::kQ4_K) == nullptr) {
    GTEST_SKIP() << "no AVX-512 on this CPU: ops::ref runs instead";
  }
  int variants = 0;
  for (const bool vnni : {false, true}) {
    for (DType dt : kKQuants) {
      const ops::simd::KQuantQ8KFn kernel = ops::simd::KQuantQ8KKernelVariant(dt, vnni);
      if (kernel == nullptr) {
        std::printf("no AVX512-VNNI on this CPU: that variant is not tested\n");
        continue;
      }
      ++variants;
      SCOPED_TRACE(vnni ? "VNNI" : "AVX-512");
      for (int64_t kb : {1, 2, 3, 6, 31}) {  // 31: chunks of two groups of 16 tokens
        const int64_t K = kb * kQK_K;
        for (int64_t N : {1, 3, 7, 17}) {  // 17: two groups of 8 rows and one row
          for (size_t off : {size_t{0}, size_t{3}}) {
            const KWeight w = MakeKWeight(dt, N, K, static_cast<uint32_t>(K + N + off), off);
            // 1–5: a token at a time; 6+: 16 tokens at a time (the last group
            // partial); 40 at kb = 31: two chunks.
            for (int64_t T : {1, 5, 6, 16, 19, 40}) {
              SCOPED_TRACE(std::string(DTypeName(dt)) + " K=" + std::to_string(K) +
                           " N=" + std::to_string(N) + " T=" + std::to_string(T) +
                           " off=" + std::to_string(off));
              const std::vector<float> x = Q8KActivations(T * kb, static_cast<uint32_t>(T + K));
              std::vector<BlockQ8K> q(T * kb);
              for (int64_t t = 0; t < T; ++t) {
                ops::ref::QuantizeRowQ8K(x.data() + t * K, K, q.data() + t * kb);
              }
              std::vector<float> want(T * N);
              ops::ref::MatMulKQuantQ8K(want.data(), x.data(), w.view(), T);
              // All rows, then rows [1, N) into a wider output (sentinels past them).
              std::vector<float> got(T * N, NAN);
              kernel(Args(got.data(), N, nullptr, w.view(), T, 0, N), q.data());
              EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
              const int64_t stride = N + 2;
              std::vector<float> part(T * stride, -7.0f);
              kernel(Args(part.data(), stride, nullptr, w.view(), T, 1, N), q.data());
              for (int64_t t = 0; t < T; ++t) {
                for (int64_t j = 0; j < stride; ++j) {
                  if (j < N - 1) {
                    EXPECT_EQ(part[t * stride + j], want[t * N + 1 + j]) << t << " " << j;
                  } else {
                    EXPECT_EQ(part[t * stride + j], -7.0f) << "wrote past the row range";
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(variants, 2);  // both formats, at least without VNNI
}

// The q8_K path moves a product from the f32 one by no more than its
// activations' rounding: half a step d per value, Σ_k |w_k| · |d| / 2.
TEST(KQuantQ8KTest, WithinActivationRoundingOfTheF32Product) {
  for (DType dt : kKQuants) {
    const int64_t N = 8, K = 3 * kQK_K, nb = K / kQK_K;
    const KWeight w = MakeKWeight(dt, N, K, 41);
    const std::vector<float> x = RandomFloats(K, 42);
    std::vector<BlockQ8K> q(nb);
    ops::ref::QuantizeRowQ8K(x.data(), K, q.data());
    std::vector<float> exact(N), fast(N), row(K);
    ops::ref::MatMulKQuant(exact.data(), x.data(), w.view(), 1);
    ops::ref::MatMulKQuantQ8K(fast.data(), x.data(), w.view(), 1);
    const std::vector<double> mag = AbsDots(w.view(), x.data(), 1);
    for (int64_t n = 0; n < N; ++n) {
      DequantizeRow(dt, w.view()[n].data, K, row.data());
      double bound = 0;
      for (int64_t k = 0; k < K; ++k) bound += std::fabs(row[k] * q[k / kQK_K].d) / 2;
      EXPECT_LE(std::fabs(fast[n] - exact[n]), bound + 1e-5 * mag[n]) << DTypeName(dt) << " " << n;
      EXPECT_GT(std::fabs(fast[n] - exact[n]), 0.0f) << "the paths should differ";
    }
  }
}

}  // namespace
}  // namespace dsv4
