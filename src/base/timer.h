// Wall-clock timing for benchmarks and progress reports.
#ifndef DSV4_BASE_TIMER_H_
#define DSV4_BASE_TIMER_H_

#include <chrono>
#include <cstdint>

namespace dsv4 {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void Reset() { start_ = Clock::now(); }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Peak resident set size of this process in MiB (from /proc/self/status VmHWM).
double PeakRssMiB();
// Major page faults of this process so far (pages read from disk: a mapped
// model file partly out of the page cache); 0 where the OS does not say.
int64_t MajorPageFaults();

}  // namespace dsv4

#endif  // DSV4_BASE_TIMER_H_
