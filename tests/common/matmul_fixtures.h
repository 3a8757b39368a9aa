// Test fixtures shared by the matmul kernel tests (simd_kernels_test,
// bf16dot_test, fp8_f32_test): random weights in every stored format with
// their block scales, a kernel call's arguments, and the kernel tolerance of oracles/README.md
// (matmul NMSE ≤ 5e-4, max-abs ≤ 1e-4·max|ref|).
#ifndef DSV4_TESTS_COMMON_MATMUL_FIXTURES_H_
#define DSV4_TESTS_COMMON_MATMUL_FIXTURES_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/tensor.h"

// Skips the test, saying why, where `kernel` (a TryMatMulFn getter's result)
// is nullptr: the CPU lacks its instructions or the environment turned it off.
#define DSV4_REQUIRE_KERNEL(kernel, why)                                           \
  do {                                                                             \
    if ((kernel) == nullptr) {                                                     \
      GTEST_SKIP() << why << ": no kernel to test; ops:: runs the Highway matvec"; \
    }                                                                              \
  } while (0)

namespace dsv4::testing {

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// x with full f32 mantissas: normal values, some zeros and sign flips, and
// magnitudes from 1e-30 to 1e4.
inline std::vector<float> WideX(int64_t k, uint32_t seed, size_t offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<float> x(static_cast<size_t>(k) + offset);
  for (int64_t i = 0; i < k; ++i) {
    float v = normal(rng);
    switch (pick(rng)) {
      case 0:
        v = 0.0f;
        break;
      case 1:
        v *= 1e-30f;
        break;
      case 2:
        v *= 1e4f;
        break;
      case 3:
        v = -0.0f;
        break;
      default:
        break;
    }
    x[offset + static_cast<size_t>(i)] = v;
  }
  return x;
}

struct Error {
  double nmse = 0;
  double max_abs = 0;
  double max_ref = 0;
};

inline Error Compare(const float* got, const float* want, size_t n) {
  Error e;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.max_ref = std::max(e.max_ref, std::fabs(static_cast<double>(want[i])));
  }
  e.nmse = den == 0 ? num : num / den;
  return e;
}

inline void ExpectMatMulClose(const std::vector<float>& got, const std::vector<float>& want,
                              const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const Error e = Compare(got.data(), want.data(), got.size());
  EXPECT_LE(e.nmse, 5e-4) << what;
  EXPECT_LE(e.max_abs, 1e-4 * e.max_ref + 1e-30) << what << " max_abs " << e.max_abs;
}

// A weight matrix in some stored format, plus its block scale if any.
struct Weight {
  DType dtype = DType::kF32;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> bytes;  // with `offset` leading bytes (misalignment)
  size_t offset = 0;
  DType scale_dtype = DType::kE8m0;
  std::vector<uint8_t> scale_bytes;
  int64_t scale_rows = 0, scale_cols = 0;
  int64_t fp8_block = 128;  // FP8: the weight tile one scale covers (128 or 32)

  TensorView view() const { return TensorView::Contiguous(bytes.data() + offset, dtype, {n, k}); }
  TensorView scale() const {
    return TensorView::Contiguous(scale_bytes.data(), scale_dtype, {scale_rows, scale_cols});
  }
  bool blocked() const { return dtype == DType::kFp8E4m3 || dtype == DType::kFp4E2m1; }
};

// One kernel call on rows [row_begin, row_end) of w: out[t · out_stride + (n − row_begin)].
inline ops::simd::MatMulArgs KernelArgs(const Weight& w, float* out, int64_t out_stride,
                                        const float* x, int64_t n_tokens, int64_t row_begin,
                                        int64_t row_end) {
  ops::simd::MatMulArgs a;
  a.out = out;
  a.out_stride = out_stride;
  a.x = x;
  a.n_tokens = n_tokens;
  a.w = w.view();
  a.scale = w.scale();
  a.row_begin = row_begin;
  a.row_end = row_end;
  a.fp8_block = w.fp8_block;
  return a;
}

inline void FillScales(Weight& w, int64_t rows, int64_t cols, DType dtype, std::mt19937& rng) {
  w.scale_dtype = dtype;
  w.scale_rows = rows;
  w.scale_cols = cols;
  std::uniform_int_distribution<int> e(120, 134);  // 2^-7 .. 2^7
  const size_t count = static_cast<size_t>(rows * cols);
  w.scale_bytes.assign(count * DTypeBytes(dtype, 1), 0);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t code = static_cast<uint8_t>(e(rng));
    if (dtype == DType::kE8m0) {
      w.scale_bytes[i] = code;
    } else if (dtype == DType::kF32) {
      const float f = E8m0ToF32(code) * 1.25f;  // not a power of two
      std::memcpy(&w.scale_bytes[4 * i], &f, 4);
    } else {
      const uint16_t h = F32ToBf16(E8m0ToF32(code) * 0.75f);
      std::memcpy(&w.scale_bytes[2 * i], &h, 2);
    }
  }
}

// fp8_block: an FP8 weight's scale tile, 128 × 128 or 32 × 32 (scale
// [ceil(N/b), ceil(K/b)]).
inline Weight MakeWeight(DType dtype, int64_t n, int64_t k, uint32_t seed, size_t offset = 0,
                         DType scale_dtype = DType::kE8m0, int64_t fp8_block = 128) {
  std::mt19937 rng(seed);
  Weight w;
  w.dtype = dtype;
  w.fp8_block = fp8_block;
  w.n = n;
  w.k = k;
  w.offset = offset;
  const int64_t bytes = DTypeBytes(dtype, n * k);
  w.bytes.assign(offset + bytes, 0);
  uint8_t* p = w.bytes.data() + offset;
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::uniform_int_distribution<int> byte(0, 255);
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n * k; ++i) {
        const float f = normal(rng);
        std::memcpy(p + 4 * i, &f, 4);
      }
      break;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < n * k; ++i) {
        // Include f16 subnormals now and then.
        const float f = (i % 7 == 3) ? normal(rng) * 1e-5f : normal(rng);
        const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n * k / 32; ++b) {
        BlockQ8_0 blk;
        blk.d = F32ToF16(std::fabs(normal(rng)) * 0.01f + 1e-4f);
        for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(byte(rng) - 128);
        std::memcpy(p + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
      }
      break;
    case DType::kFp8E4m3:
      for (int64_t i = 0; i < n * k; ++i) {
        uint8_t c = static_cast<uint8_t>(byte(rng));
        if ((c & 0x7f) == 0x7f) c &= 0xfe;  // no NaN codes: a NaN weight is a bug upstream
        p[i] = c;
      }
      FillScales(w, (n + fp8_block - 1) / fp8_block, (k + fp8_block - 1) / fp8_block, scale_dtype,
                 rng);
      break;
    case DType::kFp4E2m1:
      for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(byte(rng));
      FillScales(w, n, k / 32, scale_dtype, rng);
      break;
    default:
      ADD_FAILURE() << "no generator for " << DTypeName(dtype);
  }
  return w;
}

// Rows [b, e) of w · x (one token) by a reference kernel and a kernel that
// may decline: the second must take the call and give the same bits (NaNs
// as NaNs).
inline void ExpectSameBits(ops::simd::MatMulFn want_fn, ops::simd::TryMatMulFn got_fn,
                           const Weight& w, const float* x, int64_t b, int64_t e,
                           const std::string& what, int64_t n_tokens = 1) {
  std::vector<float> want(static_cast<size_t>(n_tokens * (e - b)), -7.0f), got(want.size(), -9.0f);
  want_fn(KernelArgs(w, want.data(), e - b, x, n_tokens, b, e));
  ASSERT_TRUE(got_fn(KernelArgs(w, got.data(), e - b, x, n_tokens, b, e))) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, c;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&c, &got[i], 4);
    // Any NaN matches any NaN: which operand's payload an FMA passes on
    // depends on the instruction form the compiler picked.
    if (a != c && !(std::isnan(want[i]) && std::isnan(got[i]))) {
      ADD_FAILURE() << what << " token " << static_cast<int64_t>(i) / (e - b) << " row "
                    << b + static_cast<int64_t>(i) % (e - b) << ": " << got[i] << " vs reference "
                    << want[i];
      return;
    }
  }
}

// A kernel that must decline the call (t tokens of wide x): false, and
// nothing written.
inline void ExpectDeclines(ops::simd::TryMatMulFn fn, const Weight& w, int64_t t,
                           const std::string& what) {
  const std::vector<float> x = WideX(w.k * t, 3, 0);
  std::vector<float> out(static_cast<size_t>(w.n * t), 42.0f);
  EXPECT_FALSE(fn(KernelArgs(w, out.data(), w.n, x.data(), t, 0, w.n))) << what;
  for (float v : out) ASSERT_EQ(v, 42.0f) << what;
}

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_COMMON_MATMUL_FIXTURES_H_
