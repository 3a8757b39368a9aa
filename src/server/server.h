// Server: the HTTP front end of `dsv4 serve` (cpp-httplib). Routes:
//   POST /v1/chat/completions   OpenAI chat (streaming, tools, reasoning, logprobs, n)
//   POST /v1/completions        OpenAI completions (raw prompt or token ids)
//   POST /v1/messages           Anthropic messages (streaming events, thinking, tool_use)
//   POST /v1/responses          OpenAI Responses, GET/DELETE stored ones (responses_api.h)
//   GET  /v1/models[/{id}]      the served model
//   GET  /health                {"status": "ok"} (never needs the API key)
//   GET  /metrics               Prometheus text (metrics.h)
//   /api/...                    the Ollama API (ollama_api.h)
//   GET  /                      the chat page (web_page.h; needs no API key)
// HTTP threads parse, validate, build the prompt, tokenize and submit to the
// Engine; the engine thread generates; the HTTP thread turns engine events
// into the API's JSON or SSE stream. Errors use each API's error shape
// (OpenAI {"error": {...}}, Anthropic {"type": "error", "error": {...}}):
// 400 bad request, 401 bad or missing API key, 404 unknown model or route,
// 403 a Host or Origin that is not allowed, 413 body too large, 503 +
// Retry-After when the queue is full or the server is shutting down, 500 if
// the model fails. A client that disconnects from a stream cancels its
// sequences.
//
// Connections, timeouts and request framing: http_server.h. Host check (DNS
// rebinding): requests whose Host is not a loopback name, the bound host or
// in `allowed_hosts` get 403. CORS headers only for `cors_origins`; a request
// from any other Origin gets 403, except the server's own (an Origin naming a
// Host that is allowed by name: the chat page's requests).
//
// Not here: request validation (request.h), prompts and output parsing
// (chat_format.h), scheduling (engine/engine.h).
#ifndef DSV4_SERVER_SERVER_H_
#define DSV4_SERVER_SERVER_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "server/chat_format.h"
#include "server/request.h"

namespace dsv4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                                // 0: an ephemeral port (see Server::port())
  std::string api_key;                            // empty: no authentication
  std::string model_id;                           // the name clients use in "model"
  size_t max_body_bytes = 8u << 20;               // larger bodies get 413
  int max_n = 8;                                  // choices per request
  int max_connections = 512;                      // more get 503 at once
  std::chrono::milliseconds read_timeout{10000};  // request head / body gaps (http_server.h)
  std::vector<std::string> allowed_hosts;         // extra Host names; "*": any
  std::vector<std::string> cors_origins;          // Origins answered with CORS headers; "*": any
  bool log_requests = false;                      // one access-log line per request (stderr)
  bool allow_special_in_content = false;          // special-token text in messages stays special
  std::optional<ChatFormat> chat_format;          // unset: detected from the tokenizer

  // Stored Responses API responses (0: none) and their bytes (responses_store.h).
  size_t responses_store = 1000;
  size_t responses_store_bytes = size_t{256} << 20;
};

class Server {
 public:
  // `engine` must outlive the server.
  Server(Engine& engine, const ServerOptions& options);
  ~Server();

  // Binds host:port. IoError when the address cannot be bound (naming
  // host:port, and saying so when another process uses it).
  Status Bind();
  // The bound port (after Bind).
  int port() const { return port_; }
  // Serves until Shutdown() or Stop() (from any thread) and every connection
  // has ended.
  void Run();
  // Stops accepting and closes idle connections; responses in flight may
  // finish for `grace`, then streams end with an error event.
  void Shutdown(std::chrono::milliseconds grace);
  // Shutdown with no grace.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace dsv4::server

#endif  // DSV4_SERVER_SERVER_H_
