// `dsv4 lsp`: a Language Server Protocol server that offers inline code
// completions (LSP 3.18 textDocument/inlineCompletion, and one-item
// textDocument/completion for clients without it) from a CompletionBackend.
//
// Threads: the reader (HandleBody, from RunStdio's loop over stdin) parses
// every message, keeps the documents and answers at once everything but
// completions; completions run one at a time on a worker thread, so the
// reader sees $/cancelRequest, a didChange or a newer completion request for
// the same document while the model generates, and cancels the one in flight
// (it is answered with RequestCancelled, -32800). Replies go through one
// Writer, which serialises them.
#ifndef DSV4_LSP_SERVER_H_
#define DSV4_LSP_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lsp/backend.h"
#include "lsp/completion.h"
#include "lsp/document.h"
#include "lsp/jsonrpc.h"

namespace dsv4::lsp {

struct LspServerOptions {
  CompletionOptions completion;
  std::string version;  // serverInfo.version
};

class LspServer {
 public:
  // Writes one message; called from the reader and the worker thread, one at a time.
  using Writer = std::function<void(const Json&)>;
  LspServer(CompletionBackend& backend, LspServerOptions options, Writer write);
  ~LspServer();  // Stop()
  LspServer(const LspServer&) = delete;
  LspServer& operator=(const LspServer&) = delete;

  // One frame's body (reader thread).
  void HandleBody(std::string_view body);
  // A frame the decoder could not read: answered with ParseError (id null).
  void HandleFrameError(const std::string& message);
  // Cancels every completion and joins the worker (idempotent).
  void Stop();

  // After the `exit` notification: whether it came, and the exit code the
  // specification asks for (0 after shutdown, else 1).
  bool exited() const { return exited_; }
  int exit_code() const { return shutdown_ ? 0 : 1; }

 private:
  struct Job;
  void HandleRequest(const Message& m);
  void HandleNotification(const Message& m);
  void Complete(const Message& m, bool inline_kind);
  void Reply(const Json& id, Json result) { write_(MakeResult(id, std::move(result))); }
  void ReplyError(const Json& id, ErrorCode code, std::string_view message) {
    write_(MakeError(id, code, message));
  }
  // Marks the queued and running jobs `pred` selects as cancelled.
  void CancelJobs(const std::function<bool(const Job&)>& pred);
  void WorkerLoop();
  void Run(Job& job);

  CompletionBackend& backend_;
  const LspServerOptions options_;
  Writer write_;
  DocumentStore documents_;  // reader thread only
  bool initialized_ = false, shutdown_ = false, exited_ = false;

  std::mutex mu_;  // guards queue_, jobs_, stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> jobs_;  // queued and running
  bool stop_ = false;
  std::thread worker_;
};

// Serves LSP messages from `in_fd` to `out_fd` until `exit` or the end of
// the input; returns the process exit code (0 after shutdown, else 1).
int RunStdio(CompletionBackend& backend, const LspServerOptions& options, int in_fd, int out_fd);

}  // namespace dsv4::lsp

#endif  // DSV4_LSP_SERVER_H_
