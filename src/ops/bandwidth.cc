// The read-bandwidth probe; see bandwidth.h.
#include "ops/bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "base/timer.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops {
namespace {

// n floats, 2 MiB-aligned, with MADV_HUGEPAGE: the weights are mapped that way
// (base/mapped_file.h), so the probe reads memory as the decode does, without
// a TLB miss per 4 KiB that the weights no longer take.
class HugePageBuffer {
 public:
  explicit HugePageBuffer(int64_t n) : size_(static_cast<size_t>(n) * 4 + kAlign) {
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "bandwidth probe: cannot map %zu bytes", size_);
    base_ = p;
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kAlign - 1) & ~uintptr_t{kAlign - 1};
    data_ = reinterpret_cast<float*>(a);
    ::madvise(data_, static_cast<size_t>(n) * 4, MADV_HUGEPAGE);  // advice: may be ignored
  }
  ~HugePageBuffer() { ::munmap(base_, size_); }
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  float* get() const { return data_; }

 private:
  static constexpr size_t kAlign = size_t{2} << 20;
  size_t size_;
  void* base_;
  float* data_;
};

}  // namespace

BandwidthResult MeasureReadBandwidth(ThreadPool& pool, int64_t bytes, int repeats) {
  CHECK(bytes >= 4 && repeats >= 1, "bandwidth probe: %lld bytes, %d repeats",
        static_cast<long long>(bytes), repeats);
  const int64_t n = bytes / 4;
  constexpr int64_t kGrain = int64_t{1} << 16;  // floats per chunk boundary
  HugePageBuffer buf(n);
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
