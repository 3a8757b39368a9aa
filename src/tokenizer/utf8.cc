// UTF-8 well-formedness (Unicode Table 3-7) and U+FFFD substitution.
#include "tokenizer/utf8.h"

#include <cstdint>

#include "base/check.h"

namespace dsv4::utf8 {

Scan ScanFirst(std::string_view s) {
  CHECK(!s.empty());
  const uint8_t b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {ScanResult::kComplete, 1};
  // Continuation bytes that follow the lead byte, and the allowed range of the
  // first of them (the later ones are always 80..BF).
  size_t trail = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    trail = 1;
  } else if (b0 == 0xE0) {
    trail = 2, lo = 0xA0;  // no overlongs
  } else if (b0 >= 0xE1 && b0 <= 0xEF) {
    trail = 2;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    trail = 3, lo = 0x90;  // no overlongs
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    trail = 3;
  } else if (b0 == 0xF4) {
    trail = 3, hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {ScanResult::kInvalid, 1};  // 80..C1, F5..FF never start a character
  }
  for (size_t i = 1; i <= trail; ++i) {
    if (i >= s.size()) return {ScanResult::kIncomplete, i};
    const uint8_t b = static_cast<uint8_t>(s[i]);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {ScanResult::kInvalid, i};
  }
  return {ScanResult::kComplete, trail + 1};
}

bool IsValid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Scan scan = ScanFirst(s.substr(i));
    if (scan.result != ScanResult::kComplete) return false;
    i += scan.length;
  }
  return true;
}

std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Scan scan = ScanFirst(s.substr(i));
    if (scan.result == ScanResult::kComplete) {
      out.append(s.substr(i, scan.length));
    } else {
      out.append(kReplacement);
    }
    i += scan.length;
  }
  return out;
}

size_t EncodedLength(char32_t cp) {
  if (cp < 0x80) return 1;
  if (cp < 0x800) return 2;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  if (cp < 0x10000) return 3;
  if (cp <= 0x10FFFF) return 4;
  return 0;
}

void Append(char32_t cp, std::string* out) {
  switch (EncodedLength(cp)) {
    case 1:
      out->push_back(static_cast<char>(cp));
      break;
    case 2:
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      break;
    case 3:
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      break;
    case 4:
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      break;
    default:
      out->append(kReplacement);
      break;
  }
}

}  // namespace dsv4::utf8
