// RuntimeSwitch's registry; see runtime_switch.h.
#include "base/runtime_switch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dsv4 {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<RuntimeSwitch*> switches;  // guarded by mu
};

// Constructed on first use, so that switches registering during static
// initialisation of other files find it.
Registry& GetRegistry() {
  static Registry* r = new Registry;  // never destroyed: switches outlive main
  return *r;
}

bool EnvOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

RuntimeSwitch::RuntimeSwitch(const char* env_name) : name_(env_name), on_(EnvOn(env_name)) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.switches.push_back(this);
}

RuntimeSwitch::~RuntimeSwitch() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase(r.switches, this);
}

bool SetRuntimeSwitch(std::string_view name, bool on) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  bool found = false;
  for (RuntimeSwitch* s : r.switches) {
    if (name == s->name()) {
      s->Set(on);
      found = true;
    }
  }
  return found;
}

std::vector<std::string> RuntimeSwitchNames() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const RuntimeSwitch* s : r.switches) names.emplace_back(s->name());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

double StateSplit(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double lo = values[values.size() / 10], hi = values[values.size() * 9 / 10];
  return hi > 1.25 * lo ? (lo + hi) / 2 : 0.0;
}

}  // namespace dsv4
