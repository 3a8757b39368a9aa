// Structured output for chat, completions and messages: OpenAI response_format
// {"type": "json_object"} / {"type": "json_schema", ...} and Anthropic
// output_config.format, enforced by constrained decoding (src/constrain).
//
// StructuredOutputConstraint is the engine's SequenceConstraint: with
// thinking on (DeepSeek-V4 chat), the reasoning is free text (EOS refused, and
// tokens whose text holds chat markup the output parser rejects in reasoning)
// until "</think>", which is forced when the tokens left would no longer fit
// it plus the smallest JSON value; from there a constrain::JsonMatcher
// constrains the answer. Stop strings apply to the reasoning only (a stop
// string inside the JSON would cut it). When the sequence ends before the JSON
// is complete (max_tokens, a full context), Close appends the shortest text
// that completes it, so the answer always parses and validates.
//
// The JSON part's vocabulary (StructuredVocabulary) leaves out tokens whose
// text is chat markup ("<｜...｜>", "<think>", "</think>", the DSML marker):
// they can never appear inside the JSON.
//
// Used by server.cc; tested by tests/server/structured_output_test.cc and
// tests/integration/test_structured_output.py.
#ifndef DSV4_SERVER_STRUCTURED_OUTPUT_H_
#define DSV4_SERVER_STRUCTURED_OUTPUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "constrain/json_matcher.h"
#include "constrain/json_schema.h"
#include "engine/engine.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// A tokenizer's vocabulary as the JSON constraint sees it: every token's
// bytes (Tokenizer::Decode), and the trie of those allowed inside JSON. Built
// once per server.
struct StructuredVocabulary {
  std::vector<std::string> texts;                         // [V] every token
  std::shared_ptr<const constrain::TokenTrie> json_trie;  // markup tokens left out
};
std::shared_ptr<const StructuredVocabulary> BuildStructuredVocabulary(const Tokenizer& tokenizer);

struct StructuredSpec {
  bool thinking = false;          // reasoning, then "</think>", then the JSON
  std::vector<int32_t> stop_ids;  // end-of-sequence ids
  // Tokens reserved for "</think>" plus the smallest JSON value: fewer left
  // than this while reasoning forces "</think>". 0: never forced.
  int64_t reserve_tokens = 0;
};

class StructuredOutputConstraint final : public SequenceConstraint {
 public:
  StructuredOutputConstraint(std::shared_ptr<const constrain::Grammar> grammar,
                             std::shared_ptr<const StructuredVocabulary> vocab,
                             StructuredSpec spec);

  void Prepare(int64_t tokens_left) override;
  bool Allows(int32_t token) const override;
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t token) override;
  bool done() const override;
  bool stop_strings_apply() const override { return reasoning_; }
  std::string Close() override;

  bool reasoning() const { return reasoning_; }
  const constrain::JsonMatcher& matcher() const { return *matcher_; }

 private:
  // Reasoning: whether `bytes` may come next, and the JSON bytes that follow
  // "</think>" inside them (`json_from`: their offset, npos when none).
  bool ReasoningAllows(const std::string& bytes, size_t* json_from) const;

  std::shared_ptr<const StructuredVocabulary> vocab_;
  StructuredSpec spec_;
  std::unique_ptr<constrain::JsonMatcher> matcher_;  // mutable state: Mask caches masks
  bool reasoning_ = false;
  bool force_think_end_ = false;
  uint32_t think_pos_ = 0;  // bytes of "</think>" matched at the end of the reasoning
};

// The request fields errors name: the format and its schema (empty: the
// chat's response_format / response_format.json_schema.schema, or Anthropic's
// output_config.format / output_config.format.schema).
struct FormatFields {
  std::string format;
  std::string schema;
};

// The factory for `request`'s response format (null for text), with the
// schema compiled through `cache`. Errors: the schema's (Unimplemented naming
// the keyword, InvalidArgument) and a response format combined with a forced
// tool call, each naming `fields`.
Result<ConstraintFactory> MakeStructuredOutputConstraint(
    const GenerationRequest& request, constrain::SchemaCache& cache,
    const std::shared_ptr<const StructuredVocabulary>& vocab, const Tokenizer& tokenizer,
    std::vector<int32_t> stop_ids, bool thinking, const FormatFields& fields = {});

// The server's MakeStructuredOutputConstraint for a request (its vocabulary
// and schema cache), as the API front ends other than chat call it; thinking:
// the model reasons first and only the answer is constrained.
using StructuredConstraintFn = std::function<Result<ConstraintFactory>(
    const GenerationRequest& request, bool thinking, const FormatFields& fields)>;

}  // namespace dsv4::server

#endif  // DSV4_SERVER_STRUCTURED_OUTPUT_H_
