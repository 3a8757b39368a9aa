// The connection layer under the routes (http_server.h).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the task queue while it runs a connection over the cap on the accept
// thread; read by process_and_close_socket.
thread_local bool tl_refuse = false;
// The status cpp-httplib's logger reported for the request on this thread.
thread_local int tl_status = 0;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

int MillisUntil(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(left, 0, 3600 * 1000));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Printable excerpt of client text for an error message.
std::string Excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 40) out += "...";
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

std::string PeerName(int sock, bool local) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = local ? getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                       : getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return {};
  char ip[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    return fmt::format("{}:{}", ip, ntohs(a->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    return fmt::format("[{}]:{}", ip, ntohs(a->sin6_port));
  }
  return {};
}

void SplitHostPort(const std::string& s, std::string* ip, int* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return;
  *ip = s.substr(0, colon);
  if (ip->size() >= 2 && ip->front() == '[') *ip = ip->substr(1, ip->size() - 2);
  *port = std::atoi(s.c_str() + colon + 1);
}

std::string MinimalErrorBody(const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return "{\"error\":{\"message\":\"" + escaped + "\"}}";
}

}  // namespace

// Each connection on a thread of its own while fewer than max_connections are
// open; past that, the connection runs on the accept thread, which refuses it.
class HttpServer::Threads : public httplib::TaskQueue {
 public:
  explicit Threads(HttpServer& server) : server_(server) {}

  void enqueue(std::function<void()> fn) override {
    if (server_.open_.load() >= server_.limits_.max_connections) return RunRefusing(fn);
    server_.open_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++live_;
    }
    try {
      std::thread([this, fn = std::move(fn)] {
        fn();
        server_.open_.fetch_sub(1);
        std::lock_guard<std::mutex> lock(mu_);
        if (--live_ == 0) cv_.notify_all();
      }).detach();
    } catch (const std::system_error&) {
      // No thread to be had: refuse, as over the cap.
      server_.open_.fetch_sub(1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --live_;
      }
      RunRefusing(fn);
    }
  }

  // Waits for every connection to end (Drain ends idle ones at once).
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return live_ == 0; });
  }

 private:
  static void RunRefusing(const std::function<void()>& fn) {
    tl_refuse = true;
    fn();
    tl_refuse = false;
  }

  HttpServer& server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int live_ = 0;
};

// Refused connections: after the 503 and a half-close, each stays open until
// the client closes or a second passes, so that request bytes arriving after
// the refusal do not make the kernel reset the connection (and drop the 503
// before the client reads it).
class HttpServer::Reaper {
 public:
  Reaper() : thread_([this] { Loop(); }) {}
  ~Reaper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    thread_.join();
    for (const auto& [fd, deadline] : fds_) ::close(fd);
  }

  void Add(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fds_.size() >= kMaxPending) {
      ::close(fd);
      return;
    }
    fds_.emplace_back(fd, Clock::now() + std::chrono::seconds(1));
  }

 private:
  static constexpr size_t kMaxPending = 4096;

  void Loop() {
    std::vector<pollfd> polled;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
        const auto now = Clock::now();
        std::erase_if(fds_, [&](const auto& e) {
          if (now < e.second) return false;
          ::close(e.first);
          return true;
        });
        polled.clear();
        for (const auto& [fd, deadline] : fds_) polled.push_back(pollfd{fd, POLLIN, 0});
      }
      if (polled.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (::poll(polled.data(), polled.size(), 50) <= 0) continue;
      std::vector<int> done;
      for (const pollfd& p : polled) {
        if (p.revents == 0) continue;
        char sink[4096];
        const ssize_t n = ::recv(p.fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) done.push_back(p.fd);
      }
      std::lock_guard<std::mutex> lock(mu_);
      std::erase_if(fds_, [&](const auto& e) {
        if (std::find(done.begin(), done.end(), e.first) == done.end()) return false;
        ::close(e.first);
        return true;
      });
    }
  }

  std::mutex mu_;
  std::vector<std::pair<int, Clock::time_point>> fds_;
  bool stop_ = false;
  std::thread thread_;
};

// One client connection: reads each request whole (with the deadlines of
// http_server.h), hands it to cpp-httplib from memory, repeats while the
// connection is kept alive.
class HttpServer::Connection {
 public:
  Connection(HttpServer& server, int sock)
      : server_(server), sock_(sock), remote_(PeerName(sock, false)) {
    const int one = 1;
    setsockopt(sock_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }

  void Serve() {
    for (bool first = true;; first = false) {
      if (!ReadRequest(first)) break;
      written_ = 0;
      tl_status = 0;
      Stream stream(*this);
      const bool close = server_.draining();
      bool client_closes = false;
      const bool ok = server_.process_request(stream, close, client_closes, nullptr);
      Access(tl_status);
      if (!ok || close || client_closes || server_.draining()) break;
    }
    if (linger_) Linger();
    ::close(sock_);
  }

 private:
  // cpp-httplib's view of one request: reads come from the buffered request,
  // writes go to the socket.
  class Stream : public httplib::Stream {
   public:
    explicit Stream(Connection& c) : c_(c) {}
    bool is_readable() const override { return pos_ < c_.request_.size(); }
    bool is_writable() const override { return c_.WaitWritable(); }
    ssize_t read(char* ptr, size_t size) override {
      const size_t n = std::min(size, c_.request_.size() - pos_);
      std::copy_n(c_.request_.data() + pos_, n, ptr);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
      return c_.WriteAll(ptr, size) ? static_cast<ssize_t>(size) : -1;
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
      SplitHostPort(c_.remote_, &ip, &port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
      SplitHostPort(PeerName(c_.sock_, true), &ip, &port);
    }
    socket_t socket() const override { return c_.sock_; }

   private:
    Connection& c_;
    size_t pos_ = 0;
  };

  enum class Got { kData, kClosed, kTimeout, kDrain, kError };

  // Appends what the socket has to buf_, waiting until `deadline` (and, with
  // `watch_drain`, until the server starts draining).
  Got Fill(Clock::time_point deadline, bool watch_drain) {
    while (true) {
      if (Clock::now() >= deadline) return Got::kTimeout;
      pollfd fds[2] = {{sock_, POLLIN, 0}, {server_.drain_pipe_[0], POLLIN, 0}};
      const int rc = ::poll(fds, watch_drain ? 2 : 1, MillisUntil(deadline));
      if (rc < 0 && errno != EINTR) return Got::kError;
      if (rc <= 0) continue;
      if (watch_drain && fds[1].revents != 0) return Got::kDrain;
      if (fds[0].revents == 0) continue;
      char tmp[16384];
      const ssize_t n = ::recv(sock_, tmp, sizeof(tmp), MSG_DONTWAIT);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        return Got::kData;
      }
      if (n == 0) return Got::kClosed;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Got::kError;
    }
  }

  Clock::time_point WriteDeadline() const {
    Clock::time_point deadline = Clock::now() + server_.limits_.write_timeout;
    if (server_.draining()) {
      // A client that stops reading must not hold the exit up for long.
      const Clock::time_point drain{std::chrono::nanoseconds(server_.drain_deadline_ns_.load()) +
                                    std::chrono::seconds(2)};
      deadline = std::min(deadline, drain);
    }
    return deadline;
  }

  bool WaitWritable() const {
    const Clock::time_point deadline = WriteDeadline();
    while (true) {
      pollfd p{sock_, POLLOUT, 0};
      const int rc = ::poll(&p, 1, std::min(MillisUntil(deadline), 250));
      if (rc < 0 && errno != EINTR) return false;
      if (rc > 0) return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
      if (Clock::now() >= std::min(deadline, WriteDeadline())) return false;
    }
  }

  bool WriteAll(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(sock_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        data += n;
        size -= static_cast<size_t>(n);
        written_ += n;
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (!WaitWritable()) return false;
    }
    return true;
  }

  // Answers an error decided here; the connection closes after it.
  void Fail(int status, const std::string& message) {
    const std::string body =
        server_.error_body ? server_.error_body(path_, status, message) : MinimalErrorBody(message);
    const std::string head = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n",
        status, Reason(status), body.size());
    written_ = 0;
    WriteAll(head.data(), head.size()) && WriteAll(body.data(), body.size());
    Access(status);
    linger_ = true;
  }

  void Access(int status) {
    if (!server_.on_access) return;
    HttpAccess a;
    a.method = method_;
    a.path = path_;
    a.status = status;
    a.bytes = written_;
    a.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    a.remote = remote_;
    server_.on_access(a);
  }

  // After an error the client may still be sending: read and drop its bytes
  // for a while, so that closing does not reset the connection before the
  // client has read the answer.
  void Linger() {
    ::shutdown(sock_, SHUT_WR);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
    size_t dropped = 0;
    while (dropped < (4u << 20)) {
      pollfd p{sock_, POLLIN, 0};
      if (::poll(&p, 1, MillisUntil(deadline)) <= 0) break;
      char tmp[16384];
      const ssize_t n = ::recv(sock_, tmp, sizeof(tmp), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
      if (n > 0) dropped += static_cast<size_t>(n);
    }
  }

  // Reads one whole request into request_ (head, then a Content-Length body).
  // False: close the connection (after answering, when there is something to
  // answer).
  bool ReadRequest(bool first) {
    const HttpLimits& limits = server_.limits_;
    method_.clear();
    path_.clear();
    start_ = Clock::now();
    while (buf_.size() >= 2 && buf_[0] == '\r' && buf_[1] == '\n') buf_.erase(0, 2);
    const Clock::time_point idle_deadline =
        start_ + (first ? limits.read_timeout : limits.keep_alive_timeout);
    Clock::time_point head_deadline = start_ + limits.read_timeout;
    bool started = !buf_.empty();
    size_t head_end = 0;
    size_t scan = 0;
    while ((head_end = buf_.find("\r\n\r\n", scan)) == std::string::npos) {
      scan = buf_.size() >= 3 ? buf_.size() - 3 : 0;
      if (buf_.size() > limits.max_head_bytes) {
        Fail(431, fmt::format("the request head is larger than {} bytes", limits.max_head_bytes));
        return false;
      }
      if (!started && server_.draining()) return false;
      const Got got = Fill(started ? head_deadline : idle_deadline, !started);
      if (got == Got::kTimeout && started) {
        ParseRequestLine();
        Fail(408, fmt::format("the request head did not arrive complete within {} ms",
                              limits.read_timeout.count()));
        return false;
      }
      if (got != Got::kData) return false;
      if (!started) {
        started = true;
        start_ = Clock::now();
        head_deadline = start_ + limits.read_timeout;
      }
    }
    const std::string_view head(buf_.data(), head_end);
    if (!ParseRequestLine()) {
      Fail(400, "malformed request line '" + Excerpt(head.substr(0, head.find("\r\n"))) + "'");
      return false;
    }

    // Headers: the framing ones are checked and rewritten here.
    std::string forwarded(head.substr(0, head.find("\r\n") + 2));
    bool has_length = false;
    uint64_t length = 0;
    bool chunked = false;
    bool expect_continue = false;
    size_t pos = head.find("\r\n") + 2;
    while (pos < head.size()) {
      size_t eol = head.find("\r\n", pos);
      if (eol == std::string_view::npos) eol = head.size();
      const std::string_view line = head.substr(pos, eol - pos);
      pos = eol + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0) {
        Fail(400, "malformed header line '" + Excerpt(line) + "' (expected 'Name: value')");
        return false;
      }
      const std::string name = Lower(Trim(line.substr(0, colon)));
      const std::string_view value = Trim(line.substr(colon + 1));
      if (name == "content-length") {
        const bool digits =
            !value.empty() && value.size() <= 18 &&
            std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) {
          Fail(400, "invalid Content-Length '" + Excerpt(value) +
                        "': it must be a non-negative integer below 10^18");
          return false;
        }
        const uint64_t v = std::stoull(std::string(value));
        if (has_length && v != length) {
          Fail(400, "the request has conflicting Content-Length headers");
          return false;
        }
        has_length = true;
        length = v;
      } else if (name == "transfer-encoding") {
        if (Lower(value) != "chunked") {
          Fail(400, "unsupported Transfer-Encoding '" + Excerpt(value) +
                        "' (only 'chunked' is supported)");
          return false;
        }
        chunked = true;
        continue;  // replaced by a Content-Length below
      } else if (name == "expect") {
        expect_continue = Lower(value) == "100-continue";
        continue;  // answered here
      }
      forwarded.append(line.data(), line.size());
      forwarded += "\r\n";
    }
    if (chunked && has_length) {
      Fail(400, "the request has both Content-Length and Transfer-Encoding");
      return false;
    }
    if (has_length && length > limits.max_body_bytes) {
      Fail(413, fmt::format("The request body is too large: {} bytes, the limit is {} "
                            "(--max-body-bytes)",
                            length, limits.max_body_bytes));
      return false;
    }

    const size_t body_start = head_end + 4;
    const bool has_body = chunked || length > 0;
    if (expect_continue && has_body && buf_.size() == body_start) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!WriteAll(kContinue.data(), kContinue.size())) return false;
    }
    const Clock::time_point body_deadline =
        Clock::now() + std::chrono::seconds(HttpServer::kBodySeconds);
    // Waits for more body bytes; on failure answers and returns false.
    auto more = [&](const char* what, size_t have) {
      const Got got =
          Fill(std::min(Clock::now() + limits.read_timeout, body_deadline), /*watch_drain=*/false);
      if (got == Got::kData) return true;
      if (got == Got::kTimeout) {
        Fail(400, fmt::format("the request body stopped after {} bytes of {} (no data for {} ms, "
                              "or longer than {} s in all)",
                              have, what, limits.read_timeout.count(), HttpServer::kBodySeconds));
      } else if (got == Got::kClosed) {
        Fail(400, fmt::format("the request body ended after {} bytes of {}", have, what));
      }
      return false;
    };

    std::string body;
    size_t consumed = body_start;
    if (chunked) {
      size_t at = body_start;
      while (true) {
        const size_t eol = buf_.find("\r\n", at);
        if (eol == std::string::npos) {
          if (buf_.size() - at > 1024) {
            Fail(400, "a chunk-size line is longer than 1024 bytes");
            return false;
          }
          if (!more("a chunked body (it has no last chunk yet)", body.size())) return false;
          continue;
        }
        std::string_view size_line = std::string_view(buf_).substr(at, eol - at);
        size_line = Trim(size_line.substr(0, size_line.find(';')));
        const bool hex = !size_line.empty() && size_line.size() <= 15 &&
                         std::all_of(size_line.begin(), size_line.end(),
                                     [](char c) { return std::isxdigit(static_cast<uint8_t>(c)); });
        if (!hex) {
          Fail(400, "invalid chunk size '" + Excerpt(size_line) + "' (expected hex digits)");
          return false;
        }
        const uint64_t size = std::stoull(std::string(size_line), nullptr, 16);
        if (size == 0) {
          // Trailer lines, then an empty line.
          size_t t = eol + 2;
          while (true) {
            const size_t end = buf_.find("\r\n", t);
            if (end == std::string::npos) {
              if (buf_.size() - eol > 8192) {
                Fail(400, "the chunked body's trailer is longer than 8192 bytes");
                return false;
              }
              if (!more("a chunked body (its trailer is incomplete)", body.size())) return false;
              continue;
            }
            if (end == t) {
              consumed = end + 2;
              break;
            }
            t = end + 2;
          }
          break;
        }
        if (body.size() + size > limits.max_body_bytes) {
          Fail(413, fmt::format("The request body is too large: more than {} bytes (chunked), "
                                "the limit is {} (--max-body-bytes)",
                                limits.max_body_bytes, limits.max_body_bytes));
          return false;
        }
        while (buf_.size() < eol + 2 + size + 2) {
          if (!more("a chunked body (a chunk is incomplete)", body.size())) return false;
        }
        if (buf_.compare(eol + 2 + size, 2, "\r\n") != 0) {
          Fail(400, "a chunk's data is not followed by CRLF (chunk size and data disagree)");
          return false;
        }
        body.append(buf_, eol + 2, size);
        at = eol + 2 + size + 2;
      }
      forwarded += fmt::format("Content-Length: {}\r\n", body.size());
    } else {
      const std::string what = fmt::format("the {} its Content-Length announced", length);
      while (buf_.size() < body_start + length) {
        if (!more(what.c_str(), buf_.size() - body_start)) return false;
      }
      body.assign(buf_, body_start, length);
      consumed = body_start + length;
    }
    forwarded += "\r\n";
    request_ = std::move(forwarded);
    request_ += body;
    buf_.erase(0, consumed);
    return true;
  }

  // method_ and path_ from the first line in buf_; false when it is malformed.
  bool ParseRequestLine() {
    const std::string_view b(buf_);
    const std::string_view line = b.substr(0, b.find("\r\n"));
    const size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos || sp1 == 0) return false;
    const size_t sp2 = line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) return false;
    method_ = Excerpt(line.substr(0, sp1));
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path_ = std::string(target.substr(0, target.find('?')).substr(0, 1024));
    return !target.empty() && line.substr(sp2 + 1).rfind("HTTP/1.", 0) == 0;
  }

  HttpServer& server_;
  const int sock_;
  const std::string remote_;
  std::string buf_;      // bytes read and not yet handed on
  std::string request_;  // the request being answered, framed by Content-Length
  std::string method_;
  std::string path_;
  Clock::time_point start_;
  int64_t written_ = 0;
  bool linger_ = false;
};

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  if (::pipe2(drain_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) drain_pipe_[0] = drain_pipe_[1] = -1;
  reaper_ = std::make_unique<Reaper>();
  new_task_queue = [this] { return new Threads(*this); };
  set_payload_max_length(limits.max_body_bytes);
  set_tcp_nodelay(true);
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which lets
  // a second server bind the same port and take half its connections.
  set_socket_options([](socket_t sock) {
    const int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  set_keep_alive_max_count(1000000);
  set_keep_alive_timeout(
      std::chrono::duration_cast<std::chrono::seconds>(limits.keep_alive_timeout).count());
  set_read_timeout(limits.read_timeout);
  set_write_timeout(limits.write_timeout);
}

HttpServer::~HttpServer() {
  reaper_.reset();
  for (int fd : drain_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::NoteStatus(int status) { tl_status = status; }

void HttpServer::Drain(Clock::time_point deadline) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  int64_t cur = drain_deadline_ns_.load();
  while (ns < cur && !drain_deadline_ns_.compare_exchange_weak(cur, ns)) {
  }
  if (draining_.exchange(true)) return;
  if (drain_pipe_[1] >= 0) {
    const char c = 'x';
    [[maybe_unused]] ssize_t n = ::write(drain_pipe_[1], &c, 1);
  }
  // Wakes the accept loop (or makes its first accept fail, when it has not
  // started yet); cpp-httplib then closes the listener and waits for the
  // connections (Threads::shutdown).
  const socket_t sock = svr_sock_.load();
  if (sock != INVALID_SOCKET) ::shutdown(sock, SHUT_RDWR);
}

bool HttpServer::past_drain_deadline() const {
  return draining_.load() && NowNs() >= drain_deadline_ns_.load();
}

bool HttpServer::RaiseBacklog() {
  const socket_t sock = svr_sock_.load();
  return sock != INVALID_SOCKET && ::listen(sock, SOMAXCONN) == 0;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (tl_refuse) {
    Refuse(sock);
    return false;
  }
  Connection(*this, sock).Serve();
  return true;
}

void HttpServer::Refuse(socket_t sock) {
  refused_.fetch_add(1);
  const auto start = Clock::now();
  char sink[4096];
  while (::recv(sock, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
  const std::string message =
      fmt::format("The server has too many open connections ({}, --max-connections); retry later",
                  limits_.max_connections);
  const std::string body = error_body ? error_body("", 503, message) : MinimalErrorBody(message);
  const std::string response = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
      "{}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  const ssize_t n = ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  if (on_access) {
    HttpAccess a;
    a.status = 503;
    a.bytes = n > 0 ? n : 0;
    a.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    a.remote = PeerName(sock, false);
    on_access(a);
  }
  reaper_->Add(sock);
}

}  // namespace dsv4::server
