// libFuzzer target: untrusted bytes from an editor through the LSP frame
// decoder, the JSON-RPC checks and the server's dispatch (documents, edits,
// positions), with a backend that returns at once. Nothing may crash, hang
// or leave a request unanswered in a way that breaks the next frame.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lsp/server.h"

namespace {

class NullBackend : public dsv4::lsp::CompletionBackend {
 public:
  bool fim() const override { return true; }
  dsv4::Status Generate(const dsv4::lsp::CompletionPrompt&, const dsv4::lsp::CompletionOptions&,
                        const std::atomic<bool>&,
                        const std::function<bool(std::string_view)>& on_text) override {
    on_text("x\n\ny");
    return dsv4::Status::Ok();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv4::lsp;
  NullBackend backend;
  LspServer server(backend, LspServerOptions{}, [](const Json& m) {
    (void)m.dump(-1, ' ', false, Json::error_handler_t::replace);
  });
  // Every run starts initialized, so the fuzzer reaches the document methods.
  server.HandleBody(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{}})");
  FrameDecoder decoder;
  // Feed in two pieces, so that split frames are exercised too.
  const size_t half = size / 2;
  std::string body, error;
  for (const auto& [p, n] : {std::pair{data, half}, std::pair{data + half, size - half}}) {
    decoder.Feed(std::string_view(reinterpret_cast<const char*>(p), n));
    for (FrameDecoder::Result r;
         (r = decoder.Next(&body, &error)) != FrameDecoder::Result::kNeedMore;) {
      if (r == FrameDecoder::Result::kFrame) {
        server.HandleBody(body);
      } else {
        server.HandleFrameError(error);
      }
    }
  }
  // The input as one message body too: most inputs are not well framed.
  server.HandleBody(std::string_view(reinterpret_cast<const char*>(data), size));
  server.Stop();
  return 0;
}
