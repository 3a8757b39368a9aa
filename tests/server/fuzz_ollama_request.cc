// libFuzzer target for the Ollama request parser (server/ollama_api.h): the
// bytes as a request body for /api/chat or /api/generate (the first byte's
// low bit picks which; its second bit whether the model has the DeepSeek-V4
// chat format). Whatever the input, parsing returns a Status or a request
// whose fields are in range; an accepted request that is not load-only builds
// a well-formed UTF-8 prompt in both chat formats or fails with a Status.
// Seeds: tests/server/fuzz_corpus/ollama_request.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "server/chat_format.h"
#include "server/ollama_api.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv4;
  using namespace dsv4::server;
  if (size == 0) return 0;
  const OllamaEndpoint endpoint =
      (data[0] & 1) != 0 ? OllamaEndpoint::kGenerate : OllamaEndpoint::kChat;
  const bool dsv4 = (data[0] & 2) != 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto json = ParseJsonBody(body);
  if (!json.ok()) return 0;
  OllamaModel model;
  model.limits.model_id = "m";
  model.vocab_size = 1000;
  model.tools = dsv4;
  model.thinking = dsv4;
  auto req = ParseOllamaRequest(endpoint, *json, model);
  if (!req.ok()) return 0;
  const GenerationRequest& g = req->gen;
  CHECK(g.max_tokens == -1 || (g.max_tokens >= 1 && g.max_tokens <= model.limits.ctx_size));
  CHECK(req->num_ctx >= 0 && req->num_ctx < model.limits.ctx_size);
  CHECK(g.top_logprobs >= -1 && g.top_logprobs <= model.limits.max_top_logprobs);
  CHECK(static_cast<int>(g.stop.size()) <= model.limits.max_stop);
  CHECK(ValidateSamplingParams(g.sampling).ok());
  CHECK(dsv4 || (!g.thinking && g.tools.empty()));
  for (int32_t id : req->context) CHECK(id >= 0 && id < model.vocab_size);
  if (!req->load_only && !req->raw) {
    for (ChatFormat f : {ChatFormat::kDsv4, ChatFormat::kDsv41, ChatFormat::kPlain}) {
      auto prompt = BuildChatPrompt(g, f);
      if (prompt.ok()) CHECK(utf8::IsValid(prompt->text));
    }
  }
  return 0;
}
