// The tokenizer a deepseek4 GGUF carries (tokenizer.ggml.*) against the release's
// tokenizer.json: the test writes the GGUF metadata from tokenizer.json the way
// llama.cpp's convert_hf_to_gguf.py does (tokens by id, added tokens in place;
// merges as "left right" in order; token_type CONTROL for added tokens that are
// special or look special, <|...|> or <｜...｜>, USER_DEFINED for the other added
// tokens, NORMAL for the rest; bos 0, eos 1, add_bos false, pre "joyai-llm"). A
// vocab-only conversion of the release's tokenizer with the converter gave these
// same arrays. Encoding must give the same ids, and decoding must give the text
// back. Also: a deepseek4 GGUF model loads its own tokenizer, and malformed
// tokenizer metadata is an error that names the key.
#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/loader.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"

namespace dsv4 {
namespace {

const std::string kTok = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";

// A metadata-only GGUF v3 file in memory.
class MetaWriter {
 public:
  MetaWriter& Str(std::string_view key, std::string_view v) {
    Key(key, GgufType::kString);
    PutStr(v);
    return *this;
  }
  MetaWriter& U32(std::string_view key, uint32_t v) {
    Key(key, GgufType::kUint32);
    Put(&v, 4);
    return *this;
  }
  MetaWriter& Bool(std::string_view key, bool v) {
    Key(key, GgufType::kBool);
    const uint8_t b = v ? 1 : 0;
    Put(&b, 1);
    return *this;
  }
  MetaWriter& StrArray(std::string_view key, const std::vector<std::string>& v) {
    Key(key, GgufType::kArray);
    PutType(GgufType::kString);
    const uint64_t n = v.size();
    Put(&n, 8);
    for (const std::string& s : v) PutStr(s);
    return *this;
  }
  MetaWriter& I32Array(std::string_view key, const std::vector<int32_t>& v) {
    Key(key, GgufType::kArray);
    PutType(GgufType::kInt32);
    const uint64_t n = v.size();
    Put(&n, 8);
    Put(v.data(), v.size() * 4);
    return *this;
  }
  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    const uint64_t counts[2] = {0, n_kv_};
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(counts),
               reinterpret_cast<const uint8_t*>(counts) + 16);
    out.insert(out.end(), kv_.begin(), kv_.end());
    return out;
  }

 private:
  void Put(const void* p, size_t n) {
    kv_.insert(kv_.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
  void PutStr(std::string_view s) {
    const uint64_t n = s.size();
    Put(&n, 8);
    Put(s.data(), s.size());
  }
  void PutType(GgufType t) {
    const uint32_t v = static_cast<uint32_t>(t);
    Put(&v, 4);
  }
  void Key(std::string_view key, GgufType t) {
    PutStr(key);
    PutType(t);
    ++n_kv_;
  }
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
};

struct V4Arrays {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

bool LooksSpecial(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return wrapped("<|", "|>") || wrapped("<｜", "｜>");
}

// The converter's tokenizer.ggml.{tokens,token_type,merges} of tokenizer.json.
V4Arrays ConvertTokenizerJson() {
  auto text = ReadFileMaybeGzip(kTok + "deepseek_v4_tokenizer.json.gz");
  CHECK(text.ok(), "%s", text.status().ToString().c_str());
  const nlohmann::json j = nlohmann::json::parse(*text);
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (const auto& [tok, id] : j["model"]["vocab"].items()) by_id[id.get<int64_t>()] = {tok, 1};
  for (const auto& a : j["added_tokens"]) {
    const std::string content = a["content"].get<std::string>();
    const bool control = a["special"].get<bool>() || LooksSpecial(content);
    by_id[a["id"].get<int64_t>()] = {content, control ? 3 : 4};
  }
  V4Arrays out;
  for (const auto& [id, entry] : by_id) {
    CHECK(id == static_cast<int64_t>(out.tokens.size()), "tokenizer.json ids have a gap at %lld",
          static_cast<long long>(id));
    out.tokens.push_back(entry.first);
    out.types.push_back(entry.second);
  }
  for (const auto& m : j["model"]["merges"]) {
    out.merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  return out;
}

const V4Arrays& Arrays() {
  static const V4Arrays* arrays = new V4Arrays(ConvertTokenizerJson());
  return *arrays;
}

MetaWriter V4Meta() {
  MetaWriter w;
  w.Str("general.architecture", "deepseek4")
      .Str("tokenizer.ggml.model", "gpt2")
      .Str("tokenizer.ggml.pre", "joyai-llm")
      .StrArray("tokenizer.ggml.tokens", Arrays().tokens)
      .I32Array("tokenizer.ggml.token_type", Arrays().types)
      .StrArray("tokenizer.ggml.merges", Arrays().merges)
      .U32("tokenizer.ggml.bos_token_id", 0)
      .U32("tokenizer.ggml.eos_token_id", 1)
      .U32("tokenizer.ggml.padding_token_id", 1)
      .Bool("tokenizer.ggml.add_bos_token", false)
      .Bool("tokenizer.ggml.add_eos_token", false);
  return w;
}

Result<std::unique_ptr<Tokenizer>> FromBytes(const std::vector<uint8_t>& bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, ParseGguf(bytes, "v4vocab.gguf"));
  return TokenizerFromGguf(*file);
}

TEST(DeepSeekV4GgufTokenizer, EncodesAsTokenizerJson) {
  const std::vector<uint8_t> bytes = V4Meta().Build();
  auto gguf_tok = FromBytes(bytes);
  ASSERT_TRUE(gguf_tok.ok()) << gguf_tok.status().ToString();
  auto json_tok = LoadTokenizerJson(kTok + "deepseek_v4_tokenizer.json.gz",
                                    kTok + "deepseek_v4_tokenizer_config.json");
  ASSERT_TRUE(json_tok.ok()) << json_tok.status().ToString();
  const auto* g = dynamic_cast<const BpeTokenizer*>(gguf_tok->get());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->vocab_size(), (*json_tok)->vocab_size());
  EXPECT_EQ(g->bos_id(), (*json_tok)->bos_id());
  EXPECT_EQ(g->eos_id(), (*json_tok)->eos_id());
  EXPECT_EQ(g->num_merges(), (*json_tok)->num_merges());
  EXPECT_EQ(g->add_bos_by_default(), (*json_tok)->add_bos_by_default());

  const std::vector<std::string> texts = {
      "Hello world",
      "int main(int argc, char** argv) {\n\treturn argc > 1 ? 0 : -1;\n}\n",
      "def f(x):\n    return [i**2 for i in range(x)]  # squares\n",
      "深度求索的模型在中文上表现很好。日本語のテキストもカタカナも。",
      "emoji 😀👍🏽🇫🇷 and ZWJ 👨‍👩‍👧",
      "numbers 1234567890 3.14159 -42 1e-9 ０１２",
      "   leading, trailing   \n\n\n  \t\t mixed \r\n whitespace   ",
      "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>hm</think>ok<｜end▁of▁sentence｜>",
      "text <|EOT|> and <｜fim▁begin｜>a<｜fim▁hole｜>b<｜fim▁end｜>",
      "Ünïcödé façade naïve café — “quotes” ‘single’ …",
      "URL https://example.com/path?q=1&r=2#frag, e-mail a.b@c.de",
      "",
      "\xff\xfe invalid bytes \xc3",
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> want = (*json_tok)->Encode(text, false);
    const std::vector<int32_t> got = g->Encode(text, false);
    EXPECT_EQ(got, want);
    EXPECT_EQ(g->DecodeText(got), text);
    // Untrusted text: no added token is matched inside a plain range.
    const TextRange all[] = {{0, text.size()}};
    EXPECT_EQ(g->EncodeWithPlainRanges(text, false, all),
              (*json_tok)->EncodeWithPlainRanges(text, false, all));
  }
}

// llama.cpp's converter marks the <｜...｜> chat markers CONTROL, while
// tokenizer.json has them as non-special added tokens: from the GGUF they still
// encode as one token each, but single-token Decode gives "" for them, as it
// does for BOS/EOS (DecodeText with skip_special=false gives their text).
TEST(DeepSeekV4GgufTokenizer, ChatMarkersAreControlTokens) {
  auto tok = FromBytes(V4Meta().Build());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto* g = dynamic_cast<const BpeTokenizer*>(tok->get());
  ASSERT_NE(g, nullptr);
  const auto user = g->TokenToId("<｜User｜>");
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(g->TokenType(*user), BpeTokenType::kControl);
  const auto think = g->TokenToId("</think>");
  ASSERT_TRUE(think.has_value());
  EXPECT_EQ(g->TokenType(*think), BpeTokenType::kUserDefined);
  EXPECT_EQ(g->Decode(*think), "</think>");
}

TEST(DeepSeekV4GgufTokenizer, MalformedMetadataNamesTheKey) {
  {
    MetaWriter w;
    w.Str("tokenizer.ggml.model", "gpt2").StrArray("tokenizer.ggml.tokens", {"a", "b"});
    const auto tok = FromBytes(w.Build());
    EXPECT_ERROR(tok, StatusCode::kNotFound, "tokenizer.ggml.merges");
    EXPECT_ERROR(tok, StatusCode::kNotFound, "v4vocab.gguf");
  }
  {
    MetaWriter w;
    w.Str("tokenizer.ggml.model", "gpt2")
        .StrArray("tokenizer.ggml.tokens", {"a", "b"})
        .StrArray("tokenizer.ggml.merges", {})
        .StrArray("tokenizer.ggml.token_type", {"1", "1"});
    EXPECT_ERROR(FromBytes(w.Build()), StatusCode::kInvalidArgument, "tokenizer.ggml.token_type");
  }
  {
    MetaWriter w;
    w.Str("tokenizer.ggml.model", "gpt2")
        .StrArray("tokenizer.ggml.tokens", {"a", "b"})
        .StrArray("tokenizer.ggml.merges", {})
        .I32Array("tokenizer.ggml.token_type", {1});
    EXPECT_ERROR(FromBytes(w.Build()), StatusCode::kInvalidArgument, "tokenizer.ggml.token_type");
  }
  {
    MetaWriter w;
    w.Str("tokenizer.ggml.model", "gpt2")
        .StrArray("tokenizer.ggml.tokens", {"a", "b"})
        .StrArray("tokenizer.ggml.merges", {})
        .Str("tokenizer.ggml.pre", "no-such-pre");
    EXPECT_ERROR(FromBytes(w.Build()), StatusCode::kNotFound, "no-such-pre");
  }
}

// The tiny deepseek4 GGUF (vocabulary trimmed to 512 entries by the golden
// script) runs from text with its own tokenizer, no --tokenizer.
TEST(DeepSeekV4GgufTokenizer, ModelLoadsItsOwnTokenizer) {
  LoadOptions o;
  o.model_path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/gguf_tiny/tiny.gguf";
  o.threads = 1;
  auto m = LoadModel(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer->vocab_size(), 512);
  EXPECT_EQ(m->tokenizer->bos_id(), 0);
  EXPECT_EQ(m->tokenizer->eos_id(), 1);
  const std::vector<int32_t> ids = m->tokenizer->Encode("Hello world", false);
  ASSERT_FALSE(ids.empty());
  for (int32_t id : ids) EXPECT_LT(id, 512);
  EXPECT_EQ(DecodeTokens(*m->tokenizer, ids), "Hello world");
}

}  // namespace
}  // namespace dsv4
