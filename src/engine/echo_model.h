// EchoModel: a TEST-ONLY scripted "model" for exercising servers end to end
// (dsv4 serve --test-echo-model). It has no weights: after the DeepSeek-V4
// chat prompt's last "<｜Assistant｜>" it emits, token by token, a reply
// computed from the prompt text, then EOS. Its logits give the scripted token
// 0 and every other token -30, so any sampler picks it. The reply:
//   thinking mode (prompt ends with <think>):  "Thinking about it.</think>" first;
//   the last user turn has <tool_result> blocks: "Tool results: R1; R2";
//   the last user turn starts with "REPLY ": the rest of it, verbatim;
//   the last user turn contains "CALL NAME {JSON object}": no text, then a DSML
//     tool-call block invoking NAME with the object's members as parameters;
//   the last user turn is "EFFORT?": "Effort: N" (the prompt's DeepSeek-V4.1
//     "Reasoning Effort: N" line) or "Effort: none";
//   otherwise: "Echo: " + the last user turn's text.
// Its tool-call blocks use the DeepSeek-V4.1 DSML tags when its architecture
// is "deepseek_v41" (a V4.1 stand-in), else V4's.
// Without an "<｜Assistant｜>" token in the sequence it emits EOS at once.
// It needs a tokenizer with the V4 special tokens (e.g. the DeepSeek-V4
// tokenizer.json). Never used for real inference.
#ifndef DSV4_ENGINE_ECHO_MODEL_H_
#define DSV4_ENGINE_ECHO_MODEL_H_

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/loader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// The reply the echo model gives to `prompt` (the decoded prompt text, ending
// after "<｜Assistant｜>" and "<think>" or "</think>"), EOS text excluded.
// `v41_dsml`: write tool calls with the V4.1 tags.
std::string EchoModelReply(std::string_view prompt, bool v41_dsml = false);

// A LoadedModel holding an EchoModel over the tokenizer at `tokenizer_path`
// (any format LoadTokenizer reads). NotFound / InvalidArgument when the
// tokenizer is missing or lacks the V4 special tokens. `architecture` is what
// its ModelInfo reports ("deepseek_v41": serve it with the V4.1 chat format).
Result<LoadedModel> LoadEchoModel(const std::string& tokenizer_path, int64_t max_context = 4096,
                                  const std::string& architecture = "test_echo");

}  // namespace dsv4

#endif  // DSV4_ENGINE_ECHO_MODEL_H_
