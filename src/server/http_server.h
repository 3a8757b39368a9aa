// HttpServer: cpp-httplib's Server with the connection handling replaced, so
// that hostile or slow clients cannot stall it. cpp-httplib 0.11 keeps a fixed
// pool of threads, each blocked on one connection until its read timeout, and
// reads request bodies itself (a chunked body has no size limit there); this
// class overrides its per-connection entry point (process_and_close_socket,
// virtual in the library) and its task queue:
//   - every connection gets a thread of its own, up to `max_connections`;
//     a connection past the cap is answered 503 at once by the accept thread
//     and closed, so a flood never queues behind busy threads;
//   - the request head must arrive within `read_timeout` of its first byte
//     (a fresh connection must start within it too); a body may pause at most
//     `read_timeout` between reads and must be complete within kBodySeconds;
//   - the head is parsed here before cpp-httplib sees it: a malformed or
//     negative Content-Length is 400, a body over `max_body_bytes` is 413 (on
//     Content-Length at once, on chunked framing as soon as the limit is
//     crossed), a body that stops short is 400; chunked bodies are decoded
//     here and handed on with a Content-Length;
//   - cpp-httplib then routes the complete request from memory and writes the
//     response (write timeout `write_timeout`);
//   - Drain() stops accepting, closes idle connections at once and lets
//     in-flight responses finish until a deadline (streams check draining()).
// Errors decided here use the body that `error_body` makes (the API's error
// shape for the request's path) and always close the connection.
//
// Not here: routes and API shapes (server.cc).
#ifndef DSV4_SERVER_HTTP_SERVER_H_
#define DSV4_SERVER_HTTP_SERVER_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dsv4::server {

struct HttpLimits {
  int max_connections = 512;
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{10000};  // idle time between requests
  std::chrono::milliseconds write_timeout{30000};
  size_t max_body_bytes = 8u << 20;
  size_t max_head_bytes = 64u << 10;  // request line + headers
};

// One finished request, for the access log and the counters.
struct HttpAccess {
  std::string method;  // "" when the request line never arrived complete
  std::string path;
  int status = 0;
  int64_t bytes = 0;  // response bytes written (head + body)
  double seconds = 0;
  std::string remote;  // "ip:port"
};

class HttpServer : public httplib::Server {
 public:
  // The whole body must arrive within this many seconds of its head.
  static constexpr int kBodySeconds = 120;

  explicit HttpServer(const HttpLimits& limits);
  ~HttpServer() override;

  // The JSON body of an error decided before routing (path: the request's, or
  // "" when unknown).
  std::function<std::string(const std::string& path, int status, const std::string& message)>
      error_body;
  // Called once per request answered (routed or not), on its connection's thread.
  std::function<void(const HttpAccess&)> on_access;

  // The status cpp-httplib's logger saw for the request being answered on this
  // thread (the logger runs inside process_request).
  static void NoteStatus(int status);

  // Stops accepting, closes idle connections and makes draining() true;
  // responses in flight may run until `deadline` (their code checks
  // past_drain_deadline()). Safe from any thread, more than once (the earliest
  // deadline wins).
  void Drain(std::chrono::steady_clock::time_point deadline);
  bool draining() const { return draining_.load(); }
  bool past_drain_deadline() const;

  // Connections with a thread now, and connections refused for the cap.
  int open_connections() const { return open_.load(); }
  int64_t refused_connections() const { return refused_.load(); }

  // Raises the listen backlog (cpp-httplib listens with 5) after a bind.
  bool RaiseBacklog();
  // Forgets the listening socket after listen_after_bind() returned (the
  // library closed it).
  void ForgetListener() { svr_sock_ = INVALID_SOCKET; }

 private:
  class Threads;
  class Connection;
  class Reaper;
  friend class Threads;
  friend class Connection;

  bool process_and_close_socket(socket_t sock) override;
  // The answer to a connection over the cap, sent from the accept thread.
  void Refuse(socket_t sock);

  HttpLimits limits_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> drain_deadline_ns_{INT64_MAX};
  int drain_pipe_[2] = {-1, -1};  // readable once draining
  std::atomic<int> open_{0};
  std::atomic<int64_t> refused_{0};
  std::unique_ptr<Reaper> reaper_;  // closes refused connections once the client read the 503
};

}  // namespace dsv4::server

#endif  // DSV4_SERVER_HTTP_SERVER_H_
