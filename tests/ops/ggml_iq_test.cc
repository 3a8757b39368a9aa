// GGUF grid i-quants (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m):
//   - DequantizeRow against gguf-py's dequantisation (tests/data/ggml_quants,
//     tools/reference/make_ggml_quant_goldens.py) bit for bit, as one row and
//     block by block from an odd address. The goldens' random blocks index the
//     grids all over, so they check the generated tables (tensor/ggml_grids.h)
//     value by value too; GridTables checks the tables' shape on its own.
//   - ops::ref::DotIqQ8K against Σ dequant(w)·(dx·q8) in double, within
//     1e-5 · Σ|dequant(w)·dx·q8| (float rounding of a few steps per block).
//   - the ops/simd kernels (GgmlIqQ8Kernel) against ops/ref bit for bit on every
//     Highway target this build compiled and this CPU runs: K = 256·{1,2,3,5}
//     and 4096, N with remainders of the 4-row groups, T = 1…5 and 17, row
//     sub-ranges into a wider output stride, misaligned weights, the goldens'
//     edge blocks (zero, subnormal and negative scales, all-ones bytes) as
//     weights, all-zero tokens.
//   - ops::MatMul on a ThreadPool and ops::MatMulRows against
//     ops::ref::MatMulGgmlQ8 bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../common/for_each_target.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"
#include "tensor/ggml_grids.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::ForEachTarget;

struct IqType {
  DType dtype;
  const char* file;
  uint32_t ggml_type;
};

const IqType kTypes[] = {
    {DType::kIQ2_XXS, "iq2_xxs", 16}, {DType::kIQ2_XS, "iq2_xs", 17}, {DType::kIQ2_S, "iq2_s", 22},
    {DType::kIQ3_XXS, "iq3_xxs", 18}, {DType::kIQ3_S, "iq3_s", 21},   {DType::kIQ1_S, "iq1_s", 19},
    {DType::kIQ1_M, "iq1_m", 29},
};

int BlockBytes(DType t) { return GetDTypeInfo(t).block_bytes; }

// ---- goldens ----

struct Golden {
  uint32_t ggml_type = 0, block_elems = 0, n_blocks = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

Golden ReadGolden(const IqType& t) {
  const std::string path =
      std::string(DSV4_TEST_DATA_DIR) + "/ggml_quants/" + t.file + "_golden.bin";
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
  if (!f || g.n_blocks == 0 || g.n_blocks > 1024 || g.block_elems != kQK_K) {
    ADD_FAILURE() << path << ": bad header";
    return g;
  }
  g.blocks.resize(static_cast<size_t>(g.n_blocks) * BlockBytes(t.dtype));
  g.values.resize(static_cast<size_t>(g.n_blocks) * kQK_K);
  f.read(reinterpret_cast<char*>(g.blocks.data()), static_cast<std::streamsize>(g.blocks.size()));
  f.read(reinterpret_cast<char*>(g.values.data()),
         static_cast<std::streamsize>(g.values.size() * sizeof(float)));
  EXPECT_TRUE(f) << path << ": truncated";
  EXPECT_EQ(f.peek(), EOF) << path << ": trailing bytes";
  return g;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GgmlIqDequantTest, MatchesGgufPyBitForBit) {
  for (const IqType& t : kTypes) {
    SCOPED_TRACE(t.file);
    const Golden g = ReadGolden(t);
    ASSERT_FALSE(g.values.empty());
    EXPECT_EQ(g.ggml_type, t.ggml_type);
    std::vector<float> got(g.values.size());
    DequantizeRow(t.dtype, g.blocks.data(), static_cast<int64_t>(got.size()), got.data());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (Bits(got[i]) != Bits(g.values[i]) && ++bad <= 5) {
        ADD_FAILURE() << "value " << i << " (block " << i / kQK_K << "): got " << got[i] << " want "
                      << g.values[i];
      }
    }
    EXPECT_EQ(bad, 0);
    // Block by block from an odd address.
    std::vector<uint8_t> shifted(g.blocks.size() + 1);
    std::memcpy(shifted.data() + 1, g.blocks.data(), g.blocks.size());
    std::vector<float> one(kQK_K);
    for (uint32_t b = 0; b < g.n_blocks; ++b) {
      DequantizeRow(t.dtype, shifted.data() + 1 + b * BlockBytes(t.dtype), kQK_K, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), &g.values[b * kQK_K], kQK_K * sizeof(float))) << b;
    }
  }
}

TEST(GgmlIqDequantTest, DTypeTable) {
  EXPECT_EQ(DTypeBytes(DType::kIQ2_XXS, 512), 132);
  EXPECT_EQ(DTypeBytes(DType::kIQ2_XS, 256), 74);
  EXPECT_EQ(DTypeBytes(DType::kIQ2_S, 256), 82);
  EXPECT_EQ(DTypeBytes(DType::kIQ3_XXS, 256), 98);
  EXPECT_EQ(DTypeBytes(DType::kIQ3_S, 256), 110);
  EXPECT_EQ(DTypeBytes(DType::kIQ1_S, 256), 50);
  EXPECT_EQ(DTypeBytes(DType::kIQ1_M, 768), 168);
  for (const IqType& t : kTypes) EXPECT_EQ(DTypeFromName(t.file), t.dtype) << t.file;
}

// The generated tables' shape (their values are checked through the goldens):
// each grid's rows distinct and made of its type's levels; the sign table maps
// index i to i plus a parity bit.
template <class Row, size_t N>
void ExpectGrid(const Row (&grid)[N], std::set<int> levels, int values_per_row, const char* name) {
  std::set<Row> rows(grid, grid + N);
  EXPECT_EQ(rows.size(), N) << name << ": repeated rows";
  for (size_t r = 0; r < N; ++r) {
    for (int j = 0; j < values_per_row; ++j) {
      const int v = static_cast<int8_t>((grid[r] >> (8 * j)) & 0xFF);
      if (levels.count(v) == 0) {
        ADD_FAILURE() << name << " row " << r << " value " << j << " = " << v;
        return;
      }
    }
  }
}

TEST(GgmlIqDequantTest, GridTables) {
  ExpectGrid(kIq2xxsGrid, {8, 25, 43}, 8, "iq2xxs");
  ExpectGrid(kIq2xsGrid, {8, 25, 43}, 8, "iq2xs");
  ExpectGrid(kIq2sGrid, {8, 25, 43}, 8, "iq2s");
  ExpectGrid(kIq3xxsGrid, {4, 12, 20, 28, 36, 44, 52, 62}, 4, "iq3xxs");
  ExpectGrid(kIq3sGrid, {1, 3, 5, 7, 9, 11, 13, 15}, 4, "iq3s");
  ExpectGrid(kIq1sGrid, {-1, 0, 1}, 8, "iq1s");
  // llama.cpp's first rows.
  EXPECT_EQ(kIq2xxsGrid[0], 0x0808080808080808u);
  EXPECT_EQ(kIq2xxsGrid[1], 0x080808080808082bu);
  EXPECT_EQ(kIq3sGrid[1], 0x01010103u);
  EXPECT_EQ(kIq1sGrid[1], 0xffffffffffffff01u);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(kKsignsIq2xs[i] & 0x7F, i);
    EXPECT_EQ(__builtin_popcount(kKsignsIq2xs[i]) % 2, 0) << i;
  }
  for (int j = 0; j < 8; ++j) EXPECT_EQ(kKmaskIq2xs[j], 1 << j);
  EXPECT_EQ(kIq1sDelta, 0.125f);
}

// ---- random weights and activations ----

// [n, k] random blocks behind `offset` leading bytes, the f16 scale set to
// values of either sign in [−0.02, 0.02] (iq1_m: in its four top nibbles);
// with `edge`, row 0's first block has scale 0.
struct IqWeight {
  DType dtype;
  int64_t n = 0, k = 0;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView::Contiguous(bytes.data() + offset, dtype, {n, k}); }
};

void SetScale(DType dt, uint8_t* blk, float v) {
  const uint16_t h = F32ToF16(v);
  if (dt != DType::kIQ1_M) {
    std::memcpy(blk, &h, 2);
    return;
  }
  uint8_t* sc = blk + offsetof(BlockIQ1_M, scales);
  for (int i = 0; i < 4; ++i) {
    uint16_t s;
    std::memcpy(&s, sc + 2 * i, 2);
    s = static_cast<uint16_t>((s & 0x0FFFu) | (((h >> (4 * i)) & 0xFu) << 12));
    std::memcpy(sc + 2 * i, &s, 2);
  }
}

IqWeight MakeWeight(DType dt, int64_t n, int64_t k, uint32_t seed, size_t offset = 0,
                    bool edge = true) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  IqWeight w{dt, n, k, offset, {}};
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(dt, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n * k / kQK_K; ++b) {
    SetScale(dt, w.bytes.data() + offset + b * BlockBytes(dt), scale(rng));
  }
  if (edge) SetScale(dt, w.bytes.data() + offset, 0.0f);
  return w;
}

// A weight made of the golden's blocks (its edge blocks included), cycled.
IqWeight GoldenWeight(const IqType& t, int64_t n, int64_t k) {
  const Golden g = ReadGolden(t);
  IqWeight w{t.dtype, n, k, 0, {}};
  const int64_t blocks = n * k / kQK_K;
  const int bb = BlockBytes(t.dtype);
  w.bytes.resize(static_cast<size_t>(blocks * bb));
  for (int64_t b = 0; b < blocks && g.n_blocks > 0; ++b) {
    std::memcpy(w.bytes.data() + b * bb, g.blocks.data() + (b % g.n_blocks) * bb, bb);
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

std::vector<BlockQ8K> QuantizeTokens(const std::vector<float>& x, int64_t T, int64_t K) {
  std::vector<BlockQ8K> q(T * K / kQK_K);
  for (int64_t t = 0; t < T; ++t) {
    ops::ref::QuantizeActivations(ops::ref::ActFormat::kQ8_K, x.data() + t * K, K,
                                  q.data() + t * K / kQK_K);
  }
  return q;
}

// ---- ref against double ----

TEST(GgmlIqRefTest, DotMatchesDequantisedDotInDouble) {
  const int64_t N = 6, K = 3 * kQK_K, T = 4;
  for (const IqType& t : kTypes) {
    SCOPED_TRACE(t.file);
    EXPECT_EQ(ops::ref::ActivationFormat(t.dtype), ops::ref::ActFormat::kQ8_K);
    const IqWeight w = MakeWeight(t.dtype, N, K, 100 + t.ggml_type);
    const std::vector<float> x = Activations(T, K, 7);
    const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, K);
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      DequantizeRow(t.dtype, w.view()[n].data, K, row.data());
      for (int64_t tok = 0; tok < T; ++tok) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const BlockQ8K& xb = xq[tok * (K / kQK_K) + k / kQK_K];
          const double xv = static_cast<double>(xb.d) * xb.qs[k % kQK_K];
          s += static_cast<double>(row[k]) * xv;
          mag += std::fabs(static_cast<double>(row[k]) * xv);
        }
        const float got = ops::ref::DotIqQ8K(t.dtype, static_cast<const uint8_t*>(w.view()[n].data),
                                             xq.data() + tok * (K / kQK_K), K);
        EXPECT_NEAR(got, s, 1e-5 * mag + 1e-30) << "n " << n << " token " << tok;
        if (tok == 2) {
          EXPECT_EQ(got, 0.0f) << "all-zero token";
        } else {
          EXPECT_GT(mag, 0.0);
        }
      }
    }
  }
}

// ---- SIMD against ref ----

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

// out[t·N + n] by DotIqQ8K.
std::vector<float> RefOut(const IqWeight& w, const std::vector<BlockQ8K>& xq, int64_t T) {
  const int64_t N = w.n, K = w.k;
  std::vector<float> out(T * N);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      out[t * N + n] = ops::ref::DotIqQ8K(w.dtype, static_cast<const uint8_t*>(w.view()[n].data),
                                          xq.data() + t * (K / kQK_K), K);
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

TEST(GgmlIqSimdTest, KernelsExistForTheGridTypesOnly) {
  for (const IqType& t : kTypes) EXPECT_NE(ops::simd::GgmlIqQ8Kernel(t.dtype), nullptr) << t.file;
  for (DType other : {DType::kF32, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ2_K,
                      DType::kIQ4_NL, DType::kIQ4_XS}) {
    EXPECT_EQ(ops::simd::GgmlIqQ8Kernel(other), nullptr) << DTypeName(other);
  }
}

TEST(GgmlIqSimdTest, MatchesRefBitForBitOnEveryTarget) {
  struct Shape {
    int64_t K;
    std::vector<int64_t> ns;
  };
  const Shape shapes[] = {{kQK_K, {1, 3, 4, 5, 9}},
                          {2 * kQK_K, {1, 6}},
                          {3 * kQK_K, {3, 7}},
                          {5 * kQK_K, {2, 5}},
                          {4096, {5}}};
  for (const IqType& t : kTypes) {
    for (const Shape& s : shapes) {
      for (int64_t N : s.ns) {
        const IqWeight w = MakeWeight(t.dtype, N, s.K, static_cast<uint32_t>(s.K + N));
        for (int64_t T : {1, 2, 3, 4, 5, 17}) {
          const std::vector<float> x = Activations(T, s.K, static_cast<uint32_t>(T * 7 + N));
          const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, s.K);
          const std::vector<float> want = RefOut(w, xq, T);
          const std::string what = std::string(t.file) + " K=" + std::to_string(s.K) +
                                   " N=" + std::to_string(N) + " T=" + std::to_string(T);
          ForEachTarget([&] {
            std::vector<float> got(T * N, NAN);
            ops::simd::GgmlIqQ8Kernel(t.dtype)(Args(got.data(), N, w.view(), T, 0, N), xq.data());
            ExpectSameBits(got, want, what);
          });
        }
      }
    }
  }
}

TEST(GgmlIqSimdTest, MisalignedWeightsAndRowRangeWithWideStride) {
  const int64_t N = 11, K = 3 * kQK_K;
  for (const IqType& t : kTypes) {
    for (size_t off : {size_t{1}, size_t{3}, size_t{7}}) {
      const IqWeight w = MakeWeight(t.dtype, N, K, 77 + static_cast<uint32_t>(off), off);
      for (int64_t T : {1, 2, 5}) {
        const std::vector<float> x = Activations(T, K, 5);
        const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, K);
        const std::vector<float> want = RefOut(w, xq, T);
        // Rows [2, 9) into an output with stride 10 (sentinels elsewhere).
        const int64_t begin = 2, end = 9, stride = 10;
        ForEachTarget([&] {
          std::vector<float> got(T * stride, -7.0f);
          ops::simd::GgmlIqQ8Kernel(t.dtype)(Args(got.data(), stride, w.view(), T, begin, end),
                                             xq.data());
          for (int64_t tok = 0; tok < T; ++tok) {
            for (int64_t j = 0; j < stride; ++j) {
              const float g = got[tok * stride + j];
              if (j >= end - begin) {
                EXPECT_EQ(g, -7.0f) << t.file << ": wrote past the row range";
                continue;
              }
              EXPECT_EQ(Bits(g), Bits(want[tok * N + begin + j]))
                  << t.file << " off " << off << " T " << T << " n " << begin + j;
            }
          }
        });
      }
    }
  }
}

// The goldens' blocks as weights: zero, subnormal and negative scales, all-ones bytes.
TEST(GgmlIqSimdTest, GoldenEdgeBlocksMatchRef) {
  const int64_t N = 6, K = 4 * kQK_K, T = 3;
  for (const IqType& t : kTypes) {
    const IqWeight w = GoldenWeight(t, N, K);
    const std::vector<float> x = Activations(T, K, 3);
    const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, K);
    const std::vector<float> want = RefOut(w, xq, T);
    ForEachTarget([&] {
      std::vector<float> got(T * N, NAN);
      ops::simd::GgmlIqQ8Kernel(t.dtype)(Args(got.data(), N, w.view(), T, 0, N), xq.data());
      ExpectSameBits(got, want, t.file);
    });
  }
}

// ops::MatMul (pool of 2) and ops::MatMulRows dispatch to the kernels: bit for
// bit ops::ref::MatMulGgmlQ8.
TEST(GgmlIqSimdTest, OpsMatMulMatchesRefMatMul) {
  ASSERT_EQ(ops::GetKQuantActivations(), ops::KQuantActivations::kQ8K);
  ThreadPool pool(2);
  for (const IqType& t : kTypes) {
    const int64_t N = 301, K = 2 * kQK_K;
    const IqWeight w = MakeWeight(t.dtype, N, K, 9);
    for (int64_t T : {1, 4, 11}) {
      SCOPED_TRACE(std::string(t.file) + " T=" + std::to_string(T));
      const std::vector<float> x = Activations(T, K, 10);
      std::vector<float> want(T * N), got(T * N, NAN), rows(T * N, NAN);
      ops::ref::MatMulGgmlQ8(want.data(), x.data(), w.view(), T);
      ops::MatMul(pool, got.data(), x.data(), w.view(), T);
      ops::MatMulRows(rows.data(), N, x.data(), w.view(), T, 0, N);
      ExpectSameBits(got, want, "MatMul");
      ExpectSameBits(rows, want, "MatMulRows");
    }
  }
}

}  // namespace
}  // namespace dsv4
