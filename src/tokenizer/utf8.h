// UTF-8 well-formedness for the tokenizers and the stream decoder: where a
// sequence ends, whether it is complete, and how many bytes a decoder replaces
// with one U+FFFD when it is not. Well-formed means Unicode 15 Table 3-7: no
// overlong forms, no surrogates (U+D800..DFFF), nothing past U+10FFFF. Ill-formed
// input is replaced per "maximal subpart" (Unicode §3.9, U+FFFD substitution),
// as Python's `bytes.decode(errors="replace")` and the WHATWG decoder do.
// Bytes only: no normalisation, no character classes (see pretokenizer.h).
#ifndef DSV4_TOKENIZER_UTF8_H_
#define DSV4_TOKENIZER_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

// U+FFFD REPLACEMENT CHARACTER, UTF-8 encoded.
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

enum class ScanResult {
  kComplete,    // a well-formed character of `length` bytes (1..4)
  kIncomplete,  // the input ends inside a well-formed prefix of `length` bytes
  kInvalid,     // the first `length` bytes (1..3) are a maximal ill-formed subpart
};

struct Scan {
  ScanResult result;
  size_t length;
};

// Classifies the sequence that starts at s[0]. `s` must not be empty.
Scan ScanFirst(std::string_view s);

// True when all of `s` is well-formed UTF-8.
bool IsValid(std::string_view s);

// `s` with every maximal ill-formed subpart (including a truncated character at
// the end) replaced by U+FFFD; well-formed input comes back unchanged.
std::string Sanitize(std::string_view s);

// Bytes in the UTF-8 encoding of `cp` (1..4), 0 for a surrogate or a value past U+10FFFF.
size_t EncodedLength(char32_t cp);
// Appends the UTF-8 encoding of `cp` to `out`; U+FFFD for a surrogate or a value past U+10FFFF.
void Append(char32_t cp, std::string* out);

}  // namespace dsv4::utf8

#endif  // DSV4_TOKENIZER_UTF8_H_
