// Where completions come from: the local model through the serving engine
// (engine/engine.h), or a running `dsv4 serve` through its /v1/completions
// (streamed, so that a cancelled completion closes its HTTP request and the
// server cancels the sequence).
#ifndef DSV4_LSP_BACKEND_H_
#define DSV4_LSP_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/engine.h"
#include "lsp/completion.h"

namespace dsv4::lsp {

enum class FimMode { kAuto, kOn, kOff };

// "auto", "on", "off".
Result<FimMode> ParseFimMode(std::string_view text);

class CompletionBackend {
 public:
  virtual ~CompletionBackend() = default;
  // Whether prompts are built for fill-in-the-middle.
  virtual bool fim() const = 0;
  // Generates the continuation of `prompt`, handing text to `on_text` as it
  // arrives, until the model stops, n_predict tokens, `on_text` returns false,
  // or `cancel` is set (seen within a few tens of milliseconds: the local
  // sequence is cancelled, the remote HTTP request closed). A cancelled or
  // stopped generation returns Ok.
  virtual Status Generate(const CompletionPrompt& prompt, const CompletionOptions& options,
                          const std::atomic<bool>& cancel,
                          const std::function<bool(std::string_view)>& on_text) = 0;
};

// The loaded model behind `engine` (which must outlive the backend; the model
// needs a tokenizer). FIM with kAuto: when the vocabulary has the three FIM
// tokens; kOn without them is InvalidArgument.
Result<std::unique_ptr<CompletionBackend>> MakeEngineBackend(Engine& engine, FimMode fim);

// A `dsv4 serve` (or any OpenAI-compatible server) at `url`
// ("http://host:port", optionally with a path prefix), with a bearer key when
// `api_key` is not empty. FIM with kAuto is off: the vocabulary is the
// server's, which this side cannot see (kOn sends the FIM markers as text,
// which the server's tokenizer turns into its FIM tokens).
Result<std::unique_ptr<CompletionBackend>> MakeRemoteBackend(const std::string& url,
                                                             const std::string& api_key,
                                                             FimMode fim);

}  // namespace dsv4::lsp

#endif  // DSV4_LSP_BACKEND_H_
