// DeepSeek-V4 output parsing (see chat_output_parser.h): a state machine over a
// text buffer that holds back only what could still turn into a marker.
#include "tokenizer/chat_output_parser.h"

#include <fmt/core.h>

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace dsv4 {
namespace {

namespace tok = dsv4_tokens;

const std::string kDsml(tok::kDsml);
const std::string kEos(tok::kEos);
// Headers whose close starts later than this are malformed.
constexpr size_t kMaxHeader = 4096;
// The closes of an invoke header and of a parameter header (string or not).
constexpr std::string_view kInvokeClose = "\">\n";
constexpr std::string_view kStringClose = "\" string=\"true\">";
constexpr std::string_view kValueClose = "\" string=\"false\">";

enum class Match { kYes, kMaybe, kNo };

// Whether `buf` starts with `marker` (kYes), is a proper prefix of it (kMaybe).
Match StartsWith(std::string_view buf, std::string_view marker) {
  if (buf.size() >= marker.size())
    return buf.substr(0, marker.size()) == marker ? Match::kYes : Match::kNo;
  return marker.substr(0, buf.size()) == buf ? Match::kMaybe : Match::kNo;
}

// How much of `buf` can be released: all but the longest suffix that is a
// proper prefix of one of `markers`.
size_t SafeEnd(std::string_view buf, std::initializer_list<std::string_view> markers) {
  size_t hold = 0;
  for (std::string_view m : markers) {
    for (size_t len = std::min(buf.size(), m.size() - 1); len > hold; --len) {
      if (buf.substr(buf.size() - len) == m.substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return buf.size() - hold;
}

std::string JsonQuote(std::string_view s) {
  return PythonJsonDumps(nlohmann::ordered_json(std::string(s)));
}

std::string JsonEscapeBody(std::string_view s) {
  std::string q = JsonQuote(s);
  return q.substr(1, q.size() - 2);
}

}  // namespace

Dsv4OutputParser::Tags::Tags(DsmlDialect dialect) {
  const bool v41 = dialect == DsmlDialect::kV41;
  const std::string calls = v41 ? " calls" : "tool_calls";
  const std::string invoke = v41 ? " invoke" : "invoke";
  const std::string param = v41 ? " parameter" : "parameter";
  tool_calls_start = "\n\n<" + kDsml + calls;
  tool_calls_end = "</" + kDsml + calls + ">";
  invoke_start = "<" + kDsml + invoke;
  invoke_end = "</" + kDsml + invoke + ">\n";
  param_start = "<" + kDsml + param;
  param_end = "</" + kDsml + param;
}

Dsv4OutputParser::Dsv4OutputParser(Dsv4ThinkingMode mode, DsmlDialect dialect)
    : state_(mode == Dsv4ThinkingMode::kThinking ? State::kReasoning : State::kContent),
      tags_(dialect) {}

void Dsv4OutputParser::EmitReasoning(std::string_view s, Dsv4OutputDelta* delta) {
  result_.reasoning_content.append(s);
  delta->reasoning.append(s);
}

void Dsv4OutputParser::EmitContent(std::string_view s, Dsv4OutputDelta* delta) {
  result_.content.append(s);
  delta->content.append(s);
}

void Dsv4OutputParser::EmitArguments(std::string_view s, Dsv4OutputDelta* delta) {
  const int index = static_cast<int>(result_.tool_calls.size()) - 1;
  result_.tool_calls.back().arguments.append(s);
  if (!delta->tool_calls.empty() && delta->tool_calls.back().index == index) {
    delta->tool_calls.back().arguments.append(s);
  } else {
    delta->tool_calls.push_back({index, std::string(), std::string(s)});
  }
}

void Dsv4OutputParser::Fail(std::string error, Dsv4OutputDelta* delta) {
  if (!result_.malformed) {
    result_.malformed = true;
    result_.error = std::move(error);
  }
  state_ = State::kRaw;
  (void)delta;
}

bool Dsv4OutputParser::Step(bool at_end, Dsv4OutputDelta* delta) {
  std::string_view buf = buffer_;
  auto consume = [&](size_t n) { buffer_.erase(0, n); };
  // Expects `marker` at the front; kMaybe waits (or fails at the end).
  auto expect = [&](std::string_view marker, State next, const char* what) {
    Match m = StartsWith(buf, marker);
    if (m == Match::kYes) {
      consume(marker.size());
      state_ = next;
      return true;
    }
    if (m == Match::kMaybe && !at_end) return false;
    Fail(fmt::format("expected {} in the tool-calls block", what), delta);
    return true;
  };

  switch (state_) {
    case State::kReasoning: {
      size_t pos = buf.find(tok::kThinkEnd);
      if (pos != std::string_view::npos) {
        EmitReasoning(buf.substr(0, pos), delta);
        consume(pos + tok::kThinkEnd.size());
        state_ = State::kContent;
        return true;
      }
      size_t safe = at_end ? buf.size() : SafeEnd(buf, {tok::kThinkEnd});
      EmitReasoning(buf.substr(0, safe), delta);
      consume(safe);
      if (at_end) Fail("missing </think> after the reasoning", delta);
      return false;
    }
    case State::kContent: {
      size_t tools = buf.find(tags_.tool_calls_start);
      size_t eos = buf.find(kEos);
      if (tools != std::string_view::npos && (eos == std::string_view::npos || tools < eos)) {
        EmitContent(buf.substr(0, tools), delta);
        consume(tools + tags_.tool_calls_start.size());
        state_ = State::kToolCallsOpen;
        return true;
      }
      if (eos != std::string_view::npos) {
        EmitContent(buf.substr(0, eos), delta);
        consume(eos + kEos.size());
        state_ = State::kAfterEos;
        return true;
      }
      size_t safe = at_end ? buf.size() : SafeEnd(buf, {tags_.tool_calls_start, kEos});
      EmitContent(buf.substr(0, safe), delta);
      consume(safe);
      return false;
    }
    case State::kToolCallsOpen:
      return expect(">\n", State::kBetweenInvokes, "'>\\n' after <｜DSML｜tool_calls");
    case State::kBetweenInvokes: {
      Match end = StartsWith(buf, tags_.tool_calls_end);
      if (end == Match::kYes) {
        consume(tags_.tool_calls_end.size());
        state_ = State::kAfterToolCalls;
        return true;
      }
      Match inv = StartsWith(buf, tags_.invoke_start);
      if (inv == Match::kYes) {
        consume(tags_.invoke_start.size());
        state_ = State::kInvokeHeader;
        return true;
      }
      if ((end == Match::kMaybe || inv == Match::kMaybe) && !at_end) return false;
      Fail("expected <｜DSML｜invoke or </｜DSML｜tool_calls>", delta);
      return true;
    }
    case State::kInvokeHeader: {
      size_t close = buf.find(kInvokeClose);
      size_t tag = buf.find(kDsml);
      if (close == std::string_view::npos || (tag != std::string_view::npos && tag < close) ||
          close > kMaxHeader) {
        // Unfinished: wait while a close could still start within kMaxHeader
        // (the one-shot parse, with all the text, accepts one that does).
        if (at_end || tag != std::string_view::npos ||
            buf.size() >= kMaxHeader + kInvokeClose.size()) {
          Fail("malformed <｜DSML｜invoke name=\"...\"> header", delta);
          return true;
        }
        return false;
      }
      std::string_view header = buf.substr(0, close);
      size_t lead = 0;
      while (lead < header.size() && (header[lead] == ' ' || header[lead] == '\t' ||
                                      header[lead] == '\n' || header[lead] == '\r')) {
        ++lead;
      }
      if (header.substr(lead, 6) != "name=\"") {
        Fail("malformed <｜DSML｜invoke name=\"...\"> header", delta);
        return true;
      }
      std::string name(header.substr(lead + 6));
      consume(close + kInvokeClose.size());
      result_.tool_calls.push_back({name, std::string()});
      param_names_.clear();
      delta->tool_calls.push_back(
          {static_cast<int>(result_.tool_calls.size()) - 1, name, std::string()});
      EmitArguments("{", delta);
      state_ = State::kInvokeBody;
      return true;
    }
    case State::kInvokeBody: {
      Match param = StartsWith(buf, tags_.param_start);
      if (param == Match::kYes) {
        consume(tags_.param_start.size());
        state_ = State::kParamHeader;
        return true;
      }
      Match end = StartsWith(buf, tags_.invoke_end);
      if (end == Match::kYes) {
        consume(tags_.invoke_end.size());
        EmitArguments("}", delta);
        state_ = State::kBetweenInvokes;
        return true;
      }
      if ((param == Match::kMaybe || end == Match::kMaybe) && !at_end) return false;
      Fail("expected <｜DSML｜parameter or </｜DSML｜invoke>", delta);
      return true;
    }
    case State::kParamHeader: {
      constexpr std::string_view kNameOpen = " name=\"";
      Match open = StartsWith(buf, kNameOpen);
      if (open != Match::kYes) {
        if (open == Match::kMaybe && !at_end) return false;
        Fail("malformed <｜DSML｜parameter name=\"...\" string=\"true|false\"> header", delta);
        return true;
      }
      size_t t = buf.find(kStringClose, kNameOpen.size());
      size_t f = buf.find(kValueClose, kNameOpen.size());
      size_t pos = std::min(t, f);
      size_t tag = buf.find(kDsml);
      if (pos == std::string_view::npos || (tag != std::string_view::npos && tag < pos) ||
          pos > kMaxHeader) {
        // As for invoke headers: wait while either close could still start
        // within kMaxHeader.
        if (at_end || tag != std::string_view::npos ||
            buf.size() >= kMaxHeader + std::max(kStringClose.size(), kValueClose.size())) {
          Fail("malformed <｜DSML｜parameter name=\"...\" string=\"true|false\"> header", delta);
          return true;
        }
        return false;
      }
      std::string key(buf.substr(kNameOpen.size(), pos - kNameOpen.size()));
      param_is_string_ = pos == t;
      if (!param_names_.insert(key).second) {
        Fail(fmt::format("duplicate parameter name '{}'", key), delta);
        return true;
      }
      consume(pos + (param_is_string_ ? kStringClose : kValueClose).size());
      const bool first = param_names_.size() == 1;
      EmitArguments((first ? "" : ", ") + JsonQuote(key) + ": " + (param_is_string_ ? "\"" : ""),
                    delta);
      state_ = State::kParamValue;
      return true;
    }
    case State::kParamValue: {
      size_t end = buf.find(tags_.param_end);
      size_t stop = end == std::string_view::npos
                        ? (at_end ? buf.size() : SafeEnd(buf, {tags_.param_end}))
                        : end;
      std::string_view value = buf.substr(0, stop);
      EmitArguments(param_is_string_ ? JsonEscapeBody(value) : std::string(value), delta);
      consume(stop);
      if (end == std::string_view::npos) {
        if (at_end) Fail("output ends inside a tool-call parameter", delta);
        return false;
      }
      consume(tags_.param_end.size());
      if (param_is_string_) EmitArguments("\"", delta);
      state_ = State::kParamClose;
      return true;
    }
    case State::kParamClose:
      return expect(">\n", State::kInvokeBody, "'>\\n' after </｜DSML｜parameter");
    case State::kAfterToolCalls: {
      if (buf.empty()) return false;
      Match m = StartsWith(buf, kEos);
      if (m == Match::kYes) {
        consume(kEos.size());
        state_ = State::kAfterEos;
        return true;
      }
      if (m == Match::kMaybe && !at_end) return false;
      Fail("unexpected text after the tool-calls block", delta);
      return true;
    }
    case State::kAfterEos:
      if (buf.empty()) return false;
      Fail("unexpected text after <｜end▁of▁sentence｜>", delta);
      return true;
    case State::kRaw:
      EmitContent(buf, delta);
      consume(buf.size());
      return false;
  }
  return false;
}

Dsv4OutputDelta Dsv4OutputParser::Push(std::string_view text) {
  Dsv4OutputDelta delta;
  if (finished_) return delta;
  buffer_.append(text);
  while (Step(/*at_end=*/false, &delta)) {
  }
  return delta;
}

Dsv4OutputDelta Dsv4OutputParser::Finish() {
  Dsv4OutputDelta delta;
  if (finished_) return delta;
  while (Step(/*at_end=*/true, &delta)) {
  }
  if (state_ != State::kContent && state_ != State::kAfterToolCalls && state_ != State::kAfterEos &&
      state_ != State::kRaw && !result_.malformed) {
    Fail("output ends inside the tool-calls block", &delta);
  }
  if (!buffer_.empty()) {  // only after a failure
    EmitContent(buffer_, &delta);
    buffer_.clear();
  }
  // As the reference: no special-token text may be left in reasoning or content.
  for (std::string_view sp : {tok::kBos, tok::kEos, tok::kThinkStart, tok::kThinkEnd, tok::kDsml}) {
    if (!result_.malformed && (result_.content.find(sp) != std::string::npos ||
                               result_.reasoning_content.find(sp) != std::string::npos)) {
      result_.malformed = true;
      result_.error = fmt::format("unexpected '{}' in reasoning or content", sp);
    }
  }
  finished_ = true;
  return delta;
}

Dsv4ParsedOutput ParseDsv4Output(std::string_view text, Dsv4ThinkingMode mode,
                                 DsmlDialect dialect) {
  Dsv4OutputParser parser(mode, dialect);
  parser.Push(text);
  parser.Finish();
  Dsv4ParsedOutput out = parser.result();
  if (out.malformed) {
    std::string_view raw = text;
    if (raw.ends_with(tok::kEos)) raw.remove_suffix(tok::kEos.size());
    out.reasoning_content.clear();
    out.tool_calls.clear();
    out.content = std::string(raw);
  }
  return out;
}

}  // namespace dsv4
