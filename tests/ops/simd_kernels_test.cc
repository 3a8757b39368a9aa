// ops/simd kernels against their ops/ref twins, on every Highway target this
// build compiled and this CPU runs (AVX-512, AVX2, SSE4, SSSE3, scalar here):
// sizes 0…3 vectors plus remainders, several panels, misaligned pointers, row
// sub-ranges with a wider output stride. Tolerances are the kernel rows of
// oracles/README.md: matmul NMSE ≤ 5e-4 and max-abs ≤ 1e-4·max|ref|;
// elementwise NMSE ≤ 1e-7. Dequantisation must be bit-exact (one-hot inputs).
#include "ops/simd/simd_kernels.h"

#include <gtest/gtest.h>

#include <hwy/highway.h>
#include <hwy/targets.h>
#include "../common/for_each_target.h"
#include "../common/matmul_fixtures.h"
#include "../common/scoped_kquant_activations.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/bandwidth.h"
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace dsv4 {
namespace {

constexpr int kMaxLanes = 16;  // the widest float vector compiled (AVX-512)

using ::dsv4::testing::ForEachTarget;

using ::dsv4::testing::Compare;
using ::dsv4::testing::Error;
using ::dsv4::testing::ExpectMatMulClose;
using ::dsv4::testing::MakeWeight;
using ::dsv4::testing::RandomFloats;
using ::dsv4::testing::Weight;

// The scalar twin: out[t * out_stride + (n - row_begin)].
void RefRows(const Weight& w, float* out, int64_t out_stride, const float* x, int64_t n_tokens,
             int64_t row_begin, int64_t row_end) {
  if (w.dtype == DType::kFp8E4m3) {
    ops::ref::MatMulFp8Block(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end,
                             w.fp8_block);
  } else if (w.dtype == DType::kFp4E2m1) {
    ops::ref::MatMulFp4Block(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end);
  } else {
    ops::ref::MatMul(out, x, w.view().Slice(row_begin, row_end), n_tokens, out_stride);
  }
}

void SimdRows(const Weight& w, float* out, int64_t out_stride, const float* x, int64_t n_tokens,
              int64_t row_begin, int64_t row_end) {
  if (w.dtype == DType::kFp8E4m3) {
    ops::MatMulFp8BlockRows(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end,
                            w.fp8_block);
  } else if (w.dtype == DType::kFp4E2m1) {
    ops::MatMulFp4BlockRows(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end);
  } else {
    ops::MatMulRows(out, out_stride, x, w.view(), n_tokens, row_begin, row_end);
  }
}

// All rows, out stride N, x misaligned by x_offset floats.
void CheckAgainstRef(const Weight& w, int64_t n_tokens, int x_offset, const std::string& what) {
  const std::vector<float> xbuf = RandomFloats(x_offset + n_tokens * w.k + 1, 77 + w.k);
  const float* x = xbuf.data() + x_offset;
  std::vector<float> want(n_tokens * w.n, -1.0f), got(n_tokens * w.n, -2.0f);
  if (w.k == 0) {
    // An empty sum is 0. (The scalar twin is not called: DequantizeRow of 0
    // elements into an empty buffer hands memcpy a null pointer.)
    std::fill(want.begin(), want.end(), 0.0f);
  } else {
    RefRows(w, want.data(), w.n, x, n_tokens, 0, w.n);
  }
  SimdRows(w, got.data(), w.n, x, n_tokens, 0, w.n);
  ExpectMatMulClose(got, want, what);
  if (w.k == 0) {
    EXPECT_EQ(got, want) << what;
  }
}

std::string Describe(const Weight& w, int64_t t, const char* extra = "") {
  const std::string block =
      w.dtype == DType::kFp8E4m3 ? " block " + std::to_string(w.fp8_block) : "";
  return std::string(DTypeName(w.dtype)) + block + " N=" + std::to_string(w.n) +
         " K=" + std::to_string(w.k) + " T=" + std::to_string(t) + extra;
}

// The scale tiles a weight of dtype dt comes in: FP8 128 × 128 (DeepSeek-V4)
// and 32 × 32 (V4.1-Flash); other formats have one layout (128: ignored).
std::vector<int64_t> Fp8Blocks(DType dt) {
  return dt == DType::kFp8E4m3 ? std::vector<int64_t>{128, 32} : std::vector<int64_t>{128};
}

// A kernel pointer from a getter is the kernel itself, not Highway's dispatch
// trampoline (which re-asks the CPU on every call): taken before any dispatch
// in the process (ctest runs each test in its own), it equals the pointer
// taken after a call through it.
TEST(SimdKernels, GettersReturnTheChosenKernel) {
  const ops::simd::MatMulFn before = ops::simd::DenseMatMulKernel(DType::kF32);
  const ops::simd::MatMulFn fp8_before = ops::simd::Fp8BlockMatMulKernel();
  ASSERT_NE(before, nullptr);
  const ::dsv4::testing::Weight w = ::dsv4::testing::MakeWeight(DType::kF32, 4, 64, 1);
  const std::vector<float> x(64, 1.0f);
  std::vector<float> out(4);
  before(::dsv4::testing::KernelArgs(w, out.data(), 4, x.data(), 1, 0, 4));
  EXPECT_EQ(before, ops::simd::DenseMatMulKernel(DType::kF32));
  EXPECT_EQ(fp8_before, ops::simd::Fp8BlockMatMulKernel());
}

TEST(SimdMatMul, DenseAllSizesMatchRef) {
  ForEachTarget([] {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      // K: 0 … 3 vectors + remainders of the widest vector; then several panels.
      std::vector<int64_t> ks;
      for (int64_t k = 0; k <= 3 * kMaxLanes + 3; ++k) ks.push_back(k);
      for (int64_t k : {255, 256, 257, 600}) ks.push_back(k);
      for (int64_t k : ks) {
        for (int64_t n : {1, 5, 33}) {
          const size_t offset = (k % 3) * DTypeBytes(dt, 1);  // misaligned rows
          const Weight w = MakeWeight(dt, n, k, static_cast<uint32_t>(k * 31 + n), offset);
          for (int64_t t : {1, 3, 4, 7}) {
            CheckAgainstRef(w, t, static_cast<int>(k % 4), Describe(w, t));
          }
        }
      }
    }
  });
}

TEST(SimdMatMul, BlockFormatsMatchRef) {
  // q8_0 through the f32 kernels (its q8_0 × q8_0 path: q8_0_q8_test.cc).
  const ::dsv4::testing::ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
  ForEachTarget([] {
    struct Case {
      DType dtype;
      DType scale;
      std::vector<int64_t> ks;
    };
    const std::vector<Case> cases = {
        {DType::kQ8_0, DType::kE8m0, {0, 32, 64, 96, 288, 544}},
        {DType::kFp8E4m3, DType::kE8m0, {32, 64, 96, 160, 192, 1056}},
        {DType::kFp4E2m1, DType::kE8m0, {32, 64, 96, 128, 288, 544}},
        {DType::kFp4E2m1, DType::kF32, {64, 288}},
        {DType::kFp8E4m3, DType::kE8m0, {1, 15, 17, 48, 127, 128, 129, 255, 256, 257, 300, 520}},
        {DType::kFp8E4m3, DType::kF32, {130, 300}},
        {DType::kFp8E4m3, DType::kBF16, {130, 300}},
    };
    for (const Case& c : cases) {
      for (int64_t block : Fp8Blocks(c.dtype)) {
        for (int64_t k : c.ks) {
          for (int64_t n : {1, 4, 7, 33, 70, 130}) {
            const Weight w = MakeWeight(c.dtype, n, k, static_cast<uint32_t>(k * 17 + n),
                                        static_cast<size_t>(n % 3), c.scale, block);
            for (int64_t t : {1, 2, 4, 6, 13}) {
              CheckAgainstRef(
                  w, t, static_cast<int>(n % 4),
                  Describe(w, t, (" scale " + std::string(DTypeName(c.scale))).c_str()));
            }
          }
        }
      }
    }
  });
}

// x = identity: out[t, n] = W[n, t] · 1, so the kernels' dequantisation is
// compared bit for bit with the scalar one (matvec path for T < 4 via single
// columns, panel path for the whole identity).
TEST(SimdMatMul, DequantisationIsExact) {
  // q8_0 through the f32 kernels (its q8_0 × q8_0 path: q8_0_q8_test.cc).
  const ::dsv4::testing::ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
  ForEachTarget([] {
    const std::vector<std::pair<DType, int64_t>> cases = {
        {DType::kF32, 37},  {DType::kBF16, 37},     {DType::kF16, 37},
        {DType::kQ8_0, 64}, {DType::kFp8E4m3, 130}, {DType::kFp4E2m1, 64}};
    for (auto [dt, k] : cases) {
      for (int64_t block : Fp8Blocks(dt)) {
        const int64_t n = 35;
        const Weight w =
            MakeWeight(dt, n, k, 5u + static_cast<uint32_t>(dt), 0, DType::kE8m0, block);
        std::vector<float> eye(k * k, 0.0f);
        for (int64_t i = 0; i < k; ++i) eye[i * k + i] = 1.0f;
        std::vector<float> want(k * n), got(k * n);
        RefRows(w, want.data(), n, eye.data(), k, 0, n);
        SimdRows(w, got.data(), n, eye.data(), k, 0, n);
        for (int64_t i = 0; i < k * n; ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
              << DTypeName(dt) << " panel path, t=" << i / n << " n=" << i % n << ": " << got[i]
              << " vs " << want[i];
        }
        for (int64_t col : {int64_t{0}, k / 2, k - 1}) {
          std::vector<float> one(n);
          SimdRows(w, one.data(), n, eye.data() + col * k, 1, 0, n);
          for (int64_t r = 0; r < n; ++r) {
            ASSERT_EQ(std::memcmp(&one[r], &want[col * n + r], 4), 0)
                << DTypeName(dt) << " matvec path, col " << col << " row " << r;
          }
        }
      }
    }
  });
}

// A token's result does not depend on how many tokens share the call: the
// matvec path (T = 1) and the tile path (T ≥ 2) sum in the same order.
TEST(SimdMatMul, BatchInvariantBitForBit) {
  ForEachTarget([] {
    const std::vector<std::pair<DType, int64_t>> cases = {
        {DType::kF32, 61},  {DType::kBF16, 300},    {DType::kF16, 45},
        {DType::kQ8_0, 96}, {DType::kFp8E4m3, 300}, {DType::kFp4E2m1, 160}};
    for (auto [dt, k] : cases) {
      for (int64_t block : Fp8Blocks(dt)) {
        const int64_t n = 37, t_all = 7;
        const Weight w = MakeWeight(dt, n, k, 21, 0, DType::kE8m0, block);
        const auto x = RandomFloats(t_all * k, 8);
        std::vector<float> batch(t_all * n), single(t_all * n);
        SimdRows(w, batch.data(), n, x.data(), t_all, 0, n);
        for (int64_t t = 0; t < t_all; ++t) {
          SimdRows(w, single.data() + t * n, n, x.data() + t * k, 1, 0, n);
        }
        EXPECT_EQ(std::memcmp(batch.data(), single.data(), batch.size() * 4), 0) << DTypeName(dt);
        std::vector<float> two(2 * n);  // a 2-token call, the smallest tile
        SimdRows(w, two.data(), n, x.data() + 3 * k, 2, 0, n);
        EXPECT_EQ(std::memcmp(two.data(), single.data() + 3 * n, two.size() * 4), 0)
            << DTypeName(dt);
      }
    }
  });
}

// The tile path blocks rows (panels of 32), inputs (K-blocks of 768) and
// tokens (blocks of at most 128, micro-tiles of 6; FP4 also super-blocks of at
// most 2^19 floats of deinterleaved x, two of them at K = 4096): a token's
// result must stay bit for bit its matvec result across every boundary —
// three panels, the last with a short row quad; several K-blocks, the last
// short, plus a scalar tail; two token blocks with a short last micro-tile; a
// row range starting mid-panel written with a wider output stride — and match
// the scalar twin.
TEST(SimdMatMul, BlockedTilesBitForBitAcrossBlocks) {
  // q8_0 through the f32 kernels (its q8_0 × q8_0 path: q8_0_q8_test.cc).
  const ::dsv4::testing::ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
  ForEachTarget([] {
    const std::vector<std::pair<DType, int64_t>> cases = {
        {DType::kF32, 1605},    {DType::kBF16, 1597},    {DType::kF16, 1589},
        {DType::kQ8_0, 1632},   {DType::kFp8E4m3, 1589}, {DType::kFp4E2m1, 1632},
        {DType::kFp4E2m1, 4096}};
    for (auto [dt, k] : cases) {
      for (int64_t block : Fp8Blocks(dt)) {
        const int64_t n = 71, t_all = 140;
        const Weight w = MakeWeight(dt, n, k, 33, 0, DType::kE8m0, block);
        const auto xbuf = RandomFloats(t_all * k + 1, 9);
        const float* x = xbuf.data() + 1;  // misaligned
        struct Range {
          int64_t begin, end, stride;
        };
        for (const Range rg : {Range{0, n, n}, Range{5, 70, 80}}) {
          const std::string what = Describe(
              w, t_all,
              (" rows " + std::to_string(rg.begin) + ".." + std::to_string(rg.end)).c_str());
          const float kSentinel = 12345.0f;
          std::vector<float> batch(t_all * rg.stride, kSentinel), single(batch), want(batch);
          SimdRows(w, batch.data(), rg.stride, x, t_all, rg.begin, rg.end);
          for (int64_t t = 0; t < t_all; ++t) {
            SimdRows(w, single.data() + t * rg.stride, rg.stride, x + t * k, 1, rg.begin, rg.end);
          }
          for (size_t i = 0; i < batch.size(); ++i) {
            ASSERT_EQ(std::memcmp(&batch[i], &single[i], 4), 0)
                << what << ": token " << i / rg.stride << " column " << i % rg.stride << ": "
                << batch[i] << " vs " << single[i];
          }
          RefRows(w, want.data(), rg.stride, x, t_all, rg.begin, rg.end);
          ExpectMatMulClose(batch, want, what);
        }
        // Token counts around the micro-tile and token-block sizes.
        std::vector<float> single(t_all * n);
        for (int64_t t = 0; t < t_all; ++t) {
          SimdRows(w, single.data() + t * n, n, x + t * k, 1, 0, n);
        }
        for (int64_t t : {2, 5, 6, 7, 12, 13, 128, 129}) {
          std::vector<float> part(t * n);
          SimdRows(w, part.data(), n, x, t, 0, n);
          EXPECT_EQ(std::memcmp(part.data(), single.data(), part.size() * 4), 0) << Describe(w, t);
        }
      }
    }
  });
}

// A sub-range of rows written into a wider output, as DeepSeek-V4's grouped
// projections do; outputs outside the range must stay untouched.
TEST(SimdMatMul, RowRangesAndOutputStride) {
  ForEachTarget([] {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kFp8E4m3, DType::kFp4E2m1}) {
      for (int64_t block : Fp8Blocks(dt)) {
        const int64_t n = 300, k = 320, stride = 123;
        const Weight w = MakeWeight(dt, n, k, 99, 0, DType::kE8m0, block);
        const auto x = RandomFloats(8 * k, 3);
        for (auto [b, e] :
             {std::pair<int64_t, int64_t>{0, 0}, {1, 2}, {3, 40}, {129, 250}, {200, 300}}) {
          for (int64_t t : {1, 8}) {
            const float kSentinel = 12345.0f;
            std::vector<float> want(t * stride, kSentinel), got(t * stride, kSentinel);
            RefRows(w, want.data(), stride, x.data(), t, b, std::min(e, b + stride));
            SimdRows(w, got.data(), stride, x.data(), t, b, std::min(e, b + stride));
            ExpectMatMulClose(
                got, want,
                Describe(w, t, (" rows " + std::to_string(b) + ".." + std::to_string(e)).c_str()));
          }
        }
      }
    }
  });
}

// The pooled entry points split rows across threads (or, for a matrix with
// fewer rows than threads × 32 and at least 4 tokens per thread, tokens) and
// agree with the single-call kernels exactly (each output is computed by the
// same code).
TEST(SimdMatMul, PooledEntryPointsMatchRowKernels) {
  // q8_0 through the f32 kernels (its q8_0 × q8_0 path: q8_0_q8_test.cc).
  const ::dsv4::testing::ScopedKQuantActivations f32(ops::KQuantActivations::kF32);
  ThreadPool pool(3);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (int64_t n : {int64_t{517}, int64_t{20}}) {
      for (int64_t block : Fp8Blocks(dt)) {
        const int64_t k = 256;
        const Weight w = MakeWeight(dt, n, k, 11, 0, DType::kE8m0, block);
        const auto x = RandomFloats(40 * k, 4);
        for (int64_t t : {1, 5, 12, 40}) {
          std::vector<float> pooled(t * n), rows(t * n), want(t * n);
          if (dt == DType::kFp8E4m3) {
            ops::MatMulFp8Block(pool, pooled.data(), x.data(), w.view(), w.scale(), t, block);
          } else if (dt == DType::kFp4E2m1) {
            ops::MatMulFp4Block(pool, pooled.data(), x.data(), w.view(), w.scale(), t);
          } else {
            ops::MatMul(pool, pooled.data(), x.data(), w.view(), t);
          }
          SimdRows(w, rows.data(), n, x.data(), t, 0, n);
          RefRows(w, want.data(), n, x.data(), t, 0, n);
          EXPECT_EQ(std::memcmp(pooled.data(), rows.data(), rows.size() * 4), 0) << Describe(w, t);
          ExpectMatMulClose(pooled, want, Describe(w, t));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Elementwise kernels.
// ---------------------------------------------------------------------------

std::vector<int64_t> VecSizes() {
  std::vector<int64_t> s;
  for (int64_t n = 0; n <= 3 * kMaxLanes + 3; ++n) s.push_back(n);
  s.push_back(1000);
  s.push_back(4099);
  return s;
}

void ExpectElementwiseClose(const float* got, const float* want, int64_t n,
                            const std::string& what) {
  const Error e = Compare(got, want, static_cast<size_t>(n));
  EXPECT_LE(e.nmse, 1e-7) << what;
}

TEST(SimdVec, RmsNormSoftmaxSwiGluMatchRef) {
  ForEachTarget([] {
    for (int64_t n : VecSizes()) {
      for (int off = 0; off < 3; off += 2) {  // aligned and misaligned by 2 floats
        const std::string what = "n=" + std::to_string(n) + " offset " + std::to_string(off);
        auto xb = RandomFloats(n + off, 1 + n, 3.0f);
        auto wb = RandomFloats(n + off, 2 + n);
        const float* x = xb.data() + off;
        std::vector<float> want(n), got(n);
        ops::ref::RmsNorm(want.data(), x, wb.data() + off, n, 1e-5f);
        ops::RmsNorm(got.data(), x, wb.data() + off, n, 1e-5f);
        ExpectElementwiseClose(got.data(), want.data(), n, "rmsnorm " + what);

        std::vector<float> sw(x, x + n), sg(xb.begin(), xb.end());
        ops::ref::Softmax(sw.data(), n);
        ops::Softmax(sg.data() + off, n);
        ExpectElementwiseClose(sg.data() + off, sw.data(), n, "softmax " + what);
        if (n > 0) {
          double total = 0;
          for (int64_t i = 0; i < n; ++i) total += sg[off + i];
          EXPECT_NEAR(total, 1.0, 1e-5) << what;
        }

        auto ub = RandomFloats(n + off, 3 + n);
        ops::ref::SwiGlu(want.data(), x, ub.data() + off, n);
        ops::SwiGlu(got.data(), x, ub.data() + off, n);
        ExpectElementwiseClose(got.data(), want.data(), n, "swiglu " + what);
      }
    }
    // Extreme gates: silu saturates without NaN.
    const float gate[4] = {-200.0f, -90.0f, 90.0f, 200.0f}, up[4] = {1, 1, 1, 1};
    float out[4];
    ops::SwiGlu(out, gate, up, 4);
    EXPECT_NEAR(out[0], 0.0f, 1e-30f);
    EXPECT_NEAR(out[1], 0.0f, 1e-30f);
    EXPECT_FLOAT_EQ(out[2], 90.0f);
    EXPECT_FLOAT_EQ(out[3], 200.0f);
  });
}

// Activation FP8 quantise-dequantise: bit for bit the scalar twin, over
// magnitudes from the subnormal-e4m3 range to the clamp, exact ties, zeros of
// both signs, and block sizes with and without a vector remainder.
// n values ±2^e · (1 + f), e uniform in [lo, lo + spread), f a random
// 20-bit fraction (an LCG from seed).
std::vector<float> WideRange(int64_t n, uint64_t seed, int spread, int lo) {
  std::vector<float> x(n);
  uint64_t st = seed;
  for (int64_t i = 0; i < n; ++i) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const float mag = std::ldexp(1.0f, static_cast<int>((st >> 33) % spread) + lo);
    const float frac = static_cast<float>((st >> 12) & 0xfffff) / 1048576.0f;
    x[i] = ((st >> 63) ? -1.0f : 1.0f) * mag * (1.0f + frac);
  }
  return x;
}

// A quantise-dequantise kernel against its scalar twin on x, bit for bit.
void ExpectQuantiserBits(const std::vector<float>& x, int64_t block,
                         void (*ref)(float*, int64_t, int64_t),
                         void (*fast)(float*, int64_t, int64_t)) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> want = x, got = x;
  ref(want.data(), n, block);
  fast(got.data(), n, block);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "block " << block << " i " << i << " x " << x[i] << ": " << got[i] << " vs " << want[i];
  }
}

TEST(SimdVec, QuantizeDequantizeFp8BitForBit) {
  ForEachTarget([] {
    for (int64_t block : {64, 128, 32, 24, 7}) {
      for (int64_t n_blocks : {1, 3}) {
        const int64_t n = block * n_blocks;
        std::vector<float> x = WideRange(n, 0x1234567ull + static_cast<uint64_t>(block), 40, -30);
        // Ties: values halfway between e4m3 neighbours relative to a block max of 448.
        if (block >= 7) {
          x[0] = 448.0f, x[1] = 9.0f, x[2] = 0.0f, x[3] = -0.0f;
          x[4] = 3.0f / 1024.0f, x[5] = 1.0f / 1024.0f, x[6] = -0.0146484375f;
        }
        ExpectQuantiserBits(x, block, ops::ref::QuantizeDequantizeFp8, ops::QuantizeDequantizeFp8);
      }
    }
  });
}

// FP4 (e2m1) quantise-dequantise, bit for bit the scalar twin: magnitudes
// from 2^-40 to 2^20 with random mantissas, zeros of both signs, and every
// tie of the e2m1 grid (q = 0.25, 0.75, …, 5) against a block max of 6.
TEST(SimdVec, QuantizeDequantizeFp4BitForBit) {
  ForEachTarget([] {
    for (int64_t block : {32, 16, 64, 7}) {
      for (int64_t n_blocks : {1, 3}) {
        const int64_t n = block * n_blocks;
        std::vector<float> x = WideRange(n, 0x7654321ull + static_cast<uint64_t>(block), 60, -40);
        if (block >= 16) {  // block 0: max 6, so q = x; the ties and the grid
          const float ties[] = {6.0f,   0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f,    5.0f,
                                -0.25f, -5.0f, 0.0f,  -0.0f, 1.0f,  0.5f, -1e-30f, 5.999f};
          for (int j = 0; j < 16; ++j) x[j] = ties[j];
        }
        ExpectQuantiserBits(x, block, ops::ref::QuantizeDequantizeFp4, ops::QuantizeDequantizeFp4);
      }
    }
  });
}

// SwiGluLimited against its scalar twin, and bit for bit the steps it fuses
// (the limits as std::min / std::clamp, ops::SwiGlu, the scale), which the
// MoE took before: inputs well past the limit, limit off and on, scale 1
// and not.
TEST(SimdVec, SwiGluLimitedMatchesRefAndTheStepsItFuses) {
  ForEachTarget([] {
    for (int64_t n : VecSizes()) {
      for (float limit : {0.0f, 10.0f}) {
        for (float scale : {1.0f, 0.37f}) {
          const auto g = RandomFloats(n + 1, 11 + n, 25.0f);
          const auto u = RandomFloats(n + 1, 12 + n, 25.0f);
          std::vector<float> want(n + 1), got(n + 1, -2.0f), steps(g.begin() + 1, g.end());
          std::vector<float> up(u.begin() + 1, u.end());
          ops::ref::SwiGluLimited(want.data(), g.data() + 1, u.data() + 1, n, limit, scale);
          ops::SwiGluLimited(got.data(), g.data() + 1, u.data() + 1, n, limit, scale);
          const std::string what = "n=" + std::to_string(n) + " limit " + std::to_string(limit) +
                                   " scale " + std::to_string(scale);
          ExpectElementwiseClose(got.data(), want.data(), n, what);
          EXPECT_EQ(got[n], -2.0f) << "wrote past n";
          if (limit > 0.0f) {
            for (int64_t i = 0; i < n; ++i) {
              steps[i] = std::min(steps[i], limit);
              up[i] = std::clamp(up[i], -limit, limit);
            }
          }
          ops::SwiGlu(steps.data(), steps.data(), up.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(steps[i] * scale))
                << what << " i " << i;
          }
        }
      }
    }
  });
}

// SoftmaxWithSink against its scalar twin: sizes 0…3 vectors and
// remainders, misaligned, a sink below, near and above the logits, and none
// (−inf); the weights with the sink's share sum to 1.
TEST(SimdVec, SoftmaxWithSinkMatchesRef) {
  ForEachTarget([] {
    for (int64_t n : VecSizes()) {
      for (float sink : {-std::numeric_limits<float>::infinity(), -3.0f, 0.5f, 40.0f}) {
        auto want = RandomFloats(n + 1, 41 + n, 8.0f);
        auto got = want;
        const float scale = 0.044f;
        ops::ref::SoftmaxWithSink(want.data() + 1, n, scale, sink);
        ops::SoftmaxWithSink(got.data() + 1, n, scale, sink);
        const std::string what = "n=" + std::to_string(n) + " sink " + std::to_string(sink);
        ExpectElementwiseClose(got.data() + 1, want.data() + 1, n, what);
        EXPECT_EQ(got[0], want[0]) << what << ": wrote before x";
        if (n > 0 && sink == -std::numeric_limits<float>::infinity()) {
          double sum = 0.0;
          for (int64_t i = 1; i <= n; ++i) sum += got[i];
          EXPECT_NEAR(sum, 1.0, 1e-5) << what;
        }
      }
    }
  });
}

// SoftmaxPool against its scalar twin: channel counts 0…3 vectors and
// remainders, 1 to 256 slots (CSA pools 8, HCA 128), scores spread wide
// enough that exp underflows for some slots, and slots with a −inf score
// and a 0 value (CSA's before its first window), first or in the middle.
TEST(SimdVec, SoftmaxPoolMatchesRef) {
  ForEachTarget([] {
    for (int64_t n : VecSizes()) {
      for (int64_t n_slots : {1, 3, 8, 128, 256}) {
        for (int missing = 0; missing < 2; ++missing) {
          const auto scores = RandomFloats(n_slots * n + 1, 5 + n * 3 + n_slots, 30.0f);
          const auto values = RandomFloats(n_slots * n + 1, 6 + n * 3 + n_slots, 2.0f);
          const std::vector<float> gone_score(n + 1, -std::numeric_limits<float>::infinity());
          const std::vector<float> gone_value(n + 1, 0.0f);
          std::vector<const float*> s(n_slots), v(n_slots);
          for (int64_t j = 0; j < n_slots; ++j) {
            const bool gone = missing && n_slots > 1 && j % 2 == 0;  // half the slots, slot 0 first
            s[j] = gone ? gone_score.data() : scores.data() + 1 + j * n;  // misaligned by 1
            v[j] = gone ? gone_value.data() : values.data() + 1 + j * n;
          }
          std::vector<float> want(n + 1, -1.0f), got(n + 1, -2.0f);
          std::vector<float> scratch(n_slots * ops::simd::kSoftmaxPoolLanes);
          ops::ref::SoftmaxPool(want.data(), s.data(), v.data(), n_slots, n);
          ops::SoftmaxPool(got.data(), s.data(), v.data(), n_slots, n, scratch.data());
          for (int64_t d = 0; d < n; ++d) ASSERT_TRUE(std::isfinite(got[d])) << d;
          ExpectElementwiseClose(got.data(), want.data(), n,
                                 "softmax pool n=" + std::to_string(n) + " slots " +
                                     std::to_string(n_slots) + " missing " +
                                     std::to_string(missing));
          EXPECT_EQ(got[n], -2.0f) << "wrote past n";
        }
      }
    }
  });
}

// Argmax against its scalar twin: sizes 0…3 vectors and remainders, offsets,
// ties (the first wins, -0 and +0 equal), NaN anywhere (ignored, first
// element included), all NaN or −inf (0), and the largest in the tail.
TEST(SimdVec, ArgmaxMatchesRef) {
  ForEachTarget([] {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t n = 0; n <= 3 * kMaxLanes + 5; ++n) {
      for (int offset : {0, 1, 3}) {
        for (int variant = 0; variant < 7; ++variant) {
          std::vector<float> buf = RandomFloats(offset + n + 1, 31 + n * 7 + variant);
          float* x = buf.data() + offset;
          if (n > 0) {
            switch (variant) {
              case 1:  // ties: the maximum twice, the later one in the tail
                x[n / 3] = 9.0f, x[n - 1] = 9.0f;
                break;
              case 2:  // NaN first and in the middle
                x[0] = nan, x[n / 2] = nan;
                break;
              case 3:  // every value NaN or −inf
                for (int64_t i = 0; i < n; ++i) x[i] = i % 2 ? -inf : nan;
                break;
              case 4:  // zeros of both signs only
                for (int64_t i = 0; i < n; ++i) x[i] = i % 3 ? 0.0f : -0.0f;
                break;
              case 5:  // the largest last, +inf
                x[n - 1] = inf;
                break;
              case 6:  // all equal
                std::fill(x, x + n, -2.5f);
                break;
              default:
                break;
            }
          }
          const int64_t want = n == 0 ? 0 : ops::ref::Argmax(x, n);
          ASSERT_EQ(ops::Argmax(x, n), want)
              << "n " << n << " offset " << offset << " variant " << variant;
        }
      }
    }
  });
}

TEST(SimdVec, RopeMatchesRef) {
  ForEachTarget([] {
    for (int64_t head_dim : {2, 8, 14, 32, 34, 50, 64, 128}) {
      for (int64_t rot_dim : {int64_t{2}, head_dim / 4 * 2, head_dim}) {
        if (rot_dim > head_dim || rot_dim % 2) continue;
        for (int64_t pos : {0, 1, 37, 5000}) {
          for (int64_t heads : {1, 3}) {
            auto want = RandomFloats(heads * head_dim + 1, 9);
            auto got = want;
            ops::ref::RopeInterleaved(want.data() + 1, heads, head_dim, rot_dim, pos, 10000.0f);
            ops::RopeInterleaved(got.data() + 1, heads, head_dim, rot_dim, pos, 10000.0f);
            ExpectElementwiseClose(got.data(), want.data(), heads * head_dim + 1,
                                   "rope hd=" + std::to_string(head_dim) + " rot=" +
                                       std::to_string(rot_dim) + " pos=" + std::to_string(pos));
          }
        }
      }
    }
  });
}

TEST(SimdVec, DotSumAndAxpyMatchFloat64) {
  ForEachTarget([] {
    for (int64_t n : VecSizes()) {
      auto a = RandomFloats(n + 1, 5 + n), b = RandomFloats(n + 1, 6 + n);
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += static_cast<double>(a[i + 1]) * b[i];
      const float got = ops::Dot(a.data() + 1, b.data(), n);
      double norm = 0;
      for (int64_t i = 0; i < n; ++i) norm += std::fabs(static_cast<double>(a[i + 1]) * b[i]);
      EXPECT_LE(std::fabs(got - want), 1e-6 * norm + 1e-30) << "dot n=" << n;

      double sum_want = 0, sum_norm = 0;
      for (int64_t i = 0; i < n; ++i) sum_want += a[i + 1], sum_norm += std::fabs(a[i + 1]);
      EXPECT_LE(std::fabs(ops::Sum(a.data() + 1, n) - sum_want), 1e-6 * sum_norm + 1e-30)
          << "sum n=" << n;
      const float sum = ops::Sum(a.data() + 1, n), ahead = ops::simd::SumAhead(a.data() + 1, n);
      EXPECT_EQ(0, std::memcmp(&sum, &ahead, 4)) << "SumAhead != Sum, n=" << n;

      std::vector<float> y(b.begin(), b.end()), yw(n);
      for (int64_t i = 0; i < n; ++i) yw[i] = b[i + 1] + 0.25f * a[i];
      ops::Axpy(y.data() + 1, 0.25f, a.data(), n);
      ExpectElementwiseClose(y.data() + 1, yw.data(), n, "axpy n=" + std::to_string(n));
      EXPECT_EQ(y[0], b[0]) << "axpy wrote before its start";
    }
  });
}

// DotMany / AxpyMany shapes: 0…4 vectors with and without a remainder (up to
// AVX-512's 16 lanes) and a 512-float head; query / y-row counts around the
// 4-row tile; key counts around the 2-key tile and the 8-key chunk.
constexpr int64_t kManyN[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 512};
constexpr int64_t kManyRows[] = {0, 1, 3, 4, 5, 16};
constexpr int64_t kManyKeys[] = {0, 1, 2, 3, 7, 130};

// n_keys rows of n floats, n + 5 apart in one buffer and misaligned by one
// float; the pointers run in reverse order (a key list is not one array).
struct KeyRows {
  std::vector<float> data;
  std::vector<const float*> rows;
};
KeyRows MakeKeyRows(int64_t n_keys, int64_t n, uint32_t seed) {
  KeyRows k;
  k.data = RandomFloats(1 + n_keys * (n + 5), seed);
  for (int64_t i = 0; i < n_keys; ++i) {
    k.rows.push_back(k.data.data() + 1 + (n_keys - 1 - i) * (n + 5));
  }
  return k;
}

std::string ManyShape(int64_t n, int64_t rows, int64_t n_keys) {
  return "n=" + std::to_string(n) + " rows=" + std::to_string(rows) +
         " keys=" + std::to_string(n_keys);
}

// Each DotMany output is the bits ops::Dot returns for its pair (so batching
// the attention scores changes nothing), and the scalar twin's value up to
// rounding. Queries misaligned, q_stride > n; nothing written past out.
TEST(SimdVec, DotManyEqualsDotBitForBit) {
  ForEachTarget([] {
    for (int64_t n : kManyN) {
      for (int64_t n_q : kManyRows) {
        for (int64_t n_keys : kManyKeys) {
          const std::string what = ManyShape(n, n_q, n_keys);
          const int64_t q_stride = n + 3;
          const std::vector<float> qb = RandomFloats(1 + n_q * q_stride, 11 + n);
          const float* q = qb.data() + 1;
          const KeyRows k = MakeKeyRows(n_keys, n, 12 + n);
          const float kUnwritten = -7.0f;
          std::vector<float> got(n_q * n_keys + 1, kUnwritten), ref(n_q * n_keys);
          ops::DotMany(q, n_q, q_stride, k.rows.data(), n_keys, n, got.data());
          ops::ref::DotMany(q, n_q, q_stride, k.rows.data(), n_keys, n, ref.data());
          for (int64_t h = 0; h < n_q; ++h) {
            for (int64_t i = 0; i < n_keys; ++i) {
              const float* qh = q + h * q_stride;
              const float dot = ops::Dot(qh, k.rows[i], n);
              const float g = got[h * n_keys + i];
              ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(dot))
                  << what << " h=" << h << " i=" << i << ": " << g << " vs Dot " << dot;
              double norm = 0;
              for (int64_t j = 0; j < n; ++j) norm += std::fabs(double{qh[j]} * k.rows[i][j]);
              EXPECT_LE(std::fabs(g - ref[h * n_keys + i]), 1e-5 * norm + 1e-30)
                  << what << " h=" << h << " i=" << i << " vs ref";
            }
          }
          EXPECT_EQ(got.back(), kUnwritten) << what << ": wrote past out";
        }
      }
    }
  });
}

// AxpyManyF16 (an f16 KV cache's value mix) leaves y exactly as AxpyMany on
// the rows converted to f32 does, on every target, and agrees with its scalar
// twin up to rounding; the rows hold every kind of f16 (subnormals, ±0,
// large values).
TEST(SimdVec, AxpyManyF16EqualsAxpyManyOnConvertedRowsBitForBit) {
  ForEachTarget([] {
    for (int64_t n : kManyN) {
      for (int64_t n_y : kManyRows) {
        for (int64_t n_keys : kManyKeys) {
          const std::string what = ManyShape(n, n_y, n_keys);
          const int64_t y_stride = n + 3;
          const std::vector<float> y0 = RandomFloats(1 + n_y * y_stride, 41 + n);
          const std::vector<float> alpha = RandomFloats(n_y * n_keys, 42 + n_keys, 0.1f);
          // n_keys rows of n + 5 f16 values, misaligned by one, pointers reversed.
          std::vector<uint16_t> bits(1 + n_keys * (n + 5));
          uint32_t r = 43 + static_cast<uint32_t>(n);
          for (uint16_t& b : bits) {
            r = r * 1664525u + 1013904223u;
            b = static_cast<uint16_t>(r >> 16);
            if ((b & 0x7c00u) == 0x7c00u) b &= 0xbfffu;  // no inf/NaN: finite sums
          }
          std::vector<float> as_f32(bits.size());
          for (size_t i = 0; i < bits.size(); ++i) as_f32[i] = F16ToF32(bits[i]);
          std::vector<const uint16_t*> rows16;
          std::vector<const float*> rows32;
          for (int64_t i = 0; i < n_keys; ++i) {
            rows16.push_back(bits.data() + 1 + (n_keys - 1 - i) * (n + 5));
            rows32.push_back(as_f32.data() + 1 + (n_keys - 1 - i) * (n + 5));
          }
          std::vector<float> got = y0, want = y0, ref = y0;
          ops::AxpyManyF16(got.data() + 1, n_y, y_stride, alpha.data(), rows16.data(), n_keys, n);
          ops::AxpyMany(want.data() + 1, n_y, y_stride, alpha.data(), rows32.data(), n_keys, n);
          for (size_t j = 0; j < got.size(); ++j) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j]))
                << what << " float " << j << ": " << got[j] << " vs AxpyMany " << want[j];
          }
          ops::ref::AxpyManyF16(ref.data() + 1, n_y, y_stride, alpha.data(), rows16.data(), n_keys,
                                n);
          for (int64_t h = 0; h < n_y; ++h) {
            for (int64_t j = 0; j < n; ++j) {
              const int64_t at = 1 + h * y_stride + j;
              double norm = std::fabs(y0[at]);
              for (int64_t i = 0; i < n_keys; ++i) {
                norm += std::fabs(double{alpha[h * n_keys + i]} * rows32[i][j]);
              }
              EXPECT_LE(std::fabs(got[at] - ref[at]), 1e-5 * norm) << what << " vs ref";
            }
          }
        }
      }
    }
  });
}

// F32ToF16Row: bit for bit F32ToF16 on every target, over ties (to even),
// subnormal results, overflow to ±inf, ±0, ±inf and random values, at every
// length 0…70 (vector bodies and scalar tails); a NaN stays a NaN.
TEST(SimdVec, F32ToF16RowEqualsScalarTwin) {
  ForEachTarget([] {
    std::vector<float> x = {0.0f,
                            -0.0f,
                            1.0f,
                            -2.5f,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            -70000.0f,
                            1e-8f,
                            -3e-6f,
                            6.1e-5f,
                            5.96e-8f,
                            2.98e-8f,
                            1.0f + 0x1p-11f,
                            1.0f + 0x3p-11f,
                            1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min()};
    const std::vector<float> rnd = RandomFloats(200, 51, 100.0f);
    x.insert(x.end(), rnd.begin(), rnd.end());
    for (size_t i = 0; i < 40; ++i)
      x.push_back(std::ldexp(1.0f + 0x1p-11f * static_cast<float>(i), -20 + static_cast<int>(i)));
    for (int64_t n = 0; n <= 70; ++n) {
      for (size_t start = 0; start + static_cast<size_t>(n) <= x.size(); start += 37) {
        std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0x1234);
        ops::F32ToF16Row(x.data() + start, got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], F32ToF16(x[start + i])) << "n=" << n << " x=" << x[start + i];
        }
        EXPECT_EQ(got[n], 0x1234) << "n=" << n << ": wrote past out";
      }
    }
    std::vector<float> nan(20, std::numeric_limits<float>::quiet_NaN());
    std::vector<uint16_t> out(20);
    ops::F32ToF16Row(nan.data(), out.data(), 20);
    for (uint16_t h : out) EXPECT_TRUE(std::isnan(F16ToF32(h))) << std::hex << h;
  });
}

// RoundToBf16Row: bit for bit Bf16ToF32(F32ToBf16(x)) on every target, over
// ties (to even, both ways), carries into the exponent, overflow to ±inf, ±0,
// ±inf, subnormals, NaNs (made quiet, sign kept) and random values, at every
// length 0…70 (vector bodies and scalar tails), in place too.
TEST(SimdVec, RoundToBf16RowEqualsScalarTwin) {
  ForEachTarget([] {
    std::vector<float> x = {0.0f,
                            -0.0f,
                            1.0f,
                            -2.5f,
                            1.0f + 0x1p-8f,  // tie, kept half even: down
                            1.0f + 0x3p-8f,  // tie, kept half odd: up
                            -(1.0f + 0x3p-8f),
                            1.0f + 0x1p-9f,
                            2.0f - 0x1p-9f,  // carries into the exponent
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x00018000u),
                            std::bit_cast<float>(0x7fc00001u),  // quiet NaN, payload
                            std::bit_cast<float>(0x7f800001u),  // signalling NaN
                            std::bit_cast<float>(0xff800100u),  // negative signalling NaN
                            std::bit_cast<float>(0x7f808000u)};
    const std::vector<float> rnd = RandomFloats(200, 52, 100.0f);
    x.insert(x.end(), rnd.begin(), rnd.end());
    for (size_t i = 0; i < 40; ++i) {
      x.push_back(
          std::ldexp(1.0f + 0x1p-9f * static_cast<float>(i), -130 + 6 * static_cast<int>(i)));
    }
    for (int64_t n = 0; n <= 70; ++n) {
      for (size_t start = 0; start + static_cast<size_t>(n) <= x.size(); start += 37) {
        std::vector<float> got(static_cast<size_t>(n) + 1, 7.0f);
        ops::RoundToBf16Row(x.data() + start, got.data(), n);
        std::vector<float> in_place(x.begin() + start, x.begin() + start + n);
        ops::RoundToBf16Row(in_place.data(), in_place.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t want = std::bit_cast<uint32_t>(Bf16ToF32(F32ToBf16(x[start + i])));
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), want) << "n=" << n << " x=" << x[start + i];
          ASSERT_EQ(std::bit_cast<uint32_t>(in_place[i]), want) << "in place, n=" << n;
        }
        EXPECT_EQ(got[n], 7.0f) << "n=" << n << ": wrote past out";
      }
    }
  });
}

// LinearCombine: bit for bit its scalar twin (each product rounded before its
// add, sums from 0 in row order) on every target, over 0…4 vectors with and
// without a remainder, 0…130 rows, rows misaligned and in reverse order;
// nothing written past out. Also with a −0 product, which 0 + (−0) makes +0.
TEST(SimdVec, LinearCombineEqualsScalarTwinBitForBit) {
  ForEachTarget([] {
    for (int64_t n : kManyN) {
      for (int64_t n_x : kManyKeys) {
        const std::string what = "n=" + std::to_string(n) + " rows=" + std::to_string(n_x);
        const KeyRows x = MakeKeyRows(n_x, n, 31 + n);
        std::vector<float> c = RandomFloats(n_x, 32 + n_x);
        if (n_x > 1) c[1] = -0.0f;
        const float kUnwritten = -7.0f;
        std::vector<float> got(n + 2, kUnwritten), ref(n, 1.0f);
        ops::LinearCombine(got.data() + 1, x.rows.data(), c.data(), n_x, n);
        ops::ref::LinearCombine(ref.data(), x.rows.data(), c.data(), n_x, n);
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[1 + j]), std::bit_cast<uint32_t>(ref[j]))
              << what << " j=" << j << ": " << got[1 + j] << " vs ref " << ref[j];
        }
        EXPECT_EQ(got[0], kUnwritten) << what << ": wrote before out";
        EXPECT_EQ(got[n + 1], kUnwritten) << what << ": wrote past out";
      }
    }
  });
}

// LinearCombineRows: each output row the bits of ops::LinearCombine with its
// coefficients, and of the scalar twin, on every target; out of place (rows
// misaligned, nothing written past them) and in place (outputs over the
// first input rows, as mHC's expansion writes its streams), over 0…4 vectors
// with and without a remainder, 1…5 outputs of 1…6 rows.
TEST(SimdVec, LinearCombineRowsEqualsLinearCombineBitForBit) {
  ForEachTarget([] {
    for (int64_t n : kManyN) {
      for (int64_t n_x : {1, 2, 5, 6}) {
        for (int64_t n_out : {1, 4, 5}) {
          if (n_out > n_x) continue;  // in place writes over input rows
          const std::string what = ManyShape(n, n_out, n_x);
          const KeyRows x = MakeKeyRows(n_x, n, static_cast<uint32_t>(41 + n + n_x));
          std::vector<float> c = RandomFloats(n_out * n_x, static_cast<uint32_t>(42 + n_out));
          // Want: one LinearCombine per output.
          std::vector<float> want(n_out * n);
          for (int64_t k = 0; k < n_out; ++k) {
            ops::LinearCombine(want.data() + k * n, x.rows.data(), c.data() + k * n_x, n_x, n);
          }
          // Out of place, and the scalar twin.
          const float kUnwritten = -7.0f;
          std::vector<float> got(n_out * (n + 2), kUnwritten), ref(n_out * n);
          std::vector<float*> outs(n_out), ref_outs(n_out);
          for (int64_t k = 0; k < n_out; ++k) {
            outs[k] = got.data() + k * (n + 2) + 1;
            ref_outs[k] = ref.data() + k * n;
          }
          ops::LinearCombineRows(outs.data(), n_out, x.rows.data(), n_x, c.data(), n);
          ops::ref::LinearCombineRows(ref_outs.data(), n_out, x.rows.data(), n_x, c.data(), n);
          // In place: outputs over input rows 0 … n_out − 1.
          KeyRows inplace = MakeKeyRows(n_x, n, static_cast<uint32_t>(41 + n + n_x));
          std::vector<float*> over;  // the buffer is inplace.data's, not const
          for (int64_t k = 0; k < n_out; ++k) over.push_back(const_cast<float*>(inplace.rows[k]));
          ops::LinearCombineRows(over.data(), n_out, inplace.rows.data(), n_x, c.data(), n);
          for (int64_t k = 0; k < n_out; ++k) {
            for (int64_t j = 0; j < n; ++j) {
              const uint32_t w = std::bit_cast<uint32_t>(want[k * n + j]);
              ASSERT_EQ(std::bit_cast<uint32_t>(outs[k][j]), w) << what << " k=" << k << " j=" << j;
              ASSERT_EQ(std::bit_cast<uint32_t>(ref_outs[k][j]), w) << what << " twin";
              ASSERT_EQ(std::bit_cast<uint32_t>(over[k][j]), w) << what << " in place";
            }
            EXPECT_EQ(outs[k][-1], kUnwritten) << what << ": wrote before out row " << k;
            EXPECT_EQ(outs[k][n], kUnwritten) << what << ": wrote past out row " << k;
          }
        }
      }
    }
  });
}

// AxpyMany leaves every float of y's buffer (rows, the gaps between them,
// the float before) exactly as the sequence of ops::Axpy calls does, and
// agrees with the scalar twin up to rounding.
TEST(SimdVec, AxpyManyEqualsAxpyCallsBitForBit) {
  ForEachTarget([] {
    for (int64_t n : kManyN) {
      for (int64_t n_y : kManyRows) {
        for (int64_t n_keys : kManyKeys) {
          const std::string what = ManyShape(n, n_y, n_keys);
          const int64_t y_stride = n + 3;
          const std::vector<float> y0 = RandomFloats(1 + n_y * y_stride, 21 + n);
          const std::vector<float> alpha = RandomFloats(n_y * n_keys, 22 + n_keys, 0.1f);
          const KeyRows x = MakeKeyRows(n_keys, n, 23 + n);
          std::vector<float> got = y0, want = y0, ref = y0;
          ops::AxpyMany(got.data() + 1, n_y, y_stride, alpha.data(), x.rows.data(), n_keys, n);
          for (int64_t h = 0; h < n_y; ++h) {
            for (int64_t i = 0; i < n_keys; ++i) {
              ops::Axpy(want.data() + 1 + h * y_stride, alpha[h * n_keys + i], x.rows[i], n);
            }
          }
          for (size_t j = 0; j < got.size(); ++j) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j]))
                << what << " float " << j << ": " << got[j] << " vs Axpy calls " << want[j];
          }
          ops::ref::AxpyMany(ref.data() + 1, n_y, y_stride, alpha.data(), x.rows.data(), n_keys, n);
          for (int64_t h = 0; h < n_y; ++h) {
            for (int64_t j = 0; j < n; ++j) {
              const int64_t at = 1 + h * y_stride + j;
              double norm = std::fabs(y0[at]);
              for (int64_t i = 0; i < n_keys; ++i) {
                norm += std::fabs(double{alpha[h * n_keys + i]} * x.rows[i][j]);
              }
              EXPECT_LE(std::fabs(got[at] - ref[at]), 1e-5 * norm)
                  << what << " h=" << h << " j=" << j << " vs ref";
            }
          }
        }
      }
    }
  });
}

// The bandwidth probe reads what it says and reports a finite positive rate.
TEST(Bandwidth, ProbeReportsAPositiveRate) {
  ThreadPool pool(2);
  const ops::BandwidthResult r = ops::MeasureReadBandwidth(pool, (int64_t{16} << 20) + 3, 2);
  EXPECT_EQ(r.bytes, int64_t{16} << 20);
  EXPECT_EQ(r.repeats, 2);
  EXPECT_TRUE(std::isfinite(r.gb_per_s));
  EXPECT_GT(r.plain_gb_per_s, 0.01);
  EXPECT_GT(r.ahead_gb_per_s, 0.01);
  EXPECT_EQ(r.gb_per_s, std::max(r.plain_gb_per_s, r.ahead_gb_per_s));
}

TEST(Bandwidth, FlopsProbeCountsEveryThreadsFmas) {
  ThreadPool pool(2);
  const ops::FlopsResult r = ops::MeasurePeakFlops(pool, int64_t{1} << 20, 2);
  // Each thread runs whole 16-vector rounds: at least 2^20 − 16·lanes FMAs.
  EXPECT_GE(r.flops, 2 * 2 * ((int64_t{1} << 20) - 16 * 16));
  EXPECT_LE(r.flops, 2 * 2 * (int64_t{1} << 20));
  EXPECT_EQ(r.repeats, 2);
  EXPECT_TRUE(std::isfinite(r.gflops));
  EXPECT_GT(r.gflops, 0.01);
}

// A dot-product roof probe of 2^20 multiply-adds per thread on 2 threads:
// zero where its kernels are not available, else whole rounds of `round`
// multiply-adds per thread.
void ExpectDotProbe(const ops::FlopsResult& r, bool available, int64_t round) {
  EXPECT_EQ(r.repeats, 2);
  if (!available) {
    EXPECT_EQ(r.flops, 0);  // no such kernels here: no roof either
    return;
  }
  EXPECT_GE(r.flops, 2 * 2 * ((int64_t{1} << 20) - round));
  EXPECT_LE(r.flops, 2 * 2 * (int64_t{1} << 20));
  EXPECT_TRUE(std::isfinite(r.gflops));
  EXPECT_GT(r.gflops, 0.01);
}

TEST(Bandwidth, Bf16DotProbeCountsEveryThreadsMacs) {
  ThreadPool pool(2);
  // 12 chains × 32 multiply-adds (vdpbf16ps).
  ExpectDotProbe(ops::MeasurePeakBf16DotFlops(pool, int64_t{1} << 20, 2),
                 ops::simd::Fp8Bf16DotKernel() != nullptr, 12 * 32);
}

TEST(Bandwidth, Int8DotProbeCountsEveryThreadsMacs) {
  ThreadPool pool(2);
  // 12 chains × 64 multiply-adds (vpdpbusd).
  ExpectDotProbe(ops::MeasurePeakInt8DotFlops(pool, int64_t{1} << 20, 2),
                 ops::simd::KQuantQ8KKernel(DType::kQ4_K) != nullptr, 12 * 64);
}

}  // namespace
}  // namespace dsv4
