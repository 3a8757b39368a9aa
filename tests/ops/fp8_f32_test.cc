// The FP8 × f32 matvec with table decoding (ops/simd/fp8_f32_x86.cc) against
// the Highway matvec it stands in for (Fp8BlockMatMulKernel), bit for bit:
// K of 1 to 16 blocks of 128, N with short last quads, row ranges starting
// anywhere (quads straddling 128-row blocks), unaligned weights and x, x with
// zeros, signs and a wide range of magnitudes, e8m0 scales with the extremes
// 0 and 254 and a NaN (255) block, every e4m3 code (NaN codes included); and
// declining, writing nothing, for T != 1, K % 128 != 0 and f32 scales. The
// same with 32 × 32 scale tiles (DeepSeek-V4.1-Flash): K multiples of 64,
// quads straddling 32-row blocks, declining K % 64 != 0.
//
// The kernel exists only on x86-64 CPUs with AVX512-VBMI; elsewhere its tests
// are reported as skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../common/matmul_fixtures.h"
#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4 {
namespace {

namespace simd = ::dsv4::ops::simd;
using ::dsv4::testing::MakeWeight;
using ::dsv4::testing::Weight;
using ::dsv4::testing::WideX;

#define DSV4_REQUIRE_FP8_F32()                    \
  DSV4_REQUIRE_KERNEL(simd::Fp8F32MatVecKernel(), \
                      "this CPU lacks AVX512-VBMI (or DSV4_KERNELS=portable)")

// Rows [b, e) of w · x by both kernels; equal bits expected.
void ExpectSameBits(const Weight& w, const float* x, int64_t b, int64_t e,
                    const std::string& what) {
  ::dsv4::testing::ExpectSameBits(simd::Fp8BlockMatMulKernel(), simd::Fp8F32MatVecKernel(), w, x, b,
                                  e, what);
}

TEST(Fp8F32MatVec, EqualsHighwayMatVecBitForBit) {
  DSV4_REQUIRE_FP8_F32();
  uint32_t seed = 1;
  for (const int64_t block : {128, 32}) {
    for (const int64_t k : {64, 128, 192, 256, 640, 2048}) {
      if (k % block != 0) continue;
      for (const int64_t n : {1, 3, 4, 70, 130, 261}) {
        for (const size_t offset : {size_t{0}, size_t{3}}) {
          Weight w = MakeWeight(DType::kFp8E4m3, n, k, ++seed, offset, DType::kE8m0, block);
          const std::vector<float> xv = WideX(k, ++seed, offset);
          const float* x = xv.data() + offset;
          const std::string what = "block " + std::to_string(block) + " N=" + std::to_string(n) +
                                   " K=" + std::to_string(k) + " offset " + std::to_string(offset);
          ExpectSameBits(w, x, 0, n, what);
          for (const int64_t b :
               {int64_t{1}, int64_t{2}, int64_t{30}, int64_t{126}, int64_t{127}}) {
            if (b < n) ExpectSameBits(w, x, b, n, what + " from row " + std::to_string(b));
          }
        }
      }
    }
  }
}

TEST(Fp8F32MatVec, EveryCodeAndScaleExtremeEqualsHighway) {
  DSV4_REQUIRE_FP8_F32();
  const int64_t n = 384, k = 256;  // three 128-row blocks
  Weight w = MakeWeight(DType::kFp8E4m3, n, k, 77);
  uint8_t* p = w.bytes.data() + w.offset;
  for (int64_t i = 0; i < n * k; ++i) p[i] = static_cast<uint8_t>(i * 7 % 256);  // NaN codes too
  // Block 0: scales 2^-127 (code 0) and 2^127 (254); block 1: normal; block 2:
  // a NaN scale (Highway compares scales: the kernel hands that block back).
  w.scale_bytes = {0, 254, 120, 130, 127, 255};
  const std::vector<float> x = WideX(k, 5, 0);
  ExpectSameBits(w, x.data(), 0, n, "codes/extremes");
  ExpectSameBits(w, x.data(), 125, 260, "codes/extremes from row 125");
  // 32 × 32 tiles: [12, 8] scales; 32-row block 0 with the extremes, block 5
  // with a NaN scale in one column, the rest normal.
  Weight w32 = MakeWeight(DType::kFp8E4m3, n, k, 78, 0, DType::kE8m0, 32);
  std::copy(p, p + n * k, w32.bytes.begin() + static_cast<int64_t>(w32.offset));
  for (size_t i = 0; i < w32.scale_bytes.size(); ++i) {
    w32.scale_bytes[i] = static_cast<uint8_t>(i < 8 ? (i % 2 == 0 ? 0 : 254) : 118 + i % 19);
  }
  w32.scale_bytes[5 * 8 + 3] = 255;
  ExpectSameBits(w32, x.data(), 0, n, "32x32 codes/extremes");
  ExpectSameBits(w32, x.data(), 29, 200, "32x32 codes/extremes from row 29");
}

TEST(Fp8F32MatVec, DeclinesWritingNothing) {
  DSV4_REQUIRE_FP8_F32();
  const auto check = [](const Weight& w, int64_t t, const std::string& what) {
    ::dsv4::testing::ExpectDeclines(simd::Fp8F32MatVecKernel(), w, t, what);
  };
  check(MakeWeight(DType::kFp8E4m3, 8, 256, 1), 2, "two tokens");
  check(MakeWeight(DType::kFp8E4m3, 8, 192, 2), 1, "K % 128 != 0");
  check(MakeWeight(DType::kFp8E4m3, 8, 256, 3, 0, DType::kF32), 1, "f32 scales");
  check(MakeWeight(DType::kFp8E4m3, 8, 96, 4, 0, DType::kE8m0, 32), 1, "32x32 tiles, K % 64 != 0");
  check(MakeWeight(DType::kFp8E4m3, 8, 256, 5, 0, DType::kE8m0, 32), 3, "32x32 tiles, 3 tokens");
}

}  // namespace
}  // namespace dsv4
