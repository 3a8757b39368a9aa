// DeepSeek-V4.1 chat encoding: OpenAI-style messages (+ tools) -> the prompt
// string DeepSeek-V4.1 models (config.json model_type "deepseek_v41") were
// trained on. Like V4 it ships no Jinja template; DeepSeek's encoding.py for
// V4.1 is normative, and this is a C++ rewrite of its text encoder, byte-exact
// on the goldens in tests/data/tokenizer/dsv41_encoding/
// (tools/reference/make_v41_encoding_goldens.py).
//
// What differs from V4 (chat_dsv4.h):
//   - <｜System｜> opens a system message: the first message when it is a
//     system message, and every system message later in the conversation (a
//     mid-conversation system message ends a turn like a user message: the
//     <｜Assistant｜> header follows it when it is the last turn).
//   - Thinking mode starts the prompt with a numeric reasoning effort,
//     "<｜System｜>Reasoning Effort: N (range 1-100, ...)\n\n" (then the first
//     system message's text, if any, without a second <｜System｜>). N is 1..100;
//     low = 50, high = 75 (the default), max = 100. Chat mode renders none.
//   - DSML tag names carry a leading space: <｜DSML｜ calls>, <｜DSML｜ invoke
//     name="...">, <｜DSML｜ parameter name="..." string="...">, in the tools
//     prompt and in assistant tool calls.
//   - Tool-call arguments that are a JSON string (even double-encoded) or an
//     object render as parameters; anything else as one "arguments" value.
//   - No developer role in the reference: dsv4 renders "developer" messages as
//     system messages (as vLLM's V4.1 serving does).
// Unchanged: BOS, <｜User｜>, <｜Assistant｜> + <think> / </think>, tool results
// merged into user turns as <tool_result>…</tool_result> blocks in the order of
// the assistant's calls, latest_reminder, response_format, quick-instruction
// tasks, wo_eos, and dropping the reasoning of turns before the last user (or
// mid-conversation system) turn in thinking mode unless tools are present.
//
// Deliberate differences from the reference, on input it would crash on or
// render as "None": null content renders as ""; non-string content (images
// included: V4.1's image blocks are not supported here), unknown roles (the
// reference silently drops some), malformed tools / tool calls, invalid tasks
// or reasoning efforts and ill-formed UTF-8 are InvalidArgument errors naming
// the message index and field. A tool message whose content is a list renders
// its non-text parts as "[Unsupported TYPE]" (the reference drops them), and
// text holding "<｜deepseek_image｜>" is not refused (servers tokenize client
// text as plain text, chat_format.h).
//
// Not here: tokenization, parsing model output (chat_output_parser.h with
// DsmlDialect::kV41).
#ifndef DSV4_TOKENIZER_CHAT_DSV41_H_
#define DSV4_TOKENIZER_CHAT_DSV41_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4 {

namespace dsv41_tokens {
inline constexpr std::string_view kSystem = "<｜System｜>";
// DSML tag names (after "<｜DSML｜" / "</｜DSML｜").
inline constexpr std::string_view kCallsTag = " calls";
inline constexpr std::string_view kInvokeTag = " invoke";
inline constexpr std::string_view kParameterTag = " parameter";
}  // namespace dsv41_tokens

// The reasoning-effort budgets of the named levels.
inline constexpr int kDsv41EffortLow = 50;
inline constexpr int kDsv41EffortHigh = 75;
inline constexpr int kDsv41EffortMax = 100;

struct Dsv41ChatOptions {
  Dsv4ThinkingMode thinking_mode = Dsv4ThinkingMode::kThinking;
  // Drop reasoning_content of assistant turns before the last user (or
  // mid-conversation system) turn; thinking mode only, ignored with tools.
  bool drop_thinking = true;
  // Start with the BOS text.
  bool add_bos = true;
  // 1..100, rendered in thinking mode only. Out of range: InvalidArgument.
  int reasoning_effort = kDsv41EffortHigh;
};

// "low" / "high" / "max" or an integer 1..100 in decimal ("" = the default,
// high); InvalidArgument naming `field` otherwise.
Result<int> ParseDsv41ReasoningEffort(std::string_view value,
                                      std::string_view field = "reasoning_effort");

// Encodes `request` (messages array, or {"messages", "tools"} as for
// EncodeChatDsv4). Message fields read: role, content, reasoning_content,
// tool_calls, tool_call_id, tools, response_format, task, wo_eos.
Result<std::string> EncodeChatDsv41(const nlohmann::ordered_json& request,
                                    const Dsv41ChatOptions& options);
Result<std::string> EncodeChatDsv41Json(std::string_view request_json,
                                        const Dsv41ChatOptions& options);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_CHAT_DSV41_H_
