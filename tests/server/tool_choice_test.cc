// tool_choice constraints (server/tool_choice.h) on the real DeepSeek-V4
// vocabulary: a scripted "model" proposes tokens, the test drives the
// constraint the way the engine does (take the proposal when allowed, else the
// lowest allowed id after Mask), and the output must parse (chat_output_parser)
// into the tool calls the request allows: from every stopping point, in chat
// and thinking mode, for named and required choices.
#include "server/tool_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "engine/loader.h"
#include "tokenizer/chat_output_parser.h"

namespace dsv4::server {
namespace {

const std::string kDsml = "｜DSML｜";

class ToolChoiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t =
        LoadTokenizer(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(t).value().release();
    texts_ = new std::shared_ptr<const TokenTexts>(BuildTokenTexts(*tokenizer_));
  }
  static const Tokenizer& tok() { return *tokenizer_; }
  static const std::shared_ptr<const TokenTexts>& texts() { return *texts_; }

  static ToolCallConstraint Make(
      std::vector<std::string> names, bool single, bool thinking, int64_t reserve = 0,
      std::map<std::string, std::shared_ptr<const constrain::Grammar>> arguments = {},
      bool optional = false) {
    ToolCallSpec spec;
    spec.optional = optional;
    spec.names = std::move(names);
    spec.single_call = single;
    spec.thinking = thinking;
    spec.eos_id = tokenizer_->eos_id();
    spec.reserve_tokens = reserve;
    spec.arguments = std::move(arguments);
    return ToolCallConstraint(texts(), spec);
  }

  std::vector<int32_t> Ids(std::string_view text) const { return tok().Encode(text, false); }

  // Runs the constraint over a script of proposed tokens (then EOS), for at
  // most `max_tokens` tokens; returns the output text including Close().
  // `refused` counts proposals the constraint turned down.
  std::string Drive(ToolCallConstraint& c, const std::vector<int32_t>& script, int max_tokens,
                    int* refused = nullptr) {
    std::string out;
    const size_t before = c.text().size();
    std::vector<float> logits(tok().vocab_size());
    for (int k = 0; k < max_tokens && !c.done(); ++k) {
      c.Prepare(max_tokens - k);
      int32_t next = k < static_cast<int>(script.size()) ? script[k] : tok().eos_id();
      if (!c.Allows(next)) {
        if (refused != nullptr) ++*refused;
        std::fill(logits.begin(), logits.end(), 0.0f);
        c.Mask(logits);
        next = -1;
        for (size_t i = 0; i < logits.size() && next < 0; ++i) {
          if (std::isfinite(logits[i])) next = static_cast<int32_t>(i);
        }
        if (next < 0) break;  // nothing allowed
        EXPECT_TRUE(c.Allows(next));
      }
      if (next == tok().eos_id()) break;
      c.Accept(next);
      out += (*texts())[next];
    }
    out += c.Close();
    EXPECT_EQ(out, c.text().substr(before));
    return out;
  }

  static std::string Call(const std::string& name, const std::string& params) {
    return "<" + kDsml + "invoke name=\"" + name + "\">\n" + params + "</" + kDsml + "invoke>\n";
  }
  static std::string Param(const std::string& key, const std::string& value, bool is_string) {
    return "<" + kDsml + "parameter name=\"" + key + "\" string=\"" +
           (is_string ? "true" : "false") + "\">" + value + "</" + kDsml + "parameter>\n";
  }
  static std::string Block(const std::string& calls) {
    return "\n\n<" + kDsml + "tool_calls>\n" + calls + "</" + kDsml + "tool_calls>";
  }

  static inline const Tokenizer* tokenizer_ = nullptr;
  static inline std::shared_ptr<const TokenTexts>* texts_ = nullptr;
};

TEST_F(ToolChoiceTest, WellFormedCallPassesUntouchedAndEndsTheSequence) {
  const std::string script =
      Block(Call("get_weather", Param("city", "Paris", true) + Param("days", "3", false)));
  ToolCallConstraint c = Make({"get_weather", "get_time"}, false, false);
  int refused = 0;
  const std::string out = Drive(c, Ids(script), 200, &refused);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(out, script);
  EXPECT_TRUE(c.done());  // right after </｜DSML｜tool_calls>, without waiting for EOS
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error;
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(p.content, "");
}

TEST_F(ToolChoiceTest, RequiredAllowsParallelCallsToListedTools) {
  const std::string script =
      Block(Call("get_time", Param("tz", "UTC", true)) + Call("get_weather", ""));
  ToolCallConstraint c = Make({"get_weather", "get_time"}, false, false);
  int refused = 0;
  EXPECT_EQ(Drive(c, Ids(script), 200, &refused), script);
  EXPECT_EQ(refused, 0);
}

TEST_F(ToolChoiceTest, PlainAnswerIsTurnedIntoACallToAListedTool) {
  ToolCallConstraint c = Make({"get_weather", "get_time"}, false, false);
  int refused = 0;
  const std::string out = Drive(c, Ids("The weather is nice today."), 100, &refused);
  EXPECT_GT(refused, 0);
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  ASSERT_GE(p.tool_calls.size(), 1u);
  for (const auto& call : p.tool_calls) {
    EXPECT_TRUE(call.name == "get_weather" || call.name == "get_time") << call.name;
  }
  EXPECT_EQ(p.content, "");
}

TEST_F(ToolChoiceTest, RequiredRefusesAnUnlistedName) {
  const std::string script = Block(Call("get_wrong", Param("city", "Paris", true)));
  ToolCallConstraint c = Make({"get_weather", "get_time"}, false, false);
  const std::string out = Drive(c, Ids(script), 200);
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  ASSERT_GE(p.tool_calls.size(), 1u);
  EXPECT_TRUE(p.tool_calls[0].name == "get_weather" || p.tool_calls[0].name == "get_time");
}

TEST_F(ToolChoiceTest, NamedChoiceForcesThatNameAndOneCall) {
  // The model wants get_weather twice; the request names get_time.
  const std::string script =
      Block(Call("get_weather", Param("city", "Paris", true)) + Call("get_weather", ""));
  ToolCallConstraint c = Make({"get_time"}, true, false);
  const std::string out = Drive(c, Ids(script), 200);
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_time");
  EXPECT_TRUE(c.done());
}

TEST_F(ToolChoiceTest, NamedChoiceRefusesASecondInvoke) {
  ToolCallConstraint c = Make({"f"}, true, false);
  for (int32_t id : Ids("\n\n<" + kDsml + "tool_calls>\n" + Call("f", ""))) {
    ASSERT_TRUE(c.Allows(id));
    c.Accept(id);
  }
  // "<" may still start </｜DSML｜tool_calls>; "<｜DSML｜" would start another invoke.
  ToolCallConstraint probe = c;
  for (int32_t id : Ids("<")) probe.Accept(id);
  EXPECT_FALSE(probe.Allows(Ids(kDsml)[0]));
  EXPECT_TRUE(probe.Allows(Ids("/")[0]));
  EXPECT_TRUE(c.Allows(tok().eos_id()));  // and ending now closes the block
  EXPECT_EQ(c.Close(), "</" + kDsml + "tool_calls>");
}

TEST_F(ToolChoiceTest, EosRefusedBeforeTheNameAndInsideMarkup) {
  ToolCallConstraint c = Make({"get_weather"}, true, false);
  const int32_t eos = tok().eos_id();
  EXPECT_FALSE(c.Allows(eos));
  for (int32_t id : Ids("\n\n<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"get")) {
    c.Accept(id);
    EXPECT_FALSE(c.Allows(eos)) << c.text();
  }
  for (int32_t id : Ids("_weather\">\n")) c.Accept(id);
  EXPECT_TRUE(c.Allows(eos));  // between parameters
  EXPECT_FALSE(c.Allows(Ids("Hello")[0]));
  // Tokens with no text (BOS) are never allowed.
  EXPECT_FALSE(c.Allows(tok().bos_id()));
}

TEST_F(ToolChoiceTest, ParameterNameRules) {
  auto at_key = [&] {
    ToolCallConstraint c = Make({"f"}, false, false);
    for (int32_t id : Ids("\n\n<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"f\">\n" +
                          Param("a", "1", false) + "<" + kDsml + "parameter name=\"")) {
      EXPECT_TRUE(c.Allows(id)) << c.text();
      c.Accept(id);
    }
    return c;
  };
  ToolCallConstraint c = at_key();
  const int32_t quote = Ids("\"")[0];
  EXPECT_FALSE(c.Allows(quote));  // empty name
  EXPECT_FALSE(c.Allows(Ids("\n")[0]));
  c.Accept(Ids("a")[0]);
  EXPECT_FALSE(c.Allows(quote));  // duplicate of the first parameter
  c.Accept(Ids("b")[0]);
  EXPECT_TRUE(c.Allows(quote));
  // A name of 256 bytes takes no more.
  ToolCallConstraint d = at_key();
  const int32_t x = Ids("x")[0];
  for (int i = 0; i < 256; ++i) {
    ASSERT_TRUE(d.Allows(x)) << i;
    d.Accept(x);
  }
  EXPECT_FALSE(d.Allows(x));
  EXPECT_TRUE(d.Allows(quote));
}

TEST_F(ToolChoiceTest, CloseFromEveryStoppingPointParses) {
  const std::string call =
      Call("get_weather", Param("city", "Paris", true) + Param("days", "3", false));
  for (bool thinking : {false, true}) {
    const std::string script =
        (thinking ? std::string("Let me check.</think>") : std::string()) + Block(call);
    const std::vector<int32_t> ids = Ids(script);
    for (size_t k = 0; k <= ids.size(); ++k) {
      ToolCallConstraint c = Make({"get_weather", "get_time"}, false, thinking);
      std::string out;
      for (size_t i = 0; i < k; ++i) {
        ASSERT_TRUE(c.Allows(ids[i])) << k << " " << i;
        c.Accept(ids[i]);
        out += (*texts())[ids[i]];
      }
      out += c.Close();
      const Dsv4ParsedOutput p =
          ParseDsv4Output(out, thinking ? Dsv4ThinkingMode::kThinking : Dsv4ThinkingMode::kChat);
      ASSERT_FALSE(p.malformed) << "thinking " << thinking << " k " << k << ": " << p.error << "\n"
                                << out;
      ASSERT_EQ(p.tool_calls.size(), 1u) << out;
      EXPECT_TRUE(p.tool_calls[0].name == "get_weather" || p.tool_calls[0].name == "get_time");
      const auto args = nlohmann::json::parse(p.tool_calls[0].arguments, nullptr, false);
      EXPECT_TRUE(args.is_object()) << p.tool_calls[0].arguments;
      EXPECT_TRUE(c.done());
      EXPECT_EQ(c.Close(), "");  // once
    }
  }
}

TEST_F(ToolChoiceTest, CloseCompletesAPartialNameToAnAllowedOne) {
  ToolCallConstraint c = Make({"get_weather", "get_time", "search"}, false, false);
  for (int32_t id : Ids("\n\n<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"get_w")) {
    ASSERT_TRUE(c.Allows(id));
    c.Accept(id);
  }
  const std::string closed = c.Close();
  EXPECT_EQ(closed, "eather\">\n</" + kDsml + "invoke>\n</" + kDsml + "tool_calls>");
}

TEST_F(ToolChoiceTest, ThinkingReasonsFreelyThenMustCall) {
  ToolCallConstraint c = Make({"f"}, true, true);
  const int32_t eos = tok().eos_id();
  EXPECT_FALSE(c.in_call());
  EXPECT_TRUE(c.stop_strings_apply());
  EXPECT_FALSE(c.Allows(Ids(kDsml)[0]));  // the parser rejects it in reasoning
  EXPECT_FALSE(c.Allows(Ids("<think>")[0]));
  for (int32_t id : Ids("I should call f.")) {
    ASSERT_TRUE(c.Allows(id));
    EXPECT_FALSE(c.Allows(eos));  // no ending without a call
    c.Accept(id);
  }
  c.Accept(Ids("</think>")[0]);
  EXPECT_TRUE(c.in_call());
  EXPECT_FALSE(c.stop_strings_apply());
  EXPECT_FALSE(c.Allows(Ids("Sure")[0]));  // no content before the call
  Drive(c, {}, 100);
  const std::string out = c.text();
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kThinking);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  EXPECT_EQ(p.reasoning_content, "I should call f.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
}

TEST_F(ToolChoiceTest, ThinkEndIsForcedWhenTheBudgetRunsOut) {
  ToolCallConstraint c = Make({"f"}, true, true, /*reserve=*/10);
  const int32_t word = Ids("Hmm")[0];  // "H"
  c.Prepare(11);
  EXPECT_TRUE(c.Allows(word));
  c.Accept(word);
  c.Prepare(10);  // out of room: "</think>" now
  EXPECT_FALSE(c.Allows(word));
  EXPECT_TRUE(c.Allows(Ids("</think>")[0]));
  EXPECT_FALSE(c.stop_strings_apply());
  // Driven to the end within the budget, the call is made by the model's tokens.
  Drive(c, {word, word, word}, 10);
  const std::string out = c.text();
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kThinking);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  EXPECT_EQ(p.reasoning_content, (*texts())[word]);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
}

TEST_F(ToolChoiceTest, ManyToolsAreSearchedNotScanned) {
  // 20,000 names: each byte narrows the candidates by binary search, so
  // masking the whole vocabulary per step stays cheap.
  std::vector<std::string> names;
  for (int i = 0; i < 20000; ++i) names.push_back("tool_" + std::to_string(i * 7919 % 20000));
  ToolCallConstraint c = Make(names, false, false);
  const std::string out = Drive(c, Ids("Hello"), 40);
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  ASSERT_GE(p.tool_calls.size(), 1u);
  const std::set<std::string> allowed(names.begin(), names.end());
  for (const auto& call : p.tool_calls) EXPECT_TRUE(allowed.count(call.name)) << call.name;
}

TEST_F(ToolChoiceTest, FactoryFollowsToolChoice) {
  GenerationRequest r;
  r.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "a"}},
          {"type": "function", "function": {"name": "b"}}])");
  r.tool_choice = "auto";
  EXPECT_EQ(MakeToolChoiceConstraint(r, tok(), texts()), nullptr);
  r.tool_choice = "none";
  ConstraintFactory none = MakeToolChoiceConstraint(r, tok(), texts());
  ASSERT_NE(none, nullptr);
  std::unique_ptr<SequenceConstraint> ban = none();
  const int32_t dsml = Ids(kDsml)[0];
  EXPECT_FALSE(ban->Allows(dsml));
  EXPECT_TRUE(ban->Allows(Ids("Hello")[0]));
  EXPECT_TRUE(ban->Allows(tok().eos_id()));
  std::vector<float> logits(tok().vocab_size(), 1.0f);
  ban->Mask(logits);
  EXPECT_EQ(logits[dsml], -INFINITY);
  EXPECT_EQ(std::count(logits.begin(), logits.end(), 1.0f), tok().vocab_size() - 1);
  EXPECT_EQ(ban->Close(), "");
  r.tool_choice = "required";
  EXPECT_TRUE(ForcesToolCall(r));
  ConstraintFactory req = MakeToolChoiceConstraint(r, tok(), texts());
  ASSERT_NE(req, nullptr);
  // Each sequence gets its own state.
  std::unique_ptr<SequenceConstraint> s1 = req(), s2 = req();
  EXPECT_NE(s1.get(), s2.get());
  const std::string closed = s1->Close();
  const Dsv4ParsedOutput p = ParseDsv4Output(closed, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << closed;
  EXPECT_EQ(p.tool_calls.at(0).name, "a");
  // parallel_tool_calls false: one call only.
  r.parallel_tool_calls = false;
  {
    auto c = MakeToolChoiceConstraint(r, tok(), texts())();
    for (int32_t id : Ids("\n\n<" + kDsml + "tool_calls>\n" + Call("a", "") + "<")) {
      ASSERT_TRUE(c->Allows(id));
      c->Accept(id);
    }
    EXPECT_FALSE(c->Allows(Ids(kDsml)[0]));  // no second invoke
  }
  r.parallel_tool_calls = true;
  r.tool_choice = "function";
  r.tool_choice_name = "b";
  const std::string named = MakeToolChoiceConstraint(r, tok(), texts())()->Close();
  EXPECT_EQ(ParseDsv4Output(named, Dsv4ThinkingMode::kChat).tool_calls.at(0).name, "b");
  r.api = Api::kCompletion;
  EXPECT_EQ(MakeToolChoiceConstraint(r, tok(), texts()), nullptr);
}

// Arguments checked against the tool's parameters schema.
const char* kWeatherSchema = R"({"type":"object","properties":{
    "city":{"type":"string","maxLength":10},"days":{"type":"integer"},
    "unit":{"enum":["C","F"]}},"required":["city","days"],"additionalProperties":false})";

std::map<std::string, std::shared_ptr<const constrain::Grammar>> WeatherArguments() {
  auto g = constrain::CompileJsonSchema(nlohmann::json::parse(kWeatherSchema));
  EXPECT_TRUE(g.ok());
  return {{"get_weather", *g}};
}

// The parsed call's arguments satisfy kWeatherSchema.
void ExpectWeatherArguments(const std::string& out, int max_tokens) {
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << max_tokens << ": " << out;
  ASSERT_EQ(p.tool_calls.size(), 1u) << out;
  const auto args = nlohmann::json::parse(p.tool_calls[0].arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << max_tokens << ": " << p.tool_calls[0].arguments;
  for (const auto& [key, value] : args.items()) {
    EXPECT_TRUE(key == "city" || key == "days" || key == "unit") << key << " in " << out;
  }
  ASSERT_TRUE(args.contains("city") && args.contains("days")) << out;
  EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 10) << out;
  EXPECT_TRUE(args["days"].is_number_integer()) << out;
  if (args.contains("unit")) {
    EXPECT_TRUE(args["unit"] == "C" || args["unit"] == "F") << out;
  }
}

TEST_F(ToolChoiceTest, ValidArgumentsPassUntouched) {
  const std::string script =
      Block(Call("get_weather", Param("city", "Paris", true) + Param("days", "3", false) +
                                    Param("unit", "\"C\"", false)));
  ToolCallConstraint c = Make({"get_weather"}, true, false, 0, WeatherArguments());
  int refused = 0;
  EXPECT_EQ(Drive(c, Ids(script), 300, &refused), script);
  EXPECT_EQ(refused, 0);
}

TEST_F(ToolChoiceTest, ArgumentsAreBentIntoTheSchema) {
  // days as text, an unknown key, a unit outside the enum, city too long.
  const std::string script =
      Block(Call("get_weather", Param("town", "Paris", true) + Param("days", "three", true) +
                                    Param("unit", "\"K\"", false) +
                                    Param("city", "Llanfairpwllgwyngyll", true)));
  ToolCallConstraint c = Make({"get_weather"}, true, false, 0, WeatherArguments());
  int refused = 0;
  const std::string out = Drive(c, Ids(script), 300, &refused);
  EXPECT_GT(refused, 0);
  ExpectWeatherArguments(out, 300);
}

TEST_F(ToolChoiceTest, MissingRequiredArgumentsAreAddedFromEveryStoppingPoint) {
  const std::string script =
      Block(Call("get_weather", Param("city", "Oslo", true) + Param("unit", "\"F\"", false)));
  for (int max_tokens = 1; max_tokens <= 60; max_tokens += 3) {
    ToolCallConstraint c = Make({"get_weather"}, true, false, 0, WeatherArguments());
    ExpectWeatherArguments(Drive(c, Ids(script), max_tokens), max_tokens);
  }
}

// tool_choice auto: content passes untouched and may end the turn; a call the
// model opens has its arguments bent into the tool's schema, and a call cut
// short is completed; EOS is refused inside the call-block marker.
TEST_F(ToolChoiceTest, AutoLeavesContentAloneAndChecksTheArgumentsOfACall) {
  {
    ToolCallConstraint c = Make({"get_weather"}, false, false, 0, WeatherArguments(), true);
    int refused = 0;
    EXPECT_EQ(Drive(c, Ids("It is sunny in Paris."), 50, &refused), "It is sunny in Paris.");
    EXPECT_EQ(refused, 0);
  }
  const std::string bad_call =
      Block(Call("get_weather", Param("town", "Paris", true) + Param("days", "three", true)));
  for (int max_tokens : {12, 40, 300}) {
    ToolCallConstraint c = Make({"get_weather"}, false, false, 0, WeatherArguments(), true);
    int refused = 0;
    const std::string out = Drive(c, Ids("Let me check." + bad_call), max_tokens, &refused);
    EXPECT_EQ(out.rfind("Let me check.", 0), 0u) << out;
    if (max_tokens < 20) continue;  // cut before the call opened: content only
    EXPECT_GT(refused, 0);
    ExpectWeatherArguments(out, max_tokens);
  }
  {
    // Reasoning first (thinking), then a valid call: untouched.
    const std::string script =
        "weighing it</think>" +
        Block(Call("get_weather", Param("city", "Oslo", true) + Param("days", "2", false)));
    ToolCallConstraint c = Make({"get_weather"}, false, true, 0, WeatherArguments(), true);
    int refused = 0;
    EXPECT_EQ(Drive(c, Ids(script), 300, &refused), script);
    EXPECT_EQ(refused, 0);
  }
  ToolCallConstraint c = Make({"get_weather"}, false, false, 0, WeatherArguments(), true);
  for (int32_t id : Ids("Hi <" + kDsml + "tool")) c.Accept(id);
  EXPECT_FALSE(c.in_call());
  EXPECT_FALSE(c.Allows(tok().eos_id()));
}

// A pydantic model's schema: required properties, additional ones allowed
// (no additionalProperties). Cut inside a parameter's name, Close writes the
// missing required ones, not made-up additional keys.
TEST_F(ToolChoiceTest, RequiredArgumentsAreAddedWhereAdditionalOnesAreAllowed) {
  auto g = constrain::CompileJsonSchema(nlohmann::json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
      "required": ["name", "age"]})"));
  ASSERT_TRUE(g.ok());
  const std::string script =
      Block(Call("Person", Param("name", "Ada", true) + Param("age", "36", false)));
  for (int max_tokens = 1; max_tokens <= 40; ++max_tokens) {
    ToolCallConstraint c = Make({"Person"}, true, false, 0, {{"Person", *g}});
    const std::string out = Drive(c, Ids(script), max_tokens);
    EXPECT_LT(out.size(), 400u) << max_tokens << ": " << out;
    const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat);
    ASSERT_FALSE(p.malformed) << p.error << "\n" << max_tokens << ": " << out;
    ASSERT_EQ(p.tool_calls.size(), 1u) << out;
    const auto args = nlohmann::json::parse(p.tool_calls[0].arguments, nullptr, false);
    ASSERT_TRUE(args.is_object()) << max_tokens << ": " << p.tool_calls[0].arguments;
    EXPECT_TRUE(args.contains("name") && args["name"].is_string()) << out;
    EXPECT_TRUE(args.contains("age") && args["age"].is_number_integer()) << out;
  }
}

TEST_F(ToolChoiceTest, FactoryCompilesObjectParameterSchemas) {
  GenerationRequest r;
  r.api = Api::kChat;
  r.tools = nlohmann::ordered_json::parse(std::string(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": )") +
                                          kWeatherSchema + R"(}},
      {"type": "function", "function": {"name": "free", "parameters":
          {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}])");
  r.tool_choice = "function";
  r.tool_choice_name = "get_weather";
  ConstraintFactory f = MakeToolChoiceConstraint(r, tok(), texts());
  ASSERT_NE(f, nullptr);
  auto c = f();
  // "days" as a string is refused at its type marker.
  int refused = 0;
  const std::string script =
      Block(Call("get_weather", Param("city", "Rome", true) + Param("days", "2", true)));
  std::string out;
  {
    ToolCallConstraint& tc = static_cast<ToolCallConstraint&>(*c);
    out = Drive(tc, Ids(script), 300, &refused);
  }
  EXPECT_GT(refused, 0);
  ExpectWeatherArguments(out, 300);
  // "free" has a keyword outside the subset: its arguments stay free.
  r.tool_choice_name = "free";
  auto free_call = MakeToolChoiceConstraint(r, tok(), texts())();
  const std::string free_script = Block(Call("free", Param("anything", "x", true)));
  EXPECT_EQ(Drive(static_cast<ToolCallConstraint&>(*free_call), Ids(free_script), 300, &refused),
            free_script);
}

}  // namespace
}  // namespace dsv4::server

namespace dsv4::server {
namespace {

// DeepSeek-V4.1's tags ("<｜DSML｜ calls>", a space after the DSML token):
// its well-formed call passes untouched, a plain answer becomes a V4.1 call
// that V4.1's output parser reads, and V4's block name is refused.
TEST_F(ToolChoiceTest, V41TagsAreEnforcedAndParse) {
  const std::string d = kDsml + " ";
  auto block41 = [&](const std::string& name, const std::string& params) {
    return "\n\n<" + d + "calls>\n<" + d + "invoke name=\"" + name + "\">\n" + params + "</" + d +
           "invoke>\n</" + d + "calls>";
  };
  const std::string script =
      block41("get_weather",
              "<" + d + "parameter name=\"city\" string=\"true\">Paris</" + d + "parameter>\n");
  auto make41 = [&] {
    ToolCallSpec spec;
    spec.names = {"get_weather", "get_time"};
    spec.v41 = true;
    spec.eos_id = tok().eos_id();
    return ToolCallConstraint(texts(), spec);
  };
  ToolCallConstraint c = make41();
  int refused = 0;
  EXPECT_EQ(Drive(c, Ids(script), 200, &refused), script);
  EXPECT_EQ(refused, 0);

  ToolCallConstraint plain = make41();
  const std::string out = Drive(plain, Ids("The weather is nice today."), 100, &refused);
  EXPECT_GT(refused, 0);
  const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kChat, DsmlDialect::kV41);
  ASSERT_FALSE(p.malformed) << p.error << "\n" << out;
  ASSERT_GE(p.tool_calls.size(), 1u);
  EXPECT_TRUE(p.tool_calls[0].name == "get_weather" || p.tool_calls[0].name == "get_time");

  ToolCallConstraint v4_block = make41();
  refused = 0;
  Drive(v4_block, Ids(Block(Call("get_weather", ""))), 100, &refused);
  EXPECT_GT(refused, 0);  // V4's "<｜DSML｜tool_calls>" is not V4.1's block
}

}  // namespace
}  // namespace dsv4::server
