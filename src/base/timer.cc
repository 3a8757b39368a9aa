#include "base/timer.h"

#include <cstdio>
#include <cstring>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#endif

namespace dsv4 {

double PeakRssMiB() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0.0;
  char line[256];
  double kib = 0.0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      kib = std::atof(line + 6);
      break;
    }
  }
  std::fclose(f);
  return kib / 1024.0;
}

int64_t MajorPageFaults() {
#if defined(__unix__) || defined(__APPLE__)
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) == 0) return static_cast<int64_t>(u.ru_majflt);
#endif
  return 0;
}

}  // namespace dsv4
