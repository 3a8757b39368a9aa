#include "base/thread_pool.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4 {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  chunks_.resize(n_threads_);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n_threads_; ++i) {
      int64_t b = std::min(n, (n_grains * i / used) * grain);
      int64_t e = std::min(n, (n_grains * (i + 1) / used) * grain);
      chunks_[i] = i < used ? std::make_pair(b, e) : std::make_pair(n, n);
    }
    fn_ = &fn;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(chunks_[0].first, chunks_[0].second, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::pair<int64_t, int64_t> chunk;
    const RangeFn* fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      chunk = chunks_[index];
      fn = fn_;
    }
    if (chunk.first < chunk.second) (*fn)(chunk.first, chunk.second, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
