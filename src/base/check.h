// CHECK / DCHECK: invariants that only a bug can break. They abort with
// file:line and a printf-style message. Anything a user or a file can cause
// returns a Status instead (base/status.h).
#ifndef DSV4_BASE_CHECK_H_
#define DSV4_BASE_CHECK_H_

namespace dsv4 {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond) {
  CheckFailed(file, line, cond, "%s", "");
}
}  // namespace dsv4

// CHECK(cond) or CHECK(cond, "fmt", args...): always on.
#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    if (__builtin_expect(!(cond), 0)) {                                          \
      ::dsv4::CheckFailed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                            \
  } while (0)

// DCHECK: on in Debug and sanitizer builds, compiled out in Release.
#if !defined(NDEBUG) || defined(DSV4_DEBUG_CHECKS)
#define DCHECK(cond, ...) CHECK(cond __VA_OPT__(, ) __VA_ARGS__)
#else
#define DCHECK(cond, ...) \
  do {                    \
  } while (0)
#endif

#endif  // DSV4_BASE_CHECK_H_
