// `dsv4 serve`: the OpenAI- and Anthropic-compatible HTTP server
// (server/server.h) over one loaded model and the engine loop
// (engine/engine.h). Prints "dsv4 serve: listening on http://HOST:PORT" on
// stdout once the port is bound (tests read it to find an ephemeral port).
// SIGINT / SIGTERM: stop accepting, let responses in flight finish for
// --shutdown-grace seconds (then streams end with an error event), exit 0; a
// second signal exits at once (status 1).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
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
  std::string speculative = "0";  // draft tokens per step, or "auto"; "0" = off
  std::string api_key_file;
  double read_timeout_s = 10;
  double shutdown_grace_s = 10;
  bool test_echo_model = false;
};

// The API key: --api-key, else --api-key-file, else $DSV4_API_KEY (the flag
// shows in `ps`; the file and the variable do not). Empty: no key.
Result<std::string> ResolveApiKey(const ServeArgs& a) {
  if (!a.server.api_key.empty() && !a.api_key_file.empty()) {
    return InvalidArgument("both --api-key and --api-key-file are given", "pass one of them");
  }
  if (!a.server.api_key.empty()) return a.server.api_key;
  if (!a.api_key_file.empty()) {
    std::ifstream in(a.api_key_file, std::ios::binary);
    if (!in) {
      return IoError("cannot read the API key file " + a.api_key_file + ": " + std::strerror(errno),
                     "check --api-key-file's path and permissions");
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string key = text.str();
    // One key, on the file's first line; surrounding whitespace is not part of it.
    key = key.substr(0, key.find('\n'));
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(0, 1);
    if (key.empty()) {
      return InvalidArgument("the API key file " + a.api_key_file + " is empty",
                             "write the key on its first line");
    }
    return key;
  }
  if (const char* env = std::getenv("DSV4_API_KEY"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  return std::string();
}

// Comma-separated list, entries trimmed, empty ones dropped.
std::vector<std::string> SplitList(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      while (!item.empty() && item.back() == ' ') item.pop_back();
      while (!item.empty() && item.front() == ' ') item.erase(0, 1);
      if (!item.empty()) out.push_back(item);
    }
  }
  return out;
}

// Each connection holds a descriptor: let the process open as many as its hard limit allows.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

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
  Result<SpeculativeOptions> spec = ParseSpeculative(a.speculative);
  if (!spec.ok()) return ReportError(spec.status());
  a.engine.speculative = *spec;
  Result<std::string> key = ResolveApiKey(a);
  if (!key.ok()) return ReportError(key.status());
  a.server.api_key = *key;
  a.server.read_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(a.read_timeout_s * 1000)));
  a.server.allowed_hosts = SplitList(a.server.allowed_hosts);
  a.server.cors_origins = SplitList(a.server.cors_origins);
  RaiseOpenFileLimit();

  Result<LoadedModel> loaded =
      a.test_echo_model ? LoadEchoModel(a.load.tokenizer_path) : LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  LoadedModel& m = *loaded;
  // Before the engine makes its caches (the KV budget is read by NewCache); the
  // model keeps the options (DeepSeek-V4's router options too) while the server runs.
  if (Status st = ApplyEngineOptions(*m.model, a.runtime.options); !st.ok()) {
    return ReportError(st);
  }
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
  if (!a.engine.kv_cache_dir.empty()) {
    a.engine.state_fingerprint = StateFingerprint(ModelFingerprint(m), a.runtime.options);
  }
  auto engine = Engine::Start(m, a.engine);
  if (!engine.ok()) return ReportError(engine.status());
  server::Server srv(**engine, a.server);
  if (Status st = srv.Bind(); !st.ok()) return ReportError(st);
  std::printf("dsv4 serve: listening on http://%s:%d (model \"%s\", context %lld, %d slots)\n",
              a.server.host.c_str(), srv.port(), a.server.model_id.c_str(),
              static_cast<long long>((*engine)->ctx_size()), a.engine.max_sequences);
  std::fflush(stdout);

  std::atomic<bool> finished{false};
  const auto grace =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(a.shutdown_grace_s * 1000)));
  std::thread waiter([&srv, &finished, signals, grace, seconds = a.shutdown_grace_s] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (finished.load()) return;
    LogLine(LogLevel::kInfo,
            fmt::format("serve: signal {}, shutting down (responses in flight get {} s; a second "
                        "signal exits at once)",
                        sig, seconds));
    srv.Shutdown(grace);
    sigwait(&signals, &sig);
    if (finished.load()) return;
    LogLine(LogLevel::kInfo, fmt::format("serve: second signal {}, exiting now", sig));
    std::fflush(stdout);
    std::_Exit(1);
  });
  srv.Run();
  // Every connection has ended (or the listener failed): wake the waiter.
  finished.store(true);
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
                  "/metrics (visible in ps: prefer --api-key-file or $DSV4_API_KEY)");
  sub->add_option("--api-key-file", args->api_key_file,
                  "read the API key from the first line of this file");
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
  sub->add_flag("!--no-prefix-reuse", args->engine.reuse_prefix,
                "start every request cold (default: a request whose prompt extends what a free "
                "slot holds, its earlier prompt and output, prefills only the rest, with the "
                "cold run's logits bit for bit; as llama.cpp's cache_prompt)");
  sub->add_option("--kv-cache-dir", args->engine.kv_cache_dir,
                  "keep prompt states on disk in DIR: each prompt's decoding state is saved once "
                  "prefilled, and a later request (after a restart too) whose prompt begins with "
                  "a saved one loads it instead of prefilling it (exact; files checked by model "
                  "fingerprint and checksum)");
  sub->add_option("--kv-cache-size", args->engine.kv_cache_max_bytes,
                  "most bytes of saved states in --kv-cache-dir for this model; the least "
                  "recently used go first (default 8GiB; units K, M, G)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--slot-prompt-similarity", args->engine.slot_prompt_similarity,
                  "the share of a prompt a free slot must already hold for the request to take "
                  "it rather than the least recently used slot (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--prefill-chunk", args->engine.prefill_chunk,
                  "prompt tokens prefilled per engine step (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--speculative", args->speculative, kSpeculativeHelp);
  sub->add_option("--max-body-bytes", args->server.max_body_bytes,
                  "largest request body, any framing; larger ones get 413 (default 8 MiB)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (!v.empty() && v[0] == '-') {
              return "--max-body-bytes must be a positive number of bytes (there is no "
                     "'no limit'), got " +
                     v;
            }
            return {};
          },
          "BYTES"))
      ->check(CLI::Range(size_t{1}, size_t{1} << 40));
  sub->add_option("--max-n", args->server.max_n, "largest n (choices per request) (default 8)")
      ->check(CLI::Range(1, 128));
  sub->add_option("--max-connections", args->server.max_connections,
                  "open HTTP connections, each with its own thread; more are answered 503 at "
                  "once (default 512)")
      ->check(CLI::Range(1, 100000));
  sub->add_option("--read-timeout", args->read_timeout_s,
                  "seconds a request's head may take from its first byte (and a new connection "
                  "to send one), and a body may pause; then 408 / 400 (default 10)")
      ->check(CLI::Range(0.05, 3600.0));
  sub->add_option("--shutdown-grace", args->shutdown_grace_s,
                  "on SIGTERM/SIGINT, seconds responses in flight may take to finish before "
                  "streams are ended with an error event (default 10)")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--allowed-hosts", args->server.allowed_hosts,
                  "extra Host header names to answer, comma-separated; * = any (default: "
                  "loopback names and --host; others get 403, against DNS rebinding)");
  sub->add_option("--cors-origins", args->server.cors_origins,
                  "browser Origins to answer with CORS headers, comma-separated; * = any "
                  "(default: none; requests from other Origins get 403)");
  sub->add_flag("--log-requests", args->server.log_requests,
                "log one line per request to stderr: client, method, path, status, bytes, "
                "seconds");
  sub->add_option("--responses-store", args->server.responses_store,
                  "Responses API: responses kept in memory for previous_response_id and GET "
                  "/v1/responses/{id}, least recently used evicted first (default 1000; 0: none)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24));
  sub->add_option("--responses-store-bytes", args->server.responses_store_bytes,
                  "Responses API: most bytes (their JSON) of the kept responses (default 256MiB; "
                  "units K, M, G)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_flag("--allow-special-in-content", args->server.allow_special_in_content,
                "tokenize special-token text in message content as special tokens (default: "
                "as plain text, so content cannot forge chat-template markers)");
  sub->add_option("--chat-format", args->chat_format,
                  "auto (default: dsv41 for a deepseek_v41 model, else dsv4 when the tokenizer "
                  "has the DeepSeek-V4 specials), dsv4, dsv41, plain");
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
