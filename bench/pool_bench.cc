// The thread pool's fork-join cost (not a test; docs/benchmarks.md): an empty
// ParallelFor over the pool's threads, 100000 calls per round, median of 7
// rounds. A decoded token of DeepSeek-V4 makes about 115 of them. Built on
// demand:
//   cmake --build build/release --target pool_bench
//   build/release/tests/base/pool_bench [THREADS]   (default 2)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/thread_pool.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  if (threads < 1) {
    std::fprintf(stderr, "pool_bench: THREADS must be at least 1\n");
    return 2;
  }
  dsv4::ThreadPool pool(threads);
  std::atomic<int64_t> items{0};
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
