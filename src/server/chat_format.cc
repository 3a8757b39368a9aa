// Chat formats (chat_format.h).
#include "server/chat_format.h"

#include <fmt/core.h>

#include <random>

#include "tokenizer/chat_dsv41.h"

namespace dsv4::server {

const char* ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kDsv4:
      return "dsv4";
    case ChatFormat::kDsv41:
      return "dsv41";
    case ChatFormat::kPlain:
      break;
  }
  return "plain";
}

Result<ChatFormat> ParseChatFormat(std::string_view name) {
  if (name == "dsv4") return ChatFormat::kDsv4;
  if (name == "dsv41") return ChatFormat::kDsv41;
  if (name == "plain") return ChatFormat::kPlain;
  return InvalidArgument("unknown chat format '" + std::string(name) + "'",
                         "use auto, dsv4, dsv41 or plain");
}

ChatFormat DetectChatFormat(const Tokenizer& tokenizer, std::string_view chat_template,
                            std::string_view architecture) {
  if (architecture == "deepseek_v41") return ChatFormat::kDsv41;
  if (!chat_template.empty()) {
    return IsDeepSeekV4ChatTemplate(chat_template) ? ChatFormat::kDsv4 : ChatFormat::kPlain;
  }
  return tokenizer.Encode(dsv4_tokens::kAssistant, false).size() == 1 ? ChatFormat::kDsv4
                                                                      : ChatFormat::kPlain;
}

namespace {

using Json = nlohmann::ordered_json;

// Client text is found in the rendered V4 prompt by wrapping it in markers
// before rendering: private-use characters around a per-request random nonce,
// which the renderer copies through unchanged (JSON dumps keep non-ASCII) and
// a client cannot guess. Empty strings are not wrapped (the renderer treats
// them differently from non-empty ones).
struct Markers {
  std::string open;
  std::string close;
};

Markers MakeMarkers() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string nonce = fmt::format("{:016x}", rng());
  return Markers{"\uE000" + nonce + "\uE001", "\uE002" + nonce + "\uE001"};
}

void Wrap(Json& value, const Markers& m) {
  if (value.is_string() && !value.get_ref<const std::string&>().empty()) {
    value = m.open + value.get<std::string>() + m.close;
  }
}

// Every string value (not key) under `value`.
void WrapAll(Json& value, const Markers& m) {
  if (value.is_string()) return Wrap(value, m);
  if (value.is_structured()) {
    for (auto& v : value) WrapAll(v, m);
  }
}

// Every "description" string under `value` (tool definitions).
void WrapDescriptions(Json& value, const Markers& m) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it.key() == "description") {
        Wrap(it.value(), m);
      } else {
        WrapDescriptions(it.value(), m);
      }
    }
  } else if (value.is_array()) {
    for (auto& v : value) WrapDescriptions(v, m);
  }
}

// Every string under `value`, object keys included (a schema's property names).
Json WrapEverything(const Json& value, const Markers& m) {
  if (value.is_string()) {
    Json v = value;
    Wrap(v, m);
    return v;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const Json& v : value) out.push_back(WrapEverything(v, m));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      Json key = it.key();
      Wrap(key, m);
      out[key.get<std::string>()] = WrapEverything(it.value(), m);
    }
    return out;
  }
  return value;
}

void WrapMessage(Json& msg, const Markers& m) {
  if (!msg.is_object()) return;
  if (auto it = msg.find("content"); it != msg.end()) {
    if (it->is_string()) {
      Wrap(*it, m);
    } else if (it->is_array()) {
      for (Json& part : *it) {
        if (!part.is_object()) continue;
        if (auto t = part.find("text"); t != part.end()) Wrap(*t, m);
        if (auto c = part.find("content"); c != part.end() && c->is_string()) Wrap(*c, m);
      }
    }
  }
  if (auto it = msg.find("reasoning_content"); it != msg.end()) Wrap(*it, m);
  auto calls = msg.find("tool_calls");
  if (calls == msg.end() || !calls->is_array()) return;
  for (Json& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    Json& fn = call["function"];
    auto args = fn.find("arguments");
    if (args == fn.end()) continue;
    if (args->is_string()) {
      // The renderer parses the arguments and writes each value: wrap the
      // string values inside, keep the JSON parseable. Text that is not JSON
      // is rendered whole, as one value.
      Json parsed = Json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) {
        WrapAll(parsed, m);
        *args = parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } else if (parsed.is_discarded()) {
        Wrap(*args, m);
      }
    } else {
      WrapAll(*args, m);
    }
  }
}

// Removes the markers from `text`, recording what they enclosed.
ChatPrompt Unwrap(const std::string& text, const Markers& m) {
  ChatPrompt out;
  out.text.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(m.open, pos);
    if (open == std::string::npos) break;
    const size_t close = text.find(m.close, open + m.open.size());
    if (close == std::string::npos) break;
    out.text.append(text, pos, open - pos);
    const size_t begin = out.text.size();
    out.text.append(text, open + m.open.size(), close - open - m.open.size());
    if (out.text.size() > begin) out.content.push_back(TextRange{begin, out.text.size()});
    pos = close + m.close.size();
  }
  out.text.append(text, pos, std::string::npos);
  return out;
}

}  // namespace

Result<ChatPrompt> BuildChatPrompt(const GenerationRequest& request, ChatFormat format) {
  if (IsDeepSeekFormat(format)) {
    const Markers markers = MakeMarkers();
    Json messages = request.messages;
    for (Json& msg : messages) WrapMessage(msg, markers);
    Json req = {{"messages", std::move(messages)}};
    if (!request.tools.empty()) {
      Json tools = request.tools;
      WrapDescriptions(tools, markers);
      req["tools"] = std::move(tools);
    }
    if (request.response_format != ResponseFormat::kText) {
      // The V4 / V4.1 encodings render a system message's response_format after its
      // text ("## Response Format: ..."), so the model sees the schema.
      Json rf = {{"type", "json_object"}};
      if (request.response_format == ResponseFormat::kJsonSchema) {
        rf = {{"type", "json_schema"}, {"json_schema", {{"schema", request.json_schema}}}};
      }
      Json& msgs = req["messages"];
      const std::string first_role = !msgs.empty() && msgs[0].is_object() &&
                                             msgs[0].contains("role") && msgs[0]["role"].is_string()
                                         ? msgs[0]["role"].get<std::string>()
                                         : "";
      if (first_role != "system" && first_role != "developer") {
        msgs.insert(msgs.begin(), Json{{"role", "system"}, {"content", ""}});
      }
      msgs[0]["response_format"] = WrapEverything(rf, markers);
    }
    const Dsv4ThinkingMode mode =
        request.thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat;
    Dsv41ChatOptions options41;
    options41.thinking_mode = mode;
    if (request.reasoning_budget != 0) options41.reasoning_effort = request.reasoning_budget;
    Dsv4ChatOptions options;
    options.thinking_mode = mode;
    options.reasoning_effort = request.reasoning_effort;
    Result<std::string> text = format == ChatFormat::kDsv41 ? EncodeChatDsv41(req, options41)
                                                            : EncodeChatDsv4(req, options);
    if (!text.ok()) {
      // Error messages quote client text: without the markers.
      Status s = text.status();
      return Status(s.code(), Unwrap(s.message(), markers).text, s.hint());
    }
    return Unwrap(*text, markers);
  }
  if (!request.tools.empty()) {
    const std::string field = request.legacy_functions ? "'functions'" : "'tools'";
    return InvalidArgument(field + " is not supported by this model (it has no tool-call format)",
                           "leave " + field + " out, or serve a DeepSeek-V4 model");
  }
  ChatPrompt prompt;
  for (const auto& m : request.messages) {
    if (m.contains("tool_calls") && !m["tool_calls"].empty()) {
      return InvalidArgument("tool calls in 'messages' are not supported by this model",
                             "this model has no tool-call format");
    }
    const std::string content = m["content"].get<std::string>();
    if (content.empty()) continue;
    if (!prompt.text.empty()) prompt.text += "\n";
    const size_t begin = prompt.text.size();
    prompt.text += content;
    prompt.content.push_back(TextRange{begin, prompt.text.size()});
  }
  return prompt;
}

std::vector<int32_t> TokenizePrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                    ChatFormat format, bool allow_special_in_content) {
  const bool add_bos = format == ChatFormat::kPlain;
  if (allow_special_in_content) return tokenizer.Encode(prompt.text, add_bos);
  return tokenizer.EncodeWithPlainRanges(prompt.text, add_bos, prompt.content);
}

ChoiceOutput::ChoiceOutput(bool parse, bool thinking, DsmlDialect dialect) {
  if (parse) {
    parser_.emplace(thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat, dialect);
  }
}

Dsv4OutputDelta ChoiceOutput::Push(std::string_view text) {
  if (parser_) return parser_->Push(text);
  Dsv4OutputDelta d;
  d.content = std::string(text);
  plain_.content += text;
  return d;
}

Dsv4OutputDelta ChoiceOutput::Finish() {
  if (parser_) return parser_->Finish();
  return {};
}

const Dsv4ParsedOutput& ChoiceOutput::result() const {
  return parser_ ? parser_->result() : plain_;
}

}  // namespace dsv4::server
