// DeepSeek-V4 output parsing against the reference parser
// (encoding_dsv4.parse_message_from_completion_text, goldens in
// chat_dsv4_goldens.json "parse"): well-formed outputs give the same
// reasoning / content / tool calls; outputs the reference rejects come back
// flagged with the raw text as content. The incremental parser, fed in pieces
// of every size, streams exactly the one-shot result and never lets DSML
// markup into content.
#include "tokenizer/chat_output_parser.h"

#include <gtest/gtest.h>

#include <string>

#include "base/mapped_file.h"

namespace dsv4 {
namespace {

using Json = nlohmann::ordered_json;
const std::string kDataDir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";

Json ParseGoldens() {
  auto text = ReadFileToString(kDataDir + "chat_dsv4_goldens.json");
  CHECK(text.ok(), "%s", text.status().ToString().c_str());
  return Json::parse(*text)["parse"];
}

Dsv4ThinkingMode Mode(const Json& g) {
  return g["thinking_mode"] == "thinking" ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat;
}

TEST(ChatOutputParserTest, MatchesReferenceParser) {
  Json goldens = ParseGoldens();
  ASSERT_GE(goldens.size(), 15u);
  int errors_seen = 0;
  for (const Json& g : goldens) {
    const std::string name = g["name"].get<std::string>();
    const std::string text = g["completion"].get<std::string>();
    Dsv4ParsedOutput out = ParseDsv4Output(text, Mode(g));
    if (g.contains("error")) {
      ++errors_seen;
      EXPECT_TRUE(out.malformed) << name;
      EXPECT_FALSE(out.error.empty()) << name;
      std::string raw = text;
      if (raw.ends_with(dsv4_tokens::kEos)) raw.resize(raw.size() - dsv4_tokens::kEos.size());
      EXPECT_EQ(out.content, raw) << name;
      EXPECT_TRUE(out.tool_calls.empty()) << name;
      continue;
    }
    const Json& want = g["expected"];
    EXPECT_FALSE(out.malformed) << name << ": " << out.error;
    EXPECT_EQ(out.reasoning_content, want["reasoning_content"].get<std::string>()) << name;
    EXPECT_EQ(out.content, want["content"].get<std::string>()) << name;
    ASSERT_EQ(out.tool_calls.size(), want["tool_calls"].size()) << name;
    for (size_t i = 0; i < out.tool_calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, want["tool_calls"][i]["name"].get<std::string>()) << name;
      EXPECT_EQ(out.tool_calls[i].arguments, want["tool_calls"][i]["arguments"].get<std::string>())
          << name;
    }
  }
  EXPECT_GE(errors_seen, 5);
}

// Feeds `text` in pieces of `step` bytes and rebuilds the result from deltas.
Dsv4ParsedOutput StreamInPieces(const std::string& text, Dsv4ThinkingMode mode, size_t step,
                                bool* dsml_leaked) {
  Dsv4OutputParser parser(mode);
  Dsv4ParsedOutput rebuilt;
  auto apply = [&](const Dsv4OutputDelta& d) {
    rebuilt.reasoning_content += d.reasoning;
    rebuilt.content += d.content;
    if (d.content.find("DSML") != std::string::npos) *dsml_leaked = true;
    for (const Dsv4ToolCallDelta& t : d.tool_calls) {
      if (t.index >= static_cast<int>(rebuilt.tool_calls.size())) {
        EXPECT_FALSE(t.name.empty()) << "first delta of a tool call must carry its name";
        rebuilt.tool_calls.push_back({t.name, ""});
      }
      rebuilt.tool_calls[t.index].arguments += t.arguments;
    }
  };
  for (size_t pos = 0; pos < text.size(); pos += step) apply(parser.Push(text.substr(pos, step)));
  apply(parser.Finish());
  rebuilt.malformed = parser.result().malformed;
  return rebuilt;
}

TEST(ChatOutputParserTest, StreamingEqualsOneShotForEveryPieceSize) {
  for (const Json& g : ParseGoldens()) {
    if (g.contains("error")) continue;
    const std::string name = g["name"].get<std::string>();
    const std::string text = g["completion"].get<std::string>();
    Dsv4ParsedOutput whole = ParseDsv4Output(text, Mode(g));
    for (size_t step : {1, 2, 3, 5, 7, 13, 64, 4096}) {
      bool leaked = false;
      Dsv4ParsedOutput s = StreamInPieces(text, Mode(g), step, &leaked);
      EXPECT_FALSE(leaked) << name << " step " << step;
      EXPECT_FALSE(s.malformed) << name << " step " << step;
      EXPECT_EQ(s.reasoning_content, whole.reasoning_content) << name << " step " << step;
      EXPECT_EQ(s.content, whole.content) << name << " step " << step;
      ASSERT_EQ(s.tool_calls.size(), whole.tool_calls.size()) << name << " step " << step;
      for (size_t i = 0; i < s.tool_calls.size(); ++i) {
        EXPECT_EQ(s.tool_calls[i].name, whole.tool_calls[i].name) << name;
        EXPECT_EQ(s.tool_calls[i].arguments, whole.tool_calls[i].arguments)
            << name << " step " << step;
      }
    }
  }
}

// Headers may be up to 4096 bytes to their close. Found by fuzz_chat_dsv4: a
// parameter header whose close started within the limit but ended past it
// parsed in one piece and was flagged when streamed a byte at a time.
TEST(ChatOutputParserTest, StreamingEqualsOneShotAtTheHeaderLimit) {
  const std::string dsml = "｜DSML｜";
  constexpr size_t kLimit = 4096, kOpen = 7;  // ` name="` precedes the name
  for (const bool in_invoke : {false, true}) {
    for (const size_t close_at : {kLimit - 1, kLimit, kLimit + 1}) {
      const std::string long_name(close_at - kOpen, 'n');
      const std::string func = in_invoke ? long_name : "f";
      const std::string param = in_invoke ? "a" : long_name;
      const std::string text = "\n\n<" + dsml + "tool_calls>\n<" + dsml + "invoke name=\"" + func +
                               "\">\n<" + dsml + "parameter name=\"" + param +
                               "\" string=\"true\">v</" + dsml + "parameter>\n</" + dsml +
                               "invoke>\n</" + dsml + "tool_calls>";
      const Dsv4ParsedOutput whole = ParseDsv4Output(text, Dsv4ThinkingMode::kChat);
      EXPECT_EQ(whole.malformed, close_at > kLimit) << in_invoke << " " << close_at;
      for (size_t step : {1, 2, 17, 4096}) {
        bool leaked = false;
        const Dsv4ParsedOutput s = StreamInPieces(text, Dsv4ThinkingMode::kChat, step, &leaked);
        EXPECT_EQ(s.malformed, whole.malformed) << in_invoke << " " << close_at << " step " << step;
        if (whole.malformed) continue;
        ASSERT_EQ(s.tool_calls.size(), 1u);
        EXPECT_EQ(s.tool_calls[0].name, func);
        EXPECT_EQ(s.tool_calls[0].arguments, whole.tool_calls[0].arguments);
      }
    }
  }
}

TEST(ChatOutputParserTest, ContentEndingInNewlinesIsHeldBackThenReleased) {
  Dsv4OutputParser parser(Dsv4ThinkingMode::kChat);
  Dsv4OutputDelta d = parser.Push("Answer.\n\n");
  EXPECT_EQ(d.content, "Answer.");  // "\n\n" might start a tool-calls block
  d = parser.Push("More");
  EXPECT_EQ(d.content, "\n\nMore");
  d = parser.Finish();
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(parser.result().malformed);
  EXPECT_EQ(parser.result().content, "Answer.\n\nMore");
}

TEST(ChatOutputParserTest, TruncatedReasoningIsFlagged) {
  Dsv4ParsedOutput out = ParseDsv4Output("still thinking", Dsv4ThinkingMode::kThinking);
  EXPECT_TRUE(out.malformed);
  EXPECT_NE(out.error.find("</think>"), std::string::npos);
  EXPECT_EQ(out.content, "still thinking");
}

TEST(ChatOutputParserTest, UnterminatedToolCallIsFlaggedAndKeptAsContent) {
  const std::string text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
      "string=\"true\">unfinished";
  Dsv4ParsedOutput out = ParseDsv4Output(text, Dsv4ThinkingMode::kChat);
  EXPECT_TRUE(out.malformed);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(ChatOutputParserTest, PushAfterFinishIsIgnored) {
  Dsv4OutputParser parser(Dsv4ThinkingMode::kChat);
  parser.Push("a");
  parser.Finish();
  EXPECT_TRUE(parser.finished());
  EXPECT_TRUE(parser.Push("b").empty());
  EXPECT_EQ(parser.result().content, "a");
}

}  // namespace
}  // namespace dsv4
