// StreamDecoder (declared in tokenizer.h): holds back incomplete UTF-8
// characters between tokens.
#include "tokenizer/tokenizer.h"

#include "tokenizer/utf8.h"

namespace dsv4 {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, int32_t prev_id)
    : tokenizer_(tokenizer), prev_id_(prev_id) {}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tokenizer_.DecodeNext(prev_id_, id);
  prev_id_ = id;
  return Drain(/*at_end=*/false);
}

std::string StreamDecoder::Flush() { return Drain(/*at_end=*/true); }

std::string StreamDecoder::Drain(bool at_end) {
  std::string out;
  std::string_view rest = pending_;
  while (!rest.empty()) {
    const utf8::Scan scan = utf8::ScanFirst(rest);
    if (scan.result == utf8::ScanResult::kIncomplete && !at_end) break;  // wait for more bytes
    if (scan.result == utf8::ScanResult::kComplete) {
      out.append(rest.substr(0, scan.length));
    } else {
      out.append(utf8::kReplacement);
    }
    rest.remove_prefix(scan.length);
  }
  pending_.erase(0, pending_.size() - rest.size());
  return out;
}

std::string DecodeTokens(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                         int32_t prev_id) {
  StreamDecoder decoder(tokenizer, prev_id);
  std::string out;
  for (const int32_t id : ids) out += decoder.Push(id);
  out += decoder.Flush();
  return out;
}

}  // namespace dsv4
