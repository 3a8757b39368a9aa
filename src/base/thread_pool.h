// ThreadPool: the one pool every kernel fans out on. Fork-join: ParallelFor
// splits [0, n) into contiguous chunks, one per thread, and returns when all
// are done. The calling thread takes chunk 0, so a pool of 1 runs inline.
#ifndef DSV4_BASE_THREAD_POOL_H_
#define DSV4_BASE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class ThreadPool {
 public:
  // fn(begin, end, thread_index) handles items [begin, end).
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) split into at most size() chunks whose boundaries are
  // multiples of `grain` (except the last). Not re-entrant.
  void ParallelFor(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // Threads to use by default: hardware concurrency.
  static int DefaultThreads();

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const RangeFn* fn_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace dsv4

#endif  // DSV4_BASE_THREAD_POOL_H_
