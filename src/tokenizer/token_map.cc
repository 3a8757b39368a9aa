// Engram's compressed token map (token_map.h) over ICU's normalization and
// character properties.
#include "tokenizer/token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "fmt/format.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

constexpr UChar32 kSentinel = 0xE000;  // engram.py's private-use stand-in for a lone " "

// The normalizers engram.py chains, built once.
class EngramNormalizer {
 public:
  EngramNormalizer() {
    UErrorCode err = U_ZERO_ERROR;
    nfkc_ = icu::Normalizer2::getNFKCInstance(err);
    if (U_SUCCESS(err)) nfd_ = icu::Normalizer2::getNFDInstance(err);
    init_error_ = err;
  }

  Result<std::string> Normalize(std::string_view text) const {
    if (U_FAILURE(init_error_)) {
      return Status(StatusCode::kInternal,
                    fmt::format("ICU normalizers unavailable: {}", u_errorName(init_error_)),
                    "check the ICU data library (libicudata) is installed");
    }
    if (!utf8::IsValid(text)) {
      return InvalidArgument("engram normalize: the text is not well-formed UTF-8");
    }
    UErrorCode err = U_ZERO_ERROR;
    icu::UnicodeString s = icu::UnicodeString::fromUTF8(
        icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    s = nfkc_->normalize(s, err);
    if (U_SUCCESS(err)) s = nfd_->normalize(s, err);
    if (U_FAILURE(err)) {
      return Status(StatusCode::kInternal,
                    fmt::format("engram normalize: ICU failed: {}", u_errorName(err)));
    }
    // StripAccents, then Lowercase (one code point at a time), then runs of
    // [ \t\r\n] become one " ".
    std::u32string cps;
    cps.reserve(static_cast<size_t>(s.length()));
    bool in_space_run = false;
    for (int32_t i = 0; i < s.length();) {
      const UChar32 c = s.char32At(i);
      i += U16_LENGTH(c);
      if (U_GET_GC_MASK(c) & U_GC_M_MASK) continue;
      for (UChar32 l : Lower(c)) {
        if (l == ' ' || l == '\t' || l == '\r' || l == '\n') {
          if (!in_space_run) cps.push_back(U' ');
          in_space_run = true;
        } else {
          cps.push_back(static_cast<char32_t>(l));
          in_space_run = false;
        }
      }
    }
    // "^ $" -> sentinel; Strip; sentinel -> " " (every U+E000, also one that was
    // in the text, as the Replace normalizer does).
    if (cps == U" ") cps = std::u32string(1, static_cast<char32_t>(kSentinel));
    size_t begin = 0, end = cps.size();
    while (begin < end && u_isUWhiteSpace(static_cast<UChar32>(cps[begin]))) ++begin;
    while (end > begin && u_isUWhiteSpace(static_cast<UChar32>(cps[end - 1]))) --end;
    std::string out;
    out.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
      utf8::Append(cps[i] == static_cast<char32_t>(kSentinel) ? U' ' : cps[i], &out);
    }
    return out;
  }

 private:
  // The full lowercase mapping of one code point, without context (Rust's
  // char::to_lowercase): ICU's root-locale string lowercasing of the code
  // point alone (a lone capital sigma has no letter before it, so its final
  // form never applies).
  std::u32string Lower(UChar32 c) const {
    if (c < 0x80)
      return std::u32string(1, static_cast<char32_t>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    UChar src[2];
    int32_t n = 0;
    U16_APPEND_UNSAFE(src, n, c);
    UChar dst[8];
    UErrorCode err = U_ZERO_ERROR;
    const int32_t len = u_strToLower(dst, 8, src, n, "", &err);
    std::u32string out;
    if (U_FAILURE(err) || len > 8) return std::u32string(1, static_cast<char32_t>(c));
    for (int32_t i = 0; i < len;) {
      UChar32 l;
      U16_NEXT(dst, i, len, l);
      out.push_back(static_cast<char32_t>(l));
    }
    return out;
  }

  const icu::Normalizer2* nfkc_ = nullptr;
  const icu::Normalizer2* nfd_ = nullptr;
  UErrorCode init_error_ = U_ZERO_ERROR;
};

const EngramNormalizer& Normalizer() {
  static const EngramNormalizer normalizer;
  return normalizer;
}

}  // namespace

Result<std::string> EngramNormalize(std::string_view text) { return Normalizer().Normalize(text); }

std::string DecodeTokenLikeHf(const BpeTokenizer& tokenizer, int32_t id) {
  return utf8::Sanitize(ByteLevelDecode(tokenizer.TokenText(id)));
}

Result<CompressedTokenMap> BuildCompressedTokenMap(const BpeTokenizer& tokenizer) {
  const int32_t vocab = tokenizer.vocab_size();
  if (vocab <= 0) {
    return InvalidArgument("engram token map: the tokenizer has no tokens",
                           "load the model's tokenizer.json");
  }
  CompressedTokenMap map;
  map.ids.resize(static_cast<size_t>(vocab));
  std::unordered_map<std::string, int32_t> key_to_id;
  key_to_id.reserve(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string text = DecodeTokenLikeHf(tokenizer, id);
    std::string key;
    if (text.find(utf8::kReplacement) != std::string::npos) {
      key = std::string(tokenizer.TokenText(id));  // a partial UTF-8 byte token: its raw form
    } else {
      Result<std::string> normalized = Normalizer().Normalize(text);
      if (!normalized.ok()) {
        return normalized.status().WithContext(fmt::format("engram token map, token {}", id));
      }
      key = normalized->empty() ? text : std::move(*normalized);
    }
    auto [it, inserted] = key_to_id.try_emplace(std::move(key), map.count);
    if (inserted) ++map.count;
    map.ids[static_cast<size_t>(id)] = it->second;
  }
  return map;
}

}  // namespace dsv4
