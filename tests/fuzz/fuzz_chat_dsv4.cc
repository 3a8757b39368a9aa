// libFuzzer target for the DeepSeek-V4 and V4.1 chat encoders and the output
// parser (first byte: bit 0 thinking mode, bit 1 the V4.1 encoder and DSML
// dialect, bits 2.. the V4.1 reasoning effort).
//  1. The bytes as a chat request (EncodeChatDsv4Json / EncodeChatDsv41Json):
//     a Status or a well-formed UTF-8 prompt that starts with BOS.
//  2. The bytes as model output: the one-shot parse never crashes; malformed
//     output comes back as its raw text; well-formed output parses the same
//     when streamed in pieces whose sizes come from the input.
// Seeds: tests/fuzz/corpus/fuzz_chat_dsv4.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_dsv41.h"
#include "tokenizer/chat_output_parser.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto mode =
      (data[0] & 1) ? dsv4::Dsv4ThinkingMode::kThinking : dsv4::Dsv4ThinkingMode::kChat;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const bool v41 = (data[0] & 2) != 0;
  const auto dialect = v41 ? dsv4::DsmlDialect::kV41 : dsv4::DsmlDialect::kV4;
  auto prompt = v41 ? dsv4::EncodeChatDsv41Json(
                          text, dsv4::Dsv41ChatOptions{.thinking_mode = mode,
                                                       .reasoning_effort = (data[0] >> 2) + 1})
                    : dsv4::EncodeChatDsv4Json(text, dsv4::Dsv4ChatOptions{.thinking_mode = mode});
  if (prompt.ok()) {
    CHECK(dsv4::utf8::IsValid(*prompt));
    CHECK(prompt->starts_with(dsv4::dsv4_tokens::kBos));
  }

  const dsv4::Dsv4ParsedOutput whole = dsv4::ParseDsv4Output(text, mode, dialect);
  if (whole.malformed) {
    std::string_view raw = text;
    if (raw.ends_with(dsv4::dsv4_tokens::kEos)) raw.remove_suffix(dsv4::dsv4_tokens::kEos.size());
    CHECK(whole.content == raw, "malformed output must come back as its raw text");
    return 0;
  }
  dsv4::Dsv4OutputParser parser(mode, dialect);
  std::string reasoning, content;
  size_t pos = 0, k = 1;
  while (pos < text.size()) {
    size_t step = 1 + data[k % size] % 9;
    ++k;
    dsv4::Dsv4OutputDelta d = parser.Push(text.substr(pos, step));
    reasoning += d.reasoning;
    content += d.content;
    pos += step;
  }
  dsv4::Dsv4OutputDelta d = parser.Finish();
  reasoning += d.reasoning;
  content += d.content;
  CHECK(!parser.result().malformed, "streaming disagrees with the one-shot parse on validity");
  CHECK(reasoning == whole.reasoning_content && content == whole.content, "streamed text differs");
  CHECK(parser.result().tool_calls.size() == whole.tool_calls.size());
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    CHECK(parser.result().tool_calls[i].arguments == whole.tool_calls[i].arguments);
  }
  return 0;
}
