// Roofline probes. MeasureReadBandwidth: a STREAM-style probe of the machine's memory read
// bandwidth — the roofline decode speed is measured against. Sums a buffer much
// larger than the last-level cache with the SIMD kernel (ops::Sum), split over
// the pool the way matmuls split weight rows; and again with a software
// prefetch running ahead (simd::SumAhead), as the matvecs read their weights.
// The faster of the two is the machine's bandwidth.
#ifndef DSV4_OPS_BANDWIDTH_H_
#define DSV4_OPS_BANDWIDTH_H_

#include <cstdint>

#include "base/thread_pool.h"

namespace dsv4::ops {

struct BandwidthResult {
  double gb_per_s = 0.0;        // the larger of the two below; 1 GB = 1e9 bytes
  double plain_gb_per_s = 0.0;  // median over the repeats: plain loads
  double ahead_gb_per_s = 0.0;  // median over the repeats: loads behind a prefetch
  int64_t bytes = 0;            // bytes read per repeat
  int repeats = 0;
};

// Reads `bytes` (rounded down to whole floats, at least 64 MiB recommended:
// several times the last-level cache) `repeats` times in each pattern after
// one warm-up pass of each.
BandwidthResult MeasureReadBandwidth(ThreadPool& pool, int64_t bytes = int64_t{1} << 30,
                                     int repeats = 5);

// MeasurePeakFlops: the fp32 compute roof — fused multiply-adds of the widest
// SIMD target, 16 independent accumulator chains in registers per thread (no
// memory traffic), on every thread of the pool at once: the peak of the fp32
// matmul kernels (weights decoded to fp32 in registers).
// MeasurePeakBf16DotFlops: the same for the bf16 dot-product kernels of FP8/FP4
// weights (ops/simd/bf16dot_x86.cc; vdpbf16ps, 32 multiply-adds each); zero
// FLOPs and gflops where those kernels are not available.
struct FlopsResult {
  double gflops = 0.0;  // median over the repeats, 1 GFLOP = 1e9 (an FMA is 2)
  int64_t flops = 0;    // per repeat, all threads
  int repeats = 0;
};
FlopsResult MeasurePeakFlops(ThreadPool& pool, int64_t fmas_per_thread = int64_t{1} << 27,
                             int repeats = 5);
FlopsResult MeasurePeakBf16DotFlops(ThreadPool& pool, int64_t macs_per_thread = int64_t{1} << 28,
                                    int repeats = 5);
// MeasurePeakInt8DotFlops: the same for the int8 dot products of the k-quant ×
// q8_K kernels (vpdpbusd, 64 multiply-adds each; simd::Int8DotLoop); zero
// where those kernels are not available.
FlopsResult MeasurePeakInt8DotFlops(ThreadPool& pool, int64_t macs_per_thread = int64_t{1} << 29,
                                    int repeats = 5);

}  // namespace dsv4::ops

#endif  // DSV4_OPS_BANDWIDTH_H_
