// The text documents the editor has open, as the LSP's didOpen / didChange /
// didClose notifications describe them. Text is kept as UTF-8; positions
// arrive as (line, character) with the character counted in UTF-16 code
// units, the LSP's default `positionEncoding` (a character outside the Basic
// Multilingual Plane counts 2). Lines end at "\n", "\r\n" or "\r", as the
// specification's "Text Documents" section says.
#ifndef DSV4_LSP_DOCUMENT_H_
#define DSV4_LSP_DOCUMENT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::lsp {

struct Position {
  int64_t line = 0;       // 0-based
  int64_t character = 0;  // 0-based, UTF-16 code units
};

// The byte offset of `pos` in `text`. A line past the end is the end of the
// text; a character past the end of its line is the line's end (before its
// line break), as the specification asks; a position inside a surrogate pair
// is the start of that character. Bytes that are not UTF-8 count one unit each.
size_t OffsetOf(std::string_view text, Position pos);

// One entry of didChange's contentChanges: with a range, the text replacing
// [start, end); without, the whole new text.
struct TextChange {
  bool has_range = false;
  Position start, end;
  std::string text;
};

// Applies `change` to `text`. InvalidArgument when the range ends before it starts.
Status ApplyChange(std::string& text, const TextChange& change);

struct Document {
  std::string text;
  int64_t version = 0;
};

// Documents by URI. Used from the reader thread only.
class DocumentStore {
 public:
  void Open(const std::string& uri, std::string text, int64_t version);
  // Applies the changes in order. NotFound for a document that is not open;
  // InvalidArgument for a bad range (the document is left as it was).
  Status Change(const std::string& uri, int64_t version, const std::vector<TextChange>& changes);
  void Close(const std::string& uri) { docs_.erase(uri); }
  const Document* Find(const std::string& uri) const;
  size_t size() const { return docs_.size(); }

 private:
  std::map<std::string, Document> docs_;
};

}  // namespace dsv4::lsp

#endif  // DSV4_LSP_DOCUMENT_H_
