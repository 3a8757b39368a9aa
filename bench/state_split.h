// For benchmarks on a host with two memory states (its read bandwidth
// switches between two levels every few seconds): where to split a series of
// measurements (times or bandwidths) between them.
#ifndef DSV4_BENCH_STATE_SPLIT_H_
#define DSV4_BENCH_STATE_SPLIT_H_

#include <algorithm>
#include <vector>

namespace dsv4::bench {

// The middle of the 10th and 90th percentiles of `values` when those lie over
// 25% apart, the line between the states; else 0 (one state).
inline double StateSplit(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double lo = values[values.size() / 10], hi = values[values.size() * 9 / 10];
  return hi > 1.25 * lo ? (lo + hi) / 2 : 0.0;
}

}  // namespace dsv4::bench

#endif  // DSV4_BENCH_STATE_SPLIT_H_
