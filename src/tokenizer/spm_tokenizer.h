// SentencePiece-style BPE tokenizer: the vocabulary of llama2.c models
// (tok512.bin, the tokenizer.bin format) and of GGUF files whose
// `tokenizer.ggml.model` is "llama". Encoding is score-ordered bigram merging
// with byte fallback, as in llama2.c `encode()` (run.c) and llama.cpp
// `llm_tokenizer_spm`; it is not the unigram (Viterbi) SentencePiece model.
//
// Algorithm (Encode):
//   1. if add_space_prefix and the text is not empty, start with a ' ';
//   2. cut the text into characters the way llama2.c does (a non-continuation
//      byte starts a character, continuation bytes join it, at most 4 bytes;
//      the prefix ' ' is a character of its own);
//      a character that is a piece becomes that token, any other character
//      becomes one byte token per byte (<0xXX>), or one unk token when the
//      vocabulary lacks one of those byte tokens;
//   3. repeatedly merge the adjacent pair of tokens whose concatenation is a
//      piece with the highest score, the leftmost pair on ties; byte-fallback
//      tokens never merge. A priority queue of candidate pairs keeps this
//      O(n log n) in the text length (llama.cpp's method), where run.c's
//      rescan is O(n²).
// Only normal, user-defined, unused and undefined pieces take part in the
// lookups of steps 2 and 3; control, unknown and byte pieces are never produced
// from text (SentencePiece does the same; run.c and llama.cpp would merge into
// them, but no real vocabulary lets that happen).
//
// Internal representation: a space is ' ' in every piece. GGUF (SentencePiece)
// pieces write it as U+2581 '▁'; SpmVocabFromGguf converts. Consequence: a
// literal '▁' in the text is an ordinary character here (byte fallback), where
// llama.cpp would read it as a space. Known differences from the references,
// all outside valid-UTF-8 text over real vocabularies: run.c stops at a NUL
// byte (here NUL is an ordinary byte) and never merges pairs scoring <= -1e10;
// llama.cpp groups ill-formed UTF-8 by lead-byte length and lets a character
// that is not a piece merge with its neighbours.
#ifndef DSV4_TOKENIZER_SPM_TOKENIZER_H_
#define DSV4_TOKENIZER_SPM_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Token types, numbered as GGUF `tokenizer.ggml.token_type` (llama.cpp's
// llama_token_type).
enum class SpmTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // piece "<0xXX>": the raw byte XX
};

// A SentencePiece vocabulary as plain data, in the internal representation.
struct SpmVocab {
  std::vector<std::string> pieces;  // [V] token text, a space is ' '
  std::vector<float> scores;        // [V] merge priority: higher merges first
  std::vector<int32_t> types;       // [V] SpmTokenType values
  int32_t bos = 1;                  // -1: none
  int32_t eos = 2;                  // -1: none
  int32_t unk = 0;                  // -1: none
  bool add_space_prefix = true;     // SentencePiece's add_dummy_prefix
};

// Reads a llama2.c tokenizer file (tok512.bin, tokenizer.bin): int32
// max_token_length, then per token f32 score, int32 byte length, the bytes; all
// little-endian. The file does not store the token count: `vocab_size` is the
// model's (the file must hold exactly that many tokens), or -1 to read tokens
// until the end of the file. Ids 0, 1, 2 are <unk>, BOS, EOS (llama2.c's
// convention); pieces of the form <0xXX> are byte tokens; the rest are normal.
// Errors (DataLoss, OutOfRange, InvalidArgument) name the file, the token index
// and the byte offset.
Result<SpmVocab> ReadTok512(const std::string& path, int32_t vocab_size);
// The same, from bytes in memory; `source` names them in errors.
Result<SpmVocab> ParseTok512(std::span<const uint8_t> bytes, int32_t vocab_size,
                             std::string_view source);

// What a GGUF file's `tokenizer.ggml.*` keys hold for a "llama" vocabulary.
// The engine fills it from the GGUF reader; this module does not read GGUF.
struct GgufSpmMetadata {
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, '▁' (U+2581) for a space
  std::vector<float> scores;        // tokenizer.ggml.scores; empty: all 0
  std::vector<int32_t> types;       // tokenizer.ggml.token_type; empty: all normal
  int64_t bos = 1;                  // tokenizer.ggml.bos_token_id (llama.cpp's default 1)
  int64_t eos = 2;                  // tokenizer.ggml.eos_token_id (default 2)
  int64_t unk = 0;                  // tokenizer.ggml.unknown_token_id (default 0)
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix (default true)
};

// Converts GGUF metadata to the internal representation: '▁' -> ' ' in every
// piece. An id equal to 0xFFFFFFFF (GGUF's "none") or -1 becomes -1.
// InvalidArgument when the arrays disagree in length or an id is out of range.
Result<SpmVocab> SpmVocabFromGguf(GgufSpmMetadata metadata);

class SpmTokenizer final : public Tokenizer {
 public:
  // Validates `vocab` (array lengths, ids in range, types known, byte pieces
  // well-formed, no NaN score) and builds the lookup tables. Errors name the
  // token id and piece.
  static Result<std::unique_ptr<SpmTokenizer>> Create(SpmVocab vocab);

  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  std::string Decode(int32_t id) const override;
  // Drops one leading ' ' of a normal token that follows BOS when the
  // vocabulary adds the space prefix (llama2.c `decode`, llama.cpp detokenize).
  std::string DecodeNext(int32_t prev_id, int32_t id) const override;

  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.pieces.size()); }
  int32_t bos_id() const override { return vocab_.bos; }
  int32_t eos_id() const override { return vocab_.eos; }
  int32_t unk_id() const { return vocab_.unk; }

  const SpmVocab& vocab() const { return vocab_; }
  // The id of a piece that text can produce (see the header comment), or -1.
  int32_t PieceToId(std::string_view piece) const;

 private:
  explicit SpmTokenizer(SpmVocab vocab);

  SpmVocab vocab_;
  std::vector<std::string> decoded_;  // [V] what Decode returns
  // Pieces that text can produce -> id; keys view into vocab_.pieces.
  std::unordered_map<std::string_view, int32_t> piece_to_id_;
  std::array<int32_t, 256> byte_to_id_;  // -1: no byte token for that byte
  size_t max_piece_bytes_ = 0;           // longest key of piece_to_id_
};

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_SPM_TOKENIZER_H_
