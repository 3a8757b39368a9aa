// The OpenAI Responses API (`POST /v1/responses`, what Codex and the newer
// OpenAI SDKs call) on top of the chat machinery: a Responses request becomes
// a chat-completions request (request.h validates it, chat_format.h builds the
// prompt and parses the output into reasoning / text / DSML tool calls), and
// the parsed output becomes Responses output items and stream events.
//
//   POST   /v1/responses                     create (stream: the SSE event sequence)
//   GET    /v1/responses/{id}                a stored response
//   DELETE /v1/responses/{id}                forget it
//   GET    /v1/responses/{id}/input_items    the input it ran on (order, limit, after)
//
// Input items -> chat messages: `message` items (roles user / system /
// developer / assistant; input_text / output_text parts) keep their role;
// `reasoning`, assistant `message` and `function_call` items in a row make one
// assistant message (reasoning_content, content, tool_calls); a
// `function_call_output` is a "tool" message. `instructions` is a system
// message in front, and is not carried over by `previous_response_id`.
// Output: a `reasoning` item (content: the thinking text as reasoning_text;
// also as summary_text when `reasoning.summary` asks for a summary: dsv4 does
// not summarize), a `message` item with one output_text part, and one
// `function_call` item per DSML tool call, in the order the model wrote them.
//
// Errors use OpenAI's error shape with `param` naming the field (the quoted
// name a request.h message starts with). Stored responses: responses_store.h.
// Used by server.cc; tested by tests/server/responses_test.cc and
// tests/integration/test_responses.py; fuzzed by
// tests/server/fuzz_responses_request.cc.
#ifndef DSV4_SERVER_RESPONSES_API_H_
#define DSV4_SERVER_RESPONSES_API_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/chat_format.h"
#include "server/request.h"
#include "server/responses_store.h"
#include "server/structured_output.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_output_parser.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dsv4 {
class Engine;
}

namespace dsv4::server {

class HttpServer;

// A POST /v1/responses body, validated; the conversation's history (from
// previous_response_id) is added by BuildGenerationRequest.
struct ResponsesRequest {
  nlohmann::ordered_json chat;   // the chat-completions body it runs as, "messages" left out
  nlohmann::ordered_json input;  // this request's input as items (a string: one user message)
  std::string instructions;
  std::string previous_response_id;
  bool store = true;
  bool stream = false;
  bool reasoning_summary = false;    // reasoning.summary given: the thinking text as summary too
  bool encrypted_reasoning = false;  // include: reasoning.encrypted_content
  nlohmann::ordered_json echo;       // what the response object repeats of the request
};

// Validates a body. InvalidArgument naming the field ('input[2].call_id' ...);
// Unimplemented for valid but unsupported fields (hosted tools, text.format
// json_schema, background, ...); NotFound for a model that is not served.
Result<ResponsesRequest> ParseResponsesRequest(const nlohmann::ordered_json& body,
                                               const RequestLimits& limits);

// Chat messages for normalized `items` (history + input), with the
// instructions as a system message first (when non-empty).
Result<nlohmann::ordered_json> ItemsToChatMessages(const nlohmann::ordered_json& items,
                                                   const std::string& instructions);

// The chat request `request` runs as over `items` (history + its input).
Result<GenerationRequest> BuildGenerationRequest(const ResponsesRequest& request,
                                                 const nlohmann::ordered_json& items,
                                                 const RequestLimits& limits);

// Gives every item without an "id" one (msg_, fc_, fco_, rs_ + random).
void AssignItemIds(nlohmann::ordered_json& items);

// The `param` of an error: the field a request.h / responses message starts
// with in quotes ("'input[0].role' is ..." -> "input[0].role"), else "".
std::string ErrorParam(const Status& status);

// Builds a response's output items from the parsed output as it streams, and
// the stream events that go with them (without "sequence_number", which the
// writer adds). The same builder serves streaming and non-streaming requests,
// so both give the same items.
class ResponseOutputBuilder {
 public:
  // `summary`: the thinking text also as a summary_text part;
  // `encrypted`: and as encrypted_content (include reasoning.encrypted_content).
  ResponseOutputBuilder(bool summary, bool encrypted);
  // Applies one parser delta (reasoning, then content, then tool calls).
  std::vector<nlohmann::ordered_json> Push(const Dsv4OutputDelta& delta);
  // Ends the open item with `status` ("completed" or "incomplete").
  std::vector<nlohmann::ordered_json> Finish(const std::string& status);
  // The output items so far.
  const nlohmann::ordered_json& output() const { return output_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kFunctionCall };
  void Close(const std::string& status, std::vector<nlohmann::ordered_json>* events);
  void Open(Kind kind, const std::string& name, std::vector<nlohmann::ordered_json>* events);

  bool summary_;
  bool encrypted_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  Kind open_ = Kind::kNone;
  std::string text_;  // the open item's text: reasoning, message text or arguments
};

// Usage in the Responses shape.
nlohmann::ordered_json ResponsesUsage(int64_t input_tokens, int64_t cached_tokens,
                                      int64_t output_tokens, int64_t reasoning_tokens);

// What the HTTP routes need from the server.
struct ResponsesContext {
  Engine* engine = nullptr;
  HttpServer* http = nullptr;  // draining state
  RequestLimits limits;
  ChatFormat format = ChatFormat::kPlain;
  std::string model_id;
  bool allow_special_in_content = false;
  // The token texts for tool_choice constraints, built once on first use.
  std::function<std::shared_ptr<const TokenTexts>()> token_texts;
  // text.format json_object / json_schema: the JSON constraint.
  StructuredConstraintFn structured;
  size_t store_max_count = 1000;
  size_t store_max_bytes = size_t{256} << 20;
};

class ResponsesApi {
 public:
  explicit ResponsesApi(ResponsesContext context);
  ~ResponsesApi();
  // Registers the routes above.
  void Routes(httplib::Server& http);

  ResponseStore& store() { return store_; }

 private:
  void Create(const httplib::Request& req, httplib::Response& res);
  void InputItems(const httplib::Request& req, httplib::Response& res);

  ResponsesContext ctx_;
  ResponseStore store_;
};

}  // namespace dsv4::server

#endif  // DSV4_SERVER_RESPONSES_API_H_
