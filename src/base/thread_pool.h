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
  // fn(begin, end, thread_index) handles items [begin, end). A non-owning
  // reference to any callable: no heap allocation however much it captures
  // (kernels call ParallelFor on every decoded token).
  class RangeFn {
   public:
    template <typename F>
    RangeFn(const F& f)  // NOLINT: implicit, like std::function_ref
        : ctx_(&f), call_([](const void* ctx, int64_t b, int64_t e, int t) {
            (*static_cast<const F*>(ctx))(b, e, t);
          }) {}
    void operator()(int64_t begin, int64_t end, int thread) const {
      call_(ctx_, begin, end, thread);
    }

   private:
    const void* ctx_;
    void (*call_)(const void*, int64_t, int64_t, int);
  };

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) split into at most size() chunks whose boundaries are
  // multiples of `grain` (except the last). Not re-entrant. `fn` must outlive
  // the call (it does: ParallelFor returns when every chunk is done).
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
