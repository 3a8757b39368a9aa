// DeepSeek-V4 chat encoding (see chat_dsv4.h). The structure mirrors
// encoding_dsv4.py function by function (merge tool messages -> sort tool
// results -> drop thinking -> render each message) so that a reader can check
// one against the other.
#include "tokenizer/chat_dsv4.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "tokenizer/chat_dsv4_internal.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace chat_internal {

using Json = nlohmann::ordered_json;
namespace tok = dsv4_tokens;

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

// Quick-instruction task -> its token.
const std::map<std::string, std::string, std::less<>>& TaskTokens() {
  static const std::map<std::string, std::string, std::less<>> kTasks = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
  };
  return kTasks;
}

// Python truthiness of a JSON value (None, False, 0, "", [], {} are false).
bool Truthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return v.get<bool>();
    case Json::value_t::string:
      return !v.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !v.empty();
    case Json::value_t::number_integer:
      return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return v.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return v.get<double>() != 0.0;
    default:
      return true;
  }
}

// msg.get(key): nullptr when absent.
const Json* Get(const Json& msg, std::string_view key) {
  auto it = msg.find(std::string(key));
  return it == msg.end() ? nullptr : &*it;
}

// A text field: absent or null -> "", a string -> itself, else an error.
Result<std::string> TextField(const Json& msg, std::string_view key, std::string_view where) {
  const Json* v = Get(msg, key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) {
    return InvalidArgument(
        fmt::format("{}: \"{}\" is a {}, expected a string", where, key, v->type_name()),
        "flatten content parts into one string before encoding");
  }
  return v->get<std::string>();
}

void AppendPythonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// Python's float repr (shortest round-trip digits; exponent form when the
// decimal exponent is < -4 or >= 16).
void AppendPythonFloat(double x, std::string* out) {
  if (std::isnan(x)) {
    *out += "NaN";
    return;
  }
  if (std::isinf(x)) {
    *out += x > 0 ? "Infinity" : "-Infinity";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (negative) out->push_back('-');
  if (decpt <= -4 || decpt > 16) {
    out->push_back(digits[0]);
    if (n > 1) {
      out->push_back('.');
      out->append(digits, 1, std::string::npos);
    }
    *out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    *out += "0.";
    out->append(static_cast<size_t>(-decpt), '0');
    *out += digits;
  } else if (decpt >= n) {
    *out += digits;
    out->append(static_cast<size_t>(decpt - n), '0');
    *out += ".0";
  } else {
    out->append(digits, 0, static_cast<size_t>(decpt));
    out->push_back('.');
    out->append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
}

void AppendPythonJson(const Json& v, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null:
      *out += "null";
      break;
    case Json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      *out += std::to_string(v.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      *out += std::to_string(v.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      AppendPythonFloat(v.get<double>(), out);
      break;
    case Json::value_t::string:
      AppendPythonString(v.get_ref<const std::string&>(), out);
      break;
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const Json& e : v) {
        if (!first) *out += ", ";
        first = false;
        AppendPythonJson(e, out);
      }
      out->push_back(']');
      break;
    }
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) *out += ", ";
        first = false;
        AppendPythonString(it.key(), out);
        *out += ": ";
        AppendPythonJson(it.value(), out);
      }
      out->push_back('}');
      break;
    }
    default:
      *out += "null";
      break;  // binary / discarded: not produced by the parser
  }
}

std::string RenderTools(const std::vector<const Json*>& functions) {
  std::string schemas;
  for (size_t i = 0; i < functions.size(); ++i) {
    if (i) schemas += '\n';
    AppendPythonJson(*functions[i], &schemas);
  }
  const std::string dsml(tok::kDsml);
  return fmt::format(
      "## Tools\n\n"
      "You have access to a set of tools to help answer the user's question. You can invoke tools "
      "by writing a \"<{0}tool_calls>\" block like the following:\n\n"
      "<{0}tool_calls>\n"
      "<{0}invoke name=\"$TOOL_NAME\">\n"
      "<{0}parameter name=\"$PARAMETER_NAME\" "
      "string=\"true|false\">$PARAMETER_VALUE</{0}parameter>\n"
      "...\n"
      "</{0}invoke>\n"
      "<{0}invoke name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</{0}invoke>\n"
      "</{0}tool_calls>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by {1}), you MUST output your complete reasoning "
      "inside {1}...{2} BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after {2} with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n"
      "{3}\n\n"
      "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
      "calls.\n",
      dsml, tok::kThinkStart, tok::kThinkEnd, schemas);
}

// tools_from_openai_format: [tool["function"] for tool in tools], validated.
Result<std::vector<const Json*>> ToolFunctions(const Json& tools, std::string_view where) {
  if (!tools.is_array()) {
    return InvalidArgument(
        fmt::format("{}: \"tools\" is a {}, expected an array", where, tools.type_name()));
  }
  std::vector<const Json*> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const Json* fn = t.is_object() ? Get(t, "function") : nullptr;
    if (fn == nullptr || !fn->is_object()) {
      return InvalidArgument(fmt::format("{}: tools[{}] has no \"function\" object", where, i),
                             "tools use the OpenAI form {\"type\": \"function\", \"function\": "
                             "{\"name\", \"description\", \"parameters\"}}");
    }
    const Json* name = Get(*fn, "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return InvalidArgument(
          fmt::format("{}: tools[{}].function has no \"name\" string", where, i));
    }
    if (const Json* params = Get(*fn, "parameters");
        params != nullptr && !params->is_object() && !params->is_null()) {
      return InvalidArgument(
          fmt::format("{}: tools[{}].function.parameters is a {}, expected a "
                      "JSON-schema object",
                      where, i, params->type_name()));
    }
    out.push_back(fn);
  }
  return out;
}

// tool_calls_from_openai_format, validated.
Result<std::vector<ToolCall>> ToolCalls(const Json& calls, std::string_view where) {
  if (!calls.is_array()) {
    return InvalidArgument(
        fmt::format("{}: \"tool_calls\" is a {}, expected an array", where, calls.type_name()));
  }
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const Json* fn = c.is_object() ? Get(c, "function") : nullptr;
    const Json* name = fn != nullptr && fn->is_object() ? Get(*fn, "name") : nullptr;
    const Json* args = fn != nullptr && fn->is_object() ? Get(*fn, "arguments") : nullptr;
    if (name == nullptr || !name->is_string() || args == nullptr) {
      return InvalidArgument(fmt::format(
          "{}: tool_calls[{}] needs function.name (a string) and function.arguments", where, i));
    }
    out.push_back({name->get<std::string>(), *args});
  }
  return out;
}

// encode_arguments_to_dsml: the arguments JSON object as DSML parameters.
Result<std::string> EncodeArgumentsToDsml(const ToolCall& call, std::string_view where) {
  Json arguments;
  bool parsed = false;
  if (call.arguments.is_string()) {
    const std::string& text = call.arguments.get_ref<const std::string&>();
    arguments = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    parsed = !arguments.is_discarded();
  }
  if (!parsed) {
    // The reference wraps whatever it cannot parse as one "arguments" value.
    arguments = Json::object();
    arguments["arguments"] = call.arguments;
  }
  if (!arguments.is_object()) {
    return InvalidArgument(
        fmt::format("{}: tool call '{}' has arguments that are JSON but not an object ({})", where,
                    call.name, arguments.type_name()),
        "function.arguments must encode a JSON object");
  }
  std::string out;
  const std::string dsml(tok::kDsml);
  bool first = true;
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = it.value().is_string();
    std::string value = is_string ? it.value().get<std::string>() : PythonJsonDumps(it.value());
    out += fmt::format("<{0}parameter name=\"{1}\" string=\"{2}\">{3}</{0}parameter>", dsml,
                       it.key(), is_string ? "true" : "false", value);
  }
  return out;
}

// merge_tool_messages: "tool" messages become tool_result blocks of a user
// message; user messages get a text block.
Result<std::vector<Json>> MergeToolMessages(const Json& messages) {
  std::vector<Json> merged;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& msg = messages[i];
    std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object())
      return InvalidArgument(fmt::format("{} is a {}, expected an object", where, msg.type_name()));
    const Json* role = Get(msg, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidArgument(fmt::format("{} has no \"role\" string", where));
    }
    const std::string& r = role->get_ref<const std::string&>();
    if (r == "tool") {
      Json block = Json::object();
      block["type"] = "tool_result";
      const Json* id = Get(msg, "tool_call_id");
      block["tool_use_id"] = id != nullptr && id->is_string() ? *id : Json("");
      const Json* content = Get(msg, "content");
      block["content"] = content != nullptr ? *content : Json("");
      if (!merged.empty() && merged.back().value("role", "") == "user" &&
          merged.back().contains("content_blocks")) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        Json user = Json::object();
        user["role"] = "user";
        user["content_blocks"] = Json::array({std::move(block)});
        merged.push_back(std::move(user));
      }
    } else if (r == "user") {
      ASSIGN_OR_RETURN(std::string text, TextField(msg, "content", where));
      Json block = Json::object();
      block["type"] = "text";
      block["text"] = text;
      bool prev_user = !merged.empty() && merged.back().value("role", "") == "user" &&
                       merged.back().contains("content_blocks");
      bool prev_has_task =
          prev_user && merged.back().contains("task") && !merged.back()["task"].is_null();
      if (prev_user && !prev_has_task) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        Json user = Json::object();
        user["role"] = "user";
        user["content"] = text;
        user["content_blocks"] = Json::array({std::move(block)});
        for (const char* key : {"task", "wo_eos", "mask"}) {
          if (msg.contains(key)) user[key] = msg[key];
        }
        merged.push_back(std::move(user));
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// sort_tool_results_by_call_order: tool_result blocks follow the order of the
// preceding assistant's tool calls (stable for unknown ids, which sort as 0).
void SortToolResultsByCallOrder(std::vector<Json>* messages) {
  std::map<std::string, int> order;
  for (Json& msg : *messages) {
    std::string role = msg.value("role", "");
    if (role == "assistant" && msg.contains("tool_calls") && Truthy(msg["tool_calls"]) &&
        msg["tool_calls"].is_array()) {
      order.clear();
      int idx = 0;
      for (const Json& tc : msg["tool_calls"]) {
        std::string id;
        if (tc.is_object()) {
          if (const Json* v = Get(tc, "id"); v != nullptr && v->is_string())
            id = v->get<std::string>();
          if (id.empty()) {
            if (const Json* fn = Get(tc, "function"); fn != nullptr && fn->is_object()) {
              if (const Json* v = Get(*fn, "id"); v != nullptr && v->is_string())
                id = v->get<std::string>();
            }
          }
        }
        if (!id.empty()) order[id] = idx;
        ++idx;
      }
    } else if (role == "user" && msg.contains("content_blocks") && Truthy(msg["content_blocks"])) {
      Json& blocks = msg["content_blocks"];
      std::vector<Json> tool_blocks;
      for (const Json& b : blocks) {
        if (b.value("type", "") == "tool_result") tool_blocks.push_back(b);
      }
      if (tool_blocks.size() > 1 && !order.empty()) {
        auto key = [&](const Json& b) {
          auto it = order.find(b.value("tool_use_id", ""));
          return it == order.end() ? 0 : it->second;
        };
        std::stable_sort(tool_blocks.begin(), tool_blocks.end(),
                         [&](const Json& a, const Json& b) { return key(a) < key(b); });
        size_t k = 0;
        for (Json& b : blocks) {
          if (b.value("type", "") == "tool_result") b = tool_blocks[k++];
        }
      }
    }
  }
}

int FindLastUserIndex(const std::vector<Json>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    std::string role = messages[i].value("role", "");
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

// _drop_thinking_messages: before the last user turn, assistant turns lose
// their reasoning and developer turns are dropped.
std::vector<Json> DropThinkingMessages(const std::vector<Json>& messages) {
  const int last_user = FindLastUserIndex(messages);
  std::vector<Json> out;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const Json& msg = messages[i];
    std::string role = msg.value("role", "");
    if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
        role == "direct_search_results" || i >= last_user) {
      out.push_back(msg);
    } else if (role == "assistant") {
      Json copy = msg;
      copy.erase("reasoning_content");
      out.push_back(std::move(copy));
    }
  }
  return out;
}

Result<std::string> RenderToolsAndFormat(const Json& msg, std::string_view where) {
  std::string out;
  if (const Json* tools = Get(msg, "tools"); tools != nullptr && Truthy(*tools)) {
    ASSIGN_OR_RETURN(auto functions, ToolFunctions(*tools, where));
    out += "\n\n" + RenderTools(functions);
  }
  if (const Json* rf = Get(msg, "response_format"); rf != nullptr && Truthy(*rf)) {
    out += "\n\n" + std::string(kResponseFormatPrefix) + PythonJsonDumps(*rf);
  }
  return out;
}

Result<std::string> RenderMessage(int index, const std::vector<Json>& messages,
                                  const Dsv4ChatOptions& options, bool drop_thinking) {
  const bool thinking = options.thinking_mode == Dsv4ThinkingMode::kThinking;
  const Json& msg = messages[index];
  const std::string where = fmt::format("message {}", index);
  const int last_user = FindLastUserIndex(messages);
  const std::string role = msg.value("role", "");
  std::string prompt;

  if (index == 0 && thinking && options.reasoning_effort == Dsv4ReasoningEffort::kMax) {
    prompt += kReasoningEffortMax;
  }

  if (role == "system") {
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    prompt += content;
    ASSIGN_OR_RETURN(std::string extra, RenderToolsAndFormat(msg, where));
    prompt += extra;
  } else if (role == "developer") {
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    if (content.empty()) {
      return InvalidArgument(fmt::format("{} (developer) has empty content", where),
                             "developer messages must carry text");
    }
    prompt += std::string(tok::kUser) + content;
    ASSIGN_OR_RETURN(std::string extra, RenderToolsAndFormat(msg, where));
    prompt += extra;
  } else if (role == "user") {
    prompt += tok::kUser;
    const Json* blocks = Get(msg, "content_blocks");
    if (blocks != nullptr && Truthy(*blocks)) {
      std::vector<std::string> parts;
      for (const Json& block : *blocks) {
        std::string type = block.value("type", "");
        if (type == "text") {
          ASSIGN_OR_RETURN(std::string text, TextField(block, "text", where));
          parts.push_back(std::move(text));
        } else if (type == "tool_result") {
          const Json* content = Get(block, "content");
          std::string text;
          if (content != nullptr && content->is_array()) {
            std::vector<std::string> pieces;
            for (const Json& b : *content) {
              std::string btype = b.is_object() ? b.value("type", "") : "";
              if (btype == "text") {
                ASSIGN_OR_RETURN(std::string t, TextField(b, "text", where));
                pieces.push_back(std::move(t));
              } else {
                pieces.push_back(fmt::format("[Unsupported {}]", btype.empty() ? "None" : btype));
              }
            }
            for (size_t k = 0; k < pieces.size(); ++k) text += (k ? "\n\n" : "") + pieces[k];
          } else {
            ASSIGN_OR_RETURN(text, TextField(block, "content", where + " (tool result)"));
          }
          parts.push_back("<tool_result>" + text + "</tool_result>");
        } else {
          parts.push_back(fmt::format("[Unsupported {}]", type));
        }
      }
      for (size_t k = 0; k < parts.size(); ++k) prompt += (k ? "\n\n" : "") + parts[k];
    } else {
      ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
      prompt += content;
    }
  } else if (role == "latest_reminder") {
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    prompt += std::string(tok::kLatestReminder) + content;
  } else if (role == "assistant") {
    std::string tc_content;
    if (const Json* calls = Get(msg, "tool_calls"); calls != nullptr && Truthy(*calls)) {
      ASSIGN_OR_RETURN(std::vector<ToolCall> tool_calls, ToolCalls(*calls, where));
      const std::string dsml(tok::kDsml);
      std::string list;
      for (size_t k = 0; k < tool_calls.size(); ++k) {
        ASSIGN_OR_RETURN(std::string args, EncodeArgumentsToDsml(tool_calls[k], where));
        if (k) list += '\n';
        list += fmt::format("<{0}invoke name=\"{1}\">\n{2}\n</{0}invoke>", dsml, tool_calls[k].name,
                            args);
      }
      tc_content = fmt::format("\n\n<{0}tool_calls>\n{1}\n</{0}tool_calls>", dsml, list);
    }
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    ASSIGN_OR_RETURN(std::string reasoning, TextField(msg, "reasoning_content", where));
    const bool prev_has_task = index >= 1 && messages[index - 1].contains("task") &&
                               !messages[index - 1]["task"].is_null();
    std::string thinking_part;
    if (thinking && !prev_has_task && (!drop_thinking || index > last_user)) {
      thinking_part = reasoning + std::string(tok::kThinkEnd);
    }
    prompt += thinking_part + content + tc_content;
    const Json* wo_eos = Get(msg, "wo_eos");
    if (wo_eos == nullptr || !Truthy(*wo_eos)) prompt += tok::kEos;
  } else {
    return InvalidArgument(fmt::format("{} has unknown role '{}'", where, utf8::Sanitize(role)),
                           "roles: system, user, assistant, tool, developer, latest_reminder");
  }

  // Transition to the next turn.
  if (index + 1 < static_cast<int>(messages.size())) {
    std::string next_role = messages[index + 1].value("role", "");
    if (next_role != "assistant" && next_role != "latest_reminder") return prompt;
  }
  const Json* task = Get(msg, "task");
  if (task != nullptr && !task->is_null()) {
    std::string name = task->is_string() ? task->get<std::string>() : task->dump();
    auto it = TaskTokens().find(name);
    if (it == TaskTokens().end()) {
      return InvalidArgument(fmt::format("{} has invalid task '{}'", where, utf8::Sanitize(name)),
                             "tasks: action, query, authority, domain, title, read_url");
    }
    if (name != "action") {
      prompt += it->second;
    } else {
      prompt += std::string(tok::kAssistant) +
                std::string(thinking ? tok::kThinkStart : tok::kThinkEnd) + it->second;
    }
  } else if (role == "user" || role == "developer") {
    prompt += tok::kAssistant;
    if (thinking && (!drop_thinking || index >= last_user)) {
      prompt += tok::kThinkStart;
    } else {
      prompt += tok::kThinkEnd;
    }
  }
  return prompt;
}

// Ill-formed UTF-8 anywhere in the input (possible when the caller built the
// JSON in code rather than parsing it).
std::optional<std::string> FindInvalidUtf8(const Json& v, const std::string& path) {
  if (v.is_string()) {
    if (!utf8::IsValid(v.get_ref<const std::string&>())) return path;
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (auto bad = FindInvalidUtf8(v[i], path + "[" + std::to_string(i) + "]")) return bad;
    }
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!utf8::IsValid(it.key())) return path + " (a key)";
      if (auto bad = FindInvalidUtf8(it.value(), path + "." + utf8::Sanitize(it.key()))) return bad;
    }
  }
  return std::nullopt;
}

Result<Json> MessagesOf(const Json& request) {
  Json messages;
  if (request.is_array()) {
    messages = request;
  } else if (request.is_object()) {
    const Json* m = Get(request, "messages");
    if (m == nullptr || !m->is_array()) {
      return InvalidArgument("request has no \"messages\" array");
    }
    messages = *m;
    if (const Json* tools = Get(request, "tools"); tools != nullptr && Truthy(*tools)) {
      std::string first_role =
          !messages.empty() && messages[0].is_object() ? messages[0].value("role", "") : "";
      if (first_role != "system" && first_role != "developer") {
        Json system = Json::object();
        system["role"] = "system";
        system["content"] = "";
        messages.insert(messages.begin(), std::move(system));
      }
      messages[0]["tools"] = *tools;
    }
  } else {
    return InvalidArgument(fmt::format("request is a {}, expected messages (an array) or an object",
                                       request.type_name()));
  }

  return messages;
}

Result<Json> ParseRequestJson(std::string_view request_json) {
  Json request;
  try {
    request = Json::parse(request_json.begin(), request_json.end());
  } catch (const Json::parse_error& e) {
    return InvalidArgument(
        fmt::format("chat request is not valid JSON (byte {}): {}", e.byte, e.what()),
        "strings must be UTF-8 without lone surrogates (\\ud800 alone)");
  } catch (const Json::exception& e) {  // e.g. a number too large for a double
    return InvalidArgument(fmt::format("chat request is not valid JSON: {}", e.what()),
                           "numbers must fit in a double");
  }
  return request;
}

}  // namespace chat_internal

using namespace chat_internal;  // NOLINT(build/namespaces): defined in this file

std::string PythonJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  AppendPythonJson(value, &out);
  return out;
}

bool IsDeepSeekV4ChatTemplate(std::string_view t) {
  return t.find("<｜User｜>") != std::string_view::npos &&
         t.find("<｜Assistant｜>") != std::string_view::npos &&
         t.find("｜DSML｜") != std::string_view::npos;
}

Result<Dsv4ThinkingMode> ParseDsv4ThinkingMode(std::string_view name) {
  if (name == "chat") return Dsv4ThinkingMode::kChat;
  if (name == "thinking") return Dsv4ThinkingMode::kThinking;
  return InvalidArgument(fmt::format("unknown thinking mode '{}'", name), "use chat or thinking");
}

Result<Dsv4ReasoningEffort> ParseDsv4ReasoningEffort(std::string_view name) {
  if (name.empty() || name == "none") return Dsv4ReasoningEffort::kDefault;
  if (name == "high") return Dsv4ReasoningEffort::kHigh;
  if (name == "max") return Dsv4ReasoningEffort::kMax;
  return InvalidArgument(fmt::format("unknown reasoning effort '{}'", name), "use high or max");
}

namespace {
Result<std::string> EncodeChatDsv4Impl(const Json& request, const Dsv4ChatOptions& options) {
  if (auto bad = FindInvalidUtf8(request, "request")) {
    return InvalidArgument(fmt::format("{} is not valid UTF-8", *bad), "send UTF-8 text");
  }
  ASSIGN_OR_RETURN(Json messages, MessagesOf(request));

  ASSIGN_OR_RETURN(std::vector<Json> full, MergeToolMessages(messages));
  SortToolResultsByCallOrder(&full);

  std::string prompt = options.add_bos ? std::string(tok::kBos) : std::string();
  bool drop_thinking = options.drop_thinking;
  for (const Json& m : full) {
    if (const Json* tools = Get(m, "tools"); tools != nullptr && Truthy(*tools))
      drop_thinking = false;
  }
  if (options.thinking_mode == Dsv4ThinkingMode::kThinking && drop_thinking) {
    full = DropThinkingMessages(full);
  }
  for (int i = 0; i < static_cast<int>(full.size()); ++i) {
    ASSIGN_OR_RETURN(std::string part, RenderMessage(i, full, options, drop_thinking));
    prompt += part;
  }
  return prompt;
}
}  // namespace

Result<std::string> EncodeChatDsv4(const nlohmann::ordered_json& request,
                                   const Dsv4ChatOptions& options) {
  // Every access above checks types first; this keeps a missed case from
  // escaping as an exception (the module boundary is exception-free).
  try {
    return EncodeChatDsv4Impl(request, options);
  } catch (const nlohmann::ordered_json::exception& e) {
    return InvalidArgument(fmt::format("chat request has an unexpected shape: {}", e.what()),
                           "messages are objects with string fields (OpenAI chat format)");
  }
}

Result<std::string> EncodeChatDsv4Json(std::string_view request_json,
                                       const Dsv4ChatOptions& options) {
  ASSIGN_OR_RETURN(Json request, ParseRequestJson(request_json));
  return EncodeChatDsv4(request, options);
}

}  // namespace dsv4
