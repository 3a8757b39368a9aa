// ops/topk.h against its scalar twin ops::ref::TopK: the same ids in the same
// order, for values with many ties (a few levels, so the lower-id rule
// decides), n below and far above the pool's split grain, k from 1 to more
// than n, and pools of 1 to 4 threads; and TopKRange over a sub-range.
#include "ops/topk.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "ops/ref/ops_ref.h"

namespace dsv4 {
namespace {

std::vector<float> Levels(int64_t n, int levels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, levels - 1);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = 0.25f * static_cast<float>(pick(rng)) - 1.0f;
  return x;
}

TEST(TopK, PooledEqualsRefWithTies) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<int32_t> scratch;
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{600}, ops::kTopKGrain + 1, int64_t{20000}}) {
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{512}, n + 3}) {
        for (int levels : {3, 1000}) {
          const std::vector<float> x =
              Levels(n, levels, static_cast<uint32_t>(n * 31 + k * 7 + levels));
          const int64_t m = std::min(k, n);
          std::vector<int32_t> want(static_cast<size_t>(m) + 1, -5),
              got(static_cast<size_t>(m) + 1, -5);
          ops::ref::TopK(x.data(), n, k, want.data());
          ops::TopK(pool, x.data(), n, k, got.data(), scratch);
          EXPECT_EQ(got, want) << threads << " threads, n=" << n << " k=" << k << " levels "
                               << levels;
        }
      }
    }
  }
}

TEST(TopK, RangeGivesGlobalIdsOfItsRangeOnly) {
  const std::vector<float> x = Levels(100, 4, 9);
  std::vector<int32_t> heap(10), got(10, -5), want(10, -5);
  const int64_t count = ops::TopKRange(x.data(), 30, 70, 10, heap.data(), got.data());
  ASSERT_EQ(count, 10);
  ops::ref::TopK(x.data() + 30, 40, 10, want.data());
  for (int32_t& id : want) id += 30;
  EXPECT_EQ(got, want);
  EXPECT_EQ(ops::TopKRange(x.data(), 5, 5, 3, heap.data(), got.data()), 0);
  EXPECT_EQ(ops::TopKRange(x.data(), 0, 2, 3, heap.data(), got.data()), 2);
}

}  // namespace
}  // namespace dsv4
