// Wall-clock timing for benchmarks and progress reports.
#ifndef DSV4_BASE_TIMER_H_
#define DSV4_BASE_TIMER_H_

#include <chrono>

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

}  // namespace dsv4

#endif  // DSV4_BASE_TIMER_H_
