// Structured output constraints (server/structured_output.h) on the real
// DeepSeek-V4 vocabulary: a scripted "model" proposes tokens, the test drives
// the constraint the way the engine does (the proposal when allowed, else the
// lowest allowed id after Mask), and the output must parse
// (chat_output_parser) into free reasoning and a JSON answer valid for the
// schema, from every stopping point.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/loader.h"
#include "tokenizer/chat_output_parser.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::json;

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t =
        LoadTokenizer(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(t).value().release();
    vocab_ =
        new std::shared_ptr<const StructuredVocabulary>(BuildStructuredVocabulary(*tokenizer_));
  }
  static const Tokenizer& tok() { return *tokenizer_; }

  static std::unique_ptr<StructuredOutputConstraint> Make(const std::string& schema, bool thinking,
                                                          int64_t reserve = 0) {
    auto g = constrain::CompileJsonSchema(Json::parse(schema));
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    StructuredSpec spec;
    spec.thinking = thinking;
    spec.stop_ids = {tok().eos_id()};
    spec.reserve_tokens = reserve;
    return std::make_unique<StructuredOutputConstraint>(*g, *vocab_, spec);
  }

  // Drives `c` over `script` (then EOS) for at most `max_tokens`; returns the
  // text including Close(). `refused` counts the proposals turned down.
  std::string Drive(StructuredOutputConstraint& c, const std::string& script_text, int max_tokens,
                    int* refused = nullptr) {
    const std::vector<int32_t> script = tok().Encode(script_text, false);
    std::string out;
    std::vector<float> logits(tok().vocab_size());
    for (int k = 0; k < max_tokens && !c.done(); ++k) {
      c.Prepare(max_tokens - k);
      int32_t next = k < static_cast<int>(script.size()) ? script[k] : tok().eos_id();
      if (!c.Allows(next)) {
        if (refused != nullptr) ++*refused;
        std::fill(logits.begin(), logits.end(), 0.0f);
        c.Mask(logits);
        next = -1;
        for (size_t i = 0; i < logits.size(); ++i) {
          if (!std::isinf(logits[i])) {
            next = static_cast<int32_t>(i);
            break;
          }
        }
        EXPECT_GE(next, 0) << "nothing allowed after " << out;
        if (next < 0) break;
        EXPECT_TRUE(c.Allows(next));
      }
      if (next == tok().eos_id()) break;
      c.Accept(next);
      out += tok().Decode(next);
    }
    return out + c.Close();
  }

  static Tokenizer* tokenizer_;
  static std::shared_ptr<const StructuredVocabulary>* vocab_;
};

Tokenizer* StructuredOutputTest::tokenizer_ = nullptr;
std::shared_ptr<const StructuredVocabulary>* StructuredOutputTest::vocab_ = nullptr;

const char* kSchema = R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
    "days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false})";

TEST_F(StructuredOutputTest, ConformingAnswerPassesUnchanged) {
  auto c = Make(kSchema, false);
  int refused = 0;
  const std::string answer = R"({"city": "Paris", "days": 3})";
  EXPECT_EQ(Drive(*c, answer, 100, &refused), answer);
  EXPECT_EQ(refused, 0);
  EXPECT_TRUE(c->done());
}

TEST_F(StructuredOutputTest, NonJsonIsBentIntoTheSchemaFromEveryStoppingPoint) {
  for (int max_tokens = 1; max_tokens <= 40; ++max_tokens) {
    auto c = Make(kSchema, false);
    const std::string out = Drive(*c, "Sure! The city is Paris.", max_tokens);
    const Json v = Json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << max_tokens << ": " << out;
    EXPECT_TRUE(v["city"].is_string() && v["days"].is_number_integer()) << out;
    EXPECT_LE(v["city"].get<std::string>().size(), 12u) << out;
  }
}

TEST_F(StructuredOutputTest, ThinkingReasonsFreelyThenAnswers) {
  for (int max_tokens : {3, 8, 20, 60}) {
    auto c = Make(kSchema, true, /*reserve=*/4);
    const std::string out = Drive(
        *c, "Let me think <think> about {it}.</think>" + std::string(R"({"city":"Rome","days":2})"),
        max_tokens);
    // The parser sees reasoning, then JSON content.
    const Dsv4ParsedOutput p = ParseDsv4Output(out, Dsv4ThinkingMode::kThinking);
    ASSERT_FALSE(p.malformed) << out;
    const Json v = Json::parse(p.content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << max_tokens << ": " << out;
    EXPECT_TRUE(v.contains("city") && v.contains("days")) << out;
    if (max_tokens == 60) {
      EXPECT_EQ(v, Json::parse(R"({"city":"Rome","days":2})"));
      EXPECT_EQ(p.reasoning_content.find("<think>"),
                std::string::npos);  // the parser would reject it
      EXPECT_NE(p.reasoning_content.find("Let me think"), std::string::npos);
    }
  }
}

TEST_F(StructuredOutputTest, EosRefusedInReasoningAndBeforeTheJsonEnds) {
  auto c = Make(kSchema, true);
  c->Prepare(100);
  EXPECT_FALSE(c->Allows(tok().eos_id()));
  EXPECT_TRUE(c->stop_strings_apply());
  for (int32_t id : tok().Encode("hmm</think>{", false)) c->Accept(id);
  EXPECT_FALSE(c->reasoning());
  EXPECT_FALSE(c->stop_strings_apply());
  c->Prepare(100);
  EXPECT_FALSE(c->Allows(tok().eos_id()));
  EXPECT_EQ(c->Close(), R"("city":"","days":0})");
}

TEST_F(StructuredOutputTest, MarkupTokensNeverInsideTheJson) {
  auto c = Make(R"({"type":"string"})", false);
  for (int32_t id : tok().Encode("\"abc", false)) c->Accept(id);
  c->Prepare(100);
  for (std::string_view marker : {"<｜User｜>", "</think>", "<｜end▁of▁sentence｜>"}) {
    for (int32_t id : tok().Encode(marker, false)) {
      if (tok().Decode(id) == marker) {
        EXPECT_FALSE(c->Allows(id)) << marker;
      }
    }
  }
  EXPECT_TRUE(c->Allows(tok().Encode("def", false)[0]));
}

TEST_F(StructuredOutputTest, FactoryErrorsNameTheField) {
  constrain::SchemaCache cache;
  GenerationRequest r;
  r.api = Api::kChat;
  r.response_format = ResponseFormat::kJsonSchema;
  r.json_schema = nlohmann::ordered_json::parse(R"({"type":"integer","maximum":3})");
  auto f = MakeStructuredOutputConstraint(r, cache, *vocab_, tok(), {tok().eos_id()}, false);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(f.status().message().find("response_format.json_schema.schema: schema /maximum"),
            std::string::npos)
      << f.status().message();
  r.api = Api::kMessages;
  f = MakeStructuredOutputConstraint(r, cache, *vocab_, tok(), {tok().eos_id()}, false);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("output_config.format.schema"), std::string::npos);
  r.api = Api::kChat;
  r.json_schema = nlohmann::ordered_json::parse(R"({"type":"integer"})");
  r.tool_choice = "required";
  f = MakeStructuredOutputConstraint(r, cache, *vocab_, tok(), {tok().eos_id()}, false);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("forced tool call"), std::string::npos);
  r.tool_choice = "auto";
  f = MakeStructuredOutputConstraint(r, cache, *vocab_, tok(), {tok().eos_id()}, false);
  ASSERT_TRUE(f.ok());
  EXPECT_NE(*f, nullptr);
  r.response_format = ResponseFormat::kText;
  f = MakeStructuredOutputConstraint(r, cache, *vocab_, tok(), {tok().eos_id()}, false);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, nullptr);
}

}  // namespace
}  // namespace dsv4::server
