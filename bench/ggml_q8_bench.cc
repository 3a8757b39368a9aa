// One thread's GGUF quant × q8 activation products (llama.cpp's arithmetic)
// against their ops/ref scalar twins (not a test): an [N, K] weight of each
// format with random codes, T tokens; best of REPEAT runs, in GMAC/s
// (N·K·T multiply-adds per second of the thread's CPU time, activation
// quantisation included); for q4_K, q6_K and q8_0 also the f32-activation
// kernels (--kquant-activations f32).
//   cmake --build build/release --target ggml_q8_bench
//   build/release/tests/ops/ggml_q8_bench [FORMAT] [N] [K] [REPEAT] [T]
// FORMAT one of mxfp4, q4_K, q6_K, q8_0 ("" or "all": every one); T one token
// count (default: 1 and 32).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "ops/matmul.h"
#include "ops/ref/ggml_dot_ref.h"
#include "ops/ref/kquant_ref.h"
#include "ops/simd/simd_kernels.h"
#include "tensor/dtype.h"

namespace {

using dsv4::DType;

std::vector<uint8_t> MakeWeight(DType t, int64_t n, int64_t k) {
  std::vector<uint8_t> w(static_cast<size_t>(dsv4::DTypeBytes(t, n * k)));
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (auto& b : w) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    b = static_cast<uint8_t>(s >> 40);
  }
  const int64_t bb = dsv4::GetDTypeInfo(t).block_bytes;
  const int64_t nblk = static_cast<int64_t>(w.size()) / bb;
  const uint16_t d = dsv4::F32ToF16(0.01f);
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t* blk = w.data() + i * bb;
    if (t == DType::kMXFP4) blk[0] = static_cast<uint8_t>(120 + blk[0] % 8);
    if (t == DType::kQ8_0 || t == DType::kQ4_K) std::memcpy(blk, &d, 2);
    if (t == DType::kQ4_K) std::memcpy(blk + 2, &d, 2);
    if (t == DType::kQ6_K) std::memcpy(blk + bb - 2, &d, 2);
  }
  return w;
}

// This thread's CPU seconds (a shared machine's other work does not count
// while this thread waits for a core).
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Best(int repeat, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const double start = ThreadSeconds();
    f();
    best = std::min(best, ThreadSeconds() - start);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int repeat = argc > 4 ? std::atoi(argv[4]) : 5;
  std::vector<int64_t> token_counts = {1, 32};
  if (argc > 5) token_counts = {std::atoll(argv[5])};
  std::printf("target %s, [N, K] = [%lld, %lld], one thread, best of %d\n",
              (dsv4::ops::simd::ChooseTarget(), dsv4::ops::simd::ActiveTargetName()),
              static_cast<long long>(n), static_cast<long long>(k), repeat);
  for (DType t : {DType::kMXFP4, DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    const std::string name(dsv4::DTypeName(t));
    if (!only.empty() && only != "all" && only != name) continue;
    std::vector<uint8_t> w = MakeWeight(t, n, k);
    const dsv4::TensorView view = dsv4::TensorView::Contiguous(w.data(), t, {n, k});
    for (int64_t tokens : token_counts) {
      std::vector<float> x(static_cast<size_t>(tokens * k));
      uint64_t s = 12345;
      for (auto& v : x) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v = static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) * 1e-3f;
      }
      std::vector<float> out(static_cast<size_t>(tokens * n));
      const double macs = static_cast<double>(n) * k * tokens;
      const double kernel =
          Best(repeat, [&] { dsv4::ops::MatMulRows(out.data(), n, x.data(), view, tokens, 0, n); });
      const double ref = Best(std::min(repeat, 2), [&] {
        if (t == DType::kMXFP4) {
          dsv4::ops::ref::MatMulGgmlQ8(out.data(), x.data(), view, tokens);
        } else if (t == DType::kQ8_0) {
          dsv4::ops::ref::MatMulQ8_0Q8_0(out.data(), x.data(), view, tokens);
        } else {
          dsv4::ops::ref::MatMulKQuantQ8K(out.data(), x.data(), view, tokens);
        }
      });
      std::printf("%-6s T=%-3lld ops::MatMulRows %7.2f GMAC/s   ref %6.2f GMAC/s   (x%.1f)\n",
                  name.c_str(), static_cast<long long>(tokens), macs / kernel * 1e-9,
                  macs / ref * 1e-9, ref / kernel);
      if (t == DType::kQ8_0 || t == DType::kQ4_K || t == DType::kQ6_K) {
        // The f32-activation kernels of the same weights, for comparison.
        dsv4::ops::SetKQuantActivations(dsv4::ops::KQuantActivations::kF32);
        const double f32 = Best(
            repeat, [&] { dsv4::ops::MatMulRows(out.data(), n, x.data(), view, tokens, 0, n); });
        dsv4::ops::SetKQuantActivations(dsv4::ops::KQuantActivations::kQ8K);
        std::printf("%-6s T=%-3lld   f32 activations %7.2f GMAC/s\n", name.c_str(),
                    static_cast<long long>(tokens), macs / f32 * 1e-9);
      }
    }
  }
  return 0;
}
