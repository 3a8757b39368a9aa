// Regex pre-tokenization for byte-level BPE: the text between special tokens is
// cut into "words" before BPE merges run inside each word. This file holds the
// regex splitter (PCRE2 with Unicode properties, JIT-compiled) and the table of
// known pre-tokenizer regex sets (llama.cpp's `tokenizer.ggml.pre` names).
// It knows nothing about vocabularies or ids; bpe_tokenizer.cc is its user.
//
// Semantics follow Hugging Face `tokenizers` (what produced every golden):
//   - each pattern is a `Split` with behavior "Isolated": matches and the gaps
//     between them both become pieces, in order, and the pieces cover the input;
//   - patterns apply in sequence, each to every piece the previous one produced,
//     so anchors and look-arounds only see the current piece;
//   - HF compiles with Oniguruma (Ruby syntax), whose `\s` is Unicode White_Space
//     (it includes U+0085) and whose `$` means end of line. The translation to
//     PCRE2 keeps both (see TranslateOnigurumaPattern).
#ifndef DSV4_TOKENIZER_PRETOKENIZER_H_
#define DSV4_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4 {

// The regex sets this engine knows by name. Names are llama.cpp's
// `tokenizer.ggml.pre` values.
enum class PreTokenizerType {
  kGpt2,           // "default", "gpt2": the original GPT-2 regex
  kDeepseekLlm,    // "deepseek-llm": DeepSeek-LLM v1 (102,400-token vocab)
  kDeepseekCoder,  // "deepseek-coder": DeepSeek-Coder (32,256-token vocab)
  kDeepseekV3,     // "deepseek-v3", "joyai-llm": DeepSeek-V3 / V3.2 / V4
};

// Maps a GGUF `tokenizer.ggml.pre` name to its type; NotFound for names this
// engine does not know (the error lists the known ones).
Result<PreTokenizerType> PreTokenizerTypeFromName(std::string_view name);

// The HF-syntax regexes of a type, in application order.
std::vector<std::string> PreTokenizerPatterns(PreTokenizerType type);

// Rewrites an HF (Oniguruma) pattern into PCRE2 syntax with the same meaning:
// `\s` -> `[\s\x{85}]`, `\S` -> `[^\s\x{85}]` (and `\s` inside a class gains
// `\x{85}`). InvalidArgument for `\S` inside a character class, which has no
// faithful rewrite.
Result<std::string> TranslateOnigurumaPattern(std::string_view pattern);

// A sequence of Isolated regex splits. Immutable after Create; Split is
// thread-safe (each call uses its own match data).
class RegexSplitter {
 public:
  // Compiles `patterns` (HF/Oniguruma syntax) with PCRE2 UTF + UCP + MULTILINE
  // and JIT where the platform supports it. An empty list is valid (no
  // splitting). Errors name the pattern and the PCRE2 message with its offset.
  static Result<RegexSplitter> Create(const std::vector<std::string>& patterns);

  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Appends the non-empty pieces of `text` to `out`, in order; their
  // concatenation is `text`. `text` may be any bytes: invalid UTF-8 never
  // matches a pattern and ends up inside gap pieces.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

  size_t num_patterns() const;

 private:
  struct Impl;
  explicit RegexSplitter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_PRETOKENIZER_H_
