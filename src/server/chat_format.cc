// Chat formats (chat_format.h).
#include "server/chat_format.h"

namespace dsv4::server {

const char* ChatFormatName(ChatFormat format) {
  return format == ChatFormat::kDsv4 ? "dsv4" : "plain";
}

Result<ChatFormat> ParseChatFormat(std::string_view name) {
  if (name == "dsv4") return ChatFormat::kDsv4;
  if (name == "plain") return ChatFormat::kPlain;
  return InvalidArgument("unknown chat format '" + std::string(name) + "'",
                         "use auto, dsv4 or plain");
}

ChatFormat DetectChatFormat(const Tokenizer& tokenizer) {
  return tokenizer.Encode(dsv4_tokens::kAssistant, false).size() == 1 ? ChatFormat::kDsv4
                                                                      : ChatFormat::kPlain;
}

Result<std::string> BuildChatPrompt(const GenerationRequest& request, ChatFormat format) {
  if (format == ChatFormat::kDsv4) {
    nlohmann::ordered_json req = {{"messages", request.messages}};
    if (!request.tools.empty()) req["tools"] = request.tools;
    Dsv4ChatOptions options;
    options.thinking_mode =
        request.thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat;
    options.reasoning_effort = request.reasoning_effort;
    return EncodeChatDsv4(req, options);
  }
  if (!request.tools.empty()) {
    return InvalidArgument("'tools' is not supported by this model (it has no tool-call format)",
                           "leave 'tools' out, or serve a DeepSeek-V4 model");
  }
  std::string text;
  for (const auto& m : request.messages) {
    if (m.contains("tool_calls") && !m["tool_calls"].empty()) {
      return InvalidArgument("tool calls in 'messages' are not supported by this model",
                             "this model has no tool-call format");
    }
    const std::string content = m["content"].get<std::string>();
    if (content.empty()) continue;
    if (!text.empty()) text += "\n";
    text += content;
  }
  return text;
}

std::vector<int32_t> TokenizePrompt(const Tokenizer& tokenizer, std::string_view text,
                                    ChatFormat format) {
  return tokenizer.Encode(text, /*add_bos=*/format == ChatFormat::kPlain);
}

ChoiceOutput::ChoiceOutput(bool parse, bool thinking) {
  if (parse) parser_.emplace(thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat);
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
