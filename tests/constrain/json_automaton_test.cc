// The JSON automaton: which texts it accepts for a schema, completions, keys.
#include "constrain/json_automaton.h"

#include <gtest/gtest.h>

namespace dsv4::constrain {
namespace {

using Json = nlohmann::json;

std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  auto g = CompileJsonSchema(Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

// Whether `text` is a complete value of the grammar.
bool Accepts(const JsonAutomaton& a, std::string_view text) {
  State s = a.Start();
  return a.FeedAll(&s, text) && a.Complete(s);
}
// Whether `text` is a prefix of some value of the grammar.
bool Prefix(const JsonAutomaton& a, std::string_view text) {
  State s = a.Start();
  return a.FeedAll(&s, text);
}

TEST(JsonAutomatonTest, FreeJsonObject) {
  JsonAutomaton a(JsonObjectGrammar());
  for (const char* ok :
       {"{}", " {\"a\": 1}", "{\"a\":[1,2.5e-3,{\"b\":null}],\"c\":\"\\u00e9\\n\"}",
        "{\"k\": true , \"l\" : false}", "{\"\xc3\xa9\":\"\xf0\x9f\x98\x80\"}"}) {
    EXPECT_TRUE(Accepts(a, ok)) << ok;
  }
  for (const char* bad :
       {"[]", "1", "{\"a\"}", "{\"a\":}", "{,}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1.}",
        "{\"a\":-}", "{\"a\":tru}", "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{} ", "{}}"}) {
    EXPECT_FALSE(Accepts(a, bad)) << bad;
  }
  EXPECT_TRUE(Prefix(a, "{\"a\": [1, {\"b\""));
  EXPECT_FALSE(Prefix(a, "x"));
}

TEST(JsonAutomatonTest, ObjectPropertiesRequiredAndAdditional) {
  JsonAutomaton a(Compile(R"({"type":"object","properties":{"name":{"type":"string"},
      "age":{"type":"integer"},"nick":{"type":"string"}},"required":["name","age"],
      "additionalProperties":false})"));
  EXPECT_TRUE(Accepts(a, R"({"name":"x","age":3})"));
  EXPECT_TRUE(Accepts(a, R"({ "age" : -12 , "nick":"", "name" : "y" })"));
  EXPECT_FALSE(Accepts(a, R"({"name":"x"})"));                     // age missing
  EXPECT_FALSE(Accepts(a, R"({"name":"x","age":3.5})"));           // not an integer
  EXPECT_FALSE(Accepts(a, R"({"name":"x","age":3,"z":1})"));       // no additional properties
  EXPECT_FALSE(Accepts(a, R"({"name":"x","name":"y","age":1})"));  // duplicate
  EXPECT_TRUE(Prefix(a, R"({"na)"));
  EXPECT_FALSE(Prefix(a, R"({"nb)"));                 // no property starts so
  EXPECT_TRUE(Prefix(a, R"({"name":"x","age":3,)"));  // "nick" is left
  EXPECT_TRUE(Prefix(a, R"({"name":"x","age":3,"n)"));
  EXPECT_FALSE(Prefix(a, R"({"name":"x","age":3,"na)"));  // "name" was seen

  JsonAutomaton open(Compile(R"({"type":"object","properties":{"a":{"type":"integer"}},
      "additionalProperties":{"type":"boolean"}})"));
  EXPECT_TRUE(Accepts(open, R"({"a":1,"ab":true})"));
  EXPECT_FALSE(Accepts(open, R"({"a":true})"));
  EXPECT_FALSE(Accepts(open, R"({"b":1})"));
  EXPECT_FALSE(Accepts(open, R"({"b\n":true})"));  // an additional key has no escapes
}

TEST(JsonAutomatonTest, ArraysCountItems) {
  JsonAutomaton a(Compile(R"({"type":"array","items":{"type":"integer"},"minItems":1,
      "maxItems":3})"));
  EXPECT_FALSE(Accepts(a, "[]"));
  EXPECT_TRUE(Accepts(a, "[1]"));
  EXPECT_TRUE(Accepts(a, "[ 1 , 2,3 ]"));
  EXPECT_FALSE(Prefix(a, "[1,2,3,"));
  EXPECT_FALSE(Accepts(a, "[1,\"a\"]"));
  JsonAutomaton none(Compile(R"({"type":"array","maxItems":0})"));
  EXPECT_TRUE(Accepts(none, "[]"));
  EXPECT_FALSE(Prefix(none, "[1"));
}

TEST(JsonAutomatonTest, StringLengthsCountCodePoints) {
  JsonAutomaton a(Compile(R"({"type":"string","minLength":2,"maxLength":3})"));
  EXPECT_FALSE(Accepts(a, "\"a\""));
  EXPECT_TRUE(Accepts(a, "\"ab\""));
  EXPECT_TRUE(Accepts(a, "\"\xc3\xa9\\n\xe4\xb8\xad\""));  // 3 code points, 7 bytes
  EXPECT_FALSE(Prefix(a, "\"abcd"));
  EXPECT_TRUE(Accepts(a, "\"\\u0041b\""));
}

TEST(JsonAutomatonTest, FormatsByShape) {
  JsonAutomaton date(Compile(R"({"type":"string","format":"date"})"));
  EXPECT_TRUE(Accepts(date, "\"2024-02-29\""));
  EXPECT_FALSE(Accepts(date, "\"2024-2-29\""));
  JsonAutomaton uuid(Compile(R"({"type":"string","format":"uuid"})"));
  EXPECT_TRUE(Accepts(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(Prefix(uuid, "\"123g"));
  JsonAutomaton email(Compile(R"({"type":"string","format":"email"})"));  // an annotation
  EXPECT_TRUE(Accepts(email, "\"anything\""));
}

TEST(JsonAutomatonTest, NumbersEndAtTheContainersByte) {
  JsonAutomaton a(Compile(R"({"type":"number"})"));
  for (const char* ok : {"0", "-0", "12", "1.5", "-1.25e+10", "3E5", "0.0"}) {
    EXPECT_TRUE(Accepts(a, ok)) << ok;
  }
  for (const char* bad : {"01", "-", "1.", ".5", "1e", "+1", "1e+", "1 "}) {
    EXPECT_FALSE(Accepts(a, bad)) << bad;
  }
  JsonAutomaton i(Compile(R"({"type":"array","items":{"type":"integer"}})"));
  EXPECT_TRUE(Accepts(i, "[10,-3 ,0]"));
  EXPECT_FALSE(Prefix(i, "[1.5"));
}

TEST(JsonAutomatonTest, EnumConstAndAnyOf) {
  JsonAutomaton e(Compile(R"({"enum":["red","green",1,10,null]})"));
  for (const char* ok : {"\"red\"", "\"green\"", "1", "10", "null"}) {
    EXPECT_TRUE(Accepts(e, ok)) << ok;
  }
  for (const char* bad : {"\"blue\"", "100", "\"re\"", "2"}) EXPECT_FALSE(Accepts(e, bad)) << bad;
  JsonAutomaton inside(Compile(R"({"type":"array","items":{"enum":[1,12]}})"));
  EXPECT_TRUE(Accepts(inside, "[1,12,1]"));
  EXPECT_FALSE(Accepts(inside, "[123]"));

  // Two object alternatives share '{': both run until the key tells them apart.
  JsonAutomaton any(Compile(R"({"anyOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
       "required":["kind","x"],"additionalProperties":false},
      {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},
       "required":["kind","y"],"additionalProperties":false},
      {"type":"integer"}]})"));
  State s = any.Start();
  ASSERT_TRUE(any.FeedAll(&s, "{\"kind\":"));
  EXPECT_EQ(s.configurations(), 2u);
  ASSERT_TRUE(any.FeedAll(&s, "\"b\""));
  EXPECT_EQ(s.configurations(), 1u);
  EXPECT_TRUE(Accepts(any, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(Accepts(any, R"({"kind":"b","y":"z"})"));
  EXPECT_FALSE(Accepts(any, R"({"kind":"a","y":"z"})"));
  EXPECT_TRUE(Accepts(any, "7"));
}

TEST(JsonAutomatonTest, ConfigurationsAreBounded) {
  // 40 object alternatives that agree on every byte of {"a":1}.
  nlohmann::json alts = nlohmann::json::array();
  for (int i = 0; i < 40; ++i) {
    alts.push_back(
        {{"type", "object"},
         {"properties",
          {{"a", {{"type", "integer"}}}, {"b" + std::to_string(i), nlohmann::json::object()}}}});
  }
  JsonAutomaton a(*CompileJsonSchema({{"anyOf", alts}}));
  State s = a.Start();
  ASSERT_TRUE(a.FeedAll(&s, "{\"a\":1"));
  EXPECT_EQ(s.configurations(), kMaxConfigurations);
  EXPECT_TRUE(a.FeedAll(&s, ",\"b3\":null}"));  // among the first alternatives kept
  EXPECT_TRUE(a.Complete(s));
}

TEST(JsonAutomatonTest, CompletionClosesEveryPrefix) {
  const char* schema = R"({"$defs":{"P":{"type":"object","properties":{
      "tags":{"type":"array","items":{"type":"string","minLength":2},"minItems":2},
      "when":{"type":"string","format":"date-time"},"n":{"type":"number"}},
      "required":["tags","when","n"],"additionalProperties":false}},
      "type":"object","properties":{"p":{"$ref":"#/$defs/P"},"q":{"enum":[true,"x"]}},
      "required":["p","q"],"additionalProperties":false})";
  JsonAutomaton a(Compile(schema));
  const std::string full =
      R"({"p":{"n":-1.5e3,"tags":["ab","\u00e9\u00e9"],"when":"2024-01-02T03:04:05Z"},"q":"x"})";
  EXPECT_TRUE(Accepts(a, full));
  for (size_t k = 0; k < full.size(); ++k) {
    State s = a.Start();
    ASSERT_TRUE(a.FeedAll(&s, full.substr(0, k))) << k;
    const std::string c = a.Completion(s);
    EXPECT_TRUE(Accepts(a, full.substr(0, k) + c)) << full.substr(0, k) << " + " << c;
  }
  EXPECT_EQ(a.Completion(a.Start()),
            R"({"p":{"n":0,"tags":["aa","aa"],"when":"2000-01-01T00:00:00Z"},"q":"x"})");
}

// With additional properties allowed, a key begun where a required property
// is still missing completes to that property, not to an additional key.
TEST(JsonAutomatonTest, KeyCompletionPrefersAMissingRequiredProperty) {
  JsonAutomaton a(Compile(R"({"type":"object","properties":{"name":{"type":"string"},
      "age":{"type":"integer"}},"required":["name","age"]})"));
  State s = a.Start();
  ASSERT_TRUE(a.FeedAll(&s, "{\""));
  EXPECT_EQ(a.Completion(s), R"(age":0,"name":""})");  // properties in name order
  ASSERT_TRUE(a.FeedAll(&s, R"(name":"x","a)"));
  EXPECT_EQ(a.Completion(s), R"(ge":0})");
  // All required given: a begun key closes as it is (an additional one).
  s = a.Start();
  ASSERT_TRUE(a.FeedAll(&s, R"({"name":"x","age":1,"zz)"));
  EXPECT_EQ(a.Completion(s), R"(":0})");
}

// A key cut inside an escape or a character goes on as the property's name.
TEST(JsonAutomatonTest, KeyCompletionInsideAnEscapeOrACharacter) {
  JsonAutomaton a(Compile(R"({"type":"object","properties":{"q\"uote":{"type":"integer"},
      "c\u00e9":{"type":"boolean"},"a":{"type":"string"}},"required":["q\"uote","c\u00e9"]})"));
  const std::string full = "{\"q\\\"uote\":1,\"c\u00e9\":true,\"a\":\"\"}";
  ASSERT_TRUE(Accepts(a, full));
  for (size_t k = 1; k < full.size(); ++k) {
    State s = a.Start();
    ASSERT_TRUE(a.FeedAll(&s, full.substr(0, k))) << k;
    const std::string c = a.Completion(s);
    EXPECT_TRUE(Accepts(a, full.substr(0, k) + c)) << full.substr(0, k) << " + " << c;
  }
  State s = a.Start();
  ASSERT_TRUE(a.FeedAll(&s, "{\"q\\"));
  EXPECT_EQ(a.Completion(s), "\"uote\":0,\"c\u00e9\":true}");
}

TEST(JsonAutomatonTest, WhitespaceRunsAreBounded) {
  JsonAutomaton a(JsonObjectGrammar());
  EXPECT_TRUE(Prefix(a, "{" + std::string(kMaxWhitespace, ' ')));
  EXPECT_FALSE(Prefix(a, "{" + std::string(kMaxWhitespace + 1, ' ')));
  EXPECT_TRUE(Accepts(a, "{" + std::string(kMaxWhitespace, '\n') + "\"a\"" +
                             std::string(kMaxWhitespace, ' ') + ":1}"));
  EXPECT_TRUE(Accepts(a, "{\"s\":\"" + std::string(100, ' ') + "\"}"));  // inside a string: text
}

TEST(JsonAutomatonTest, DoneAfterTheRootCloses) {
  JsonAutomaton a(JsonObjectGrammar());
  State s = a.Start();
  ASSERT_TRUE(a.FeedAll(&s, "{\"a\":1}"));
  EXPECT_TRUE(a.Complete(s));
  EXPECT_FALSE(a.CanContinue(s));
  JsonAutomaton n(Compile(R"({"type":"integer"})"));
  s = n.Start();
  ASSERT_TRUE(n.FeedAll(&s, "12"));
  EXPECT_TRUE(n.Complete(s));
  EXPECT_TRUE(n.CanContinue(s));  // "123" may follow
}

TEST(JsonAutomatonTest, KeyCanonicalisesRoomyCounts) {
  JsonAutomaton a(Compile(R"({"type":"string","maxLength":100})"));
  State s1 = a.Start(), s2 = a.Start(), s3 = a.Start();
  ASSERT_TRUE(a.FeedAll(&s1, "\"ab"));
  ASSERT_TRUE(a.FeedAll(&s2, "\"abcdef"));
  ASSERT_TRUE(a.FeedAll(&s3, std::string("\"") + std::string(95, 'a')));
  EXPECT_EQ(a.Key(s1, 8), a.Key(s2, 8));  // both have >= 8 code points of room
  EXPECT_NE(a.Key(s1, 8), a.Key(s3, 8));  // 5 left: a long token would not fit
}

}  // namespace
}  // namespace dsv4::constrain
