// `dsv4 lsp`: a Language Server (LSP over stdio) offering inline code
// completions from the local model or from a running `dsv4 serve`
// (src/lsp/server.h). Flags follow llama.vim / llama.vscode where they have
// one (--n-predict, --temperature). stdout carries the protocol only; logs go
// to stderr.
#include <signal.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "engine/engine.h"
#include "lsp/backend.h"
#include "lsp/server.h"

namespace dsv4::cli {
namespace {

struct LspArgs {
  LoadOptions load;
  lsp::LspServerOptions server;
  std::string remote_url;
  std::string api_key;
  std::string fim = "auto";
  int64_t ctx_size = 0;
  bool no_blank_line_stop = false;
  bool no_block_end_stop = false;
  int test_step_delay_ms = 0;
};

int Lsp(LspArgs a) {
  // An editor that closes the pipe must not kill the process mid-write.
  signal(SIGPIPE, SIG_IGN);
  a.server.completion.stop_at_blank_line = !a.no_blank_line_stop;
  a.server.completion.stop_at_block_end = !a.no_block_end_stop;
  a.server.version = DSV4_VERSION;
  Result<lsp::FimMode> fim = lsp::ParseFimMode(a.fim);
  if (!fim.ok()) return ReportError(fim.status());

  if (!a.remote_url.empty()) {
    if (!a.load.model_path.empty()) {
      return ReportError(InvalidArgument("--server and --model are both given",
                                         "complete through the server or load a model, not both"));
    }
    if (a.api_key.empty()) {
      if (const char* env = std::getenv("DSV4_API_KEY"); env != nullptr) a.api_key = env;
    }
    Result<std::unique_ptr<lsp::CompletionBackend>> backend =
        lsp::MakeRemoteBackend(a.remote_url, a.api_key, *fim);
    if (!backend.ok()) return ReportError(backend.status());
    return lsp::RunStdio(**backend, a.server, /*in_fd=*/0, /*out_fd=*/1);
  }

  Result<LoadedModel> loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  EngineOptions engine_options;
  // One completion runs at a time: a newer one cancels the one in flight.
  engine_options.max_sequences = 1;
  engine_options.ctx_size = a.ctx_size;
  engine_options.test_step_delay_ms = a.test_step_delay_ms;
  Result<std::unique_ptr<Engine>> engine = Engine::Start(*loaded, engine_options);
  if (!engine.ok()) return ReportError(engine.status());
  Result<std::unique_ptr<lsp::CompletionBackend>> backend = lsp::MakeEngineBackend(**engine, *fim);
  if (!backend.ok()) return ReportError(backend.status());
  return lsp::RunStdio(**backend, a.server, /*in_fd=*/0, /*out_fd=*/1);
}

}  // namespace

void RegisterLsp(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<LspArgs>();
  CLI::App* sub = app.add_subcommand(
      "lsp",
      "a Language Server (stdio) offering inline code completions: textDocument/inlineCompletion "
      "and textDocument/completion, from the local model or a running `dsv4 serve`");
  AddModelOptions(*sub, args->load);
  lsp::CompletionOptions& c = args->server.completion;
  sub->add_option("--server", args->remote_url,
                  "complete through a running `dsv4 serve` at this URL (its /v1/completions) "
                  "instead of loading a model, e.g. http://127.0.0.1:8080");
  sub->add_option("--api-key", args->api_key,
                  "the --server's API key (default: $DSV4_API_KEY when set)");
  sub->add_option("--n-predict", c.n_predict, "tokens per completion at most (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--temperature", c.temperature, "sampling temperature; 0 is greedy (default 0)")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--top-k", c.top_k, "top-k sampling; 0 is off (default 40)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--top-p", c.top_p, "top-p sampling; 1 is off (default 0.95)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--lsp-context-chars", c.context_chars,
                  "characters of text before the cursor in the prompt (default 8192)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_option("--lsp-suffix-chars", c.suffix_chars,
                  "characters of text after the cursor in a fill-in-the-middle prompt "
                  "(default 2048)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_option("--fim", args->fim,
                  "fill-in-the-middle prompts: auto (default: when the local model's vocabulary "
                  "has DeepSeek's FIM tokens; off with --server), on, off (the text before the "
                  "cursor alone)");
  sub->add_flag("--no-stop-at-blank-line", args->no_blank_line_stop,
                "let a completion run past a blank line");
  sub->add_flag("--no-stop-at-block-end", args->no_block_end_stop,
                "let a completion run past a line indented less than the cursor's line");
  sub->add_option("--ctx-size", args->ctx_size,
                  "tokens of context (prompt + completion); 0: min(model, 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_option("--test-step-delay-ms", args->test_step_delay_ms,
                  "TEST ONLY: sleep this long after each engine step")
      ->check(CLI::Range(0, 10000));
  sub->callback([args, &exit_code] { exit_code = Lsp(*args); });
}

}  // namespace dsv4::cli
