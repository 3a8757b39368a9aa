// libFuzzer target for the HTTP request parsers (server/request.h): the bytes
// as a request body for each API (first byte picks the API). Whatever the
// input, parsing returns a Status or a request; an accepted chat request
// either builds a well-formed UTF-8 prompt in both chat formats or fails with
// a Status. Seeds: tests/server/fuzz_corpus/server_request.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "server/chat_format.h"
#include "server/request.h"
#include "tokenizer/utf8.h"

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
    for (ChatFormat f : {ChatFormat::kDsv4, ChatFormat::kPlain}) {
      auto prompt = BuildChatPrompt(*req, f);
      if (prompt.ok()) CHECK(dsv4::utf8::IsValid(*prompt));
    }
  }
  return 0;
}
