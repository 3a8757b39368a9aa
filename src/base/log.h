// Logging to stderr with a global level. stdout is reserved for program output
// (generated text, machine-readable lines).
#ifndef DSV4_BASE_LOG_H_
#define DSV4_BASE_LOG_H_

#include <fmt/core.h>

#include <utility>

namespace dsv4 {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kSilent = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, const std::string& line);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

#define LOG_DEBUG(...) ::dsv4::Log(::dsv4::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) ::dsv4::Log(::dsv4::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARNING(...) ::dsv4::Log(::dsv4::LogLevel::kWarning, __VA_ARGS__)
#define LOG_ERROR(...) ::dsv4::Log(::dsv4::LogLevel::kError, __VA_ARGS__)

}  // namespace dsv4

#endif  // DSV4_BASE_LOG_H_
