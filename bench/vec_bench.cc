// A decoded token's small vector steps, SIMD kernel against its scalar twin
// (not a test; docs/benchmarks.md). Each line: microseconds per call (the
// median of 15 rounds of 1000 calls, one thread) of ops:: and of ops::ref::
// at DeepSeek-V4 decode shapes, and their ratio; then the MQA attention
// kernels (DotMany, AxpyMany) at a decode shape in GFLOP/s. Built on demand:
//   cmake --build build/release --target vec_bench
//   build/release/tests/ops/vec_bench [D]      (D: hidden size, default 4096)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace {

template <class F>
double MicrosPerCall(const F& f) {
  std::vector<double> rounds;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) f();
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    rounds.push_back(dt.count() / 1000.0);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

void Report(const char* what, double simd, double ref) {
  std::printf("%-52s %8.3f us  ref %8.3f us  %5.1fx\n", what, simd, ref, ref / simd);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  const int64_t D = argc > 1 ? std::atoll(argv[1]) : 4096;
  if (D <= 0 || D % 32 != 0) {
    std::fprintf(stderr, "vec_bench: D must be a positive multiple of 32, got %lld\n",
                 static_cast<long long>(D));
    return 2;
  }
  // mHC expansion: per stream, the 4 streams and the sublayer output.
  std::vector<float> x(5 * D), out(D);
  for (int64_t i = 0; i < 5 * D; ++i) x[i] = static_cast<float>(i % 97) * 0.01f - 0.5f;
  const float* rows[5] = {&x[0], &x[D], &x[2 * D], &x[3 * D], &x[4 * D]};
  const float c[5] = {0.1f, 0.2f, -0.3f, 0.4f, 1.5f};
  char what[96];
  std::snprintf(what, sizeof(what), "LinearCombine (mHC expansion row), 5 x %lld",
                static_cast<long long>(D));
  Report(what, MicrosPerCall([&] { ops::LinearCombine(out.data(), rows, c, 5, D); }),
         MicrosPerCall([&] { ops::ref::LinearCombine(out.data(), rows, c, 5, D); }));
  // Activation quantise-dequantise, in place: each call first copies the
  // input back (a memcpy of D floats, part of both timings).
  std::vector<float> src(D), q(D);
  for (int64_t i = 0; i < D; ++i) src[i] = static_cast<float>(i % 13) * 0.37f - 2.0f;
  const auto refill = [&] { std::copy(src.begin(), src.end(), q.begin()); };
  std::snprintf(what, sizeof(what), "QuantizeDequantizeFp4 (index_quant), %lld / 32",
                static_cast<long long>(D));
  Report(what, MicrosPerCall([&] { refill(), ops::QuantizeDequantizeFp4(q.data(), D, 32); }),
         MicrosPerCall([&] { refill(), ops::ref::QuantizeDequantizeFp4(q.data(), D, 32); }));
  std::snprintf(what, sizeof(what), "QuantizeDequantizeFp8 (act_quant), %lld / 128",
                static_cast<long long>(D));
  Report(what, MicrosPerCall([&] { refill(), ops::QuantizeDequantizeFp8(q.data(), D, 128); }),
         MicrosPerCall([&] { refill(), ops::ref::QuantizeDequantizeFp8(q.data(), D, 128); }));
  // MQA attention of a decoded token on one thread: 8 heads of 512 dims
  // against 256 keys (a 128-token window and 128 compressed entries), scores
  // then the weighted sum of the values (the keys again).
  const int64_t heads = 8, dim = 512, keys = 256;
  std::vector<float> qs(heads * dim), kv(keys * dim), scores(heads * keys), acc(heads * dim);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i % 31) * 0.01f;
  for (size_t i = 0; i < qs.size(); ++i) qs[i] = static_cast<float>(i % 17) * 0.02f;
  std::vector<const float*> key_rows(keys);
  for (int64_t i = 0; i < keys; ++i) key_rows[i] = kv.data() + i * dim;
  const double macs = static_cast<double>(heads * keys * dim);
  const double dot_us = MicrosPerCall([&] {
    ops::DotMany(qs.data(), heads, dim, key_rows.data(), keys, dim, scores.data());
  });
  const double axpy_us = MicrosPerCall([&] {
    ops::AxpyMany(acc.data(), heads, dim, scores.data(), key_rows.data(), keys, dim);
  });
  std::printf("DotMany 8 heads x 256 keys x 512: %.2f us (%.1f GFLOP/s); AxpyMany: %.2f us (%.1f GFLOP/s)\n",
              dot_us, 2e-3 * macs / dot_us, axpy_us, 2e-3 * macs / axpy_us);
  return 0;
}
