// The HTTP front end (server.h).
#include "server/server.h"
#include "tokenizer/chat_dsv4.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <httplib.h>  // httplib::Request, Response, DataSink
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <random>

#include "base/log.h"
#include "server/api_util.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/ollama_api.h"
#include "server/responses_api.h"
#include "server/sse.h"
#include "server/structured_output.h"
#include "server/tool_choice.h"
#include "server/web_page.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

constexpr const char* kShutdownMessage =
    "The server is shutting down and its grace period (--shutdown-grace) ended before this "
    "response finished";

bool IsAnthropicPath(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// The error body in the shape of the API that `path` belongs to.
std::string ErrorBody(const std::string& path, int status, const std::string& message,
                      const std::string& code = {}) {
  if (IsOllamaPath(path)) return OllamaErrorBody(message);
  if (IsAnthropicPath(path)) {
    const char* type = status == 401   ? "authentication_error"
                       : status == 403 ? "permission_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status == 503 ? "overloaded_error"
                       : status >= 500 ? "api_error"
                                       : "invalid_request_error";
    return Dump(Json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}});
  }
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 503 ? "server_overloaded"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  Json err{{"message", message},
           {"type", type},
           {"param", nullptr},
           {"code", code.empty() ? Json(nullptr) : Json(code)}};
  return Dump(Json{{"error", err}});
}

void SendError(const httplib::Request& req, httplib::Response& res, int status,
               const std::string& message, const std::string& code = {}) {
  res.status = status;
  if (status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorBody(req.path, status, message, code), "application/json");
}

void SendStatus(const httplib::Request& req, httplib::Response& res, const Status& s) {
  std::string message = s.message();
  if (!s.hint().empty()) message += " (hint: " + s.hint() + ")";
  const int status = HttpStatusOf(s);
  std::string code;
  if (status == 404) code = "model_not_found";
  SendError(req, res, status, message, code);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % std::max<size_t>(b.size(), 1)];
  return diff == 0 && !b.empty();
}

// -inf logprobs are not JSON; OpenAI reports them as -9999.
double JsonLogprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

// `tool_calls`: the choice has tool calls; `forced`: tool_choice forced them,
// so a call the engine closed at max_tokens still ends as "tool_calls".
std::string FinishReasonOpenAI(const SequenceEvent& ev, bool tool_calls, bool forced) {
  if (tool_calls && forced && ev.finish == FinishReason::kLength) return "tool_calls";
  switch (ev.finish) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return tool_calls ? "tool_calls" : "stop";
    default:
      return "stop";
  }
}

// The legacy `functions` request's finish_reason: "function_call" for "tool_calls".
std::string LegacyFinishReason(std::string reason, bool legacy) {
  return legacy && reason == "tool_calls" ? "function_call" : reason;
}

std::string StopReasonAnthropic(const SequenceEvent& ev, bool tool_calls, bool forced) {
  if (tool_calls && forced) return "tool_use";
  if (ev.finish == FinishReason::kLength) return "max_tokens";
  if (!ev.stop_string.empty()) return "stop_sequence";
  return tool_calls ? "tool_use" : "end_turn";
}

// One choice (one engine sequence) as the HTTP side sees it.
struct Choice {
  Choice(bool parse, bool thinking, DsmlDialect dialect) : output(parse, thinking, dialect) {}
  ChoiceOutput output;
  std::vector<std::string> tool_ids;  // one per tool call, made on its first delta
  Json logprobs = Json::array();      // chat: logprobs.content entries
  Json completion_logprobs;           // completions: the legacy object
  int64_t text_offset = 0;
  int64_t completion_tokens = 0;
  SequenceEvent final;  // the final event, once finished
  bool finished = false;
};

// Everything one generation request needs on its HTTP thread.
struct Generation {
  Api api = Api::kChat;
  GenerationRequest request;
  std::string id;
  int64_t created = 0;
  std::string model_id;
  const Tokenizer* tokenizer = nullptr;  // null: the model has none
  std::shared_ptr<RequestHandle> handle;
  bool forced_tool_call = false;  // tool_choice required / a named function, enforced
  std::vector<Choice> choices;
  int64_t prompt_tokens = 0;
  int finished = 0;
  Status error;
  // Anthropic stream state.
  int block_index = -1;
  std::string block_type;  // "", "thinking", "text", "tool_use"
  bool started = false;

  bool done() const { return finished == static_cast<int>(choices.size()); }

  // A token as logprobs show it: its text, or "token_id:N" when the request
  // asks for that or the model has no tokenizer.
  std::string TokenText(int32_t id) const {
    if (request.tokens_as_ids || tokenizer == nullptr) return "token_id:" + std::to_string(id);
    return utf8::Sanitize(tokenizer->Decode(id));
  }

  Json TokenJson(const TokenLogprob& t) const {
    const std::string bytes =
        tokenizer != nullptr && !request.tokens_as_ids ? tokenizer->Decode(t.id) : TokenText(t.id);
    Json b = Json::array();
    for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
    return Json{{"token", TokenText(t.id)}, {"logprob", JsonLogprob(t.logprob)}, {"bytes", b}};
  }

  // Records the logprobs of an event; returns the chat entries it added.
  Json AddLogprobs(Choice& c, const SequenceEvent& ev) {
    Json added = Json::array();
    for (const TokenLogprobs& lp : ev.logprobs) {
      if (api == Api::kCompletion) {
        if (c.completion_logprobs.is_null()) {
          c.completion_logprobs = Json{{"tokens", Json::array()},
                                       {"token_logprobs", Json::array()},
                                       {"top_logprobs", Json::array()},
                                       {"text_offset", Json::array()}};
        }
        const std::string tok = TokenText(lp.chosen.id);
        Json top = Json::object();
        for (const TokenLogprob& t : lp.top) {
          top[TokenText(t.id)] = JsonLogprob(t.logprob);
        }
        c.completion_logprobs["tokens"].push_back(tok);
        c.completion_logprobs["token_logprobs"].push_back(JsonLogprob(lp.chosen.logprob));
        c.completion_logprobs["top_logprobs"].push_back(top);
        c.completion_logprobs["text_offset"].push_back(c.text_offset);
        c.text_offset += static_cast<int64_t>(tok.size());
      } else {
        Json entry = TokenJson(lp.chosen);
        Json top = Json::array();
        for (const TokenLogprob& t : lp.top) top.push_back(TokenJson(t));
        entry["top_logprobs"] = top;
        c.logprobs.push_back(entry);
        added.push_back(entry);
      }
    }
    return added;
  }

  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const Choice& c : choices) n += c.completion_tokens;
    return n;
  }

  // Prompt tokens reused from a slot's previous sequence (the engine's prefix
  // reuse), over the finished choices.
  int64_t cached_prompt_tokens() const {
    int64_t n = 0;
    for (const Choice& c : choices) n += c.final.cached_prompt_tokens;
    return n;
  }

  Json UsageOpenAI() const {
    const int64_t out = completion_tokens();
    return Json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", out},
                {"total_tokens", prompt_tokens + out},
                {"prompt_tokens_details", {{"cached_tokens", cached_prompt_tokens()}}}};
  }

  Json ToolCallsJson(size_t ci) {
    Choice& c = choices[ci];
    Json calls = Json::array();
    const auto& tcs = c.output.result().tool_calls;
    while (c.tool_ids.size() < tcs.size()) c.tool_ids.push_back(RandomId("call_"));
    for (size_t k = 0; k < tcs.size(); ++k) {
      calls.push_back(Json{{"id", c.tool_ids[k]},
                           {"type", "function"},
                           {"function", {{"name", tcs[k].name}, {"arguments", tcs[k].arguments}}}});
    }
    return calls;
  }

  // The non-streaming response body.
  Json Response() {
    if (api == Api::kMessages) return MessagesResponse();
    Json out{{"id", id},
             {"object", api == Api::kChat ? "chat.completion" : "text_completion"},
             {"created", created},
             {"model", model_id}};
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      Choice& c = choices[i];
      const Dsv4ParsedOutput& r = c.output.result();
      if (api == Api::kChat) {
        Json msg{{"role", "assistant"}};
        const bool has_tools = !r.tool_calls.empty();
        msg["content"] = has_tools && r.content.empty() ? Json(nullptr) : Json(r.content);
        if (!r.reasoning_content.empty()) msg["reasoning_content"] = r.reasoning_content;
        if (has_tools && request.legacy_functions) {
          // The legacy shape holds one call.
          msg["function_call"] =
              Json{{"name", r.tool_calls[0].name}, {"arguments", r.tool_calls[0].arguments}};
        } else if (has_tools) {
          msg["tool_calls"] = ToolCallsJson(i);
        }
        list.push_back(Json{
            {"index", i},
            {"message", msg},
            {"logprobs", request.top_logprobs >= 0 ? Json{{"content", c.logprobs}} : Json(nullptr)},
            {"finish_reason",
             LegacyFinishReason(FinishReasonOpenAI(c.final, has_tools, forced_tool_call),
                                request.legacy_functions)}});
      } else {
        list.push_back(Json{{"index", i},
                            {"text", r.content},
                            {"logprobs", c.completion_logprobs},
                            {"finish_reason", FinishReasonOpenAI(c.final, false, false)}});
      }
    }
    out["choices"] = list;
    out["usage"] = UsageOpenAI();
    return out;
  }

  Json MessagesResponse() {
    Choice& c = choices[0];
    const Dsv4ParsedOutput& r = c.output.result();
    Json content = Json::array();
    if (!r.reasoning_content.empty()) {
      content.push_back(
          Json{{"type", "thinking"}, {"thinking", r.reasoning_content}, {"signature", ""}});
    }
    if (!r.content.empty() || r.tool_calls.empty()) {
      content.push_back(Json{{"type", "text"}, {"text", r.content}});
    }
    for (const Dsv4ToolCall& tc : r.tool_calls) {
      Json input = Json::parse(tc.arguments, nullptr, false);
      if (!input.is_object()) input = Json::object();
      content.push_back(Json{
          {"type", "tool_use"}, {"id", RandomId("toolu_")}, {"name", tc.name}, {"input", input}});
    }
    return Json{
        {"id", id},
        {"type", "message"},
        {"role", "assistant"},
        {"model", model_id},
        {"content", content},
        {"stop_reason", StopReasonAnthropic(c.final, !r.tool_calls.empty(), forced_tool_call)},
        {"stop_sequence", c.final.stop_string.empty() ? Json(nullptr) : Json(c.final.stop_string)},
        {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", completion_tokens()}}}};
  }

  // ---- streaming ----

  std::string Chunk(Json choices_json) const {
    Json j{{"id", id},
           {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
           {"created", created},
           {"model", model_id},
           {"choices", std::move(choices_json)}};
    return SseEvent(Dump(j));
  }

  std::string AnthropicEvent(const char* type, Json body) const {
    Json j{{"type", type}};
    for (auto it = body.begin(); it != body.end(); ++it) j[it.key()] = it.value();
    return SseEvent(Dump(j), type);
  }

  // What to send before the first token.
  std::string Start() {
    started = true;
    if (api == Api::kMessages) {
      Json msg{{"id", id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model_id},
               {"content", Json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
      return AnthropicEvent("message_start", Json{{"message", msg}});
    }
    if (api == Api::kChat) {
      Json list = Json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        list.push_back(Json{{"index", i},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}});
      }
      return Chunk(list);
    }
    return "";
  }

  std::string AnthropicSwitchBlock(const std::string& type, Json block) {
    std::string out;
    if (!block_type.empty()) {
      out += AnthropicEvent("content_block_stop", Json{{"index", block_index}});
    }
    ++block_index;
    block_type = type;
    out += AnthropicEvent("content_block_start",
                          Json{{"index", block_index}, {"content_block", std::move(block)}});
    return out;
  }

  std::string AnthropicDelta(Choice& c, const Dsv4OutputDelta& d) {
    std::string out;
    if (!d.reasoning.empty()) {
      if (block_type != "thinking") {
        out += AnthropicSwitchBlock(
            "thinking", Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      }
      out +=
          AnthropicEvent("content_block_delta",
                         Json{{"index", block_index},
                              {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
    }
    if (!d.content.empty()) {
      if (block_type != "text") {
        out += AnthropicSwitchBlock("text", Json{{"type", "text"}, {"text", ""}});
      }
      out += AnthropicEvent(
          "content_block_delta",
          Json{{"index", block_index}, {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
    }
    for (const Dsv4ToolCallDelta& t : d.tool_calls) {
      if (!t.name.empty()) {
        out += AnthropicSwitchBlock("tool_use", Json{{"type", "tool_use"},
                                                     {"id", RandomId("toolu_")},
                                                     {"name", t.name},
                                                     {"input", Json::object()}});
      }
      if (!t.arguments.empty()) {
        out += AnthropicEvent(
            "content_block_delta",
            Json{{"index", block_index},
                 {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
      }
    }
    (void)c;
    return out;
  }

  Json ChatDelta(Choice& c, const Dsv4OutputDelta& d) {
    Json delta = Json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty() && request.legacy_functions) {
      // The legacy shape: delta.function_call pieces of the first call.
      for (const Dsv4ToolCallDelta& t : d.tool_calls) {
        if (t.index != 0 || (t.name.empty() && t.arguments.empty())) continue;
        if (!delta.contains("function_call")) delta["function_call"] = Json::object();
        Json& fc = delta["function_call"];
        if (!t.name.empty()) fc["name"] = t.name;
        fc["arguments"] = fc.value("arguments", std::string()) + t.arguments;
      }
    } else if (!d.tool_calls.empty()) {
      Json calls = Json::array();
      for (const Dsv4ToolCallDelta& t : d.tool_calls) {
        if (t.name.empty() && t.arguments.empty()) continue;
        Json call{{"index", t.index}};
        if (!t.name.empty()) {
          while (static_cast<int>(c.tool_ids.size()) <= t.index)
            c.tool_ids.push_back(RandomId("call_"));
          call["id"] = c.tool_ids[t.index];
          call["type"] = "function";
          call["function"] = Json{{"name", t.name}, {"arguments", t.arguments}};
        } else {
          call["function"] = Json{{"arguments", t.arguments}};
        }
        calls.push_back(call);
      }
      if (!calls.empty()) delta["tool_calls"] = calls;
    }
    return delta;
  }

  // Applies one engine event; for streams, returns the SSE text to send.
  std::string OnEvent(SequenceEvent& ev, bool stream) {
    Choice& c = choices[ev.index];
    c.completion_tokens += static_cast<int64_t>(ev.tokens.size());
    Json added = AddLogprobs(c, ev);
    Dsv4OutputDelta d = c.output.Push(ev.text);
    const bool final = ev.finish != FinishReason::kNone;
    if (final) {
      Dsv4OutputDelta tail = c.output.Finish();
      d.reasoning += tail.reasoning;
      d.content += tail.content;
      for (auto& t : tail.tool_calls) d.tool_calls.push_back(std::move(t));
      c.completion_tokens = ev.completion_tokens;
      c.finished = true;
      ++finished;
      if (ev.finish == FinishReason::kError && error.ok()) error = ev.error;
      c.final = ev;
    }
    if (!stream) return "";
    std::string out;
    const bool has_tools = !c.output.result().tool_calls.empty();
    if (api == Api::kMessages) {
      out += AnthropicDelta(c, d);
      if (final) {
        if (!block_type.empty()) {
          out += AnthropicEvent("content_block_stop", Json{{"index", block_index}});
          block_type.clear();
        }
        out += AnthropicEvent(
            "message_delta",
            Json{{"delta",
                  {{"stop_reason", StopReasonAnthropic(ev, has_tools, forced_tool_call)},
                   {"stop_sequence",
                    ev.stop_string.empty() ? Json(nullptr) : Json(ev.stop_string)}}},
                 {"usage", {{"output_tokens", completion_tokens()}}}});
      }
      return out;
    }
    Json choice{{"index", ev.index}};
    if (api == Api::kChat) {
      Json delta = ChatDelta(c, d);
      if (delta.empty() && added.empty() && !final) return "";
      choice["delta"] = delta;
      choice["logprobs"] = added.empty() ? Json(nullptr) : Json{{"content", added}};
    } else {
      if (d.content.empty() && ev.logprobs.empty() && !final) return "";
      choice["text"] = d.content;
      choice["logprobs"] = nullptr;
      if (!ev.logprobs.empty()) {
        // The legacy object for just this event's tokens.
        Json lp = c.completion_logprobs;
        const size_t k = ev.logprobs.size();
        Json part = Json::object();
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          const Json& all = lp[key];
          Json tail = Json::array();
          for (size_t i = all.size() - k; i < all.size(); ++i) tail.push_back(all[i]);
          part[key] = tail;
        }
        choice["logprobs"] = part;
      }
    }
    choice["finish_reason"] =
        final ? Json(LegacyFinishReason(FinishReasonOpenAI(ev, has_tools, forced_tool_call),
                                        request.legacy_functions))
              : Json(nullptr);
    return Chunk(Json::array({choice}));
  }

  // Ends the stream early with an error event (the server is shutting down).
  std::string Abort(const std::string& message) {
    std::string out = started ? "" : Start();
    if (error.ok()) error = Status(StatusCode::kResourceExhausted, message);
    if (api == Api::kMessages && !block_type.empty()) {
      out += AnthropicEvent("content_block_stop", Json{{"index", block_index}});
      block_type.clear();
    }
    return out + End();
  }

  // What to send after the last choice finished.
  std::string End() {
    if (api == Api::kMessages) {
      if (!error.ok()) {
        return AnthropicEvent(
            "error", Json{{"error", {{"type", "api_error"}, {"message", error.message()}}}});
      }
      return AnthropicEvent("message_stop", Json::object());
    }
    std::string out;
    if (!error.ok()) {
      out += SseEvent(Dump(Json{{"error",
                                 {{"message", error.message()},
                                  {"type", "server_error"},
                                  {"param", nullptr},
                                  {"code", nullptr}}}}));
    } else if (request.include_usage) {
      Json j{{"id", id},
             {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
             {"created", created},
             {"model", model_id},
             {"choices", Json::array()},
             {"usage", UsageOpenAI()}};
      out += SseEvent(Dump(j));
    }
    out += SseEvent("[DONE]");
    return out;
  }
};

// Host names as the Host header carries them: lower case, without the port
// ("[::1]:8080" -> "::1").
std::string HostName(std::string_view host) {
  std::string out;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    out = std::string(host.substr(1, close == std::string_view::npos ? host.npos : close - 1));
  } else {
    const size_t colon = host.find(':');
    // More than one colon: a bare IPv6 address, no port.
    out = std::string(colon != std::string_view::npos && host.find(':', colon + 1) == host.npos
                          ? host.substr(0, colon)
                          : host);
  }
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool IsIpLiteral(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

HttpLimits LimitsOf(const ServerOptions& o) {
  HttpLimits l;
  l.max_connections = o.max_connections;
  l.read_timeout = o.read_timeout;
  l.max_body_bytes = o.max_body_bytes;
  return l;
}

// The metrics label of a request path.
std::string RouteOf(const std::string& path) {
  std::string route = path;
  if (route.rfind("/v1/models/", 0) == 0) route = "/v1/models/{id}";
  if (route == "/v1/responses") return route;
  if (route.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  static const char* kKnown[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
      "/v1/models",           "/v1/models/{id}", "/health",      "/metrics"};
  if (std::find(std::begin(kKnown), std::end(kKnown), route) == std::end(kKnown)) {
    route = OllamaRoute(path).empty() ? "other" : OllamaRoute(path);
  }
  return route;
}

// RFC 3339 UTC time of a Unix time.
std::string Rfc3339(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

struct Server::Impl {
  Impl(Engine& e, const ServerOptions& o) : engine(e), options(o), http(LimitsOf(o)) {}

  Engine& engine;
  ServerOptions options;
  HttpServer http;
  RequestCounters counters;
  RequestLimits limits;
  ChatFormat format = ChatFormat::kPlain;
  int64_t started = 0;
  // Token bytes for tool_choice constraints, built on the first request that forces a call.
  std::once_flag token_texts_once;
  std::shared_ptr<const TokenTexts> token_texts;
  std::unique_ptr<ResponsesApi> responses;  // /v1/responses
  // Structured output: the vocabulary's trie, built on the first request that
  // asks for JSON, and the compiled schemas (with their token masks).
  std::once_flag structured_once;
  std::shared_ptr<const StructuredVocabulary> structured_vocab;
  constrain::SchemaCache schema_cache;

  // The constraint of a request's response_format (every API's JSON output).
  Result<ConstraintFactory> StructuredConstraint(const GenerationRequest& r, bool thinking,
                                                 const FormatFields& fields = {}) {
    const LoadedModel& m = engine.model();
    if (!m.tokenizer) {
      return InvalidArgument("this model has no tokenizer, so it cannot constrain output");
    }
    std::call_once(structured_once,
                   [&] { structured_vocab = BuildStructuredVocabulary(*m.tokenizer); });
    return MakeStructuredOutputConstraint(r, schema_cache, structured_vocab, *m.tokenizer,
                                          m.stop_ids, thinking, fields);
  }

  void Routes();
  bool Authorized(const httplib::Request& req) const;
  // `any_host`: --allowed-hosts '*' counts.
  bool HostAllowed(const std::string& host, bool any_host = true) const;
  bool OriginAllowed(const std::string& origin) const;
  void Generate(Api api, const httplib::Request& req, httplib::Response& res);
  // Anthropic's /v1/messages/count_tokens: the prompt a Messages request
  // would run, in tokens ({"input_tokens": N}); max_tokens may be left out.
  void CountTokens(const httplib::Request& req, httplib::Response& res);
  Json ModelJson() const {
    return Json{{"id", options.model_id},
                {"object", "model"},
                {"created", started},
                {"owned_by", "dsv4"},
                {"max_model_len", engine.ctx_size()}};
  }
  // Anthropic's model object (GET /v1/models with an anthropic-version header).
  Json AnthropicModelJson() const {
    return Json{{"type", "model"},
                {"id", options.model_id},
                {"display_name", options.model_id},
                {"created_at", Rfc3339(started)}};
  }
};

Server::Server(Engine& engine, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, options)) {
  Impl& s = *impl_;
  s.started = static_cast<int64_t>(std::time(nullptr));
  s.limits.model_id = options.model_id;
  s.limits.max_n = std::min(options.max_n, engine.options().max_sequences);
  s.limits.ctx_size = engine.ctx_size();
  s.limits.max_top_logprobs = engine.options().max_top_logprobs;
  const Tokenizer* tok = engine.model().tokenizer.get();
  s.format = options.chat_format ? *options.chat_format
             : tok != nullptr
                 ? DetectChatFormat(*tok, engine.model().chat_template,
                                    engine.model().model ? engine.model().model->info().architecture
                                                         : std::string())
                 : ChatFormat::kPlain;
  const std::string& chat_template = engine.model().chat_template;
  if (!options.chat_format && s.format != ChatFormat::kDsv41 && !chat_template.empty() &&
      !IsDeepSeekV4ChatTemplate(chat_template)) {
    LOG_WARNING(
        "serve: {}: its chat template is not DeepSeek-V4's and dsv4 renders no Jinja; chat "
        "requests get the plain format (--chat-format dsv4 uses the V4 encoding)",
        engine.model().path);
  }
  s.Routes();
}

Server::~Server() { Stop(); }

bool Server::Impl::Authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0 && ConstantTimeEquals(auth.substr(7), options.api_key)) {
    return true;
  }
  const std::string key = req.get_header_value("x-api-key");
  return !key.empty() && ConstantTimeEquals(key, options.api_key);
}

// DNS rebinding: a web page whose name resolves to 127.0.0.1 reaches this
// server with its own name in Host. Loopback names, the bound host and
// --allowed-hosts pass; so does any IP literal when the server listens on a
// wildcard address (an IP literal is no rebinding: it needs a name).
bool Server::Impl::HostAllowed(const std::string& host, bool any_host) const {
  if (host.empty()) return true;  // HTTP/1.0 without Host: not a browser
  const std::string name = HostName(host);
  if (name == "localhost" || name == "127.0.0.1" || name == "::1") return true;
  if (name == HostName(options.host)) return true;
  if (IsWildcard(options.host) && IsIpLiteral(name)) return true;
  for (const std::string& allowed : options.allowed_hosts) {
    if ((any_host && allowed == "*") || HostName(allowed) == name) return true;
  }
  return false;
}

bool Server::Impl::OriginAllowed(const std::string& origin) const {
  const std::string o = Lower(origin);
  for (const std::string& allowed : options.cors_origins) {
    if (allowed == "*" || Lower(allowed) == o) return true;
  }
  return false;
}

void Server::Impl::Routes() {
  http.error_body = [](const std::string& path, int status, const std::string& message) {
    return ErrorBody(path, status, message);
  };
  http.on_access = [this](const HttpAccess& a) {
    counters.Record(RouteOf(a.path), a.status);
    if (options.log_requests) {
      // Never the body, the query string or any header (the API key).
      LogLine(LogLevel::kInfo,
              fmt::format("serve: {} \"{} {}\" {} {} {:.3f}", a.remote,
                          a.method.empty() ? "-" : a.method, a.path.empty() ? "-" : a.path,
                          a.status, a.bytes, a.seconds));
    }
  };
  http.set_logger([](const httplib::Request&, const httplib::Response& res) {
    HttpServer::NoteStatus(res.status);
  });

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string host = req.get_header_value("Host");
    if (!HostAllowed(host)) {
      SendError(req, res, 403,
                "Host '" + host.substr(0, 200) +
                    "' is not allowed (hint: this server answers loopback names and its own "
                    "address; start it with --allowed-hosts to add names)",
                "host_not_allowed");
      return httplib::Server::HandlerResponse::Handled;
    }
    // The chat page's own POSTs carry its Origin: same-origin, unless the Host
    // passed only through --allowed-hosts '*' (a rebinding page's is same-origin too).
    const std::string origin = req.get_header_value("Origin");
    if (req.has_header("Origin") && !(IsSameOrigin(origin, host) && HostAllowed(host, false))) {
      if (!OriginAllowed(origin)) {
        SendError(req, res, 403,
                  "Origin '" + origin.substr(0, 200) +
                      "' is not allowed (hint: start the server with --cors-origins to allow "
                      "browser pages from it)",
                  "origin_not_allowed");
        return httplib::Server::HandlerResponse::Handled;
      }
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {
        // A CORS preflight: never authenticated (browsers send no credentials).
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header(
            "Access-Control-Allow-Headers",
            asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.path == "/health" || IsWebPagePath(req.path) || Authorized(req))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(req, res, 401, "Invalid or missing API key",
              IsAnthropicPath(req.path) ? "" : "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Fills in bodies httplib left empty (unknown routes, bad methods).
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.status == 204)
          return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        switch (res.status) {
          case 413:
            message = "The request body is too large";
            break;
          case 404:
            message = "Unknown route " + req.method + " " + req.path;
            break;
          case 405:
            message = "Method not allowed on " + req.path;
            break;
          default:
            message = "HTTP error " + std::to_string(res.status);
            break;
        }
        res.set_content(ErrorBody(req.path, res.status, message), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LOG_ERROR("serve: {} {}: {}", req.method, req.path, what);
        SendError(req, res, 500, "Internal server error: " + what);
      });

  // /health and /metrics never wait on the engine's work: each connection has
  // its own thread (http_server.h), and Metrics() only takes a counter lock.
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    HttpMetrics h;
    h.open_connections = http.open_connections();
    h.refused_connections = http.refused_connections();
    res.set_content(RenderMetrics(engine.Metrics(), counters.Snapshot(), h),
                    "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("anthropic-version")) {
      res.set_content(Dump(Json{{"data", Json::array({AnthropicModelJson()})},
                                {"has_more", false},
                                {"first_id", options.model_id},
                                {"last_id", options.model_id}}),
                      "application/json");
      return;
    }
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({ModelJson()})}}),
                    "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const bool anthropic = req.has_header("anthropic-version");
    if (req.matches[1] != options.model_id) {
      const std::string message = "The model '" + std::string(req.matches[1]) + "' does not exist";
      if (anthropic) {
        res.status = 404;
        res.set_content(Dump(Json{{"type", "error"},
                                  {"error", {{"type", "not_found_error"}, {"message", message}}}}),
                        "application/json");
        return;
      }
      SendError(req, res, 404, message, "model_not_found");
      return;
    }
    res.set_content(Dump(anthropic ? AnthropicModelJson() : ModelJson()), "application/json");
  });
  RegisterWebPage(http);
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Api::kChat, req, res);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Api::kCompletion, req, res);
  });
  http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Api::kMessages, req, res);
  });
  http.Post("/v1/messages/count_tokens",
            [this](const httplib::Request& req, httplib::Response& res) { CountTokens(req, res); });
  const StructuredConstraintFn structured = [this](const GenerationRequest& r, bool thinking,
                                                   const FormatFields& fields) {
    return StructuredConstraint(r, thinking, fields);
  };
  OllamaServing ollama{
      &engine, &http, options.model_id, format, limits, options.allow_special_in_content, started};
  ollama.structured = structured;
  AddOllamaRoutes(http, ollama);

  ResponsesContext rc;
  rc.engine = &engine;
  rc.http = &http;
  rc.limits = limits;
  rc.format = format;
  rc.model_id = options.model_id;
  rc.allow_special_in_content = options.allow_special_in_content;
  rc.token_texts = [this] {
    std::call_once(token_texts_once,
                   [&] { token_texts = BuildTokenTexts(*engine.model().tokenizer); });
    return token_texts;
  };
  rc.structured = structured;
  rc.store_max_count = options.responses_store;
  rc.store_max_bytes = options.responses_store_bytes;
  responses = std::make_unique<ResponsesApi>(std::move(rc));
  responses->Routes(http);
}

void Server::Impl::CountTokens(const httplib::Request& req, httplib::Response& res) {
  Result<Json> body = ParseJsonBody(req.body);
  if (!body.ok()) return SendStatus(req, res, body.status());
  if (body->is_object() && !body->contains("max_tokens")) (*body)["max_tokens"] = 1;
  Result<GenerationRequest> parsed = ParseRequest(Api::kMessages, *body, limits);
  if (!parsed.ok()) return SendStatus(req, res, parsed.status());
  const LoadedModel& m = engine.model();
  if (!m.tokenizer)
    return SendError(req, res, 400, "this model has no tokenizer, so it cannot chat");
  Result<ChatPrompt> prompt = BuildChatPrompt(*parsed, format);
  if (!prompt.ok()) return SendStatus(req, res, prompt.status());
  const std::vector<int32_t> ids =
      TokenizePrompt(*m.tokenizer, *prompt, format, options.allow_special_in_content);
  res.set_content(Dump(Json{{"input_tokens", static_cast<int64_t>(ids.size())}}),
                  "application/json");
}

void Server::Impl::Generate(Api api, const httplib::Request& req, httplib::Response& res) {
  if (http.draining()) {
    return SendError(req, res, 503, "The server is shutting down; retry on another instance");
  }
  Result<Json> body = ParseJsonBody(req.body);
  if (!body.ok()) return SendStatus(req, res, body.status());
  Result<GenerationRequest> parsed = ParseRequest(api, *body, limits);
  if (!parsed.ok()) return SendStatus(req, res, parsed.status());

  auto gen = std::make_shared<Generation>();
  gen->api = api;
  gen->request = std::move(parsed).value();
  const GenerationRequest& r = gen->request;
  gen->model_id = options.model_id;
  gen->created = static_cast<int64_t>(std::time(nullptr));
  gen->id = RandomId(api == Api::kChat ? "chatcmpl-" : api == Api::kCompletion ? "cmpl-" : "msg_");
  const LoadedModel& m = engine.model();
  gen->tokenizer = m.tokenizer.get();

  // Prompts as ids.
  std::vector<std::vector<int32_t>> prompts;
  if (api == Api::kCompletion) {
    for (const std::string& text : r.prompts) {
      if (!m.tokenizer) {
        return SendError(req, res, 400,
                         "this model has no tokenizer; send the prompt as token ids");
      }
      prompts.push_back(m.tokenizer->Encode(text, /*add_bos=*/format == ChatFormat::kPlain));
    }
    for (const auto& ids : r.prompt_ids) prompts.push_back(ids);
  } else {
    if (!m.tokenizer)
      return SendError(req, res, 400, "this model has no tokenizer, so it cannot chat");
    Result<ChatPrompt> prompt = BuildChatPrompt(r, format);
    if (!prompt.ok()) return SendStatus(req, res, prompt.status());
    prompts.push_back(
        TokenizePrompt(*m.tokenizer, *prompt, format, options.allow_special_in_content));
  }
  for (const auto& p : prompts) {
    if (p.empty()) return SendError(req, res, 400, "the prompt is empty");
    if (static_cast<int64_t>(p.size()) >= engine.ctx_size()) {
      return SendError(req, res, 400,
                       "The prompt has " + std::to_string(p.size()) +
                           " tokens, but the context holds " + std::to_string(engine.ctx_size()) +
                           " (prompt + output)",
                       "context_length_exceeded");
    }
    gen->prompt_tokens += static_cast<int64_t>(p.size());
  }

  std::vector<SequenceRequest> seqs;
  const uint64_t base_seed = r.has_seed ? r.sampling.seed : 0;
  const bool parse = api != Api::kCompletion && IsDeepSeekFormat(format);
  // tool_choice none / required / a named function: constrained decoding.
  ConstraintFactory constraint;
  if (parse && (format == ChatFormat::kDsv4 || format == ChatFormat::kDsv41)) {
    if (ForcesToolCall(r) || !r.tools.empty()) {
      std::call_once(token_texts_once, [&] { token_texts = BuildTokenTexts(*m.tokenizer); });
    }
    constraint =
        MakeToolChoiceConstraint(r, *m.tokenizer, token_texts, format == ChatFormat::kDsv41);
    gen->forced_tool_call = constraint != nullptr && ForcesToolCall(r);
  }
  if (r.response_format != ResponseFormat::kText) {
    // Structured output replaces tool_choice "none"'s ban (its vocabulary
    // has no markup tokens); a forced tool call with it is refused.
    Result<ConstraintFactory> structured = StructuredConstraint(r, r.thinking && parse);
    if (!structured.ok()) return SendStatus(req, res, structured.status());
    constraint = *structured;
  }
  for (const auto& p : prompts) {
    for (int j = 0; j < r.n; ++j) {
      SequenceRequest s;
      s.prompt = p;
      s.max_tokens = r.max_tokens > 0 ? r.max_tokens : engine.ctx_size();
      s.sampling = r.sampling;
      s.sampling.repeat_last_n =
          static_cast<int32_t>(std::min<int64_t>(engine.ctx_size(), kMaxRepeatLastN));
      s.sampling.seed = r.has_seed ? base_seed + static_cast<uint64_t>(seqs.size()) : RandomSeed();
      s.stop = r.stop;
      s.top_logprobs = r.top_logprobs;
      s.constraint = constraint;
      seqs.push_back(std::move(s));
      gen->choices.emplace_back(parse, r.thinking && parse, DsmlDialectOf(format));
    }
  }
  Result<std::shared_ptr<RequestHandle>> handle = engine.Submit(std::move(seqs));
  if (!handle.ok()) return SendStatus(req, res, handle.status());
  gen->handle = *handle;

  if (!r.stream) {
    // A completion that is ready within a second gets a plain response with its
    // exact status code.
    SequenceEvent ev;
    const auto deadline = std::chrono::steady_clock::now() + 1000ms;
    while (!gen->done() && std::chrono::steady_clock::now() < deadline) {
      if (gen->handle->Next(&ev, 100ms)) gen->OnEvent(ev, false);
    }
    if (gen->done()) {
      if (!gen->error.ok())
        return SendError(req, res, 500, "generation failed: " + gen->error.message());
      res.set_content(Dump(gen->Response()), "application/json");
      return;
    }
    // A longer one: the body is sent chunked, preceded by one space per second of
    // waiting (JSON allows leading whitespace). A write to a client that has gone
    // away fails, which cancels its sequence and frees its slot, as for streams.
    // (cpp-httplib 0.11 offers no other way to see the connection close.) The
    // status is 200 from here on; a late generation error is an error body.
    res.set_chunked_content_provider(
        "application/json",
        [this, gen, path = req.path](size_t, httplib::DataSink& sink) {
          if (http.past_drain_deadline() && !gen->done()) {
            gen->handle->Cancel();
            const std::string out = ErrorBody(path, 503, kShutdownMessage);
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          }
          SequenceEvent ev;
          if (gen->handle->Next(&ev, http.draining() ? 200ms : 1000ms)) {
            gen->OnEvent(ev, false);
            while (!gen->done() && gen->handle->Next(&ev, 0ms)) gen->OnEvent(ev, false);
          }
          std::string out = " ";
          if (gen->done()) {
            out = gen->error.ok()
                      ? Dump(gen->Response())
                      : ErrorBody(path, 500, "generation failed: " + gen->error.message());
          }
          if (!sink.write(out.data(), out.size())) {
            gen->handle->Cancel();
            return false;
          }
          if (gen->done()) sink.done();
          return true;
        },
        [gen](bool) { gen->handle->Cancel(); });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, gen](size_t, httplib::DataSink& sink) {
        if (http.past_drain_deadline() && !gen->done()) {
          // Shutting down and out of grace: end the stream with an error event.
          gen->handle->Cancel();
          const std::string out = gen->Abort(kShutdownMessage);
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        std::string out;
        if (!gen->started) out += gen->Start();
        SequenceEvent ev;
        const auto wait = http.draining() ? 200ms : 1000ms;
        if (gen->handle->Next(&ev, out.empty() ? wait : 0ms)) {
          out += gen->OnEvent(ev, true);
          // Batch whatever else is ready into the same write.
          while (!gen->done() && gen->handle->Next(&ev, 0ms)) out += gen->OnEvent(ev, true);
        } else if (out.empty()) {
          out = SseComment("keep-alive");  // also finds out whether the client is still there
        }
        if (gen->done()) out += gen->End();
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          gen->handle->Cancel();
          return false;
        }
        if (gen->done()) sink.done();
        return true;
      },
      [gen](bool) { gen->handle->Cancel(); });
}

namespace {

// Whether host:port is bound by another socket (the reason a bind failed).
bool PortInUse(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) != 0) return false;
  bool in_use = false;
  for (addrinfo* ai = result; ai != nullptr && !in_use; ai = ai->ai_next) {
    const int sock = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (sock < 0) continue;
    const int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    in_use = ::bind(sock, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE;
    ::close(sock);
  }
  freeaddrinfo(result);
  return in_use;
}

std::string HostPort(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

}  // namespace

Status Server::Bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    port_ = s.http.bind_to_any_port(s.options.host.c_str());
    if (port_ < 0) {
      return IoError("could not bind " + s.options.host + " to any port", "check --host");
    }
  } else {
    if (!s.http.bind_to_port(s.options.host.c_str(), s.options.port)) {
      const std::string where = HostPort(s.options.host, s.options.port);
      if (PortInUse(s.options.host, s.options.port)) {
        return IoError(where + " is already in use (another process is listening on it)",
                       "stop the other server, or pass another --port (0 picks a free one)");
      }
      return IoError("could not bind " + where, "check --host and --port");
    }
    port_ = s.options.port;
  }
  // cpp-httplib listens with a backlog of 5: a burst of clients would overflow
  // the kernel's accept queue and be reset before a byte is read.
  if (!s.http.RaiseBacklog()) {
    LOG_WARNING(
        "serve: could not raise the listen backlog of port {}; bursts of clients may "
        "see connection resets",
        port_);
  }
  return Status::Ok();
}

void Server::Run() {
  impl_->http.listen_after_bind();
  impl_->http.ForgetListener();
}

void Server::Shutdown(std::chrono::milliseconds grace) {
  impl_->http.Drain(std::chrono::steady_clock::now() + grace);
}

void Server::Stop() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace dsv4::server
