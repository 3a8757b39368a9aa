// Tokenizer: the interface every vocabulary type implements (SentencePiece-style
// BPE in spm_tokenizer.h; byte-level BPE in bpe_tokenizer.h). The engine and
// the front ends talk only to this interface: text -> ids to build a prompt,
// one id -> raw bytes, and StreamDecoder to turn generated ids into text that
// never ends in a broken UTF-8 sequence. Tokenizer implementations are
// immutable once built, so one instance may serve many threads; a
// StreamDecoder belongs to one request.
#ifndef DSV4_TOKENIZER_TOKENIZER_H_
#define DSV4_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with bos_id() first when `add_bos` (and the vocabulary
  // has a BOS). Never fails: bytes that no token covers fall back to byte
  // tokens, or to the unknown token when the vocabulary has no byte tokens.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos) const = 0;

  // Encode, except that added tokens (special tokens, chat markers) are not
  // matched where they overlap a range of `plain`: there their text is
  // ordinary text. For chat prompts whose template markers must stay tokens
  // while the message content cannot forge them. Vocabularies that never
  // match added tokens in text (SentencePiece here) are Encode.
  virtual std::vector<int32_t> EncodeWithPlainRanges(std::string_view text, bool add_bos,
                                                     std::span<const TextRange> plain) const {
    (void)plain;
    return Encode(text, add_bos);
  }

  // The raw bytes of one token. A byte-fallback token gives its one byte
  // (which may be part of a multi-byte UTF-8 character; see StreamDecoder);
  // control tokens (BOS, EOS, unknown, ...) and ids outside [0, vocab_size())
  // give "".
  virtual std::string Decode(int32_t id) const = 0;

  // Decode(id) for a token that follows `prev_id` (-1: nothing before it).
  // SentencePiece vocabularies strip the leading space of the token after BOS
  // (the dummy prefix that Encode added); others return Decode(id).
  virtual std::string DecodeNext(int32_t prev_id, int32_t id) const { return Decode(id); }

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos_id() const = 0;  // -1 when the vocabulary has none
};

// StreamDecoder: turns generated token ids into text one token at a time for
// streaming (CLI output, server SSE). A token may end in the middle of a UTF-8
// character (byte-fallback tokens carry one byte each), so bytes are held back
// until their character is complete: every string Push returns is well-formed
// UTF-8, and the concatenation of all of them plus Flush() equals
// utf8::Sanitize (utf8.h) of the concatenated token bytes. Ill-formed bytes
// become U+FFFD as soon as they are known to be ill-formed; a character still
// incomplete at Flush() becomes one U+FFFD. The engine keeps one per request.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder. `prev_id` is the token before the
  // first one pushed (e.g. the last prompt token, or BOS), -1 for none; it
  // matters for SentencePiece, which drops the leading space after BOS.
  explicit StreamDecoder(const Tokenizer& tokenizer, int32_t prev_id = -1);

  // Appends the bytes of `id`; returns the text that is now complete (maybe "").
  std::string Push(int32_t id);
  // Returns what is still held back (an incomplete character becomes U+FFFD)
  // and empties the buffer. Pushing may continue afterwards.
  std::string Flush();

  // Bytes held back, waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  // Moves the decodable prefix of pending_ to the result; at_end: also the tail.
  std::string Drain(bool at_end);

  const Tokenizer& tokenizer_;
  int32_t prev_id_;
  std::string pending_;
};

// All of `ids` as text: a StreamDecoder's pushes plus its Flush.
std::string DecodeTokens(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                         int32_t prev_id = -1);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_TOKENIZER_H_
