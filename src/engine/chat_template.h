// `dsv4 chat-template` behind the engine: renders a conversation (a JSON file)
// into the exact prompt text a model sees — the DeepSeek-V4 chat encoding
// (tokenizer/chat_dsv4.h, encoding_dsv4.py semantics) or DeepSeek-V4.1's
// (tokenizer/chat_dsv41.h), which a model directory's config.json model_type
// "deepseek_v41" selects.
#ifndef DSV4_ENGINE_CHAT_TEMPLATE_H_
#define DSV4_ENGINE_CHAT_TEMPLATE_H_

#include <string>

#include "base/status.h"

namespace dsv4 {

struct ChatTemplateRequest {
  std::string messages_file;      // {"messages": [...], "tools": [...]} or a messages array
  std::string mode = "thinking";  // "chat" | "thinking"
  // V4: "" (high) | "high" | "max"; V4.1: "" (high) | "low" | "high" | "max" | 1..100
  std::string reasoning_effort;
  std::string encoding;       // "" (the model's, else dsv4) | "dsv4" | "dsv41"
  bool drop_thinking = true;  // drop reasoning of turns before the last user message
  // Non-empty: a model directory whose config.json names a chat format
  // (model_type deepseek_v4 or deepseek_v41), or a
  // GGUF file whose chat template is DeepSeek-V4's.
  std::string model_dir;
};

// The prompt text, without a trailing newline. Errors: an unknown mode or
// effort, a model directory without a chat format (Unimplemented), an
// unreadable or malformed messages file (naming it).
Result<std::string> RenderChatTemplate(const ChatTemplateRequest& request);

}  // namespace dsv4

#endif  // DSV4_ENGINE_CHAT_TEMPLATE_H_
