// Parses DeepSeek-V4 model output (the text generated after the prompt that
// chat_dsv4.h builds) into {reasoning_content, content, tool_calls}, either in
// one go or incrementally as text arrives, so a server can stream reasoning,
// content and tool-call arguments separately (OpenAI delta style) without DSML
// markup ever reaching the content.
//
// The grammar is the one DeepSeek's encoding_dsv4.py
// (parse_message_from_completion_text) accepts:
//   [thinking mode] REASONING "</think>"
//   CONTENT
//   ["\n\n<｜DSML｜tool_calls>\n"
//      ("<｜DSML｜invoke name=\"NAME\">\n"
//         ("<｜DSML｜parameter name=\"KEY\" string=\"true|false\">VALUE</｜DSML｜parameter>\n")*
//       "</｜DSML｜invoke>\n")*
//    "</｜DSML｜tool_calls>"]
//   ["<｜end▁of▁sentence｜>"]
// DeepSeek-V4.1 (chat_dsv41.h, DsmlDialect::kV41) has the same grammar with
// the tag names "<｜DSML｜ calls>", "<｜DSML｜ invoke" and "<｜DSML｜ parameter"
// (a space after ｜DSML｜); the other dialect's tags are then malformed output.
// Tool-call arguments come out as the reference builds them: a JSON object
// text, string="true" values JSON-quoted, others inserted verbatim.
//
// Differences from the reference, which raises on anything unexpected: the
// final EOS text is optional (servers stop on the EOS id, whose text is never
// decoded), and malformed output is not an error but a flag: the one-shot
// parser then returns the raw text as content; the incremental parser has
// already streamed what it could and passes the unparsed rest on as content.
// Not here: prompt building (chat_dsv4.h), token handling (the caller feeds
// decoded text, e.g. from a StreamDecoder).
#ifndef DSV4_TOKENIZER_CHAT_OUTPUT_PARSER_H_
#define DSV4_TOKENIZER_CHAT_OUTPUT_PARSER_H_

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_dsv4.h"

namespace dsv4 {

// Which DSML tag names the model writes.
enum class DsmlDialect {
  kV4,   // <｜DSML｜tool_calls>, <｜DSML｜invoke, <｜DSML｜parameter
  kV41,  // <｜DSML｜ calls>, <｜DSML｜ invoke, <｜DSML｜ parameter
};

struct Dsv4ToolCall {
  std::string name;
  std::string arguments;  // JSON object text, e.g. {"location": "Paris", "days": 3}
};

struct Dsv4ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<Dsv4ToolCall> tool_calls;
  bool malformed = false;  // the text did not follow the format above
  std::string error;       // why, when malformed
};

// One tool call's share of a delta: `name` is set on the call's first delta.
struct Dsv4ToolCallDelta {
  int index = 0;
  std::string name;
  std::string arguments;  // the next piece of the arguments text
};

// What became known since the previous Push. Concatenating every delta's
// fields gives the parser's final result (for well-formed output).
struct Dsv4OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<Dsv4ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class Dsv4OutputParser {
 public:
  // kThinking: the prompt ended with <think>, so output starts with reasoning.
  explicit Dsv4OutputParser(Dsv4ThinkingMode mode, DsmlDialect dialect = DsmlDialect::kV4);

  // Feeds the next generated text (well-formed UTF-8 pieces keep the deltas
  // well-formed). Text that may be the start of a marker is held back.
  Dsv4OutputDelta Push(std::string_view text);
  // Ends the output: releases held-back text and runs the final checks.
  Dsv4OutputDelta Finish();

  // Everything parsed so far; final after Finish().
  const Dsv4ParsedOutput& result() const { return result_; }
  bool finished() const { return finished_; }

 private:
  enum class State {
    kReasoning,       // before </think>
    kContent,         // before the tool-calls block or EOS
    kToolCallsOpen,   // expecting ">\n" after "\n\n<｜DSML｜tool_calls"
    kBetweenInvokes,  // expecting an invoke or the block's end
    kInvokeHeader,    // expecting ` name="NAME">\n`
    kInvokeBody,      // expecting a parameter or the invoke's end
    kParamHeader,     // expecting ` name="KEY" string="true|false">`
    kParamValue,      // the value, up to "</｜DSML｜parameter"
    kParamClose,      // expecting ">\n"
    kAfterToolCalls,  // only EOS may follow
    kAfterEos,        // nothing may follow
    kRaw,             // malformed: everything else is content
  };

  // Consumes as much of buffer_ as the state machine can; false when it must
  // wait for more text (or, at_end, when it stopped).
  bool Step(bool at_end, Dsv4OutputDelta* delta);
  void Fail(std::string error, Dsv4OutputDelta* delta);
  void EmitReasoning(std::string_view s, Dsv4OutputDelta* delta);
  void EmitContent(std::string_view s, Dsv4OutputDelta* delta);
  void EmitArguments(std::string_view s, Dsv4OutputDelta* delta);

  // The dialect's markers.
  struct Tags {
    explicit Tags(DsmlDialect dialect);
    std::string tool_calls_start;  // "\n\n<｜DSML｜tool_calls" (no ">")
    std::string tool_calls_end;    // "</｜DSML｜tool_calls>"
    std::string invoke_start;      // "<｜DSML｜invoke"
    std::string invoke_end;        // "</｜DSML｜invoke>\n"
    std::string param_start;       // "<｜DSML｜parameter"
    std::string param_end;         // "</｜DSML｜parameter"
  };

  State state_;
  Tags tags_;
  std::string buffer_;
  Dsv4ParsedOutput result_;
  bool finished_ = false;
  // The tool call being parsed.
  std::set<std::string> param_names_;
  bool param_is_string_ = false;
};

// Parses a complete output. Malformed output comes back as {content = the raw
// text without a trailing EOS, malformed = true, error}.
Dsv4ParsedOutput ParseDsv4Output(std::string_view text, Dsv4ThinkingMode mode,
                                 DsmlDialect dialect = DsmlDialect::kV4);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_CHAT_OUTPUT_PARSER_H_
