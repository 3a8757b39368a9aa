// Request parsing and validation (server/request.h): every bad-input case the
// HTTP APIs must answer with a 4xx, one test each, plus what good requests
// turn into (defaults, Anthropic -> OpenAI message conversion, prompts).
#include "server/request.h"

#include <gtest/gtest.h>

#include "server/chat_format.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;

RequestLimits Limits() {
  RequestLimits l;
  l.model_id = "m";
  l.max_n = 4;
  l.ctx_size = 512;
  l.max_stop = 4;
  return l;
}

Result<GenerationRequest> Parse(Api api, std::string_view body) {
  Result<Json> j = ParseJsonBody(body);
  if (!j.ok()) return j.status();
  return ParseRequest(api, *j, Limits());
}

// The status code of parsing `body`, and its message must name `field`.
void ExpectError(Api api, std::string_view body, StatusCode code, std::string_view field) {
  Result<GenerationRequest> r = Parse(api, body);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().ToString();
}

constexpr std::string_view kChatOk =
    R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})";

TEST(ParseJsonBody, MalformedJson) {
  auto r = ParseJsonBody(R"({"model": "m", )");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos);
}

TEST(ParseJsonBody, InvalidUtf8) {
  auto r = ParseJsonBody("{\"model\": \"m\xff\xfe\"}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseJsonBody, LoneSurrogateEscape) {
  auto r = ParseJsonBody(R"({"model": "\ud800"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseJsonBody, NumberOverflow) {
  // Found by fuzz_server_request: nlohmann throws out_of_range, not parse_error.
  auto r = ParseJsonBody(R"({"max_tokens": 1e99999})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseJsonBody, NestingTooDeep) {
  // 200,000 nested arrays would overflow the stack when copied or dumped.
  const std::string deep =
      R"({"model": "m", "x": )" + std::string(200000, '[') + std::string(200000, ']') + "}";
  auto r = ParseJsonBody(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deeper than 128"), std::string::npos)
      << r.status().ToString();
  // Brackets inside strings (escaped quotes too) do not count; 128 levels pass.
  const std::string ok = R"({"s": "[[[[\"[[[[", "x": )" + std::string(kMaxJsonDepth - 1, '[') +
                         std::string(kMaxJsonDepth - 1, ']') + "}";
  EXPECT_TRUE(ParseJsonBody(ok).ok()) << ParseJsonBody(ok).status().ToString();
}

TEST(ParseRequest, ParallelToolCallsFlags) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
    "parallel_tool_calls": false})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->parallel_tool_calls);
  r = Parse(Api::kMessages, R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->parallel_tool_calls);
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
    "parallel_tool_calls": "no"})",
              StatusCode::kInvalidArgument, "'parallel_tool_calls'");
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "a<b"}}]})",
              StatusCode::kInvalidArgument, "'tools[0].function.name'");
}

TEST(ParseJsonBody, NotAnObject) {
  auto r = ParseJsonBody("[1, 2]");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must be a JSON object"), std::string::npos);
}

TEST(ParseRequest, ChatDefaults) {
  auto r = Parse(Api::kChat, kChatOk);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->max_tokens, -1);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->has_seed);
  EXPECT_EQ(r->top_logprobs, -1);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.0f);
  EXPECT_FALSE(r->thinking);
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0]["content"], "hi");
}

TEST(ParseRequest, ChatAllFields) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [
      {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "reasoning_content": "r",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "presence_penalty": 1,
    "frequency_penalty": -1, "seed": -3, "stop": ["x", "y"], "max_completion_tokens": 7,
    "logprobs": true, "top_logprobs": 3, "n": 2, "stream": true,
    "stream_options": {"include_usage": true}, "reasoning_effort": "max"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0]["content"], "be brief");
  EXPECT_EQ(r->messages[2]["content"], "");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(r->messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(r->tool_choice, "function");
  EXPECT_EQ(r->tool_choice_name, "f");
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_EQ(r->sampling.top_k, 5);
  EXPECT_EQ(r->sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_TRUE(r->has_seed);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(r->n, 2);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(r->reasoning_effort, Dsv4ReasoningEffort::kMax);
}

TEST(ParseRequest, TokensAsIds) {
  auto r = Parse(Api::kCompletion,
                 R"({"model": "m", "prompt": [1], "return_tokens_as_token_ids": true})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tokens_as_ids);
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": [1], "return_tokens_as_token_ids": 1})",
              StatusCode::kInvalidArgument, "'return_tokens_as_token_ids'");
}

TEST(ParseRequest, ToolChoiceNoneDropsTools) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tools.empty());
}

TEST(ParseRequest, MissingModel) {
  ExpectError(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})",
              StatusCode::kInvalidArgument, "'model' is required");
}

TEST(ParseRequest, UnknownModel) {
  ExpectError(Api::kChat, R"({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})",
              StatusCode::kNotFound, "gpt-4");
}

TEST(ParseRequest, ModelNotAString) {
  ExpectError(Api::kChat, R"({"model": 3, "messages": [{"role": "user", "content": "hi"}]})",
              StatusCode::kInvalidArgument, "'model' must be a string");
}

TEST(ParseRequest, MissingMessages) {
  ExpectError(Api::kChat, R"({"model": "m"})", StatusCode::kInvalidArgument, "'messages'");
}

TEST(ParseRequest, EmptyMessages) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": []})", StatusCode::kInvalidArgument,
              "must not be empty");
}

TEST(ParseRequest, MessagesNotAnArray) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": "hi"})", StatusCode::kInvalidArgument,
              "'messages' must be an array");
}

TEST(ParseRequest, MessageNotAnObject) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": ["hi"]})", StatusCode::kInvalidArgument,
              "'messages[0]' must be an object");
}

TEST(ParseRequest, RolelessMessage) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"content": "hi"}]})",
              StatusCode::kInvalidArgument, "'messages[0].role' is required");
}

TEST(ParseRequest, UnknownRole) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]})",
              StatusCode::kInvalidArgument, "'messages[0].role'");
}

TEST(ParseRequest, MissingContent) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user"}]})",
              StatusCode::kInvalidArgument, "'messages[0].content' is required");
}

TEST(ParseRequest, ContentWrongType) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": 5}]})",
              StatusCode::kInvalidArgument, "'messages[0].content'");
}

TEST(ParseRequest, ImageContentUnsupported) {
  ExpectError(
      Api::kChat,
      R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
      StatusCode::kUnimplemented, "image_url");
}

TEST(ParseRequest, ToolMessageWithoutId) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "tool", "content": "1"}]})",
              StatusCode::kInvalidArgument, "tool_call_id");
}

TEST(ParseRequest, ToolCallsNotAnArray) {
  ExpectError(
      Api::kChat,
      R"({"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": {}}]})",
      StatusCode::kInvalidArgument, "tool_calls");
}

TEST(ParseRequest, ToolSchemaNotAnObject) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": "string"}}]})",
              StatusCode::kInvalidArgument,
              "'tools[0].function.parameters' must be a JSON Schema object");
}

TEST(ParseRequest, ToolNotAFunction) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "retrieval"}]})",
              StatusCode::kInvalidArgument, "'tools[0].type'");
}

TEST(ParseRequest, ToolWithoutName) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"parameters": {}}}]})",
              StatusCode::kInvalidArgument, "'tools[0].function.name'");
}

TEST(ParseRequest, ToolsNotAnArray) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": {}})",
              StatusCode::kInvalidArgument, "'tools' must be an array");
}

TEST(ParseRequest, ToolChoiceUnknownTool) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "tool_choice": {"type": "function", "function": {"name": "g"}}})",
              StatusCode::kInvalidArgument, "'tool_choice'");
}

TEST(ParseRequest, NegativeMaxTokens) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": -1})",
              StatusCode::kInvalidArgument, "'max_tokens'");
}

TEST(ParseRequest, HugeMaxTokens) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 1000000000000})",
              StatusCode::kInvalidArgument, "'max_tokens'");
}

TEST(ParseRequest, MaxTokensNotAnInteger) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 1.5})",
              StatusCode::kInvalidArgument, "'max_tokens' must be an integer");
}

TEST(ParseRequest, MaxCompletionTokensAboveContext) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "max_completion_tokens": 513})",
              StatusCode::kInvalidArgument, "'max_completion_tokens'");
}

TEST(ParseRequest, NAboveLimit) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "n": 5})",
              StatusCode::kInvalidArgument, "'n'");
}

TEST(ParseRequest, NZero) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "n": 0})",
              StatusCode::kInvalidArgument, "'n'");
}

TEST(ParseRequest, TemperatureWrongType) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "temperature": "hot"})",
              StatusCode::kInvalidArgument, "'temperature' must be a number");
}

TEST(ParseRequest, TemperatureOutOfRange) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "temperature": 3})",
              StatusCode::kInvalidArgument, "'temperature'");
}

TEST(ParseRequest, TopPOutOfRange) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "top_p": 1.5})",
              StatusCode::kInvalidArgument, "'top_p'");
}

TEST(ParseRequest, PresencePenaltyOutOfRange) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "presence_penalty": -3})",
              StatusCode::kInvalidArgument, "'presence_penalty'");
}

TEST(ParseRequest, SeedNotAnInteger) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "seed": "x"})",
              StatusCode::kInvalidArgument, "'seed'");
}

TEST(ParseRequest, StopWrongType) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "stop": 5})",
              StatusCode::kInvalidArgument, "'stop'");
}

TEST(ParseRequest, TooManyStops) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "stop": ["a", "b", "c", "d", "e"]})",
              StatusCode::kInvalidArgument, "'stop'");
}

TEST(ParseRequest, OverlongStopString) {
  const std::string long_stop(257, 'x');
  ExpectError(Api::kChat,
              R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": [")" +
                  long_stop + R"("]})",
              StatusCode::kInvalidArgument, "'stop[0]'");
  ExpectError(Api::kMessages,
              R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                  "stop_sequences": [")" +
                  long_stop + R"("]})",
              StatusCode::kInvalidArgument, "'stop_sequences[0]'");
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": "a", "stop": ")" + long_stop + R"("})",
              StatusCode::kInvalidArgument, "'stop'");
}

TEST(ParseRequest, EmptyStopString) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "stop": [""]})",
              StatusCode::kInvalidArgument, "'stop[0]'");
}

TEST(ParseRequest, TopLogprobsWithoutLogprobs) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "top_logprobs": 2})",
              StatusCode::kInvalidArgument, "'top_logprobs'");
}

TEST(ParseRequest, TopLogprobsTooMany) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "logprobs": true, "top_logprobs": 21})",
              StatusCode::kInvalidArgument, "'top_logprobs'");
}

TEST(ParseRequest, StreamNotABoolean) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "stream": "yes"})",
              StatusCode::kInvalidArgument, "'stream' must be a boolean");
}

TEST(ParseRequest, StreamOptionsWithoutStream) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "stream_options": {"include_usage": true}})",
              StatusCode::kInvalidArgument, "'stream_options'");
}

TEST(ParseRequest, BadReasoningEffort) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "reasoning_effort": "extreme"})",
              StatusCode::kInvalidArgument, "'reasoning_effort'");
}

TEST(ParseRequest, BadThinkingType) {
  ExpectError(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
    "thinking": {"type": "maybe"}})",
              StatusCode::kInvalidArgument, "'thinking.type'");
}

TEST(ParseRequest, AdaptiveThinkingIsTheThinkingMode) {
  auto r = Parse(Api::kMessages, R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "adaptive"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->thinking);
  r = Parse(Api::kMessages, R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->thinking);
}

TEST(ParseRequest, CompletionPrompts) {
  auto r = Parse(Api::kCompletion, R"({"model": "m", "prompt": ["a", "b"], "n": 2})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->max_tokens, 16);  // the OpenAI default
  auto ids = Parse(Api::kCompletion, R"({"model": "m", "prompt": [1, 2, 3], "logprobs": 2})");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->prompt_ids.size(), 1u);
  EXPECT_EQ(ids->prompt_ids[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids->top_logprobs, 2);
}

TEST(ParseRequest, CompletionMissingPrompt) {
  ExpectError(Api::kCompletion, R"({"model": "m"})", StatusCode::kInvalidArgument, "'prompt'");
}

TEST(ParseRequest, CompletionBadTokenIds) {
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": [1, -2]})",
              StatusCode::kInvalidArgument, "'prompt'");
}

TEST(ParseRequest, CompletionTooManyChoices) {
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": ["a", "b", "c"], "n": 2})",
              StatusCode::kInvalidArgument, "at most 4");
}

TEST(ParseRequest, CompletionEchoUnsupported) {
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": "a", "echo": true})",
              StatusCode::kUnimplemented, "'echo'");
}

TEST(ParseRequest, CompletionLogprobsAboveFive) {
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": "a", "logprobs": 6})",
              StatusCode::kInvalidArgument, "'logprobs'");
}

TEST(ParseRequest, MessagesConversion) {
  auto r = Parse(Api::kMessages, R"({"model": "m", "max_tokens": 10, "system": "sys",
    "thinking": {"type": "enabled", "budget_tokens": 100},
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": ""},
        {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}],
    "tools": [{"name": "w", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any"}, "stop_sequences": ["END"], "top_k": 3})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0], Json({{"role", "system"}, {"content", "sys"}}));
  EXPECT_EQ(r->messages[2]["reasoning_content"], "hmm");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["name"], "w");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(r->messages[3], Json({{"role", "tool"}, {"tool_call_id", "t1"}, {"content", "sunny"}}));
  EXPECT_EQ(r->tools[0]["function"]["parameters"], Json({{"type", "object"}}));
  EXPECT_EQ(r->tool_choice, "required");
  EXPECT_TRUE(r->parallel_tool_calls);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r->sampling.top_k, 3);
  EXPECT_TRUE(r->thinking);
  EXPECT_EQ(r->max_tokens, 10);
}

TEST(ParseRequest, MessagesMissingMaxTokens) {
  ExpectError(Api::kMessages, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})",
              StatusCode::kInvalidArgument, "'max_tokens' is required");
}

TEST(ParseRequest, MessagesSystemRoleInMessages) {
  ExpectError(
      Api::kMessages,
      R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]})",
      StatusCode::kInvalidArgument, "'messages[0].role'");
}

TEST(ParseRequest, MessagesToolSchemaNotAnObject) {
  ExpectError(Api::kMessages, R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "w", "input_schema": []}]})",
              StatusCode::kInvalidArgument, "'tools[0].input_schema'");
}

TEST(ParseRequest, MessagesTemperatureAboveOne) {
  ExpectError(Api::kMessages, R"({"model": "m", "max_tokens": 5, "temperature": 1.5,
    "messages": [{"role": "user", "content": "hi"}]})",
              StatusCode::kInvalidArgument, "'temperature'");
}

TEST(ParseRequest, MessagesUnknownBlockType) {
  ExpectError(Api::kMessages, R"({"model": "m", "max_tokens": 5,
    "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
              StatusCode::kUnimplemented, "image");
}

TEST(ChatFormat, PlainJoinsContents) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "system", "content": "a"},
    {"role": "user", "content": "b"}]})");
  ASSERT_TRUE(r.ok());
  auto text = BuildChatPrompt(*r, ChatFormat::kPlain);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->text, "a\nb");
}

TEST(ChatFormat, PlainRejectsTools) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "b"}],
    "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_TRUE(r.ok());
  auto text = BuildChatPrompt(*r, ChatFormat::kPlain);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("'tools'"), std::string::npos);
}

TEST(ChatFormat, Dsv4ThinkingAndChatEndings) {
  auto r = Parse(Api::kChat, kChatOk);
  ASSERT_TRUE(r.ok());
  auto chat = BuildChatPrompt(*r, ChatFormat::kDsv4);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->text, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  r->thinking = true;
  auto think = BuildChatPrompt(*r, ChatFormat::kDsv4);
  ASSERT_TRUE(think.ok());
  EXPECT_TRUE(think->text.ends_with("<｜Assistant｜><think>"));
}

TEST(ChatFormat, Dsv4BadToolArgumentsIsAnError) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
      "function": {"name": "f", "arguments": "[1]"}}]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto text = BuildChatPrompt(*r, ChatFormat::kDsv4);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
}

TEST(ChoiceOutput, ParsesReasoningAndToolCalls) {
  ChoiceOutput out(/*parse=*/true, /*thinking=*/true);
  std::string reasoning, content;
  for (std::string_view piece :
       {"I should", " call.</think>", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n",
        "<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n",
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"}) {
    Dsv4OutputDelta d = out.Push(piece);
    reasoning += d.reasoning;
    content += d.content;
  }
  out.Finish();
  EXPECT_EQ(reasoning, "I should call.");
  EXPECT_EQ(out.result().reasoning_content, "I should call.");
  EXPECT_EQ(out.result().content, "");
  ASSERT_EQ(out.result().tool_calls.size(), 1u);
  EXPECT_EQ(out.result().tool_calls[0].name, "f");
  EXPECT_EQ(out.result().tool_calls[0].arguments, R"({"x": 1})");
}

TEST(ChoiceOutput, PlainPassesTextThrough) {
  ChoiceOutput out(/*parse=*/false, /*thinking=*/false);
  EXPECT_EQ(out.Push("a</think>").content, "a</think>");
  out.Finish();
  EXPECT_EQ(out.result().content, "a</think>");
}

// logit_bias: {"id": amount in [-100, 100]} into the sampling parameters.
TEST(ParseRequest, LogitBias) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                 "logit_bias": {"17": -100, "3": 2.5}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
  r = Parse(Api::kCompletion, R"({"model": "m", "prompt": "x", "logit_bias": {"5": 1}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.logit_bias.size(), 1u);
  ExpectError(Api::kChat,
              R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                  "logit_bias": {"abc": 1}})",
              StatusCode::kInvalidArgument, "logit_bias");
  ExpectError(Api::kChat,
              R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                  "logit_bias": {"-4": 1}})",
              StatusCode::kInvalidArgument, "logit_bias");
  ExpectError(Api::kChat,
              R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                  "logit_bias": {"4": 101}})",
              StatusCode::kInvalidArgument, "logit_bias[\"4\"]");
  ExpectError(Api::kChat,
              R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                  "logit_bias": [1, 2]})",
              StatusCode::kInvalidArgument, "logit_bias");
}

// Fields the server does not implement are refused by name (400), never
// answered with free text.
TEST(ParseRequest, UnimplementedFieldsAreRefusedByName) {
  const std::string chat = R"("model": "m", "messages": [{"role": "user", "content": "hi"}])";
  const std::pair<std::string, std::string> cases[] = {
      {R"("audio": {"voice": "alloy", "format": "wav"})", "audio"},
      {R"("modalities": ["text", "audio"])", "modalities"},
  };
  for (const auto& [field, name] : cases) {
    ExpectError(Api::kChat, "{" + chat + ", " + field + "}", StatusCode::kUnimplemented, name);
  }
  EXPECT_TRUE(Parse(Api::kChat, "{" + chat + R"(, "response_format": {"type": "text"},
                                               "modalities": ["text"]})")
                  .ok());
}

// Structured output: response_format (chat, completions) and Anthropic's
// output_config.format; the schema is kept for the server to compile.
TEST(ParseRequest, ResponseFormat) {
  const std::string chat = R"("model": "m", "messages": [{"role": "user", "content": "hi"}])";
  Result<GenerationRequest> r =
      Parse(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonObject);
  r = Parse(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "strict": true, "schema": {"type": "object"}}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r->json_schema.dump(), R"({"type":"object"})");
  r = Parse(Api::kCompletion,
            R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonObject);
  r = Parse(Api::kMessages,
            R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "integer"}}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r->json_schema.dump(), R"({"type":"integer"})");
  EXPECT_EQ(Parse(Api::kChat, "{" + chat + "}")->response_format, ResponseFormat::kText);

  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {}})", StatusCode::kInvalidArgument,
              "response_format.type");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": "json"})",
              StatusCode::kInvalidArgument, "response_format");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {"type": "xml"}})",
              StatusCode::kInvalidArgument, "not \"xml\"");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema"}})",
              StatusCode::kInvalidArgument, "response_format.json_schema");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema",
                  "json_schema": {"schema": {}}}})",
              StatusCode::kInvalidArgument, "response_format.json_schema.name");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema",
                  "json_schema": {"name": "x", "schema": 5}}})",
              StatusCode::kInvalidArgument, "response_format.json_schema.schema");
  ExpectError(Api::kChat, "{" + chat + R"(, "response_format": {"type": "json_schema",
                  "json_schema": {"name": "x", "strict": "yes"}}})",
              StatusCode::kInvalidArgument, "response_format.json_schema.strict");
  const std::string msgs =
      R"("model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}])";
  ExpectError(Api::kMessages, "{" + msgs + R"(, "output_config": {"format": {"type": "text"}}})",
              StatusCode::kInvalidArgument, "output_config.format.type");
  ExpectError(Api::kMessages,
              "{" + msgs + R"(, "output_config": {"format": {"type": "json_schema"}}})",
              StatusCode::kInvalidArgument, "output_config.format.schema");
  ExpectError(Api::kMessages, "{" + msgs + R"(, "output_config": 3})", StatusCode::kInvalidArgument,
              "output_config");
}

// ---- OpenAI's legacy function calling ----

// The error names `field` first: "'field' ...".
void ExpectErrorAt(std::string_view body, std::string_view field) {
  Result<GenerationRequest> r = Parse(Api::kChat, body);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_TRUE(r.status().message().starts_with("'" + std::string(field) + "' "))
      << field << ": " << r.status().ToString();
}

constexpr std::string_view kUserHi =
    R"("model": "m", "messages": [{"role": "user", "content": "hi"}])";
constexpr std::string_view kFunctions =
    R"("functions": [{"name": "f", "description": "d", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}}, {"name": "g"}])";

std::string Body(std::string_view extra) {
  return "{" + std::string(kUserHi) + (extra.empty() ? "" : ", ") + std::string(extra) + "}";
}

TEST(LegacyFunctions, FunctionsBecomeTools) {
  Result<GenerationRequest> r = Parse(Api::kChat, Body(kFunctions));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->legacy_functions);
  EXPECT_FALSE(r->parallel_tool_calls);  // the legacy shape holds one call
  EXPECT_EQ(r->tool_choice, "auto");
  ASSERT_EQ(r->tools.size(), 2u);
  EXPECT_EQ(r->tools[0], Json::parse(R"({"type": "function", "function": {"name": "f",
      "description": "d", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}}, "required": ["a"]}}})"));
  EXPECT_EQ(r->tools[1], Json::parse(R"({"type": "function", "function": {"name": "g"}})"));
  // Without `functions` the response keeps the tools shape.
  r = Parse(Api::kChat, Body(R"("tools": [{"type": "function", "function": {"name": "f"}}])"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->legacy_functions);
}

TEST(LegacyFunctions, FunctionCallBecomesToolChoice) {
  Result<GenerationRequest> r =
      Parse(Api::kChat, Body(std::string(kFunctions) + R"(, "function_call": {"name": "f"})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tool_choice, "function");
  EXPECT_EQ(r->tool_choice_name, "f");
  r = Parse(Api::kChat, Body(std::string(kFunctions) + R"(, "function_call": "auto")"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice, "auto");
  EXPECT_EQ(r->tools.size(), 2u);
  r = Parse(Api::kChat, Body(std::string(kFunctions) + R"(, "function_call": "none")"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice, "none");
  EXPECT_TRUE(r->tools.empty());  // none: not rendered, as tool_choice none
  // "none" / "auto" without functions is what they are by default.
  r = Parse(Api::kChat, Body(R"("function_call": "none")"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice, "none");
  EXPECT_FALSE(r->legacy_functions);
}

TEST(LegacyFunctions, MixingWithToolsIsRefused) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  ExpectErrorAt(Body(std::string(kFunctions) + ", " + tools), "functions");
  ExpectErrorAt(
      Body(std::string(kFunctions) + R"(, "function_call": "auto", "tool_choice": "auto")"),
      "function_call");
  ExpectErrorAt(Body(tools + R"(, "function_call": {"name": "f"})"), "function_call");
  ExpectErrorAt(Body(tools + R"(, "function_call": "auto")"), "function_call");
  // tool_choice that forces a call has no tools to force with `functions`.
  ExpectErrorAt(Body(std::string(kFunctions) + R"(, "tool_choice": "required")"), "tool_choice");
}

TEST(LegacyFunctions, BadFunctionsAreRefusedByField) {
  ExpectErrorAt(Body(R"("functions": {"name": "f"})"), "functions");
  ExpectErrorAt(Body(R"("functions": [])"), "functions");
  ExpectErrorAt(Body(R"("functions": ["f"])"), "functions[0]");
  ExpectErrorAt(Body(R"("functions": [{"name": "f"}, {"parameters": {}}])"), "functions[1].name");
  ExpectErrorAt(Body(R"("functions": [{"name": ""}])"), "functions[0].name");
  ExpectErrorAt(Body(R"("functions": [{"name": "a<b"}])"), "functions[0].name");
  ExpectErrorAt(Body(R"("functions": [{"name": "f", "description": 1}])"),
                "functions[0].description");
  ExpectErrorAt(Body(R"("functions": [{"name": "f", "parameters": "object"}])"),
                "functions[0].parameters");
}

TEST(LegacyFunctions, BadFunctionCallIsRefusedByField) {
  const std::string f(kFunctions);
  ExpectErrorAt(Body(f + R"(, "function_call": "required")"), "function_call");
  ExpectErrorAt(Body(f + R"(, "function_call": 3)"), "function_call");
  ExpectErrorAt(Body(f + R"(, "function_call": {"name": 3})"), "function_call.name");
  ExpectErrorAt(Body(f + R"(, "function_call": {})"), "function_call.name");
  ExpectErrorAt(Body(f + R"(, "function_call": {"name": "h"})"), "function_call");
  ExpectErrorAt(Body(R"("function_call": {"name": "f"})"), "function_call");
}

TEST(LegacyFunctions, CompletionsRefuseThem) {
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": "x", "functions": [{"name": "f"}]})",
              StatusCode::kUnimplemented, "'functions'");
  ExpectError(Api::kCompletion, R"({"model": "m", "prompt": "x", "function_call": "auto"})",
              StatusCode::kUnimplemented, "'function_call'");
}

TEST(LegacyFunctions, HistoryBecomesToolCallsAndResults) {
  Result<GenerationRequest> r = Parse(Api::kChat, R"({"model": "m", "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null,
       "function_call": {"name": "f", "arguments": "{\"a\": 1}"}},
      {"role": "function", "name": "f", "content": "sunny"},
      {"role": "assistant", "function_call": {"name": "g"}},
      {"role": "function", "name": "g", "content": null}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 5u);
  EXPECT_EQ(r->messages[1], Json::parse(R"({"role": "assistant", "content": "",
      "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})"));
  EXPECT_EQ(r->messages[2], Json::parse(R"({"role": "tool", "content": "sunny",
      "tool_call_id": "call_1"})"));
  EXPECT_EQ(r->messages[3]["tool_calls"][0]["function"],
            Json::parse(R"({"name": "g", "arguments": "{}"})"));
  EXPECT_EQ(r->messages[4], Json::parse(R"({"role": "tool", "content": "",
      "tool_call_id": "call_3"})"));
  // The DeepSeek-V4 prompt shows the call and its result.
  Result<ChatPrompt> prompt = BuildChatPrompt(*r, ChatFormat::kDsv4);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_NE(prompt->text.find(R"(invoke name="f")"), std::string::npos) << prompt->text;
  EXPECT_NE(prompt->text.find(R"(parameter name="a" string="false">1<)"), std::string::npos)
      << prompt->text;
  EXPECT_NE(prompt->text.find("sunny"), std::string::npos) << prompt->text;
  // A result with no call before it still gets an id.
  r = Parse(Api::kChat, R"({"model": "m", "messages": [
      {"role": "function", "name": "f", "content": "x"}, {"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0]["tool_call_id"], "call_0");
}

TEST(LegacyFunctions, PlainFormatRefusesThemByTheirName) {
  Result<GenerationRequest> r = Parse(Api::kChat, Body(kFunctions));
  ASSERT_TRUE(r.ok());
  Result<ChatPrompt> prompt = BuildChatPrompt(*r, ChatFormat::kPlain);
  ASSERT_FALSE(prompt.ok());
  EXPECT_TRUE(prompt.status().message().starts_with("'functions' is not supported by this model"))
      << prompt.status().ToString();
}

TEST(LegacyFunctions, BadHistoryIsRefusedByField) {
  const auto with = [](std::string_view msg) {
    return R"({"model": "m", "messages": [{"role": "user", "content": "hi"}, )" + std::string(msg) +
           "]}";
  };
  ExpectErrorAt(with(R"({"role": "function", "content": "x"})"), "messages[1].name");
  ExpectErrorAt(with(R"({"role": "function", "name": 1, "content": "x"})"), "messages[1].name");
  ExpectErrorAt(with(R"({"role": "function", "name": "f"})"), "messages[1].content");
  ExpectErrorAt(with(R"({"role": "assistant", "function_call": "f"})"),
                "messages[1].function_call");
  ExpectErrorAt(with(R"({"role": "assistant", "function_call": {"arguments": "{}"}})"),
                "messages[1].function_call.name");
  ExpectErrorAt(with(R"({"role": "assistant", "function_call": {"name": "f", "arguments": 1}})"),
                "messages[1].function_call.arguments");
  ExpectErrorAt(with(R"({"role": "assistant", "function_call": {"name": "f"},
                         "tool_calls": [{"id": "c", "type": "function",
                                         "function": {"name": "f", "arguments": "{}"}}]})"),
                "messages[1].function_call");
}

}  // namespace
}  // namespace dsv4::server

namespace dsv4::server {
namespace {

// DeepSeek-V4.1's numeric reasoning effort: OpenAI levels map onto it, an
// integer 1..100 passes through; out of range is a 400 naming the field.
TEST(ParseRequest, ReasoningEffortV41Budget) {
  const std::pair<const char*, int> cases[] = {
      {"\"low\"", 50},  {"\"minimal\"", 50}, {"\"medium\"", 75}, {"\"high\"", 75},
      {"\"max\"", 100}, {"\"xhigh\"", 100},  {"1", 1},           {"42", 42}};
  for (const auto& [value, budget] : cases) {
    auto r = Parse(Api::kChat,
                   std::string(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],)"
                               R"( "reasoning_effort": )") +
                       value + "}");
    ASSERT_TRUE(r.ok()) << value << ": " << r.status().ToString();
    EXPECT_EQ(r->reasoning_budget, budget) << value;
    EXPECT_TRUE(r->thinking);
  }
  for (const char* bad : {"0", "101", "-3", "2.5", "true"}) {
    ExpectError(Api::kChat,
                std::string(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],)"
                            R"( "reasoning_effort": )") +
                    bad + "}",
                StatusCode::kInvalidArgument, "'reasoning_effort'");
  }
}

TEST(ParseRequest, ImageContentNamesWhereAndHints) {
  auto r = Parse(Api::kChat, R"({"model": "m", "messages": [{"role": "user", "content": [)"
                             R"({"type": "text", "text": "see"}, {"type": "image_url"}]}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[0].content[1].type"), std::string::npos);
  EXPECT_NE(r.status().hint().find("no image input"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
