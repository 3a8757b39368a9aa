// The Ollama API's pure parts (server/ollama_api.h): request validation (one
// test per bad input, checking which error and the field it names), what
// good requests turn into (defaults, options, messages, think, context), and
// the formatting helpers (parameter sizes, timestamps, tool calls, routes).
#include "server/ollama_api.h"

#include <gtest/gtest.h>

#include <chrono>

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;

OllamaModel Model(bool dsv4 = true) {
  OllamaModel m;
  m.limits.model_id = "m";
  m.limits.ctx_size = 512;
  m.limits.max_stop = 4;
  m.limits.max_stop_bytes = 16;
  m.limits.max_top_logprobs = 20;
  m.vocab_size = 1000;
  m.tools = dsv4;
  m.thinking = dsv4;
  return m;
}

Result<OllamaRequest> Parse(OllamaEndpoint endpoint, std::string_view body, bool dsv4 = true) {
  Result<Json> j = ParseJsonBody(body);
  if (!j.ok()) return j.status();
  return ParseOllamaRequest(endpoint, *j, Model(dsv4));
}

Result<OllamaRequest> Chat(std::string_view body, bool dsv4 = true) {
  return Parse(OllamaEndpoint::kChat, body, dsv4);
}
Result<OllamaRequest> Gen(std::string_view body) { return Parse(OllamaEndpoint::kGenerate, body); }

// The status code of `r`, and its message must contain `needle`.
void ExpectError(const Result<OllamaRequest>& r, StatusCode code, std::string_view needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(OllamaRequest, ChatDefaults) {
  auto r = Chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->gen.stream);  // Ollama streams by default
  EXPECT_FALSE(r->load_only);
  EXPECT_FALSE(r->gen.thinking);
  EXPECT_EQ(r->gen.max_tokens, -1);
  EXPECT_FALSE(r->gen.has_seed);
  EXPECT_EQ(r->gen.top_logprobs, -1);
  EXPECT_FLOAT_EQ(r->gen.sampling.temperature, 0.8f);
  EXPECT_EQ(r->gen.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->gen.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->gen.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r->gen.sampling.repeat_penalty, 1.0f);
  EXPECT_EQ(r->gen.messages, Json::parse(R"([{"role": "user", "content": "hi"}])"));
}

TEST(OllamaRequest, ModelWithLatestTag) {
  EXPECT_TRUE(Chat(R"({"model": "m:latest", "messages": []})").ok());
  ExpectError(Chat(R"({"model": "m:7b", "messages": []})"), StatusCode::kNotFound,
              "model \"m:7b\" not found, try pulling it first");
}

TEST(OllamaRequest, UnknownModelIs404InOllamasWords) {
  ExpectError(Chat(R"({"model": "llama3", "messages": []})"), StatusCode::kNotFound,
              "model \"llama3\" not found, try pulling it first");
}

TEST(OllamaRequest, MissingModel) {
  ExpectError(Chat(R"({"messages": []})"), StatusCode::kInvalidArgument, "model is required");
  ExpectError(Chat(R"({"model": 3})"), StatusCode::kInvalidArgument, "'model'");
}

TEST(OllamaRequest, NoMessagesOnlyLoads) {
  auto r = Chat(R"({"model": "m"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->load_only);
  auto g = Gen(R"({"model": "m", "prompt": ""})");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->load_only);
}

TEST(OllamaRequest, Options) {
  auto r = Chat(R"({"model": "m", "messages": [], "stream": false, "options": {
      "temperature": 0.2, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 42,
      "num_predict": 9, "stop": ["a", "", "b"], "repeat_penalty": 1.2, "repeat_last_n": -1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "num_ctx": 100,
      "num_gpu": 3, "mirostat": 0, "unknown_option": {"x": 1}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SamplingParams& s = r->gen.sampling;
  EXPECT_FALSE(r->gen.stream);
  EXPECT_FLOAT_EQ(s.temperature, 0.2f);
  EXPECT_FLOAT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.top_k, 7);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_TRUE(r->gen.has_seed);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(r->gen.max_tokens, 9);
  EXPECT_EQ(r->gen.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FLOAT_EQ(s.repeat_penalty, 1.2f);
  EXPECT_EQ(s.repeat_last_n, kMaxRepeatLastN);  // -1: the context (bounded by the caller)
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_EQ(r->num_ctx, 100);
}

TEST(OllamaRequest, OptionEdgeValues) {
  // A negative seed is Ollama's "random"; -1 / -2 num_predict: no limit;
  // integers given with a fraction are truncated (as Ollama's Go decoding);
  // a num_ctx at or over the server's is the server's.
  auto r = Chat(R"({"model": "m", "messages": [], "options": {"seed": -1, "num_predict": -2,
      "top_k": 3.9, "num_ctx": 100000, "top_p": 0}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->gen.has_seed);
  EXPECT_EQ(r->gen.max_tokens, -1);
  EXPECT_EQ(r->gen.sampling.top_k, 3);
  EXPECT_EQ(r->num_ctx, 0);
  EXPECT_GT(r->gen.sampling.top_p, 0.0f);  // 0: only the most likely token
  auto big = Chat(R"({"model": "m", "messages": [], "options": {"num_predict": 100000}})");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->gen.max_tokens, 512);  // the context bounds it anyway
}

TEST(OllamaRequest, OptionTypeErrorsInOllamasWords) {
  ExpectError(Chat(R"({"model": "m", "options": {"temperature": "hot"}})"),
              StatusCode::kInvalidArgument, "option \"temperature\" must be of type float32");
  ExpectError(Chat(R"({"model": "m", "options": {"seed": true}})"), StatusCode::kInvalidArgument,
              "option \"seed\" must be of type integer");
  ExpectError(Chat(R"({"model": "m", "options": {"use_mmap": 1}})"), StatusCode::kInvalidArgument,
              "option \"use_mmap\" must be of type boolean");
  ExpectError(Chat(R"({"model": "m", "options": {"stop": "x"}})"), StatusCode::kInvalidArgument,
              "option \"stop\" must be of type array");
  ExpectError(Chat(R"({"model": "m", "options": {"stop": [1]}})"), StatusCode::kInvalidArgument,
              "option \"stop\" must be of an array of strings");
  ExpectError(Chat(R"({"model": "m", "options": "x"})"), StatusCode::kInvalidArgument, "'options'");
}

TEST(OllamaRequest, OptionRangeErrors) {
  ExpectError(Chat(R"({"model": "m", "options": {"top_p": 1.5}})"), StatusCode::kInvalidArgument,
              "option \"top_p\"");
  ExpectError(Chat(R"({"model": "m", "options": {"min_p": -1}})"), StatusCode::kInvalidArgument,
              "option \"min_p\"");
  ExpectError(Chat(R"({"model": "m", "options": {"num_predict": 0}})"),
              StatusCode::kInvalidArgument, "option \"num_predict\"");
  ExpectError(Chat(R"({"model": "m", "options": {"num_predict": -3}})"),
              StatusCode::kInvalidArgument, "option \"num_predict\"");
  ExpectError(Chat(R"({"model": "m", "options": {"repeat_last_n": -5}})"),
              StatusCode::kInvalidArgument, "option \"repeat_last_n\"");
  ExpectError(Chat(R"({"model": "m", "options": {"repeat_penalty": 0}})"),
              StatusCode::kInvalidArgument, "repeat_penalty");
  ExpectError(Chat(R"({"model": "m", "options": {"stop": ["a", "b", "c", "d", "e"]}})"),
              StatusCode::kInvalidArgument, "option \"stop\" has 5 entries");
  ExpectError(Chat(R"({"model": "m", "options": {"stop": ["0123456789abcdefg"]}})"),
              StatusCode::kInvalidArgument, "17 bytes");
}

TEST(OllamaRequest, UnimplementedFieldsAreNamed) {
  EXPECT_EQ(Chat(R"({"model": "m", "format": "json"})")->gen.response_format,
            ResponseFormat::kJsonObject);
  const auto schema = Chat(R"({"model": "m", "format": {"type": "object"}})");
  ASSERT_TRUE(schema.ok());
  EXPECT_EQ(schema->gen.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(schema->gen.json_schema, nlohmann::ordered_json({{"type", "object"}}));
  ExpectError(Chat(R"({"model": "m", "format": "yaml"})"), StatusCode::kInvalidArgument,
              "'format'");
  ExpectError(Chat(R"({"model": "m", "format": 3})"), StatusCode::kInvalidArgument, "'format'");
  EXPECT_TRUE(Chat(R"({"model": "m", "format": ""})").ok());
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "suffix": "y"})"), StatusCode::kUnimplemented,
              "'suffix'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "template": "t"})"), StatusCode::kUnimplemented,
              "'template'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "images": ["aGk="]})"),
              StatusCode::kUnimplemented, "'images'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x",
      "images": ["aGk="]}]})"),
              StatusCode::kUnimplemented, "'messages[0].images'");
  // Empty ones are no request for anything.
  EXPECT_TRUE(
      Gen(R"({"model": "m", "prompt": "x", "suffix": "", "template": "", "images": []})").ok());
}

TEST(OllamaRequest, KeepAliveAndStream) {
  EXPECT_TRUE(Chat(R"({"model": "m", "keep_alive": "5m"})").ok());
  EXPECT_TRUE(Chat(R"({"model": "m", "keep_alive": -1})").ok());
  ExpectError(Chat(R"({"model": "m", "keep_alive": {}})"), StatusCode::kInvalidArgument,
              "'keep_alive'");
  ExpectError(Chat(R"({"model": "m", "stream": 1})"), StatusCode::kInvalidArgument, "'stream'");
}

TEST(OllamaRequest, Think) {
  auto on = Chat(R"({"model": "m", "messages": [], "think": true})");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->gen.thinking);
  EXPECT_EQ(on->gen.reasoning_effort, Dsv4ReasoningEffort::kDefault);
  for (const char* level : {"low", "medium", "high"}) {
    auto r = Chat(std::string(R"({"model": "m", "messages": [], "think": ")") + level + "\"}");
    ASSERT_TRUE(r.ok()) << level;
    EXPECT_TRUE(r->gen.thinking);
    EXPECT_EQ(r->gen.reasoning_effort, Dsv4ReasoningEffort::kHigh);
  }
  auto off = Chat(R"({"model": "m", "messages": [], "think": false})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->gen.thinking);
  ExpectError(Chat(R"({"model": "m", "think": "max"})"), StatusCode::kInvalidArgument,
              "invalid think value: \"max\"");
  ExpectError(Chat(R"({"model": "m", "think": 1})"), StatusCode::kInvalidArgument,
              "invalid think value: 1");
  ExpectError(Chat(R"({"model": "m", "think": true})", /*dsv4=*/false),
              StatusCode::kInvalidArgument, "\"m\" does not support thinking");
  EXPECT_TRUE(Chat(R"({"model": "m", "think": false})", /*dsv4=*/false).ok());
}

TEST(OllamaRequest, MessagesBecomeOpenAIShape) {
  auto r = Chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "thinking": "look it up",
       "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Json& m = r->gen.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], Json::parse(R"({"role": "system", "content": "be brief"})"));
  EXPECT_EQ(m[2]["reasoning_content"], "look it up");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "get_weather");
  EXPECT_EQ(m[3]["content"], "sunny");
}

TEST(OllamaRequest, BadMessages) {
  ExpectError(Chat(R"({"model": "m", "messages": {}})"), StatusCode::kInvalidArgument,
              "'messages'");
  ExpectError(Chat(R"({"model": "m", "messages": [3]})"), StatusCode::kInvalidArgument,
              "'messages[0]'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"content": "x"}]})"),
              StatusCode::kInvalidArgument, "'messages[0].role'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "developer", "content": "x"}]})"),
              StatusCode::kInvalidArgument, "'messages[0].role'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "user", "content": ["x"]}]})"),
              StatusCode::kInvalidArgument, "'messages[0].content'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "assistant", "thinking": 1}]})"),
              StatusCode::kInvalidArgument, "'messages[0].thinking'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]})"),
              StatusCode::kInvalidArgument, "'messages[0].tool_calls'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "assistant",
      "tool_calls": [{"function": {"arguments": {}}}]}]})"),
              StatusCode::kInvalidArgument, "'messages[0].tool_calls[0].function.name'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "assistant",
      "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}]})"),
              StatusCode::kInvalidArgument, "'messages[0].tool_calls[0].function.arguments'");
  ExpectError(Chat(R"({"model": "m", "messages": [{"role": "tool", "content": "x",
      "tool_name": 5}]})"),
              StatusCode::kInvalidArgument, "'messages[0].tool_name'");
}

TEST(OllamaRequest, Tools) {
  auto r = Chat(R"({"model": "m", "messages": [], "tools": [{"type": "function",
      "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gen.tools.size(), 1u);
  ExpectError(Chat(R"({"model": "m", "tools": [{"type": "function", "function": {}}]})"),
              StatusCode::kInvalidArgument, "'tools[0].function.name'");
  ExpectError(Chat(R"({"model": "m", "tools": [{"type": "retrieval"}]})"),
              StatusCode::kInvalidArgument, "'tools[0].type'");
  ExpectError(Chat(R"({"model": "m", "tools": [{"type": "function",
      "function": {"name": "f"}}]})",
                   /*dsv4=*/false),
              StatusCode::kInvalidArgument, "\"m\" does not support tools");
}

TEST(OllamaRequest, Logprobs) {
  auto r = Gen(R"({"model": "m", "prompt": "x", "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->gen.top_logprobs, 3);
  auto off = Gen(R"({"model": "m", "prompt": "x", "top_logprobs": 3})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->gen.top_logprobs, -1);
  ExpectError(Gen(R"({"model": "m", "logprobs": true, "top_logprobs": 21})"),
              StatusCode::kInvalidArgument, "top_logprobs must be between 0 and 20");
  ExpectError(Gen(R"({"model": "m", "logprobs": "yes"})"), StatusCode::kInvalidArgument,
              "'logprobs'");
}

TEST(OllamaRequest, GenerateBuildsMessages) {
  auto r = Gen(R"({"model": "m", "prompt": "hi", "system": "be brief"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gen.messages, Json::parse(R"([{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": "hi"}])"));
  EXPECT_FALSE(r->raw);
}

TEST(OllamaRequest, GenerateRaw) {
  auto r = Gen(R"({"model": "m", "prompt": "<x>hi", "raw": true, "system": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->raw);
  EXPECT_EQ(r->prompt, "<x>hi");
  EXPECT_TRUE(r->gen.messages.empty());
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "raw": "yes"})"), StatusCode::kInvalidArgument,
              "'raw'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "raw": true, "think": true})"),
              StatusCode::kInvalidArgument, "'think'");
}

TEST(OllamaRequest, GenerateContext) {
  auto r = Gen(R"({"model": "m", "prompt": "x", "context": [0, 5, 999]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->context, (std::vector<int32_t>{0, 5, 999}));
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "context": [1000]})"),
              StatusCode::kInvalidArgument, "'context[0]'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "context": [1, -1]})"),
              StatusCode::kInvalidArgument, "'context[1]'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "context": [1.5]})"),
              StatusCode::kInvalidArgument, "'context[0]'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "context": {}})"), StatusCode::kInvalidArgument,
              "'context'");
  std::string long_context = R"({"model": "m", "prompt": "x", "context": [0)";
  for (int i = 1; i < 512; ++i) long_context += ",0";
  ExpectError(Gen(long_context + "]}"), StatusCode::kInvalidArgument, "'context' holds 512");
}

TEST(OllamaRequest, GenerateFieldTypes) {
  ExpectError(Gen(R"({"model": "m", "prompt": 3})"), StatusCode::kInvalidArgument, "'prompt'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "system": []})"), StatusCode::kInvalidArgument,
              "'system'");
  ExpectError(Gen(R"({"model": "m", "prompt": "x", "images": "a"})"), StatusCode::kInvalidArgument,
              "'images'");
}

TEST(OllamaModelMatches, Names) {
  EXPECT_TRUE(OllamaModelMatches("m", "m"));
  EXPECT_TRUE(OllamaModelMatches("m:latest", "m"));
  EXPECT_FALSE(OllamaModelMatches("m:latest", "m:7b"));
  EXPECT_TRUE(OllamaModelMatches("m:7b", "m:7b"));
  EXPECT_FALSE(OllamaModelMatches("m:", "m"));
  EXPECT_FALSE(OllamaModelMatches("", "m"));
  EXPECT_FALSE(OllamaModelMatches("mm:latest", "m"));
}

TEST(OllamaParameterSize, AsOllamaWritesThem) {
  EXPECT_EQ(OllamaParameterSize(0), "0");
  EXPECT_EQ(OllamaParameterSize(999), "999");
  EXPECT_EQ(OllamaParameterSize(260'130), "260K");
  EXPECT_EQ(OllamaParameterSize(1'500), "1.5K");
  EXPECT_EQ(OllamaParameterSize(8'030'261'248), "8.03B");
  EXPECT_EQ(OllamaParameterSize(13'400'000'000), "13.4B");
  EXPECT_EQ(OllamaParameterSize(671'026'419'712), "671B");
  EXPECT_EQ(OllamaParameterSize(7'000'000'000), "7B");
  EXPECT_EQ(OllamaParameterSize(1'600'000'000'000), "1.6T");
}

TEST(OllamaTimestamp, Rfc3339WithNanoseconds) {
  const auto t = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(1714566896) + std::chrono::nanoseconds(123456789)));
  const std::string s = OllamaTimestamp(t);
  // system_clock may count in coarser units than nanoseconds.
  EXPECT_EQ(s.substr(0, 23), "2024-05-01T12:34:56.123");
  EXPECT_EQ(s.size(), 30u);
  EXPECT_EQ(s.back(), 'Z');
  EXPECT_EQ(OllamaTimestamp(std::chrono::system_clock::time_point{}),
            "1970-01-01T00:00:00.000000000Z");
}

TEST(OllamaToolCalls, ArgumentsAsObjects) {
  const std::vector<Dsv4ToolCall> calls = {{"get_weather", R"({"city": "Paris", "days": 3})"},
                                           {"broken", "not json"}};
  const Json out = OllamaToolCalls(calls, {"call_a", "call_b"});
  EXPECT_EQ(out, Json::parse(R"([
      {"id": "call_a", "function": {"index": 0, "name": "get_weather",
                                    "arguments": {"city": "Paris", "days": 3}}},
      {"id": "call_b", "function": {"index": 1, "name": "broken", "arguments": {}}}])"));
}

TEST(OllamaDoneReason, StopAndLength) {
  EXPECT_STREQ(OllamaDoneReason(FinishReason::kStop), "stop");
  EXPECT_STREQ(OllamaDoneReason(FinishReason::kLength), "length");
}

TEST(OllamaPaths, ErrorsAndRoutes) {
  EXPECT_EQ(OllamaErrorBody("bad \"x\""), R"({"error":"bad \"x\""})");
  EXPECT_TRUE(IsOllamaPath("/api/chat"));
  EXPECT_TRUE(IsOllamaPath("/api/pull"));
  EXPECT_FALSE(IsOllamaPath("/v1/chat/completions"));
  EXPECT_FALSE(IsOllamaPath("/apis"));
  EXPECT_EQ(OllamaRoute("/api/generate"), "/api/generate");
  EXPECT_EQ(OllamaRoute("/api/pull"), "");
}

}  // namespace
}  // namespace dsv4::server
