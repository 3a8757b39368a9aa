// This process's locked memory, VmLck of /proc/self/status (Linux), for the
// tests of mlock (base/mapped_file.h, --mlock).
#ifndef DSV4_TESTS_COMMON_LOCKED_MEMORY_H_
#define DSV4_TESTS_COMMON_LOCKED_MEMORY_H_

#include <cstdint>
#include <fstream>
#include <string>

namespace dsv4::testing {

// AddressSanitizer's runtime intercepts mlock and returns success without
// locking anything, so VmLck only shows locks in other builds.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kMlockCountsInVmLck = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kMlockCountsInVmLck = false;
#else
inline constexpr bool kMlockCountsInVmLck = true;
#endif
#else
inline constexpr bool kMlockCountsInVmLck = true;
#endif

// Bytes; −1 when the line is absent.
inline int64_t LockedBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_COMMON_LOCKED_MEMORY_H_
