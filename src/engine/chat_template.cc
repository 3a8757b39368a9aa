// RenderChatTemplate (see chat_template.h).
#include "engine/chat_template.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "io/gguf.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_dsv41.h"

namespace dsv4 {
namespace {

// The chat format of a model directory: its config.json's model_type
// ("dsv4" or "dsv41").
Result<std::string> CheckModelFormat(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument(path + ": not a JSON object", "is this a model directory?");
  }
  const auto type_it = config.find("model_type");
  const std::string type =
      type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (type == "deepseek_v41") return std::string("dsv41");
  if (type != "deepseek_v4") {
    return Unimplemented(path + ": no chat format for model_type '" + type + "'",
                         "supported: deepseek_v4, deepseek_v41");
  }
  return std::string("dsv4");
}

// A GGUF model: its own chat template must be DeepSeek-V4's.
Status CheckGgufFormat(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenGguf(path));
  if (!file->HasMeta("tokenizer.chat_template")) {
    return Unimplemented(path + ": the file has no chat template (tokenizer.chat_template)",
                         "dsv4 renders DeepSeek-V4's chat encoding for models that carry it");
  }
  ASSIGN_OR_RETURN(std::string t, file->GetString("tokenizer.chat_template"));
  if (!IsDeepSeekV4ChatTemplate(t)) {
    return Unimplemented(path + ": its chat template is not DeepSeek-V4's",
                         "dsv4 renders DeepSeek-V4's chat encoding, not Jinja templates");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> RenderChatTemplate(const ChatTemplateRequest& r) {
  std::string encoding = r.encoding;
  if (!encoding.empty() && encoding != "dsv4" && encoding != "dsv41") {
    return InvalidArgument("--encoding is '" + encoding + "'", "use dsv4 or dsv41");
  }
  if (!r.model_dir.empty()) {
    if (r.model_dir.ends_with(".gguf")) {
      RETURN_IF_ERROR(CheckGgufFormat(r.model_dir));
    } else {
      ASSIGN_OR_RETURN(std::string model_encoding, CheckModelFormat(r.model_dir));
      if (encoding.empty()) encoding = model_encoding;
    }
  }
  if (encoding == "dsv41") {
    Dsv41ChatOptions options;
    ASSIGN_OR_RETURN(options.thinking_mode, ParseDsv4ThinkingMode(r.mode));
    ASSIGN_OR_RETURN(options.reasoning_effort,
                     ParseDsv41ReasoningEffort(r.reasoning_effort, "--reasoning-effort"));
    options.drop_thinking = r.drop_thinking;
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(r.messages_file));
    auto prompt = EncodeChatDsv41Json(text, options);
    if (!prompt.ok()) return prompt.status().WithContext(r.messages_file);
    return std::move(*prompt);
  }
  Dsv4ChatOptions options;
  ASSIGN_OR_RETURN(options.thinking_mode, ParseDsv4ThinkingMode(r.mode));
  ASSIGN_OR_RETURN(options.reasoning_effort, ParseDsv4ReasoningEffort(r.reasoning_effort));
  options.drop_thinking = r.drop_thinking;
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(r.messages_file));
  auto prompt = EncodeChatDsv4Json(text, options);
  if (!prompt.ok()) return prompt.status().WithContext(r.messages_file);
  return std::move(*prompt);
}

}  // namespace dsv4
