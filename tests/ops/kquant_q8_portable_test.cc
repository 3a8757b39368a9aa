// GGUF q4_K and q6_K weights × q8_K activations on the portable Highway
// kernels (ops::simd::KQuantQ8KPortableKernel, ops/simd/kquant_q8_simd.cc):
//   - against ops::ref::DotKQuantQ8K bit for bit on every Highway target this
//     build compiled and this CPU runs: K = 256·{1,2,3,5}, 4096 and 7168, N
//     with remainders of the 4-row groups, T = 1…5, 17 and 64, row sub-ranges
//     into a wider output stride, misaligned weights, zero, negative and
//     subnormal f16 scales, all-zero tokens;
//   - the activation quantisation (QuantizeQ8KPortableKernel) against
//     ops::ref::QuantizeRowQ8K byte for byte on every target;
//   - ops::MatMul on a ThreadPool and ops::MatMulRows against
//     ops::ref::MatMulKQuantQ8K bit for bit (whichever kernel this CPU takes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/for_each_target.h"
#include "base/float_types.h"
#include "base/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ref/kquant_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::ForEachTarget;

const DType kTypes[] = {DType::kQ4_K, DType::kQ6_K};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// [n, k] random blocks behind `offset` leading bytes, the f16 scales (q4_K: d
// and dmin; q6_K: d) of either sign in [−0.02, 0.02]; row 0's first block has
// d = 0, its second (when there) subnormal scales.
struct KWeight {
  DType dtype;
  int64_t n = 0, k = 0;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView::Contiguous(bytes.data() + offset, dtype, {n, k}); }
};

void SetF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

KWeight MakeWeight(DType dt, int64_t n, int64_t k, uint32_t seed, size_t offset = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  KWeight w{dt, n, k, offset, {}};
  w.bytes.resize(offset + static_cast<size_t>(DTypeBytes(dt, n * k)));
  for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
  const int64_t bb = GetDTypeInfo(dt).block_bytes;
  for (int64_t b = 0; b < n * k / kQK_K; ++b) {
    uint8_t* blk = w.bytes.data() + offset + b * bb;
    if (dt == DType::kQ4_K) {
      SetF16(blk + offsetof(BlockQ4_K, d), scale(rng));
      SetF16(blk + offsetof(BlockQ4_K, dmin), scale(rng));
    } else {
      SetF16(blk + offsetof(BlockQ6_K, d), scale(rng));
    }
  }
  uint8_t* first = w.bytes.data() + offset;
  SetF16(first + (dt == DType::kQ4_K ? offsetof(BlockQ4_K, d) : offsetof(BlockQ6_K, d)), 0.0f);
  if (k >= 2 * kQK_K) {
    uint8_t* second = first + bb;
    const uint16_t sub = 0x0003;  // f16 subnormal
    std::memcpy(second + (dt == DType::kQ4_K ? offsetof(BlockQ4_K, d) : offsetof(BlockQ6_K, d)),
                &sub, 2);
    if (dt == DType::kQ4_K) std::memcpy(second + offsetof(BlockQ4_K, dmin), &sub, 2);
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
    ops::ref::QuantizeRowQ8K(x.data() + t * K, K, q.data() + t * K / kQK_K);
  }
  return q;
}

// out[t·N + n] by DotKQuantQ8K.
std::vector<float> RefOut(const KWeight& w, const std::vector<BlockQ8K>& xq, int64_t T) {
  const int64_t N = w.n, nb = w.k / kQK_K;
  std::vector<float> out(T * N);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      out[t * N + n] = ops::ref::DotKQuantQ8K(
          w.dtype, static_cast<const uint8_t*>(w.view()[n].data), xq.data() + t * nb, nb);
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

const char* Name(DType t) { return t == DType::kQ4_K ? "q4_K" : "q6_K"; }

TEST(KQuantQ8PortableTest, KernelsExistForQ4KAndQ6KOnly) {
  for (DType t : kTypes) EXPECT_NE(ops::simd::KQuantQ8KPortableKernel(t), nullptr) << Name(t);
  for (DType other : {DType::kF32, DType::kQ8_0, DType::kQ2_K, DType::kQ5_K, DType::kMXFP4}) {
    EXPECT_EQ(ops::simd::KQuantQ8KPortableKernel(other), nullptr) << DTypeName(other);
  }
}

TEST(KQuantQ8PortableTest, MatchesRefBitForBitOnEveryTarget) {
  struct Shape {
    int64_t K;
    std::vector<int64_t> ns;
  };
  const Shape shapes[] = {{kQK_K, {1, 3, 4, 5, 9}}, {2 * kQK_K, {1, 6}}, {3 * kQK_K, {3, 7}},
                          {5 * kQK_K, {2, 5}},      {4096, {5, 8}},      {7168, {3}}};
  for (DType dt : kTypes) {
    for (const Shape& s : shapes) {
      for (int64_t N : s.ns) {
        const KWeight w = MakeWeight(dt, N, s.K, static_cast<uint32_t>(s.K + N));
        for (int64_t T : {1, 2, 3, 4, 5, 17, 64}) {
          const std::vector<float> x = Activations(T, s.K, static_cast<uint32_t>(T * 7 + N));
          const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, s.K);
          const std::vector<float> want = RefOut(w, xq, T);
          const std::string what = std::string(Name(dt)) + " K=" + std::to_string(s.K) +
                                   " N=" + std::to_string(N) + " T=" + std::to_string(T);
          ForEachTarget([&] {
            std::vector<float> got(T * N, NAN);
            ops::simd::KQuantQ8KPortableKernel(dt)(Args(got.data(), N, w.view(), T, 0, N),
                                                   xq.data());
            ExpectSameBits(got, want, what);
          });
        }
      }
    }
  }
}

TEST(KQuantQ8PortableTest, MisalignedWeightsAndRowRangeWithWideStride) {
  const int64_t N = 11, K = 3 * kQK_K;
  for (DType dt : kTypes) {
    for (size_t off : {size_t{1}, size_t{3}, size_t{7}}) {
      const KWeight w = MakeWeight(dt, N, K, 77 + static_cast<uint32_t>(off), off);
      for (int64_t T : {1, 2, 5, 17}) {
        const std::vector<float> x = Activations(T, K, 5);
        const std::vector<BlockQ8K> xq = QuantizeTokens(x, T, K);
        const std::vector<float> want = RefOut(w, xq, T);
        // Rows [2, 9) into an output with stride 10 (sentinels elsewhere).
        const int64_t begin = 2, end = 9, stride = 10;
        ForEachTarget([&] {
          std::vector<float> got(T * stride, -7.0f);
          ops::simd::KQuantQ8KPortableKernel(dt)(Args(got.data(), stride, w.view(), T, begin, end),
                                                 xq.data());
          for (int64_t tok = 0; tok < T; ++tok) {
            for (int64_t j = 0; j < stride; ++j) {
              const float g = got[tok * stride + j];
              if (j >= end - begin) {
                EXPECT_EQ(g, -7.0f) << Name(dt) << ": wrote past the row range";
                continue;
              }
              EXPECT_EQ(Bits(g), Bits(want[tok * N + begin + j]))
                  << Name(dt) << " off " << off << " T " << T << " n " << begin + j;
            }
          }
        });
      }
    }
  }
}

// ops::MatMul (pool of 2) and ops::MatMulRows: bit for bit
// ops::ref::MatMulKQuantQ8K, whichever kernel this CPU takes.
TEST(KQuantQ8PortableTest, OpsMatMulMatchesRefMatMul) {
  ASSERT_EQ(ops::GetKQuantActivations(), ops::KQuantActivations::kQ8K);
  ThreadPool pool(2);
  for (DType dt : kTypes) {
    const int64_t N = 301, K = 2 * kQK_K;
    const KWeight w = MakeWeight(dt, N, K, 9);
    for (int64_t T : {1, 4, 11, 40}) {
      SCOPED_TRACE(std::string(Name(dt)) + " T=" + std::to_string(T));
      const std::vector<float> x = Activations(T, K, 10);
      std::vector<float> want(T * N), got(T * N, NAN), rows(T * N, NAN);
      ops::ref::MatMulKQuantQ8K(want.data(), x.data(), w.view(), T);
      ops::MatMul(pool, got.data(), x.data(), w.view(), T);
      ops::MatMulRows(rows.data(), N, x.data(), w.view(), T, 0, N);
      ExpectSameBits(got, want, "MatMul");
      ExpectSameBits(rows, want, "MatMulRows");
    }
  }
}

// The portable activation quantisation against ops::ref::QuantizeRowQ8K byte
// for byte on every target: normal values, exact ties of iscale·x (a block
// whose max is −127, so iscale = 1, holding ±k.5), ties in magnitude (the
// first wins), an all-zero block, one whose iscale overflows, large values.
TEST(KQuantQ8PortableTest, QuantisationMatchesRefOnEveryTarget) {
  const int64_t K = 6 * kQK_K;
  std::vector<float> x = Activations(1, K, 31);
  for (int j = 0; j < kQK_K; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (0.5f + j % 100);
  x[7] = -127.0f;
  x[kQK_K + 9] = 5.0f;  // ties in magnitude: +5 first, then −5
  x[kQK_K + 20] = -5.0f;
  for (int j = 0; j < kQK_K; ++j) {
    if (j != 9 && j != 20) x[kQK_K + j] = std::fmod(x[kQK_K + j], 4.0f);
  }
  std::fill(x.begin() + 2 * kQK_K, x.begin() + 3 * kQK_K, 0.0f);
  for (int j = 3 * kQK_K; j < 4 * kQK_K; ++j) x[j] *= 1e-39f;  // iscale overflows
  for (int j = 4 * kQK_K; j < 5 * kQK_K; ++j) x[j] *= 1e30f;
  std::vector<BlockQ8K> want(K / kQK_K);
  ops::ref::QuantizeRowQ8K(x.data(), K, want.data());
  ASSERT_NE(ops::simd::QuantizeQ8KPortableKernel(), nullptr);
  ForEachTarget([&] {
    std::vector<BlockQ8K> got(K / kQK_K);
    ops::simd::QuantizeQ8KPortableKernel()(x.data(), K, got.data());
    for (int64_t b = 0; b < K / kQK_K; ++b) {
      EXPECT_EQ(0, std::memcmp(&got[b], &want[b], sizeof(BlockQ8K))) << "block " << b;
    }
  });
}

}  // namespace
}  // namespace dsv4
