// Request parsing and validation for the HTTP APIs: OpenAI chat completions,
// OpenAI (legacy) completions and Anthropic messages all become one
// GenerationRequest, which the server turns into a prompt and engine
// sequences. Every field a client can send is type- and range-checked here;
// errors are InvalidArgument (HTTP 400) naming the field, NotFound (404) for a
// model that is not served, Unimplemented (400) for valid but unsupported
// features. Unknown fields are ignored, as the official APIs' clients send
// fields a server may not know.
//
// Anthropic messages are converted to the OpenAI message shape (tool_use ->
// tool_calls, tool_result -> role "tool", thinking -> reasoning_content) so
// one chat encoder serves both APIs. OpenAI's legacy function calling maps the
// same way: `functions` -> function tools, `function_call` ("none", "auto",
// {"name"}) -> tool_choice, an assistant message's `function_call` -> one
// tool call, a role "function" message -> a role "tool" message.
//
// Used by server.cc; tested by tests/server/request_test.cc; fuzzed by
// tests/fuzz/fuzz_server_request.cc.
#ifndef DSV4_SERVER_REQUEST_H_
#define DSV4_SERVER_REQUEST_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4::server {

enum class Api {
  kChat,        // POST /v1/chat/completions
  kCompletion,  // POST /v1/completions
  kMessages,    // POST /v1/messages (Anthropic)
};

// What the server allows; set from the command line.
struct RequestLimits {
  std::string model_id;      // the one served model's name
  int max_n = 8;             // choices per request
  int64_t ctx_size = 4096;   // max_tokens above this is rejected
  int max_stop = 16;         // stop strings per request
  int max_stop_bytes = 256;  // bytes per stop string (bounds the per-token matching)
  int max_top_logprobs = 20;
};

// Structured output (response_format / output_config.format).
enum class ResponseFormat {
  kText,        // free text (the default)
  kJsonObject,  // any JSON object
  kJsonSchema,  // JSON valid for `json_schema`
};

struct GenerationRequest {
  Api api = Api::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  int64_t max_tokens = -1;  // -1: not given (up to the context)
  SamplingParams sampling;  // OpenAI defaults (temperature 1, others off)
  bool has_seed = false;
  std::vector<std::string> stop;
  int top_logprobs = -1;       // -1: no logprobs; else the chosen token + this many
  bool tokens_as_ids = false;  // return_tokens_as_token_ids (vLLM): "token_id:N"
  // Chat and messages.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI shape
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();     // OpenAI shape
  std::string tool_choice = "auto";  // auto | none | required | function
  std::string tool_choice_name;      // tool_choice == "function"
  bool parallel_tool_calls = true;   // false: at most one call (OpenAI parallel_tool_calls,
                                     // Anthropic tool_choice.disable_parallel_tool_use)
  // The request used OpenAI's legacy `functions` (mapped to `tools`,
  // `function_call` to `tool_choice`): the response answers in the legacy
  // shape, `message.function_call` (the first call) and finish_reason
  // "function_call".
  bool legacy_functions = false;
  bool thinking = false;  // DeepSeek-V4 thinking mode
  Dsv4ReasoningEffort reasoning_effort = Dsv4ReasoningEffort::kDefault;
  // DeepSeek-V4.1's numeric reasoning effort, 1..100 (0: not given, the
  // encoding's default, high = 75): `reasoning_effort` low / minimal -> 50,
  // medium / high -> 75, max / xhigh -> 100, or an integer 1..100.
  int reasoning_budget = 0;
  ResponseFormat response_format = ResponseFormat::kText;
  nlohmann::ordered_json json_schema;  // kJsonSchema: the schema (not yet compiled)
  // Completions: one text or token-id prompt per entry.
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;
};

// Deepest nesting of arrays/objects a body may have.
inline constexpr int kMaxJsonDepth = 128;

// Parses the JSON body text. Malformed JSON, ill-formed UTF-8 (including
// escaped lone surrogates) or nesting deeper than kMaxJsonDepth is
// InvalidArgument with the byte offset.
Result<nlohmann::ordered_json> ParseJsonBody(std::string_view body);

// Validates a parsed body for `api` against `limits`.
Result<GenerationRequest> ParseRequest(Api api, const nlohmann::ordered_json& body,
                                       const RequestLimits& limits);

// Validates OpenAI-shaped function tools (`key`: the field's name in errors):
// {"type": "function", "function": {"name", "description", "parameters"}}.
Status ValidateTools(const nlohmann::ordered_json& tools, const std::string& key);

// A message's content as text: a string, null (""), or an array of text parts
// ({"type": "text", "text": ...}); `where` names it in errors.
Result<std::string> ContentText(const nlohmann::ordered_json& content, const std::string& where);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_REQUEST_H_
