// The Responses API's pure parts (server/responses_api.h, responses_store.h):
// request validation (which error, which param), input items -> chat
// messages, the output items and stream events built from parser deltas, and
// the bounded LRU store.
#include "server/responses_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/responses_store.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;

RequestLimits Limits() {
  RequestLimits l;
  l.model_id = "m";
  l.ctx_size = 512;
  return l;
}

Result<ResponsesRequest> Parse(std::string_view body) {
  Result<Json> j = ParseJsonBody(body);
  if (!j.ok()) return j.status();
  return ParseResponsesRequest(*j, Limits());
}

// Parsing `body` fails with `code`, and the error's param is `param`.
void ExpectError(std::string_view body, StatusCode code, const std::string& param) {
  Result<ResponsesRequest> r = Parse(body);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_EQ(ErrorParam(r.status()), param) << r.status().ToString();
}

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
  Result<ResponsesRequest> r = Parse(R"({"model": "m", "input": "hi"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->input.size(), 1u);
  EXPECT_EQ(r->input[0]["type"], "message");
  EXPECT_EQ(r->input[0]["role"], "user");
  EXPECT_EQ(r->input[0]["content"][0], (Json{{"type", "input_text"}, {"text", "hi"}}));
  EXPECT_TRUE(r->store);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->echo["tool_choice"], "auto");
  EXPECT_EQ(r->echo["tools"], Json::array());
  EXPECT_EQ(r->echo["text"]["format"]["type"], "text");
}

TEST(ResponsesRequest, FieldsMapToChat) {
  Result<ResponsesRequest> r = Parse(R"({"model": "m", "input": "hi", "store": false,
      "max_output_tokens": 7, "temperature": 0.5, "stop": ["x"],
      "reasoning": {"effort": "high", "summary": "auto"},
      "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"},
                 "strict": true}],
      "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false,
      "include": ["reasoning.encrypted_content"], "metadata": {"a": "b"},
      "previous_response_id": "resp_1", "instructions": "be brief"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->store);
  EXPECT_TRUE(r->reasoning_summary);
  EXPECT_TRUE(r->encrypted_reasoning);
  EXPECT_EQ(r->previous_response_id, "resp_1");
  EXPECT_EQ(r->instructions, "be brief");
  EXPECT_EQ(r->chat["max_tokens"], 7);
  EXPECT_EQ(r->chat["reasoning_effort"], "high");
  EXPECT_EQ(r->chat["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(r->chat["tool_choice"]["function"]["name"], "f");
  EXPECT_EQ(r->echo["tools"][0]["strict"], true);
  EXPECT_EQ(r->echo["metadata"]["a"], "b");

  Result<GenerationRequest> g = BuildGenerationRequest(*r, r->input, Limits());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->thinking);
  EXPECT_EQ(g->max_tokens, 7);
  EXPECT_FLOAT_EQ(g->sampling.temperature, 0.5f);
  EXPECT_EQ(g->stop, std::vector<std::string>{"x"});
  EXPECT_EQ(g->tool_choice, "function");
  EXPECT_EQ(g->tool_choice_name, "f");
  EXPECT_FALSE(g->parallel_tool_calls);
  ASSERT_EQ(g->messages.size(), 2u);
  EXPECT_EQ(g->messages[0], (Json{{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(g->messages[1]["content"], "hi");
}

TEST(ResponsesRequest, NoEffortNoThinking) {
  Result<ResponsesRequest> r = Parse(R"({"model": "m", "input": "hi"})");
  ASSERT_TRUE(r.ok());
  Result<GenerationRequest> g = BuildGenerationRequest(*r, r->input, Limits());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->thinking);
  EXPECT_EQ(g->max_tokens, -1);
}

TEST(ResponsesRequest, BadInputNamesTheParam) {
  using C = StatusCode;
  ExpectError(R"({"input": "x"})", C::kInvalidArgument, "model");
  ExpectError(R"({"model": "m"})", C::kInvalidArgument, "input");
  ExpectError(R"({"model": "m", "input": 3})", C::kInvalidArgument, "input");
  ExpectError(R"({"model": "m", "input": [3]})", C::kInvalidArgument, "input[0]");
  ExpectError(R"({"model": "m", "input": [{"content": "x"}]})", C::kInvalidArgument,
              "input[0].role");
  ExpectError(R"({"model": "m", "input": [{"role": "tool", "content": "x"}]})", C::kInvalidArgument,
              "input[0].role");
  ExpectError(R"({"model": "m", "input": [{"role": "user"}]})", C::kInvalidArgument,
              "input[0].content");
  ExpectError(R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]})",
              C::kInvalidArgument, "input[0].content[0].text");
  ExpectError(R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})",
              C::kUnimplemented, "input[0].content[0].type");
  ExpectError(R"({"model": "m", "input": [{"type": "function_call", "name": "f",
                  "arguments": "{}"}]})",
              C::kInvalidArgument, "input[0].call_id");
  ExpectError(R"({"model": "m", "input": [{"type": "function_call", "call_id": "c",
                  "name": "a<b", "arguments": "{}"}]})",
              C::kInvalidArgument, "input[0].name");
  ExpectError(R"({"model": "m", "input": [{"type": "function_call", "call_id": "c",
                  "name": "f", "arguments": "3"}]})",
              C::kInvalidArgument, "input[0].arguments");
  ExpectError(R"({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]})",
              C::kInvalidArgument, "input[0].output");
  ExpectError(R"({"model": "m", "input": [{"type": "reasoning", "summary": [{"x": 1}]}]})",
              C::kInvalidArgument, "input[0].summary[0].text");
  ExpectError(R"({"model": "m", "input": [{"type": "item_reference", "id": "x"}]})",
              C::kUnimplemented, "input[0].type");
  ExpectError(R"({"model": "m", "input": "x", "tools": {}})", C::kInvalidArgument, "tools");
  ExpectError(R"({"model": "m", "input": "x", "tools": [{"type": "file_search"}]})",
              C::kUnimplemented, "tools[0].type");
  ExpectError(R"({"model": "m", "input": "x", "tools": [{"type": "function"}]})",
              C::kInvalidArgument, "tools[0].name");
  ExpectError(R"({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f",
                  "parameters": []}]})",
              C::kInvalidArgument, "tools[0].parameters");
  ExpectError(R"({"model": "m", "input": "x", "tool_choice": "any"})", C::kInvalidArgument,
              "tool_choice");
  ExpectError(R"({"model": "m", "input": "x", "tool_choice": {"type": "web_search_preview"}})",
              C::kUnimplemented, "tool_choice.type");
  ExpectError(R"({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}})",
              C::kInvalidArgument, "text.format.schema");
  ExpectError(R"({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}})",
              C::kInvalidArgument, "text.format.type");
  ExpectError(R"({"model": "m", "input": "x", "reasoning": {"summary": "long"}})",
              C::kInvalidArgument, "reasoning.summary");
  ExpectError(R"({"model": "m", "input": "x", "include": ["file_search_call.results"]})",
              C::kUnimplemented, "include[0]");
  ExpectError(R"({"model": "m", "input": "x", "max_output_tokens": 513})", C::kInvalidArgument,
              "max_output_tokens");
  ExpectError(R"({"model": "m", "input": "x", "max_output_tokens": -1})", C::kInvalidArgument,
              "max_output_tokens");
  ExpectError(R"({"model": "m", "input": "x", "max_output_tokens": 1.5})", C::kInvalidArgument,
              "max_output_tokens");
  ExpectError(R"({"model": "m", "input": "x", "top_p": 2})", C::kInvalidArgument, "top_p");
  ExpectError(R"({"model": "m", "input": "x", "store": "yes"})", C::kInvalidArgument, "store");
  ExpectError(R"({"model": "m", "input": "x", "stream_options": {}})", C::kInvalidArgument,
              "stream_options");
  ExpectError(R"({"model": "m", "input": "x", "conversation": "c"})", C::kUnimplemented,
              "conversation");
  ExpectError(R"({"model": "m", "input": "x", "top_logprobs": 3})", C::kUnimplemented,
              "top_logprobs");
  ExpectError(R"({"model": "m", "input": "x", "previous_response_id": 5})", C::kInvalidArgument,
              "previous_response_id");
  // Another model: NotFound (the server answers 404, param "model").
  Result<ResponsesRequest> r = Parse(R"({"model": "other", "input": "x"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(ResponsesItems, AssistantTurnsMerge) {
  const Json items = Json::parse(R"([
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "R"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
    {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "one"},
    {"type": "function_call_output", "call_id": "c2", "output": "two"},
    {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"}
  ])");
  Result<Json> m = ItemsToChatMessages(items, "sys");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 6u) << m->dump();
  EXPECT_EQ((*m)[0]["role"], "system");
  EXPECT_EQ((*m)[1], (Json{{"role", "user"}, {"content", "q"}}));
  const Json& a = (*m)[2];
  EXPECT_EQ(a["role"], "assistant");
  EXPECT_EQ(a["reasoning_content"], "R");
  EXPECT_EQ(a["content"], "A");
  ASSERT_EQ(a["tool_calls"].size(), 2u);
  EXPECT_EQ(a["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(a["tool_calls"][1]["function"]["name"], "g");
  EXPECT_EQ((*m)[3], (Json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "one"}}));
  EXPECT_EQ((*m)[4]["tool_call_id"], "c2");
  // A call alone: an assistant message with empty content.
  EXPECT_EQ((*m)[5]["content"], "");
  EXPECT_EQ((*m)[5]["tool_calls"][0]["id"], "c3");
}

TEST(ResponsesItems, EmptyConversationIsAnError) {
  Result<Json> m = ItemsToChatMessages(Json::array(), "");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(ErrorParam(m.status()), "input");
}

TEST(ResponsesItems, NormalizedReasoningTakesContentThenEncryptedThenSummary) {
  Result<ResponsesRequest> r = Parse(R"({"model": "m", "input": [
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "S"}]},
      {"type": "reasoning", "summary": [], "encrypted_content": "E"},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "C"}],
       "encrypted_content": "E"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->input[0]["content"][0]["text"], "S");
  EXPECT_EQ(r->input[1]["content"][0]["text"], "E");
  EXPECT_EQ(r->input[2]["content"][0]["text"], "C");
}

TEST(ResponsesItems, IdsAreAssignedByType) {
  Json items = Json::parse(R"([{"type": "message"}, {"type": "function_call"},
      {"type": "function_call_output"}, {"type": "reasoning"}, {"type": "message", "id": "keep"}])");
  AssignItemIds(items);
  EXPECT_EQ(items[0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(items[1]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(items[2]["id"].get<std::string>().rfind("fco_", 0), 0u);
  EXPECT_EQ(items[3]["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(items[4]["id"], "keep");
}

TEST(ResponsesErrors, ParamIsTheLeadingQuotedField) {
  EXPECT_EQ(ErrorParam(InvalidArgument("'input[0].role' is 'x'")), "input[0].role");
  EXPECT_EQ(ErrorParam(InvalidArgument("The model 'x' does not exist")), "");
  EXPECT_EQ(ErrorParam(InvalidArgument("''")), "");
  EXPECT_EQ(ErrorParam(InvalidArgument("'unterminated")), "");
}

std::vector<std::string> Types(const std::vector<Json>& events) {
  std::vector<std::string> out;
  for (const Json& e : events) out.push_back(e["type"]);
  return out;
}

TEST(ResponseOutputBuilder, ReasoningThenText) {
  ResponseOutputBuilder b(/*summary=*/false, /*encrypted=*/false);
  std::vector<Json> events;
  const auto push = [&](const Dsv4OutputDelta& d) {
    for (Json& e : b.Push(d)) events.push_back(std::move(e));
  };
  push(Dsv4OutputDelta{"Think", "", {}});
  push(Dsv4OutputDelta{"ing.", "Hel", {}});
  push(Dsv4OutputDelta{"", "lo", {}});
  for (Json& e : b.Finish("completed")) events.push_back(std::move(e));
  EXPECT_EQ(Types(events), (std::vector<std::string>{
                               "response.output_item.added",
                               "response.content_part.added",
                               "response.reasoning_text.delta",
                               "response.reasoning_text.delta",
                               "response.reasoning_text.done",
                               "response.content_part.done",
                               "response.output_item.done",
                               "response.output_item.added",
                               "response.content_part.added",
                               "response.output_text.delta",
                               "response.output_text.delta",
                               "response.output_text.done",
                               "response.content_part.done",
                               "response.output_item.done",
                           }));
  const Json& out = b.output();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "Thinking.");
  EXPECT_EQ(out[0]["summary"], Json::array());
  EXPECT_FALSE(out[0].contains("encrypted_content"));
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_EQ(out[1]["content"][0]["text"], "Hello");
  EXPECT_EQ(events[11]["text"], "Hello");
  // Indices and item ids match their items.
  EXPECT_EQ(events[9]["output_index"], 1);
  EXPECT_EQ(events[9]["item_id"], out[1]["id"]);
  EXPECT_EQ(events.back()["item"], out[1]);
}

TEST(ResponseOutputBuilder, ToolCallsAndIncomplete) {
  ResponseOutputBuilder b(/*summary=*/true, /*encrypted=*/true);
  std::vector<Json> events;
  const auto push = [&](Dsv4OutputDelta d) {
    for (Json& e : b.Push(d)) events.push_back(std::move(e));
  };
  push(Dsv4OutputDelta{"R", "", {}});
  push(Dsv4OutputDelta{"", "", {Dsv4ToolCallDelta{0, "f", "{\"a\""}}});
  push(Dsv4OutputDelta{"", "", {Dsv4ToolCallDelta{0, "", ": 1}"}, Dsv4ToolCallDelta{1, "g", ""}}});
  push(Dsv4OutputDelta{"", "", {Dsv4ToolCallDelta{1, "", "{"}}});
  for (Json& e : b.Finish("incomplete")) events.push_back(std::move(e));
  const Json& out = b.output();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["summary"][0]["text"], "R");
  EXPECT_EQ(out[0]["encrypted_content"], "R");
  EXPECT_EQ(out[1]["type"], "function_call");
  EXPECT_EQ(out[1]["name"], "f");
  EXPECT_EQ(out[1]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_NE(out[1]["call_id"], out[2]["call_id"]);
  EXPECT_EQ(out[2]["arguments"], "{");
  EXPECT_EQ(out[2]["status"], "incomplete");
  int added = 0, done = 0, args_done = 0, summary_deltas = 0;
  for (const Json& e : events) {
    added += e["type"] == "response.output_item.added";
    done += e["type"] == "response.output_item.done";
    args_done += e["type"] == "response.function_call_arguments.done";
    summary_deltas += e["type"] == "response.reasoning_summary_text.delta";
  }
  EXPECT_EQ(added, 3);
  EXPECT_EQ(done, 3);
  EXPECT_EQ(args_done, 2);
  EXPECT_EQ(summary_deltas, 1);
}

TEST(ResponseOutputBuilder, NothingGeneratedNoItems) {
  ResponseOutputBuilder b(false, false);
  EXPECT_TRUE(b.Push(Dsv4OutputDelta{}).empty());
  EXPECT_TRUE(b.Finish("completed").empty());
  EXPECT_TRUE(b.output().empty());
}

StoredResponse Entry(size_t text_bytes) {
  StoredResponse s;
  s.response = Json{{"t", std::string(text_bytes, 'x')}};
  s.input_items = Json::array();
  return s;
}

TEST(ResponseStore, EvictsLeastRecentlyUsedByCount) {
  ResponseStore store(2, 1 << 20);
  EXPECT_TRUE(store.Put("a", Entry(1)));
  EXPECT_TRUE(store.Put("b", Entry(1)));
  EXPECT_NE(store.Get("a"), nullptr);  // a is now the most recent
  EXPECT_TRUE(store.Put("c", Entry(1)));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.Get("b"), nullptr);
  EXPECT_NE(store.Get("a"), nullptr);
  EXPECT_NE(store.Get("c"), nullptr);
}

TEST(ResponseStore, EvictsByBytesAndRefusesOversize) {
  ResponseStore store(100, 300);
  EXPECT_TRUE(store.Put("a", Entry(100)));
  EXPECT_TRUE(store.Put("b", Entry(100)));
  EXPECT_LE(store.bytes(), 300u);
  EXPECT_TRUE(store.Put("c", Entry(100)));  // over 300 bytes: a goes
  EXPECT_LE(store.bytes(), 300u);
  EXPECT_EQ(store.Get("a"), nullptr);
  EXPECT_NE(store.Get("c"), nullptr);
  EXPECT_FALSE(store.Put("big", Entry(400)));
  EXPECT_EQ(store.Get("big"), nullptr);
  EXPECT_NE(store.Get("c"), nullptr);  // nothing was evicted for it
}

TEST(ResponseStore, ReplaceAndErase) {
  ResponseStore store(4, 1 << 20);
  EXPECT_TRUE(store.Put("a", Entry(10)));
  const size_t small = store.bytes();
  EXPECT_TRUE(store.Put("a", Entry(50)));
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), small + 40);
  EXPECT_TRUE(store.Erase("a"));
  EXPECT_FALSE(store.Erase("a"));
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(ResponseStore, ZeroCountStoresNothing) {
  ResponseStore store(0, 1 << 20);
  EXPECT_FALSE(store.Put("a", Entry(1)));
  EXPECT_EQ(store.Get("a"), nullptr);
}

}  // namespace
}  // namespace dsv4::server
