#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__linux__)
#include <sched.h>
#endif

#include "base/check.h"

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
    : n_threads_(std::max(1, n_threads)), cpu_(new std::atomic<int>[n_threads_]) {
  for (int i = 0; i < n_threads_; ++i) cpu_[i].store(-1, std::memory_order_relaxed);
  chunks_.resize(n_threads_);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int64_t ThreadPool::SpinMicros() {
  static const int64_t micros = [] {
    const char* env = std::getenv("DSV4_SPIN_US");
    if (env == nullptr || *env == '\0') return kDefaultSpinMicros;
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    return (*end == '\0' && v >= 0) ? static_cast<int64_t>(v) : kDefaultSpinMicros;
  }();
  return micros;
}

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

void ThreadPool::ParallelFor(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  CHECK(grain > 0);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int used = static_cast<int>(std::min<int64_t>(n_threads_, n_grains));
  if (used == 1) {
    fn(0, n, 0);
    return;
  }
  for (int i = 0; i < n_threads_; ++i) {
    int64_t b = std::min(n, (n_grains * i / used) * grain);
    int64_t e = std::min(n, (n_grains * (i + 1) / used) * grain);
    chunks_[i] = i < used ? std::make_pair(b, e) : std::make_pair(n, n);
  }
  fn_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Bumping the generation under mu_ closes the race with a worker that is
    // about to block: it re-checks the generation under mu_ before waiting.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) work_cv_.notify_all();
  }
  fn(chunks_[0].first, chunks_[0].second, 0);
  const auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinFor(0, all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
  }
  fn_ = nullptr;
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
      ++sleepers_;
      work_cv_.wait(lock, has_work);
      --sleepers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::pair<int64_t, int64_t> chunk = chunks_[index];
    const RangeFn* fn = fn_;
    SharesCpu(index);  // where this chunk runs, for the caller's wait
    if (chunk.first < chunk.second) (*fn)(chunk.first, chunk.second, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be blocked on done_cv_: notify under mu_ so the wake-up
      // cannot fall between its predicate check and its wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
