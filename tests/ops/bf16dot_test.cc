// The bf16 dot-product FP8/FP4 kernels (ops/simd/bf16dot_x86.cc) against
// their ops/ref twins, at the kernel tolerances of oracles/README.md: K of 1
// to 16 groups of 128, N with short last row quads and panels, 1 to 17 tokens
// (both paths, partial token tiles), a call longer than one x block, unaligned
// weights and x, row sub-ranges with a wider output stride, e8m0/f32/bf16
// scales with the e8m0 extremes, rows with folded and unfolded e8m0 scales
// side by side; one-token row ranges equal to one-row calls bit for bit;
// decode (T = 1) equal bit for bit to each token of a multi-token call;
// declining (and writing nothing) for inputs that are not exactly bf16 or K
// not a multiple of 128; and ops::MatMulFp8Block / Fp4Block taking them for
// bf16-exact inputs and the fp32 kernels otherwise. FP8 weights with both
// scale tiles, 128 × 128 and 32 × 32 (Fp8Blocks).
//
// The kernels exist only on x86-64 CPUs with AVX512-BF16 and AVX512-VBMI;
// elsewhere the kernel tests are reported as skipped (with the reason) and the
// dispatch test checks that ops:: uses the fp32 kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../common/matmul_fixtures.h"
#include "base/env.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/simd/simd_kernels.h"
#include "ops/vec_ops.h"

namespace dsv4 {
namespace {

namespace simd = ::dsv4::ops::simd;
using ::dsv4::testing::ExpectMatMulClose;
using ::dsv4::testing::KernelArgs;
using ::dsv4::testing::MakeWeight;
using ::dsv4::testing::RandomFloats;
using ::dsv4::testing::Weight;

// Inputs as an FP8/FP4 linear sees them after DeepSeek-V4's activation
// quantisation: e4m3 values times a power-of-two scale per 128, exactly bf16.
std::vector<float> QuantizedX(int64_t n_tokens, int64_t k, uint32_t seed) {
  std::vector<float> x = RandomFloats(static_cast<size_t>(n_tokens * k), seed, 2.0f);
  for (int64_t t = 0; t < n_tokens; ++t) ops::QuantizeDequantizeFp8(x.data() + t * k, k, 128);
  return x;
}

simd::TryMatMulFn KernelFor(DType dtype) {
  return dtype == DType::kFp8E4m3 ? simd::Fp8Bf16DotKernel() : simd::Fp4Bf16DotKernel();
}

void RefRows(const Weight& w, float* out, int64_t out_stride, const float* x, int64_t n_tokens,
             int64_t row_begin, int64_t row_end) {
  if (w.dtype == DType::kFp8E4m3) {
    ops::ref::MatMulFp8Block(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end,
                             w.fp8_block);
  } else {
    ops::ref::MatMulFp4Block(out, out_stride, x, w.view(), w.scale(), n_tokens, row_begin, row_end);
  }
}

std::string Describe(const Weight& w, int64_t t, const std::string& extra = "") {
  const std::string block =
      w.dtype == DType::kFp8E4m3 ? ", block " + std::to_string(w.fp8_block) : "";
  return std::string(DTypeName(w.dtype)) + " (" + std::string(DTypeName(w.scale_dtype)) +
         " scales" + block + ") N=" + std::to_string(w.n) + " K=" + std::to_string(w.k) +
         " T=" + std::to_string(t) + extra;
}

// The scale tiles a weight of dtype dt comes in: FP8 128 × 128 (DeepSeek-V4)
// and 32 × 32 (V4.1-Flash); FP4 one layout (128: ignored).
std::vector<int64_t> Fp8Blocks(DType dt) {
  return dt == DType::kFp8E4m3 ? std::vector<int64_t>{128, 32} : std::vector<int64_t>{128};
}

bool Available() {
  return simd::Fp8Bf16DotKernel() != nullptr && simd::Fp4Bf16DotKernel() != nullptr;
}

#define DSV4_REQUIRE_BF16DOT()                                                                   \
  do {                                                                                           \
    if (!Available()) {                                                                          \
      GTEST_SKIP() << "this CPU lacks AVX512-BF16/VBMI (or DSV4_KERNELS=portable): no bf16 dot " \
                      "kernels to test; BF16Dot.OpsFallBack checks the dispatch instead";        \
    }                                                                                            \
  } while (0)

// All rows (out stride N) against the scalar twin; then every token of the
// multi-token call against a decode call of that token alone, bit for bit.
void CheckCase(const Weight& w, int64_t n_tokens, uint32_t seed) {
  const simd::TryMatMulFn kernel = KernelFor(w.dtype);
  const std::vector<float> x = QuantizedX(n_tokens, w.k, seed);
  std::vector<float> want(n_tokens * w.n), got(n_tokens * w.n, -7.0f);
  RefRows(w, want.data(), w.n, x.data(), n_tokens, 0, w.n);
  ASSERT_TRUE(kernel(KernelArgs(w, got.data(), w.n, x.data(), n_tokens, 0, w.n)))
      << Describe(w, n_tokens);
  ExpectMatMulClose(got, want, Describe(w, n_tokens));
  for (int64_t t = 0; t < n_tokens && n_tokens > 1; ++t) {
    std::vector<float> one(w.n, -9.0f);
    ASSERT_TRUE(kernel(KernelArgs(w, one.data(), w.n, x.data() + t * w.k, 1, 0, w.n)));
    EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * w.n, 4 * w.n))
        << Describe(w, n_tokens, " token " + std::to_string(t) + ": decode != prefill");
  }
}

// A measurement build (-DDSV4_STREAM_ONLY=ON) computes nothing in its
// one-token products; the build the tests run is never one.
TEST(BF16Dot, NotAStreamOnlyBuild) { EXPECT_FALSE(ops::StreamOnlyBuild()); }

TEST(BF16Dot, MatchesRefAndDecodeEqualsPrefill) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (int64_t block : Fp8Blocks(dt)) {
      for (int64_t k : {128, 256, 640, 2048}) {
        for (int64_t n : {1, 3, 4, 7, 33, 70, 130}) {
          const Weight w =
              MakeWeight(dt, n, k, static_cast<uint32_t>(k * 7 + n), 0, DType::kE8m0, block);
          for (int64_t t : {1, 2, 5, 8, 9, 13, 17})
            CheckCase(w, t, static_cast<uint32_t>(t * 13 + k));
        }
      }
    }
  }
}

// Weight rows and x at addresses with no alignment (the kernels load unaligned).
TEST(BF16Dot, MisalignedWeightsAndInputs) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (size_t offset : {size_t{1}, size_t{3}, size_t{33}}) {
      for (int64_t block : Fp8Blocks(dt)) {
        const Weight w = MakeWeight(dt, 37, 384, 7, offset, DType::kE8m0, block);
        for (int64_t t : {1, 12}) {
          const std::vector<float> xs = QuantizedX(t, w.k, 5);
          std::vector<float> xbuf(xs.size() + 1);
          std::copy(xs.begin(), xs.end(), xbuf.begin() + 1);  // x one float off
          std::vector<float> want(t * w.n), got(t * w.n);
          RefRows(w, want.data(), w.n, xs.data(), t, 0, w.n);
          ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, got.data(), w.n, xbuf.data() + 1, t, 0, w.n)));
          ExpectMatMulClose(got, want, Describe(w, t, " offset " + std::to_string(offset)));
        }
      }
    }
  }
}

TEST(BF16Dot, ScaleDtypes) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (DType sd : {DType::kF32, DType::kBF16}) {
      for (int64_t block : Fp8Blocks(dt)) {
        const Weight w = MakeWeight(dt, 131, 384, 5, 0, sd, block);
        for (int64_t t : {1, 4, 11}) CheckCase(w, t, 17);
      }
    }
  }
}

// e8m0 scales 0 (2^-127, an f32 subnormal), 1 and 240 (2^113, as large as
// keeps the ref's dequantised weights finite) decode exactly.
TEST(BF16Dot, ExtremeScales) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (uint8_t code : {uint8_t{0}, uint8_t{1}, uint8_t{240}}) {
      for (int64_t block : Fp8Blocks(dt)) {
        Weight w = MakeWeight(dt, 40, 256, 3, 0, DType::kE8m0, block);
        // Keep products finite: x of about 2^-100 under a 2^113 scale.
        for (auto& b : w.scale_bytes) b = code;
        const simd::TryMatMulFn kernel = KernelFor(dt);
        std::vector<float> x = QuantizedX(1, w.k, 9);
        const float shift = code == 240 ? std::ldexp(1.0f, -100) : 1.0f;
        for (float& v : x) v *= shift;
        std::vector<float> want(w.n), got(w.n);
        RefRows(w, want.data(), w.n, x.data(), 1, 0, w.n);
        ASSERT_TRUE(kernel(KernelArgs(w, got.data(), w.n, x.data(), 1, 0, w.n)));
        if (code == 0) {
          // Products of 2^-127-scaled weights are subnormal: the kernel flushes
          // them, as the fp32 path would not. Both are within 1e-35 of zero.
          for (int64_t i = 0; i < w.n; ++i) EXPECT_LE(std::fabs(got[i] - want[i]), 1e-35f);
        } else {
          ExpectMatMulClose(got, want, Describe(w, 1, " scale code " + std::to_string(code)));
        }
      }
    }
  }
}

// One-token FP4 row pairs read the scales of K a multiple of 512 as f32 in
// registers where both rows' are normal (codes 1 … 254); a pair with a code 0
// (2^-127, subnormal in f32) or 255 (NaN) among them takes E8m0Row's floats.
// Rows of both kinds in one call: against the scalar twin, and decode equal
// to each token of a multi-token call bit for bit (a row of 2^-127 scales
// sums subnormal products, which the multi-token path keeps: read as 0 they
// would differ); a 255 makes its row NaN (read as infinity, a row of positive
// products would be +inf) and no other.
TEST(BF16Dot, Fp4PairsWithSpecialScaleCodes) {
  DSV4_REQUIRE_BF16DOT();
  for (int64_t k : {512, 2048}) {
    Weight w = MakeWeight(DType::kFp4E2m1, 21, k, static_cast<uint32_t>(k + 5));
    std::fill_n(w.scale_bytes.begin() + 2 * w.scale_cols, w.scale_cols, 0);  // row 2: all 2^-127
    w.scale_bytes[13 * w.scale_cols + w.scale_cols - 1] = 0;  // row 13: its last block
    for (int64_t t : {1, 6, 7}) CheckCase(w, t, static_cast<uint32_t>(t + k));
    w.scale_bytes[7 * w.scale_cols + 3] = 255;  // row 7: NaN, its weights all +1
    std::fill_n(w.bytes.begin() + static_cast<int64_t>(w.offset) + 7 * (k / 2), k / 2,
                uint8_t{0x22});
    std::vector<float> x = QuantizedX(1, w.k, 3);
    for (float& v : x) v = std::fabs(v);
    std::vector<float> want(w.n), got(w.n);
    RefRows(w, want.data(), w.n, x.data(), 1, 0, w.n);
    ASSERT_TRUE(KernelFor(w.dtype)(KernelArgs(w, got.data(), w.n, x.data(), 1, 0, w.n)));
    std::vector<float> got_rest, want_rest;
    for (int64_t i = 0; i < w.n; ++i) {
      EXPECT_EQ(std::isnan(got[i]), i == 7) << "K=" << k << " row " << i;
      if (i == 7) continue;
      got_rest.push_back(got[i]);
      want_rest.push_back(want[i]);
    }
    ExpectMatMulClose(got_rest, want_rest, Describe(w, 1, " beside a NaN row"));
  }
}

// The tiles fold e8m0 scales 2^-32 … 2^32 into the decoded weights and keep
// the others beside them. Rows of either kind, in one panel and in one pair
// of rows (scales 2^-40 and 2^40 here), and FP8 128-row blocks of either
// kind: against the scalar twin, decode equal to prefill bit for bit.
TEST(BF16Dot, FoldedAndUnfoldedRowsMix) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (int64_t block : Fp8Blocks(dt)) {
      Weight w = MakeWeight(dt, 300, 512, 41, 0, DType::kE8m0, block);
      const bool fp8_32 = dt == DType::kFp8E4m3 && block == 32;
      for (int64_t r = 0; r < w.scale_rows; ++r) {
        // FP4: rows 3, 4 (a pair), 9 and every 7th from 40; FP8: block 1 of
        // 3; FP8 32 × 32: 32-row blocks 1, 4 and 5 (5: one of its 16 scales).
        const bool out_of_range = fp8_32 ? r == 1 || r == 4 || r == 5
                                  : dt == DType::kFp8E4m3
                                      ? r == 1
                                      : r == 3 || r == 4 || r == 9 || (r >= 40 && r % 7 == 0);
        if (!out_of_range) continue;
        for (int64_t c = 0; c < w.scale_cols; ++c) {
          if (fp8_32 && r == 5 && c != 6) continue;
          w.scale_bytes[r * w.scale_cols + c] = static_cast<uint8_t>(r % 2 == 0 ? 87 : 167);
        }
      }
      for (int64_t t : {1, 10, 13}) CheckCase(w, t, static_cast<uint32_t>(t + 3));
    }
  }
}

// A call longer than one block of x scratch (4 MiB of bf16: 16384 tokens at
// K = 128) goes block by block, with the same results; an inexact x in the
// last block still declines before anything is written.
TEST(BF16Dot, LongCallsGoBlockByBlock) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    const Weight w = MakeWeight(dt, 5, 128, 31);
    const int64_t t = 16384 + 13;
    std::vector<float> x = QuantizedX(t, w.k, 12);
    std::vector<float> want(t * w.n), got(t * w.n);
    RefRows(w, want.data(), w.n, x.data(), t, 0, w.n);
    ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, got.data(), w.n, x.data(), t, 0, w.n)));
    ExpectMatMulClose(got, want, Describe(w, t));
    for (int64_t tok : {int64_t{0}, int64_t{16383}, int64_t{16384}, t - 1}) {
      std::vector<float> one(w.n);
      ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, one.data(), w.n, x.data() + tok * w.k, 1, 0, w.n)));
      EXPECT_EQ(0, std::memcmp(one.data(), got.data() + tok * w.n, 4 * w.n)) << "token " << tok;
    }
    x[(t - 1) * w.k + 7] = std::nextafter(1.0f, 2.0f);
    std::vector<float> out(t * w.n, -5.0f);
    EXPECT_FALSE(KernelFor(dt)(KernelArgs(w, out.data(), w.n, x.data(), t, 0, w.n)));
    for (float v : out) ASSERT_EQ(v, -5.0f);
  }
}

// Rows [5, 37) of 40 into a stride of 45: only that block of out is written.
TEST(BF16Dot, RowRangeAndStride) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (int64_t block : Fp8Blocks(dt)) {
      const Weight w = MakeWeight(dt, 40, 256, 11, 0, DType::kE8m0, block);
      const int64_t begin = 5, end = 37, stride = 45;
      for (int64_t t : {1, 6, 10}) {
        const std::vector<float> x = QuantizedX(t, w.k, 4);
        std::vector<float> want(t * stride, -3.0f), got(t * stride, -3.0f);
        RefRows(w, want.data(), stride, x.data(), t, begin, end);
        ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, got.data(), stride, x.data(), t, begin, end)));
        for (int64_t tok = 0; tok < t; ++tok) {
          for (int64_t i = 0; i < stride; ++i) {
            const float g = got[tok * stride + i], r = want[tok * stride + i];
            if (i >= end - begin) {
              EXPECT_EQ(g, -3.0f) << "wrote past the row range at " << i;
            } else {
              EXPECT_NEAR(g, r, 1e-4 * std::fabs(r) + 1e-4) << Describe(w, t) << " row " << i;
            }
          }
        }
      }
    }
  }
}

// One token over row ranges that start on odd rows and straddle FP8 128-row
// scale blocks: every row equals a call of that row alone, bit for bit (how a
// product is split over threads never changes its rows). Ranges of two rows
// or more take the paired paths (Fp4RowPairs / Fp8RowPairs: rows i and
// i + half, each half with its own FP8 scale block, the odd row last),
// one-row calls the single-row path. Two shapes (K = 384, 512), with and
// without an odd row.
TEST(BF16Dot, RowRangesEqualSingleRows) {
  DSV4_REQUIRE_BF16DOT();
  using Range = std::pair<int64_t, int64_t>;
  struct Case {
    int64_t n, k;
    uint32_t w_seed, x_seed;
    std::vector<Range> ranges;
  };
  const Case cases[] = {
      {260, 384, 23, 5, {{0, 260}, {1, 260}, {127, 130}, {3, 4}, {126, 257}}},
      {261, 512, 29, 8, {{0, 261}, {1, 261}, {120, 250}}},
  };
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1})
    for (int64_t block : Fp8Blocks(dt))
      for (const Case& c : cases) {
        const Weight w = MakeWeight(dt, c.n, c.k, c.w_seed, 0, DType::kE8m0, block);
        const std::vector<float> x = QuantizedX(1, w.k, c.x_seed);
        for (const auto& [begin, end] : c.ranges) {
          std::vector<float> got(end - begin, -5.0f);
          ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, got.data(), w.n, x.data(), 1, begin, end)));
          for (int64_t n = begin; n < end; ++n) {
            float one = -6.0f;
            ASSERT_TRUE(KernelFor(dt)(KernelArgs(w, &one, w.n, x.data(), 1, n, n + 1)));
            EXPECT_EQ(0, std::memcmp(&one, &got[n - begin], 4))
                << Describe(w, 1,
                            " rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                                "): row " + std::to_string(n) + " differs from a one-row call");
          }
        }
      }
}

// Not exactly bf16 (a low mantissa bit, a subnormal), or K % 128 != 0: the
// kernel declines and writes nothing.
TEST(BF16Dot, Declines) {
  DSV4_REQUIRE_BF16DOT();
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    const Weight w = MakeWeight(dt, 9, 256, 2);
    for (int bad : {0, 1}) {
      std::vector<float> x = QuantizedX(3, w.k, 8);
      // One input of the last token, deep in its last group.
      x[2 * w.k + 200] = bad == 0 ? std::nextafter(1.0f, 2.0f)
                                  : std::numeric_limits<float>::denorm_min() * 65536.0f;
      std::vector<float> out(3 * w.n, -5.0f);
      for (int64_t t : {1, 3}) {
        const float* xt = t == 1 ? x.data() + 2 * w.k : x.data();
        EXPECT_FALSE(KernelFor(dt)(KernelArgs(w, out.data(), w.n, xt, t, 0, w.n)))
            << Describe(w, t, bad == 0 ? " inexact x" : " subnormal x");
      }
      for (float v : out) EXPECT_EQ(v, -5.0f);
    }
    for (int64_t block : Fp8Blocks(dt)) {
      // K % 128 != 0 (FP8 with 32 × 32 tiles: K = 96 and 160, whole tiles).
      for (int64_t k : dt == DType::kFp4E2m1 ? std::vector<int64_t>{96}
                       : block == 32         ? std::vector<int64_t>{96, 160}
                                             : std::vector<int64_t>{200}) {
        const Weight odd = MakeWeight(dt, 4, k, 3, 0, DType::kE8m0, block);
        const std::vector<float> x = QuantizedX(1, 256, 1);
        std::vector<float> out(odd.n, -5.0f);
        EXPECT_FALSE(KernelFor(dt)(KernelArgs(odd, out.data(), odd.n, x.data(), 1, 0, odd.n)))
            << Describe(odd, 1);
        for (float v : out) EXPECT_EQ(v, -5.0f);
      }
    }
  }
}

// ops:: takes the bf16 kernels for bf16-exact inputs (bit for bit theirs) and
// the fp32 kernels otherwise (bit for bit simd::Fp*BlockMatMulKernel).
TEST(BF16Dot, OpsDispatch) {
  ThreadPool pool(2);
  for (DType dt : {DType::kFp8E4m3, DType::kFp4E2m1}) {
    for (int64_t block : Fp8Blocks(dt)) {
      const Weight w = MakeWeight(dt, 300, 512, 6, 0, DType::kE8m0, block);
      const simd::MatMulFn fp32 =
          dt == DType::kFp8E4m3 ? simd::Fp8BlockMatMulKernel() : simd::Fp4BlockMatMulKernel();
      for (bool exact : {true, false}) {
        for (int64_t t : {1, 3}) {
          const std::vector<float> x =
              exact ? QuantizedX(t, w.k, 21) : RandomFloats(static_cast<size_t>(t * w.k), 21);
          std::vector<float> ops_out(t * w.n), want(t * w.n);
          if (dt == DType::kFp8E4m3) {
            ops::MatMulFp8BlockRows(ops_out.data(), w.n, x.data(), w.view(), w.scale(), t, 0, w.n,
                                    block);
          } else {
            ops::MatMulFp4BlockRows(ops_out.data(), w.n, x.data(), w.view(), w.scale(), t, 0, w.n);
          }
          const simd::TryMatMulFn dot = KernelFor(dt);
          const simd::MatMulArgs a = KernelArgs(w, want.data(), w.n, x.data(), t, 0, w.n);
          const bool took = dot != nullptr && dot(a);
          EXPECT_EQ(took, exact && Available()) << Describe(w, t);
          if (!took) fp32(a);
          EXPECT_EQ(0, std::memcmp(ops_out.data(), want.data(), 4 * want.size()))
              << Describe(w, t, exact ? " exact x" : " fp32 x");
          // The pooled entry point splits rows over threads: the same values.
          std::vector<float> pooled(t * w.n);
          if (dt == DType::kFp8E4m3) {
            ops::MatMulFp8Block(pool, pooled.data(), x.data(), w.view(), w.scale(), t, block);
          } else {
            ops::MatMulFp4Block(pool, pooled.data(), x.data(), w.view(), w.scale(), t);
          }
          EXPECT_EQ(0, std::memcmp(pooled.data(), want.data(), 4 * want.size()))
              << Describe(w, t, " pooled");
        }
      }
    }
  }
}

// Where the CPU has the instructions, so does the dispatch (unless DSV4_KERNELS=portable).
TEST(BF16Dot, AvailableMatchesCpu) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool cpu = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
  EXPECT_EQ(Available(), cpu && !env::PortableKernelsOnly());
#else
  EXPECT_FALSE(Available());
#endif
}

}  // namespace
}  // namespace dsv4
