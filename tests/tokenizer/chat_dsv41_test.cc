// DeepSeek-V4.1 chat encoding against the reference encoder: every golden made
// by tools/reference/make_v41_encoding_goldens.py byte for byte (chat and
// thinking modes, reasoning efforts, tools, tool calls and results,
// multi-turn with dropped reasoning, mid-conversation system messages,
// latest_reminder, response_format, tasks), the output parser on V4.1 tool-call
// blocks (the same goldens' "parse" part), then bad input: clear errors.
#include "tokenizer/chat_dsv41.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <string>

#include "base/mapped_file.h"
#include "tokenizer/chat_output_parser.h"

namespace dsv4 {
namespace {

using Json = nlohmann::ordered_json;
const std::string kGoldens =
    std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/dsv41_encoding/goldens.json";

Json LoadGoldens() {
  auto r = ReadFileToString(kGoldens);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return Json::parse(*r);
}

Dsv41ChatOptions OptionsFrom(const Json& o) {
  Dsv41ChatOptions options;
  options.thinking_mode = *ParseDsv4ThinkingMode(o["thinking_mode"].get<std::string>());
  options.drop_thinking = o["drop_thinking"].get<bool>();
  options.add_bos = o["add_bos"].get<bool>();
  const Json& e = o["reasoning_effort"];
  if (e.is_string()) {
    options.reasoning_effort = *ParseDsv41ReasoningEffort(e.get<std::string>());
  } else if (e.is_number_integer()) {
    options.reasoning_effort = e.get<int>();
  }
  return options;
}

TEST(ChatDsv41Test, ReferenceGoldensByteExact) {
  const Json goldens = LoadGoldens();
  ASSERT_GE(goldens["encode"].size(), 50u);
  for (const Json& g : goldens["encode"]) {
    SCOPED_TRACE(g["name"].get<std::string>());
    auto prompt = EncodeChatDsv41(g["request"], OptionsFrom(g["options"]));
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    EXPECT_EQ(*prompt, g["expected"].get<std::string>());
  }
}

TEST(ChatDsv41Test, SameGoldensFromJsonText) {
  const Json goldens = LoadGoldens();
  for (const Json& g : goldens["encode"]) {
    SCOPED_TRACE(g["name"].get<std::string>());
    auto prompt = EncodeChatDsv41Json(g["request"].dump(), OptionsFrom(g["options"]));
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    EXPECT_EQ(*prompt, g["expected"].get<std::string>());
  }
}

TEST(ChatDsv41Test, ParserOnReferenceGoldens) {
  const Json goldens = LoadGoldens();
  ASSERT_GE(goldens["parse"].size(), 6u);
  for (const Json& g : goldens["parse"]) {
    SCOPED_TRACE(g["name"].get<std::string>());
    const auto mode = *ParseDsv4ThinkingMode(g["thinking_mode"].get<std::string>());
    const std::string text = g["completion"].get<std::string>();
    const Dsv4ParsedOutput out = ParseDsv4Output(text, mode, DsmlDialect::kV41);
    if (g.contains("error")) {
      EXPECT_TRUE(out.malformed);
      continue;
    }
    ASSERT_FALSE(out.malformed) << out.error;
    const Json& e = g["expected"];
    EXPECT_EQ(out.reasoning_content, e["reasoning_content"].get<std::string>());
    EXPECT_EQ(out.content, e["content"].get<std::string>());
    ASSERT_EQ(out.tool_calls.size(), e["tool_calls"].size());
    for (size_t i = 0; i < out.tool_calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, e["tool_calls"][i]["name"].get<std::string>());
      EXPECT_EQ(out.tool_calls[i].arguments, e["tool_calls"][i]["arguments"].get<std::string>());
    }
    // Streamed a byte at a time: the same result.
    Dsv4OutputParser parser(mode, DsmlDialect::kV41);
    std::string reasoning, content;
    for (char c : text) {
      Dsv4OutputDelta d = parser.Push(std::string_view(&c, 1));
      reasoning += d.reasoning;
      content += d.content;
    }
    Dsv4OutputDelta d = parser.Finish();
    reasoning += d.reasoning;
    content += d.content;
    EXPECT_FALSE(parser.result().malformed);
    EXPECT_EQ(reasoning, out.reasoning_content);
    EXPECT_EQ(content, out.content);
    ASSERT_EQ(parser.result().tool_calls.size(), out.tool_calls.size());
  }
}

TEST(ChatDsv41Test, EncodedToolCallsParseBack) {
  // An assistant turn rendered by the encoder is output the V4.1 parser reads.
  Json request = Json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "ok", "tool_calls": [{"id": "1", "type": "function",
     "function": {"name": "f", "arguments": "{\"a\": \"b\", \"n\": [1, 2]}"}}]}])");
  Dsv41ChatOptions options{.thinking_mode = Dsv4ThinkingMode::kChat};
  auto prompt = EncodeChatDsv41(request, options);
  ASSERT_TRUE(prompt.ok());
  const std::string marker = "<｜Assistant｜></think>";
  const std::string completion = prompt->substr(prompt->find(marker) + marker.size());
  Dsv4ParsedOutput out = ParseDsv4Output(completion, Dsv4ThinkingMode::kChat, DsmlDialect::kV41);
  ASSERT_FALSE(out.malformed) << out.error;
  EXPECT_EQ(out.content, "ok");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "f");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"a": "b", "n": [1, 2]})");
  // The V4 parser does not take V4.1 tags for tool calls.
  EXPECT_TRUE(ParseDsv4Output(completion, Dsv4ThinkingMode::kChat).malformed);
}

TEST(ChatDsv41Test, ReasoningEffortParser) {
  EXPECT_EQ(*ParseDsv41ReasoningEffort(""), 75);
  EXPECT_EQ(*ParseDsv41ReasoningEffort("low"), 50);
  EXPECT_EQ(*ParseDsv41ReasoningEffort("high"), 75);
  EXPECT_EQ(*ParseDsv41ReasoningEffort("max"), 100);
  EXPECT_EQ(*ParseDsv41ReasoningEffort("1"), 1);
  EXPECT_EQ(*ParseDsv41ReasoningEffort("100"), 100);
  for (const char* bad : {"0", "101", "-5", "7.5", "medium", "xhigh", " 50", "50 "}) {
    auto r = ParseDsv41ReasoningEffort(bad, "--reasoning-effort");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--reasoning-effort"), std::string::npos);
    EXPECT_NE(r.status().hint().find("1 to 100"), std::string::npos);
  }
}

void ExpectError(const std::string& request_json, const std::string& needle,
                 Dsv41ChatOptions options = {}) {
  auto prompt = EncodeChatDsv41Json(request_json, options);
  ASSERT_FALSE(prompt.ok()) << "accepted: " << request_json;
  EXPECT_EQ(prompt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(prompt.status().message().find(needle), std::string::npos)
      << "message '" << prompt.status().message() << "' lacks '" << needle << "'";
}

TEST(ChatDsv41BadInputTest, ReasoningEffortOutOfRange) {
  for (int e : {0, 101, -1}) {
    ExpectError(R"([{"role": "user", "content": "x"}])", "reasoning_effort is",
                Dsv41ChatOptions{.reasoning_effort = e});
  }
}
TEST(ChatDsv41BadInputTest, UnknownRoleNamesIndex) {
  // The reference would drop this message silently (before the last user turn).
  ExpectError(R"([{"role": "narrator", "content": "x"}, {"role": "user", "content": "y"}])",
              "messages[0] has unknown role 'narrator'");
}
TEST(ChatDsv41BadInputTest, MissingRole) {
  ExpectError(R"([{"role": "user", "content": "x"}, {"content": "y"}])",
              "messages[1] has no \"role\"");
}
TEST(ChatDsv41BadInputTest, NotJson) { ExpectError("[{\"role\": ", "not valid JSON"); }
TEST(ChatDsv41BadInputTest, ImageContent) {
  ExpectError(R"([{"role": "user", "content": [{"type": "image_url",
      "image_url": {"url": "http://x/y.png"}}]}])",
              "expected a string");
}
TEST(ChatDsv41BadInputTest, InvalidTask) {
  ExpectError(R"([{"role": "user", "content": "x", "task": "dance"}])", "invalid task 'dance'");
}
TEST(ChatDsv41BadInputTest, ToolWithoutFunction) {
  ExpectError(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]})",
              "tools[0] has no \"function\"");
}
TEST(ChatDsv41BadInputTest, ToolCallWithoutName) {
  ExpectError(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
              "tool_calls[0] needs function.name");
}
TEST(ChatDsv41BadInputTest, InvalidUtf8) {
  Json request = Json::array({{{"role", "user"}, {"content", std::string("a\xff")}}});
  auto prompt = EncodeChatDsv41(request, {});
  ASSERT_FALSE(prompt.ok());
  EXPECT_NE(prompt.status().message().find("not valid UTF-8"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
