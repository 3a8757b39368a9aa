// DeepSeek-V4 chat encoding: OpenAI-style messages (+ tools) -> the exact
// prompt string the model was trained on. V4 ships no Jinja template; DeepSeek's
// `encoding/encoding_dsv4.py` is normative and this is a C++ rewrite of its
// encoder, byte-exact on the official cases and on the goldens in
// tests/data/tokenizer/chat_dsv4_goldens.jsonl (tools/goldens/chat_dsv4_goldens.py).
//
// What it renders (see specs/deepseek-v4.md §8.2):
//   BOS text, then per message:
//   system     content [+ "\n\n" tools block] [+ "\n\n" response-format block]
//   user       <｜User｜> + text and <tool_result> blocks joined by "\n\n"
//   developer  <｜User｜> + content [+ tools] [+ response format]
//   assistant  [reasoning</think>] content ["\n\n" DSML tool calls] <｜end▁of▁sentence｜>
//   latest_reminder  <｜latest_reminder｜> + content
//   tool       merged into the next user turn, ordered like the assistant's calls
// and after the last user/developer turn <｜Assistant｜> plus <think> (thinking
// mode) or </think> (chat mode). Quick-instruction tasks append their token.
// Earlier reasoning is dropped (thinking mode, no tools) as the reference does.
//
// JSON values are written the way Python's json.dumps(ensure_ascii=False)
// writes them (", " and ": " separators, insertion order kept, float repr), so
// callers must pass nlohmann::ordered_json to keep key order.
//
// Deliberate differences from the reference, all on input it would crash on
// or render as "None": null content renders as ""; non-string content, unknown
// roles, malformed tools / tool calls, invalid tasks and ill-formed UTF-8 are
// InvalidArgument errors naming the message index and field.
//
// Not here: tokenization (bpe_tokenizer.h), parsing model output
// (chat_output_parser.h).
#ifndef DSV4_TOKENIZER_CHAT_DSV4_H_
#define DSV4_TOKENIZER_CHAT_DSV4_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4 {

// The special-token texts of the V4 chat format.
namespace dsv4_tokens {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
}  // namespace dsv4_tokens

enum class Dsv4ThinkingMode {
  kChat,      // prompt ends with <｜Assistant｜></think>: answer directly
  kThinking,  // prompt ends with <｜Assistant｜><think>: reason first
};

enum class Dsv4ReasoningEffort {
  kDefault,  // the reference's None
  kHigh,     // same prompt as kDefault
  kMax,      // thinking mode: prepends the "Reasoning Effort: Absolute maximum" paragraph
};

struct Dsv4ChatOptions {
  Dsv4ThinkingMode thinking_mode = Dsv4ThinkingMode::kThinking;
  // Drop reasoning_content of assistant turns before the last user turn
  // (thinking mode only; ignored when any message carries tools).
  bool drop_thinking = true;
  // Start with the BOS text (the V4 tokenizer never adds BOS itself).
  bool add_bos = true;
  Dsv4ReasoningEffort reasoning_effort = Dsv4ReasoningEffort::kDefault;
};

// Parses "chat" / "thinking" and "high" / "max" (also "" / "none" for the
// default effort); InvalidArgument otherwise.
// Whether a model file's Jinja chat template (a GGUF's
// `tokenizer.chat_template`) is a rendering of this encoding: llama.cpp's
// converter writes one into deepseek4 files, recognised by the V4 markers
// "<｜User｜>", "<｜Assistant｜>" and "｜DSML｜" (dsv4 renders the encoding
// itself, not the Jinja).
bool IsDeepSeekV4ChatTemplate(std::string_view chat_template);

Result<Dsv4ThinkingMode> ParseDsv4ThinkingMode(std::string_view name);
Result<Dsv4ReasoningEffort> ParseDsv4ReasoningEffort(std::string_view name);

// Encodes `request`: either an array of messages, or an object
// {"messages": [...], "tools": [...]} (OpenAI request style), whose top-level
// tools are attached to the first message when it is a system or developer
// message, else to a new empty system message put in front.
// Message fields read: role, content, reasoning_content, tool_calls
// ({id, function: {name, arguments}}), tool_call_id, tools
// ({type, function: {name, description, parameters}}), response_format, task,
// wo_eos.
Result<std::string> EncodeChatDsv4(const nlohmann::ordered_json& request,
                                   const Dsv4ChatOptions& options);

// The same from JSON text (parsed keeping key order). Errors give the byte
// offset of a syntax error, and reject lone surrogates and ill-formed UTF-8.
Result<std::string> EncodeChatDsv4Json(std::string_view request_json,
                                       const Dsv4ChatOptions& options);

// Python json.dumps(value, ensure_ascii=False): ", " / ": " separators, keys in
// stored order, floats as Python repr ("1.0", "1e-05", "1e+16", NaN,
// Infinity). Used for tool schemas and tool-call arguments.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_CHAT_DSV4_H_
