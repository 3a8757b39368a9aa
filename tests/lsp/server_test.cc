// The LSP server's protocol (lsp/server.h) over a scripted backend: lifecycle,
// error codes, documents, completions and their cancellation.
#include "lsp/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace dsv4::lsp {
namespace {

using namespace std::chrono_literals;

// Hands out scripted text; with `block` set, generates until cancelled.
class ScriptedBackend : public CompletionBackend {
 public:
  bool fim() const override { return false; }
  Status Generate(const CompletionPrompt& prompt, const CompletionOptions&,
                  const std::atomic<bool>& cancel,
                  const std::function<bool(std::string_view)>& on_text) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      prompts.push_back(prompt.text);
    }
    cv.notify_all();
    if (block) {
      while (!cancel) std::this_thread::sleep_for(1ms);
      return Status::Ok();
    }
    if (!error.ok()) return error;
    for (const std::string& p : pieces) {
      if (!on_text(p)) break;
    }
    return Status::Ok();
  }
  size_t started() {
    std::lock_guard<std::mutex> lock(mu);
    return prompts.size();
  }

  std::atomic<bool> block{false};
  std::vector<std::string> pieces = {"there was", " a cat.\n\nThe end"};
  Status error;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> prompts;
};

class LspServerTest : public ::testing::Test {
 protected:
  LspServerTest()
      : server_(backend_, LspServerOptions{}, [this](const Json& m) {
          std::lock_guard<std::mutex> lock(mu_);
          out_.push_back(m);
          cv_.notify_all();
        }) {}

  void Send(const Json& m) { server_.HandleBody(m.dump()); }
  void Request(const Json& id, const std::string& method, Json params = Json::object()) {
    Send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}});
  }
  void Notify(const std::string& method, Json params = Json::object()) {
    Send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
  }
  // The reply to `id`, waiting up to 5 s for it.
  Json Reply(const Json& id) {
    std::unique_lock<std::mutex> lock(mu_);
    Json found;
    cv_.wait_for(lock, 5s, [&] {
      for (const Json& m : out_) {
        if (m.contains("id") && m["id"] == id) {
          found = m;
          return true;
        }
      }
      return false;
    });
    EXPECT_FALSE(found.is_null()) << "no reply to " << id.dump();
    return found;
  }
  size_t Replies() {
    std::lock_guard<std::mutex> lock(mu_);
    return out_.size();
  }
  void Initialize() {
    Request(0, "initialize", {{"capabilities", Json::object()}});
    ASSERT_TRUE(Reply(0).contains("result"));
    Notify("initialized");
  }
  void Open(const std::string& uri, const std::string& text) {
    Notify("textDocument/didOpen",
           {{"textDocument",
             {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", text}}}});
  }
  static Json At(const std::string& uri, int line, int character) {
    return {{"textDocument", {{"uri", uri}}},
            {"position", {{"line", line}, {"character", character}}}};
  }
  void WaitStarted(size_t n) {
    std::unique_lock<std::mutex> lock(backend_.mu);
    backend_.cv.wait_for(lock, 5s, [&] { return backend_.prompts.size() >= n; });
    ASSERT_GE(backend_.prompts.size(), n);
  }
  static int Code(const Json& reply) { return reply["error"]["code"].get<int>(); }

  ScriptedBackend backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Json> out_;
  LspServer server_;
};

TEST_F(LspServerTest, InitializeAdvertisesCompletions) {
  Request(1, "initialize", {{"capabilities", Json::object()}});
  const Json r = Reply(1);
  const Json& caps = r["result"]["capabilities"];
  EXPECT_TRUE(caps.contains("inlineCompletionProvider"));
  EXPECT_TRUE(caps.contains("completionProvider"));
  EXPECT_EQ(caps["textDocumentSync"]["change"], 2);
  EXPECT_EQ(caps["positionEncoding"], "utf-16");
  EXPECT_EQ(r["result"]["serverInfo"]["name"], "dsv4");
  Request(2, "initialize");
  EXPECT_EQ(Code(Reply(2)), static_cast<int>(ErrorCode::kInvalidRequest));
}

TEST_F(LspServerTest, RequestsBeforeInitializeAreRefused) {
  Request(1, "textDocument/inlineCompletion", At("file:///a", 0, 0));
  EXPECT_EQ(Code(Reply(1)), -32002);
  Request("s", "shutdown");
  EXPECT_EQ(Code(Reply("s")), -32002);
}

TEST_F(LspServerTest, UnknownMethods) {
  Initialize();
  Request(5, "workspace/symbol", {{"query", "x"}});
  const Json r = Reply(5);
  EXPECT_EQ(Code(r), -32601);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("workspace/symbol"), std::string::npos);
  const size_t before = Replies();
  Notify("$/setTrace", {{"value", "off"}});
  Notify("workspace/didChangeConfiguration", {{"settings", nullptr}});
  Request(6, "shutdown");
  Reply(6);
  EXPECT_EQ(Replies(), before + 1);  // the notifications got no reply
}

TEST_F(LspServerTest, MalformedInputGetsJsonRpcErrors) {
  server_.HandleBody("{not json");
  server_.HandleBody(R"({"jsonrpc":"2.0","id":9,"method":1})");
  server_.HandleFrameError("the header block has no Content-Length");
  std::unique_lock<std::mutex> lock(mu_);
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_EQ(Code(out_[0]), -32700);
  EXPECT_TRUE(out_[0]["id"].is_null());
  EXPECT_EQ(Code(out_[1]), -32600);
  EXPECT_EQ(out_[1]["id"], 9);
  EXPECT_EQ(Code(out_[2]), -32700);
  EXPECT_NE(out_[2]["error"]["message"].get<std::string>().find("Content-Length"),
            std::string::npos);
}

TEST_F(LspServerTest, InlineCompletionIsTheTrimmedContinuation) {
  Initialize();
  Open("file:///s.txt", "Once upon a time, ");
  Request(1, "textDocument/inlineCompletion",
          {{"textDocument", {{"uri", "file:///s.txt"}}},
           {"position", {{"line", 0}, {"character", 18}}},
           {"context", {{"triggerKind", 2}}}});
  const Json r = Reply(1);
  ASSERT_TRUE(r.contains("result")) << r.dump();
  const Json& items = r["result"]["items"];
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0]["insertText"], "there was a cat.");  // cut before the blank line
  EXPECT_EQ(items[0]["range"]["start"]["character"], 18);
  EXPECT_EQ(backend_.prompts.back(), "Once upon a time, ");
}

TEST_F(LspServerTest, CompletionIsOneItem) {
  Initialize();
  Open("file:///s.txt", "Once upon a time, ");
  Request(1, "textDocument/completion", At("file:///s.txt", 0, 18));
  const Json r = Reply(1);
  ASSERT_TRUE(r.contains("result")) << r.dump();
  ASSERT_EQ(r["result"]["items"].size(), 1u);
  const Json& item = r["result"]["items"][0];
  EXPECT_EQ(item["label"], "there was a cat.");
  EXPECT_EQ(item["textEdit"]["newText"], "there was a cat.");
  EXPECT_EQ(item["textEdit"]["range"]["end"]["character"], 18);
}

TEST_F(LspServerTest, EditsAndUtf16PositionsReachThePrompt) {
  Initialize();
  Open("file:///e.py", "s = \"😀\"\nx");
  Notify(
      "textDocument/didChange",
      {{"textDocument", {{"uri", "file:///e.py"}, {"version", 2}}},
       {"contentChanges",
        {{{"range",
           {{"start", {{"line", 1}, {"character", 1}}}, {"end", {{"line", 1}, {"character", 1}}}}},
          {"text", " = 1\ny"}}}}});
  // Line 0, character 7: after the emoji (2 UTF-16 units) and before the closing quote.
  Request(1, "textDocument/inlineCompletion", At("file:///e.py", 0, 7));
  ASSERT_TRUE(Reply(1).contains("result"));
  EXPECT_EQ(backend_.prompts.back(), "s = \"😀");
  Request(2, "textDocument/inlineCompletion", At("file:///e.py", 2, 1));
  ASSERT_TRUE(Reply(2).contains("result"));
  EXPECT_EQ(backend_.prompts.back(), "s = \"😀\"\nx = 1\ny");
  // A full-text change replaces everything.
  Notify("textDocument/didChange", {{"textDocument", {{"uri", "file:///e.py"}, {"version", 3}}},
                                    {"contentChanges", {{{"text", "new"}}}}});
  Request(3, "textDocument/inlineCompletion", At("file:///e.py", 0, 3));
  ASSERT_TRUE(Reply(3).contains("result"));
  EXPECT_EQ(backend_.prompts.back(), "new");
}

TEST_F(LspServerTest, BadCompletionParams) {
  Initialize();
  Request(1, "textDocument/inlineCompletion", At("file:///missing", 0, 0));
  const Json r = Reply(1);
  EXPECT_EQ(Code(r), -32602);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("not open"), std::string::npos);
  Request(2, "textDocument/inlineCompletion", {{"textDocument", {{"uri", "file:///a"}}}});
  EXPECT_EQ(Code(Reply(2)), -32602);
  Request(3, "textDocument/completion", At("file:///a", -1, 0));
  EXPECT_EQ(Code(Reply(3)), -32602);
  Send({{"jsonrpc", "2.0"}, {"id", 4}, {"method", "textDocument/completion"}, {"params", {1, 2}}});
  EXPECT_EQ(Code(Reply(4)), -32602);
}

TEST_F(LspServerTest, BackendErrorIsRequestFailed) {
  Initialize();
  Open("file:///a", "x");
  backend_.error = IoError("cannot complete through the server", "check --server");
  Request(1, "textDocument/inlineCompletion", At("file:///a", 0, 1));
  const Json r = Reply(1);
  EXPECT_EQ(Code(r), -32803);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("check --server"), std::string::npos);
}

TEST_F(LspServerTest, ANewRequestCancelsTheOneInFlight) {
  Initialize();
  Open("file:///a", "x");
  backend_.block = true;
  Request(1, "textDocument/inlineCompletion", At("file:///a", 0, 1));
  WaitStarted(1);
  Request(2, "textDocument/inlineCompletion", At("file:///a", 0, 1));
  EXPECT_EQ(Code(Reply(1)), -32800);
  WaitStarted(2);
  // The second one generates until cancelled too: $/cancelRequest ends it.
  Notify("$/cancelRequest", {{"id", 2}});
  EXPECT_EQ(Code(Reply(2)), -32800);
}

TEST_F(LspServerTest, CancelRequestAndDidChangeCancel) {
  Initialize();
  Open("file:///a", "x");
  Open("file:///b", "y");
  backend_.block = true;
  Request("r1", "textDocument/inlineCompletion", At("file:///a", 0, 1));
  WaitStarted(1);
  Notify("$/cancelRequest", {{"id", "r1"}});
  EXPECT_EQ(Code(Reply("r1")), -32800);
  Request("r2", "textDocument/inlineCompletion", At("file:///b", 0, 1));
  WaitStarted(2);
  Notify("textDocument/didChange", {{"textDocument", {{"uri", "file:///b"}, {"version", 2}}},
                                    {"contentChanges", {{{"text", "yy"}}}}});
  EXPECT_EQ(Code(Reply("r2")), -32800);
}

TEST_F(LspServerTest, ShutdownThenExit) {
  Initialize();
  EXPECT_FALSE(server_.exited());
  Request(1, "shutdown");
  const Json r = Reply(1);
  ASSERT_TRUE(r.contains("result"));
  EXPECT_TRUE(r["result"].is_null());
  Request(2, "textDocument/completion", At("file:///a", 0, 0));
  EXPECT_EQ(Code(Reply(2)), -32600);
  Notify("exit");
  EXPECT_TRUE(server_.exited());
  EXPECT_EQ(server_.exit_code(), 0);
}

TEST_F(LspServerTest, ExitWithoutShutdownIsCodeOne) {
  Initialize();
  Notify("exit");
  EXPECT_TRUE(server_.exited());
  EXPECT_EQ(server_.exit_code(), 1);
}

TEST(RunStdio, ServesFramesFromAPipe) {
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  ScriptedBackend backend;
  int code = -1;
  std::thread t([&] { code = RunStdio(backend, LspServerOptions{}, in[0], out[1]); });
  const std::string input =
      EncodeFrame(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})") +
      "Content-Length: x\r\n\r\n" + EncodeFrame(R"({"jsonrpc":"2.0","id":2,"method":"shutdown"})") +
      EncodeFrame(R"({"jsonrpc":"2.0","method":"exit"})");
  ASSERT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  t.join();
  close(in[1]);
  close(out[1]);
  EXPECT_EQ(code, 0);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) output.append(buf, n);
  close(in[0]);
  close(out[0]);
  FrameDecoder d;
  d.Feed(output);
  std::string body, error;
  std::vector<Json> replies;
  while (d.Next(&body, &error) == FrameDecoder::Result::kFrame)
    replies.push_back(Json::parse(body));
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0]["id"], 1);
  EXPECT_EQ(replies[1]["error"]["code"], -32700);
  EXPECT_EQ(replies[2]["id"], 2);
  EXPECT_EQ(d.buffered(), 0u);
}

}  // namespace
}  // namespace dsv4::lsp
