// `dsv4 serve`: the OpenAI- and Anthropic-compatible HTTP server
// (server/server.h) over one loaded model and the engine loop
// (engine/engine.h). Prints "dsv4 serve: listening on http://HOST:PORT" on
// stdout once the port is bound (tests read it to find an ephemeral port), and
// stops cleanly on SIGINT / SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "base/log.h"
#include "cli/commands.h"
#include "engine/echo_model.h"
#include "engine/engine.h"
#include "server/server.h"

namespace dsv4::cli {
namespace {

struct ServeArgs {
  LoadOptions load;
  server::ServerOptions server;
  EngineOptions engine;
  EngineRuntimeFlags runtime;  // the model's runtime policies, as `dsv4 run` takes them
  std::string chat_format = "auto";
  bool test_echo_model = false;
};

// The model's name in the API: --model-name, else the file or directory name
// without its extension.
std::string DefaultModelId(const LoadedModel& m) {
  std::filesystem::path p(m.path);
  if (p.filename().empty()) p = p.parent_path();
  std::string id = p.stem().string();
  return id.empty() ? "dsv4" : id;
}

int Serve(ServeArgs a) {
  // Signals go to the waiter thread below, not to the HTTP or engine threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that disconnects mid-response must not kill the process.
  signal(SIGPIPE, SIG_IGN);

  if (Status st = ParseEngineRuntimeFlags(a.runtime); !st.ok()) return ReportError(st);
  Result<LoadedModel> loaded =
      a.test_echo_model ? LoadEchoModel(a.load.tokenizer_path) : LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  LoadedModel& m = *loaded;
  // Before the engine makes its caches (the KV budget is read by NewCache); the
  // binding keeps DeepSeek-V4's router options attached while the server runs.
  auto binding = ApplyEngineOptions(*m.model, a.runtime.options);
  if (!binding.ok()) return ReportError(binding.status());
  if (a.server.model_id.empty()) a.server.model_id = DefaultModelId(m);
  if (a.chat_format != "auto") {
    auto f = server::ParseChatFormat(a.chat_format);
    if (!f.ok()) return ReportError(f.status());
    a.server.chat_format = *f;
  }
  if (a.server.host != "127.0.0.1" && a.server.host != "localhost" && a.server.host != "::1" &&
      a.server.api_key.empty()) {
    LOG_WARNING("serve: listening on {} without --api-key: anyone who can reach it can use it",
                a.server.host);
  }
  auto engine = Engine::Start(m, a.engine);
  if (!engine.ok()) return ReportError(engine.status());
  server::Server srv(**engine, a.server);
  if (Status st = srv.Bind(); !st.ok()) return ReportError(st);
  std::printf("dsv4 serve: listening on http://%s:%d (model \"%s\", context %lld, %d slots)\n",
              a.server.host.c_str(), srv.port(), a.server.model_id.c_str(),
              static_cast<long long>((*engine)->ctx_size()), a.engine.max_sequences);
  std::fflush(stdout);

  std::thread waiter([&srv, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG_INFO("serve: signal {}, stopping", sig);
    srv.Stop();
  });
  srv.Run();
  // Run returned without a signal (e.g. the listener failed): wake the waiter.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand(
      "serve", "OpenAI- and Anthropic-compatible HTTP server (continuous batching, streaming)");
  AddModelOptions(*sub, args->load);
  AddEngineRuntimeFlags(*sub, args->runtime);
  sub->add_option("--host", args->server.host,
                  "address to bind (default 127.0.0.1; anything else exposes the server)");
  sub->add_option("--port", args->server.port, "port (default 8080; 0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", args->server.api_key,
                  "require this key (Authorization: Bearer KEY or x-api-key: KEY) on /v1/* and "
                  "/metrics");
  sub->add_option("--model-name", args->server.model_id,
                  "the model's name in the API (default: the model file name)");
  sub->add_option("--max-sequences", args->engine.max_sequences,
                  "sequences generated at once, each with its own KV cache (default 8)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--max-queue", args->engine.max_queue,
                  "sequences that may wait for a slot; more get 503 (default 64)")
      ->check(CLI::Range(0, 1000000));
  sub->add_option("-c,--ctx-size", args->engine.ctx_size,
                  "tokens per sequence, prompt + output (default: the model's, at most 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub->add_option("--prefill-chunk", args->engine.prefill_chunk,
                  "prompt tokens prefilled per engine step (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--max-body-bytes", args->server.max_body_bytes,
                  "largest request body; larger ones get 413 (default 8 MiB)");
  sub->add_option("--max-n", args->server.max_n, "largest n (choices per request) (default 8)")
      ->check(CLI::Range(1, 128));
  sub->add_option("--http-threads", args->server.http_threads,
                  "HTTP worker threads (default: max-sequences + max-queue + 64)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--chat-format", args->chat_format,
                  "auto (default: dsv4 when the tokenizer has the DeepSeek-V4 specials), dsv4, "
                  "plain");
  sub->add_flag("--test-echo-model", args->test_echo_model,
                "TEST ONLY: serve the scripted echo model (engine/echo_model.h) over --tokenizer "
                "instead of a real model");
  sub->add_option("--test-step-delay-ms", args->engine.test_step_delay_ms,
                  "TEST ONLY: sleep this long after each engine step")
      ->check(CLI::Range(0, 10000));
  args->engine.max_sequences = 8;
  sub->callback([args, &exit_code] { exit_code = Serve(*args); });
}

}  // namespace dsv4::cli
