// The LSP server's dispatch, document handling and completion worker (server.h).
#include "lsp/server.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

namespace dsv4::lsp {
namespace {

// Reads params fields; each returns false when the field is missing or of
// the wrong type, with *error naming it.
bool GetObject(const Json& j, const char* key, const Json** out, std::string* error) {
  auto it = j.is_object() ? j.find(key) : j.end();
  if (!j.is_object() || it == j.end() || !it->is_object()) {
    *error = std::string("'") + key + "' must be an object";
    return false;
  }
  *out = &*it;
  return true;
}

bool GetString(const Json& j, const char* key, std::string* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    *error = std::string("'") + key + "' must be a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool GetInt(const Json& j, const char* key, int64_t* out, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    *error = std::string("'") + key + "' must be an integer";
    return false;
  }
  *out = it->get<int64_t>();
  return true;
}

bool GetPosition(const Json& j, const char* key, Position* out, std::string* error) {
  const Json* p = nullptr;
  if (!GetObject(j, key, &p, error)) return false;
  if (!GetInt(*p, "line", &out->line, error) || !GetInt(*p, "character", &out->character, error)) {
    *error = std::string("'") + key + "': " + *error;
    return false;
  }
  if (out->line < 0 || out->character < 0) {
    *error = std::string("'") + key + "' must not be negative";
    return false;
  }
  return true;
}

Json PositionJson(Position p) { return Json{{"line", p.line}, {"character", p.character}}; }

// A completion item's label: its first line, at most 80 bytes
// (cut at a character boundary).
std::string Label(const std::string& text) {
  std::string label = text.substr(0, text.find('\n'));
  if (label.size() > 80) {
    size_t n = 80;
    while (n > 0 && (static_cast<unsigned char>(label[n]) & 0xC0) == 0x80) --n;
    label = label.substr(0, n) + "…";
  }
  return label.empty() ? text : label;
}

}  // namespace

struct LspServer::Job {
  Json id;
  std::string uri;
  bool inline_kind = true;
  Position position;
  CompletionPrompt prompt;
  std::atomic<bool> cancelled{false};
};

LspServer::LspServer(CompletionBackend& backend, LspServerOptions options, Writer write)
    : backend_(backend), options_(std::move(options)), write_(std::move(write)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

LspServer::~LspServer() { Stop(); }

void LspServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& job : jobs_) job->cancelled = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void LspServer::HandleFrameError(const std::string& message) {
  ReplyError(nullptr, ErrorCode::kParseError, "unreadable frame: " + message);
}

void LspServer::HandleBody(std::string_view body) {
  Message m;
  MessageError error;
  if (!ParseMessage(body, &m, &error)) {
    ReplyError(error.id, error.code, error.message);
    return;
  }
  switch (m.kind) {
    case Message::Kind::kRequest:
      HandleRequest(m);
      break;
    case Message::Kind::kNotification:
      HandleNotification(m);
      break;
    case Message::Kind::kResponse:
      break;  // this server sends no requests
  }
}

void LspServer::HandleRequest(const Message& m) {
  if (!initialized_ && m.method != "initialize") {
    ReplyError(m.id, ErrorCode::kServerNotInitialized,
               "the server is not initialized; send 'initialize' first");
    return;
  }
  if (shutdown_) {
    ReplyError(m.id, ErrorCode::kInvalidRequest, "the server is shut down; send 'exit'");
    return;
  }
  if (m.method == "initialize") {
    if (initialized_) {
      ReplyError(m.id, ErrorCode::kInvalidRequest, "'initialize' was already received");
      return;
    }
    initialized_ = true;
    Json capabilities = {
        {"positionEncoding", "utf-16"},
        // openClose, and incremental changes (TextDocumentSyncKind.Incremental = 2).
        {"textDocumentSync", {{"openClose", true}, {"change", 2}}},
        {"inlineCompletionProvider", Json::object()},
        {"completionProvider", {{"resolveProvider", false}}},
    };
    Reply(m.id, {{"capabilities", std::move(capabilities)},
                 {"serverInfo", {{"name", "dsv4"}, {"version", options_.version}}}});
    return;
  }
  if (m.method == "shutdown") {
    shutdown_ = true;
    CancelJobs([](const Job&) { return true; });
    Reply(m.id, nullptr);
    return;
  }
  if (m.method == "textDocument/inlineCompletion") return Complete(m, /*inline_kind=*/true);
  if (m.method == "textDocument/completion") return Complete(m, /*inline_kind=*/false);
  ReplyError(m.id, ErrorCode::kMethodNotFound, "method not found: " + m.method);
}

void LspServer::HandleNotification(const Message& m) {
  if (m.method == "exit") {
    exited_ = true;
    return;
  }
  // Before initialize, notifications other than exit are dropped (the specification).
  if (!initialized_) return;
  std::string error;
  const Json* doc = nullptr;
  std::string uri;
  if (m.method == "$/cancelRequest") {
    if (!m.params.is_object() || !m.params.contains("id")) return;
    const Json id = m.params["id"];
    CancelJobs([&id](const Job& j) { return j.id == id; });
    return;
  }
  const bool doc_method = m.method == "textDocument/didOpen" ||
                          m.method == "textDocument/didChange" ||
                          m.method == "textDocument/didClose";
  if (!doc_method) return;  // unknown notifications are ignored
  if (!GetObject(m.params, "textDocument", &doc, &error) || !GetString(*doc, "uri", &uri, &error)) {
    std::fprintf(stderr, "dsv4 lsp: %s ignored: %s\n", m.method.c_str(), error.c_str());
    return;
  }
  if (m.method == "textDocument/didOpen") {
    std::string text;
    int64_t version = 0;
    if (!GetString(*doc, "text", &text, &error) || !GetInt(*doc, "version", &version, &error)) {
      std::fprintf(stderr, "dsv4 lsp: didOpen of %s ignored: %s\n", uri.c_str(), error.c_str());
      return;
    }
    documents_.Open(uri, std::move(text), version);
    return;
  }
  // A change or a close makes the completion in flight for the document stale.
  CancelJobs([&uri](const Job& j) { return j.uri == uri; });
  if (m.method == "textDocument/didClose") {
    documents_.Close(uri);
    return;
  }
  int64_t version = 0;
  GetInt(*doc, "version", &version, &error);
  auto changes = m.params.find("contentChanges");
  if (changes == m.params.end() || !changes->is_array()) {
    std::fprintf(stderr, "dsv4 lsp: didChange of %s ignored: 'contentChanges' must be an array\n",
                 uri.c_str());
    return;
  }
  std::vector<TextChange> parsed;
  for (const Json& c : *changes) {
    TextChange t;
    if (!c.is_object() || !GetString(c, "text", &t.text, &error)) {
      std::fprintf(stderr, "dsv4 lsp: didChange of %s ignored: %s\n", uri.c_str(),
                   c.is_object() ? error.c_str() : "a change must be an object");
      return;
    }
    if (c.contains("range")) {
      const Json* range = nullptr;
      if (!GetObject(c, "range", &range, &error) ||
          !GetPosition(*range, "start", &t.start, &error) ||
          !GetPosition(*range, "end", &t.end, &error)) {
        std::fprintf(stderr, "dsv4 lsp: didChange of %s ignored: %s\n", uri.c_str(), error.c_str());
        return;
      }
      t.has_range = true;
    }
    parsed.push_back(std::move(t));
  }
  if (Status st = documents_.Change(uri, version, parsed); !st.ok()) {
    std::fprintf(stderr, "dsv4 lsp: didChange ignored: %s\n", st.message().c_str());
  }
}

void LspServer::Complete(const Message& m, bool inline_kind) {
  std::string error, uri;
  const Json* doc = nullptr;
  Position pos;
  if (!m.params.is_object() || !GetObject(m.params, "textDocument", &doc, &error) ||
      !GetString(*doc, "uri", &uri, &error) || !GetPosition(m.params, "position", &pos, &error)) {
    ReplyError(m.id, ErrorCode::kInvalidParams,
               m.method + ": " + (m.params.is_object() ? error : "params must be an object"));
    return;
  }
  const Document* d = documents_.Find(uri);
  if (d == nullptr) {
    ReplyError(m.id, ErrorCode::kInvalidParams,
               m.method + ": the document is not open: " + uri + " (send didOpen first)");
    return;
  }
  // A newer request for the document replaces the one in flight.
  CancelJobs([&uri](const Job& j) { return j.uri == uri; });
  auto job = std::make_shared<Job>();
  job->id = m.id;
  job->uri = uri;
  job->inline_kind = inline_kind;
  job->position = pos;
  const size_t offset = OffsetOf(d->text, pos);
  const std::string_view text(d->text);
  job->prompt = BuildCompletionPrompt(text.substr(0, offset), text.substr(offset), backend_.fim(),
                                      options_.completion);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    jobs_.push_back(job);
  }
  cv_.notify_all();
}

void LspServer::CancelJobs(const std::function<bool(const Job&)>& pred) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : jobs_) {
    if (pred(*job)) job->cancelled = true;
  }
}

void LspServer::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_
      job = queue_.front();
      queue_.pop_front();
      if (stop_) job->cancelled = true;
    }
    Run(*job);
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(jobs_, job);
  }
}

void LspServer::Run(Job& job) {
  if (job.cancelled) {
    ReplyError(job.id, ErrorCode::kRequestCancelled, "the completion was cancelled");
    return;
  }
  CompletionTrimmer trimmer(job.prompt.cursor_line, options_.completion);
  const Status st =
      backend_.Generate(job.prompt, options_.completion, job.cancelled,
                        [&trimmer](std::string_view piece) { return trimmer.Push(piece); });
  if (job.cancelled) {
    ReplyError(job.id, ErrorCode::kRequestCancelled, "the completion was cancelled");
    return;
  }
  if (!st.ok()) {
    ReplyError(job.id, ErrorCode::kRequestFailed,
               "completion failed: " + st.message() +
                   (st.hint().empty() ? "" : " (hint: " + st.hint() + ")"));
    return;
  }
  const std::string& text = trimmer.text();
  const Json range = {{"start", PositionJson(job.position)}, {"end", PositionJson(job.position)}};
  Json items = Json::array();
  if (job.inline_kind) {
    if (!text.empty()) items.push_back({{"insertText", text}, {"range", range}});
    Reply(job.id, {{"items", std::move(items)}});
    return;
  }
  if (!text.empty()) {
    items.push_back({{"label", Label(text)},
                     {"kind", 1},  // CompletionItemKind.Text
                     {"detail", "dsv4"},
                     {"insertTextFormat", 1},  // PlainText
                     {"textEdit", {{"range", range}, {"newText", text}}}});
  }
  // Incomplete: the continuation depends on the exact cursor, so a client asks again as
  // the user types rather than filtering this list.
  Reply(job.id, {{"isIncomplete", true}, {"items", std::move(items)}});
}

int RunStdio(CompletionBackend& backend, const LspServerOptions& options, int in_fd, int out_fd) {
  std::mutex write_mu;
  auto write = [&write_mu, out_fd](const Json& message) {
    const std::string frame =
        EncodeFrame(message.dump(-1, ' ', false, Json::error_handler_t::replace));
    std::lock_guard<std::mutex> lock(write_mu);
    size_t done = 0;
    while (done < frame.size()) {
      const ssize_t n = ::write(out_fd, frame.data() + done, frame.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the client has gone; the read side sees the end too
      done += static_cast<size_t>(n);
    }
  };
  LspServer server(backend, options, write);
  FrameDecoder decoder;
  std::string buffer(1 << 16, '\0'), body, error;
  while (!server.exited()) {
    const ssize_t n = ::read(in_fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    decoder.Feed(std::string_view(buffer.data(), static_cast<size_t>(n)));
    for (FrameDecoder::Result r; !server.exited() && (r = decoder.Next(&body, &error)) !=
                                                         FrameDecoder::Result::kNeedMore;) {
      if (r == FrameDecoder::Result::kFrame) {
        server.HandleBody(body);
      } else {
        server.HandleFrameError(error);
      }
    }
  }
  server.Stop();
  return server.exit_code();
}

}  // namespace dsv4::lsp
