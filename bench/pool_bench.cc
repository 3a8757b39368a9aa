// The thread pool's fork-join cost (not a test; docs/benchmarks.md): an empty
// ParallelFor over the pool's threads, 100000 calls per round, median of 7
// rounds. A decoded token of DeepSeek-V4 makes about 115 of them. Built on
// demand:
//   cmake --build build/release --target pool_bench
//   build/release/tests/base/pool_bench [THREADS]   (default 2)
// `pool_bench THREADS probe:N` instead runs N rounds of a 128 MiB read
// bandwidth probe (ops::MeasureReadBandwidth) then 20000 fork-joins, a line
// each, and the median fork-join cost apart for rounds of high and of low
// bandwidth (split at the middle of the probes' 10th and 90th percentiles
// when those lie over 25% apart). A fork-join is one round trip of a cache
// line between the threads: on a host whose memory bandwidth changes from
// one second to the next, it shows whether the threads' cores changed too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <string>

#include "base/thread_pool.h"
#include "bench/state_split.h"
#include "ops/bandwidth.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  if (threads < 1) {
    std::fprintf(stderr, "pool_bench: THREADS must be at least 1\n");
    return 2;
  }
  dsv4::ThreadPool pool(threads);
  std::atomic<int64_t> items{0};
  int probe_rounds = 0;
  if (argc > 2 && std::sscanf(argv[2], "probe:%d", &probe_rounds) != 1) {
    std::fprintf(stderr, "pool_bench: the second argument is probe:N (N rounds)\n");
    return 2;
  }
  if (probe_rounds > 0) {
    std::vector<std::pair<double, double>> rounds;  // (GB/s, us per fork-join)
    for (int r = 0; r < probe_rounds; ++r) {
      const double gbs = dsv4::ops::MeasureReadBandwidth(pool, int64_t{128} << 20, 1).gb_per_s;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20000; ++i) {
        pool.ParallelFor(threads, [&](int64_t b, int64_t e, int) { items += e - b; });
      }
      const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
      rounds.emplace_back(gbs, dt.count() / 20000);
      std::printf("round %d: probe %.1f GB/s, fork-join %.3f us\n", r, gbs, dt.count() / 20000);
    }
    std::vector<double> probes;
    for (const auto& r : rounds) probes.push_back(r.first);
    const double mid = dsv4::bench::StateSplit(probes);
    for (const bool high : {true, false}) {
      std::vector<double> us;
      for (const auto& r : rounds) {
        if ((r.first > mid) == high) us.push_back(r.second);
      }
      if (us.empty()) continue;
      std::sort(us.begin(), us.end());
      std::printf("probe %s %.1f GB/s: %zu rounds, fork-join %.3f us (median)\n",
                  high ? "above" : "at or below", mid, us.size(), us[us.size() / 2]);
    }
    return 0;
  }
  std::vector<double> micros;
  for (int round = 0; round < 7; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100000; ++i) {
      pool.ParallelFor(threads, [&](int64_t b, int64_t e, int) { items += e - b; });
    }
    const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
    micros.push_back(dt.count() / 100000);
  }
  std::sort(micros.begin(), micros.end());
  std::printf("fork-join over %d threads: %.3f us per call (median of 7 x 100000; %lld items)\n",
              threads, micros[3], static_cast<long long>(items.load()));
  return 0;
}
