// DeepSeek-V4.1 chat encoding (see chat_dsv41.h). Structured like the
// reference encoder: merge tool messages -> sort tool results -> drop thinking
// -> render each message; the preprocessing is shared with V4
// (chat_dsv4_internal.h).
#include "tokenizer/chat_dsv41.h"

#include <fmt/core.h>

#include <charconv>
#include <vector>

#include "tokenizer/chat_dsv4_internal.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

using chat_internal::Get;
using chat_internal::Json;
using chat_internal::TextField;
using chat_internal::Truthy;
namespace tok = dsv4_tokens;
namespace tok41 = dsv41_tokens;

constexpr std::string_view kRoles = "system, developer, user, assistant, tool, latest_reminder";

std::string RenderTools(const std::vector<const Json*>& functions) {
  std::string schemas;
  for (size_t i = 0; i < functions.size(); ++i) {
    if (i) schemas += '\n';
    schemas += PythonJsonDumps(*functions[i]);
  }
  const std::string calls = std::string(tok::kDsml) + std::string(tok41::kCallsTag);
  const std::string invoke = std::string(tok::kDsml) + std::string(tok41::kInvokeTag);
  const std::string param = std::string(tok::kDsml) + std::string(tok41::kParameterTag);
  return fmt::format(
      "## Tools\n\n"
      "You have access to a set of tools to help answer the user's question. You can invoke tools "
      "by writing a \"<{0}>\" block like the following:\n\n"
      "<{0}>\n"
      "<{1} name=\"$TOOL_NAME\">\n"
      "<{2} name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{2}>\n"
      "...\n"
      "</{1}>\n"
      "<{1} name=\"$TOOL_NAME2\">\n"
      "...\n"
      "</{1}>\n"
      "</{0}>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by {3}), you MUST output your complete reasoning "
      "inside {3}...{4} BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after {4} with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n"
      "{5}\n\n"
      "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
      "calls.\n",
      calls, invoke, param, tok::kThinkStart, tok::kThinkEnd, schemas);
}

// encode_arguments_to_dsml (V4.1): an object as is; a JSON string parsed up
// to twice (double-encoded arguments); anything else becomes one
// "arguments" parameter holding the value as given.
std::string EncodeArgumentsToDsml(const chat_internal::ToolCall& call) {
  Json arguments = call.arguments;
  if (!arguments.is_object()) {
    for (int k = 0; k < 2 && arguments.is_string(); ++k) {
      Json parsed = Json::parse(arguments.get_ref<const std::string&>(), nullptr,
                                /*allow_exceptions=*/false);
      if (parsed.is_discarded()) break;
      arguments = std::move(parsed);
    }
    if (!arguments.is_object()) {
      arguments = Json::object();
      arguments["arguments"] = call.arguments;
    }
  }
  const std::string param = std::string(tok::kDsml) + std::string(tok41::kParameterTag);
  std::string out;
  bool first = true;
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = it.value().is_string();
    out += fmt::format("<{0} name=\"{1}\" string=\"{2}\">{3}</{0}>", param, it.key(),
                       is_string ? "true" : "false",
                       is_string ? it.value().get<std::string>() : PythonJsonDumps(it.value()));
  }
  return out;
}

// find_last_user_index (V4.1): user messages and system messages after the
// first count.
int FindLastUserIndex(const std::vector<Json>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    std::string role = messages[i].value("role", "");
    if (role == "user" || (role == "system" && i > 0)) return i;
  }
  return -1;
}

// _drop_thinking_messages (V4.1's last-user definition).
std::vector<Json> DropThinkingMessages(const std::vector<Json>& messages) {
  const int last_user = FindLastUserIndex(messages);
  std::vector<Json> out;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const Json& msg = messages[i];
    std::string role = msg.value("role", "");
    if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
        i >= last_user) {
      out.push_back(msg);
    } else if (role == "assistant") {
      Json copy = msg;
      copy.erase("reasoning_content");
      out.push_back(std::move(copy));
    }
  }
  return out;
}

Result<std::string> RenderUserContent(const Json& msg, const std::string& where) {
  const Json* blocks = Get(msg, "content_blocks");
  if (blocks == nullptr || !Truthy(*blocks)) return TextField(msg, "content", where);
  std::string out;
  bool first = true;
  for (const Json& block : *blocks) {
    std::string part;
    const std::string type = block.value("type", "");
    if (type == "text") {
      ASSIGN_OR_RETURN(part, TextField(block, "text", where));
    } else if (type == "tool_result") {
      const Json* content = Get(block, "content");
      std::string text;
      if (content != nullptr && content->is_array()) {
        bool first_piece = true;
        for (const Json& b : *content) {
          std::string btype = b.is_object() ? b.value("type", "") : "";
          std::string piece;
          if (btype == "text") {
            ASSIGN_OR_RETURN(piece, TextField(b, "text", where + " (tool result)"));
          } else {
            piece = fmt::format("[Unsupported {}]", btype.empty() ? "None" : btype);
          }
          text += (first_piece ? "" : "\n\n") + piece;
          first_piece = false;
        }
      } else {
        ASSIGN_OR_RETURN(text, TextField(block, "content", where + " (tool result)"));
      }
      part = "<tool_result>" + text + "</tool_result>";
    } else {
      part = fmt::format("[Unsupported {}]", type);
    }
    out += (first ? "" : "\n\n") + part;
    first = false;
  }
  return out;
}

Result<std::string> RenderMessage(int index, const std::vector<Json>& messages,
                                  const Dsv41ChatOptions& options, bool drop_thinking) {
  const bool thinking = options.thinking_mode == Dsv4ThinkingMode::kThinking;
  const Json& msg = messages[index];
  const std::string where = fmt::format("message {}", index);
  const int last_user = FindLastUserIndex(messages);
  const std::string role = msg.value("role", "");

  std::string effort;
  if (index == 0 && thinking) {
    effort = fmt::format(
        "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the "
        "reasoning)\n\n",
        options.reasoning_effort);
  }
  std::string prompt;
  if (index == 0 && (!effort.empty() || role == "system")) prompt += tok41::kSystem;
  prompt += effort;

  if (role == "system") {
    if (index > 0) prompt += tok41::kSystem;
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    prompt += content;
    if (const Json* tools = Get(msg, "tools"); tools != nullptr && Truthy(*tools)) {
      ASSIGN_OR_RETURN(auto functions, chat_internal::ToolFunctions(*tools, where));
      prompt += "\n\n" + RenderTools(functions);
    }
    if (const Json* rf = Get(msg, "response_format"); rf != nullptr && Truthy(*rf)) {
      prompt += "\n\n" + std::string(chat_internal::kResponseFormatPrefix) + PythonJsonDumps(*rf);
    }
  } else if (role == "user") {
    prompt += tok::kUser;
    ASSIGN_OR_RETURN(std::string content, RenderUserContent(msg, where));
    prompt += content;
  } else if (role == "latest_reminder") {
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    prompt += std::string(tok::kLatestReminder) + content;
  } else if (role == "assistant") {
    std::string tc_content;
    if (const Json* calls = Get(msg, "tool_calls"); calls != nullptr && Truthy(*calls)) {
      ASSIGN_OR_RETURN(auto tool_calls, chat_internal::ToolCalls(*calls, where));
      const std::string invoke = std::string(tok::kDsml) + std::string(tok41::kInvokeTag);
      const std::string block = std::string(tok::kDsml) + std::string(tok41::kCallsTag);
      std::string list;
      for (size_t k = 0; k < tool_calls.size(); ++k) {
        if (k) list += '\n';
        list += fmt::format("<{0} name=\"{1}\">\n{2}\n</{0}>", invoke, tool_calls[k].name,
                            EncodeArgumentsToDsml(tool_calls[k]));
      }
      tc_content = fmt::format("\n\n<{0}>\n{1}\n</{0}>", block, list);
    }
    ASSIGN_OR_RETURN(std::string content, TextField(msg, "content", where));
    ASSIGN_OR_RETURN(std::string reasoning, TextField(msg, "reasoning_content", where));
    const bool prev_has_task = index >= 1 && messages[index - 1].contains("task") &&
                               !messages[index - 1]["task"].is_null();
    if (thinking && !prev_has_task && (!drop_thinking || index > last_user)) {
      prompt += reasoning + std::string(tok::kThinkEnd);
    }
    prompt += content + tc_content;
    const Json* wo_eos = Get(msg, "wo_eos");
    if (wo_eos == nullptr || !Truthy(*wo_eos)) prompt += tok::kEos;
  } else {
    return InvalidArgument(fmt::format("{} has unknown role '{}'", where, utf8::Sanitize(role)),
                           fmt::format("roles: {}", kRoles));
  }

  // Transition to the next turn.
  if (index + 1 < static_cast<int>(messages.size())) {
    std::string next_role = messages[index + 1].value("role", "");
    if (next_role != "assistant" && next_role != "latest_reminder") return prompt;
  }
  const Json* task = Get(msg, "task");
  if (task != nullptr && !task->is_null()) {
    std::string name = task->is_string() ? task->get<std::string>() : task->dump();
    auto it = chat_internal::TaskTokens().find(name);
    if (it == chat_internal::TaskTokens().end()) {
      return InvalidArgument(fmt::format("{} has invalid task '{}'", where, utf8::Sanitize(name)),
                             "tasks: action, query, authority, domain, title, read_url");
    }
    if (name != "action") {
      prompt += it->second;
    } else {
      prompt += std::string(tok::kAssistant) +
                std::string(thinking ? tok::kThinkStart : tok::kThinkEnd) + it->second;
    }
  } else if (role == "user" || (role == "system" && index > 0)) {
    prompt += tok::kAssistant;
    if (thinking && (!drop_thinking || index >= last_user)) {
      prompt += tok::kThinkStart;
    } else {
      prompt += tok::kThinkEnd;
    }
  }
  return prompt;
}

Result<std::string> EncodeImpl(const Json& request, const Dsv41ChatOptions& options) {
  if (options.reasoning_effort < 1 || options.reasoning_effort > 100) {
    return InvalidArgument(
        fmt::format("reasoning_effort is {}, expected 1..100", options.reasoning_effort),
        "use low (50), high (75), max (100) or an integer from 1 to 100");
  }
  if (auto bad = chat_internal::FindInvalidUtf8(request, "request")) {
    return InvalidArgument(fmt::format("{} is not valid UTF-8", *bad), "send UTF-8 text");
  }
  ASSIGN_OR_RETURN(Json messages, chat_internal::MessagesOf(request));
  // Roles are checked up front: the reference drops unknown roles before the
  // last user turn without a word, and has no developer role.
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& msg = messages[i];
    if (!msg.is_object()) {
      return InvalidArgument(
          fmt::format("messages[{}] is a {}, expected an object", i, msg.type_name()));
    }
    const Json* role = Get(msg, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidArgument(fmt::format("messages[{}] has no \"role\" string", i),
                             fmt::format("roles: {}", kRoles));
    }
    const std::string& r = role->get_ref<const std::string&>();
    if (r == "developer") {
      msg["role"] = "system";
    } else if (r != "system" && r != "user" && r != "assistant" && r != "tool" &&
               r != "latest_reminder") {
      return InvalidArgument(
          fmt::format("messages[{}] has unknown role '{}'", i, utf8::Sanitize(r)),
          fmt::format("roles: {}", kRoles));
    }
  }

  ASSIGN_OR_RETURN(std::vector<Json> full, chat_internal::MergeToolMessages(messages));
  chat_internal::SortToolResultsByCallOrder(&full);

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

Result<int> ParseDsv41ReasoningEffort(std::string_view value, std::string_view field) {
  if (value.empty() || value == "high") return kDsv41EffortHigh;
  if (value == "low") return kDsv41EffortLow;
  if (value == "max") return kDsv41EffortMax;
  int n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec == std::errc() && end == value.data() + value.size() && n >= 1 && n <= 100) return n;
  return InvalidArgument(
      fmt::format("{} is '{}' (DeepSeek-V4.1)", field, utf8::Sanitize(std::string(value))),
      "use low, high, max or an integer from 1 to 100");
}

Result<std::string> EncodeChatDsv41(const nlohmann::ordered_json& request,
                                    const Dsv41ChatOptions& options) {
  try {
    return EncodeImpl(request, options);
  } catch (const nlohmann::ordered_json::exception& e) {
    return InvalidArgument(fmt::format("chat request has an unexpected shape: {}", e.what()),
                           "messages are objects with string fields (OpenAI chat format)");
  }
}

Result<std::string> EncodeChatDsv41Json(std::string_view request_json,
                                        const Dsv41ChatOptions& options) {
  ASSIGN_OR_RETURN(Json request, chat_internal::ParseRequestJson(request_json));
  return EncodeChatDsv41(request, options);
}

}  // namespace dsv4
