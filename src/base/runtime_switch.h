// RuntimeSwitch: a named on/off switch between two code paths that give the
// same results (a kernel's memory layout, the order of a block's steps), so
// that a benchmark can alternate them within one process — on a shared host
// whose memory bandwidth changes from one second to the next, two runs are
// not comparable, two neighbouring tokens are (`dsv4 bench --ab-switch`,
// `matmul_bench … decode-ab:NAME`). A switch is named after the environment
// variable that sets it at start: on unless that variable is "0".
#ifndef DSV4_BASE_RUNTIME_SWITCH_H_
#define DSV4_BASE_RUNTIME_SWITCH_H_

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class RuntimeSwitch {
 public:
  // Registers the switch (a namespace-scope object of the file that reads it;
  // `env_name` must outlive it: a string literal).
  explicit RuntimeSwitch(const char* env_name);
  ~RuntimeSwitch();  // unregisters it
  RuntimeSwitch(const RuntimeSwitch&) = delete;
  RuntimeSwitch& operator=(const RuntimeSwitch&) = delete;

  // One relaxed load: cheap enough for every call of a kernel.
  bool on() const { return on_.load(std::memory_order_relaxed); }
  void Set(bool on) { on_.store(on, std::memory_order_relaxed); }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::atomic<bool> on_;
};

// Sets the registered switch `name`; false (nothing changed) if none has it.
bool SetRuntimeSwitch(std::string_view name, bool on);
// The registered switches' names, sorted.
std::vector<std::string> RuntimeSwitchNames();

// For reading such comparisons on a host with two memory states: the middle
// of the 10th and 90th percentiles of `values` (times or bandwidths) when
// those lie over 25% apart, the line between the states; else 0 (one state).
double StateSplit(std::vector<double> values);

}  // namespace dsv4

#endif  // DSV4_BASE_RUNTIME_SWITCH_H_
