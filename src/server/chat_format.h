// Chat formats: how the server turns a GenerationRequest's messages into a
// prompt, and the model's output text back into reasoning / content / tool
// calls.
//   kDsv4   the DeepSeek-V4 chat encoding (tokenizer/chat_dsv4.h) and its
//           output parser; chosen when the tokenizer has the V4 special tokens
//   kDsv41  the DeepSeek-V4.1 chat encoding (tokenizer/chat_dsv41.h) and the
//           parser's V4.1 DSML dialect; chosen for models whose architecture
//           is "deepseek_v41" (config.json model_type): V4.1 has the same
//           special tokens as V4, so the tokenizer cannot tell them apart
//   kPlain  Llama-family models without a chat template: the message contents
//           joined by "\n" after BOS, the model continues the text; no tools,
//           no reasoning
// Used by server.cc.
#ifndef DSV4_SERVER_CHAT_FORMAT_H_
#define DSV4_SERVER_CHAT_FORMAT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/request.h"
#include "tokenizer/chat_output_parser.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

enum class ChatFormat { kDsv4, kDsv41, kPlain };

// The DeepSeek formats: DSML tool calls, reasoning, the output parser.
inline bool IsDeepSeekFormat(ChatFormat f) { return f != ChatFormat::kPlain; }
inline DsmlDialect DsmlDialectOf(ChatFormat f) {
  return f == ChatFormat::kDsv41 ? DsmlDialect::kV41 : DsmlDialect::kV4;
}

const char* ChatFormatName(ChatFormat format);
// Parses "dsv4" / "dsv41" / "plain"; InvalidArgument otherwise.
Result<ChatFormat> ParseChatFormat(std::string_view name);
// A model whose architecture (ModelInfo::architecture) is "deepseek_v41" gets
// kDsv41. Otherwise the model file's chat template (GGUF
// `tokenizer.chat_template`), when it has one, decides: kDsv4 for DeepSeek-V4's (llama.cpp's
// converter writes its Jinja rendering of the V4 encoding: the "<｜User｜>", "<｜Assistant｜>" and
// "｜DSML｜" markers), kPlain for any other (dsv4 renders no Jinja). Without one: kDsv4 when
// `tokenizer` encodes "<｜Assistant｜>" as one token, else kPlain. (IsDeepSeekV4ChatTemplate:
// tokenizer/chat_dsv4.h.)
ChatFormat DetectChatFormat(const Tokenizer& tokenizer, std::string_view chat_template = {},
                            std::string_view architecture = {});

// A chat prompt: its text, and the byte ranges of it that the client wrote
// (message text, reasoning, tool-call arguments' strings, tool descriptions),
// as opposed to the template's own markers.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> content;  // ascending, disjoint
};

// The prompt of a chat or messages request. kDsv41 renders the request's
// reasoning_budget (thinking mode) and rejects an out-of-range one. kPlain rejects tools
// (InvalidArgument: the format has no tool calls).
Result<ChatPrompt> BuildChatPrompt(const GenerationRequest& request, ChatFormat format);
// The prompt ids: kDsv4 text already holds BOS; kPlain adds the tokenizer's
// BOS. Special-token text inside the content ranges is tokenized as plain
// text, so a message cannot forge a turn, unless `allow_special_in_content`.
std::vector<int32_t> TokenizePrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                    ChatFormat format, bool allow_special_in_content = false);

// One choice's output as it streams: parsed (kDsv4 chat) or passed through as
// content (kPlain, and raw completions).
class ChoiceOutput {
 public:
  // `parse`: run the output parser (chat / messages on a DeepSeek model), in
  // the model's DSML dialect.
  ChoiceOutput(bool parse, bool thinking, DsmlDialect dialect = DsmlDialect::kV4);
  Dsv4OutputDelta Push(std::string_view text);
  Dsv4OutputDelta Finish();
  // Final after Finish().
  const Dsv4ParsedOutput& result() const;

 private:
  std::optional<Dsv4OutputParser> parser_;
  Dsv4ParsedOutput plain_;
};

}  // namespace dsv4::server

#endif  // DSV4_SERVER_CHAT_FORMAT_H_
