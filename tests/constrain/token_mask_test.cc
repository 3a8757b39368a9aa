// Token masks: the trie walk (MaskWalker) against its scalar twin
// (ReferenceMask) on many states, the forced-completion mask, the cache, and
// JsonMatcher over a synthetic vocabulary and the DeepSeek-V4 one.
#include "constrain/token_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "constrain/json_matcher.h"
#include "engine/loader.h"

namespace dsv4::constrain {
namespace {

using Json = nlohmann::json;

std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  auto g = CompileJsonSchema(Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

// Every byte, then some multi-byte pieces a BPE vocabulary has (ids 256..).
std::vector<std::string> SyntheticVocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t :
       {"{\"",  "\":",   "\",\"", "\"}",   "}}",       "[\"",      "\"]",  "true", "false",
        "null", "name",  "na",    "age",   "12",       "1.5",      "e+",   ", ",   ": ",
        "\n  ", "\":\"", "\\n",   "\\u00", "\xc3\xa9", "\xe4\xb8", "\xad", "]}",   "},{",
        "  ",   "kind",  "\"a\"", "tags",  "\"\"",     "-1",       "abc"}) {
    v.push_back(t);
  }
  v.push_back("");  // a control token: never allowed
  return v;
}

const char* kSchema = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":6},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["a","bc",12]},"maxItems":3},
    "kind":{"anyOf":[{"type":"null"},{"type":"object","properties":{"x":{"type":"number"}}}]}},
    "required":["name","age"],"additionalProperties":false})";

TEST(TokenMaskTest, TrieWalkMatchesReferenceAlongValidTexts) {
  auto trie = std::make_shared<TokenTrie>(SyntheticVocab());
  for (auto grammar : {Compile(kSchema), JsonObjectGrammar()}) {
    JsonAutomaton a(grammar);
    MaskWalker walker(a, *trie);
    const std::string text =
        "{\"name\": \"\xc3\xa9\\n\\u00e9\", \"age\":-12,\n  \"tags\":[\"a\",12,\"bc\"],"
        "\"kind\":{\"x\":1.5e+3}}";
    State s = a.Start();
    TokenMask fast, ref;
    for (size_t k = 0; k <= text.size(); ++k) {
      walker.Compute(s, &fast);
      ReferenceMask(a, *trie, s, &ref);
      ASSERT_EQ(fast, ref) << "after " << text.substr(0, k);
      if (k == text.size()) break;
      if (!a.FeedAll(&s, text.substr(k, 1))) break;  // the free grammar rejects nothing here
    }
  }
}

TEST(TokenMaskTest, TrieWalkMatchesReferenceOnRandomWalks) {
  // States reached by random allowed tokens, on the DeepSeek-V4 vocabulary.
  auto tokenizer =
      LoadTokenizer(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  std::vector<std::string> texts((*tokenizer)->vocab_size());
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) texts[id] = (*tokenizer)->Decode(id);
  auto trie = std::make_shared<TokenTrie>(std::move(texts));
  EXPECT_GT(trie->node_count(), 100000u);
  JsonAutomaton a(Compile(kSchema));
  MaskWalker walker(a, *trie);
  std::mt19937 rng(7);
  State s = a.Start();
  TokenMask fast, ref;
  for (int step = 0; step < 12 && a.CanContinue(s); ++step) {
    walker.Compute(s, &fast);
    ReferenceMask(a, *trie, s, &ref);
    ASSERT_EQ(fast, ref) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < trie->vocab_size(); ++id) {
      if (MaskTest(fast, id)) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty());
    const int32_t pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(a.FeedAll(&s, trie->text(pick)));
  }
}

TEST(TokenMaskTest, TrieWalkMatchesReferenceWithForksFormatsAndBounds) {
  // Overlapping anyOf alternatives (several configurations at once), a
  // format, enums of numbers that prefix each other, bounded counts.
  const char* schemas[] = {
      R"({"anyOf":[{"type":"object","properties":{"na":{"type":"integer"},"x":{}},
          "additionalProperties":false},{"type":"object","properties":{"name":{"enum":["a","bc"]}},
          "required":["name"]},{"type":"array","items":{"enum":[1,12,-1]},"maxItems":4}]})",
      R"({"type":"array","items":{"type":"string","format":"date"},"minItems":1,"maxItems":2})",
      R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string",
          "minLength":1,"maxLength":3}}},"additionalProperties":{"type":"number"}})",
      R"({"type":"array","items":{"type":"string","minLength":12,"maxLength":30},"minItems":9,
          "maxItems":20})",
  };
  // Masks by key: states with equal keys must allow the same tokens.
  std::map<std::string, TokenMask> by_key;
  int reused = 0;
  auto trie = std::make_shared<TokenTrie>(SyntheticVocab());
  std::mt19937 rng(11);
  for (const char* schema : schemas) {
    JsonAutomaton a(Compile(schema));
    MaskWalker walker(a, *trie);
    for (int walk = 0; walk < 20; ++walk) {
      State s = a.Start();
      TokenMask fast, ref;
      for (int step = 0; step < 40 && a.CanContinue(s); ++step) {
        walker.Compute(s, &fast);
        ReferenceMask(a, *trie, s, &ref);
        ASSERT_EQ(fast, ref) << schema << " walk " << walk << " step " << step;
        const std::string key = std::string(schema) + a.Key(s, trie->max_token_bytes());
        auto [it, fresh] = by_key.emplace(key, fast);
        ASSERT_TRUE(fresh || it->second == fast) << schema << " walk " << walk << " step " << step;
        reused += fresh ? 0 : 1;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->vocab_size(); ++id) {
          if (MaskTest(fast, id)) allowed.push_back(id);
        }
        if (allowed.empty()) {
          ADD_FAILURE() << "dead end in " << schema;
          break;
        }
        ASSERT_TRUE(a.FeedAll(&s, trie->text(allowed[rng() % allowed.size()])));
        // Every live state can still be completed.
        State done = s;
        ASSERT_TRUE(a.FeedAll(&done, a.Completion(s)));
        ASSERT_TRUE(a.Complete(done));
      }
    }
  }
  EXPECT_GT(reused, 100);  // the keys do merge states
}

TEST(TokenMaskTest, PrefixMaskFollowsTheCompletion) {
  TokenTrie trie(SyntheticVocab());
  TokenMask m;
  PrefixMask(trie, "\":\"ab", &m);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    const std::string& t = trie.text(id);
    const bool want = !t.empty() && std::string_view("\":\"ab").starts_with(t);
    EXPECT_EQ(MaskTest(m, id), want) << t;
  }
}

TEST(TokenMaskTest, MatcherMasksCachesAndForcesCompletion) {
  auto vocab = SyntheticVocab();
  const int32_t eos = static_cast<int32_t>(vocab.size());
  vocab.push_back("");  // EOS: a control token
  auto trie = std::make_shared<TokenTrie>(vocab);
  auto grammar = Compile(kSchema);
  JsonMatcher m(grammar, trie, {eos});
  std::vector<float> logits(vocab.size());
  const auto masked = [&] {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m.Mask(logits);
    std::vector<int32_t> ok;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!std::isinf(logits[i])) ok.push_back(static_cast<int32_t>(i));
    }
    return ok;
  };
  m.Prepare(1000);
  EXPECT_FALSE(m.forced());
  std::vector<int32_t> ok = masked();
  // Whitespace or '{' or the "{\"" piece; never EOS or the empty control token.
  for (int32_t id : ok) {
    EXPECT_TRUE(m.Allows(id));
    EXPECT_NE(id, eos);
  }
  EXPECT_TRUE(m.Allows('{'));
  EXPECT_FALSE(m.Allows('['));
  EXPECT_FALSE(m.Allows(eos));
  const int64_t misses = grammar->masks->misses();
  masked();  // the same state: from the cache
  EXPECT_EQ(grammar->masks->misses(), misses);
  EXPECT_GE(grammar->masks->hits(), 1);

  ASSERT_TRUE(m.AcceptBytes("{\"name\":\"ab"));
  // Few tokens left: only the completion's prefixes.
  m.Prepare(3);
  EXPECT_TRUE(m.forced());
  ok = masked();
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(trie->text(ok[0]), "\"");
  EXPECT_EQ(trie->text(ok[1]), "\",\"");
  EXPECT_EQ(m.Close(), "\",\"age\":0}");
  EXPECT_TRUE(m.done());
  EXPECT_EQ(m.text(), "{\"name\":\"ab\",\"age\":0}");
}

TEST(TokenMaskTest, EosOnlyWhereComplete) {
  auto vocab = SyntheticVocab();
  const int32_t eos = static_cast<int32_t>(vocab.size());
  vocab.push_back("");
  auto trie = std::make_shared<TokenTrie>(vocab);
  JsonMatcher m(Compile(R"({"type":"integer"})"), trie, {eos});
  m.Prepare(100);
  EXPECT_FALSE(m.Allows(eos));
  ASSERT_TRUE(m.AcceptBytes("12"));
  EXPECT_TRUE(m.Allows(eos));
  EXPECT_TRUE(m.Allows('3'));
  EXPECT_FALSE(m.Allows(' '));
  EXPECT_FALSE(m.done());
  std::vector<float> logits(vocab.size(), 0.0f);
  m.Mask(logits);
  EXPECT_EQ(logits[eos], 0.0f);
  EXPECT_TRUE(std::isinf(logits['a']));
}

}  // namespace
}  // namespace dsv4::constrain
