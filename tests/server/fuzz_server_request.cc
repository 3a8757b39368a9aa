// libFuzzer target for the HTTP request parsers (server/request.h): the bytes
// as a request body for each API (first byte picks the API). Whatever the
// input, parsing returns a Status or a request; an accepted chat request
// either builds a well-formed UTF-8 prompt in both chat formats or fails with
// a Status. A request that forces a tool call (tool_choice required / named)
// also drives a ToolCallConstraint over a small synthetic vocabulary (bytes,
// DSML markers, EOS) with token picks taken from the input: whatever is
// picked, the output it allows plus Close() must parse into tool calls to the
// allowed names. Seeds: tests/server/fuzz_corpus/server_request.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "server/chat_format.h"
#include "server/request.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_output_parser.h"
#include "tokenizer/utf8.h"

namespace {

using namespace dsv4;
using namespace dsv4::server;

// Ids 0..255: single bytes; then markers and pieces of them; EOS last.
const std::shared_ptr<const TokenTexts>& Vocab() {
  static const auto texts = [] {
    auto t = std::make_shared<TokenTexts>();
    for (int b = 0; b < 256; ++b) t->push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"｜DSML｜",
                          "</think>",
                          "<think>",
                          "\n\n",
                          "<",
                          "</",
                          "tool_calls>\n",
                          "invoke",
                          " name=\"",
                          "\">\n",
                          "parameter",
                          "\" string=\"true\">",
                          "\" string=\"false\">",
                          ">\n",
                          "tool_calls>",
                          "invoke>\n",
                          "get_",
                          "weather",
                          "a\"b",
                          "}"}) {
      t->push_back(s);
    }
    t->push_back("");  // EOS (a control token: no text)
    return std::shared_ptr<const TokenTexts>(t);
  }();
  return texts;
}

// Runs the constraint with picks from `picks`; CHECKs the parsed result.
void DriveToolCall(const GenerationRequest& req, std::string_view picks) {
  ToolCallSpec spec;
  if (req.tool_choice == "function") {
    spec.names = {req.tool_choice_name};
    spec.single_call = true;
  } else {
    for (const auto& t : req.tools) spec.names.push_back(t["function"]["name"]);
  }
  spec.thinking = req.thinking;
  spec.eos_id = static_cast<int32_t>(Vocab()->size()) - 1;
  spec.reserve_tokens = picks.empty() ? 0 : static_cast<unsigned char>(picks[0]) % 8;
  ToolCallConstraint c(Vocab(), spec);
  const int32_t n = static_cast<int32_t>(Vocab()->size());
  int64_t left = static_cast<int64_t>(picks.size());
  for (size_t i = 0; i + 1 < picks.size() && !c.done(); i += 2, left -= 2) {
    c.Prepare(std::max<int64_t>(left / 2, 1));
    int32_t id =
        (static_cast<unsigned char>(picks[i]) << 8 | static_cast<unsigned char>(picks[i + 1])) % n;
    if (!c.Allows(id)) {
      // As the engine: the first allowed id after masking.
      std::vector<float> logits(n, 0.0f);
      c.Mask(logits);
      id = -1;
      for (int32_t k = 0; k < n && id < 0; ++k) {
        if (logits[k] == 0.0f) id = k;
      }
      if (id < 0) break;
      CHECK(c.Allows(id));
    }
    if (id == spec.eos_id) break;
    c.Accept(id);
  }
  c.Close();
  CHECK(c.done());
  const Dsv4ParsedOutput out = ParseDsv4Output(
      c.text(), spec.thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat);
  // Special-token text spelled out of byte tokens inside the reasoning is the
  // one thing the constraint does not track (tool_choice.h).
  if (spec.thinking && out.malformed && out.error.find("unexpected '") != std::string::npos) {
    return;
  }
  CHECK(!out.malformed, "%s: %s", out.error.c_str(), c.text().c_str());
  CHECK(!out.tool_calls.empty() && out.content.empty());
  CHECK(!spec.single_call || out.tool_calls.size() == 1);
  for (const auto& call : out.tool_calls) {
    CHECK(std::find(spec.names.begin(), spec.names.end(), call.name) != spec.names.end());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv4::server;
  if (size == 0) return 0;
  const Api api = static_cast<Api>(data[0] % 3);
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto json = ParseJsonBody(body);
  if (!json.ok()) return 0;
  RequestLimits limits;
  limits.model_id = "m";
  auto req = ParseRequest(api, *json, limits);
  if (!req.ok()) return 0;
  CHECK(req->n >= 1 && req->n <= limits.max_n);
  CHECK(req->max_tokens == -1 || (req->max_tokens >= 1 && req->max_tokens <= limits.ctx_size));
  if (api != Api::kCompletion) {
    for (ChatFormat f : {ChatFormat::kDsv4, ChatFormat::kDsv41, ChatFormat::kPlain}) {
      auto prompt = BuildChatPrompt(*req, f);
      if (prompt.ok()) CHECK(dsv4::utf8::IsValid(prompt->text));
    }
    if (ForcesToolCall(*req)) DriveToolCall(*req, body.substr(body.size() / 2));
  }
  return 0;
}
