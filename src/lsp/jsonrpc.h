// JSON-RPC 2.0 over the Language Server Protocol's base protocol: messages
// framed by a `Content-Length: N` header block ("\r\n"-separated header lines,
// an empty line, then N bytes of UTF-8 JSON), as the LSP specification's
// "Base Protocol" section defines it. The bytes come from the editor and are
// untrusted: every malformed frame or message becomes an error the server
// answers (ParseError, InvalidRequest), never a crash, and the decoder
// resynchronises on the next header block.
#ifndef DSV4_LSP_JSONRPC_H_
#define DSV4_LSP_JSONRPC_H_

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::lsp {

using Json = nlohmann::json;

// Error codes: JSON-RPC 2.0's, then the LSP specification's ("ErrorCodes",
// "LSPErrorCodes").
enum class ErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  kServerNotInitialized = -32002,
  kRequestFailed = -32803,
  kRequestCancelled = -32800,
};

// A frame's body may be at most this long (a bigger one is skipped and reported).
inline constexpr size_t kMaxFrameBytes = size_t{64} << 20;
// A header block (the lines before the empty one) may be at most this long.
inline constexpr size_t kMaxHeaderBytes = 8192;

// Splits a byte stream into frame bodies. Feed bytes as they arrive; Next
// returns each complete body, or an error for a bad header block (no or a bad
// Content-Length, an over-long header or body), after which decoding goes on
// with the bytes after it.
class FrameDecoder {
 public:
  enum class Result { kNeedMore, kFrame, kError };
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // kFrame: *body is the next body. kError: *error says what was wrong.
  Result Next(std::string* body, std::string* error);
  size_t buffered() const { return buffer_.size(); }

 private:
  std::string buffer_;
  size_t skip_ = 0;  // bytes of an over-long body still to be dropped
};

// `body` with its header: "Content-Length: N\r\n\r\n" + body.
std::string EncodeFrame(std::string_view body);

// One parsed message.
struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  Json id;  // requests and responses: an integer or a string
  std::string method;
  Json params;  // an object, an array, or null when absent
};

// A message that cannot be handled, with the id to answer (null when unknown).
struct MessageError {
  ErrorCode code = ErrorCode::kInvalidRequest;
  std::string message;
  Json id;
};

// Parses one frame body. False: *error is the ParseError (not JSON, or not
// UTF-8) or InvalidRequest (not a JSON-RPC 2.0 message object) to answer.
bool ParseMessage(std::string_view body, Message* message, MessageError* error);

Json MakeResult(const Json& id, Json result);
Json MakeError(const Json& id, ErrorCode code, std::string_view message);

}  // namespace dsv4::lsp

#endif  // DSV4_LSP_JSONRPC_H_
