// What the model is asked at the cursor and where its answer stops.
//
// Prompt: fill-in-the-middle where the model's vocabulary has FIM tokens,
// DeepSeek's coder format (prefix-suffix-middle order, as the DeepSeek-Coder
// README's "Code Insertion" example writes it):
//   <｜fim▁begin｜>PREFIX<｜fim▁hole｜>SUFFIX<｜fim▁end｜>
// and the model generates the middle; otherwise the text before the cursor
// alone, which the model continues. PREFIX is the text before the cursor and
// SUFFIX the text after it, each bounded to a number of characters (code
// points) nearest the cursor, cut at a line start where the bound allows.
//
// Stop: the continuation ends, by default, before its first blank line and
// before the first line indented less than the cursor's line (the end of the
// block being written), as llama.vim and llama.vscode cut their suggestions;
// and after n_predict tokens.
#ifndef DSV4_LSP_COMPLETION_H_
#define DSV4_LSP_COMPLETION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsv4::lsp {

inline constexpr std::string_view kFimBegin = "<｜fim▁begin｜>";
inline constexpr std::string_view kFimHole = "<｜fim▁hole｜>";
inline constexpr std::string_view kFimEnd = "<｜fim▁end｜>";

struct CompletionOptions {
  int64_t n_predict = 128;       // tokens generated at most
  float temperature = 0.0f;      // <= 0: greedy
  int32_t top_k = 40;            // <= 0: off
  float top_p = 0.95f;           // 1: off
  int64_t context_chars = 8192;  // characters of text before the cursor in the prompt
  int64_t suffix_chars = 2048;   // characters of text after it (FIM only)
  bool stop_at_blank_line = true;
  bool stop_at_block_end = true;
};

struct CompletionPrompt {
  std::string text;              // the prompt text
  std::vector<TextRange> plain;  // the document's bytes in `text`: never special tokens
  bool fim = false;
  std::string cursor_line;  // the cursor's line up to the cursor (its indentation counts)
};

// The last `chars` code points of `text` (starting at a line start when one
// lies in them and is not the text's start); the first `chars` of `suffix`
// (ending at a line end when one lies in them).
std::string_view TailChars(std::string_view text, int64_t chars);
std::string_view HeadChars(std::string_view text, int64_t chars);

// The prompt for a cursor between `before` and `after` (the whole document's
// text on either side).
CompletionPrompt BuildCompletionPrompt(std::string_view before, std::string_view after, bool fim,
                                       const CompletionOptions& options);

// Accumulates generated text and applies the stop rules.
class CompletionTrimmer {
 public:
  CompletionTrimmer(std::string_view cursor_line, const CompletionOptions& options);
  // Appends `piece`; false once the completion has ended (text() is final).
  bool Push(std::string_view piece);
  // The completion so far, cut before a stop when one was found.
  const std::string& text() const { return text_; }
  bool ended() const { return ended_; }

 private:
  size_t indent_ = 0;  // the cursor line's indentation, in characters
  bool blank_ = true, block_ = true;
  std::string text_;
  size_t scanned_ = 0;  // lines before this offset of text_ are checked
  bool ended_ = false;
};

}  // namespace dsv4::lsp

#endif  // DSV4_LSP_COMPLETION_H_
