// tool_choice enforcement by constrained decoding (tool_choice.h).
#include "server/tool_choice.h"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string_view>

#include "base/check.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4::server {
namespace {

namespace tok = dsv4_tokens;

const std::string kDsml(tok::kDsml);
const std::string kThinkEnd(tok::kThinkEnd);
// The DSML tags of a tool-call block: V4's, or V4.1's (a space after the DSML
// token, the block named "calls").
struct DsmlTags {
  std::string open_text, calls_marker, invoke_open, invoke_close, param_open, param_end, calls_end;
  std::string InvokeHeader(const std::string& name) const { return invoke_open + name + "\">\n"; }
};

DsmlTags MakeTags(bool v41) {
  const std::string d = kDsml + (v41 ? " " : "");
  const std::string calls = v41 ? "calls" : "tool_calls";
  return {.open_text = "\n\n<" + d + calls + ">\n",
          .calls_marker = "<" + d + calls + ">\n",  // after content (auto)
          .invoke_open = "<" + d + "invoke name=\"",
          .invoke_close = "</" + d + "invoke>\n",
          .param_open = "<" + d + "parameter name=\"",
          .param_end = "</" + d + "parameter",
          .calls_end = "</" + d + calls + ">"};
}

const DsmlTags& Tags(bool v41) {
  static const DsmlTags v4_tags = MakeTags(false), v41_tags = MakeTags(true);
  return v41 ? v41_tags : v4_tags;
}
constexpr size_t kMaxKeyBytes = 256;

// Bytes of `marker` matched at the end of the text after appending `b`, given
// `pos` matched before (the KMP step, with the border found by brute force:
// the markers are short).
uint32_t Advance(std::string_view marker, uint32_t pos, unsigned char b) {
  while (true) {
    if (pos < marker.size() && static_cast<unsigned char>(marker[pos]) == b) return pos + 1;
    if (pos == 0) return 0;
    uint32_t k = pos - 1;
    while (k > 0 && marker.substr(0, k) != marker.substr(pos - k, k)) --k;
    pos = k;
  }
}

}  // namespace

std::shared_ptr<const TokenTexts> BuildTokenTexts(const Tokenizer& tokenizer) {
  auto texts = std::make_shared<TokenTexts>(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) (*texts)[id] = tokenizer.Decode(id);
  return texts;
}

// ---- ToolCallConstraint ----

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const TokenTexts> texts, ToolCallSpec spec)
    : texts_(std::move(texts)), spec_(std::move(spec)) {
  CHECK(texts_ != nullptr);
  CHECK(!spec_.names.empty(), "a forced tool call needs at least one tool name");
  std::sort(spec_.names.begin(), spec_.names.end());
  spec_.names.erase(std::unique(spec_.names.begin(), spec_.names.end()), spec_.names.end());
  for (const std::string& n : spec_.names) {
    CHECK(!n.empty() && n.find_first_of("\"\n<>") == std::string::npos, "bad tool name '%s'",
          n.c_str());
    first_call_.push_back({Tags(spec_.v41).InvokeHeader(n), Next::kBody});
    if (auto it = spec_.arguments.find(n); it != spec_.arguments.end()) {
      tool_of_header_[Tags(spec_.v41).InvokeHeader(n)] = static_cast<int32_t>(automata_.size());
      automata_.push_back(std::make_shared<constrain::JsonAutomaton>(it->second));
    }
  }
  if (spec_.single_call) {
    after_call_ = {{Tags(spec_.v41).calls_end, Next::kDone}};
  } else {
    after_call_ = first_call_;
    after_call_.push_back({Tags(spec_.v41).calls_end, Next::kDone});
  }
  think_end_ = {{kThinkEnd, Next::kOpen}};
  open_ = {{Tags(spec_.v41).open_text, Next::kFirstCall}};
  body_ = {{Tags(spec_.v41).param_open, Next::kKey},
           {Tags(spec_.v41).invoke_close, Next::kAfterCall}};
  key_type_ = {{"\" string=\"true\">", Next::kValue}, {"\" string=\"false\">", Next::kValue}};
  param_close_ = {{">\n", Next::kBody}};
  for (auto* set :
       {&think_end_, &open_, &first_call_, &body_, &key_type_, &param_close_, &after_call_}) {
    std::sort(set->begin(), set->end(),
              [](const Candidate& a, const Candidate& b) { return a.text < b.text; });
  }
  if (spec_.thinking) {
    cursor_.phase = Phase::kReasoning;
  } else if (spec_.optional) {
    cursor_.phase = Phase::kContent;
  } else {
    Enter(cursor_, Next::kOpen);
  }
}

const std::vector<ToolCallConstraint::Candidate>& ToolCallConstraint::Set(Next set) const {
  switch (set) {
    case Next::kThinkEnd:
      return think_end_;
    case Next::kOpen:
      return open_;
    case Next::kFirstCall:
      return first_call_;
    case Next::kBody:
      return body_;
    case Next::kKeyType:
      return key_type_;
    case Next::kParamClose:
      return param_close_;
    case Next::kAfterCall:
      return after_call_;
    default:
      break;
  }
  CHECK(false, "not a candidate set");
  return open_;
}

void ToolCallConstraint::Enter(Cursor& c, Next next) const {
  c.pos = 0;
  switch (next) {
    case Next::kDone:
      c.phase = Phase::kDone;
      return;
    case Next::kKey:
      c.phase = Phase::kKey;
      c.key.clear();
      return;
    case Next::kValue:
      c.phase = Phase::kValue;
      c.value_len = 0;
      return;
    default:
      c.phase = Phase::kChoice;
      c.set = next;
      c.lo = 0;
      c.hi = static_cast<uint32_t>(Set(next).size());
      return;
  }
}

bool ToolCallConstraint::FeedArgs(Cursor& c, std::string_view json) const {
  if (c.tool < 0) return true;
  return automata_[c.tool]->FeedAll(&c.args, json);
}

bool ToolCallConstraint::ArgsAccept(const Cursor& c, std::string_view json) const {
  if (c.tool < 0) return true;
  constrain::State s = c.args;
  return automata_[c.tool]->FeedAll(&s, json);
}

bool ToolCallConstraint::ValueMayEnd(const Cursor& c) const {
  constrain::State s = c.args;
  const constrain::JsonAutomaton& a = *automata_[c.tool];
  return (!c.value_string || a.FeedAll(&s, "\"")) && a.MemberComplete(s);
}

bool ToolCallConstraint::FeedValueByte(Cursor& c, unsigned char b) const {
  if (!c.value_string) return FeedArgs(c, std::string_view(reinterpret_cast<char*>(&b), 1));
  switch (b) {  // the raw text of a string="true" value, as a JSON string's body
    case '"':
      return FeedArgs(c, "\\\"");
    case '\\':
      return FeedArgs(c, "\\\\");
    case '\n':
      return FeedArgs(c, "\\n");
    case '\r':
      return FeedArgs(c, "\\r");
    case '\t':
      return FeedArgs(c, "\\t");
    default:
      if (b < 0x20) return FeedArgs(c, fmt::format("\\u{:04x}", b));
      return FeedArgs(c, std::string_view(reinterpret_cast<char*>(&b), 1));
  }
}

bool ToolCallConstraint::Step(Cursor& c, unsigned char b) const {
  switch (c.phase) {
    case Phase::kReasoning:
      c.pos = Advance(kThinkEnd, c.pos, b);
      if (c.pos == kThinkEnd.size()) {
        if (spec_.optional) {
          c.phase = Phase::kContent;
          c.pos = 0;
        } else {
          Enter(c, Next::kOpen);
        }
      }
      return true;
    case Phase::kContent:
      c.pos = Advance(Tags(spec_.v41).calls_marker, c.pos, b);
      if (c.pos == Tags(spec_.v41).calls_marker.size()) Enter(c, Next::kFirstCall);
      return true;
    case Phase::kChoice: {
      // The candidates in [lo, hi) share their first `pos` bytes and are
      // sorted, so those whose next byte is `b` are a sub-range.
      // Binary search: a request may list many tools.
      const std::vector<Candidate>& set = Set(c.set);
      const uint32_t pos = c.pos;
      auto byte = [pos](const Candidate& k) { return static_cast<unsigned char>(k.text[pos]); };
      const auto first = set.begin() + c.lo, last = set.begin() + c.hi;
      const auto lo =
          std::partition_point(first, last, [&](const Candidate& k) { return byte(k) < b; });
      const auto hi =
          std::partition_point(lo, last, [&](const Candidate& k) { return byte(k) == b; });
      if (lo == hi) return false;
      // With a tool schema, a marker is refused as soon as it is the only
      // one left and the arguments cannot take what it means.
      if (c.tool >= 0 && hi - lo == 1) {
        if (c.set == Next::kBody && !ArgsAccept(c, lo->next == Next::kAfterCall ? "}"
                                                   : c.any_param                ? ",\""
                                                                                : "\"")) {
          return false;
        }
        if (c.set == Next::kKeyType && lo->text.find("true") != std::string::npos &&
            !ArgsAccept(c, "\"")) {
          return false;
        }
      }
      c.lo = static_cast<uint32_t>(lo - set.begin());
      c.hi = static_cast<uint32_t>(hi - set.begin());
      ++c.pos;
      // No candidate is a prefix of another, so a complete one is alone.
      if (lo->text.size() == c.pos) {
        const Next set_done = c.set, next = lo->next;
        if (set_done == Next::kKeyType) {
          c.value_string = lo->text.find("true") != std::string::npos;
        }
        if ((set_done == Next::kFirstCall || set_done == Next::kAfterCall) && next == Next::kBody) {
          auto it = tool_of_header_.find(lo->text);  // an invoke begins
          c.tool = it == tool_of_header_.end() ? -1 : it->second;
          c.any_param = false;
          if (c.tool >= 0) {
            c.args = automata_[c.tool]->Start();
            if (!FeedArgs(c, "{")) return false;
          }
        } else if (set_done == Next::kBody && next == Next::kKey) {
          if (!FeedArgs(c, c.any_param ? ",\"" : "\"")) return false;
        } else if (set_done == Next::kBody && next == Next::kAfterCall) {
          if (!FeedArgs(c, "}")) return false;
          c.tool = -1;
        } else if (set_done == Next::kKeyType) {
          c.any_param = true;
          c.pending.clear();
          if (c.value_string && !FeedArgs(c, "\"")) return false;
        }
        Enter(c, next);
      }
      return true;
    }
    case Phase::kKey:
      if (b == '"') {
        if (c.key.empty() || std::find(keys_.begin(), keys_.end(), c.key) != keys_.end()) {
          return false;
        }
        if (!FeedArgs(c, "\":")) return false;  // a property the schema takes
        Enter(c, Next::kKeyType);
        return Step(c, b);
      }
      if (b == '\n' || c.key.size() >= kMaxKeyBytes) return false;
      if (c.tool >= 0 &&
          (b < 0x20 ||
           !FeedArgs(c, b == '\\' ? std::string_view("\\\\")
                                  : std::string_view(reinterpret_cast<const char*>(&b), 1)))) {
        return false;
      }
      c.key.push_back(static_cast<char>(b));
      return !std::string_view(c.key).ends_with(kDsml);
    case Phase::kValue: {
      ++c.value_len;
      const uint32_t pos = Advance(Tags(spec_.v41).param_end, c.pos, b);
      if (c.tool >= 0) {
        // The bytes before the longest suffix that may begin the end marker
        // are value for sure.
        c.pending.push_back(static_cast<char>(b));
        const size_t sure = c.pending.size() - pos;
        for (size_t i = 0; i < sure; ++i) {
          if (!FeedValueByte(c, static_cast<unsigned char>(c.pending[i]))) return false;
        }
        c.pending.erase(0, sure);
        if (pos == Tags(spec_.v41).param_end.size()) {  // the value ends: it must be complete
          c.pending.clear();
          if (c.value_string && !FeedArgs(c, "\"")) return false;
          if (!automata_[c.tool]->MemberComplete(c.args)) return false;
        } else if (pos > 0 && !ValueMayEnd(c)) {
          // The bytes that may begin the end marker must be value should
          // the marker not follow (a '<' outside a JSON string never is).
          Cursor probe = c;
          for (char ch : c.pending) {
            if (!FeedValueByte(probe, static_cast<unsigned char>(ch))) return false;
          }
        }
      }
      c.pos = pos;
      if (c.pos == Tags(spec_.v41).param_end.size()) Enter(c, Next::kParamClose);
      return true;
    }
    case Phase::kDone:
      return false;
  }
  return false;
}

bool ToolCallConstraint::EosAllowed(const Cursor& c) const {
  switch (c.phase) {
    case Phase::kKey:
    case Phase::kValue:
      return true;
    case Phase::kReasoning:
      return spec_.optional;  // auto: the turn may end anywhere outside a call
    case Phase::kContent:
      return c.pos == 0;
    case Phase::kChoice:
      return c.pos == 0 && (c.set == Next::kBody || c.set == Next::kAfterCall);
    default:
      return false;
  }
}

void ToolCallConstraint::Prepare(int64_t tokens_left) {
  if (cursor_.phase == Phase::kReasoning && spec_.reserve_tokens > 0 &&
      tokens_left <= spec_.reserve_tokens) {
    // Out of room for reasoning: "</think>" (its part not yet written) comes now.
    const uint32_t matched = cursor_.pos;
    Enter(cursor_, Next::kThinkEnd);
    cursor_.pos = matched;
    forced_think_end_ = true;
  }
}

bool ToolCallConstraint::Allows(int32_t token) const {
  if (token == spec_.eos_id) return EosAllowed(cursor_);
  if (token < 0 || static_cast<size_t>(token) >= texts_->size()) return false;
  const std::string& bytes = (*texts_)[token];
  if (bytes.empty()) return false;
  if (cursor_.phase == Phase::kReasoning) {
    // Free text ("</think>" moves on), but no special-token text the parser
    // rejects in reasoning.
    for (std::string_view sp : {tok::kDsml, tok::kThinkStart, tok::kBos, tok::kEos}) {
      if (bytes.find(sp) != std::string::npos) return false;
    }
    return true;
  }
  if (cursor_.phase == Phase::kContent) {
    // Free content (every token of an answer without a call): only a token
    // that completes the call-block marker needs the full check below.
    uint32_t pos = cursor_.pos;
    bool opens = false;
    for (char ch : bytes) {
      pos = Advance(Tags(spec_.v41).calls_marker, pos, static_cast<unsigned char>(ch));
      if (pos == Tags(spec_.v41).calls_marker.size()) opens = true;
    }
    if (!opens) return true;
  }
  Cursor c = cursor_;
  for (char ch : bytes) {
    if (!Step(c, static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

void ToolCallConstraint::Accept(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= texts_->size()) return;
  for (char ch : (*texts_)[token]) {
    const Phase phase = cursor_.phase;
    const Next set = cursor_.set;
    std::string key = phase == Phase::kKey ? cursor_.key : std::string();
    if (!Step(cursor_, static_cast<unsigned char>(ch))) return;  // not allowed: never asked
    text_.push_back(ch);
    if (phase == Phase::kKey && cursor_.phase != Phase::kKey) keys_.push_back(std::move(key));
    if (phase == Phase::kChoice && (set == Next::kFirstCall || set == Next::kAfterCall) &&
        cursor_.phase == Phase::kChoice && cursor_.set == Next::kBody) {
      keys_.clear();  // a new invoke
    }
  }
}

bool ToolCallConstraint::done() const { return cursor_.phase == Phase::kDone; }

bool ToolCallConstraint::in_call() const {
  return !(cursor_.phase == Phase::kReasoning || cursor_.phase == Phase::kContent ||
           (cursor_.phase == Phase::kChoice && cursor_.set == Next::kThinkEnd));
}

bool ToolCallConstraint::stop_strings_apply() const {
  return cursor_.phase == Phase::kReasoning || cursor_.phase == Phase::kContent;
}

bool ToolCallConstraint::CompleteArguments(
    Cursor& c, const std::function<void(std::string_view)>& feed) const {
  const constrain::JsonAutomaton& a = *automata_[c.tool];
  switch (c.phase) {
    case Phase::kChoice:
      if (c.set == Next::kBody) {
        // The invoke closes once the schema's required arguments are given.
        const bool close = ArgsAccept(c, "}");
        const std::vector<Candidate>& set = Set(c.set);
        for (uint32_t i = c.lo; i < c.hi; ++i) {
          if ((set[i].next == Next::kAfterCall) == close) {
            feed(std::string_view(set[i].text).substr(c.pos));
            return true;
          }
        }
      } else if (c.set == Next::kKeyType) {
        // string="false" where it is still open: a JSON value fits any property.
        const std::vector<Candidate>& set = Set(c.set);
        uint32_t k = c.lo;
        for (uint32_t i = c.lo; i < c.hi; ++i) {
          if (set[i].text.find("false") != std::string::npos) k = i;
        }
        feed(std::string_view(set[k].text).substr(c.pos));
        return true;
      }
      return false;
    case Phase::kKey: {
      // The rest of the key the schema's completion writes (a required
      // property first).
      const std::string rest = a.Completion(c.args);
      const size_t quote = rest.find('"');
      std::string suffix = rest.substr(0, quote);
      if (c.key.empty() && suffix.empty()) suffix = "arg";
      feed(suffix);
      feed("\"");
      return true;
    }
    case Phase::kValue: {
      if (!c.pending.empty()) {
        if (ValueMayEnd(c)) return false;  // the plain step finishes the end marker
        feed(" ");  // not the marker after all: its bytes are the value's text
        return true;
      }
      // The value's part of the schema's completion (the string's closing
      // quote is the end marker's).
      const std::string rest = a.Completion(c.args);
      constrain::State st = c.args;
      std::string value;
      for (char ch : rest) {
        if (a.MemberComplete(st)) break;
        a.FeedAll(&st, std::string_view(&ch, 1));
        value.push_back(ch);
      }
      if (c.value_string && !value.empty() && value.back() == '"') value.pop_back();
      feed(value);
      feed(std::string_view(Tags(spec_.v41).param_end).substr(c.pos));
      return true;
    }
    default:
      return false;
  }
}

std::string ToolCallConstraint::Completion(Cursor c) const {
  std::string out;
  bool failed = false;
  const std::function<void(std::string_view)> feed = [&](std::string_view piece) {
    for (char ch : piece) {
      if (failed || !Step(c, static_cast<unsigned char>(ch))) {
        DCHECK(false, "a completion the constraint refuses");
        failed = true;  // stop rather than write what does not parse
        return;
      }
      out.push_back(ch);
    }
  };
  // Each round finishes one marker or field; a call closes in a few dozen
  // (more with many required arguments to add).
  for (int round = 0; round < 4096 && c.phase != Phase::kDone && !failed; ++round) {
    if (c.tool >= 0 && CompleteArguments(c, feed)) continue;
    switch (c.phase) {
      case Phase::kReasoning:
        if (spec_.optional) return out;  // auto: nothing to complete
        feed(std::string_view(kThinkEnd).substr(c.pos));
        break;
      case Phase::kContent:
        return out;  // no call opened (a cut marker stays content)
      case Phase::kChoice: {
        const std::vector<Candidate>& set = Set(c.set);
        uint32_t k = c.lo;
        // Prefer ending over starting something new, and string values (an
        // empty string is valid JSON; an empty raw value is not).
        for (uint32_t i = c.lo; i < c.hi; ++i) {
          const Next n = set[i].next;
          if ((c.set == Next::kBody && n == Next::kAfterCall) ||
              (c.set == Next::kAfterCall && n == Next::kDone) ||
              (c.set == Next::kKeyType && set[i].text.find("true") != std::string::npos)) {
            k = i;
          }
        }
        feed(std::string_view(set[k].text).substr(c.pos));
        break;
      }
      case Phase::kKey: {
        // Complete the name (unique, non-empty) and close it as a string.
        std::string key = c.key.empty() ? std::string("arg") : c.key;
        std::string suffix = c.key.empty() ? key : std::string();
        while (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) {
          key += "_";
          suffix += "_";
        }
        out += suffix;
        Enter(c, Next::kKeyType);  // past the length limit Step would refuse: move on directly
        feed("\" string=\"true\">");
        break;
      }
      case Phase::kValue:
        if (!c.value_string && c.value_len == 0) feed("null");  // "": not a JSON value
        feed(std::string_view(Tags(spec_.v41).param_end).substr(c.pos));
        break;
      case Phase::kDone:
        break;
    }
  }
  return out;
}

std::string ToolCallConstraint::Close() {
  if (cursor_.phase == Phase::kDone) return {};
  std::string s = Completion(cursor_);
  text_ += s;
  Enter(cursor_, Next::kDone);
  return s;
}

// ---- BanTokensConstraint ----

bool BanTokensConstraint::Allows(int32_t token) const {
  return std::find(banned_.begin(), banned_.end(), token) == banned_.end();
}

void BanTokensConstraint::Mask(std::span<float> logits) const {
  for (int32_t id : banned_) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
      logits[id] = -std::numeric_limits<float>::infinity();
    }
  }
}

// ---- factory ----

bool ForcesToolCall(const GenerationRequest& request) {
  return request.api != Api::kCompletion &&
         (request.tool_choice == "required" || request.tool_choice == "function");
}

ConstraintFactory MakeToolChoiceConstraint(const GenerationRequest& request,
                                           const Tokenizer& tokenizer,
                                           const std::shared_ptr<const TokenTexts>& texts,
                                           bool v41) {
  if (request.api == Api::kCompletion) return nullptr;
  if (request.tool_choice == "none") {
    const std::vector<int32_t> dsml = tokenizer.Encode(tok::kDsml, false);
    if (dsml.size() != 1) return nullptr;  // no DSML token: the format has no tool calls
    return [id = dsml[0]] { return std::make_unique<BanTokensConstraint>(std::vector{id}); };
  }
  if (texts == nullptr || request.tools.empty()) return nullptr;
  ToolCallSpec spec;
  if (!ForcesToolCall(request)) {
    spec.optional = true;  // auto
    for (const auto& t : request.tools) spec.names.push_back(t["function"]["name"]);
    spec.single_call = !request.parallel_tool_calls;
  } else if (request.tool_choice == "function") {
    spec.names = {request.tool_choice_name};
    spec.single_call = true;
  } else {
    for (const auto& t : request.tools) spec.names.push_back(t["function"]["name"]);
    spec.single_call = !request.parallel_tool_calls;
  }
  if (spec.names.empty()) return nullptr;
  spec.thinking = request.thinking;
  spec.v41 = v41;
  spec.eos_id = tokenizer.eos_id();
  // The arguments of tools whose parameters are an object schema of the
  // supported subset are checked against it; the others' are free.
  for (const auto& t : request.tools) {
    const auto& fn = t["function"];
    if (!fn.contains("parameters")) continue;
    const std::string name = fn["name"];
    if (std::find(spec.names.begin(), spec.names.end(), name) == spec.names.end()) continue;
    Result<std::shared_ptr<const constrain::Grammar>> g =
        constrain::CompileJsonSchema(nlohmann::json::parse(fn["parameters"].dump()));
    if (g.ok() && (*g)->nodes[(*g)->root].kind == constrain::NodeKind::kObject) {
      spec.arguments[name] = *g;
    }
  }
  if (spec.optional && spec.arguments.empty()) return nullptr;  // nothing to check
  if (spec.thinking && !spec.optional) {
    for (const std::string& n : spec.names) {
      const std::string header = kThinkEnd + Tags(v41).open_text + Tags(v41).InvokeHeader(n);
      spec.reserve_tokens = std::max(
          spec.reserve_tokens, static_cast<int64_t>(tokenizer.Encode(header, false).size()) + 1);
    }
  }
  return [texts, spec] { return std::make_unique<ToolCallConstraint>(texts, spec); };
}

}  // namespace dsv4::server
