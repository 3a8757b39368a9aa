// Tests of base/thread_pool.h: ParallelFor covers [0, n) exactly once for many
// (threads, n, grain), including n = 0 and n < threads; chunks respect the
// grain and the thread count; chunk 0 runs on the caller; the pool is reusable.
#include "base/thread_pool.h"

#include <chrono>

#if defined(__linux__)
#include <sched.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

namespace dsv4 {
namespace {

struct Chunk {
  int64_t begin, end;
  int thread;
};

// Runs one ParallelFor and checks every property the header promises.
void CheckCoverage(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE(::testing::Message()
               << "threads=" << pool.size() << " n=" << n << " grain=" << grain);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h.store(0);
  std::mutex mu;
  std::vector<Chunk> chunks;
  pool.ParallelFor(
      n,
      [&](int64_t begin, int64_t end, int thread) {
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        chunks.push_back({begin, end, thread});
      },
      grain);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
  EXPECT_LE(static_cast<int>(chunks.size()), pool.size());
  std::set<int> threads;
  for (const Chunk& c : chunks) {
    EXPECT_GE(c.begin, 0);
    EXPECT_LE(c.begin, c.end);
    EXPECT_LE(c.end, n);
    EXPECT_EQ(c.begin % grain, 0) << "chunk [" << c.begin << ", " << c.end << ")";
    if (c.end != n) {
      EXPECT_EQ(c.end % grain, 0) << "chunk [" << c.begin << ", " << c.end << ")";
    }
    EXPECT_GE(c.thread, 0);
    EXPECT_LT(c.thread, pool.size());
    EXPECT_TRUE(threads.insert(c.thread).second) << "thread " << c.thread << " got two chunks";
  }
  if (n == 0) {
    EXPECT_TRUE(chunks.empty());
  }
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int n_threads : {1, 2, 3, 4, 7, 8}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.size(), n_threads);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 9, 16, 31, 100, 1000, 1023, 4097}) {
      for (int64_t grain : {1, 2, 3, 4, 7, 16, 64, 5000}) CheckCoverage(pool, n, grain);
    }
  }
}

// Balancing arithmetic (SpeedSplit, no clocks): a thread 1.6× slower per item
// ends up with about 1 / 1.6 of the other's items; times a descheduled thread
// would give are ignored; speeds stay within [0.5, 2]; three threads too.
TEST(SpeedSplitTest, LearnsTheRatioOfSpeeds) {
  SpeedSplit s;
  s.Reset(2);
  int64_t bounds[3];
  s.Plan(2, 128, bounds);
  EXPECT_EQ(bounds[0], 0);
  EXPECT_EQ(bounds[1], 64);
  EXPECT_EQ(bounds[2], 128);
  for (int call = 0; call < 40; ++call) {
    s.Plan(2, 1000, bounds);
    const int64_t items[2] = {bounds[1] - bounds[0], bounds[2] - bounds[1]};
    const int64_t t_ns[2] = {items[0] * 1000, items[1] * 1600};
    ASSERT_TRUE(s.Learn(2, items, t_ns));
  }
  s.Plan(2, 1000, bounds);
  EXPECT_NEAR(static_cast<double>(bounds[1]) / static_cast<double>(bounds[2] - bounds[1]), 1.6,
              0.05);
  EXPECT_EQ(bounds[2], 1000);
}

TEST(SpeedSplitTest, BoundsOutliersAndRejectsBadInput) {
  SpeedSplit s;
  s.Reset(2);
  const int64_t items[2] = {50, 50};
  const int64_t zero_time[2] = {1000, 0};
  EXPECT_FALSE(s.Learn(2, items, zero_time));
  const int64_t no_items[2] = {0, 100};
  const int64_t t_ns[2] = {1000, 1000};
  EXPECT_FALSE(s.Learn(2, no_items, t_ns));
  EXPECT_EQ(s.speed[0], 1.0f);
  EXPECT_EQ(s.speed[1], 1.0f);
  // Thread 1 descheduled: 20× its time. One bounded step, not 20×.
  const int64_t outlier[2] = {1000, 20000};
  EXPECT_TRUE(s.Learn(2, items, outlier));
  EXPECT_GT(s.speed[1], 0.8f);
  EXPECT_LT(s.speed[1], 1.0f);
}

// A split far from the truth (as a run of disturbances leaves it) comes back:
// equal real speeds after a learnt 4 : 1 bring the split back near 1 : 1.
TEST(SpeedSplitTest, RecoversFromASkewedSplit) {
  SpeedSplit s;
  s.Reset(2);
  int64_t bounds[3];
  for (int call = 0; call < 60; ++call) {  // thread 1 four times slower per item
    s.Plan(2, 1000, bounds);
    const int64_t items[2] = {bounds[1], bounds[2] - bounds[1]};
    const int64_t t_ns[2] = {items[0] * 100, items[1] * 400};
    ASSERT_TRUE(s.Learn(2, items, t_ns));
  }
  s.Plan(2, 1000, bounds);
  EXPECT_GT(bounds[1], 700);
  for (int call = 0; call < 60; ++call) {  // now equally fast
    s.Plan(2, 1000, bounds);
    const int64_t items[2] = {bounds[1], bounds[2] - bounds[1]};
    const int64_t t_ns[2] = {items[0] * 100, items[1] * 100};
    ASSERT_TRUE(s.Learn(2, items, t_ns));
  }
  s.Plan(2, 1000, bounds);
  EXPECT_NEAR(bounds[1], 500, 25);
}

TEST(SpeedSplitTest, SpeedsStayClampedAndEveryThreadKeepsWork) {
  SpeedSplit s;
  s.Reset(3);
  int64_t bounds[4];
  for (int call = 0; call < 200; ++call) {
    s.Plan(3, 96, bounds);
    const int64_t items[3] = {bounds[1] - bounds[0], bounds[2] - bounds[1], bounds[3] - bounds[2]};
    // Thread 2 is 1.9× slower per item than thread 0, thread 1 1.3×.
    const int64_t t_ns[3] = {items[0] * 100, items[1] * 130, items[2] * 190};
    if (!s.Learn(3, items, t_ns)) break;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(s.speed[i], 0.5f);
    EXPECT_LE(s.speed[i], 2.0f);
    EXPECT_GT(bounds[i + 1], bounds[i]) << "thread " << i << " got no grains";
  }
  EXPECT_GT(bounds[1] - bounds[0], bounds[3] - bounds[2]);
  EXPECT_EQ(bounds[3], 96);
}

// The pool with balancing at work (a call shape run again and again, thread
// 1 slower per item): every call still covers [0, n) exactly once in
// grain-aligned chunks. A shape too small to balance keeps equal chunks.
void BusyMicros(double us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(ThreadPoolTest, BalancedCallsCoverEveryIndexOnce) {
  ThreadPool pool(2);
  constexpr int64_t kN = 640, kGrain = 5;  // 128 grains: balanced
  int64_t items[2] = {0, 0};
  for (int call = 0; call < 100; ++call) {
    std::vector<std::atomic<int>> hits(kN);
    for (auto& h : hits) h.store(0);
    pool.ParallelFor(
        kN,
        [&](int64_t begin, int64_t end, int thread) {
          EXPECT_EQ(begin % kGrain, 0);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
          items[thread] = end - begin;
          BusyMicros(static_cast<double>(end - begin) * (thread == 0 ? 1.0 : 1.6));
        },
        kGrain);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[i].load(), 1) << "call " << call;
    ASSERT_EQ(items[0] + items[1], kN);
  }
  // 30 grains: below the balancing threshold, equal halves however slow.
  for (int call = 0; call < 50; ++call) {
    pool.ParallelFor(
        30,
        [&](int64_t begin, int64_t end, int thread) {
          items[thread] = end - begin;
          BusyMicros(static_cast<double>(end - begin) * (thread == 0 ? 5.0 : 10.0));
        },
        1);
    ASSERT_EQ(items[0], 15);
    ASSERT_EQ(items[1], 15);
  }
}

// ParallelForStrided: every item once, each chunk's items j, j + m, … in
// order on one thread (m = min(n, threads)).
TEST(ThreadPoolTest, StridedCoversEveryItemRoundRobin) {
  for (int n_threads : {1, 2, 3, 8}) {
    ThreadPool pool(n_threads);
    for (int64_t n : {0, 1, 2, 5, 8, 9, 100}) {
      const int64_t m = std::min<int64_t>(n, n_threads);
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::vector<std::vector<int64_t>> order(static_cast<size_t>(n_threads));
      pool.ParallelForStrided(n, [&](int64_t item, int thread) {
        ++hits[static_cast<size_t>(item)];
        order[static_cast<size_t>(thread)].push_back(item);
      });
      for (int h : hits) EXPECT_EQ(h, 1) << n_threads << " threads, n = " << n;
      for (const auto& items : order) {
        for (size_t i = 1; i < items.size(); ++i) {
          EXPECT_EQ(items[i] - items[i - 1], m) << n_threads << " threads, n = " << n;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, FewerItemsThanThreads) {
  ThreadPool pool(8);
  for (int64_t n = 0; n < 8; ++n) CheckCoverage(pool, n, 1);
}

TEST(ThreadPoolTest, UsesSeveralThreadsWhenThereIsWork) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<int> threads;
  pool.ParallelFor(400, [&](int64_t, int64_t, int thread) {
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(thread);
  });
  EXPECT_EQ(threads.size(), 4u);
}

TEST(ThreadPoolTest, ChunkZeroRunsOnTheCaller) {
  for (int n_threads : {1, 3}) {
    ThreadPool pool(n_threads);
    std::mutex mu;
    std::vector<std::pair<int, std::thread::id>> seen;
    pool.ParallelFor(30, [&](int64_t, int64_t, int thread) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(thread, std::this_thread::get_id());
    });
    ASSERT_FALSE(seen.empty());
    for (const auto& [thread, id] : seen) {
      if (thread == 0) {
        EXPECT_EQ(id, std::this_thread::get_id());
      } else {
        EXPECT_NE(id, std::this_thread::get_id());
      }
    }
  }
}

TEST(ThreadPoolTest, RepeatedCallsOnOnePool) {
  ThreadPool pool(3);
  std::vector<int64_t> data(777);
  for (int round = 0; round < 500; ++round) {
    const int64_t n = 1 + (round * 37) % 777;
    pool.ParallelFor(
        n,
        [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) data[i] += i;
        },
        1 + round % 5);
  }
  // Index i was touched by every round whose n exceeded i.
  for (int64_t i = 0; i < 777; ++i) {
    int64_t rounds = 0;
    for (int round = 0; round < 500; ++round) rounds += (1 + (round * 37) % 777) > i;
    ASSERT_EQ(data[i], rounds * i) << "index " << i;
  }
}

// Calls spaced wider than the spin time: every hand-off goes through the
// workers' blocking wait and wake-up (the idle-pool path).
TEST(ThreadPoolTest, CallsAfterTheWorkersFellAsleep) {
  ThreadPool pool(3);
  for (int round = 0; round < 6; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CheckCoverage(pool, 100 + round, 1);
  }
}

// `rounds` short calls back to back over n items, each writing round + i to
// item i; the caller reads a few right after each call returns.
void CheckShortCalls(ThreadPool& pool, int rounds, int64_t n) {
  std::vector<int64_t> out(n);
  for (int round = 0; round < rounds; ++round) {
    pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) out[i] = round + i;
    });
    for (int64_t i = 0; i < n; i += 7) ASSERT_EQ(out[i], round + i) << "round " << round;
  }
}

// Many short calls back to back (the spinning path): checks the hand-off
// orders the workers' writes before ParallelFor returns.
TEST(ThreadPoolTest, ManyShortCallsSeeEveryWrite) {
  ThreadPool pool(4);
  CheckShortCalls(pool, 20000, 64);
}

#if defined(__linux__)
// Every thread of the pool on one CPU (as when the other CPUs are busy): the
// threads see that they share it and yield instead of spinning; the calls
// still cover every item and order every write.
TEST(ThreadPoolTest, ThreadsSharingOneCpu) {
  cpu_set_t old_mask, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old_mask), &old_mask), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &old_mask)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // workers inherit it
  {
    ThreadPool pool(3);
    CheckShortCalls(pool, 2000, 48);
    CheckCoverage(pool, 1000, 3);
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(old_mask), &old_mask), 0);
}
#endif

TEST(ThreadPoolTest, NonPositiveThreadCountMeansOne) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
  CheckCoverage(pool, 10, 3);
}

TEST(ThreadPoolTest, DefaultThreadsIsPositive) { EXPECT_GE(ThreadPool::DefaultThreads(), 1); }

TEST(ThreadPoolTest, ManyPoolsCreatedAndDestroyed) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    if (i % 2) CheckCoverage(pool, 50, 1);  // half never run a job before shutdown
  }
}

}  // namespace
}  // namespace dsv4
