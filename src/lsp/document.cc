// Open documents and UTF-16 positions (document.h).
#include "lsp/document.h"

#include <utility>

namespace dsv4::lsp {
namespace {

// Length of the UTF-8 sequence led by byte `b` (1 for a byte that leads none).
size_t SequenceLength(unsigned char b) {
  if (b >= 0xF0 && b <= 0xF4) return 4;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  return 1;
}

}  // namespace

size_t OffsetOf(std::string_view text, Position pos) {
  if (pos.line < 0) pos.line = 0;
  if (pos.character < 0) pos.character = 0;
  size_t i = 0;
  for (int64_t line = 0; line < pos.line; ++line) {
    while (i < text.size() && text[i] != '\n' && text[i] != '\r') ++i;
    if (i == text.size()) return i;
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    ++i;
  }
  int64_t units = 0;
  while (i < text.size() && text[i] != '\n' && text[i] != '\r') {
    size_t n = SequenceLength(static_cast<unsigned char>(text[i]));
    // A truncated or broken sequence counts its lead byte alone.
    for (size_t k = 1; k < n; ++k) {
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) {
        n = 1;
        break;
      }
    }
    const int64_t width = n == 4 ? 2 : 1;
    if (units + width > pos.character) break;
    units += width;
    i += n;
  }
  return i;
}

Status ApplyChange(std::string& text, const TextChange& change) {
  if (!change.has_range) {
    text = change.text;
    return Status::Ok();
  }
  const size_t begin = OffsetOf(text, change.start);
  const size_t end = OffsetOf(text, change.end);
  if (end < begin) {
    return InvalidArgument("the change's range ends (line " + std::to_string(change.end.line) +
                               ", character " + std::to_string(change.end.character) +
                               ") before it starts (line " + std::to_string(change.start.line) +
                               ", character " + std::to_string(change.start.character) + ")",
                           "send range.start <= range.end");
  }
  text.replace(begin, end - begin, change.text);
  return Status::Ok();
}

void DocumentStore::Open(const std::string& uri, std::string text, int64_t version) {
  docs_[uri] = Document{std::move(text), version};
}

Status DocumentStore::Change(const std::string& uri, int64_t version,
                             const std::vector<TextChange>& changes) {
  auto it = docs_.find(uri);
  if (it == docs_.end()) {
    return NotFound("didChange for a document that is not open: " + uri, "send didOpen first");
  }
  std::string text = it->second.text;
  for (const TextChange& c : changes) {
    if (Status st = ApplyChange(text, c); !st.ok()) return st;
  }
  it->second.text = std::move(text);
  it->second.version = version;
  return Status::Ok();
}

const Document* DocumentStore::Find(const std::string& uri) const {
  auto it = docs_.find(uri);
  return it == docs_.end() ? nullptr : &it->second;
}

}  // namespace dsv4::lsp
