// The LSP base protocol's framing and JSON-RPC 2.0 message checks (jsonrpc.h).
#include "lsp/jsonrpc.h"

#include <algorithm>
#include <cctype>

namespace dsv4::lsp {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsLower(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower[i]) return false;
  }
  return true;
}

// The header block's Content-Length; false with *error for a malformed block.
bool ParseHeaders(std::string_view block, size_t* length, std::string* error) {
  bool have_length = false;
  while (!block.empty()) {
    const size_t eol = block.find("\r\n");
    const std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      *error = "malformed header line (no ':'): " + std::string(line.substr(0, 80));
      return false;
    }
    if (!EqualsLower(Trim(line.substr(0, colon)), "content-length")) continue;  // Content-Type, ...
    if (have_length) {
      *error = "the header block has two Content-Length lines";
      return false;
    }
    const std::string_view value = Trim(line.substr(colon + 1));
    if (value.empty() || value.size() > 19 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      *error = "Content-Length is not a decimal byte count: " + std::string(value.substr(0, 40));
      return false;
    }
    size_t n = 0;
    for (char c : value) n = n * 10 + static_cast<size_t>(c - '0');
    *length = n;
    have_length = true;
  }
  if (!have_length) {
    *error = "the header block has no Content-Length";
    return false;
  }
  return true;
}

}  // namespace

FrameDecoder::Result FrameDecoder::Next(std::string* body, std::string* error) {
  if (skip_ > 0) {
    const size_t n = std::min(skip_, buffer_.size());
    buffer_.erase(0, n);
    skip_ -= n;
    if (skip_ > 0) return Result::kNeedMore;
  }
  const size_t end = buffer_.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (buffer_.size() <= kMaxHeaderBytes) return Result::kNeedMore;
    // Keep a trailing "\r", "\r\n" or "\r\n\r": the start of the block's end.
    size_t keep = 0;
    while (keep < 3 && (buffer_[buffer_.size() - 1 - keep] == '\r' ||
                        buffer_[buffer_.size() - 1 - keep] == '\n')) {
      ++keep;
    }
    buffer_.erase(0, buffer_.size() - keep);
    *error = "a header block longer than " + std::to_string(kMaxHeaderBytes) +
             " bytes without an empty line";
    return Result::kError;
  }
  if (end > kMaxHeaderBytes) {
    buffer_.erase(0, end + 4);
    *error = "a header block longer than " + std::to_string(kMaxHeaderBytes) + " bytes";
    return Result::kError;
  }
  size_t length = 0;
  if (!ParseHeaders(std::string_view(buffer_).substr(0, end), &length, error)) {
    buffer_.erase(0, end + 4);
    return Result::kError;
  }
  if (length > kMaxFrameBytes) {
    buffer_.erase(0, end + 4);
    skip_ = length;
    *error = "a message body of " + std::to_string(length) + " bytes (at most " +
             std::to_string(kMaxFrameBytes) + ")";
    return Result::kError;
  }
  if (buffer_.size() - (end + 4) < length) return Result::kNeedMore;
  body->assign(buffer_, end + 4, length);
  buffer_.erase(0, end + 4 + length);
  return Result::kFrame;
}

std::string EncodeFrame(std::string_view body) {
  std::string out = "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out.append(body);
  return out;
}

bool ParseMessage(std::string_view body, Message* message, MessageError* error) {
  *error = MessageError{};
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error->code = ErrorCode::kParseError;
    error->message = "the message is not valid JSON (or not UTF-8)";
    return false;
  }
  if (!j.is_object()) {
    error->message = j.is_array() ? "batches are not supported; send one message per frame"
                                  : "a message must be a JSON object";
    return false;
  }
  Json id;
  if (auto it = j.find("id"); it != j.end()) {
    if (!it->is_number_integer() && !it->is_string()) {
      error->message = "'id' must be an integer or a string";
      return false;
    }
    id = *it;
  }
  error->id = id;
  if (auto it = j.find("jsonrpc"); it == j.end() || *it != "2.0") {
    error->message = "'jsonrpc' must be \"2.0\"";
    return false;
  }
  message->id = id;
  message->params = nullptr;
  message->method.clear();
  if (auto it = j.find("method"); it != j.end()) {
    if (!it->is_string()) {
      error->message = "'method' must be a string";
      return false;
    }
    message->method = it->get<std::string>();
    if (auto p = j.find("params"); p != j.end()) {
      if (!p->is_object() && !p->is_array()) {
        error->message = "'params' must be an object or an array";
        return false;
      }
      message->params = *p;
    }
    message->kind = id.is_null() ? Message::Kind::kNotification : Message::Kind::kRequest;
    return true;
  }
  if (!id.is_null() && (j.contains("result") || j.contains("error"))) {
    message->kind = Message::Kind::kResponse;
    return true;
  }
  error->message = "a message needs a 'method' (or, as a response, 'result' or 'error')";
  return false;
}

Json MakeResult(const Json& id, Json result) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json MakeError(const Json& id, ErrorCode code, std::string_view message) {
  return Json{{"jsonrpc", "2.0"},
              {"id", id},
              {"error", Json{{"code", static_cast<int>(code)}, {"message", std::string(message)}}}};
}

}  // namespace dsv4::lsp
