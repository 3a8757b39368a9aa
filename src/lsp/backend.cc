// The local (engine) and remote (HTTP) completion backends (backend.h).
#include "lsp/backend.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "lsp/jsonrpc.h"

namespace dsv4::lsp {
namespace {

using namespace std::chrono_literals;

// Whether `text` is one token of `tokenizer`'s vocabulary (a special token).
bool IsOneToken(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.Encode(text, /*add_bos=*/false).size() == 1;
}

SamplingParams Sampling(const CompletionOptions& options) {
  SamplingParams s;
  s.temperature = options.temperature;
  s.top_k = options.top_k;
  s.top_p = options.top_p;
  s.seed = std::random_device{}();
  return s;
}

class EngineBackend : public CompletionBackend {
 public:
  EngineBackend(Engine& engine, bool fim) : engine_(engine), fim_(fim) {}
  bool fim() const override { return fim_; }

  Status Generate(const CompletionPrompt& prompt, const CompletionOptions& options,
                  const std::atomic<bool>& cancel,
                  const std::function<bool(std::string_view)>& on_text) override {
    const Tokenizer& tokenizer = *engine_.model().tokenizer;
    std::vector<int32_t> ids =
        tokenizer.EncodeWithPlainRanges(prompt.text, /*add_bos=*/true, prompt.plain);
    if (ids.empty()) return Status::Ok();  // an empty document and no BOS: nothing to continue
    // The slot holds prompt + output: a plain prompt keeps its last tokens
    // (after BOS); a FIM prompt cannot lose its start.
    const int64_t room = engine_.ctx_size() - options.n_predict;
    if (static_cast<int64_t>(ids.size()) > room) {
      const bool bos = tokenizer.bos_id() >= 0 && !ids.empty() && ids[0] == tokenizer.bos_id();
      if (prompt.fim || room < 2) {
        return InvalidArgument("the completion prompt has " + std::to_string(ids.size()) +
                                   " tokens; with --n-predict " +
                                   std::to_string(options.n_predict) + " the context holds " +
                                   std::to_string(std::max<int64_t>(room, 0)),
                               "lower --lsp-context-chars / --lsp-suffix-chars or raise "
                               "--ctx-size");
      }
      ids.erase(ids.begin() + (bos ? 1 : 0), ids.end() - (room - (bos ? 1 : 0)));
    }
    SequenceRequest s;
    s.prompt = std::move(ids);
    s.max_tokens = options.n_predict;
    s.sampling = Sampling(options);
    std::vector<SequenceRequest> seqs;
    seqs.push_back(std::move(s));
    Result<std::shared_ptr<RequestHandle>> handle = engine_.Submit(std::move(seqs));
    if (!handle.ok()) return handle.status();
    RequestHandle& h = **handle;
    SequenceEvent ev;
    while (true) {
      if (cancel.load(std::memory_order_relaxed)) {
        h.Cancel();
        return Status::Ok();
      }
      if (!h.Next(&ev, 20ms)) continue;
      if (!ev.text.empty() && !on_text(ev.text)) {
        h.Cancel();
        return Status::Ok();
      }
      if (ev.finish == FinishReason::kError) return ev.error;
      if (ev.finish != FinishReason::kNone) return Status::Ok();
    }
  }

 private:
  Engine& engine_;
  const bool fim_;
};

class RemoteBackend : public CompletionBackend {
 public:
  RemoteBackend(std::string origin, std::string base_path, std::string api_key, bool fim)
      : origin_(std::move(origin)),
        base_path_(std::move(base_path)),
        api_key_(std::move(api_key)),
        fim_(fim) {}
  bool fim() const override { return fim_; }

  Status Generate(const CompletionPrompt& prompt, const CompletionOptions& options,
                  const std::atomic<bool>& cancel,
                  const std::function<bool(std::string_view)>& on_text) override {
    if (prompt.text.empty()) return Status::Ok();  // at the start of an empty document
    httplib::Client client(origin_);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(120, 0);
    // Cancellation closes the connection at once (httplib's stop() shuts the
    // socket of the request in flight), also while the server is still
    // prefilling and sends nothing.
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread watcher([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!done) {
        if (cancel.load(std::memory_order_relaxed)) {
          client.stop();
          return;
        }
        cv.wait_for(lock, 20ms);
      }
    });
    struct StopWatcher {
      std::mutex& mu;
      std::condition_variable& cv;
      bool& done;
      std::thread& watcher;
      ~StopWatcher() {
        {
          std::lock_guard<std::mutex> lock(mu);
          done = true;
        }
        cv.notify_all();
        watcher.join();
      }
    } stop_watcher{mu, cv, done, watcher};
    if (model_id_.empty()) {
      const Status st = FetchModelId(client);
      if (cancel.load(std::memory_order_relaxed)) return Status::Ok();
      RETURN_IF_ERROR(st);
    }
    const Json body{{"model", model_id_},
                    {"prompt", prompt.text},
                    {"max_tokens", options.n_predict},
                    {"temperature", options.temperature},
                    {"top_k", options.top_k},
                    {"top_p", options.top_p},
                    {"stream", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = base_path_ + "/v1/completions";
    req.headers = Headers();
    req.headers.emplace("Content-Type", "application/json");
    req.headers.emplace("Accept", "text/event-stream");
    req.body = body.dump();

    int status = 0;
    bool stopped = false;
    std::string pending, error_body;
    Status stream_error;
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return !cancel.load(std::memory_order_relaxed);
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (cancel.load(std::memory_order_relaxed)) return false;
      if (status != 200) {
        if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
        return true;
      }
      pending.append(data, n);
      // Server-sent events: one "data: JSON" line per chunk, "data: [DONE]" last.
      for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, eol);
        pending.erase(0, eol + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) != 0) continue;
        std::string_view payload = std::string_view(line).substr(5);
        while (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
        if (payload == "[DONE]") continue;
        Json chunk = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
        if (chunk.is_discarded() || !chunk.is_object()) {
          stream_error = InvalidArgument("the server at " + origin_ +
                                         " streamed a chunk that is not a JSON object");
          return false;
        }
        if (auto e = chunk.find("error"); e != chunk.end()) {
          stream_error =
              InvalidArgument("the server at " + origin_ + " reported an error: " + ErrorText(*e));
          return false;
        }
        auto choices = chunk.find("choices");
        if (choices == chunk.end() || !choices->is_array() || choices->empty() ||
            !(*choices)[0].is_object()) {
          continue;
        }
        auto text = (*choices)[0].find("text");
        if (text == (*choices)[0].end() || !text->is_string()) continue;
        if (!on_text(text->get_ref<const std::string&>())) {
          stopped = true;
          return false;
        }
      }
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool sent = client.send(req, res, error);
    if (!stream_error.ok()) return stream_error;
    if (stopped || cancel.load(std::memory_order_relaxed)) return Status::Ok();
    if (!sent) {
      return IoError(
          "cannot complete through the server at " + origin_ + ": " + httplib::to_string(error),
          "check --server (is `dsv4 serve` running there?)");
    }
    if (status != 200) {
      std::string message = error_body;
      Json j = Json::parse(error_body, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.is_object() && j.contains("error"))
        message = ErrorText(j["error"]);
      return InvalidArgument(
          "the server at " + origin_ + " answered HTTP " + std::to_string(status) + ": " + message,
          status == 401 ? "check --api-key" : "");
    }
    return Status::Ok();
  }

 private:
  httplib::Headers Headers() const {
    httplib::Headers h;
    if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
    return h;
  }

  // The served model's name, which /v1/completions requires: the first of
  // GET /v1/models (dsv4 serve serves one).
  Status FetchModelId(httplib::Client& client) {
    httplib::Result res = client.Get(base_path_ + "/v1/models", Headers());
    if (!res) {
      return IoError("cannot complete through the server at " + origin_ + ": " +
                         httplib::to_string(res.error()),
                     "check --server (is `dsv4 serve` running there?)");
    }
    Json j = Json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (res->status != 200) {
      const std::string message = !j.is_discarded() && j.is_object() && j.contains("error")
                                      ? ErrorText(j["error"])
                                      : res->body.substr(0, 200);
      return InvalidArgument("the server at " + origin_ + " answered HTTP " +
                                 std::to_string(res->status) + " to GET /v1/models: " + message,
                             res->status == 401 ? "check --api-key" : "");
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
        j["data"].empty() || !j["data"][0].is_object() || !j["data"][0].contains("id") ||
        !j["data"][0]["id"].is_string()) {
      return InvalidArgument("the server at " + origin_ + " lists no model at GET /v1/models");
    }
    model_id_ = j["data"][0]["id"].get<std::string>();
    return Status::Ok();
  }

  static std::string ErrorText(const Json& e) {
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    return e.dump(-1, ' ', false, Json::error_handler_t::replace);
  }

  const std::string origin_, base_path_, api_key_;
  const bool fim_;
  std::string model_id_;  // from the server, on the first completion
};

}  // namespace

Result<FimMode> ParseFimMode(std::string_view text) {
  if (text == "auto") return FimMode::kAuto;
  if (text == "on") return FimMode::kOn;
  if (text == "off") return FimMode::kOff;
  return InvalidArgument("--fim must be auto, on or off, not '" + std::string(text) + "'");
}

Result<std::unique_ptr<CompletionBackend>> MakeEngineBackend(Engine& engine, FimMode fim) {
  const Tokenizer* tokenizer = engine.model().tokenizer.get();
  if (tokenizer == nullptr) {
    return InvalidArgument(engine.model().path +
                               ": this model has no tokenizer, so it cannot "
                               "complete text",
                           "pass --tokenizer PATH");
  }
  const bool has_fim = IsOneToken(*tokenizer, kFimBegin) && IsOneToken(*tokenizer, kFimHole) &&
                       IsOneToken(*tokenizer, kFimEnd);
  if (fim == FimMode::kOn && !has_fim) {
    return InvalidArgument(engine.model().path + ": the vocabulary has no FIM tokens (" +
                               std::string(kFimBegin) + ", " + std::string(kFimHole) + ", " +
                               std::string(kFimEnd) + ")",
                           "use --fim auto or off");
  }
  const bool use = fim == FimMode::kOn || (fim == FimMode::kAuto && has_fim);
  return std::unique_ptr<CompletionBackend>(new EngineBackend(engine, use));
}

Result<std::unique_ptr<CompletionBackend>> MakeRemoteBackend(const std::string& url,
                                                             const std::string& api_key,
                                                             FimMode fim) {
  const size_t scheme = url.find("://");
  const std::string scheme_name = scheme == std::string::npos ? "" : url.substr(0, scheme);
  if (scheme_name != "http" && scheme_name != "https") {
    return InvalidArgument("--server must be an http:// or https:// URL, not '" + url + "'",
                           "e.g. --server http://127.0.0.1:8080");
  }
  const size_t path = url.find('/', scheme + 3);
  std::string origin = url.substr(0, path);
  std::string base = path == std::string::npos ? "" : url.substr(path);
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (origin.size() == scheme + 3) return InvalidArgument("--server has no host: '" + url + "'");
  if (!httplib::Client(origin).is_valid()) {
    return InvalidArgument("--server '" + url + "' is not a URL this build can reach",
                           scheme_name == "https" ? "this build may lack TLS; use http://" : "");
  }
  return std::unique_ptr<CompletionBackend>(
      new RemoteBackend(std::move(origin), std::move(base), api_key, fim == FimMode::kOn));
}

}  // namespace dsv4::lsp
