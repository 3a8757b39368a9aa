#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sched.h>
#endif

#include "base/check.h"
#include "base/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSV4_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define DSV4_CPU_RELAX() asm volatile("yield")
#else
#define DSV4_CPU_RELAX() ((void)0)
#endif

namespace dsv4 {

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      cpu_(new std::atomic<int>[n_threads_]),
      done_ns_(new std::atomic<int64_t>[n_threads_]),
      start_ns_(new std::atomic<int64_t>[n_threads_]) {
  for (int i = 0; i < n_threads_; ++i) {
    cpu_[i].store(-1, std::memory_order_relaxed);
    done_ns_[i].store(0, std::memory_order_relaxed);
    start_ns_[i].store(0, std::memory_order_relaxed);
  }
  chunks_.resize(n_threads_);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker between its check and its wait
    work_cv_.notify_all();
  }
  for (auto& t : workers_) t.join();
#if DSV4_POOL_TRACE
  // One line per ParallelFor that used more than one thread, in call order;
  // times in ns of the steady clock. tools/bench/pool_regions.py reads it.
  const char* path = env::PoolTraceFile();
  if (path == nullptr || trace_.empty()) return;
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return;
  std::fprintf(f, "n,start_ns,caller_end_ns,end_ns,workers_start_ns,workers_end_ns\n");
  for (const TraceRecord& r : trace_) {
    std::fprintf(f, "%lld,%lld,%lld,%lld,%lld,%lld\n", static_cast<long long>(r.n),
                 static_cast<long long>(r.start_ns), static_cast<long long>(r.caller_end_ns),
                 static_cast<long long>(r.end_ns), static_cast<long long>(r.workers_start_ns),
                 static_cast<long long>(r.workers_end_ns));
  }
  std::fclose(f);
#endif
}

int ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int64_t ThreadPool::SpinMicros() { return env::SpinMicros(kDefaultSpinMicros); }

bool ThreadPool::SharesCpu(int self) {
#if defined(__linux__)
  const int mine = sched_getcpu();
#else
  const int mine = -1;
#endif
  cpu_[self].store(mine, std::memory_order_relaxed);
  if (mine < 0) return false;
  for (int i = 0; i < n_threads_; ++i) {
    if (i != self && cpu_[i].load(std::memory_order_relaxed) == mine) return true;
  }
  return false;
}

template <typename Pred>
bool ThreadPool::SpinFor(int self, const Pred& pred) {
  using Clock = std::chrono::steady_clock;
  const int64_t spin_micros = SpinMicros();
  if (spin_micros == 0) return pred();
  const auto deadline = Clock::now() + std::chrono::microseconds(spin_micros);
  // Pure spinning for the first kPureSpinMicros (the gaps between a decoded
  // token's fork-joins are mostly shorter) while this CPU is ours alone, ...
  const auto pure_deadline =
      Clock::now() + std::chrono::microseconds(std::min(spin_micros, kPureSpinMicros));
  while (!SharesCpu(self)) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      DSV4_CPU_RELAX();
    }
    if (Clock::now() >= pure_deadline) break;
  }
  // ... then yield between checks, so that on a loaded machine the spinning
  // thread hands its core to whoever has work (our other threads included).
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return pred();
    std::this_thread::yield();
  }
}

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t ThreadPool::PlanChunks(int64_t n, const RangeFn& fn, int64_t grain, int used,
                               const void* site) {
  const int64_t n_grains = (n + grain - 1) / grain;
  if (used != n_threads_ || n_threads_ > kMaxBalancedThreads ||
      n_grains < kMinBalancedGrains * used) {
    for (int i = 0; i < n_threads_; ++i) {
      const int64_t b = std::min(n, (n_grains * i / used) * grain);
      const int64_t e = std::min(n, (n_grains * (i + 1) / used) * grain);
      chunks_[i] = i < used ? std::make_pair(b, e) : std::make_pair(n, n);
    }
    return -1;
  }
  if (shapes_.empty()) shapes_.resize(kShapeSlots);
  uint64_t h = static_cast<uint64_t>(fn.type_id()) * 0x9E3779B97F4A7C15ull;
  h ^= static_cast<uint64_t>(n) * 0xC2B2AE3D27D4EB4Full + static_cast<uint64_t>(grain);
  h ^= static_cast<uint64_t>(reinterpret_cast<uintptr_t>(site)) * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  // The shape's slot among kShapeWays from its hash; a new shape takes the
  // least recently used of them, with equal speeds.
  const int64_t first = static_cast<int64_t>(h % (kShapeSlots / kShapeWays)) * kShapeWays;
  int64_t slot = first;
  for (int64_t j = first; j < first + kShapeWays; ++j) {
    const Shape& c = shapes_[static_cast<size_t>(j)];
    if (c.type == fn.type_id() && c.site == site && c.n == n && c.grain == grain) {
      slot = j;
      break;
    }
    if (c.last_use < shapes_[static_cast<size_t>(slot)].last_use) slot = j;
  }
  Shape& s = shapes_[static_cast<size_t>(slot)];
  if (s.type != fn.type_id() || s.site != site || s.n != n || s.grain != grain) {
    s.type = fn.type_id();
    s.site = site;
    s.n = n;
    s.grain = grain;
    s.split.Reset(n_threads_);
  }
  s.last_use = ++shape_clock_;
  int64_t bounds[kMaxBalancedThreads + 1];
  s.split.Plan(n_threads_, n_grains, bounds);
  for (int i = 0; i < n_threads_; ++i) {
    chunks_[i] = std::make_pair(std::min(n, bounds[i] * grain), std::min(n, bounds[i + 1] * grain));
  }
  return slot;
}

void ThreadPool::LearnSpeeds(int64_t slot, int64_t start_ns) {
  int64_t items[kMaxBalancedThreads], t_ns[kMaxBalancedThreads];
  for (int i = 0; i < n_threads_; ++i) {
    items[i] = chunks_[i].second - chunks_[i].first;
    t_ns[i] = done_ns_[i].load(std::memory_order_relaxed) - start_ns;
  }
  shapes_[static_cast<size_t>(slot)].split.Learn(n_threads_, items, t_ns);
}

void SpeedSplit::Reset(int threads) {
  CHECK(threads >= 1 && threads <= kMaxThreads);
  std::fill(speed, speed + threads, 1.0f);
}

void SpeedSplit::Plan(int threads, int64_t n_grains, int64_t* bounds) const {
  float total = 0.0f;
  for (int i = 0; i < threads; ++i) total += speed[i];
  float before = 0.0f;
  bounds[0] = 0;
  for (int i = 0; i < threads; ++i) {
    before += speed[i];
    bounds[i + 1] =
        i == threads - 1
            ? n_grains
            : std::clamp<int64_t>(std::llround(static_cast<double>(n_grains) * before / total),
                                  bounds[i], n_grains);
  }
}

bool SpeedSplit::Learn(int threads, const int64_t* items, const int64_t* t_ns) {
  float rate[kMaxThreads];
  float mean = 0.0f;
  for (int i = 0; i < threads; ++i) {
    if (t_ns[i] <= 0 || items[i] <= 0) return false;
    rate[i] = static_cast<float>(items[i]) / static_cast<float>(t_ns[i]);
    mean += rate[i] / static_cast<float>(threads);
  }
  float sum = 0.0f;
  for (int i = 0; i < threads; ++i) {
    // A measured speed beyond half or twice the current one counts as that
    // bound: a descheduled thread moves its speed one bounded step, while a
    // split that has drifted far from the truth still moves back (rejecting
    // such measurements instead once left a split stuck at 3 : 1).
    const float measured = std::clamp(rate[i] / mean, 0.5f * speed[i], 2.0f * speed[i]);
    speed[i] = (1.0f - kLearnRate) * speed[i] + kLearnRate * measured;
    sum += speed[i];
  }
  for (int i = 0; i < threads; ++i) {
    speed[i] = std::clamp(speed[i] * static_cast<float>(threads) / sum, 0.5f, 2.0f);
  }
  return true;
}

void ThreadPool::ParallelFor(int64_t n, const RangeFn& fn, int64_t grain, const void* site) {
  if (n <= 0) return;
  CHECK(grain > 0);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int used = static_cast<int>(std::min<int64_t>(n_threads_, n_grains));
  if (used == 1) {
    fn(0, n, 0);
    return;
  }
  const int64_t shape = PlanChunks(n, fn, grain, used, site);
#if DSV4_POOL_TRACE
  const int64_t trace_start_ns = NowNs();
#endif
  fn_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  const int64_t start_ns = shape >= 0 ? NowNs() : 0;
  // Hand-off without the mutex while every worker spins. A worker about to
  // block counts itself in sleepers_ and then re-checks the generation; the
  // caller bumps the generation and then reads sleepers_ (all sequentially
  // consistent): either the worker sees the new generation, or the caller
  // sees the sleeper and notifies under mu_, which the worker holds from its
  // count until its wait.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
  }
  fn(chunks_[0].first, chunks_[0].second, 0);
  if (shape >= 0) done_ns_[0].store(NowNs(), std::memory_order_relaxed);
#if DSV4_POOL_TRACE
  const int64_t trace_caller_end_ns = NowNs();
#endif
  const auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinFor(0, all_done)) {
    // The same handshake the other way: the caller counts itself in
    // done_waiters_ before its last check; the last worker decrements
    // pending_ before it reads done_waiters_.
    std::unique_lock<std::mutex> lock(mu_);
    done_waiters_.fetch_add(1, std::memory_order_seq_cst);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_seq_cst) == 0; });
    done_waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (shape >= 0) LearnSpeeds(shape, start_ns);
  fn_ = nullptr;
#if DSV4_POOL_TRACE
  TraceRecord r{n, trace_start_ns, trace_caller_end_ns, NowNs(), INT64_MAX, 0};
  for (int i = 1; i < n_threads_; ++i) {
    r.workers_start_ns = std::min(r.workers_start_ns, start_ns_[i].load(std::memory_order_relaxed));
    r.workers_end_ns = std::max(r.workers_end_ns, done_ns_[i].load(std::memory_order_relaxed));
  }
  if (trace_.capacity() == 0) trace_.reserve(size_t{1} << 20);
  trace_.push_back(r);
#endif
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto has_work = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinFor(index, has_work)) {
      cpu_[index].store(-1, std::memory_order_relaxed);  // asleep: shares no CPU
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);  // then the check (ParallelFor)
      work_cv_.wait(lock, [&] {
        return stop_.load(std::memory_order_seq_cst) ||
               generation_.load(std::memory_order_seq_cst) != seen;
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::pair<int64_t, int64_t> chunk = chunks_[index];
    const RangeFn* fn = fn_;
    SharesCpu(index);  // where this chunk runs, for the caller's wait
#if DSV4_POOL_TRACE
    start_ns_[index].store(NowNs(), std::memory_order_relaxed);  // published by pending_
#endif
    if (chunk.first < chunk.second) (*fn)(chunk.first, chunk.second, index);
    done_ns_[index].store(NowNs(), std::memory_order_relaxed);  // published by pending_
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        done_waiters_.load(std::memory_order_seq_cst) > 0) {
      // The caller is blocking on done_cv_ (see ParallelFor): notify under
      // mu_, which it holds from its count until its wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
