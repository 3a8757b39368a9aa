// JsonMatcher: one sequence's structured-output constraint over a tokenizer's
// vocabulary. The engine's SequenceConstraint (server/structured_output.h)
// delegates to it once the JSON part of the output begins.
//
// Per token: Allows feeds the token's bytes to a copy of the state (the
// engine asks it for the token it sampled first), Mask writes -inf into the
// logits of every refused token from a mask that is looked up in the
// grammar's MaskCache by the state's key, or walked over the trie on a miss.
// End-of-sequence ids are allowed exactly where the JSON is complete; once the
// root value is closed nothing else is (done()).
//
// Forced completion: when the tokens left would no longer fit the shortest
// completion of the JSON (Prepare), only tokens that follow that completion
// are allowed, so the output ends complete within max_tokens whenever every
// byte of the completion is a token of its own; Close returns what is still
// missing if the sequence ends otherwise.
//
// Tested by tests/constrain/json_matcher_test.cc.
#ifndef DSV4_CONSTRAIN_JSON_MATCHER_H_
#define DSV4_CONSTRAIN_JSON_MATCHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "constrain/json_automaton.h"
#include "constrain/token_mask.h"

namespace dsv4::constrain {

class JsonMatcher {
 public:
  // `stop_ids`: the end-of-sequence ids.
  JsonMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
              std::vector<int32_t> stop_ids);

  // `tokens_left` >= 1: how many more tokens the sequence may generate.
  void Prepare(int64_t tokens_left);
  bool Allows(int32_t token) const;
  // Whether `bytes` may come next (ignores forcing).
  bool AllowsBytes(std::string_view bytes) const;
  // logits [V]: refused tokens' logits become -inf.
  void Mask(std::span<float> logits);
  // Feeds a token's bytes; false (and nothing changes) when they are refused.
  bool Accept(int32_t token);
  // Feeds bytes (e.g. the part of a token after "</think>"); false when refused.
  bool AcceptBytes(std::string_view bytes);
  bool Complete() const { return automaton_.Complete(state_); }
  // The root value is closed: nothing but end-of-sequence may follow.
  bool done() const { return !automaton_.CanContinue(state_); }
  // The text that completes the JSON ("" when complete); the matcher is done after.
  std::string Close();

  const std::string& text() const { return text_; }
  bool forced() const { return forced_; }
  const JsonAutomaton& automaton() const { return automaton_; }
  const State& state() const { return state_; }
  bool IsStop(int32_t token) const;

 private:
  JsonAutomaton automaton_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> stop_ids_;
  MaskWalker walker_;
  State state_;
  mutable State scratch_;
  bool forced_ = false;
  std::string completion_;          // forced_: the completion being followed
  TokenMask mask_;                  // scratch
  std::vector<float> stop_logits_;  // scratch
  std::string text_;
};

}  // namespace dsv4::constrain

#endif  // DSV4_CONSTRAIN_JSON_MATCHER_H_
