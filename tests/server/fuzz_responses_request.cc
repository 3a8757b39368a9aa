// libFuzzer target for the Responses API request parser and output builder
// (server/responses_api.h). The bytes up to the first NUL are a request body;
// whatever they are, parsing returns a Status or a request, an accepted
// request's items become chat messages and a prompt (well-formed UTF-8) or a
// Status. The bytes after the NUL are model output: fed in pieces through the
// DeepSeek-V4 output parser into ResponseOutputBuilder, every item that is
// added is done once, and no item is left in progress. Seeds:
// tests/server/fuzz_corpus/responses_request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "server/chat_format.h"
#include "server/responses_api.h"
#include "tokenizer/chat_output_parser.h"
#include "tokenizer/utf8.h"

namespace {

using namespace dsv4;
using namespace dsv4::server;

void DriveBuilder(std::string_view text, bool thinking) {
  Dsv4OutputParser parser(thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat);
  ResponseOutputBuilder builder(/*summary=*/true, /*encrypted=*/false);
  int added = 0;
  int done = 0;
  const auto count = [&](const auto& events) {
    for (const auto& e : events) {
      added += e["type"] == "response.output_item.added";
      done += e["type"] == "response.output_item.done";
    }
  };
  // Pieces of 1..8 bytes, cut where UTF-8 characters end (as the stream decoder does).
  size_t i = 0;
  while (i < text.size()) {
    size_t n = 1 + static_cast<unsigned char>(text[i]) % 8;
    n = std::min(n, text.size() - i);
    while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    count(builder.Push(parser.Push(text.substr(i, n))));
    i += n;
  }
  count(builder.Push(parser.Finish()));
  count(builder.Finish("completed"));
  CHECK(added == done);
  CHECK(static_cast<int>(builder.output().size()) == added);
  for (const auto& item : builder.output()) CHECK(item.value("status", "") != "in_progress");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view body = all.substr(0, nul);
  const std::string_view output = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  bool thinking = false;
  auto json = ParseJsonBody(body);
  if (json.ok()) {
    RequestLimits limits;
    limits.model_id = "m";
    auto req = ParseResponsesRequest(*json, limits);
    if (req.ok()) {
      AssignItemIds(req->input);
      auto gen = BuildGenerationRequest(*req, req->input, limits);
      if (gen.ok()) {
        thinking = gen->thinking;
        for (ChatFormat f : {ChatFormat::kDsv4, ChatFormat::kDsv41, ChatFormat::kPlain}) {
          auto prompt = BuildChatPrompt(*gen, f);
          if (prompt.ok()) CHECK(utf8::IsValid(prompt->text));
        }
      }
    }
  }
  if (utf8::IsValid(output)) DriveBuilder(output, thinking);
  return 0;
}
