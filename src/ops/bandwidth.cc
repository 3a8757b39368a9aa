// The read-bandwidth probe; see bandwidth.h.
#include "ops/bandwidth.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "base/huge_page_buffer.h"
#include "base/timer.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops {

BandwidthResult MeasureReadBandwidth(ThreadPool& pool, int64_t bytes, int repeats) {
  CHECK(bytes >= 4 && repeats >= 1, "bandwidth probe: %lld bytes, %d repeats",
        static_cast<long long>(bytes), repeats);
  const int64_t n = bytes / 4;
  constexpr int64_t kGrain = int64_t{1} << 16;  // floats per chunk boundary
  // 2 MiB pages, as the weights are mapped (base/mapped_file.h).
  HugePageBuffer mem(static_cast<size_t>(n) * 4);
  float* const data = reinterpret_cast<float*>(mem.data());
  // First touch from the threads that will read it (NUMA placement).
  pool.ParallelFor(
      n, [&](int64_t b, int64_t e, int) { std::fill(data + b, data + e, 1.0f); }, kGrain);
  std::vector<float> partial(static_cast<size_t>(pool.size()));
  // Two read patterns, alternating: plain loads (STREAM's), and loads behind
  // a software prefetch (the matvecs' pattern, which on some machines reads
  // more). The machine's bandwidth is the faster pattern's median.
  std::vector<double> seconds[2];
  volatile float sink = 0.0f;
  for (int r = 0; r <= repeats; ++r) {  // r == 0: warm-up
    for (int ahead = 0; ahead < 2; ++ahead) {
      Timer t;
      pool.ParallelFor(
          n,
          [&](int64_t b, int64_t e, int th) {
            const float* p = data + b;
            partial[th] = ahead != 0 ? simd::SumAhead(p, e - b) : simd::Sum(p, e - b);
          },
          kGrain);
      const double s = t.Seconds();
      for (float p : partial) sink = sink + p;
      if (r > 0) seconds[ahead].push_back(s);
    }
  }
  BandwidthResult result;
  result.bytes = n * 4;
  result.repeats = repeats;
  for (int ahead = 0; ahead < 2; ++ahead) {
    std::vector<double>& s = seconds[ahead];
    std::sort(s.begin(), s.end());
    const double gbs = static_cast<double>(result.bytes) / s[s.size() / 2] / 1e9;
    (ahead != 0 ? result.ahead_gb_per_s : result.plain_gb_per_s) = gbs;
  }
  result.gb_per_s = std::max(result.plain_gb_per_s, result.ahead_gb_per_s);
  return result;
}

namespace {

// Runs loop(per_thread, &done) on every thread at once, repeats + 1 times
// (the first warms up and clocks up); the median rate, 2 FLOPs per lane-MAC.
template <typename Loop>
FlopsResult MeasureLoop(ThreadPool& pool, int64_t per_thread, int repeats, Loop loop) {
  CHECK(per_thread > 0 && repeats >= 1, "FLOP/s probe: %lld multiply-adds, %d repeats",
        static_cast<long long>(per_thread), repeats);
  std::vector<double> seconds;
  std::vector<int64_t> done(static_cast<size_t>(pool.size()));
  volatile float sink = 0.0f;
  for (int r = 0; r <= repeats; ++r) {
    Timer t;
    pool.ParallelFor(pool.size(), [&](int64_t b, int64_t e, int th) {
      for (int64_t i = b; i < e; ++i) {
        int64_t macs = 0;
        sink = sink + loop(per_thread, &macs);
        done[static_cast<size_t>(th)] = macs;
      }
    });
    const double s = t.Seconds();
    if (r > 0) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  FlopsResult result;
  for (int64_t f : done) result.flops += 2 * f;
  result.repeats = repeats;
  result.gflops = static_cast<double>(result.flops) / seconds[seconds.size() / 2] / 1e9;
  return result;
}

}  // namespace

FlopsResult MeasurePeakFlops(ThreadPool& pool, int64_t fmas_per_thread, int repeats) {
  return MeasureLoop(pool, fmas_per_thread, repeats, simd::FmaLoop);
}

FlopsResult MeasurePeakBf16DotFlops(ThreadPool& pool, int64_t macs_per_thread, int repeats) {
  return MeasureLoop(pool, macs_per_thread, repeats, simd::Bf16DotLoop);
}

FlopsResult MeasurePeakInt8DotFlops(ThreadPool& pool, int64_t macs_per_thread, int repeats) {
  return MeasureLoop(pool, macs_per_thread, repeats, simd::Int8DotLoop);
}

}  // namespace dsv4::ops
