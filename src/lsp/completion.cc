// Completion prompts and stop rules (completion.h).
#include "lsp/completion.h"

#include <algorithm>

namespace dsv4::lsp {
namespace {

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

}  // namespace

std::string_view TailChars(std::string_view text, int64_t chars) {
  size_t start = text.size();
  for (int64_t n = 0; start > 0 && n < chars; ++n) {
    --start;
    while (start > 0 && IsContinuation(text[start])) --start;
  }
  if (start > 0) {
    // Begin at the first whole line of the kept text, if it has one.
    const size_t nl = text.find('\n', start);
    if (nl != std::string_view::npos && nl + 1 < text.size()) start = nl + 1;
  }
  return text.substr(start);
}

std::string_view HeadChars(std::string_view text, int64_t chars) {
  size_t end = 0;
  for (int64_t n = 0; end < text.size() && n < chars; ++n) {
    ++end;
    while (end < text.size() && IsContinuation(text[end])) ++end;
  }
  if (end < text.size()) {
    // End with the last whole line of the kept text, if it has one.
    const size_t nl = text.substr(0, end).rfind('\n');
    if (nl != std::string_view::npos && nl > 0) end = nl + 1;
  }
  return text.substr(0, end);
}

CompletionPrompt BuildCompletionPrompt(std::string_view before, std::string_view after, bool fim,
                                       const CompletionOptions& options) {
  CompletionPrompt p;
  p.fim = fim;
  const size_t line_start = before.find_last_of("\r\n");
  p.cursor_line =
      std::string(line_start == std::string_view::npos ? before : before.substr(line_start + 1));
  const std::string_view prefix = TailChars(before, options.context_chars);
  if (!fim) {
    p.text = std::string(prefix);
    p.plain.push_back({0, p.text.size()});
    return p;
  }
  const std::string_view suffix = HeadChars(after, options.suffix_chars);
  p.text = std::string(kFimBegin);
  p.plain.push_back({p.text.size(), p.text.size() + prefix.size()});
  p.text += prefix;
  p.text += kFimHole;
  p.plain.push_back({p.text.size(), p.text.size() + suffix.size()});
  p.text += suffix;
  p.text += kFimEnd;
  return p;
}

CompletionTrimmer::CompletionTrimmer(std::string_view cursor_line, const CompletionOptions& options)
    : blank_(options.stop_at_blank_line), block_(options.stop_at_block_end) {
  while (indent_ < cursor_line.size() && IsBlank(cursor_line[indent_])) ++indent_;
}

bool CompletionTrimmer::Push(std::string_view piece) {
  if (ended_) return false;
  text_.append(piece);
  // Every line after the first: a complete blank one, or one indented less
  // than the cursor's line (decided at its first visible character), ends the
  // completion before its line break.
  for (size_t nl = text_.find('\n'); nl != std::string::npos; nl = text_.find('\n', nl + 1)) {
    const size_t next = text_.find('\n', nl + 1);
    const size_t end = next == std::string::npos ? text_.size() : next;
    size_t ws = nl + 1;
    while (ws < end && IsBlank(text_[ws])) ++ws;
    const bool blank = ws == end;
    if ((blank && blank_ && next != std::string::npos) ||
        (!blank && block_ && ws - (nl + 1) < indent_)) {
      text_.resize(nl);
      ended_ = true;
      return false;
    }
  }
  return true;
}

}  // namespace dsv4::lsp
