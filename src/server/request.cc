// Request parsing and validation (request.h).
#include "server/request.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "server/api_util.h"
#include "tokenizer/chat_dsv41.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;

const char* TypeName(const Json& v) { return v.type_name(); }

Status Bad(const std::string& field, const std::string& what, std::string hint = {}) {
  return InvalidArgument("'" + field + "' " + what, std::move(hint));
}

Status GetBool(const Json& obj, const char* key, bool* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Bad(key, std::string("must be a boolean, not ") + TypeName(*v));
  *out = v->get<bool>();
  return Status::Ok();
}

Status GetNumber(const Json& obj, const char* key, double lo, double hi, float* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Bad(key, std::string("must be a number, not ") + TypeName(*v));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) {
    return Bad(key, "is " + v->dump() + "; it must be in [" + Json(lo).dump() + ", " +
                        Json(hi).dump() + "]");
  }
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status GetInt(const Json& obj, const char* key, int64_t lo, int64_t hi, int64_t* out,
              const std::string& hint = {}) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d != std::floor(d)) return Bad(key, "must be an integer, not " + v->dump());
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) {
      return Bad(key,
                 "is " + v->dump() + "; it must be in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]",
                 hint);
    }
    *out = static_cast<int64_t>(d);
    return Status::Ok();
  }
  if (!v->is_number_integer()) {
    return Bad(key, std::string("must be an integer, not ") + TypeName(*v));
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Bad(key, "is " + v->dump() + "; it must be at most " + std::to_string(hi), hint);
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) {
    return Bad(key,
               "is " + std::to_string(i) + "; it must be in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]",
               hint);
  }
  *out = i;
  return Status::Ok();
}

Status GetStop(const Json& obj, const char* key, const RequestLimits& limits,
               std::vector<std::string>* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  const auto too_long = [&](const std::string& field, const std::string& s) -> Status {
    if (static_cast<int64_t>(s.size()) <= limits.max_stop_bytes) return Status::Ok();
    return Bad(field, "is " + std::to_string(s.size()) + " bytes; stop strings may have at most " +
                          std::to_string(limits.max_stop_bytes));
  };
  if (v->is_string()) {
    RETURN_IF_ERROR(too_long(key, v->get<std::string>()));
    if (!v->get<std::string>().empty()) out->push_back(v->get<std::string>());
    return Status::Ok();
  }
  if (!v->is_array()) return Bad(key, std::string("must be a string or an array of strings"));
  if (static_cast<int>(v->size()) > limits.max_stop) {
    return Bad(key, "has " + std::to_string(v->size()) + " entries; at most " +
                        std::to_string(limits.max_stop) + " are allowed");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& s = (*v)[i];
    const std::string field = std::string(key) + "[" + std::to_string(i) + "]";
    if (!s.is_string() || s.get<std::string>().empty()) {
      return Bad(field, "must be a non-empty string");
    }
    RETURN_IF_ERROR(too_long(field, s.get<std::string>()));
    out->push_back(s.get<std::string>());
  }
  return Status::Ok();
}

Status CheckModel(const Json& body, const RequestLimits& limits, std::string* model) {
  const Json* v = Field(body, "model");
  if (v == nullptr) return Bad("model", "is required", "use \"" + limits.model_id + "\"");
  if (!v->is_string()) return Bad("model", std::string("must be a string, not ") + TypeName(*v));
  *model = v->get<std::string>();
  if (*model != limits.model_id) {
    return NotFound("The model '" + *model + "' does not exist",
                    "this server serves \"" + limits.model_id + "\" (see GET /v1/models)");
  }
  return Status::Ok();
}

// temperature, top_p, top_k, min_p, penalties, seed: the OpenAI spellings,
// plus top_k / min_p / repetition_penalty as vLLM and llama.cpp accept them.
Status GetSampling(const Json& body, Api api, GenerationRequest* r) {
  SamplingParams& s = r->sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.0f;
  s.presence_penalty = 0.0f;
  s.frequency_penalty = 0.0f;
  const double max_temp = api == Api::kMessages ? 1.0 : 2.0;
  RETURN_IF_ERROR(GetNumber(body, "temperature", 0.0, max_temp, &s.temperature));
  RETURN_IF_ERROR(GetNumber(body, "top_p", 0.0, 1.0, &s.top_p));
  if (s.top_p <= 0.0f) s.top_p = 1e-6f;  // 0: only the most likely token
  int64_t top_k = 0;
  RETURN_IF_ERROR(GetInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  RETURN_IF_ERROR(GetNumber(body, "min_p", 0.0, 1.0, &s.min_p));
  if (api != Api::kMessages) {
    RETURN_IF_ERROR(GetNumber(body, "presence_penalty", -2.0, 2.0, &s.presence_penalty));
    RETURN_IF_ERROR(GetNumber(body, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty));
    RETURN_IF_ERROR(GetNumber(body, "repetition_penalty", 0.01, 10.0, &s.repeat_penalty));
    if (const Json* seed = Field(body, "seed"); seed != nullptr) {
      if (!seed->is_number_integer()) {
        return Bad("seed", std::string("must be an integer, not ") + TypeName(*seed));
      }
      s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                          : static_cast<uint64_t>(seed->get<int64_t>());
      r->has_seed = true;
    }
  }
  if (const Json* lb = Field(body, "logit_bias"); lb != nullptr && api != Api::kMessages) {
    // OpenAI: {"token id": bias in [-100, 100]}, added to the logits.
    if (!lb->is_object()) return Bad("logit_bias", "must be an object of token id: bias");
    for (const auto& [key, value] : lb->items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 ||
          id > std::numeric_limits<int32_t>::max()) {
        return Bad("logit_bias", "key \"" + key + "\" is not a token id");
      }
      if (!value.is_number() || value.get<double>() < -100.0 || value.get<double>() > 100.0) {
        return Bad("logit_bias[\"" + key + "\"]", "must be a number in [-100, 100]");
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  return ValidateSamplingParams(s);
}

// Structured output: OpenAI's response_format ({"type": "text" | "json_object"
// | "json_schema", "json_schema": {"name", "schema", "strict", "description"}})
// and Anthropic's output_config.format ({"type": "json_schema", "schema"}).
// The schema itself is compiled (and its keywords checked) by the server.
Status GetResponseFormat(const Json& body, Api api, GenerationRequest* r) {
  if (api == Api::kMessages) {
    const Json* oc = Field(body, "output_config");
    if (oc == nullptr) return Status::Ok();
    if (!oc->is_object()) return Bad("output_config", "must be an object");
    const Json* format = Field(*oc, "format");
    if (format == nullptr) return Status::Ok();
    if (!format->is_object()) return Bad("output_config.format", "must be an object");
    const Json* type = Field(*format, "type");
    if (type == nullptr || *type != Json("json_schema")) {
      return Bad("output_config.format.type", "must be \"json_schema\"");
    }
    const Json* schema = Field(*format, "schema");
    if (schema == nullptr || !schema->is_object()) {
      return Bad("output_config.format.schema", "is required: a JSON Schema object");
    }
    r->response_format = ResponseFormat::kJsonSchema;
    r->json_schema = *schema;
    return Status::Ok();
  }
  const Json* rf = Field(body, "response_format");
  if (rf == nullptr) return Status::Ok();
  if (!rf->is_object()) return Bad("response_format", "must be an object");
  const Json* type = Field(*rf, "type");
  if (type == nullptr || !type->is_string()) {
    return Bad("response_format.type",
               "is required (\"text\", \"json_object\" or \"json_schema\")");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return Status::Ok();
  if (t == "json_object") {
    r->response_format = ResponseFormat::kJsonObject;
    return Status::Ok();
  }
  if (t != "json_schema") {
    return Bad("response_format.type",
               "must be \"text\", \"json_object\" or \"json_schema\", not \"" + t + "\"");
  }
  const Json* js = Field(*rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return Bad("response_format.json_schema",
               "is required with type \"json_schema\": an object "
               "with 'name' and 'schema'");
  }
  const Json* name = Field(*js, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return Bad("response_format.json_schema.name", "is required: a non-empty string");
  }
  if (const Json* strict = Field(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
    return Bad("response_format.json_schema.strict", "must be a boolean");
  }
  r->response_format = ResponseFormat::kJsonSchema;
  r->json_schema = Json::object();  // no schema: any JSON value
  if (const Json* schema = Field(*js, "schema"); schema != nullptr) {
    if (!schema->is_object() && !schema->is_boolean()) {
      return Bad("response_format.json_schema.schema", "must be a JSON Schema object");
    }
    r->json_schema = *schema;
  }
  return Status::Ok();
}

// Fields of the OpenAI and Anthropic APIs this server does not implement: a
// 400 that names them, never a silent free-text answer.
Status RefuseUnimplemented(const Json& body, Api api) {
  const auto refuse = [](const std::string& field, const std::string& hint) {
    return Unimplemented("'" + field + "' is not supported by this server", hint);
  };
  if (api == Api::kMessages) return Status::Ok();
  if (api == Api::kCompletion) {
    for (const char* legacy : {"functions", "function_call"}) {
      if (Field(body, legacy) != nullptr) {
        return refuse(legacy, "function calling is part of /v1/chat/completions");
      }
    }
  }
  if (Field(body, "audio") != nullptr) return refuse("audio", "this server answers in text only");
  if (const Json* m = Field(body, "modalities"); m != nullptr) {
    if (!m->is_array()) return Bad("modalities", "must be an array");
    for (const Json& x : *m) {
      if (x != Json("text")) {
        return refuse("modalities " + x.dump(), "this server answers in text only: [\"text\"]");
      }
    }
  }
  return Status::Ok();
}

Status GetMaxTokens(const Json& body, const char* key, const RequestLimits& limits, int64_t* out) {
  return GetInt(body, key, 1, limits.ctx_size, out,
                "the server's context holds " + std::to_string(limits.ctx_size) + " tokens");
}

// A tool name goes into DSML markup (name="NAME"), so it may not hold quotes,
// angle brackets or control characters.
Status CheckToolName(const std::string& name, const std::string& where) {
  if (name.empty()) return Bad(where, "must be a non-empty string");
  for (unsigned char c : name) {
    if (c < 0x20 || c == '"' || c == '<' || c == '>' || c == 0x7f) {
      std::string what = "'";
      what += utf8::Sanitize(name);
      what += "' holds a quote, '<', '>' or a control character";
      return Bad(where, what, "use letters, digits, '_' and '-'");
    }
  }
  return Status::Ok();
}

Status CheckTools(const Json& tools, const std::string& key) {
  if (!tools.is_array()) return Bad(key, std::string("must be an array, not ") + TypeName(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = key + "[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(where, "must be an object");
    const Json* type = Field(t, "type");
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
      return Bad(where + ".type", "must be \"function\"");
    }
    const Json* f = Field(t, "function");
    if (f == nullptr || !f->is_object()) return Bad(where + ".function", "must be an object");
    const Json* name = Field(*f, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Bad(where + ".function.name", "must be a non-empty string");
    }
    RETURN_IF_ERROR(CheckToolName(name->get<std::string>(), where + ".function.name"));
    if (const Json* d = Field(*f, "description"); d != nullptr && !d->is_string()) {
      return Bad(where + ".function.description", "must be a string");
    }
    if (const Json* p = Field(*f, "parameters"); p != nullptr && !p->is_object()) {
      return Bad(where + ".function.parameters",
                 std::string("must be a JSON Schema object, not ") + TypeName(*p));
    }
  }
  return Status::Ok();
}

Status CheckToolChoice(const Json& body, GenerationRequest* r) {
  const Json* v = Field(body, "tool_choice");
  if (v == nullptr) return Status::Ok();
  if (v->is_string()) {
    const std::string c = v->get<std::string>();
    if (c != "auto" && c != "none" && c != "required") {
      return Bad("tool_choice", "must be \"auto\", \"none\", \"required\" or an object");
    }
    r->tool_choice = c;
  } else if (v->is_object()) {
    const Json* f = Field(*v, "function");
    const Json* name = f != nullptr && f->is_object() ? Field(*f, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return Bad("tool_choice.function.name", "must be a string");
    }
    r->tool_choice = "function";
    r->tool_choice_name = name->get<std::string>();
  } else {
    return Bad("tool_choice", std::string("must be a string or an object, not ") + TypeName(*v));
  }
  if (r->tool_choice != "auto" && r->tool_choice != "none" && r->tools.empty()) {
    return Bad("tool_choice", "needs 'tools'");
  }
  if (r->tool_choice == "function") {
    bool found = false;
    for (const Json& t : r->tools) found |= t["function"]["name"] == r->tool_choice_name;
    if (!found)
      return Bad("tool_choice", "names '" + r->tool_choice_name + "', which is not in 'tools'");
  }
  return Status::Ok();
}

// OpenAI's legacy function calling: `functions` ([{name, description,
// parameters}]) become function tools and `function_call` ("none", "auto" or
// {"name": X}) becomes tool_choice. Neither may be mixed with its successor.
// The legacy response carries one call, so at most one is made.
Status GetLegacyFunctions(const Json& body, GenerationRequest* r) {
  const Json* functions = Field(body, "functions");
  const Json* call = Field(body, "function_call");
  if (functions != nullptr && Field(body, "tools") != nullptr) {
    return Bad("functions", "cannot be sent together with 'tools'",
               "send either 'tools' or the legacy 'functions'");
  }
  if (call != nullptr && Field(body, "tool_choice") != nullptr) {
    return Bad("function_call", "cannot be sent together with 'tool_choice'",
               "send either 'tool_choice' or the legacy 'function_call'");
  }
  if (call != nullptr && Field(body, "tools") != nullptr) {
    return Bad("function_call", "goes with 'functions', not with 'tools'",
               "use 'tool_choice' with 'tools'");
  }
  if (functions != nullptr) {
    if (!functions->is_array()) {
      return Bad("functions", std::string("must be an array, not ") + TypeName(*functions));
    }
    if (functions->empty()) return Bad("functions", "must not be empty", "leave it out");
    for (size_t i = 0; i < functions->size(); ++i) {
      const std::string where = "functions[" + std::to_string(i) + "]";
      const Json& fn = (*functions)[i];
      if (!fn.is_object()) return Bad(where, "must be an object");
      const Json* name = Field(fn, "name");
      if (name == nullptr || !name->is_string()) {
        return Bad(where + ".name", "must be a non-empty string");
      }
      RETURN_IF_ERROR(CheckToolName(name->get<std::string>(), where + ".name"));
      Json f{{"name", *name}};
      if (const Json* d = Field(fn, "description"); d != nullptr) {
        if (!d->is_string()) return Bad(where + ".description", "must be a string");
        f["description"] = *d;
      }
      if (const Json* p = Field(fn, "parameters"); p != nullptr) {
        if (!p->is_object()) {
          return Bad(where + ".parameters",
                     std::string("must be a JSON Schema object, not ") + TypeName(*p));
        }
        f["parameters"] = *p;
      }
      r->tools.push_back(Json{{"type", "function"}, {"function", std::move(f)}});
    }
    r->legacy_functions = true;
    r->parallel_tool_calls = false;
  }
  if (call == nullptr) return Status::Ok();
  if (call->is_string()) {
    const std::string c = call->get<std::string>();
    if (c != "none" && c != "auto") {
      return Bad("function_call", "is \"" + utf8::Sanitize(c) + "\"",
                 "use \"none\", \"auto\" or {\"name\": \"NAME\"}");
    }
    r->tool_choice = c;
    return Status::Ok();
  }
  if (!call->is_object()) {
    return Bad("function_call",
               std::string("must be a string or an object, not ") + TypeName(*call));
  }
  const Json* name = Field(*call, "name");
  if (name == nullptr || !name->is_string()) {
    return Bad("function_call.name", "must be a string");
  }
  const std::string n = name->get<std::string>();
  bool found = false;
  for (const Json& t : r->tools) found |= t["function"]["name"] == n;
  if (!found) {
    return Bad("function_call", "names '" + utf8::Sanitize(n) + "', which is not in 'functions'");
  }
  r->tool_choice = "function";
  r->tool_choice_name = n;
  return Status::Ok();
}

// OpenAI tool_calls of an assistant message.
Status CheckToolCalls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) return Bad(where, "must be an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& c = calls[i];
    if (!c.is_object()) return Bad(w, "must be an object");
    const Json* f = Field(c, "function");
    if (f == nullptr || !f->is_object()) return Bad(w + ".function", "must be an object");
    const Json* name = Field(*f, "name");
    if (name == nullptr || !name->is_string()) return Bad(w + ".function.name", "must be a string");
    const Json* args = Field(*f, "arguments");
    if (args != nullptr && !args->is_string() && !args->is_object()) {
      return Bad(w + ".function.arguments", "must be a JSON object text");
    }
    if (const Json* id = Field(c, "id"); id != nullptr && !id->is_string()) {
      return Bad(w + ".id", "must be a string");
    }
  }
  return Status::Ok();
}

// OpenAI chat messages, normalized: content as a string.
Status NormalizeChatMessages(const Json& messages, Json* out) {
  if (!messages.is_array()) {
    return Bad("messages", std::string("must be an array, not ") + TypeName(messages));
  }
  if (messages.empty()) return Bad("messages", "must not be empty");
  std::string function_call_id;  // the last legacy function_call's id
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = messages[i];
    if (!m.is_object()) return Bad(where, "must be an object");
    const Json* role = Field(m, "role");
    if (role == nullptr) return Bad(where + ".role", "is required");
    if (!role->is_string()) return Bad(where + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool" &&
        r != "function") {
      return Bad(where + ".role", "is '" + r + "'",
                 "roles: system, developer, user, assistant, tool, function");
    }
    Json msg = Json::object();
    msg["role"] = r == "function" ? "tool" : r;
    const Json* content = Field(m, "content");
    const Json* calls = Field(m, "tool_calls");
    const Json* fcall = r == "assistant" ? Field(m, "function_call") : nullptr;
    if (content == nullptr && !(r == "assistant" && (calls != nullptr || fcall != nullptr))) {
      if (!m.contains("content")) return Bad(where + ".content", "is required");
    }
    ASSIGN_OR_RETURN(std::string text,
                     ContentText(content ? *content : Json(), where + ".content"));
    msg["content"] = text;
    if (r == "assistant") {
      if (const Json* rc = Field(m, "reasoning_content"); rc != nullptr) {
        if (!rc->is_string()) return Bad(where + ".reasoning_content", "must be a string");
        msg["reasoning_content"] = *rc;
      }
      if (calls != nullptr) {
        RETURN_IF_ERROR(CheckToolCalls(*calls, where + ".tool_calls"));
        msg["tool_calls"] = *calls;
      }
      if (fcall != nullptr) {
        // The legacy shape: one call, {name, arguments}.
        if (calls != nullptr) {
          return Bad(where + ".function_call", "cannot be sent together with 'tool_calls'");
        }
        if (!fcall->is_object()) {
          return Bad(where + ".function_call", "must be an object with 'name' and 'arguments'");
        }
        const Json* name = Field(*fcall, "name");
        if (name == nullptr || !name->is_string()) {
          return Bad(where + ".function_call.name", "must be a string");
        }
        const Json* args = Field(*fcall, "arguments");
        if (args != nullptr && !args->is_string() && !args->is_object()) {
          return Bad(where + ".function_call.arguments", "must be a JSON object text");
        }
        function_call_id = "call_" + std::to_string(i);
        msg["tool_calls"] = Json::array(
            {Json{{"id", function_call_id},
                  {"type", "function"},
                  {"function", {{"name", *name}, {"arguments", args ? *args : Json("{}")}}}}});
      }
    }
    if (r == "function") {
      // The legacy result of a function_call: {role, name, content}.
      const Json* name = Field(m, "name");
      if (name == nullptr || !name->is_string()) {
        return Bad(where + ".name", "is required for role 'function' and must be a string");
      }
      msg["tool_call_id"] =
          function_call_id.empty() ? "call_" + std::to_string(i) : function_call_id;
    }
    if (r == "tool") {
      const Json* id = Field(m, "tool_call_id");
      if (id == nullptr || !id->is_string()) {
        return Bad(where + ".tool_call_id", "is required for role 'tool' and must be a string");
      }
      msg["tool_call_id"] = *id;
    }
    out->push_back(std::move(msg));
  }
  return Status::Ok();
}

// Anthropic content: a string or an array of blocks.
Status ConvertAnthropicMessages(const Json& body, Json* out) {
  if (const Json* system = Field(body, "system"); system != nullptr) {
    ASSIGN_OR_RETURN(std::string text, ContentText(*system, "system"));
    out->push_back(Json{{"role", "system"}, {"content", text}});
  }
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return Bad("messages", "is required");
  if (!messages->is_array()) return Bad("messages", "must be an array");
  if (messages->empty()) return Bad("messages", "must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = (*messages)[i];
    if (!m.is_object()) return Bad(where, "must be an object");
    const Json* role = Field(m, "role");
    if (role == nullptr) return Bad(where + ".role", "is required");
    if (!role->is_string() ||
        (role->get<std::string>() != "user" && role->get<std::string>() != "assistant")) {
      return Bad(where + ".role", "must be \"user\" or \"assistant\"");
    }
    const std::string r = role->get<std::string>();
    const Json* content = Field(m, "content");
    if (content == nullptr) return Bad(where + ".content", "is required");
    if (content->is_string()) {
      out->push_back(Json{{"role", r}, {"content", content->get<std::string>()}});
      continue;
    }
    if (!content->is_array()) return Bad(where + ".content", "must be a string or an array");
    std::string text, reasoning;
    Json calls = Json::array();
    for (size_t k = 0; k < content->size(); ++k) {
      const std::string w = where + ".content[" + std::to_string(k) + "]";
      const Json& b = (*content)[k];
      const Json* type = b.is_object() ? Field(b, "type") : nullptr;
      if (type == nullptr || !type->is_string()) return Bad(w + ".type", "is required");
      const std::string t = type->get<std::string>();
      if (t == "text") {
        const Json* s = Field(b, "text");
        if (s == nullptr || !s->is_string()) return Bad(w + ".text", "must be a string");
        if (!text.empty()) text += "\n\n";
        text += s->get<std::string>();
      } else if (t == "thinking" && r == "assistant") {
        const Json* s = Field(b, "thinking");
        if (s == nullptr || !s->is_string()) return Bad(w + ".thinking", "must be a string");
        reasoning += s->get<std::string>();
      } else if (t == "redacted_thinking" && r == "assistant") {
        continue;
      } else if (t == "tool_use" && r == "assistant") {
        const Json* id = Field(b, "id");
        const Json* name = Field(b, "name");
        const Json* input = Field(b, "input");
        if (id == nullptr || !id->is_string()) return Bad(w + ".id", "must be a string");
        if (name == nullptr || !name->is_string()) return Bad(w + ".name", "must be a string");
        if (input != nullptr && !input->is_object()) return Bad(w + ".input", "must be an object");
        calls.push_back(
            Json{{"id", *id},
                 {"type", "function"},
                 {"function",
                  {{"name", *name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
      } else if (t == "tool_result" && r == "user") {
        const Json* id = Field(b, "tool_use_id");
        if (id == nullptr || !id->is_string()) return Bad(w + ".tool_use_id", "must be a string");
        std::string result;
        if (const Json* c = Field(b, "content"); c != nullptr) {
          ASSIGN_OR_RETURN(result, ContentText(*c, w + ".content"));
        }
        out->push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
      } else {
        return Unimplemented(
            "'" + w + ".type' \"" + t + "\" is not supported in a " + r + " message",
            "supported: text, thinking, tool_use (assistant), tool_result (user)");
      }
    }
    if (r == "user" && text.empty() && !out->empty() && out->back()["role"] == "tool") continue;
    Json msg{{"role", r}, {"content", text}};
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out->push_back(std::move(msg));
  }
  return Status::Ok();
}

Status ConvertAnthropicTools(const Json& body, GenerationRequest* r) {
  const Json* tools = Field(body, "tools");
  if (tools != nullptr && !tools->is_array()) return Bad("tools", "must be an array");
  for (size_t i = 0; tools != nullptr && i < tools->size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& t = (*tools)[i];
    if (!t.is_object()) return Bad(where, "must be an object");
    const Json* name = Field(t, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Bad(where + ".name", "must be a non-empty string");
    }
    RETURN_IF_ERROR(CheckToolName(name->get<std::string>(), where + ".name"));
    const Json* schema = Field(t, "input_schema");
    if (schema == nullptr || !schema->is_object()) {
      return Bad(where + ".input_schema", "must be a JSON Schema object");
    }
    Json f{{"name", *name}};
    if (const Json* d = Field(t, "description"); d != nullptr) {
      if (!d->is_string()) return Bad(where + ".description", "must be a string");
      f["description"] = *d;
    }
    f["parameters"] = *schema;
    r->tools.push_back(Json{{"type", "function"}, {"function", f}});
  }
  if (const Json* c = Field(body, "tool_choice"); c != nullptr) {
    const Json* type = c->is_object() ? Field(*c, "type") : nullptr;
    if (type == nullptr || !type->is_string()) return Bad("tool_choice.type", "is required");
    const std::string t = type->get<std::string>();
    bool disable_parallel = false;
    RETURN_IF_ERROR(GetBool(*c, "disable_parallel_tool_use", &disable_parallel));
    r->parallel_tool_calls = !disable_parallel;
    if (t == "auto") {
      r->tool_choice = "auto";
    } else if (t == "any") {
      r->tool_choice = "required";
    } else if (t == "none") {
      r->tool_choice = "none";
    } else if (t == "tool") {
      const Json* name = Field(*c, "name");
      if (name == nullptr || !name->is_string()) return Bad("tool_choice.name", "must be a string");
      r->tool_choice = "function";
      r->tool_choice_name = name->get<std::string>();
    } else {
      return Bad("tool_choice.type", "must be auto, any, tool or none");
    }
    if ((t == "any" || t == "tool") && r->tools.empty()) return Bad("tool_choice", "needs 'tools'");
    if (t == "tool") {
      bool found = false;
      for (const Json& tool : r->tools) found |= tool["function"]["name"] == r->tool_choice_name;
      if (!found) {
        return Bad("tool_choice", "names '" + r->tool_choice_name + "', which is not in 'tools'");
      }
    }
  }
  return Status::Ok();
}

// DeepSeek-V4 thinking: `thinking: {type: enabled|adaptive|disabled}` (DeepSeek and
// Anthropic), `chat_template_kwargs.thinking` (vLLM), `reasoning_effort`.
Status GetThinking(const Json& body, GenerationRequest* r) {
  if (const Json* t = Field(body, "thinking"); t != nullptr) {
    const Json* type = t->is_object() ? Field(*t, "type") : nullptr;
    const std::string v = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (v != "enabled" && v != "disabled" && v != "adaptive") {
      return Bad("thinking.type", "must be \"enabled\", \"adaptive\" or \"disabled\"");
    }
    // "adaptive" (the newer Anthropic SDKs' style: the model decides) is the
    // V4 thinking mode, which reasons as the model sees fit.
    r->thinking = v != "disabled";
  }
  if (const Json* k = Field(body, "chat_template_kwargs"); k != nullptr) {
    if (!k->is_object()) return Bad("chat_template_kwargs", "must be an object");
    for (const char* key : {"thinking", "enable_thinking"}) {
      RETURN_IF_ERROR(GetBool(*k, key, &r->thinking));
    }
  }
  if (const Json* e = Field(body, "reasoning_effort"); e != nullptr) {
    constexpr const char* kHint =
        "use none, low, medium, high, max, or (DeepSeek-V4.1) an integer from 1 to 100";
    if (e->is_number_integer()) {
      // DeepSeek-V4.1's numeric budget; on V4 models, 100 is max, the rest high.
      const int64_t n = e->get<int64_t>();
      if (n < 1 || n > 100) return Bad("reasoning_effort", "is " + std::to_string(n), kHint);
      r->thinking = true;
      r->reasoning_budget = static_cast<int>(n);
      r->reasoning_effort = n == 100 ? Dsv4ReasoningEffort::kMax : Dsv4ReasoningEffort::kHigh;
      return Status::Ok();
    }
    if (!e->is_string()) return Bad("reasoning_effort", "must be a string or an integer", kHint);
    const std::string v = e->get<std::string>();
    if (v == "none") {
      r->thinking = false;
    } else if (v == "minimal" || v == "low" || v == "medium" || v == "high") {
      r->thinking = true;
      r->reasoning_effort = Dsv4ReasoningEffort::kHigh;
      r->reasoning_budget = v == "minimal" || v == "low" ? kDsv41EffortLow : kDsv41EffortHigh;
    } else if (v == "max" || v == "xhigh") {
      r->thinking = true;
      r->reasoning_effort = Dsv4ReasoningEffort::kMax;
      r->reasoning_budget = kDsv41EffortMax;
    } else {
      return Bad("reasoning_effort", "is '" + v + "'", kHint);
    }
  }
  return Status::Ok();
}

Status GetLogprobs(const Json& body, Api api, const RequestLimits& limits, GenerationRequest* r) {
  if (api == Api::kCompletion) {
    int64_t n = -1;
    RETURN_IF_ERROR(GetInt(body, "logprobs", 0, std::min(5, limits.max_top_logprobs), &n));
    r->top_logprobs = static_cast<int>(n);
    return Status::Ok();
  }
  bool logprobs = false;
  RETURN_IF_ERROR(GetBool(body, "logprobs", &logprobs));
  int64_t top = 0;
  RETURN_IF_ERROR(GetInt(body, "top_logprobs", 0, limits.max_top_logprobs, &top));
  if (Field(body, "top_logprobs") != nullptr && !logprobs) {
    return Bad("top_logprobs", "needs 'logprobs': true");
  }
  r->top_logprobs = logprobs ? static_cast<int>(top) : -1;
  return Status::Ok();
}

Status GetPrompts(const Json& body, GenerationRequest* r) {
  const Json* p = Field(body, "prompt");
  if (p == nullptr) return Bad("prompt", "is required");
  auto ids_of = [](const Json& a, const std::string& where, std::vector<int32_t>* ids) -> Status {
    for (const Json& v : a) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad(where, "must hold token ids (non-negative integers)");
      }
      ids->push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    if (ids->empty()) return Bad(where, "must not be empty");
    return Status::Ok();
  };
  if (p->is_string()) {
    r->prompts.push_back(p->get<std::string>());
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r->prompt_ids.emplace_back();
    RETURN_IF_ERROR(ids_of(*p, "prompt", &r->prompt_ids.back()));
  } else if (p->is_array() && !p->empty()) {
    for (size_t i = 0; i < p->size(); ++i) {
      const Json& e = (*p)[i];
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (e.is_string()) {
        if (!r->prompt_ids.empty()) return Bad("prompt", "mixes text and token-id prompts");
        r->prompts.push_back(e.get<std::string>());
      } else if (e.is_array()) {
        if (!r->prompts.empty()) return Bad("prompt", "mixes text and token-id prompts");
        r->prompt_ids.emplace_back();
        RETURN_IF_ERROR(ids_of(e, where, &r->prompt_ids.back()));
      } else {
        return Bad(where, "must be a string or an array of token ids");
      }
    }
  } else {
    return Bad("prompt", "must be a string, an array of strings or an array of token ids");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTools(const Json& tools, const std::string& key) { return CheckTools(tools, key); }

Result<std::string> ContentText(const Json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Bad(where,
               std::string("must be a string or an array of text parts, not ") + TypeName(content));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& part = content[i];
    const Json* type = part.is_object() ? Field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string()) return Bad(w + ".type", "is required");
    if (type->get<std::string>() != "text") {
      const std::string& t = type->get<std::string>();
      const bool image = t == "image_url" || t == "input_image" || t == "image";
      return Unimplemented("'" + w + ".type' \"" + t + "\" is not supported",
                           image ? "dsv4 takes no image input (DeepSeek-V4.1's included): send "
                                   "text parts only"
                                 : "only text content is supported");
    }
    const Json* t = Field(part, "text");
    if (t == nullptr || !t->is_string()) return Bad(w + ".text", "must be a string");
    if (!text.empty()) text += "\n\n";
    text += t->get<std::string>();
  }
  return text;
}

Result<Json> ParseJsonBody(std::string_view body) {
  // nlohmann parses iteratively, but copies, compares and dumps recursively:
  // a body of nested brackets would overflow an HTTP thread's stack later.
  // One pass over the text bounds the depth first.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char ch = body[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxJsonDepth) {
        return InvalidArgument("the body nests arrays/objects deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels (at byte " +
                                   std::to_string(i) + ")",
                               "flatten the JSON");
      }
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  // nlohmann rejects ill-formed UTF-8 in strings and lone surrogate escapes.
  Json j;
  try {
    j = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range (number overflow)
    return InvalidArgument(std::string("the body is not valid JSON: ") + e.what(),
                           "send a JSON object encoded as UTF-8");
  }
  if (!j.is_object()) {
    return InvalidArgument(std::string("the body must be a JSON object, not ") + j.type_name());
  }
  return j;
}

Result<GenerationRequest> ParseRequest(Api api, const Json& body, const RequestLimits& limits) {
  GenerationRequest r;
  r.api = api;
  RETURN_IF_ERROR(CheckModel(body, limits, &r.model));
  RETURN_IF_ERROR(GetBool(body, "stream", &r.stream));
  if (const Json* so = Field(body, "stream_options"); so != nullptr) {
    if (!so->is_object()) return Bad("stream_options", "must be an object");
    if (!r.stream) return Bad("stream_options", "is only allowed with 'stream': true");
    RETURN_IF_ERROR(GetBool(*so, "include_usage", &r.include_usage));
  }
  RETURN_IF_ERROR(RefuseUnimplemented(body, api));
  RETURN_IF_ERROR(GetResponseFormat(body, api, &r));
  RETURN_IF_ERROR(GetSampling(body, api, &r));
  RETURN_IF_ERROR(GetLogprobs(body, api, limits, &r));
  RETURN_IF_ERROR(GetBool(body, "return_tokens_as_token_ids", &r.tokens_as_ids));
  switch (api) {
    case Api::kChat: {
      const Json* messages = Field(body, "messages");
      if (messages == nullptr) return Bad("messages", "is required");
      RETURN_IF_ERROR(NormalizeChatMessages(*messages, &r.messages));
      if (const Json* tools = Field(body, "tools"); tools != nullptr) {
        RETURN_IF_ERROR(CheckTools(*tools, "tools"));
        r.tools = *tools;
      }
      RETURN_IF_ERROR(CheckToolChoice(body, &r));
      RETURN_IF_ERROR(GetBool(body, "parallel_tool_calls", &r.parallel_tool_calls));
      RETURN_IF_ERROR(GetLegacyFunctions(body, &r));
      RETURN_IF_ERROR(GetThinking(body, &r));
      RETURN_IF_ERROR(GetMaxTokens(body, "max_tokens", limits, &r.max_tokens));
      RETURN_IF_ERROR(GetMaxTokens(body, "max_completion_tokens", limits, &r.max_tokens));
      RETURN_IF_ERROR(GetStop(body, "stop", limits, &r.stop));
      break;
    }
    case Api::kCompletion: {
      RETURN_IF_ERROR(GetPrompts(body, &r));
      RETURN_IF_ERROR(GetMaxTokens(body, "max_tokens", limits, &r.max_tokens));
      if (Field(body, "max_tokens") == nullptr) r.max_tokens = 16;  // the OpenAI default
      RETURN_IF_ERROR(GetStop(body, "stop", limits, &r.stop));
      bool echo = false;
      RETURN_IF_ERROR(GetBool(body, "echo", &echo));
      if (echo) return Unimplemented("'echo' is not supported", "leave it out or false");
      if (const Json* s = Field(body, "suffix"); s != nullptr) {
        return Unimplemented("'suffix' is not supported", "leave it out");
      }
      if (const Json* b = Field(body, "best_of"); b != nullptr && *b != Json(1)) {
        return Unimplemented("'best_of' is not supported", "leave it out or 1");
      }
      break;
    }
    case Api::kMessages: {
      RETURN_IF_ERROR(ConvertAnthropicMessages(body, &r.messages));
      RETURN_IF_ERROR(ConvertAnthropicTools(body, &r));
      RETURN_IF_ERROR(GetThinking(body, &r));
      if (Field(body, "max_tokens") == nullptr) return Bad("max_tokens", "is required");
      RETURN_IF_ERROR(GetMaxTokens(body, "max_tokens", limits, &r.max_tokens));
      RETURN_IF_ERROR(GetStop(body, "stop_sequences", limits, &r.stop));
      break;
    }
  }
  if (api != Api::kMessages) {
    int64_t n = 1;
    RETURN_IF_ERROR(GetInt(body, "n", 1, limits.max_n, &n,
                           "this server allows at most " + std::to_string(limits.max_n)));
    r.n = static_cast<int>(n);
    const size_t prompts = std::max(r.prompts.size(), r.prompt_ids.size());
    if (api == Api::kCompletion && static_cast<int64_t>(prompts) * n > limits.max_n) {
      return Bad("prompt", "asks for " + std::to_string(prompts * n) + " completions; at most " +
                               std::to_string(limits.max_n) + " are allowed");
    }
  }
  if (r.tool_choice == "none") r.tools = Json::array();
  return r;
}

}  // namespace dsv4::server
