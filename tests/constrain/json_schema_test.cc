// The JSON Schema compiler: what it builds, and which error each bad schema gets.
#include "constrain/json_schema.h"

#include <gtest/gtest.h>

namespace dsv4::constrain {
namespace {

using Json = nlohmann::json;

Status CompileError(const std::string& schema) {
  Result<std::shared_ptr<const Grammar>> g = CompileJsonSchema(Json::parse(schema));
  return g.ok() ? Status::Ok() : g.status();
}

TEST(JsonSchemaTest, ObjectPropertiesSortedWithRequiredMask) {
  auto g = CompileJsonSchema(Json::parse(R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"string"}},"required":["b"],
      "additionalProperties":false})"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const Node& n = (*g)->nodes[(*g)->root];
  ASSERT_EQ(n.kind, NodeKind::kObject);
  ASSERT_EQ(n.properties.size(), 2u);
  EXPECT_EQ(n.properties[0].key, "a");
  EXPECT_EQ(n.properties[1].key, "b");
  EXPECT_EQ(n.required_mask, 2u);
  EXPECT_EQ(n.additional, -1);
  EXPECT_EQ(n.min_value, R"({"b":0})");
}

TEST(JsonSchemaTest, TypeListBecomesAnyOf) {
  auto g = CompileJsonSchema(Json::parse(R"({"type":["string","null"],"maxLength":3})"));
  ASSERT_TRUE(g.ok());
  const Node& n = (*g)->nodes[(*g)->root];
  ASSERT_EQ(n.kind, NodeKind::kAnyOf);
  ASSERT_EQ(n.alternatives.size(), 2u);
  EXPECT_EQ((*g)->nodes[n.alternatives[0]].max_length, 3u);
  EXPECT_TRUE(n.first.test('"'));
  EXPECT_TRUE(n.first.test('n'));
  EXPECT_FALSE(n.first.test('{'));
}

TEST(JsonSchemaTest, EnumFilteredByTypeAndDumpedCompact) {
  auto g = CompileJsonSchema(Json::parse(R"({"type":"string","enum":["x",1,{"a": 2}]})"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->nodes[(*g)->root].literals, std::vector<std::string>{"\"x\""});
  g = CompileJsonSchema(Json::parse(R"({"enum":[{"a": 2}, [1, 2]]})"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->nodes[(*g)->root].literals, (std::vector<std::string>{"[1,2]", R"({"a":2})"}));
}

TEST(JsonSchemaTest, RefsToDefsAreSharedNotRecompiled) {
  auto g = CompileJsonSchema(Json::parse(R"({"$defs":{"P":{"type":"object","properties":{
      "x":{"type":"number"}}}},"type":"object","properties":{"a":{"$ref":"#/$defs/P"},
      "b":{"$ref":"#/$defs/P"}}})"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const Node& n = (*g)->nodes[(*g)->root];
  EXPECT_EQ(n.properties[0].node, n.properties[1].node);
}

TEST(JsonSchemaTest, UnsupportedKeywordIsNamedWithItsPath) {
  const Status s = CompileError(R"({"type":"object","properties":{"age":{"type":"integer",
      "minimum":0}}})");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("/properties/age/minimum"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'minimum'"), std::string::npos);
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"^a"})").code(), StatusCode::kUnimplemented);
  EXPECT_NE(CompileError(R"({"type":"string","pattern":"^a"})").message().find("pattern"),
            std::string::npos);
}

TEST(JsonSchemaTest, RecursiveRefRefused) {
  const Status s = CompileError(R"({"$defs":{"N":{"type":"object","properties":{
      "next":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"})");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("recursive reference \"#/$defs/N\""), std::string::npos)
      << s.message();
  const Status root = CompileError(R"({"type":"array","items":{"$ref":"#"}})");
  EXPECT_EQ(root.code(), StatusCode::kUnimplemented);
  EXPECT_NE(root.message().find("recursive"), std::string::npos);
}

TEST(JsonSchemaTest, BadRefs) {
  Status s = CompileError(R"({"$ref":"#/$defs/Missing"})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not exist"), std::string::npos);
  s = CompileError(R"({"$ref":"https://example.com/s.json"})");
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("only references inside the schema"), std::string::npos);
  s = CompileError(R"({"$ref":7})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("$ref must be a string"), std::string::npos);
}

TEST(JsonSchemaTest, MalformedValuesNameTheField) {
  struct Case {
    const char* schema;
    StatusCode code;
    const char* needle;
  } cases[] = {
      {R"({"type":"strin"})", StatusCode::kInvalidArgument, "unknown type \"strin\""},
      {R"({"type":7})", StatusCode::kInvalidArgument, "/type must be"},
      {R"({"type":"string","maxLength":-1})", StatusCode::kInvalidArgument, "'maxLength'"},
      {R"({"type":"string","minLength":5,"maxLength":2})", StatusCode::kInvalidArgument,
       "minLength 5 is above maxLength 2"},
      {R"({"type":"array","minItems":3,"maxItems":1})", StatusCode::kInvalidArgument,
       "minItems 3 is above maxItems 1"},
      {R"({"type":"array","minItems":100000})", StatusCode::kUnimplemented, "'minItems'"},
      {R"({"type":"array","items":[{"type":"string"}]})", StatusCode::kUnimplemented,
       "tuple validation"},
      {R"({"anyOf":[]})", StatusCode::kInvalidArgument, "anyOf must be a non-empty array"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", StatusCode::kUnimplemented,
       "'type' together with 'anyOf'"},
      {R"({"allOf":[{"type":"string"},{"maxLength":2}]})", StatusCode::kUnimplemented,
       "allOf with one schema"},
      {R"({"enum":[]})", StatusCode::kInvalidArgument, "enum must be a non-empty array"},
      {R"({"type":"integer","enum":["a"]})", StatusCode::kUnimplemented, "no allowed value"},
      {R"({"properties":{"a":{}},"required":["b"],"additionalProperties":false})",
       StatusCode::kInvalidArgument, "\"b\" is required"},
      {R"({"properties":[]})", StatusCode::kInvalidArgument, "properties must be an object"},
      {R"({"type":"object","properties":{"a":5}})", StatusCode::kInvalidArgument,
       "/properties/a: a schema must be an object or a boolean"},
      {R"(false)", StatusCode::kUnimplemented, "allows no value"},
      {R"({"not":{}})", StatusCode::kUnimplemented, "keyword 'not'"},
      {R"({"type":"object","patternProperties":{}})", StatusCode::kUnimplemented,
       "keyword 'patternProperties'"},
  };
  for (const Case& c : cases) {
    const Status s = CompileError(c.schema);
    EXPECT_EQ(s.code(), c.code) << c.schema << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.schema << ": " << s.message();
  }
}

TEST(JsonSchemaTest, LimitsBoundUntrustedSchemas) {
  Json deep = {{"type", "string"}};
  for (int i = 0; i < kMaxDepth + 2; ++i) deep = {{"type", "array"}, {"items", deep}};
  Result<std::shared_ptr<const Grammar>> g = CompileJsonSchema(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nested too deeply"), std::string::npos);

  Json props = Json::object();
  for (int i = 0; i <= kMaxProperties; ++i) props["p" + std::to_string(i)] = Json::object();
  g = CompileJsonSchema({{"type", "object"}, {"properties", props}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("65 properties is not supported"), std::string::npos)
      << g.status().ToString();

  // A chain of required objects whose smallest value doubles at each level.
  Json defs = Json::object();
  defs["L0"] = {{"type", "string"}, {"minLength", 64}};
  for (int i = 1; i < 20; ++i) {
    const std::string prev = "#/$defs/L" + std::to_string(i - 1);
    defs["L" + std::to_string(i)] = {
        {"type", "object"},
        {"properties", {{"a", {{"$ref", prev}}}, {"b", {{"$ref", prev}}}}},
        {"required", {"a", "b"}}};
  }
  g = CompileJsonSchema({{"$defs", defs}, {"$ref", "#/$defs/L19"}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("too large"), std::string::npos) << g.status().ToString();
}

TEST(JsonSchemaTest, CacheCompilesOnce) {
  SchemaCache cache(2);
  const Json a = Json::parse(R"({"type":"string"})");
  auto g1 = cache.Get(a);
  auto g2 = cache.Get(a);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1->get(), g2->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_TRUE(cache.Get(Json::parse(R"({"type":"number"})")).ok());
  EXPECT_TRUE(cache.Get(Json::parse(R"({"type":"integer"})")).ok());
  EXPECT_EQ(cache.size(), 2u);
  auto g3 = cache.Get(a);  // evicted: compiled again
  EXPECT_NE(g3->get(), g1->get());
  EXPECT_FALSE(cache.Get(Json::parse(R"({"type":"x"})")).ok());
}

}  // namespace
}  // namespace dsv4::constrain
