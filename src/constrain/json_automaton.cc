// The JSON pushdown automaton (json_automaton.h).
#include "constrain/json_automaton.h"

#include <algorithm>
#include <bit>

#include "base/check.h"

namespace dsv4::constrain {
namespace {

bool IsWs(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// The range of the next UTF-8 continuation byte by class (Frame::utf8_class).
constexpr uint8_t kContLo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
constexpr uint8_t kContHi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

enum class Lex { kRefused, kClose, kChar, kPart };

// One byte inside a JSON string (a value or a key): kClose for the closing
// quote, kChar when a code point is complete or begun (counts one), kPart for
// the rest of an escape or a multi-byte character.
Lex StringByte(Frame& f, uint8_t b) {
  if (f.utf8_due > 0) {
    if (b < kContLo[f.utf8_class] || b > kContHi[f.utf8_class]) return Lex::kRefused;
    --f.utf8_due;
    f.utf8_class = 0;
    return Lex::kPart;
  }
  switch (f.escape) {
    case 0:
      break;
    case 1:
      if (b == 'u') {
        f.escape = 2;
        return Lex::kPart;
      }
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
          b == 't') {
        f.escape = 0;
        return Lex::kPart;
      }
      return Lex::kRefused;
    case 2:  // first hex digit: 'd' may begin a surrogate
      if (!IsHex(b)) return Lex::kRefused;
      f.escape = (b == 'd' || b == 'D') ? 6 : 3;
      return Lex::kPart;
    case 6:  // after "\ud": 0..7 only (d800..dfff are surrogates)
      if (!(b >= '0' && b <= '7')) return Lex::kRefused;
      f.escape = 4;
      return Lex::kPart;
    default:  // 3, 4, 5
      if (!IsHex(b)) return Lex::kRefused;
      f.escape = f.escape == 5 ? 0 : f.escape + 1;
      return Lex::kPart;
  }
  if (b == '"') return Lex::kClose;
  if (b == '\\') {
    f.escape = 1;
    return Lex::kChar;
  }
  if (b < 0x20) return Lex::kRefused;
  if (b < 0x80) return Lex::kChar;
  if (b >= 0xC2 && b <= 0xDF) {
    f.utf8_due = 1;
    f.utf8_class = 0;
  } else if (b >= 0xE0 && b <= 0xEF) {
    f.utf8_due = 2;
    f.utf8_class = b == 0xE0 ? 1 : b == 0xED ? 2 : 0;
  } else if (b >= 0xF0 && b <= 0xF4) {
    f.utf8_due = 3;
    f.utf8_class = b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0;
  } else {
    return Lex::kRefused;
  }
  return Lex::kChar;
}

void Emit(const std::vector<Frame>& s, State* out) {
  out->frames.insert(out->frames.end(), s.begin(), s.end());
  out->ends.push_back(static_cast<uint32_t>(out->frames.size()));
}

// Structural whitespace: at most kMaxWhitespace bytes in a row.
bool Whitespace(std::vector<Frame>& s) {
  Frame& f = s.back();
  if (f.ws >= kMaxWhitespace) return false;
  ++f.ws;
  return true;
}

// Whether another key may begin in object frame `f`.
bool KeyPossible(const Node& n, const Frame& f) {
  if (n.additional >= 0) return true;
  const size_t np = n.properties.size();
  const uint64_t all = np == 64 ? ~uint64_t{0} : (uint64_t{1} << np) - 1;
  return (f.seen & all) != all;
}

bool RequiredSeen(const Node& n, const Frame& f) { return (n.required_mask & ~f.seen) == 0; }

// A frame whose value is complete but may go on (a number, a number literal).
bool CompleteButOpen(const Grammar& g, const Frame& f) {
  switch (f.phase) {
    case Phase::kNumZero:
    case Phase::kNumInt:
    case Phase::kNumFrac:
    case Phase::kNumExpDigits:
      return true;
    case Phase::kLiteral:
      return g.nodes[f.node].literals[f.lo].size() == f.count;
    default:
      return false;
  }
}

}  // namespace

JsonAutomaton::JsonAutomaton(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  CHECK(grammar_ != nullptr);
}

State JsonAutomaton::Start() const {
  State s;
  Frame f;
  f.node = grammar_->root;
  s.frames.push_back(f);
  s.ends.push_back(1);
  return s;
}

void JsonAutomaton::PushValue(Stack& s, int32_t node) {
  Frame f;
  f.node = node;
  s.push_back(f);
}

void JsonAutomaton::Feed(const State& in, uint8_t b, State* out) const {
  DCHECK(&in != out);
  out->clear();
  if (in.ends.size() == 1) {
    // One configuration (the usual case): stepped in place in `out`.
    out->frames.assign(in.frames.begin(), in.frames.end());
    forks_.clear();
    const bool ok = FeedStack(out->frames, b, &forks_);
    if (forks_.empty()) {
      if (ok) {
        out->ends.push_back(static_cast<uint32_t>(out->frames.size()));
      } else {
        out->frames.clear();
      }
      return;
    }
    if (ok) Emit(out->frames, &forks_);
    std::swap(*out, forks_);
  } else {
    uint32_t begin = 0;
    for (uint32_t end : in.ends) {
      scratch_.assign(in.frames.begin() + begin, in.frames.begin() + end);
      if (FeedStack(scratch_, b, out)) Emit(scratch_, out);
      begin = end;
    }
  }
  if (out->ends.size() > 1) {
    // Drop configurations equal to an earlier one.
    State& o = *out;
    std::vector<uint32_t> keep_ends;
    std::vector<Frame> keep;
    uint32_t b0 = 0;
    for (uint32_t e : o.ends) {
      bool dup = false;
      uint32_t k0 = 0;
      for (uint32_t ke : keep_ends) {
        if (ke - k0 == e - b0 &&
            std::equal(o.frames.begin() + b0, o.frames.begin() + e, keep.begin() + k0)) {
          dup = true;
          break;
        }
        k0 = ke;
      }
      if (!dup) {
        keep.insert(keep.end(), o.frames.begin() + b0, o.frames.begin() + e);
        keep_ends.push_back(static_cast<uint32_t>(keep.size()));
      }
      b0 = e;
    }
    o.frames = std::move(keep);
    o.ends = std::move(keep_ends);
    if (o.ends.size() > kMaxConfigurations) {
      // Dropping alternatives keeps the automaton sound (each one left is a
      // valid prefix with a completion); only the choice narrows.
      o.ends.resize(kMaxConfigurations);
      o.frames.resize(o.ends.back());
    }
  }
}

bool JsonAutomaton::FeedAll(State* state, std::string_view bytes) const {
  for (char c : bytes) {
    Feed(*state, static_cast<uint8_t>(c), &feed_scratch_);
    std::swap(*state, feed_scratch_);
    if (state->empty()) return false;
  }
  return true;
}

bool JsonAutomaton::FeedStack(Stack& s, uint8_t b, State* out) const {
  const std::vector<Node>& nodes = grammar_->nodes;
  while (true) {
    if (s.empty()) return false;  // the root value is closed: nothing may follow
    Frame& f = s.back();
    const Node& n = nodes[f.node];
    if (!IsWs(b)) f.ws = 0;  // the frame that reads a byte ends its run of whitespace
    switch (f.phase) {
      case Phase::kValue: {
        if (IsWs(b)) return Whitespace(s);
        if (!n.first.test(b)) return false;
        switch (n.kind) {
          case NodeKind::kAny:
            f.node = b == '{'                   ? kAnyObjectNode
                     : b == '['                 ? kAnyArrayNode
                     : b == '"'                 ? kAnyStringNode
                     : (b == '-' || IsDigit(b)) ? kAnyNumberNode
                                                : kAnyLiteralNode;
            continue;
          case NodeKind::kAnyOf: {
            int32_t last = -1;
            for (int32_t a : n.alternatives) {
              if (!nodes[a].first.test(b)) continue;
              if (last >= 0) {
                Stack copy = s;
                copy.back().node = last;
                if (FeedStack(copy, b, out)) Emit(copy, out);
              }
              last = a;
            }
            f.node = last;  // `first` is the union, so one matched
            continue;
          }
          case NodeKind::kObject:
            f.phase = Phase::kObjOpen;
            f.seen = 0;
            return true;
          case NodeKind::kArray:
            f.phase = Phase::kArrOpen;
            f.count = 0;
            return true;
          case NodeKind::kString:
            f.phase = Phase::kString;
            f.count = 0;
            return true;
          case NodeKind::kNumber:
          case NodeKind::kInteger:
            f.phase = b == '-' ? Phase::kNumSign : b == '0' ? Phase::kNumZero : Phase::kNumInt;
            return true;
          case NodeKind::kLiteral:
            f.phase = Phase::kLiteral;
            f.lo = 0;
            f.hi = static_cast<uint16_t>(n.literals.size());
            f.count = 0;
            continue;
        }
        return false;
      }
      case Phase::kLiteral: {
        const std::vector<std::string>& lits = n.literals;
        const bool complete = lits[f.lo].size() == f.count;
        const uint32_t pos = f.count;
        const auto first = lits.begin() + f.lo + (complete ? 1 : 0), last = lits.begin() + f.hi;
        const auto byte = [pos](const std::string& t) { return static_cast<uint8_t>(t[pos]); };
        const auto lo =
            std::partition_point(first, last, [&](const std::string& t) { return byte(t) < b; });
        const auto hi =
            std::partition_point(lo, last, [&](const std::string& t) { return byte(t) == b; });
        if (lo == hi) {
          if (!complete) return false;
          s.pop_back();  // a complete number: the byte is the container's
          continue;
        }
        f.lo = static_cast<uint16_t>(lo - lits.begin());
        f.hi = static_cast<uint16_t>(hi - lits.begin());
        ++f.count;
        if (f.hi - f.lo == 1 && lits[f.lo].size() == f.count && !IsDigit(b)) s.pop_back();
        return true;
      }
      case Phase::kString: {
        if (!n.format.empty() && f.escape == 0 && f.utf8_due == 0) {
          if (f.count == n.format.size()) {
            if (b != '"') return false;
            s.pop_back();
            return true;
          }
          const char want = n.format[f.count];
          const bool ok = want == 'd' ? IsDigit(b) : want == 'x' ? IsHex(b) : b == want;
          if (!ok) return false;
          ++f.count;
          return true;
        }
        const Lex lex = StringByte(f, b);
        if (lex == Lex::kRefused) return false;
        if (lex == Lex::kClose) {
          if (f.count < n.min_length) return false;
          s.pop_back();
          return true;
        }
        if (lex == Lex::kChar) {
          if (f.count >= n.max_length) return false;
          ++f.count;
        }
        return true;
      }
      case Phase::kObjOpen:
      case Phase::kObjNeedKey:
        if (IsWs(b)) return Whitespace(s);
        if (b == '}' && f.phase == Phase::kObjOpen) {
          if (!RequiredSeen(n, f)) return false;
          s.pop_back();
          return true;
        }
        if (b != '"' || !KeyPossible(n, f)) return false;
        f.phase = Phase::kObjKey;
        f.lo = 0;
        f.hi = static_cast<uint16_t>(n.properties.size());
        f.count = 0;
        f.backslash = false;
        f.escape = f.utf8_due = 0;
        return true;
      case Phase::kObjKey: {
        const std::vector<Property>& props = n.properties;
        const bool in_char = f.escape != 0 || f.utf8_due != 0;
        const Lex lex = StringByte(f, b);
        if (lex == Lex::kRefused) return false;
        if (lex == Lex::kClose) {
          if (f.lo < f.hi && props[f.lo].key.size() == f.count) {
            const uint64_t bit = uint64_t{1} << f.lo;
            if (f.seen & bit) return false;  // a duplicate key
            f.seen |= bit;
            f.prop = static_cast<int16_t>(f.lo);
          } else {
            if (n.additional < 0 || f.backslash) return false;
            f.prop = -1;
          }
          f.phase = Phase::kObjColon;
          return true;
        }
        if (b == '\\' && !in_char) f.backslash = true;
        // The properties whose key continues with `b`.
        const uint32_t pos = f.count;
        const auto first = props.begin() + f.lo, last = props.begin() + f.hi;
        const auto byte = [pos](const Property& p) {
          return p.key.size() > pos ? static_cast<int>(static_cast<uint8_t>(p.key[pos])) : -1;
        };
        const auto lo =
            std::partition_point(first, last, [&](const Property& p) { return byte(p) < b; });
        const auto hi =
            std::partition_point(lo, last, [&](const Property& p) { return byte(p) == b; });
        f.lo = static_cast<uint16_t>(lo - props.begin());
        f.hi = static_cast<uint16_t>(hi - props.begin());
        ++f.count;
        bool unseen = false;
        for (uint16_t i = f.lo; i < f.hi && !unseen; ++i) unseen = !(f.seen >> i & 1);
        if (!unseen && (n.additional < 0 || f.backslash)) return false;
        return true;
      }
      case Phase::kObjColon: {
        if (IsWs(b)) return Whitespace(s);
        if (b != ':') return false;
        f.phase = Phase::kObjAfter;
        const int32_t child = f.prop >= 0 ? n.properties[f.prop].node : n.additional;
        f.prop = -1;
        PushValue(s, child);
        return true;
      }
      case Phase::kObjAfter:
        if (IsWs(b)) return Whitespace(s);
        if (b == ',') {
          if (!KeyPossible(n, f)) return false;
          f.phase = Phase::kObjNeedKey;
          return true;
        }
        if (b != '}' || !RequiredSeen(n, f)) return false;
        s.pop_back();
        return true;
      case Phase::kArrOpen:
        if (IsWs(b)) return Whitespace(s);
        if (b == ']') {
          if (n.min_items > 0) return false;
          s.pop_back();
          return true;
        }
        if (n.max_items == 0) return false;
        f.phase = Phase::kArrAfter;
        f.count = 1;
        PushValue(s, n.items);
        continue;
      case Phase::kArrAfter:
        if (IsWs(b)) return Whitespace(s);
        if (b == ',') {
          if (f.count >= n.max_items) return false;
          ++f.count;
          PushValue(s, n.items);
          return true;
        }
        if (b != ']' || f.count < n.min_items) return false;
        s.pop_back();
        return true;
      case Phase::kNumSign:
        if (!IsDigit(b)) return false;
        f.phase = b == '0' ? Phase::kNumZero : Phase::kNumInt;
        return true;
      case Phase::kNumZero:
      case Phase::kNumInt:
      case Phase::kNumFrac:
      case Phase::kNumExpDigits: {
        const bool real = n.kind == NodeKind::kNumber;
        if (IsDigit(b) && f.phase != Phase::kNumZero) return true;
        if (real && b == '.' && (f.phase == Phase::kNumZero || f.phase == Phase::kNumInt)) {
          f.phase = Phase::kNumDot;
          return true;
        }
        if (real && (b == 'e' || b == 'E') && f.phase != Phase::kNumExpDigits) {
          f.phase = Phase::kNumExp;
          return true;
        }
        s.pop_back();  // the number ended: the byte is the container's
        continue;
      }
      case Phase::kNumDot:
        if (!IsDigit(b)) return false;
        f.phase = Phase::kNumFrac;
        return true;
      case Phase::kNumExp:
        if (b == '+' || b == '-') {
          f.phase = Phase::kNumExpSign;
          return true;
        }
        [[fallthrough]];
      case Phase::kNumExpSign:
        if (!IsDigit(b)) return false;
        f.phase = Phase::kNumExpDigits;
        return true;
    }
    return false;
  }
}

bool JsonAutomaton::Complete(const State& state) const {
  uint32_t begin = 0;
  for (uint32_t end : state.ends) {
    if (end == begin) return true;
    if (end - begin == 1 && CompleteButOpen(*grammar_, state.frames[begin])) return true;
    begin = end;
  }
  return false;
}

bool JsonAutomaton::MemberComplete(const State& state) const {
  uint32_t begin = 0;
  for (uint32_t end : state.ends) {
    const uint32_t n = end - begin;
    if (n == 1 && state.frames[begin].phase == Phase::kObjAfter) return true;
    if (n == 2 && state.frames[begin].phase == Phase::kObjAfter &&
        CompleteButOpen(*grammar_, state.frames[begin + 1])) {
      return true;
    }
    begin = end;
  }
  return false;
}

bool JsonAutomaton::CanContinue(const State& state) const {
  uint32_t begin = 0;
  for (uint32_t end : state.ends) {
    if (end > begin) return true;
    begin = end;
  }
  return false;
}

std::string JsonAutomaton::CompletionStep(const Stack& s) const {
  if (s.empty()) return {};
  const Frame& f = s.back();
  const Node& n = grammar_->nodes[f.node];
  if (CompleteButOpen(*grammar_, f)) {  // what closes the container closes the number
    Stack parent(s.begin(), s.end() - 1);
    return CompletionStep(parent);
  }
  const auto member = [&](int i) {
    return "\"" + n.properties[i].key + "\":" + grammar_->nodes[n.properties[i].node].min_value;
  };
  const auto first_unseen = [&](uint32_t lo, uint32_t hi) {
    int best = -1;
    for (uint32_t i = lo; i < hi; ++i) {
      if (f.seen >> i & 1) continue;
      if (n.required_mask >> i & 1) return static_cast<int>(i);
      if (best < 0) best = static_cast<int>(i);
    }
    return best;
  };
  const auto unseen_required = [&]() {
    const uint64_t due = n.required_mask & ~f.seen;
    return due == 0 ? -1 : std::countr_zero(due);
  };
  if (f.phase == Phase::kObjKey) {
    // A key goes on as a property's name (byte by byte: inside an escape or
    // a character too), else closes as an additional one.
    const bool in_char = f.escape != 0 || f.utf8_due != 0;
    const int p = first_unseen(f.lo, f.hi);
    const bool exact_seen = f.lo < f.hi && n.properties[f.lo].key.size() == f.count;
    // A required property the key can still become is written out: the
    // object needs it anyway (closing the key as an additional one instead
    // would leave it to add, and a caller completing key by key would never
    // get to it).
    const bool required = p >= 0 && (n.required_mask >> p & 1) != 0;
    if (n.additional >= 0 && !in_char && !f.backslash && !exact_seen && !required) return "\"";
    if (p >= 0) return n.properties[p].key.substr(f.count) + "\"";
    if (!in_char) return "_";  // a seen name so far: make it another
  }
  if (f.utf8_due > 0) return std::string(1, static_cast<char>(kContLo[f.utf8_class]));
  if (f.escape == 1) return "n";
  if (f.escape >= 2) return "0";
  switch (f.phase) {
    case Phase::kValue:
      return n.min_value;
    case Phase::kString:
      if (!n.format.empty()) {
        if (f.count == n.format.size()) return "\"";
        const char c = n.format[f.count];
        return std::string(1, c == 'd' || c == 'x' ? n.format_example[f.count] : c);
      }
      if (f.count < n.min_length) return std::string(n.min_length - f.count, 'a');
      return "\"";
    case Phase::kLiteral: {
      const std::string* best = &n.literals[f.lo];
      for (uint32_t i = f.lo; i < f.hi; ++i) {
        if (n.literals[i].size() < best->size()) best = &n.literals[i];
      }
      return best->substr(f.count);
    }
    case Phase::kNumSign:
    case Phase::kNumDot:
    case Phase::kNumExp:
    case Phase::kNumExpSign:
      return "0";
    case Phase::kObjOpen: {
      const int r = unseen_required();
      return r < 0 ? "}" : member(r);
    }
    case Phase::kObjAfter: {
      const int r = unseen_required();
      if (r < 0) return "}";
      std::string out = ",";
      out += member(r);
      return out;
    }
    case Phase::kObjNeedKey: {
      const int p = first_unseen(0, static_cast<uint32_t>(n.properties.size()));
      if (p >= 0) return member(p);
      // An additional key that is no property's.
      std::string key = "k";
      while (std::any_of(n.properties.begin(), n.properties.end(),
                         [&](const Property& q) { return q.key == key; })) {
        key += "_";
      }
      return "\"" + key + "\":" + grammar_->nodes[n.additional].min_value;
    }
    case Phase::kObjColon: {
      const int32_t child = f.prop >= 0 ? n.properties[f.prop].node : n.additional;
      return ":" + grammar_->nodes[child].min_value;
    }
    case Phase::kArrOpen:
      return n.min_items == 0 ? "]" : grammar_->nodes[n.items].min_value;
    case Phase::kArrAfter:
      return f.count < n.min_items ? "," + grammar_->nodes[n.items].min_value : "]";
    default:
      return {};
  }
}

std::string JsonAutomaton::Completion(const State& state) const {
  std::string best;
  bool found = false;
  uint32_t begin = 0;
  for (uint32_t end : state.ends) {
    State st;
    st.frames.assign(state.frames.begin() + begin, state.frames.begin() + end);
    st.ends.push_back(end - begin);
    begin = end;
    std::string text;
    // Each step closes a character, a member, an item or a container; the
    // smallest values are bounded (kMaxMinValueBytes), so this ends. Two
    // steps are taken without feeding their bytes (the per-token cost):
    // a value not yet begun is written whole and popped, and a string's
    // padding up to minLength only moves its count.
    for (int round = 0; round < (1 << 16) && !Complete(st); ++round) {
      if (st.ends.size() == 1 && !st.frames.empty()) {
        Frame& f = st.frames.back();
        const Node& n = grammar_->nodes[f.node];
        if (f.phase == Phase::kValue) {
          text += n.min_value;
          st.frames.pop_back();
          st.ends[0] = static_cast<uint32_t>(st.frames.size());
          continue;
        }
        if (f.phase == Phase::kString && n.format.empty() && f.escape == 0 && f.utf8_due == 0 &&
            f.count < n.min_length) {
          text.append(n.min_length - f.count, 'a');
          f.count = n.min_length;
          continue;
        }
      }
      const uint32_t e0 = st.ends[0];
      const Stack s(st.frames.begin(), st.frames.begin() + e0);
      const std::string piece = CompletionStep(s);
      if (piece.empty() || !FeedAll(&st, piece)) {
        text.clear();
        st.clear();
        break;
      }
      text += piece;
    }
    if (st.empty() || !Complete(st)) continue;
    if (!found || text.size() < best.size()) best = std::move(text);
    found = true;
  }
  return best;
}

std::string JsonAutomaton::Key(const State& state, uint32_t max_token_bytes) const {
  const uint32_t k = max_token_bytes;
  // A count that leaves at least k of room on both sides acts the same for
  // any token of at most k bytes (a byte adds at most one code point or item).
  const auto canonical = [k](uint32_t count, uint32_t min, uint32_t max) -> uint32_t {
    if (static_cast<uint64_t>(count) + k < min) return 0xFFFFFFFEu;
    if (count >= min && (max == kUnbounded || max - count >= k)) return 0xFFFFFFFFu;
    return count;
  };
  std::string key;
  key.reserve(state.frames.size() * sizeof(Frame) + state.ends.size() * 4);
  uint32_t begin = 0;
  for (uint32_t end : state.ends) {
    for (uint32_t i = begin; i < end; ++i) {
      Frame f = state.frames[i];
      const Node& n = grammar_->nodes[f.node];
      if (f.phase == Phase::kString && n.format.empty()) {
        f.count = canonical(f.count, n.min_length, n.max_length);
      } else if (f.phase == Phase::kArrOpen || f.phase == Phase::kArrAfter) {
        f.count = canonical(f.count, n.min_items, n.max_items);
      }
      // Serialised field by field: Frame has padding.
      key.append(reinterpret_cast<const char*>(&f.node), sizeof(f.node));
      key.push_back(static_cast<char>(f.phase));
      key.push_back(static_cast<char>(f.escape));
      key.push_back(static_cast<char>(f.utf8_due));
      key.push_back(static_cast<char>(f.utf8_class));
      key.append(reinterpret_cast<const char*>(&f.count), sizeof(f.count));
      key.append(reinterpret_cast<const char*>(&f.lo), sizeof(f.lo));
      key.append(reinterpret_cast<const char*>(&f.hi), sizeof(f.hi));
      key.push_back(static_cast<char>(f.backslash));
      key.push_back(static_cast<char>(f.ws));
      key.append(reinterpret_cast<const char*>(&f.prop), sizeof(f.prop));
      key.append(reinterpret_cast<const char*>(&f.seen), sizeof(f.seen));
    }
    key.push_back('|');
    begin = end;
  }
  return key;
}

}  // namespace dsv4::constrain
