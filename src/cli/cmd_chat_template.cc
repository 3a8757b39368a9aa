// `dsv4 chat-template`: renders a conversation into the exact prompt text the
// model sees (the DeepSeek-V4 or V4.1 encoding), without a
// trailing newline.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/chat_template.h"

namespace dsv4::cli {
namespace {

struct ChatTemplateArgs {
  ChatTemplateRequest request;
  bool no_drop_thinking = false;
};

int Run(ChatTemplateArgs& a) {
  a.request.drop_thinking = !a.no_drop_thinking;
  auto prompt = RenderChatTemplate(a.request);
  if (!prompt.ok()) return ReportError(prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

}  // namespace

void RegisterChatTemplate(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* sub = app.add_subcommand("chat-template", "render a conversation as the prompt text");
  sub->add_option("--messages", args->request.messages_file,
                  "JSON file: {\"messages\": [...], \"tools\": [...]} or a messages array")
      ->required();
  sub->add_option("--mode", args->request.mode, "chat | thinking (default thinking)");
  sub->add_option("--reasoning-effort", args->request.reasoning_effort,
                  "high | max (default high); DeepSeek-V4.1: low | high | max | 1..100");
  sub->add_option("--encoding", args->request.encoding,
                  "dsv4 | dsv41 (default: the --model's, else dsv4)");
  sub->add_flag("--no-drop-thinking", args->no_drop_thinking,
                "keep reasoning of turns before the last user message");
  sub->add_option("--model", args->request.model_dir,
                  "model directory or GGUF file: use its own chat format");
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
