// The OpenAI Responses API (responses_api.h).
#include "server/responses_api.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>

#include "base/log.h"
#include "engine/engine.h"
#include "server/api_util.h"
#include "server/http_server.h"
#include "server/sse.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

Status Bad(const std::string& field, const std::string& what, std::string hint = {}) {
  return InvalidArgument("'" + field + "' " + what, std::move(hint));
}

Status Refuse(const std::string& field, const std::string& what, std::string hint) {
  return Unimplemented("'" + field + "' " + what, std::move(hint));
}

Status GetString(const Json& obj, const char* key, const std::string& where, std::string* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return Bad(where, std::string("must be a string, not ") + v->type_name());
  *out = v->get<std::string>();
  return Status::Ok();
}

Status GetBool(const Json& obj, const char* key, bool* out) {
  const Json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Bad(key, std::string("must be a boolean, not ") + v->type_name());
  *out = v->get<bool>();
  return Status::Ok();
}

// A tool name goes into DSML markup (name="NAME"), as request.cc checks.
Status CheckName(const std::string& name, const std::string& where) {
  if (name.empty()) return Bad(where, "must be a non-empty string");
  for (unsigned char c : name) {
    if (c < 0x20 || c == '"' || c == '<' || c == '>' || c == 0x7f) {
      return Bad(where,
                 "'" + utf8::Sanitize(name) + "' holds a quote, '<', '>' or a control character",
                 "use letters, digits, '_' and '-'");
    }
  }
  return Status::Ok();
}

// The text of a content string or part array (input_text, output_text,
// refusal parts; joined by blank lines); `parts_out`, when given, gets the
// parts as {type, text}, a string as one part of `default_type`.
Result<std::string> PartsText(const Json& content, const std::string& where, Json* parts_out,
                              const char* default_type) {
  if (content.is_string()) {
    if (parts_out) {
      *parts_out =
          Json::array({Json{{"type", default_type}, {"text", content.get<std::string>()}}});
    }
    return content.get<std::string>();
  }
  if (!content.is_array()) {
    return Bad(where, std::string("must be a string or an array of content parts, not ") +
                          content.type_name());
  }
  std::string text;
  Json parts = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string w = where + "[" + std::to_string(j) + "]";
    const Json& part = content[j];
    if (!part.is_object()) return Bad(w, "must be an object");
    const Json* type = Field(part, "type");
    if (type == nullptr || !type->is_string()) return Bad(w + ".type", "is required");
    const std::string t = type->get<std::string>();
    const char* key = "text";
    if (t == "refusal") {
      key = "refusal";
    } else if (t != "input_text" && t != "output_text" && t != "text") {
      return Refuse(w + ".type", "\"" + utf8::Sanitize(t) + "\" is not supported",
                    "this server takes text only: input_text / output_text parts");
    }
    const Json* s = Field(part, key);
    if (s == nullptr || !s->is_string()) return Bad(w + "." + key, "must be a string");
    if (!text.empty()) text += "\n\n";
    text += s->get<std::string>();
    parts.push_back(Json{{"type", t == "text" || t == "refusal" ? default_type : t}, {"text", *s}});
  }
  if (parts_out) *parts_out = std::move(parts);
  return text;
}

// One input item, normalized: messages get "type" and content parts;
// function_call_output gets its output as a string; reasoning keeps its text
// in "content" (reasoning_text parts). Unknown members are dropped.
Result<Json> NormalizeItem(const Json& item, const std::string& where) {
  if (!item.is_object()) return Bad(where, "must be an object");
  std::string type = "message";
  if (const Json* t = Field(item, "type"); t != nullptr) {
    if (!t->is_string()) return Bad(where + ".type", "must be a string");
    type = t->get<std::string>();
  }
  Json out{{"type", type}};
  if (const Json* id = Field(item, "id"); id != nullptr) {
    if (!id->is_string()) return Bad(where + ".id", "must be a string");
    out["id"] = *id;
  }
  if (type == "message") {
    const Json* role = Field(item, "role");
    if (role == nullptr) return Bad(where + ".role", "is required");
    if (!role->is_string()) return Bad(where + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "user" && r != "system" && r != "developer" && r != "assistant") {
      return Bad(where + ".role", "is '" + utf8::Sanitize(r) + "'",
                 "roles: user, system, developer, assistant");
    }
    out["role"] = r;
    const Json* content = Field(item, "content");
    if (content == nullptr) return Bad(where + ".content", "is required");
    Json parts;
    RETURN_IF_ERROR(PartsText(*content, where + ".content", &parts,
                              r == "assistant" ? "output_text" : "input_text")
                        .status());
    out["content"] = std::move(parts);
    return out;
  }
  if (type == "function_call") {
    for (const char* key : {"call_id", "name", "arguments"}) {
      const Json* v = Field(item, key);
      if (v == nullptr || !v->is_string()) return Bad(where + "." + key, "must be a string");
      out[key] = *v;
    }
    if (out["call_id"].get<std::string>().empty()) {
      return Bad(where + ".call_id", "must not be empty");
    }
    RETURN_IF_ERROR(CheckName(out["name"].get<std::string>(), where + ".name"));
    // The chat encoding writes the arguments' members as DSML parameters:
    // JSON that is not an object has none (text that is not JSON is kept
    // whole, as the reference encoder does).
    const Json args = Json::parse(out["arguments"].get<std::string>(), nullptr, false);
    if (!args.is_discarded() && !args.is_object()) {
      return Bad(where + ".arguments",
                 "must be a JSON object text, not " + std::string(args.type_name()));
    }
    return out;
  }
  if (type == "function_call_output") {
    const Json* id = Field(item, "call_id");
    if (id == nullptr || !id->is_string() || id->get<std::string>().empty()) {
      return Bad(where + ".call_id", "must be a non-empty string");
    }
    out["call_id"] = *id;
    const Json* output = Field(item, "output");
    if (output == nullptr) return Bad(where + ".output", "is required");
    ASSIGN_OR_RETURN(std::string text,
                     PartsText(*output, where + ".output", nullptr, "input_text"));
    out["output"] = text;
    return out;
  }
  if (type == "reasoning") {
    std::string text;
    std::string summary;
    for (const char* key : {"content", "summary"}) {
      const Json* parts = Field(item, key);
      if (parts == nullptr) continue;
      const std::string w = where + "." + key;
      if (!parts->is_array()) return Bad(w, "must be an array");
      std::string& dest = std::string(key) == "content" ? text : summary;
      for (size_t j = 0; j < parts->size(); ++j) {
        const Json& p = (*parts)[j];
        const Json* s = p.is_object() ? Field(p, "text") : nullptr;
        if (s == nullptr || !s->is_string()) {
          return Bad(w + "[" + std::to_string(j) + "].text", "must be a string");
        }
        if (!dest.empty()) dest += "\n\n";
        dest += s->get<std::string>();
      }
    }
    std::string encrypted;
    RETURN_IF_ERROR(GetString(item, "encrypted_content", where + ".encrypted_content", &encrypted));
    // Ours carries the thinking text (responses_api.h); another server's is
    // opaque and only used when nothing else is given.
    if (text.empty()) text = !encrypted.empty() ? encrypted : summary;
    out["summary"] = Json::array();
    if (!summary.empty()) {
      out["summary"].push_back(Json{{"type", "summary_text"}, {"text", summary}});
    }
    out["content"] = Json::array({Json{{"type", "reasoning_text"}, {"text", text}}});
    return out;
  }
  return Refuse(where + ".type", "\"" + utf8::Sanitize(type) + "\" is not supported",
                "input items: message, function_call, function_call_output, reasoning");
}

Status ParseInput(const Json& body, ResponsesRequest* r) {
  const Json* input = Field(body, "input");
  if (input == nullptr) {
    return Bad("input", "is required", "a string or an array of input items");
  }
  r->input = Json::array();
  if (input->is_string()) {
    r->input.push_back(
        Json{{"type", "message"},
             {"role", "user"},
             {"content", Json::array({Json{{"type", "input_text"}, {"text", *input}}})}});
    return Status::Ok();
  }
  if (!input->is_array()) {
    return Bad("input",
               std::string("must be a string or an array of items, not ") + input->type_name());
  }
  for (size_t i = 0; i < input->size(); ++i) {
    ASSIGN_OR_RETURN(Json item, NormalizeItem((*input)[i], "input[" + std::to_string(i) + "]"));
    r->input.push_back(std::move(item));
  }
  return Status::Ok();
}

// Responses tools ({type, name, description, parameters, strict}) as chat tools.
Status ParseTools(const Json& body, ResponsesRequest* r) {
  r->echo["tools"] = Json::array();
  const Json* tools = Field(body, "tools");
  if (tools == nullptr) return Status::Ok();
  if (!tools->is_array()) {
    return Bad("tools", std::string("must be an array, not ") + tools->type_name());
  }
  Json chat_tools = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& t = (*tools)[i];
    if (!t.is_object()) return Bad(where, "must be an object");
    const Json* type = Field(t, "type");
    if (type == nullptr || !type->is_string()) return Bad(where + ".type", "is required");
    if (type->get<std::string>() != "function") {
      return Refuse(where + ".type",
                    "\"" + utf8::Sanitize(type->get<std::string>()) + "\" is not supported",
                    "this server runs function tools only ({\"type\": \"function\", \"name\": "
                    "...}); leave hosted tools such as web_search out");
    }
    const Json* name = Field(t, "name");
    if (name == nullptr || !name->is_string()) return Bad(where + ".name", "must be a string");
    RETURN_IF_ERROR(CheckName(name->get<std::string>(), where + ".name"));
    Json echo{{"type", "function"}, {"name", *name}};
    Json fn{{"name", *name}};
    if (const Json* d = Field(t, "description"); d != nullptr) {
      if (!d->is_string()) return Bad(where + ".description", "must be a string");
      fn["description"] = *d;
    }
    echo["description"] = fn.contains("description") ? fn["description"] : Json(nullptr);
    if (const Json* p = Field(t, "parameters"); p != nullptr) {
      if (!p->is_object()) {
        return Bad(where + ".parameters",
                   std::string("must be a JSON Schema object, not ") + p->type_name());
      }
      fn["parameters"] = *p;
    }
    echo["parameters"] = fn.contains("parameters") ? fn["parameters"] : Json(nullptr);
    bool strict = false;
    if (const Json* s = Field(t, "strict"); s != nullptr) {
      if (!s->is_boolean()) return Bad(where + ".strict", "must be a boolean");
      strict = s->get<bool>();
    }
    echo["strict"] = strict;
    r->echo["tools"].push_back(echo);
    chat_tools.push_back(Json{{"type", "function"}, {"function", fn}});
  }
  if (!chat_tools.empty()) r->chat["tools"] = chat_tools;
  return Status::Ok();
}

Status ParseToolChoice(const Json& body, ResponsesRequest* r) {
  r->echo["tool_choice"] = "auto";
  const Json* v = Field(body, "tool_choice");
  if (v == nullptr) return Status::Ok();
  if (v->is_string()) {
    const std::string c = v->get<std::string>();
    if (c != "auto" && c != "none" && c != "required") {
      return Bad("tool_choice", "is '" + utf8::Sanitize(c) + "'",
                 "use \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    }
    r->chat["tool_choice"] = c;
    r->echo["tool_choice"] = c;
    return Status::Ok();
  }
  if (!v->is_object()) {
    return Bad("tool_choice", std::string("must be a string or an object, not ") + v->type_name());
  }
  const Json* type = Field(*v, "type");
  if (type == nullptr || !type->is_string()) return Bad("tool_choice.type", "is required");
  if (type->get<std::string>() != "function") {
    return Refuse(
        "tool_choice.type", "\"" + utf8::Sanitize(type->get<std::string>()) + "\" is not supported",
        "use \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
  }
  const Json* name = Field(*v, "name");
  if (name == nullptr || !name->is_string()) return Bad("tool_choice.name", "must be a string");
  bool found = false;
  for (const Json& t : r->echo["tools"]) found |= t["name"] == *name;
  if (!found) {
    return Bad("tool_choice.name",
               "is '" + utf8::Sanitize(name->get<std::string>()) + "', which is not in 'tools'");
  }
  r->chat["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", *name}}}};
  r->echo["tool_choice"] = Json{{"type", "function"}, {"name", *name}};
  return Status::Ok();
}

Status ParseReasoning(const Json& body, ResponsesRequest* r) {
  Json echo{{"effort", nullptr}, {"summary", nullptr}};
  const Json* v = Field(body, "reasoning");
  if (v != nullptr) {
    if (!v->is_object()) return Bad("reasoning", "must be an object");
    if (const Json* e = Field(*v, "effort"); e != nullptr) {
      static const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
      if (!e->is_string() || std::find(std::begin(kEfforts), std::end(kEfforts),
                                       e->get<std::string>()) == std::end(kEfforts)) {
        return Bad("reasoning.effort", "is " + e->dump(),
                   "use none, minimal, low, medium, high or xhigh");
      }
      // As chat's reasoning_effort: any effort but "none" turns thinking on.
      r->chat["reasoning_effort"] = *e;
      echo["effort"] = *e;
    }
    for (const char* key : {"summary", "generate_summary"}) {
      const Json* s = Field(*v, key);
      if (s == nullptr) continue;
      if (!s->is_string() || (*s != "auto" && *s != "concise" && *s != "detailed")) {
        return Bad(std::string("reasoning.") + key, "is " + s->dump(),
                   "use auto, concise or detailed");
      }
      r->reasoning_summary = true;
      echo["summary"] = *s;
    }
  }
  r->echo["reasoning"] = echo;
  return Status::Ok();
}

Status ParseText(const Json& body, ResponsesRequest* r) {
  Json echo{{"format", {{"type", "text"}}}};
  if (const Json* v = Field(body, "text"); v != nullptr) {
    if (!v->is_object()) return Bad("text", "must be an object");
    if (const Json* f = Field(*v, "format"); f != nullptr) {
      const Json* type = f->is_object() ? Field(*f, "type") : nullptr;
      if (type == nullptr || !type->is_string()) return Bad("text.format.type", "is required");
      const std::string t = type->get<std::string>();
      if (t == "json_object") {
        r->chat["response_format"] = {{"type", "json_object"}};
      } else if (t == "json_schema") {
        // The chat form: {"type": "json_schema", "json_schema": {name, schema, ...}}.
        Json spec = Json::object();
        for (const char* key : {"name", "description", "schema", "strict"}) {
          if (const Json* x = Field(*f, key); x != nullptr) spec[key] = *x;
        }
        if (Field(spec, "schema") == nullptr) return Bad("text.format.schema", "is required");
        r->chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
      } else if (t != "text") {
        return Bad("text.format.type", "is '" + utf8::Sanitize(t) + "'",
                   "use text, json_object or json_schema");
      }
      echo["format"] = *f;
    }
    // A hint to the model about length; taken and not acted on.
    if (const Json* verbosity = Field(*v, "verbosity"); verbosity != nullptr) {
      if (*verbosity != "low" && *verbosity != "medium" && *verbosity != "high") {
        return Bad("text.verbosity", "is " + verbosity->dump(), "use low, medium or high");
      }
      echo["verbosity"] = *verbosity;
    }
  }
  r->echo["text"] = echo;
  return Status::Ok();
}

Status ParseInclude(const Json& body, ResponsesRequest* r) {
  const Json* v = Field(body, "include");
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return Bad("include", "must be an array of strings");
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& x = (*v)[i];
    const std::string where = "include[" + std::to_string(i) + "]";
    if (!x.is_string()) return Bad(where, "must be a string");
    if (x == "reasoning.encrypted_content") {
      r->encrypted_reasoning = true;
    } else {
      return Refuse(where, "\"" + utf8::Sanitize(x.get<std::string>()) + "\" is not supported",
                    "this server can include reasoning.encrypted_content only");
    }
  }
  return Status::Ok();
}

// metadata: at most 16 string pairs, keys up to 64 characters, values up to 512.
Status ParseMetadata(const Json& body, ResponsesRequest* r) {
  r->echo["metadata"] = Json::object();
  const Json* v = Field(body, "metadata");
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return Bad("metadata", "must be an object of strings");
  if (v->size() > 16)
    return Bad("metadata", "has " + std::to_string(v->size()) + " keys; at most 16");
  for (const auto& [key, value] : v->items()) {
    if (key.size() > 64) return Bad("metadata", "has a key longer than 64 characters");
    if (!value.is_string() || value.get<std::string>().size() > 512) {
      return Bad("metadata." + utf8::Sanitize(key), "must be a string of at most 512 characters");
    }
  }
  r->echo["metadata"] = *v;
  return Status::Ok();
}

// Fields that have no meaning here, refused by name.
Status RefuseUnsupported(const Json& body) {
  if (const Json* b = Field(body, "background"); b != nullptr && *b != Json(false)) {
    return Refuse("background", "is not supported", "leave it out or false");
  }
  for (const char* key : {"conversation", "prompt", "max_tool_calls"}) {
    if (Field(body, key) != nullptr) {
      return Refuse(key, "is not supported by this server",
                    "leave it out (use previous_response_id to continue a conversation)");
    }
  }
  if (const Json* t = Field(body, "top_logprobs"); t != nullptr && *t != Json(0)) {
    return Refuse("top_logprobs", "is not supported by this server", "leave it out or 0");
  }
  return Status::Ok();
}

}  // namespace

Result<ResponsesRequest> ParseResponsesRequest(const Json& body, const RequestLimits& limits) {
  ResponsesRequest r;
  r.chat = Json::object();
  r.echo = Json::object();
  const Json* model = Field(body, "model");
  if (model == nullptr) return Bad("model", "is required", "use \"" + limits.model_id + "\"");
  if (!model->is_string()) return Bad("model", "must be a string");
  r.chat["model"] = *model;
  RETURN_IF_ERROR(RefuseUnsupported(body));
  RETURN_IF_ERROR(GetBool(body, "stream", &r.stream));
  if (const Json* so = Field(body, "stream_options"); so != nullptr) {
    if (!so->is_object()) return Bad("stream_options", "must be an object");
    if (!r.stream) return Bad("stream_options", "is only allowed with 'stream': true");
  }
  RETURN_IF_ERROR(GetBool(body, "store", &r.store));
  RETURN_IF_ERROR(ParseInput(body, &r));
  if (const Json* v = Field(body, "instructions"); v != nullptr) {
    if (!v->is_string()) return Bad("instructions", "must be a string");
    r.instructions = v->get<std::string>();
  }
  RETURN_IF_ERROR(
      GetString(body, "previous_response_id", "previous_response_id", &r.previous_response_id));
  RETURN_IF_ERROR(ParseTools(body, &r));
  RETURN_IF_ERROR(ParseToolChoice(body, &r));
  bool parallel = true;
  RETURN_IF_ERROR(GetBool(body, "parallel_tool_calls", &parallel));
  r.chat["parallel_tool_calls"] = parallel;
  RETURN_IF_ERROR(ParseReasoning(body, &r));
  RETURN_IF_ERROR(ParseText(body, &r));
  RETURN_IF_ERROR(ParseInclude(body, &r));
  RETURN_IF_ERROR(ParseMetadata(body, &r));
  std::string truncation = "disabled";
  RETURN_IF_ERROR(GetString(body, "truncation", "truncation", &truncation));
  if (truncation != "disabled" && truncation != "auto") {
    return Bad("truncation", "is '" + utf8::Sanitize(truncation) + "'", "use auto or disabled");
  }
  std::string ignored;
  for (const char* key : {"user", "safety_identifier", "prompt_cache_key", "service_tier"}) {
    RETURN_IF_ERROR(GetString(body, key, key, &ignored));
  }
  // max_output_tokens -> max_tokens: checked here so that errors name it.
  if (const Json* m = Field(body, "max_output_tokens"); m != nullptr) {
    if (!m->is_number_integer()) {
      return Bad("max_output_tokens", std::string("must be an integer, not ") + m->type_name());
    }
    // Negative integers are the signed ones to nlohmann.
    const bool in_range = m->is_number_unsigned() && m->get<uint64_t>() >= 1 &&
                          m->get<uint64_t>() <= static_cast<uint64_t>(limits.ctx_size);
    if (!in_range) {
      return Bad("max_output_tokens",
                 "is " + m->dump() + "; it must be in [1, " + std::to_string(limits.ctx_size) + "]",
                 "the server's context holds " + std::to_string(limits.ctx_size) + " tokens");
    }
    r.chat["max_tokens"] = *m;
  }
  // Sampling fields keep their chat names (request.cc checks them).
  for (const char* key :
       {"temperature", "top_p", "stop", "seed", "top_k", "min_p", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "logit_bias"}) {
    if (const Json* v = Field(body, key); v != nullptr) r.chat[key] = *v;
  }

  r.echo["instructions"] = r.instructions.empty() ? Json(nullptr) : Json(r.instructions);
  r.echo["max_output_tokens"] =
      r.chat.contains("max_tokens") ? r.chat["max_tokens"] : Json(nullptr);
  r.echo["parallel_tool_calls"] = parallel;
  r.echo["previous_response_id"] =
      r.previous_response_id.empty() ? Json(nullptr) : Json(r.previous_response_id);
  r.echo["store"] = r.store;
  r.echo["temperature"] = r.chat.contains("temperature") ? r.chat["temperature"] : Json(1.0);
  r.echo["top_p"] = r.chat.contains("top_p") ? r.chat["top_p"] : Json(1.0);
  r.echo["truncation"] = truncation;
  const Json* user = Field(body, "user");
  r.echo["user"] = user != nullptr ? *user : Json(nullptr);

  // Everything the chat parser checks (model, sampling, stop, tool_choice
  // against tools), with a placeholder conversation.
  Json probe = r.chat;
  probe["messages"] = Json::array({Json{{"role", "user"}, {"content", ""}}});
  RETURN_IF_ERROR(ParseRequest(Api::kChat, probe, limits).status());
  return r;
}

Result<Json> ItemsToChatMessages(const Json& items, const std::string& instructions) {
  Json messages = Json::array();
  if (!instructions.empty()) {
    messages.push_back(Json{{"role", "system"}, {"content", instructions}});
  }
  // The assistant turn being gathered: reasoning, then text, then calls.
  Json pending;
  const auto flush = [&] {
    if (pending.is_null()) return;
    if (!pending.contains("content")) pending["content"] = "";
    messages.push_back(std::move(pending));
    pending = Json();
  };
  const auto assistant = [&]() -> Json& {
    if (pending.is_null()) pending = Json{{"role", "assistant"}};
    return pending;
  };
  for (const Json& item : items) {
    const std::string type = item.value("type", "message");
    if (type == "reasoning") {
      if (!pending.is_null() && (pending.contains("content") || pending.contains("tool_calls"))) {
        flush();
      }
      std::string text;
      for (const Json& p : item.value("content", Json::array())) {
        text += p.value("text", "");
      }
      if (text.empty()) continue;
      Json& a = assistant();
      a["reasoning_content"] = a.value("reasoning_content", "") + text;
    } else if (type == "message" && item.value("role", "") == "assistant") {
      if (!pending.is_null() && (pending.contains("content") || pending.contains("tool_calls"))) {
        flush();
      }
      std::string text;
      for (const Json& p : item.value("content", Json::array())) {
        if (!text.empty()) text += "\n\n";
        text += p.value("text", "");
      }
      assistant()["content"] = text;
    } else if (type == "function_call") {
      Json& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = Json::array();
      a["tool_calls"].push_back(
          Json{{"id", item.value("call_id", "")},
               {"type", "function"},
               {"function",
                {{"name", item.value("name", "")}, {"arguments", item.value("arguments", "")}}}});
    } else if (type == "function_call_output") {
      flush();
      messages.push_back(Json{{"role", "tool"},
                              {"tool_call_id", item.value("call_id", "")},
                              {"content", item.value("output", "")}});
    } else if (type == "message") {
      flush();
      std::string text;
      for (const Json& p : item.value("content", Json::array())) {
        if (!text.empty()) text += "\n\n";
        text += p.value("text", "");
      }
      messages.push_back(Json{{"role", item.value("role", "user")}, {"content", text}});
    } else {
      return InvalidArgument("input item type '" + utf8::Sanitize(type) + "' has no chat form");
    }
  }
  flush();
  if (messages.empty()) {
    return Bad("input", "is empty", "give at least one input item (or instructions)");
  }
  return messages;
}

Result<GenerationRequest> BuildGenerationRequest(const ResponsesRequest& request, const Json& items,
                                                 const RequestLimits& limits) {
  ASSIGN_OR_RETURN(Json messages, ItemsToChatMessages(items, request.instructions));
  Json chat = request.chat;
  chat["messages"] = std::move(messages);
  return ParseRequest(Api::kChat, chat, limits);
}

void AssignItemIds(Json& items) {
  for (Json& item : items) {
    if (item.contains("id")) continue;
    const std::string type = item.value("type", "message");
    item["id"] = RandomId(type == "function_call"          ? "fc_"
                          : type == "function_call_output" ? "fco_"
                          : type == "reasoning"            ? "rs_"
                                                           : "msg_");
  }
}

std::string ErrorParam(const Status& status) {
  const std::string& m = status.message();
  if (m.size() < 3 || m[0] != '\'') return {};
  const size_t end = m.find('\'', 1);
  if (end == std::string::npos || end == 1) return {};
  return m.substr(1, end - 1);
}

// ---------------------------------------------------------------------------
// Output items and stream events.

namespace {

// An event about part 0 (`slot`: content_index or summary_index) of item `id`
// at output `index`, carrying `key` (part, text or delta).
Json PartEvent(const char* type, const Json& id, int64_t index, const char* slot, const char* key,
               Json value) {
  return Json{
      {"type", type}, {"item_id", id}, {"output_index", index}, {slot, 0}, {key, std::move(value)}};
}

}  // namespace

ResponseOutputBuilder::ResponseOutputBuilder(bool summary, bool encrypted)
    : summary_(summary), encrypted_(encrypted) {}

void ResponseOutputBuilder::Open(Kind kind, const std::string& name, std::vector<Json>* events) {
  const int64_t index = static_cast<int64_t>(output_.size());
  Json item;
  switch (kind) {
    case Kind::kReasoning:
      item = Json{{"id", RandomId("rs_")},
                  {"type", "reasoning"},
                  {"summary", Json::array()},
                  {"content", Json::array()}};
      break;
    case Kind::kMessage:
      item = Json{{"id", RandomId("msg_")},
                  {"type", "message"},
                  {"status", "in_progress"},
                  {"role", "assistant"},
                  {"content", Json::array()}};
      break;
    case Kind::kFunctionCall:
      item =
          Json{{"id", RandomId("fc_")}, {"type", "function_call"},      {"status", "in_progress"},
               {"arguments", ""},       {"call_id", RandomId("call_")}, {"name", name}};
      break;
    case Kind::kNone:
      return;
  }
  const Json id = item["id"];
  events->push_back(
      Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  if (kind == Kind::kReasoning) {
    events->push_back(PartEvent("response.content_part.added", id, index, "content_index", "part",
                                {{"type", "reasoning_text"}, {"text", ""}}));
    if (summary_) {
      events->push_back(PartEvent("response.reasoning_summary_part.added", id, index,
                                  "summary_index", "part",
                                  {{"type", "summary_text"}, {"text", ""}}));
    }
  } else if (kind == Kind::kMessage) {
    events->push_back(PartEvent("response.content_part.added", id, index, "content_index", "part",
                                {{"type", "output_text"},
                                 {"annotations", Json::array()},
                                 {"logprobs", Json::array()},
                                 {"text", ""}}));
  }
  output_.push_back(std::move(item));
  open_ = kind;
  text_.clear();
}

void ResponseOutputBuilder::Close(const std::string& status, std::vector<Json>* events) {
  if (open_ == Kind::kNone) return;
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  Json& item = output_.back();
  const Json id = item["id"];
  if (open_ == Kind::kReasoning) {
    const Json part{{"type", "reasoning_text"}, {"text", text_}};
    events->push_back(
        PartEvent("response.reasoning_text.done", id, index, "content_index", "text", text_));
    events->push_back(
        PartEvent("response.content_part.done", id, index, "content_index", "part", part));
    item["content"] = Json::array({part});
    if (summary_) {
      const Json summary{{"type", "summary_text"}, {"text", text_}};
      events->push_back(PartEvent("response.reasoning_summary_text.done", id, index,
                                  "summary_index", "text", text_));
      events->push_back(PartEvent("response.reasoning_summary_part.done", id, index,
                                  "summary_index", "part", summary));
      item["summary"] = Json::array({summary});
    }
    if (encrypted_) item["encrypted_content"] = text_;
  } else if (open_ == Kind::kMessage) {
    const Json part{{"type", "output_text"},
                    {"annotations", Json::array()},
                    {"logprobs", Json::array()},
                    {"text", text_}};
    events->push_back(Json{{"type", "response.output_text.done"},
                           {"item_id", id},
                           {"output_index", index},
                           {"content_index", 0},
                           {"text", text_},
                           {"logprobs", Json::array()}});
    events->push_back(
        PartEvent("response.content_part.done", id, index, "content_index", "part", part));
    item["content"] = Json::array({part});
    item["status"] = status;
  } else {
    events->push_back(Json{{"type", "response.function_call_arguments.done"},
                           {"item_id", id},
                           {"output_index", index},
                           {"name", item["name"]},
                           {"arguments", text_}});
    item["arguments"] = text_;
    item["status"] = status;
  }
  events->push_back(
      Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  open_ = Kind::kNone;
  text_.clear();
}

std::vector<Json> ResponseOutputBuilder::Push(const Dsv4OutputDelta& delta) {
  std::vector<Json> events;
  const auto id = [&] { return output_.back()["id"]; };
  const auto index = [&] { return static_cast<int64_t>(output_.size()) - 1; };
  if (!delta.reasoning.empty()) {
    if (open_ != Kind::kReasoning) {
      Close("completed", &events);
      Open(Kind::kReasoning, "", &events);
    }
    text_ += delta.reasoning;
    events.push_back(PartEvent("response.reasoning_text.delta", id(), index(), "content_index",
                               "delta", delta.reasoning));
    if (summary_) {
      events.push_back(PartEvent("response.reasoning_summary_text.delta", id(), index(),
                                 "summary_index", "delta", delta.reasoning));
    }
  }
  if (!delta.content.empty()) {
    if (open_ != Kind::kMessage) {
      Close("completed", &events);
      Open(Kind::kMessage, "", &events);
    }
    text_ += delta.content;
    events.push_back(Json{{"type", "response.output_text.delta"},
                          {"item_id", id()},
                          {"output_index", index()},
                          {"content_index", 0},
                          {"delta", delta.content},
                          {"logprobs", Json::array()}});
  }
  for (const Dsv4ToolCallDelta& t : delta.tool_calls) {
    if (!t.name.empty()) {
      Close("completed", &events);
      Open(Kind::kFunctionCall, t.name, &events);
    }
    if (t.arguments.empty() || open_ != Kind::kFunctionCall) continue;
    text_ += t.arguments;
    events.push_back(Json{{"type", "response.function_call_arguments.delta"},
                          {"item_id", id()},
                          {"output_index", index()},
                          {"delta", t.arguments}});
  }
  return events;
}

std::vector<Json> ResponseOutputBuilder::Finish(const std::string& status) {
  std::vector<Json> events;
  Close(status, &events);
  return events;
}

Json ResponsesUsage(int64_t input_tokens, int64_t cached_tokens, int64_t output_tokens,
                    int64_t reasoning_tokens) {
  return Json{
      {"input_tokens", input_tokens},
      {"input_tokens_details", {{"cached_tokens", cached_tokens}, {"cache_write_tokens", 0}}},
      {"output_tokens", output_tokens},
      {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
      {"total_tokens", input_tokens + output_tokens}};
}

// ---------------------------------------------------------------------------
// HTTP.

namespace {

constexpr const char* kShutdownMessage =
    "The server is shutting down and its grace period (--shutdown-grace) ended before this "
    "response finished";

// An error in OpenAI's shape, with `param`.
std::string ErrorJson(int status, const std::string& message, const std::string& param,
                      const std::string& code) {
  const char* type = status == 503   ? "server_overloaded"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return Dump(Json{{"error",
                    {{"message", message},
                     {"type", type},
                     {"param", param.empty() ? Json(nullptr) : Json(param)},
                     {"code", code.empty() ? Json(nullptr) : Json(code)}}}});
}

void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param = {}, const std::string& code = {}) {
  res.status = status;
  if (status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(status, message, param, code), "application/json");
}

void SendStatus(httplib::Response& res, const Status& s, std::string param = {},
                std::string code = {}) {
  std::string message = s.message();
  if (!s.hint().empty()) message += " (hint: " + s.hint() + ")";
  if (param.empty()) param = ErrorParam(s);
  const int status = HttpStatusOf(s);
  if (status == 404 && code.empty()) {
    code = "model_not_found";
    param = "model";
  }
  SendError(res, status, message, param, code);
}

void SendNotFound(httplib::Response& res, const std::string& id, const std::string& param) {
  SendError(res, 404,
            "Response with id '" + utf8::Sanitize(id.substr(0, 200)) +
                "' not found (hint: only responses created with store true are kept, in "
                "memory, up to --responses-store of them)",
            param, "response_not_found");
}

// One POST /v1/responses on its HTTP thread.
struct ResponseRun {
  ResponseRun(bool parse, bool thinking, DsmlDialect dialect, bool summary, bool encrypted)
      : output(parse, thinking, dialect), builder(summary, encrypted) {}

  ResponsesRequest request;
  Json items;  // the input it runs on (history + its input), with ids
  std::string id;
  int64_t created_at = 0;
  std::string model_id;
  const Tokenizer* tokenizer = nullptr;
  ResponseStore* store = nullptr;
  std::shared_ptr<RequestHandle> handle;
  ChoiceOutput output;
  ResponseOutputBuilder builder;
  bool forced_tool_call = false;
  int64_t prompt_tokens = 0;
  int64_t sequence_number = 0;
  bool started = false;
  bool done = false;
  Json response;  // the final response object, once done

  // The response object with `status`.
  Json Object(const std::string& status, const Json& output_items, const Json& usage,
              const std::string& incomplete_reason = {}, const Json& error = nullptr) const {
    Json out{{"id", id},
             {"object", "response"},
             {"created_at", created_at},
             {"status", status},
             {"background", false},
             {"error", error},
             {"incomplete_details",
              incomplete_reason.empty() ? Json(nullptr) : Json{{"reason", incomplete_reason}}},
             {"model", model_id},
             {"output", output_items}};
    for (const auto& [key, value] : request.echo.items()) out[key] = value;
    out["service_tier"] = "default";
    out["usage"] = usage;
    return out;
  }

  std::string Sse(Json event) {
    event["sequence_number"] = sequence_number++;
    const std::string type = event["type"].get<std::string>();
    return SseEvent(Dump(event), type);
  }

  // response.created and response.in_progress.
  std::string Start() {
    started = true;
    const Json empty = Json::array();
    std::string out = Sse(
        Json{{"type", "response.created"}, {"response", Object("in_progress", empty, nullptr)}});
    out += Sse(Json{{"type", "response.in_progress"},
                    {"response", Object("in_progress", empty, nullptr)}});
    return out;
  }

  // Applies an engine event; returns the stream events it makes.
  std::vector<Json> OnEvent(const SequenceEvent& ev) {
    std::vector<Json> events = builder.Push(output.Push(ev.text));
    if (ev.finish == FinishReason::kNone) return events;
    const Dsv4OutputDelta tail = output.Finish();
    for (Json& e : builder.Push(tail)) events.push_back(std::move(e));
    const Dsv4ParsedOutput& r = output.result();
    const bool calls = !r.tool_calls.empty();
    std::string status = "completed";
    std::string incomplete;
    Json error = nullptr;
    if (ev.finish == FinishReason::kError) {
      status = "failed";
      error =
          Json{{"code", "server_error"}, {"message", "generation failed: " + ev.error.message()}};
    } else if (ev.finish == FinishReason::kCancelled) {
      status = "cancelled";
    } else if (ev.finish == FinishReason::kLength && !(calls && forced_tool_call)) {
      status = "incomplete";
      incomplete = "max_output_tokens";
    }
    for (Json& e : builder.Finish(status == "completed" ? "completed" : "incomplete")) {
      events.push_back(std::move(e));
    }
    // Reasoning tokens: the thinking text as the tokenizer encodes it.
    int64_t reasoning = 0;
    if (tokenizer != nullptr && !r.reasoning_content.empty()) {
      reasoning = std::min<int64_t>(
          static_cast<int64_t>(tokenizer->Encode(r.reasoning_content, false).size()),
          ev.completion_tokens);
    }
    response = Object(
        status, builder.output(),
        ResponsesUsage(prompt_tokens, ev.cached_prompt_tokens, ev.completion_tokens, reasoning),
        incomplete, error);
    done = true;
    if (request.store && (status == "completed" || status == "incomplete")) {
      StoredResponse entry;
      entry.response = response;
      entry.input_items = items;
      if (!store->Put(id, std::move(entry)) && store->max_count() > 0) {
        LOG_WARNING("serve: response {} is larger than --responses-store-bytes; not stored", id);
      }
    }
    const char* type = status == "completed"    ? "response.completed"
                       : status == "incomplete" ? "response.incomplete"
                                                : "response.failed";
    events.push_back(Json{{"type", type}, {"response", response}});
    return events;
  }

  // Ends a stream early (the server is shutting down).
  std::string Abort(const std::string& message) {
    std::string out = started ? "" : Start();
    for (Json& e : builder.Finish("incomplete")) out += Sse(std::move(e));
    response = Object("failed", builder.output(), nullptr, {},
                      Json{{"code", "server_error"}, {"message", message}});
    done = true;
    out += Sse(Json{{"type", "response.failed"}, {"response", response}});
    return out;
  }
};

}  // namespace

ResponsesApi::ResponsesApi(ResponsesContext context)
    : ctx_(std::move(context)), store_(ctx_.store_max_count, ctx_.store_max_bytes) {}

ResponsesApi::~ResponsesApi() = default;

void ResponsesApi::Routes(httplib::Server& http) {
  http.Post("/v1/responses",
            [this](const httplib::Request& req, httplib::Response& res) { Create(req, res); });
  http.Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    std::shared_ptr<const StoredResponse> stored = store_.Get(id);
    if (stored == nullptr) return SendNotFound(res, id, "response_id");
    res.set_content(Dump(stored->response), "application/json");
  });
  http.Delete(
      R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        if (!store_.Erase(id)) return SendNotFound(res, id, "response_id");
        res.set_content(Dump(Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}),
                        "application/json");
      });
  http.Get(R"(/v1/responses/([^/]+)/input_items)",
           [this](const httplib::Request& req, httplib::Response& res) { InputItems(req, res); });
}

void ResponsesApi::InputItems(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  int64_t limit = 20;
  if (req.has_param("limit")) {
    const std::string v = req.get_param_value("limit");
    char* end = nullptr;
    limit = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || limit < 1 || limit > 100) {
      return SendError(res, 400, "'limit' must be an integer in [1, 100]", "limit");
    }
  }
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc") {
    return SendError(res, 400, "'order' must be asc or desc", "order");
  }
  std::shared_ptr<const StoredResponse> stored = store_.Get(id);
  if (stored == nullptr) return SendNotFound(res, id, "response_id");
  std::vector<const Json*> items;
  for (const Json& item : stored->input_items) items.push_back(&item);
  if (order == "desc") std::reverse(items.begin(), items.end());
  size_t start = 0;
  if (req.has_param("after")) {
    const std::string after = req.get_param_value("after");
    while (start < items.size() && items[start]->value("id", "") != after) ++start;
    if (start == items.size()) {
      return SendError(res, 400,
                       "'after' is '" + utf8::Sanitize(after.substr(0, 200)) +
                           "', which is not an input item of this response",
                       "after");
    }
    ++start;
  }
  Json data = Json::array();
  for (size_t i = start; i < items.size() && static_cast<int64_t>(data.size()) < limit; ++i) {
    data.push_back(*items[i]);
  }
  const bool more = start + data.size() < items.size();
  res.set_content(Dump(Json{{"object", "list"},
                            {"data", data},
                            {"first_id", data.empty() ? Json(nullptr) : data.front()["id"]},
                            {"last_id", data.empty() ? Json(nullptr) : data.back()["id"]},
                            {"has_more", more}}),
                  "application/json");
}

void ResponsesApi::Create(const httplib::Request& req, httplib::Response& res) {
  const ResponsesContext& ctx = ctx_;
  HttpServer& http = *ctx.http;
  Engine& engine = *ctx.engine;
  if (http.draining()) {
    return SendError(res, 503, "The server is shutting down; retry on another instance");
  }
  Result<Json> body = ParseJsonBody(req.body);
  if (!body.ok()) return SendStatus(res, body.status());
  Result<ResponsesRequest> parsed = ParseResponsesRequest(*body, ctx.limits);
  if (!parsed.ok()) return SendStatus(res, parsed.status());

  // The conversation: the previous response's input and output, then this input.
  Json items = Json::array();
  if (!parsed->previous_response_id.empty()) {
    std::shared_ptr<const StoredResponse> prev = store_.Get(parsed->previous_response_id);
    if (prev == nullptr) {
      return SendNotFound(res, parsed->previous_response_id, "previous_response_id");
    }
    items = prev->input_items;
    for (const Json& item : prev->response["output"]) items.push_back(item);
  }
  AssignItemIds(parsed->input);
  for (const Json& item : parsed->input) items.push_back(item);
  Result<GenerationRequest> gen = BuildGenerationRequest(*parsed, items, ctx.limits);
  if (!gen.ok()) return SendStatus(res, gen.status());

  const LoadedModel& m = engine.model();
  if (!m.tokenizer) {
    return SendError(res, 400, "this model has no tokenizer, so it cannot chat", "model");
  }
  Result<ChatPrompt> prompt = BuildChatPrompt(*gen, ctx.format);
  if (!prompt.ok()) return SendStatus(res, prompt.status());
  std::vector<int32_t> ids =
      TokenizePrompt(*m.tokenizer, *prompt, ctx.format, ctx.allow_special_in_content);
  if (ids.empty()) return SendError(res, 400, "the prompt is empty", "input");
  if (static_cast<int64_t>(ids.size()) >= engine.ctx_size()) {
    return SendError(res, 400,
                     "The input has " + std::to_string(ids.size()) +
                         " tokens, but the context holds " + std::to_string(engine.ctx_size()) +
                         " (input + output)",
                     "input", "context_length_exceeded");
  }

  const bool parse = IsDeepSeekFormat(ctx.format);
  auto run = std::make_shared<ResponseRun>(parse, gen->thinking && parse, DsmlDialectOf(ctx.format),
                                           parsed->reasoning_summary, parsed->encrypted_reasoning);
  run->request = std::move(parsed).value();
  run->items = std::move(items);
  run->id = RandomId("resp_");
  run->created_at = static_cast<int64_t>(std::time(nullptr));
  run->model_id = ctx.model_id;
  run->tokenizer = m.tokenizer.get();
  run->store = &store_;
  run->prompt_tokens = static_cast<int64_t>(ids.size());

  SequenceRequest s;
  s.prompt = std::move(ids);
  s.max_tokens = gen->max_tokens > 0 ? gen->max_tokens : engine.ctx_size();
  s.sampling = gen->sampling;
  s.sampling.repeat_last_n =
      static_cast<int32_t>(std::min<int64_t>(engine.ctx_size(), kMaxRepeatLastN));
  if (!gen->has_seed) s.sampling.seed = std::random_device{}();
  s.stop = gen->stop;
  if (parse && (ctx.format == ChatFormat::kDsv4 || ctx.format == ChatFormat::kDsv41)) {
    s.constraint = MakeToolChoiceConstraint(*gen, *m.tokenizer,
                                            !gen->tools.empty() ? ctx.token_texts() : nullptr,
                                            ctx.format == ChatFormat::kDsv41);
    run->forced_tool_call = s.constraint != nullptr && ForcesToolCall(*gen);
  }
  if (gen->response_format != ResponseFormat::kText) {
    // text.format: the answer is JSON (after the reasoning, when thinking).
    Result<ConstraintFactory> structured =
        ctx.structured(*gen, gen->thinking && parse, {"text.format", "text.format.schema"});
    if (!structured.ok()) {
      const bool schema = structured.status().message().starts_with("text.format.schema");
      return SendStatus(res, structured.status(), schema ? "text.format.schema" : "text.format");
    }
    s.constraint = *structured;
  }
  std::vector<SequenceRequest> seqs;
  seqs.push_back(std::move(s));
  Result<std::shared_ptr<RequestHandle>> handle = engine.Submit(std::move(seqs));
  if (!handle.ok()) return SendStatus(res, handle.status());
  run->handle = *handle;

  if (!run->request.stream) {
    // As chat completions (server.cc): a response ready within a second gets
    // its exact status; a longer one is sent chunked behind one space per
    // second of waiting, so that a client that has gone away cancels it.
    SequenceEvent ev;
    const auto deadline = std::chrono::steady_clock::now() + 1000ms;
    while (!run->done && std::chrono::steady_clock::now() < deadline) {
      if (run->handle->Next(&ev, 100ms)) run->OnEvent(ev);
    }
    if (run->done) {
      if (run->response["status"] == "failed") {
        return SendError(res, 500, run->response["error"]["message"].get<std::string>());
      }
      res.set_content(Dump(run->response), "application/json");
      return;
    }
    res.set_chunked_content_provider(
        "application/json",
        [&http, run](size_t, httplib::DataSink& sink) {
          if (http.past_drain_deadline() && !run->done) {
            run->handle->Cancel();
            const std::string out = ErrorJson(503, kShutdownMessage, "", "");
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          }
          SequenceEvent ev;
          if (run->handle->Next(&ev, http.draining() ? 200ms : 1000ms)) {
            run->OnEvent(ev);
            while (!run->done && run->handle->Next(&ev, 0ms)) run->OnEvent(ev);
          }
          std::string out = " ";
          if (run->done) {
            out = run->response["status"] == "failed"
                      ? ErrorJson(500, run->response["error"]["message"].get<std::string>(), "", "")
                      : Dump(run->response);
          }
          if (!sink.write(out.data(), out.size())) {
            run->handle->Cancel();
            return false;
          }
          if (run->done) sink.done();
          return true;
        },
        [run](bool) { run->handle->Cancel(); });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&http, run](size_t, httplib::DataSink& sink) {
        if (http.past_drain_deadline() && !run->done) {
          run->handle->Cancel();
          const std::string out = run->Abort(kShutdownMessage);
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        std::string out;
        if (!run->started) out += run->Start();
        SequenceEvent ev;
        const auto wait = http.draining() ? 200ms : 1000ms;
        if (run->handle->Next(&ev, out.empty() ? wait : 0ms)) {
          for (Json& e : run->OnEvent(ev)) out += run->Sse(std::move(e));
          while (!run->done && run->handle->Next(&ev, 0ms)) {
            for (Json& e : run->OnEvent(ev)) out += run->Sse(std::move(e));
          }
        } else if (out.empty()) {
          out = SseComment("keep-alive");
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          run->handle->Cancel();
          return false;
        }
        if (run->done) sink.done();
        return true;
      },
      [run](bool) { run->handle->Cancel(); });
}

}  // namespace dsv4::server
