// The read-bandwidth probe; see bandwidth.h.
#include "ops/bandwidth.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "base/check.h"
#include "base/timer.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops {

BandwidthResult MeasureReadBandwidth(ThreadPool& pool, int64_t bytes, int repeats) {
  CHECK(bytes >= 4 && repeats >= 1, "bandwidth probe: %lld bytes, %d repeats",
        static_cast<long long>(bytes), repeats);
  const int64_t n = bytes / 4;
  constexpr int64_t kGrain = int64_t{1} << 16;  // floats per chunk boundary
  std::unique_ptr<float[]> buf(new float[static_cast<size_t>(n)]);
  // First touch from the threads that will read it (NUMA placement).
  pool.ParallelFor(
      n, [&](int64_t b, int64_t e, int) { std::fill(buf.get() + b, buf.get() + e, 1.0f); }, kGrain);
  std::vector<float> partial(static_cast<size_t>(pool.size()));
  std::vector<double> seconds;
  volatile float sink = 0.0f;
  for (int r = 0; r <= repeats; ++r) {  // r == 0: warm-up
    Timer t;
    pool.ParallelFor(
        n, [&](int64_t b, int64_t e, int th) { partial[th] = simd::Sum(buf.get() + b, e - b); },
        kGrain);
    const double s = t.Seconds();
    for (float p : partial) sink = sink + p;
    if (r > 0) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  BandwidthResult result;
  result.bytes = n * 4;
  result.repeats = repeats;
  result.gb_per_s = static_cast<double>(result.bytes) / seconds[seconds.size() / 2] / 1e9;
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

}  // namespace dsv4::ops
