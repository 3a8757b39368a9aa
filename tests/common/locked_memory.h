// This process's locked memory, VmLck of /proc/self/status (Linux), for the
// tests of mlock (base/mapped_file.h, --mlock).
#ifndef DSV4_TESTS_COMMON_LOCKED_MEMORY_H_
#define DSV4_TESTS_COMMON_LOCKED_MEMORY_H_

#include <cstdint>
#include <fstream>
#include <string>

namespace dsv4::testing {

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
