// DeepSeek-V4 chat encoding against DeepSeek's reference encoder
// (encoding_dsv4.py): the two official oracle cases byte-exact, plus the
// goldens made by tools/goldens/chat_dsv4_goldens.py (every branch of the
// encoder). Then bad input: each case gives a clear error, never a crash.
#include "tokenizer/chat_dsv4.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <string>

#include "base/mapped_file.h"

namespace dsv4 {
namespace {

using Json = nlohmann::ordered_json;
const std::string kDataDir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";

std::string ReadOrDie(const std::string& path) {
  auto r = ReadFileToString(path);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return *r;
}

Dsv4ChatOptions OptionsFrom(const Json& o) {
  Dsv4ChatOptions options;
  options.thinking_mode = *ParseDsv4ThinkingMode(o["thinking_mode"].get<std::string>());
  options.drop_thinking = o["drop_thinking"].get<bool>();
  options.add_bos = o["add_bos"].get<bool>();
  options.reasoning_effort = *ParseDsv4ReasoningEffort(o["reasoning_effort"].get<std::string>());
  return options;
}

TEST(ChatDsv4Test, OracleCase1ThinkingWithTools) {
  // Case 1: the top-level "tools" go into the first message (OpenAI style).
  std::string input = ReadOrDie(kDataDir + "dsv4_encoding/case1.input.json");
  std::string expected = ReadOrDie(kDataDir + "dsv4_encoding/case1.expected.txt");
  auto prompt =
      EncodeChatDsv4Json(input, Dsv4ChatOptions{.thinking_mode = Dsv4ThinkingMode::kThinking});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt, expected);
}

TEST(ChatDsv4Test, OracleCase2ThinkingDropsEarlierReasoning) {
  std::string input = ReadOrDie(kDataDir + "dsv4_encoding/case2.input.json");
  std::string expected = ReadOrDie(kDataDir + "dsv4_encoding/case2.expected.txt");
  auto prompt =
      EncodeChatDsv4Json(input, Dsv4ChatOptions{.thinking_mode = Dsv4ThinkingMode::kThinking});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(*prompt, expected);
  EXPECT_EQ(prompt->find("The user said hello"), std::string::npos);
}

TEST(ChatDsv4Test, ReferenceGoldensByteExact) {
  Json goldens = Json::parse(ReadOrDie(kDataDir + "chat_dsv4_goldens.json"));
  ASSERT_GE(goldens["encode"].size(), 32u);
  for (const Json& g : goldens["encode"]) {
    const std::string name = g["name"].get<std::string>();
    auto prompt = EncodeChatDsv4(g["request"], OptionsFrom(g["options"]));
    ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.status().ToString();
    EXPECT_EQ(*prompt, g["expected"].get<std::string>()) << name;
  }
}

TEST(ChatDsv4Test, PythonJsonDumpsMatchesPython) {
  // Expected strings are what CPython 3.11 json.dumps(x, ensure_ascii=False) prints.
  Json v = Json::parse(
      R"({"b": 1, "a": [1.0, 0.1, 1e-05, 0.0001, 1e16, 1e15, -0.0, 2.5e-300, 123456789.125],
                           "s": "q\"\\\n\t\u0001\u007f ü 😀", "n": null, "t": true, "e": {}, "l": []})");
  EXPECT_EQ(
      PythonJsonDumps(v),
      "{\"b\": 1, \"a\": [1.0, 0.1, 1e-05, 0.0001, 1e+16, 1000000000000000.0, -0.0, 2.5e-300, "
      "123456789.125], \"s\": \"q\\\"\\\\\\n\\t\\u0001\x7f ü 😀\", \"n\": null, \"t\": true, "
      "\"e\": {}, \"l\": []}");
}

TEST(ChatDsv4Test, TopLevelToolsWithoutSystemGetAnEmptySystemMessage) {
  Json request = Json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}],
                                 "messages": [{"role": "user", "content": "x"}]})");
  auto prompt = EncodeChatDsv4(request, Dsv4ChatOptions{.thinking_mode = Dsv4ThinkingMode::kChat});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(prompt->rfind("<｜begin▁of▁sentence｜>\n\n## Tools\n\n", 0), 0u);
  EXPECT_NE(prompt->find("{\"name\": \"f\"}\n\nYou MUST strictly follow"), std::string::npos);
  EXPECT_TRUE(prompt->ends_with("<｜User｜>x<｜Assistant｜></think>"));
}

// One bad input per case: an error that names what is wrong, never a crash.
void ExpectError(const std::string& request_json, const std::string& needle,
                 Dsv4ChatOptions options = {}) {
  auto prompt = EncodeChatDsv4Json(request_json, options);
  ASSERT_FALSE(prompt.ok()) << "accepted: " << request_json;
  EXPECT_EQ(prompt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(prompt.status().message().find(needle), std::string::npos)
      << "message '" << prompt.status().message() << "' lacks '" << needle << "'";
}

TEST(ChatDsv4BadInputTest, NotJson) { ExpectError("[{\"role\": ", "not valid JSON"); }
TEST(ChatDsv4BadInputTest, InvalidUtf8) {
  ExpectError("[{\"role\": \"user\", \"content\": \"a\xff\"}]", "not valid JSON");
}
TEST(ChatDsv4BadInputTest, LoneSurrogate) {
  ExpectError(R"([{"role": "user", "content": "a\ud800b"}])", "not valid JSON");
}
TEST(ChatDsv4BadInputTest, InvalidUtf8InProgrammaticJson) {
  Json request = Json::array({Json{{"role", "user"}, {"content", std::string("bad \xc3(")}}});
  auto prompt = EncodeChatDsv4(request, {});
  ASSERT_FALSE(prompt.ok());
  EXPECT_NE(prompt.status().message().find("[0].content is not valid UTF-8"), std::string::npos)
      << prompt.status().message();
}
TEST(ChatDsv4BadInputTest, NumberTooLarge) {
  ExpectError(R"([{"role": "user", "content": "x", "n": 1e999}])", "not valid JSON");
}
TEST(ChatDsv4BadInputTest, TopLevelScalar) { ExpectError("42", "expected messages"); }
TEST(ChatDsv4BadInputTest, ObjectWithoutMessages) {
  ExpectError(R"({"tools": []})", "no \"messages\"");
}
TEST(ChatDsv4BadInputTest, MessageNotObject) {
  ExpectError(R"(["hi"])", "messages[0] is a string");
}
TEST(ChatDsv4BadInputTest, MissingRole) { ExpectError(R"([{"content": "x"}])", "no \"role\""); }
TEST(ChatDsv4BadInputTest, UnknownRole) {
  ExpectError(R"([{"role": "wizard", "content": "x"}])", "unknown role 'wizard'");
}
TEST(ChatDsv4BadInputTest, NonStringContent) {
  ExpectError(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])",
              "expected a string");
}
TEST(ChatDsv4BadInputTest, EmptyDeveloperContent) {
  ExpectError(R"([{"role": "developer", "content": ""}])", "empty content");
}
TEST(ChatDsv4BadInputTest, ToolsNotArray) {
  ExpectError(R"([{"role": "system", "content": "s", "tools": {"a": 1}}])", "expected an array");
}
TEST(ChatDsv4BadInputTest, ToolWithoutFunction) {
  ExpectError(R"([{"role": "system", "content": "s", "tools": [{"type": "function"}]}])",
              "tools[0] has no \"function\"");
}
TEST(ChatDsv4BadInputTest, ToolWithoutName) {
  ExpectError(
      R"([{"role": "system", "content": "s", "tools": [{"function": {"description": "d"}}]}])",
      "no \"name\"");
}
TEST(ChatDsv4BadInputTest, ToolParametersNotObject) {
  ExpectError(R"([{"role": "system", "tools": [{"function": {"name": "f", "parameters": "x"}}]}])",
              "JSON-schema object");
}
TEST(ChatDsv4BadInputTest, ToolCallWithoutFunction) {
  ExpectError(
      R"([{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [{"id": "1"}]}])",
      "tool_calls[0] needs function.name");
}
TEST(ChatDsv4BadInputTest, ToolCallArgumentsNotAnObject) {
  ExpectError(R"([{"role": "user", "content": "u"},
                 {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1, 2]"}}]}])",
              "not an object");
}
TEST(ChatDsv4BadInputTest, InvalidTask) {
  ExpectError(R"([{"role": "user", "content": "u", "task": "dance"}])", "invalid task 'dance'");
}
TEST(ChatDsv4BadInputTest, WrongFieldTypeDeepInside) {
  ExpectError(
      R"([{"role": "user", "content": "u"}, {"role": "tool", "content": "x", "tool_call_id": 5},
                 {"role": "user", "content": "v"}, {"role": "tool", "content": {"k": 1}}])",
      "expected a string");
}

TEST(ChatDsv4Test, OptionParsers) {
  EXPECT_ERROR(ParseDsv4ThinkingMode("think"), StatusCode::kInvalidArgument,
               "unknown thinking mode 'think'");
  EXPECT_ERROR(ParseDsv4ReasoningEffort("low"), StatusCode::kInvalidArgument,
               "unknown reasoning effort 'low'");
  EXPECT_EQ(*ParseDsv4ReasoningEffort(""), Dsv4ReasoningEffort::kDefault);
  EXPECT_EQ(*ParseDsv4ThinkingMode("chat"), Dsv4ThinkingMode::kChat);
}

}  // namespace
}  // namespace dsv4
