#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace dsv4 {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::mutex g_mutex;
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void LogLine(LogLevel level, const std::string& line) {
  static const char* kTags[] = {"debug", "info", "warning", "error", ""};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "dsv4 %s: %s\n", kTags[static_cast<int>(level)], line.c_str());
}

}  // namespace dsv4
