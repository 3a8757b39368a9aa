// ThreadPool: the one pool every kernel fans out on. Fork-join: ParallelFor
// splits [0, n) into contiguous chunks, one per thread, and returns when all
// are done. The calling thread takes chunk 0, so a pool of 1 runs inline.
//
// Hand-off: a decoded token makes hundreds of ParallelFor calls of tens of
// microseconds each, so waking workers through a condition variable (a futex
// round trip, slow on a VM) would cost as much as the work. Workers and
// the caller therefore spin on atomics for a short while (kSpinMicros) before
// blocking on the condition variables; an idle pool sleeps. The spin time is
// DSV4_SPIN_US microseconds (environment; default 200, 0 = block at once, as
// one may want on a machine shared with other busy processes).
#ifndef DSV4_BASE_THREAD_POOL_H_
#define DSV4_BASE_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

// The balancing arithmetic of ThreadPool::ParallelFor (see there), apart so
// that it can be tested without clocks: each thread's speed relative to the
// others (mean 1, clamped to [0.5, 2]), the split of a call's grains in
// proportion to them, and learning from the items each thread did and the
// time it took (an exponential moving average, weight kLearnRate).
struct SpeedSplit {
  static constexpr int kMaxThreads = 16;
  static constexpr float kLearnRate = 0.25f;
  float speed[kMaxThreads];

  // Equal speeds for `threads` ≤ kMaxThreads.
  void Reset(int threads);
  // Thread i takes grains [bounds[i], bounds[i + 1]) of n_grains; bounds has
  // threads + 1 entries, bounds[0] = 0 and bounds[threads] = n_grains.
  void Plan(int threads, int64_t n_grains, int64_t* bounds) const;
  // Thread i did items[i] in t_ns[i]. A measured relative speed counts at
  // most twice and at least half the current one (a descheduled or sleeping
  // thread measures the scheduler, not its speed: one bounded step). Returns
  // false, learning nothing, when a time or an item count is not positive.
  bool Learn(int threads, const int64_t* items, const int64_t* t_ns);
};

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
    // The same for every callable of one type (one call site, mostly).
    uintptr_t type_id() const { return reinterpret_cast<uintptr_t>(call_); }

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
  //
  // Balancing. Chunks start equal. A call of at least kMinBalancedGrains
  // grains on every thread (a decoded token's big matrix products) then
  // splits by each thread's measured speed in the last calls of the same
  // shape (fn's type, n, grain and site): the caller starts its chunk at once
  // while a worker first wakes, and on a machine whose cores are each
  // bandwidth-bound a few percent of speed decide when the call ends. Every
  // user must therefore give the same results for any split into chunks (as
  // they do for any thread count).
  //
  // `site` (optional) tells apart calls of one shape that should split
  // differently: a matrix product passes its weights, so that each matrix
  // learns its own split.
  void ParallelFor(int64_t n, const RangeFn& fn, int64_t grain = 1, const void* site = nullptr);

  // fn(item, thread) for every item of [0, n), dealt round-robin: with
  // m = min(n, size()) chunks, chunk j takes items j, j + m, j + 2m, … in
  // order. For items whose cost grows with the index (attention over a
  // prompt: later tokens see more keys), where contiguous chunks would leave
  // the first threads idle.
  template <typename F>
  void ParallelForStrided(int64_t n, const F& fn) {
    const int64_t m = std::min<int64_t>(n, n_threads_);
    ParallelFor(m, [&](int64_t begin, int64_t end, int thread) {
      for (int64_t j = begin; j < end; ++j) {
        for (int64_t item = j; item < n; item += m) fn(item, thread);
      }
    });
  }

  // Threads to use by default: hardware concurrency.
  static int DefaultThreads();

 private:
  void WorkerLoop(int index);
  // Thread `self` spins until pred() or SpinMicros() have passed; returns
  // pred(). It spins purely (no yield) only while no other thread of the pool
  // was last seen on its CPU: two threads sharing one CPU (the other CPU
  // busy with another process) would otherwise each burn their time slice
  // waiting for the one that cannot run, and a fork-join would cost a whole
  // pure-spin period instead of a yield.
  template <typename Pred>
  bool SpinFor(int self, const Pred& pred);
  // Records thread `self`'s current CPU; whether another thread of the pool
  // was last seen there (false where the CPU cannot be asked).
  bool SharesCpu(int self);
  static int64_t SpinMicros();
  // The chunk bounds of a call (into chunks_) and, when it is balanced, its
  // shape's entry in shapes_ (else −1).
  int64_t PlanChunks(int64_t n, const RangeFn& fn, int64_t grain, int used, const void* site);
  // Feeds the measured chunk times of a balanced call back into its shape.
  void LearnSpeeds(int64_t shape, int64_t start_ns);
  static constexpr int64_t kDefaultSpinMicros = 200;
  static constexpr int64_t kPureSpinMicros = 50;

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;  // held from counting a sleep to waiting, and to notify
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Published before generation_ is bumped (release), read after (acquire).
  const RangeFn* fn_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};      // workers blocking on work_cv_
  std::atomic<int> done_waiters_{0};  // the caller blocking on done_cv_
  // The CPU each thread (0: the caller of ParallelFor) was last seen on while
  // running or spinning, −1 while blocked or not yet known.
  std::unique_ptr<std::atomic<int>[]> cpu_;

  // Balancing (see ParallelFor): per shape, each thread's speed relative to
  // the others (mean 1), learnt from its chunk times. Only pools of up to
  // kMaxBalancedThreads, in a table of kShapeSlots shapes: kShapeWays slots
  // per hash, the least recently used of them replaced.
  static constexpr int kMaxBalancedThreads = SpeedSplit::kMaxThreads;
  static constexpr int kShapeSlots = 512;
  static constexpr int kShapeWays = 8;
  static constexpr int64_t kMinBalancedGrains = 32;
  struct Shape {
    uintptr_t type = 0;
    const void* site = nullptr;
    int64_t n = 0, grain = 0;
    uint64_t last_use = 0;
    SpeedSplit split;
  };
  std::vector<Shape> shapes_;
  uint64_t shape_clock_ = 0;
  // When each thread's chunk of the current call finished (steady clock, ns).
  std::unique_ptr<std::atomic<int64_t>[]> done_ns_;

  // Region trace (built with -DDSV4_POOL_TRACE=ON; see thread_pool.cc): when
  // each worker started its chunk of the current call, and one record per
  // call, written to $DSV4_POOL_TRACE_FILE when the pool is destroyed. The
  // members exist in every build (the define is private to base/, so the
  // class's layout must not depend on it); only the trace build fills them.
  struct TraceRecord {
    int64_t n, start_ns, caller_end_ns, end_ns, workers_start_ns, workers_end_ns;
  };
  std::unique_ptr<std::atomic<int64_t>[]> start_ns_;
  std::vector<TraceRecord> trace_;
};

}  // namespace dsv4

#endif  // DSV4_BASE_THREAD_POOL_H_
