// The JSON automaton of a Grammar (json_schema.h): a character-level
// pushdown automaton that reads an output byte by byte and says whether it is
// still a prefix of a JSON text the grammar accepts.
//
// A configuration is a stack of Frames, one per value being read (the root
// at the bottom; an object's member value or an array's item above its
// container). A State is a set of configurations: an anyOf whose
// alternatives share their first byte (two object schemas, say) keeps one
// configuration per alternative until the bytes tell them apart; usually there
// is one. Feeding a byte steps every configuration and drops those that
// refuse it; the state is dead when none is left. Whitespace is allowed where
// JSON allows it, at most kMaxWhitespace bytes in a row (enough to indent
// pretty-printed JSON; a model cannot spend its tokens on blanks), and not
// after the root value (only end-of-text follows).
//
// The state is plain data in two flat arrays (no allocation once their
// capacity is reached), so the token mask walk (token_mask.h) copies one per
// byte cheaply; Key() is the cache key of its mask: two states with the same
// key allow the same tokens of at most `max_token_bytes` bytes.
//
// Used by token_mask.h and json_matcher.h; tested by
// tests/constrain/json_automaton_test.cc.
#ifndef DSV4_CONSTRAIN_JSON_AUTOMATON_H_
#define DSV4_CONSTRAIN_JSON_AUTOMATON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/json_schema.h"

namespace dsv4::constrain {

inline constexpr uint8_t kMaxWhitespace = 20;
// Configurations a state keeps (an anyOf of many alternatives that share
// their prefix would otherwise multiply the cost of every byte); the first
// ones are kept.
inline constexpr size_t kMaxConfigurations = 16;

enum class Phase : uint8_t {
  kValue,         // a value not yet begun (whitespace may come first)
  kObjOpen,       // after '{'
  kObjKey,        // inside a key
  kObjColon,      // after a key, before ':'
  kObjAfter,      // after a member's value: ',' or '}'
  kObjNeedKey,    // after ',': a key
  kArrOpen,       // after '['
  kArrAfter,      // after an item: ',' or ']'
  kString,        // inside a string value
  kLiteral,       // inside a literal
  kNumSign,       // after '-'
  kNumZero,       // "0" (complete)
  kNumInt,        // integer digits (complete)
  kNumDot,        // after '.'
  kNumFrac,       // fraction digits (complete)
  kNumExp,        // after 'e' / 'E'
  kNumExpSign,    // after the exponent's sign
  kNumExpDigits,  // exponent digits (complete)
};

struct Frame {
  int32_t node = 0;
  Phase phase = Phase::kValue;
  // Strings and keys: 0 plain, 1 after '\', 2..5: \u with 4..1 hex digits to go,
  // 6: after "\u" + one of 'd'/'D' (the next digit must not make a surrogate).
  uint8_t escape = 0;
  // UTF-8: continuation bytes still due, and the range class of the next one
  // (0: 80..BF, 1: A0..BF after E0, 2: 80..9F after ED, 3: 90..BF after F0,
  // 4: 80..8F after F4).
  uint8_t utf8_due = 0;
  uint8_t utf8_class = 0;
  // Strings: code points so far (a format: bytes of its shape matched);
  // arrays: items begun; literals and keys: bytes matched.
  uint32_t count = 0;
  // Literals and keys: the candidates still matching, [lo, hi).
  uint16_t lo = 0, hi = 0;
  // Keys: whether the key has a '\' (then it must be a property's own name).
  bool backslash = false;
  // Whitespace bytes in a row just read by this frame.
  uint8_t ws = 0;
  // Objects: properties seen; the property whose value is being read (-1:
  // an additional key).
  int16_t prop = -1;
  uint64_t seen = 0;

  bool operator==(const Frame&) const = default;
};

struct State {
  std::vector<Frame> frames;   // the configurations' stacks, one after another
  std::vector<uint32_t> ends;  // ends[c]: one past configuration c's last frame
  bool empty() const { return ends.empty(); }
  size_t configurations() const { return ends.size(); }
  void clear() {
    frames.clear();
    ends.clear();
  }
};

class JsonAutomaton {
 public:
  explicit JsonAutomaton(std::shared_ptr<const Grammar> grammar);

  // The state before any byte.
  State Start() const;
  // `out` = `in` after `b` (empty: refused). `out` must not alias `in`.
  void Feed(const State& in, uint8_t b, State* out) const;
  // Feeds `bytes` to `state` in place; false (state dead) when refused.
  bool FeedAll(State* state, std::string_view bytes) const;
  // Whether the text read so far is a complete value (end-of-text may come).
  bool Complete(const State& state) const;
  // Whether a byte may still follow (false once the root value is closed).
  bool CanContinue(const State& state) const;
  // Whether some configuration is just past a member's value of the root
  // object (its one frame after the value, or a number that may still go on
  // above it): e.g. the end of one tool-call argument.
  bool MemberComplete(const State& state) const;
  // A short text that completes `state` (Complete after feeding it); "" when
  // complete already. The state must not be dead.
  std::string Completion(const State& state) const;
  // The mask cache key of `state` for tokens of up to `max_token_bytes` bytes.
  std::string Key(const State& state, uint32_t max_token_bytes) const;

  const Grammar& grammar() const { return *grammar_; }

 private:
  using Stack = std::vector<Frame>;
  // Steps configuration `s` by `b` in place: false when it refuses the byte.
  // An anyOf whose alternatives share the byte forks: the other alternatives'
  // configurations are appended to `forks`.
  bool FeedStack(Stack& s, uint8_t b, State* forks) const;
  // Pushes the frame of a value of `node` not yet begun.
  static void PushValue(Stack& s, int32_t node);
  // The next piece of the completion of configuration `s`.
  std::string CompletionStep(const Stack& s) const;

  std::shared_ptr<const Grammar> grammar_;
  mutable Stack scratch_;       // FeedStack's working copy (not thread-safe)
  mutable State feed_scratch_;  // FeedAll's
  mutable State forks_;         // Feed's
};

}  // namespace dsv4::constrain

#endif  // DSV4_CONSTRAIN_JSON_AUTOMATON_H_
