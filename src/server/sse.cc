// Server-sent events framing (sse.h).
#include "server/sse.h"

#include "base/check.h"

namespace dsv4::server {
namespace {

// Splits on "\r\n", "\n" or "\r".
std::vector<std::string_view> Lines(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  lines.push_back(s.substr(start));
  return lines;
}

}  // namespace

std::string SseEvent(std::string_view data, std::string_view event) {
  CHECK(event.find_first_of("\r\n") == std::string_view::npos, "SSE event name with a line break");
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  for (std::string_view line : Lines(data)) {
    out += "data: ";
    out += line;
    out += '\n';
  }
  out += '\n';
  return out;
}

std::string SseComment(std::string_view text) {
  std::string out = ": ";
  for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  out += "\n\n";
  return out;
}

std::vector<SseMessage> ParseSse(std::string_view stream) {
  std::vector<SseMessage> out;
  SseMessage cur;
  bool has_data = false;
  std::vector<std::string_view> lines = Lines(stream);
  // The piece after the last line break is an unterminated line: ignore it.
  lines.pop_back();
  for (std::string_view line : lines) {
    if (line.empty()) {
      if (has_data) out.push_back(cur);
      cur = {};
      has_data = false;
      continue;
    }
    if (line[0] == ':') continue;
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field == "event") {
      cur.event = std::string(value);
    } else if (field == "data") {
      if (has_data) cur.data += '\n';
      cur.data += value;
      has_data = true;
    }
  }
  return out;
}

}  // namespace dsv4::server
