// Regex pre-tokenization (see pretokenizer.h): PCRE2 8-bit, UTF + UCP, JIT.
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>  // pcre2_compile, pcre2_jit_compile, pcre2_match

#include <fmt/core.h>

#include <utility>

namespace dsv4 {
namespace {

// The regex sets below are the ones the original tokenizer.json files use (HF
// syntax); llama.cpp's src/llama-vocab.cpp carries the same lists under the
// same `tokenizer.ggml.pre` names.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// DeepSeek-LLM v1: its letter class is an explicit list of cased-letter ranges
// (Lu/Ll/Lt) from its tokenizer.json. Written as code points on purpose: several
// of them (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are not in Unicode
// normal form C, and an editor that normalizes would silently change the regex.
constexpr const char* kDeepseekLlmLetters =
    "\\s?["
    "A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"
    "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}"
    "\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}"
    "\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}"
    "\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}"
    "\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}"
    "\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}"
    "\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}"
    "\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}"
    "\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}"
    "\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}"
    "\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}"
    "\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}"
    "\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}"
    "\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}"
    "\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}"
    "\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}"
    "\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}"
    "]+";

struct NamedType {
  const char* name;
  PreTokenizerType type;
};
// Registry: GGUF pre-tokenizer name -> type.
constexpr NamedType kNamedTypes[] = {
    {"default", PreTokenizerType::kGpt2},
    {"gpt2", PreTokenizerType::kGpt2},
    {"deepseek-llm", PreTokenizerType::kDeepseekLlm},
    {"deepseek-coder", PreTokenizerType::kDeepseekCoder},
    {"deepseek-v3", PreTokenizerType::kDeepseekV3},
    {"joyai-llm", PreTokenizerType::kDeepseekV3},
};

std::string Pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return fmt::format("PCRE2 error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Length of the UTF-8 sequence that starts at text[pos] (1 for invalid bytes),
// used to step over an empty match.
size_t StepOneChar(std::string_view text, size_t pos) {
  size_t next = pos + 1;
  while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80 &&
         next - pos < 4) {
    ++next;
  }
  return next;
}

}  // namespace

Result<PreTokenizerType> PreTokenizerTypeFromName(std::string_view name) {
  for (const NamedType& entry : kNamedTypes) {
    if (name == entry.name) return entry.type;
  }
  std::string known;
  for (const NamedType& entry : kNamedTypes) {
    if (!known.empty()) known += ", ";
    known += entry.name;
  }
  return NotFound(fmt::format("unknown BPE pre-tokenizer '{}'", name),
                  fmt::format("known pre-tokenizers: {}; add the regex set to "
                              "src/tokenizer/pretokenizer.cc",
                              known));
}

std::vector<std::string> PreTokenizerPatterns(PreTokenizerType type) {
  switch (type) {
    case PreTokenizerType::kGpt2:
      return {kGpt2Pattern};
    case PreTokenizerType::kDeepseekLlm:
      return {"[\r\n]",
              kDeepseekLlmLetters,
              "\\s?[!-/"
              ":-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
              "\\s+$",
              "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
              "\\p{N}+"};
    case PreTokenizerType::kDeepseekCoder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
              "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+", "\\p{N}"};
    case PreTokenizerType::kDeepseekV3:
      return {
          "\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
          "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  }
  CHECK(false, "unhandled PreTokenizerType %d", static_cast<int>(type));
}

Result<std::string> TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S') {
        if (in_class) {
          return InvalidArgument(
              fmt::format("regex '{}': \\S inside a character class at offset {}", pattern, i - 1),
              "rewrite the class without \\S; PCRE2 and Oniguruma disagree on U+0085 there");
        }
        out += "[^\\s\\x{85}]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {  // POSIX class such as [:alpha:]
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Impl {
  struct Compiled {
    pcre2_code* code = nullptr;
    bool jit = false;
    std::string source;  // the HF pattern, for messages
  };
  std::vector<Compiled> regexes;

  ~Impl() {
    for (Compiled& r : regexes) pcre2_code_free(r.code);
  }
};

RegexSplitter::RegexSplitter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

size_t RegexSplitter::num_patterns() const { return impl_->regexes.size(); }

Result<RegexSplitter> RegexSplitter::Create(const std::vector<std::string>& patterns) {
  auto impl = std::make_unique<Impl>();
  for (const std::string& pattern : patterns) {
    ASSIGN_OR_RETURN(std::string translated, TranslateOnigurumaPattern(pattern));
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // UTF + UCP: \p{..}, \s, \d are Unicode-aware, as in Oniguruma.
    // MULTILINE: Ruby's `$` is end-of-line. MATCH_INVALID_UTF: any bytes are a
    // valid subject (invalid sequences simply never match).
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_MATCH_INVALID_UTF;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                      &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      return InvalidArgument(
          fmt::format("pre-tokenizer regex '{}' does not compile: {} at offset {}", pattern,
                      Pcre2ErrorMessage(error_code), error_offset),
          "check the pattern in tokenizer.json (pre_tokenizer.Split.pattern.Regex)");
    }
    Impl::Compiled compiled{code, false, pattern};
    // JIT is an optimisation: fall back to the interpreter where unsupported.
    compiled.jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    impl->regexes.push_back(std::move(compiled));
  }
  return RegexSplitter(std::move(impl));
}

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* out) const {
  if (text.empty()) return;
  if (impl_->regexes.empty()) {
    out->push_back(text);
    return;
  }
  pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
  CHECK(match != nullptr, "pcre2_match_data_create failed (out of memory)");
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const Impl::Compiled& regex : impl_->regexes) {
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;
      size_t search = 0;
      while (search <= piece.size()) {
        int rc = regex.jit
                     ? pcre2_jit_match(regex.code, subject, piece.size(), search, 0, match, nullptr)
                     : pcre2_match(regex.code, subject, piece.size(), search, 0, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        // Other negative codes are resource limits (match/depth/heap limit);
        // treat the rest of the piece as unmatched rather than abort.
        if (rc < 0) break;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        size_t begin = ovector[0];
        size_t end = ovector[1];
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        if (end > begin) {
          next.push_back(piece.substr(begin, end - begin));
          gap_start = end;
          search = end;
        } else {
          if (begin >= piece.size()) break;
          gap_start = begin;
          search = StepOneChar(piece, begin);
        }
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    current.swap(next);
  }
  pcre2_match_data_free(match);
  out->insert(out->end(), current.begin(), current.end());
}

}  // namespace dsv4
