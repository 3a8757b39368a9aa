// The Ollama API of `dsv4 serve` (https://github.com/ollama/ollama/blob/main/docs/api.md),
// for desktop tools that speak only Ollama's:
//   POST /api/chat       chat (messages, tools, think), NDJSON stream by default
//   POST /api/generate   one prompt (system, raw, context), NDJSON stream by default
//   GET  /api/tags       the served model, as Ollama lists local models
//   POST /api/show       its details, model_info and capabilities
//   GET  /api/ps         the served model, as Ollama lists loaded ones
//   GET  /api/version    the Ollama API version this follows
// Requests become the same GenerationRequest as the OpenAI and Anthropic
// routes (request.h), so prompts (chat_format.h), output parsing (reasoning,
// DSML tool calls) and scheduling (engine/engine.h) are theirs. Errors are
// Ollama's {"error": "..."}: 400 bad request, 404 unknown model (Ollama's
// `model "x" not found, try pulling it first`), 401 bad or missing API key
// (server.cc checks it as for every route), 503 when the server is full or
// shutting down, 500 when the model fails (mid-stream: an {"error": ...}
// line, as Ollama sends). A client that disconnects cancels its sequence.
//
// Not here: the other APIs and route-independent checks (server.cc).
#ifndef DSV4_SERVER_OLLAMA_API_H_
#define DSV4_SERVER_OLLAMA_API_H_

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "server/chat_format.h"
#include "server/http_server.h"
#include "server/request.h"
#include "server/structured_output.h"
#include "tokenizer/chat_output_parser.h"

namespace dsv4::server {

enum class OllamaEndpoint {
  kChat,      // POST /api/chat
  kGenerate,  // POST /api/generate
};

// What the served model offers, for validating a request against it.
struct OllamaModel {
  RequestLimits limits;       // model_id, ctx_size, stop and logprobs limits
  int64_t vocab_size = 0;     // context token ids must be below it
  bool tools = false;         // DSML tool calls (the DeepSeek-V4 chat format)
  bool thinking = false;      // a thinking mode (the DeepSeek-V4 chat format)
  bool has_tokenizer = true;  // false: text prompts cannot be tokenized
};

// An Ollama chat or generate request, validated.
struct OllamaRequest {
  OllamaEndpoint endpoint = OllamaEndpoint::kChat;
  // messages (OpenAI shape), tools, thinking, sampling, stop, max_tokens,
  // stream, top_logprobs: what the shared prompt builder and engine read.
  GenerationRequest gen;
  // Neither messages nor a prompt: Ollama only loads the model and answers
  // done_reason "load" at once.
  bool load_only = false;
  bool raw = false;              // generate: the prompt is tokenized as it is, no template
  std::string prompt;            // generate, raw: the prompt text
  std::vector<int32_t> context;  // generate: a previous response's `context` (token ids)
  int64_t num_ctx = 0;           // options.num_ctx; 0: the server's context
};

// Whether `model` names the served model: the same name, or the name with
// Ollama's default tag (":latest") when the served name has no tag.
bool OllamaModelMatches(std::string_view model, std::string_view served);

// Validates a parsed body. InvalidArgument (400) names the field (or the
// option: `option "x" must be of type integer`, as Ollama words it);
// Unimplemented (400) names a field this server does not implement (`format`,
// `images`, `suffix`, `template`); NotFound (404) for another model, worded as
// Ollama's (`model "x" not found, try pulling it first`). Unknown fields and
// options are ignored, as Ollama does.
Result<OllamaRequest> ParseOllamaRequest(OllamaEndpoint endpoint,
                                         const nlohmann::ordered_json& body,
                                         const OllamaModel& model);

// {"error": message}.
std::string OllamaErrorBody(std::string_view message);
// Whether `path` belongs to the Ollama API (its errors take Ollama's shape).
bool IsOllamaPath(std::string_view path);
// The metrics label of an Ollama route, "" when `path` is none of them.
std::string OllamaRoute(std::string_view path);

// A parameter count as Ollama writes it: "260.13K", "8.03B", "671B" (three
// significant digits at most, trailing zeros dropped).
std::string OllamaParameterSize(int64_t n_params);
// RFC 3339 in UTC with nanoseconds, as Ollama's created_at:
// "2024-05-01T12:34:56.123456789Z".
std::string OllamaTimestamp(std::chrono::system_clock::time_point t);
// "stop" or "length" (the engine's finish reasons other than those are not
// answers: cancelled requests have no reader, errors become an error line).
const char* OllamaDoneReason(FinishReason reason);
// Parsed tool calls as Ollama's message.tool_calls: {"id", "function":
// {"index", "name", "arguments": an object}}. Arguments that do not parse as
// a JSON object (never, from the DSML parser) become {}.
nlohmann::ordered_json OllamaToolCalls(const std::vector<Dsv4ToolCall>& calls,
                                       const std::vector<std::string>& ids);

// What the Ollama routes need from the server.
struct OllamaServing {
  Engine* engine = nullptr;
  HttpServer* http = nullptr;
  std::string model_id;
  ChatFormat format = ChatFormat::kPlain;
  RequestLimits limits;
  bool allow_special_in_content = false;
  int64_t started = 0;                // Unix time the server started (modified_at)
  StructuredConstraintFn structured;  // `format`: the JSON constraint
};

// Registers the routes above on `http`. `serving.engine` and `serving.http`
// must outlive the server.
void AddOllamaRoutes(HttpServer& http, const OllamaServing& serving);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_OLLAMA_API_H_
