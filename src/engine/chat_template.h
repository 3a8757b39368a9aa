// `dsv4 chat-template` behind the engine: renders a conversation (a JSON file)
// into the exact prompt text a model sees — the DeepSeek-V4 chat encoding
// (tokenizer/chat_dsv4.h, encoding_dsv4.py semantics).
#ifndef DSV4_ENGINE_CHAT_TEMPLATE_H_
#define DSV4_ENGINE_CHAT_TEMPLATE_H_

#include <string>

#include "base/status.h"

namespace dsv4 {

struct ChatTemplateRequest {
  std::string messages_file;      // {"messages": [...], "tools": [...]} or a messages array
  std::string mode = "thinking";  // "chat" | "thinking"
  std::string reasoning_effort;   // "" (high) | "high" | "max"
  bool drop_thinking = true;      // drop reasoning of turns before the last user message
  // Non-empty: a model directory whose config.json names a chat format, or a
  // GGUF file whose chat template is DeepSeek-V4's.
  std::string model_dir;
};

// The prompt text, without a trailing newline. Errors: an unknown mode or
// effort, a model directory without a chat format (Unimplemented), an
// unreadable or malformed messages file (naming it).
Result<std::string> RenderChatTemplate(const ChatTemplateRequest& request);

}  // namespace dsv4

#endif  // DSV4_ENGINE_CHAT_TEMPLATE_H_
