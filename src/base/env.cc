// The environment variables' accessors; see env.h.
#include "base/env.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log.h"

namespace dsv4::env {
namespace {

// The variable's value; nullptr when unset or empty.
const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// On unless the variable is "0".
bool NotZero(const char* name) {
  const char* v = Get(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

int64_t SpinMicros(int64_t fallback) {
  static const int64_t unset = -1;
  static const int64_t micros = [] {
    const char* v = Get("DSV4_SPIN_US");
    if (v == nullptr) return unset;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    return *end == '\0' && n >= 0 ? static_cast<int64_t>(n) : unset;
  }();
  return micros == unset ? fallback : micros;
}

bool HugePageAdvice() {
  static const bool on = NotZero("DSV4_THP");
  return on;
}

bool PageCacheRefresh() {
  static const bool on = NotZero("DSV4_THP_REFRESH");
  return on;
}

bool PortableKernelsOnly() {
  static const bool portable = [] {
    const char* v = Get("DSV4_KERNELS");
    if (v == nullptr || std::strcmp(v, "native") == 0) return false;
    if (std::strcmp(v, "portable") == 0) return true;
    LOG_WARNING("DSV4_KERNELS={}: unknown value (native or portable); using native", v);
    return false;
  }();
  return portable;
}

const char* PoolTraceFile() {
  static const char* const path = Get("DSV4_POOL_TRACE_FILE");
  return path;
}

}  // namespace dsv4::env
