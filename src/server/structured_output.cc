// Structured output by constrained decoding (structured_output.h).
#include "server/structured_output.h"

#include <limits>
#include <string_view>

#include "base/check.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4::server {
namespace {

namespace tok = dsv4_tokens;
const std::string kThinkEnd(tok::kThinkEnd);

// Bytes of "</think>" matched at the end of the text after `b`, given `pos`
// before (the KMP step; the marker has no border, so a mismatch restarts).
uint32_t AdvanceThinkEnd(uint32_t pos, unsigned char b) {
  if (pos < kThinkEnd.size() && static_cast<unsigned char>(kThinkEnd[pos]) == b) return pos + 1;
  return static_cast<unsigned char>(kThinkEnd[0]) == b ? 1 : 0;
}

// Text the output parser rejects in reasoning (tool_choice.cc has the same list).
bool HasReasoningMarkup(std::string_view bytes) {
  for (std::string_view sp : {tok::kDsml, tok::kThinkStart, tok::kBos, tok::kEos}) {
    if (bytes.find(sp) != std::string_view::npos) return true;
  }
  return false;
}

// Chat markup, never inside the JSON.
bool IsMarkup(std::string_view bytes) {
  return bytes.find("<\xef\xbd\x9c") != std::string_view::npos ||  // "<｜"
         bytes.find("\xef\xbd\x9c>") != std::string_view::npos ||  // "｜>"
         bytes.find(tok::kDsml) != std::string_view::npos ||
         bytes.find(tok::kThinkStart) != std::string_view::npos ||
         bytes.find(tok::kThinkEnd) != std::string_view::npos;
}

}  // namespace

std::shared_ptr<const StructuredVocabulary> BuildStructuredVocabulary(const Tokenizer& tokenizer) {
  auto v = std::make_shared<StructuredVocabulary>();
  v->texts.resize(tokenizer.vocab_size());
  std::vector<std::string> json(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    v->texts[id] = tokenizer.Decode(id);
    if (!IsMarkup(v->texts[id])) json[id] = v->texts[id];
  }
  v->json_trie = std::make_shared<constrain::TokenTrie>(std::move(json));
  return v;
}

StructuredOutputConstraint::StructuredOutputConstraint(
    std::shared_ptr<const constrain::Grammar> grammar,
    std::shared_ptr<const StructuredVocabulary> vocab, StructuredSpec spec)
    : vocab_(std::move(vocab)), spec_(std::move(spec)), reasoning_(spec_.thinking) {
  matcher_ = std::make_unique<constrain::JsonMatcher>(std::move(grammar), vocab_->json_trie,
                                                      spec_.stop_ids);
}

void StructuredOutputConstraint::Prepare(int64_t tokens_left) {
  if (reasoning_) {
    if (spec_.reserve_tokens > 0 && tokens_left <= spec_.reserve_tokens) force_think_end_ = true;
    return;
  }
  matcher_->Prepare(tokens_left);
}

bool StructuredOutputConstraint::ReasoningAllows(const std::string& bytes,
                                                 size_t* json_from) const {
  *json_from = std::string::npos;
  if (bytes.empty() || HasReasoningMarkup(bytes)) return false;
  uint32_t pos = think_pos_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (force_think_end_ && static_cast<unsigned char>(kThinkEnd[pos]) != b) return false;
    pos = AdvanceThinkEnd(pos, b);
    if (pos == kThinkEnd.size()) {
      *json_from = i + 1;
      return matcher_->AllowsBytes(std::string_view(bytes).substr(i + 1));
    }
  }
  return true;
}

bool StructuredOutputConstraint::Allows(int32_t token) const {
  if (!reasoning_) return matcher_->Allows(token);
  if (matcher_->IsStop(token)) return false;
  if (token < 0 || static_cast<size_t>(token) >= vocab_->texts.size()) return false;
  size_t json_from;
  return ReasoningAllows(vocab_->texts[token], &json_from);
}

void StructuredOutputConstraint::Mask(std::span<float> logits) const {
  if (!reasoning_) return matcher_->Mask(logits);
  // Reasoning is free text: this runs only when the model picked markup.
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!Allows(static_cast<int32_t>(id))) logits[id] = -std::numeric_limits<float>::infinity();
  }
}

void StructuredOutputConstraint::Accept(int32_t token) {
  if (!reasoning_) {
    matcher_->Accept(token);
    return;
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->texts.size()) return;
  const std::string& bytes = vocab_->texts[token];
  for (size_t i = 0; i < bytes.size(); ++i) {
    think_pos_ = AdvanceThinkEnd(think_pos_, static_cast<unsigned char>(bytes[i]));
    if (think_pos_ == kThinkEnd.size()) {
      reasoning_ = false;
      matcher_->AcceptBytes(std::string_view(bytes).substr(i + 1));
      return;
    }
  }
}

bool StructuredOutputConstraint::done() const { return !reasoning_ && matcher_->done(); }

std::string StructuredOutputConstraint::Close() {
  std::string out;
  if (reasoning_) {
    out = kThinkEnd.substr(think_pos_);
    reasoning_ = false;
  }
  return out + matcher_->Close();
}

Result<ConstraintFactory> MakeStructuredOutputConstraint(
    const GenerationRequest& request, constrain::SchemaCache& cache,
    const std::shared_ptr<const StructuredVocabulary>& vocab, const Tokenizer& tokenizer,
    std::vector<int32_t> stop_ids, bool thinking, const FormatFields& fields) {
  if (request.response_format == ResponseFormat::kText) return ConstraintFactory();
  const bool anthropic = request.api == Api::kMessages;
  const std::string field = !fields.format.empty() ? fields.format
                            : anthropic            ? "output_config.format"
                                                   : "response_format";
  if (ForcesToolCall(request)) {
    return Unimplemented("'" + field + "' together with a forced tool call is not supported",
                         "leave tool_choice \"auto\" or drop " + field);
  }
  std::shared_ptr<const constrain::Grammar> grammar;
  if (request.response_format == ResponseFormat::kJsonObject) {
    grammar = constrain::JsonObjectGrammar();
  } else {
    const nlohmann::json schema = nlohmann::json::parse(request.json_schema.dump());
    Result<std::shared_ptr<const constrain::Grammar>> g = cache.Get(schema);
    if (!g.ok()) {
      const std::string where = !fields.schema.empty() ? fields.schema
                                : anthropic            ? "output_config.format.schema"
                                                       : "response_format.json_schema.schema";
      return Status(g.status().code(), where + ": " + g.status().message(), g.status().hint());
    }
    grammar = *g;
  }
  StructuredSpec spec;
  spec.thinking = thinking;
  spec.stop_ids = std::move(stop_ids);
  if (thinking) {
    const std::string head = kThinkEnd + grammar->nodes[grammar->root].min_value;
    spec.reserve_tokens = static_cast<int64_t>(tokenizer.Encode(head, false).size()) + 1;
  }
  return ConstraintFactory([grammar, vocab, spec] {
    return std::make_unique<StructuredOutputConstraint>(grammar, vocab, spec);
  });
}

}  // namespace dsv4::server
