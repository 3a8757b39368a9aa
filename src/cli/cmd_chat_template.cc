// `dsv4 chat-template`: renders a conversation into the exact prompt text the
// model sees (DeepSeek-V4 encoding, encoding_dsv4.py semantics), without a
// trailing newline.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/commands.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4::cli {
namespace {

struct ChatTemplateArgs {
  std::string messages_file;
  std::string mode = "thinking";
  std::string reasoning_effort;
  bool no_drop_thinking = false;
  std::string model;
};

// The chat format of a model directory: its config.json's model_type.
Status CheckModelFormat(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument(path + ": not a JSON object", "is this a model directory?");
  }
  const auto type_it = config.find("model_type");
  const std::string type =
      type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (type != "deepseek_v4") {
    return Unimplemented(path + ": no chat format for model_type '" + type + "'",
                         "supported: deepseek_v4");
  }
  return Status::Ok();
}

int Run(const ChatTemplateArgs& a) {
  if (!a.model.empty()) {
    if (Status st = CheckModelFormat(a.model); !st.ok()) return ReportError(st);
  }
  Dsv4ChatOptions options;
  auto mode = ParseDsv4ThinkingMode(a.mode);
  if (!mode.ok()) return ReportError(mode.status());
  options.thinking_mode = *mode;
  auto effort = ParseDsv4ReasoningEffort(a.reasoning_effort);
  if (!effort.ok()) return ReportError(effort.status());
  options.reasoning_effort = *effort;
  options.drop_thinking = !a.no_drop_thinking;
  auto text = ReadFileToString(a.messages_file);
  if (!text.ok()) return ReportError(text.status());
  auto prompt = EncodeChatDsv4Json(*text, options);
  if (!prompt.ok()) return ReportError(prompt.status().WithContext(a.messages_file));
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

}  // namespace

void RegisterChatTemplate(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* sub = app.add_subcommand("chat-template", "render a conversation as the prompt text");
  sub->add_option("--messages", args->messages_file,
                  "JSON file: {\"messages\": [...], \"tools\": [...]} or a messages array")
      ->required();
  sub->add_option("--mode", args->mode, "chat | thinking (default thinking)");
  sub->add_option("--reasoning-effort", args->reasoning_effort, "high | max (default high)");
  sub->add_flag("--no-drop-thinking", args->no_drop_thinking,
                "keep reasoning of turns before the last user message");
  sub->add_option("--model", args->model, "model directory: use its own chat format");
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
