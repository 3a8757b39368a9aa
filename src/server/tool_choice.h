// tool_choice enforcement for DeepSeek-V4 chat (OpenAI `tool_choice`,
// Anthropic `tool_choice`): engine SequenceConstraints that make the model's
// output obey the request by constrained decoding.
//
//   auto       content, or tool calls where the model opens them; when some
//              tool's `parameters` compile (below), a call's arguments are
//              checked as for a forced call (else no constraint, no cost)
//   none       the tools are not rendered into the prompt (request.cc) and the
//              `｜DSML｜` token is banned, so the model cannot open a tool call;
//              the answer is content only
//   required   (Anthropic {"type": "any"}) the turn is one or more tool calls
//              to tools of the request (exactly one with parallel_tool_calls
//              false / disable_parallel_tool_use true)
//   function   ({"type": "function", "function": {"name": X}}; Anthropic
//              {"type": "tool", "name": X}) exactly one call, to X
//
// For required / function, ToolCallConstraint runs a byte-level automaton over
// the DSML grammar that chat_output_parser.h parses:
//   [thinking] REASONING "</think>"
//   "\n\n<｜DSML｜tool_calls>\n"
//   ( "<｜DSML｜invoke name=\"" NAME "\">\n"
//       ( "<｜DSML｜parameter name=\"" KEY "\" string=\"" ("true"|"false") "\">"
//         VALUE "</｜DSML｜parameter>\n" )*
//     "</｜DSML｜invoke>\n" )+          (function: exactly one)
//   "</｜DSML｜tool_calls>"             then the sequence ends
// A token is allowed when its bytes (Tokenizer::Decode, what the stream
// decoder emits) keep the output a prefix of that language. So content is
// empty; the invoke NAME is one of the allowed names (a trie over the names'
// full header texts, whatever tokenization the model picks: the forced
// tokens of a named call, the name trie of `required`); KEY is 1..256 bytes
// without '"', '\n' or `｜DSML｜` and unique within the call; VALUE is free
// text; EOS is refused before the call has a name and inside markup.
//
// Arguments by schema: for a tool whose `parameters` compile into an object
// schema (src/constrain's subset; other tools' arguments stay free), the
// call's parameters are also fed, as the JSON object they become, to that
// schema's automaton: KEY must be a property (or an additional one where
// allowed), string="true" only where the property takes a string (its raw
// VALUE is the string's text, escaped for the check), a string="false" VALUE
// must be JSON valid for the property, and the invoke closes only once every
// required property is given; Close completes a cut value and adds the
// missing required ones (with their smallest values).
//
// Thinking on: the reasoning is generated freely (EOS refused, and tokens whose
// text holds "｜DSML｜", "<think>" or BOS/EOS text, which the parser rejects in
// reasoning) until the model writes "</think>"; when the tokens left would no longer fit "</think>"
// plus the call's header, "</think>" is forced. Whenever the sequence ends inside the call (EOS,
// max_tokens, a full context, or nothing being allowed), Close appends the text that completes it
// (the rest of the current marker, an empty value, the closing tags; a partial name is completed to
// the first allowed name it starts), so the response always parses into well-formed tool calls and
// the server reports finish_reason "tool_calls" / stop_reason "tool_use". (A non-string value cut
// short, e.g. "[1, 2", stays invalid JSON in the arguments; an empty one becomes null.) Stop
// strings apply to the reasoning only.
//
// Used by server.cc; tested by tests/server/tool_choice_test.cc and
// tests/integration/test_tool_choice.py.
#ifndef DSV4_SERVER_TOOL_CHOICE_H_
#define DSV4_SERVER_TOOL_CHOICE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "constrain/json_automaton.h"
#include "engine/engine.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// The bytes of every token id as Tokenizer::Decode gives them, built once per
// tokenizer and shared by all constraints.
using TokenTexts = std::vector<std::string>;
std::shared_ptr<const TokenTexts> BuildTokenTexts(const Tokenizer& tokenizer);

struct ToolCallSpec {
  std::vector<std::string> names;  // allowed invoke names (non-empty, deduplicated here)
  bool single_call = false;        // exactly one invoke (a named tool_choice)
  bool optional = false;           // auto: content first; a call only where the model opens one
  bool thinking = false;           // the output starts with reasoning ended by </think>
  bool v41 = false;                // DeepSeek-V4.1's DSML tags ("<｜DSML｜ calls>", …)
  int32_t eos_id = -1;
  // Tokens reserved for "</think>" + the call's header: fewer left than this
  // while reasoning forces "</think>". 0: never forced.
  int64_t reserve_tokens = 0;
  // Tools whose arguments are checked: name -> its `parameters` schema,
  // compiled (an object at the root). Other tools' arguments are free.
  std::map<std::string, std::shared_ptr<const constrain::Grammar>> arguments;
};

class ToolCallConstraint final : public SequenceConstraint {
 public:
  // `spec.names` must be non-empty and free of '"', '\n', '<' and '>'
  // (CHECKed; request.cc validates tool names).
  ToolCallConstraint(std::shared_ptr<const TokenTexts> texts, ToolCallSpec spec);

  void Prepare(int64_t tokens_left) override;
  bool Allows(int32_t token) const override;
  void Accept(int32_t token) override;
  bool done() const override;
  bool stop_strings_apply() const override;
  std::string Close() override;

  // The bytes accepted so far (for tests).
  const std::string& text() const { return text_; }
  // Whether a call has been opened (the reasoning, if any, is over).
  bool in_call() const;

 private:
  enum class Phase : uint8_t { kReasoning, kContent, kChoice, kKey, kValue, kDone };
  // What follows a completed candidate of a choice set.
  enum class Next : uint8_t {
    kThinkEnd,    // "</think>" (forced when out of room)
    kOpen,        // "\n\n<｜DSML｜tool_calls>\n"
    kFirstCall,   // an invoke header
    kBody,        // a parameter or the invoke's end
    kKey,         // the parameter name
    kKeyType,     // "\" string=\"true|false\">" after the name
    kValue,       // the value
    kParamClose,  // ">\n" after </｜DSML｜parameter
    kAfterCall,   // another invoke (required) or the block's end
    kDone,
  };
  struct Candidate {
    std::string text;
    Next next;
  };
  struct Cursor {
    Phase phase = Phase::kReasoning;
    Next set = Next::kOpen;   // kChoice: which candidate set
    uint32_t pos = 0;         // kChoice: bytes matched; kReasoning/kValue: end-marker bytes matched
    uint32_t lo = 0, hi = 0;  // kChoice: candidates of the set still matching
    std::string key;          // kKey: the parameter name so far
    bool value_string = false;  // kValue: string="true"
    uint32_t value_len = 0;     // kValue: bytes so far (end-marker bytes included)
    // Arguments checked against the tool's schema: the invoke's automaton
    // (-1: free), its arguments as a JSON object so far, whether a parameter
    // was given, and (kValue) the bytes that may begin the end marker, fed
    // as value once they cannot.
    int32_t tool = -1;
    bool any_param = false;
    std::string pending;
    constrain::State args;
  };

  const std::vector<Candidate>& Set(Next set) const;
  void Enter(Cursor& c, Next next) const;
  // Advances `c` by one byte; false when the byte is not allowed.
  bool Step(Cursor& c, unsigned char b) const;
  bool EosAllowed(const Cursor& c) const;
  // The text that takes `c` to kDone.
  std::string Completion(Cursor c) const;
  // The arguments automaton of `c`: feeds JSON bytes (true when no tool
  // schema applies), or checks them on a copy.
  bool FeedArgs(Cursor& c, std::string_view json) const;
  bool ArgsAccept(const Cursor& c, std::string_view json) const;
  // Whether the end marker may end the current value here (it is complete).
  bool ValueMayEnd(const Cursor& c) const;
  // One byte of a parameter's value, as JSON (escaped inside a string="true" value).
  bool FeedValueByte(Cursor& c, unsigned char b) const;
  // Completion's step for a call whose arguments are checked (the next
  // marker, key or value the schema needs); false: the plain step applies.
  bool CompleteArguments(Cursor& c, const std::function<void(std::string_view)>& feed) const;

  std::shared_ptr<const TokenTexts> texts_;
  ToolCallSpec spec_;
  std::vector<Candidate> open_, first_call_, body_, key_type_, param_close_, after_call_,
      think_end_;
  std::vector<std::string> keys_;  // parameter names of the current invoke
  std::vector<std::shared_ptr<constrain::JsonAutomaton>> automata_;  // per checked tool
  std::map<std::string, int32_t> tool_of_header_;  // invoke header -> automata_ index
  Cursor cursor_;
  bool forced_think_end_ = false;
  std::string text_;
};

// tool_choice "none": bans the given tokens (the `｜DSML｜` token).
class BanTokensConstraint final : public SequenceConstraint {
 public:
  explicit BanTokensConstraint(std::vector<int32_t> banned) : banned_(std::move(banned)) {}
  bool Allows(int32_t token) const override;
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t) override {}
  bool done() const override { return false; }
  std::string Close() override { return {}; }

 private:
  std::vector<int32_t> banned_;
};

// The constraint factory that enforces `request.tool_choice` on a DeepSeek-V4
// chat model (null: nothing to enforce). `texts` is built on first use and
// cached by the caller (BuildTokenTexts).
ConstraintFactory MakeToolChoiceConstraint(const GenerationRequest& request,
                                           const Tokenizer& tokenizer,
                                           const std::shared_ptr<const TokenTexts>& texts,
                                           bool v41 = false);

// Whether `request` forces a tool call (required or a named function).
bool ForcesToolCall(const GenerationRequest& request);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_TOOL_CHOICE_H_
