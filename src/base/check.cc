#include "base/check.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace dsv4 {

void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s", file, line, cond);
  if (fmt[0] != '\0') {
    std::fputs(": ", stderr);
    va_list args;
    va_start(args, fmt);
    std::vfprintf(stderr, fmt, args);
    va_end(args);
  }
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace dsv4
