// The Ollama API (ollama_api.h).
#include "server/ollama_api.h"

#include <fmt/core.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cmath>
#include <ctime>
#include <limits>
#include <memory>
#include <random>

#include "server/api_util.h"
#include "tokenizer/chat_dsv41.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Ollama's own defaults for the sampling options a request leaves out
// (docs/modelfile.md "Valid Parameters and Values"), except repeat_penalty:
// off (1.0), as in Ollama's own engine, which applies no repeat penalty.
constexpr float kDefaultTemperature = 0.8f;
constexpr int32_t kDefaultTopK = 40;
constexpr float kDefaultTopP = 0.9f;
constexpr int32_t kDefaultRepeatLastN = 64;

// The Ollama API version these routes follow (GET /api/version): clients
// compare it to decide which fields they may send (thinking, tool calls).
constexpr const char* kOllamaVersion = "0.12.6";

Status Bad(const std::string& field, const std::string& what, std::string hint = {}) {
  return InvalidArgument("'" + field + "' " + what, std::move(hint));
}

Status Refuse(const std::string& field, const std::string& hint) {
  return Unimplemented("'" + field + "' is not supported by this server", hint);
}

// A string field, "" when absent or null.
Result<std::string> StringField(const Json& obj, const char* key, const std::string& where) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) return Bad(where, std::string("must be a string, not ") + v->type_name());
  return v->get<std::string>();
}

// ---- options ----------------------------------------------------------------

enum class OptionKind { kInt, kFloat, kBool, kStrings };

// Every option Ollama knows (api/types.go Options and Runner), by JSON name.
// Unknown names are ignored, as Ollama does (with a warning in its log).
struct OptionSpec {
  const char* name;
  OptionKind kind;
};
constexpr OptionSpec kOptions[] = {
    {"num_keep", OptionKind::kInt},
    {"seed", OptionKind::kInt},
    {"num_predict", OptionKind::kInt},
    {"top_k", OptionKind::kInt},
    {"top_p", OptionKind::kFloat},
    {"min_p", OptionKind::kFloat},
    {"tfs_z", OptionKind::kFloat},
    {"typical_p", OptionKind::kFloat},
    {"repeat_last_n", OptionKind::kInt},
    {"temperature", OptionKind::kFloat},
    {"repeat_penalty", OptionKind::kFloat},
    {"presence_penalty", OptionKind::kFloat},
    {"frequency_penalty", OptionKind::kFloat},
    {"mirostat", OptionKind::kInt},
    {"mirostat_tau", OptionKind::kFloat},
    {"mirostat_eta", OptionKind::kFloat},
    {"penalize_newline", OptionKind::kBool},
    {"stop", OptionKind::kStrings},
    {"numa", OptionKind::kBool},
    {"num_ctx", OptionKind::kInt},
    {"num_batch", OptionKind::kInt},
    {"num_gpu", OptionKind::kInt},
    {"main_gpu", OptionKind::kInt},
    {"low_vram", OptionKind::kBool},
    {"f16_kv", OptionKind::kBool},
    {"logits_all", OptionKind::kBool},
    {"vocab_only", OptionKind::kBool},
    {"use_mmap", OptionKind::kBool},
    {"use_mlock", OptionKind::kBool},
    {"num_thread", OptionKind::kInt},
    {"embedding_only", OptionKind::kBool},
};

Status OptionTypeError(const std::string& name, const char* type) {
  return InvalidArgument("option \"" + name + "\" must be of type " + type,
                         "see Ollama's options (docs/modelfile.md)");
}

// Type checks every known option as Ollama does (its errors: `option "x" must
// be of type integer`); integers may come as JSON numbers with a fraction,
// which Ollama truncates.
Status CheckOptionTypes(const Json& options) {
  for (const auto& [key, value] : options.items()) {
    if (value.is_null()) continue;
    for (const OptionSpec& spec : kOptions) {
      if (key != spec.name) continue;
      switch (spec.kind) {
        case OptionKind::kInt:
          if (!value.is_number()) return OptionTypeError(key, "integer");
          break;
        case OptionKind::kFloat:
          if (!value.is_number()) return OptionTypeError(key, "float32");
          break;
        case OptionKind::kBool:
          if (!value.is_boolean()) return OptionTypeError(key, "boolean");
          break;
        case OptionKind::kStrings:
          if (!value.is_array()) return OptionTypeError(key, "array");
          for (const Json& s : value) {
            if (!s.is_string()) {
              return InvalidArgument("option \"" + key + "\" must be of an array of strings");
            }
          }
          break;
      }
    }
  }
  return Status::Ok();
}

// An integer option's value (a JSON number, CheckOptionTypes), truncated
// toward zero and saturated to int64.
int64_t IntOption(const Json& v) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (v.is_number_unsigned()) {
    return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kMax));
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  const double d = std::trunc(v.get<double>());
  if (d >= 9.2e18) return kMax;
  if (d <= -9.2e18) return kMin;
  return static_cast<int64_t>(d);
}

Status ApplyOptions(const Json* options, const RequestLimits& limits, OllamaRequest* r) {
  SamplingParams& s = r->gen.sampling;
  s.temperature = kDefaultTemperature;
  s.top_k = kDefaultTopK;
  s.top_p = kDefaultTopP;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.0f;
  s.repeat_last_n = kDefaultRepeatLastN;
  s.presence_penalty = 0.0f;
  s.frequency_penalty = 0.0f;
  if (options == nullptr) return Status::Ok();
  if (!options->is_object()) {
    return Bad("options", std::string("must be an object, not ") + options->type_name());
  }
  RETURN_IF_ERROR(CheckOptionTypes(*options));
  const Json& o = *options;
  const auto number = [&](const char* key, float* out) {
    if (const Json* v = Field(o, key); v != nullptr) *out = v->get<float>();
  };
  number("temperature", &s.temperature);
  number("top_p", &s.top_p);
  number("min_p", &s.min_p);
  number("repeat_penalty", &s.repeat_penalty);
  number("presence_penalty", &s.presence_penalty);
  number("frequency_penalty", &s.frequency_penalty);
  if (!(s.top_p >= 0.0f && s.top_p <= 1.0f)) {
    return InvalidArgument("option \"top_p\" is " + o["top_p"].dump() + "; it must be in [0, 1]");
  }
  if (s.top_p <= 0.0f) s.top_p = 1e-6f;  // 0: only the most likely token
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) {
    return InvalidArgument("option \"min_p\" is " + o["min_p"].dump() + "; it must be in [0, 1]");
  }
  if (const Json* v = Field(o, "top_k"); v != nullptr) {
    const int64_t k = IntOption(*v);
    s.top_k = k <= 0 ? 0 : static_cast<int32_t>(std::min<int64_t>(k, INT32_MAX));
  }
  if (const Json* v = Field(o, "repeat_last_n"); v != nullptr) {
    const int64_t n = IntOption(*v);
    if (n < -1) {
      return InvalidArgument("option \"repeat_last_n\" is " + v->dump() +
                             "; it must be -1 (the context), 0 (off) or a count");
    }
    // -1: the whole context (the caller bounds it by the context size).
    s.repeat_last_n =
        static_cast<int32_t>(n < 0 ? kMaxRepeatLastN : std::min<int64_t>(n, kMaxRepeatLastN));
  }
  if (const Json* v = Field(o, "seed"); v != nullptr) {
    // Ollama: a negative seed (its default, -1) means a random one.
    const int64_t seed = IntOption(*v);
    if (seed >= 0) {
      s.seed = static_cast<uint64_t>(seed);
      r->gen.has_seed = true;
    }
  }
  if (const Json* v = Field(o, "num_predict"); v != nullptr) {
    const int64_t n = IntOption(*v);
    if (n == 0 || n < -2) {
      return InvalidArgument("option \"num_predict\" is " + v->dump(),
                             "use -1 (no limit), -2 (fill the context) or a count >= 1");
    }
    // -1 and -2 both run until the end or the context is full.
    r->gen.max_tokens = n < 0 ? -1 : std::min<int64_t>(n, limits.ctx_size);
  }
  if (const Json* v = Field(o, "num_ctx"); v != nullptr) {
    // Ollama reloads the model for another context size; here the slots are
    // fixed: a smaller num_ctx bounds this request, a larger one is the
    // server's --ctx-size.
    const int64_t n = IntOption(*v);
    r->num_ctx = n > 0 && n < limits.ctx_size ? n : 0;
  }
  if (const Json* v = Field(o, "stop"); v != nullptr) {
    if (static_cast<int>(v->size()) > limits.max_stop) {
      return InvalidArgument("option \"stop\" has " + std::to_string(v->size()) +
                             " entries; at most " + std::to_string(limits.max_stop) +
                             " are allowed");
    }
    for (const Json& stop : *v) {
      const std::string text = stop.get<std::string>();
      if (static_cast<int64_t>(text.size()) > limits.max_stop_bytes) {
        return InvalidArgument("option \"stop\" holds a string of " + std::to_string(text.size()) +
                               " bytes; stop strings may have at most " +
                               std::to_string(limits.max_stop_bytes));
      }
      if (!text.empty()) r->gen.stop.push_back(text);
    }
  }
  const Status valid = ValidateSamplingParams(s);
  if (!valid.ok()) return InvalidArgument("options: " + valid.message(), valid.hint());
  return Status::Ok();
}

// ---- fields -----------------------------------------------------------------

// think: true / false, or "low" / "medium" / "high" (Ollama's levels).
Status GetThink(const Json& body, const OllamaModel& model, GenerationRequest* r) {
  const Json* t = Field(body, "think");
  if (t == nullptr) return Status::Ok();
  if (t->is_boolean()) {
    r->thinking = t->get<bool>();
  } else if (t->is_string() && (*t == "low" || *t == "medium" || *t == "high")) {
    // The DeepSeek-V4 encoding has two effort levels above the default:
    // high and max; Ollama's three levels all ask for reasoning, as
    // OpenAI's reasoning_effort does on the other routes.
    r->thinking = true;
    r->reasoning_effort = Dsv4ReasoningEffort::kHigh;
    // DeepSeek-V4.1's numeric effort: low 50, medium and high 75.
    r->reasoning_budget = *t == "low" ? kDsv41EffortLow : kDsv41EffortHigh;
  } else {
    return InvalidArgument("invalid think value: " + t->dump() +
                           " (must be \"high\", \"medium\", \"low\", true, or false)");
  }
  if (r->thinking && !model.thinking) {
    return InvalidArgument("\"" + model.limits.model_id + "\" does not support thinking",
                           "leave 'think' out or false");
  }
  return Status::Ok();
}

Status GetLogprobs(const Json& body, const RequestLimits& limits, GenerationRequest* r) {
  bool logprobs = false;
  if (const Json* v = Field(body, "logprobs"); v != nullptr) {
    if (!v->is_boolean()) return Bad("logprobs", "must be a boolean");
    logprobs = v->get<bool>();
  }
  int64_t top = 0;
  if (const Json* v = Field(body, "top_logprobs"); v != nullptr) {
    if (!v->is_number_integer()) return Bad("top_logprobs", "must be an integer");
    top = v->get<int64_t>();
    if (top < 0 || top > limits.max_top_logprobs) {
      return InvalidArgument("top_logprobs must be between 0 and " +
                             std::to_string(limits.max_top_logprobs));
    }
  }
  r->top_logprobs = logprobs ? static_cast<int>(top) : -1;
  return Status::Ok();
}

// Ollama's tool calls of an assistant message ({"function": {"name",
// "arguments": object}}) in the OpenAI shape the chat encoder reads.
Result<Json> ConvertToolCalls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) return Bad(where, "must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& c = calls[i];
    const Json* f = c.is_object() ? Field(c, "function") : nullptr;
    if (f == nullptr || !f->is_object()) return Bad(w + ".function", "must be an object");
    const Json* name = Field(*f, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Bad(w + ".function.name", "must be a non-empty string");
    }
    std::string arguments = "{}";
    if (const Json* a = Field(*f, "arguments"); a != nullptr) {
      if (a->is_object()) {
        arguments = Dump(*a);
      } else if (a->is_string()) {
        arguments = a->get<std::string>();  // some clients send the OpenAI spelling
      } else {
        return Bad(w + ".function.arguments", "must be an object");
      }
    }
    std::string id;
    if (const Json* v = Field(c, "id"); v != nullptr && v->is_string()) id = v->get<std::string>();
    out.push_back(Json{{"id", id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", arguments}}}});
  }
  return out;
}

// Ollama chat messages in the OpenAI shape (request.h's GenerationRequest).
Status ConvertMessages(const Json& messages, Json* out) {
  if (!messages.is_array()) {
    return Bad("messages", std::string("must be an array, not ") + messages.type_name());
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = messages[i];
    if (!m.is_object()) return Bad(where, "must be an object");
    const Json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return Bad(where + ".role", "is required and must be a string");
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return Bad(where + ".role", "is '" + utf8::Sanitize(r) + "'",
                 "roles: system, user, assistant, tool");
    }
    if (const Json* images = Field(m, "images"); images != nullptr) {
      if (!images->is_array()) return Bad(where + ".images", "must be an array");
      if (!images->empty()) {
        return Refuse(where + ".images",
                      "this server's models read text only; send the message without images");
      }
    }
    ASSIGN_OR_RETURN(std::string content, StringField(m, "content", where + ".content"));
    Json msg{{"role", r}, {"content", content}};
    if (r == "assistant") {
      ASSIGN_OR_RETURN(std::string thinking, StringField(m, "thinking", where + ".thinking"));
      if (!thinking.empty()) msg["reasoning_content"] = thinking;
      if (const Json* calls = Field(m, "tool_calls"); calls != nullptr) {
        ASSIGN_OR_RETURN(Json converted, ConvertToolCalls(*calls, where + ".tool_calls"));
        if (!converted.empty()) msg["tool_calls"] = std::move(converted);
      }
    }
    if (r == "tool") {
      // Ollama names the tool (tool_name); OpenAI-minded clients send an id.
      ASSIGN_OR_RETURN(std::string id, StringField(m, "tool_call_id", where + ".tool_call_id"));
      ASSIGN_OR_RETURN(std::string name, StringField(m, "tool_name", where + ".tool_name"));
      msg["tool_call_id"] = !id.empty() ? id : name;
    }
    out->push_back(std::move(msg));
  }
  return Status::Ok();
}

Status GetContext(const Json& body, const OllamaModel& model, std::vector<int32_t>* out) {
  const Json* c = Field(body, "context");
  if (c == nullptr) return Status::Ok();
  if (!c->is_array()) return Bad("context", "must be an array of token ids");
  if (static_cast<int64_t>(c->size()) >= model.limits.ctx_size) {
    return Bad("context",
               "holds " + std::to_string(c->size()) + " tokens; the context holds " +
                   std::to_string(model.limits.ctx_size),
               "start a new conversation without 'context'");
  }
  for (size_t i = 0; i < c->size(); ++i) {
    const Json& id = (*c)[i];
    const int64_t limit = model.vocab_size > 0 ? model.vocab_size : int64_t{1} << 31;
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit) {
      return Bad(
          "context[" + std::to_string(i) + "]",
          "is " + id.dump() + "; it must be a token id in [0, " + std::to_string(limit) + ")",
          "send back the 'context' of a previous /api/generate response as it is");
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return Status::Ok();
}

// ---- serving ----------------------------------------------------------------

void SendError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  if (status == 503) res.set_header("Retry-After", "1");
  res.set_content(OllamaErrorBody(message), "application/json");
}

void SendStatus(httplib::Response& res, const Status& s) {
  std::string message = s.message();
  if (!s.hint().empty()) message += " (hint: " + s.hint() + ")";
  SendError(res, HttpStatusOf(s), message);
}

int64_t Nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

constexpr const char* kShutdownMessage =
    "The server is shutting down and its grace period (--shutdown-grace) ended before this "
    "response finished";

// One /api/chat or /api/generate request on its HTTP thread.
struct Exchange {
  OllamaRequest request;
  std::string model;  // the name as the client sent it (Ollama echoes it)
  const Tokenizer* tokenizer = nullptr;
  std::shared_ptr<RequestHandle> handle;
  std::unique_ptr<ChoiceOutput> output;
  std::vector<std::string> tool_ids;
  size_t tool_calls_sent = 0;
  std::vector<int32_t> context;  // generate: prompt ids, then the generated ones
  int32_t eos_id = -1;           // appended to `context` after an EOS (kDsv4)
  int64_t prompt_tokens = 0;
  int64_t eval_count = 0;
  Clock::time_point start;  // the request arrived
  Clock::time_point submitted;
  Clock::time_point first_token;
  bool got_token = false;
  bool done = false;
  SequenceEvent final;
  Status error;
  Json logprobs = Json::array();

  bool chat() const { return request.endpoint == OllamaEndpoint::kChat; }

  std::string TokenText(int32_t id) const {
    return tokenizer != nullptr ? utf8::Sanitize(tokenizer->Decode(id))
                                : "token_id:" + std::to_string(id);
  }
  Json TokenJson(const TokenLogprob& t) const {
    Json bytes = Json::array();
    if (tokenizer != nullptr) {
      for (unsigned char c : tokenizer->Decode(t.id)) bytes.push_back(static_cast<int>(c));
    }
    return Json{{"token", TokenText(t.id)},
                {"logprob", std::isfinite(t.logprob) ? t.logprob : -9999.0},
                {"bytes", bytes}};
  }

  // Applies one engine event; returns the reasoning / content it completed,
  // and appends its logprobs to `added`.
  Dsv4OutputDelta OnEvent(const SequenceEvent& ev, Json* added) {
    if (!got_token && !ev.tokens.empty()) {
      got_token = true;
      first_token = Clock::now();
    }
    eval_count += static_cast<int64_t>(ev.tokens.size());
    if (!chat()) context.insert(context.end(), ev.tokens.begin(), ev.tokens.end());
    for (const TokenLogprobs& lp : ev.logprobs) {
      Json entry = TokenJson(lp.chosen);
      Json top = Json::array();
      for (const TokenLogprob& t : lp.top) top.push_back(TokenJson(t));
      entry["top_logprobs"] = std::move(top);
      logprobs.push_back(entry);
      added->push_back(std::move(entry));
    }
    Dsv4OutputDelta d = output->Push(ev.text);
    if (ev.finish != FinishReason::kNone) {
      Dsv4OutputDelta tail = output->Finish();
      d.reasoning += tail.reasoning;
      d.content += tail.content;
      done = true;
      final = ev;
      eval_count = ev.completion_tokens;
      if (!got_token) first_token = Clock::now();
      if (ev.finish == FinishReason::kError) error = ev.error;
      if (ev.finish == FinishReason::kStop && ev.stop_string.empty() && eos_id >= 0) {
        context.push_back(eos_id);
      }
    }
    return d;
  }

  Json Head() const {
    return Json{{"model", model},
                {"created_at", OllamaTimestamp(std::chrono::system_clock::now())}};
  }

  // The tool calls completed since the last line (all of them once done).
  Json NewToolCalls() {
    const auto& calls = output->result().tool_calls;
    // While generating, the last call may still be growing.
    const size_t complete = done ? calls.size() : (calls.empty() ? 0 : calls.size() - 1);
    if (complete <= tool_calls_sent) return Json::array();
    while (tool_ids.size() < calls.size()) tool_ids.push_back(RandomId("call_", 8));
    std::vector<Dsv4ToolCall> part(calls.begin() + static_cast<std::ptrdiff_t>(tool_calls_sent),
                                   calls.begin() + static_cast<std::ptrdiff_t>(complete));
    std::vector<std::string> ids(tool_ids.begin() + static_cast<std::ptrdiff_t>(tool_calls_sent),
                                 tool_ids.begin() + static_cast<std::ptrdiff_t>(complete));
    Json out = OllamaToolCalls(part, ids);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i]["function"]["index"] = static_cast<int64_t>(tool_calls_sent + i);
    }
    tool_calls_sent = complete;
    return out;
  }

  // A line (without "\n") carrying a piece of the answer; "" when there is none.
  std::string DeltaLine(const Dsv4OutputDelta& d, const Json& added) {
    Json calls = chat() ? NewToolCalls() : Json::array();
    if (d.reasoning.empty() && d.content.empty() && calls.empty() && added.empty()) return "";
    Json j = Head();
    if (chat()) {
      Json msg{{"role", "assistant"}, {"content", d.content}};
      if (!d.reasoning.empty()) msg["thinking"] = d.reasoning;
      if (!calls.empty()) msg["tool_calls"] = std::move(calls);
      j["message"] = std::move(msg);
    } else {
      j["response"] = d.content;
      if (!d.reasoning.empty()) j["thinking"] = d.reasoning;
    }
    j["done"] = false;
    if (!added.empty()) j["logprobs"] = added;
    return Dump(j);
  }

  void AddMetrics(Json& j) const {
    const Clock::time_point end = Clock::now();
    j["done"] = true;
    j["done_reason"] = request.load_only ? "load" : OllamaDoneReason(final.finish);
    if (!chat() && !request.load_only) j["context"] = context;
    j["total_duration"] = Nanos(end - start);
    j["load_duration"] = 0;  // the model is loaded once, at start
    j["prompt_eval_count"] = prompt_tokens;
    j["prompt_eval_duration"] = request.load_only ? 0 : Nanos(first_token - submitted);
    j["eval_count"] = eval_count;
    j["eval_duration"] = request.load_only ? 0 : Nanos(end - first_token);
  }

  // The last line of a stream.
  std::string DoneLine() const {
    Json j = Head();
    if (chat()) {
      j["message"] = Json{{"role", "assistant"}, {"content", ""}};
    } else {
      j["response"] = "";
    }
    AddMetrics(j);
    return Dump(j);
  }

  // The whole answer (stream: false).
  Json Response() {
    Json j = Head();
    const Dsv4ParsedOutput& r = output ? output->result() : Dsv4ParsedOutput{};
    if (chat()) {
      Json msg{{"role", "assistant"}, {"content", r.content}};
      if (!r.reasoning_content.empty()) msg["thinking"] = r.reasoning_content;
      if (output) {
        tool_calls_sent = 0;
        Json calls = NewToolCalls();
        if (!calls.empty()) msg["tool_calls"] = std::move(calls);
      }
      j["message"] = std::move(msg);
    } else {
      j["response"] = r.content;
      if (!r.reasoning_content.empty()) j["thinking"] = r.reasoning_content;
    }
    AddMetrics(j);
    if (request.gen.top_logprobs >= 0) j["logprobs"] = logprobs;
    return j;
  }
};

class OllamaRoutes {
 public:
  explicit OllamaRoutes(const OllamaServing& s) : s_(s) {
    const LoadedModel& m = s.engine->model();
    model_.limits = s.limits;
    model_.vocab_size = m.model ? m.model->info().vocab_size : 0;
    model_.tools = IsDeepSeekFormat(s.format);
    model_.thinking = IsDeepSeekFormat(s.format);
  }

  // The handlers share `self` (this object), so it lives as long as `http`'s routes.
  static void Register(HttpServer& http, const std::shared_ptr<OllamaRoutes>& self) {
    http.Post("/api/chat", [self](const httplib::Request& req, httplib::Response& res) {
      self->Generate(OllamaEndpoint::kChat, req, res);
    });
    http.Post("/api/generate", [self](const httplib::Request& req, httplib::Response& res) {
      self->Generate(OllamaEndpoint::kGenerate, req, res);
    });
    http.Get("/api/tags", [self](const httplib::Request&, httplib::Response& res) {
      Json model = self->ModelEntry();
      model["modified_at"] = self->ModifiedAt();
      model["size"] = self->SizeBytes();
      res.set_content(Dump(Json{{"models", Json::array({model})}}), "application/json");
    });
    http.Get("/api/ps", [self](const httplib::Request&, httplib::Response& res) {
      Json model = self->ModelEntry();
      // Loaded for as long as the server runs: no expiry Ollama could name.
      model["expires_at"] = "9999-12-31T23:59:59Z";
      model["size"] = self->SizeBytes();
      model["size_vram"] = 0;
      model["context_length"] = self->s_.engine->ctx_size();
      res.set_content(Dump(Json{{"models", Json::array({model})}}), "application/json");
    });
    http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(Dump(Json{{"version", kOllamaVersion}}), "application/json");
    });
    http.Post("/api/show", [self](const httplib::Request& req, httplib::Response& res) {
      self->Show(req, res);
    });
  }

 private:
  std::string ModifiedAt() const {
    return OllamaTimestamp(
        std::chrono::system_clock::from_time_t(static_cast<std::time_t>(s_.started)));
  }

  // The weight files' bytes on disk.
  int64_t SizeBytes() const {
    int64_t total = 0;
    for (const std::string& f : s_.engine->model().files) {
      struct stat st {};
      if (::stat(f.c_str(), &st) == 0) total += static_cast<int64_t>(st.st_size);
    }
    return total;
  }

  Json Details() const {
    const LoadedModel& m = s_.engine->model();
    const std::string family = m.model ? m.model->info().architecture : "";
    return Json{{"parent_model", ""},
                {"format", m.format},
                {"family", family},
                {"families", Json::array({family})},
                {"parameter_size", m.model ? OllamaParameterSize(m.model->info().n_params) : ""},
                // The weights' storage is per tensor (bf16, FP8, FP4, GGUF
                // block types) and has no one Ollama name.
                {"quantization_level", ""}};
  }

  Json ModelEntry() const {
    return Json{{"name", s_.model_id},
                {"model", s_.model_id},
                {"digest", fmt::format("{:016x}", s_.engine->model().load_hash)},
                {"details", Details()}};
  }

  Json Capabilities() const {
    Json caps = Json::array({"completion"});
    if (model_.tools) caps.push_back("tools");
    if (model_.thinking) caps.push_back("thinking");
    return caps;
  }

  void Show(const httplib::Request& req, httplib::Response& res) {
    Result<Json> body = ParseJsonBody(req.body);
    if (!body.ok()) return SendStatus(res, body.status());
    // "name" is the older spelling Ollama still reads.
    const Json* name = Field(*body, "model");
    if (name == nullptr) name = Field(*body, "name");
    if (name == nullptr) return SendError(res, 400, "model is required");
    if (!name->is_string()) return SendError(res, 400, "'model' must be a string");
    if (!OllamaModelMatches(name->get<std::string>(), s_.model_id)) {
      return SendError(res, 404, "model \"" + name->get<std::string>() + "\" not found");
    }
    const LoadedModel& m = s_.engine->model();
    const std::string arch = m.model ? m.model->info().architecture : "";
    Json info{{"general.architecture", arch},
              {"general.parameter_count", m.model ? m.model->info().n_params : 0},
              {arch + ".context_length", m.model ? m.model->info().max_context : 0}};
    if (model_.vocab_size > 0) info[arch + ".vocab_size"] = model_.vocab_size;
    const std::string parameters = fmt::format(
        "temperature {}\ntop_k {}\ntop_p {}\nrepeat_last_n {}\nnum_ctx {}", kDefaultTemperature,
        kDefaultTopK, kDefaultTopP, kDefaultRepeatLastN, s_.engine->ctx_size());
    Json out{{"license", ""},
             {"modelfile", "# served by dsv4\nFROM " + m.path + "\n"},
             {"parameters", parameters},
             {"template", m.chat_template},
             {"details", Details()},
             {"model_info", info},
             {"capabilities", Capabilities()},
             {"modified_at", ModifiedAt()}};
    res.set_content(Dump(out), "application/json");
  }

  // The prompt ids of a request (not load_only).
  Result<std::vector<int32_t>> PromptIds(const OllamaRequest& r) const {
    const LoadedModel& m = s_.engine->model();
    if (!m.tokenizer) {
      return InvalidArgument("this model has no tokenizer, so it cannot take text prompts");
    }
    std::vector<int32_t> ids = r.context;
    if (r.raw) {
      const std::vector<int32_t> p =
          m.tokenizer->Encode(r.prompt, s_.format == ChatFormat::kPlain && r.context.empty());
      ids.insert(ids.end(), p.begin(), p.end());
      return ids;
    }
    ASSIGN_OR_RETURN(ChatPrompt prompt, BuildChatPrompt(r.gen, s_.format));
    std::vector<int32_t> p =
        TokenizePrompt(*m.tokenizer, prompt, s_.format, s_.allow_special_in_content);
    // A context already begins with BOS: the new turn continues it.
    const int32_t bos = m.model ? m.model->info().bos_id : -1;
    size_t skip = !r.context.empty() && !p.empty() && p.front() == bos ? 1 : 0;
    ids.insert(ids.end(), p.begin() + static_cast<std::ptrdiff_t>(skip), p.end());
    return ids;
  }

  void Generate(OllamaEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    auto ex = std::make_shared<Exchange>();
    ex->start = Clock::now();
    if (s_.http->draining()) {
      return SendError(res, 503, "The server is shutting down; retry on another instance");
    }
    Result<Json> body = ParseJsonBody(req.body);
    if (!body.ok()) return SendStatus(res, body.status());
    Result<OllamaRequest> parsed = ParseOllamaRequest(endpoint, *body, model_);
    if (!parsed.ok()) return SendStatus(res, parsed.status());
    ex->request = std::move(parsed).value();
    ex->model = ex->request.gen.model;
    const LoadedModel& m = s_.engine->model();
    ex->tokenizer = m.tokenizer.get();
    const OllamaRequest& r = ex->request;
    if (r.load_only) {
      // Ollama answers a request without messages or prompt by loading the
      // model: one final object, streamed or not.
      ex->done = true;
      const std::string body_text =
          ex->request.gen.stream ? ex->DoneLine() + "\n" : Dump(ex->Response());
      res.set_content(body_text,
                      ex->request.gen.stream ? "application/x-ndjson" : "application/json");
      return;
    }
    Result<std::vector<int32_t>> prompt = PromptIds(r);
    if (!prompt.ok()) return SendStatus(res, prompt.status());
    const int64_t ctx = r.num_ctx > 0 ? r.num_ctx : s_.engine->ctx_size();
    if (prompt->empty()) return SendError(res, 400, "the prompt is empty");
    if (static_cast<int64_t>(prompt->size()) >= ctx) {
      return SendError(res, 400,
                       "the prompt has " + std::to_string(prompt->size()) +
                           " tokens, but the context holds " + std::to_string(ctx) +
                           (r.num_ctx > 0 ? " (options.num_ctx)" : " (prompt + output)"));
    }
    ex->prompt_tokens = static_cast<int64_t>(prompt->size());
    if (endpoint == OllamaEndpoint::kGenerate) ex->context = *prompt;
    if (IsDeepSeekFormat(s_.format) && !r.raw && m.model) ex->eos_id = m.model->info().eos_id;

    SequenceRequest seq;
    seq.prompt = std::move(prompt).value();
    const int64_t room = ctx - static_cast<int64_t>(seq.prompt.size());
    seq.max_tokens = r.gen.max_tokens > 0 ? std::min(r.gen.max_tokens, room) : room;
    seq.sampling = r.gen.sampling;
    seq.sampling.repeat_last_n =
        static_cast<int32_t>(std::min<int64_t>(seq.sampling.repeat_last_n, ctx));
    if (!r.gen.has_seed) seq.sampling.seed = RandomSeed();
    seq.stop = r.gen.stop;
    seq.top_logprobs = r.gen.top_logprobs;
    const bool parse = IsDeepSeekFormat(s_.format) && !r.raw;
    if (r.gen.response_format != ResponseFormat::kText) {
      // `format`: the answer is JSON (after the reasoning, when thinking).
      Result<ConstraintFactory> structured =
          s_.structured(r.gen, r.gen.thinking && parse, {"format", "format"});
      if (!structured.ok()) return SendStatus(res, structured.status());
      seq.constraint = *structured;
    }
    ex->output =
        std::make_unique<ChoiceOutput>(parse, r.gen.thinking && parse, DsmlDialectOf(s_.format));
    std::vector<SequenceRequest> seqs;
    seqs.push_back(std::move(seq));
    ex->submitted = Clock::now();
    Result<std::shared_ptr<RequestHandle>> handle = s_.engine->Submit(std::move(seqs));
    if (!handle.ok()) return SendStatus(res, handle.status());
    ex->handle = *handle;
    if (r.gen.stream) return Stream(ex, res);
    return Whole(ex, res);
  }

  // stream: false. Ready within a second: a plain response with its exact
  // status; longer: chunked, one space per second of waiting before the JSON
  // (JSON allows leading whitespace), so that a client that went away is
  // noticed and its sequence cancelled (as server.cc's other routes do).
  void Whole(const std::shared_ptr<Exchange>& ex, httplib::Response& res) {
    Json added = Json::array();
    SequenceEvent ev;
    const auto deadline = Clock::now() + 1000ms;
    while (!ex->done && Clock::now() < deadline) {
      if (ex->handle->Next(&ev, 100ms)) ex->OnEvent(ev, &added);
    }
    if (ex->done) {
      if (!ex->error.ok()) return SendError(res, 500, "generation failed: " + ex->error.message());
      res.set_content(Dump(ex->Response()), "application/json");
      return;
    }
    HttpServer* http = s_.http;
    res.set_chunked_content_provider(
        "application/json",
        [http, ex](size_t, httplib::DataSink& sink) {
          if (http->past_drain_deadline() && !ex->done) {
            ex->handle->Cancel();
            const std::string out = OllamaErrorBody(kShutdownMessage);
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          }
          Json added = Json::array();
          SequenceEvent ev;
          if (ex->handle->Next(&ev, http->draining() ? 200ms : 1000ms)) {
            ex->OnEvent(ev, &added);
            while (!ex->done && ex->handle->Next(&ev, 0ms)) ex->OnEvent(ev, &added);
          }
          std::string out = " ";
          if (ex->done) {
            out = ex->error.ok() ? Dump(ex->Response())
                                 : OllamaErrorBody("generation failed: " + ex->error.message());
          }
          if (!sink.write(out.data(), out.size())) {
            ex->handle->Cancel();
            return false;
          }
          if (ex->done) sink.done();
          return true;
        },
        [ex](bool) { ex->handle->Cancel(); });
  }

  // NDJSON: one object per line, the last with done: true. While nothing is
  // ready for a second a space is written (it becomes leading whitespace of
  // the next line), which also finds out whether the client is still there.
  void Stream(const std::shared_ptr<Exchange>& ex, httplib::Response& res) {
    HttpServer* http = s_.http;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "application/x-ndjson",
        [http, ex](size_t, httplib::DataSink& sink) {
          if (http->past_drain_deadline() && !ex->done) {
            ex->handle->Cancel();
            const std::string out = OllamaErrorBody(kShutdownMessage) + "\n";
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          }
          std::string out;
          SequenceEvent ev;
          const auto wait = http->draining() ? 200ms : 1000ms;
          if (ex->handle->Next(&ev, wait)) {
            Json added = Json::array();
            Dsv4OutputDelta d = ex->OnEvent(ev, &added);
            // Batch whatever else is ready into the same line.
            while (!ex->done && ex->handle->Next(&ev, 0ms)) {
              const Dsv4OutputDelta more = ex->OnEvent(ev, &added);
              d.reasoning += more.reasoning;
              d.content += more.content;
            }
            const std::string line = ex->DeltaLine(d, added);
            if (!line.empty()) out += line + "\n";
          } else {
            out = " ";
          }
          if (ex->done) {
            out += ex->error.ok() ? ex->DoneLine()
                                  : OllamaErrorBody("generation failed: " + ex->error.message());
            out += "\n";
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            ex->handle->Cancel();
            return false;
          }
          if (ex->done) sink.done();
          return true;
        },
        [ex](bool) { ex->handle->Cancel(); });
  }

  OllamaServing s_;
  OllamaModel model_;
};

}  // namespace

bool OllamaModelMatches(std::string_view model, std::string_view served) {
  if (model == served) return true;
  constexpr std::string_view kLatest = ":latest";
  const bool served_tagged = served.find(':') != std::string_view::npos;
  return !served_tagged && model.size() == served.size() + kLatest.size() &&
         model.substr(0, served.size()) == served && model.substr(served.size()) == kLatest;
}

Result<OllamaRequest> ParseOllamaRequest(OllamaEndpoint endpoint, const Json& body,
                                         const OllamaModel& model) {
  OllamaRequest r;
  r.endpoint = endpoint;
  r.gen.api = Api::kChat;
  const Json* name = Field(body, "model");
  if (name == nullptr) return InvalidArgument("model is required");
  if (!name->is_string())
    return Bad("model", std::string("must be a string, not ") + name->type_name());
  r.gen.model = name->get<std::string>();
  if (!OllamaModelMatches(r.gen.model, model.limits.model_id)) {
    return NotFound("model \"" + utf8::Sanitize(r.gen.model) +
                    "\" not found, try pulling it first");
  }
  r.gen.stream = true;  // Ollama streams unless told not to
  if (const Json* v = Field(body, "stream"); v != nullptr) {
    if (!v->is_boolean()) return Bad("stream", "must be a boolean");
    r.gen.stream = v->get<bool>();
  }
  if (const Json* f = Field(body, "format"); f != nullptr && *f != Json("")) {
    if (f->is_string() && *f == "json") {
      r.gen.response_format = ResponseFormat::kJsonObject;
    } else if (f->is_object()) {
      r.gen.response_format = ResponseFormat::kJsonSchema;
      r.gen.json_schema = *f;
    } else {
      return Bad("format", "must be \"json\" or a JSON schema object");
    }
  }
  if (const Json* k = Field(body, "keep_alive");
      k != nullptr && !k->is_number() && !k->is_string()) {
    return Bad("keep_alive", "must be a duration: a number of seconds or a string such as \"5m\"");
  }
  RETURN_IF_ERROR(ApplyOptions(Field(body, "options"), model.limits, &r));
  RETURN_IF_ERROR(GetLogprobs(body, model.limits, &r.gen));
  RETURN_IF_ERROR(GetThink(body, model, &r.gen));
  if (endpoint == OllamaEndpoint::kChat) {
    if (const Json* messages = Field(body, "messages"); messages != nullptr) {
      RETURN_IF_ERROR(ConvertMessages(*messages, &r.gen.messages));
    }
    if (const Json* tools = Field(body, "tools"); tools != nullptr) {
      RETURN_IF_ERROR(ValidateTools(*tools, "tools"));
      if (!tools->empty() && !model.tools) {
        return InvalidArgument("\"" + model.limits.model_id + "\" does not support tools",
                               "leave 'tools' out");
      }
      r.gen.tools = *tools;
    }
    r.load_only = r.gen.messages.empty();
    return r;
  }
  // /api/generate.
  ASSIGN_OR_RETURN(std::string prompt, StringField(body, "prompt", "prompt"));
  ASSIGN_OR_RETURN(std::string system, StringField(body, "system", "system"));
  ASSIGN_OR_RETURN(std::string suffix, StringField(body, "suffix", "suffix"));
  ASSIGN_OR_RETURN(std::string templ, StringField(body, "template", "template"));
  if (!suffix.empty()) {
    return Refuse("suffix", "fill-in-the-middle is not implemented; leave 'suffix' out");
  }
  if (!templ.empty()) {
    return Refuse("template",
                  "the server renders its model's own chat format; leave 'template' out, or "
                  "send the whole prompt with 'raw': true");
  }
  if (const Json* images = Field(body, "images"); images != nullptr) {
    if (!images->is_array()) return Bad("images", "must be an array");
    if (!images->empty()) {
      return Refuse("images", "this server's models read text only; leave 'images' out");
    }
  }
  if (const Json* raw = Field(body, "raw"); raw != nullptr) {
    if (!raw->is_boolean()) return Bad("raw", "must be a boolean");
    r.raw = raw->get<bool>();
  }
  RETURN_IF_ERROR(GetContext(body, model, &r.context));
  if (r.raw && r.gen.thinking) {
    return Bad("think", "needs the chat template, which 'raw': true leaves out");
  }
  r.load_only = prompt.empty();
  if (r.raw) {
    r.prompt = std::move(prompt);
    return r;
  }
  if (!system.empty()) r.gen.messages.push_back(Json{{"role", "system"}, {"content", system}});
  r.gen.messages.push_back(Json{{"role", "user"}, {"content", prompt}});
  return r;
}

std::string OllamaErrorBody(std::string_view message) {
  return Dump(Json{{"error", std::string(message)}});
}

bool IsOllamaPath(std::string_view path) { return path.rfind("/api/", 0) == 0; }

std::string OllamaRoute(std::string_view path) {
  for (const char* route :
       {"/api/chat", "/api/generate", "/api/tags", "/api/show", "/api/ps", "/api/version"}) {
    if (path == route) return route;
  }
  return "";
}

std::string OllamaParameterSize(int64_t n_params) {
  struct Unit {
    double scale;
    const char* suffix;
  };
  constexpr Unit kUnits[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const Unit& u : kUnits) {
    if (static_cast<double>(n_params) < u.scale) continue;
    const double v = static_cast<double>(n_params) / u.scale;
    // Three significant digits at most: 671B, 13.4B, 8.03B.
    std::string s = fmt::format("{:.{}f}", v, v >= 100 ? 0 : v >= 10 ? 1 : 2);
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s + u.suffix;
  }
  return std::to_string(n_params);
}

std::string OllamaTimestamp(std::chrono::system_clock::time_point t) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs =
      static_cast<std::time_t>(ns / 1000000000 - (ns % 1000000000 < 0 ? 1 : 0));
  const int64_t frac = ((ns % 1000000000) + 1000000000) % 1000000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:09d}Z", buf, frac);
}

const char* OllamaDoneReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

Json OllamaToolCalls(const std::vector<Dsv4ToolCall>& calls, const std::vector<std::string>& ids) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json args = Json::parse(calls[i].arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) args = Json::object();
    Json call = Json::object();
    if (i < ids.size()) call["id"] = ids[i];
    call["function"] = Json{{"index", static_cast<int64_t>(i)},
                            {"name", calls[i].name},
                            {"arguments", std::move(args)}};
    out.push_back(std::move(call));
  }
  return out;
}

void AddOllamaRoutes(HttpServer& http, const OllamaServing& serving) {
  OllamaRoutes::Register(http, std::make_shared<OllamaRoutes>(serving));
}

}  // namespace dsv4::server
