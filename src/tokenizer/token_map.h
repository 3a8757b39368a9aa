// The compressed token map of DeepSeek-V4.1's Engram (n-gram hash memory):
// every token id is mapped onto a smaller id space in which tokens whose text
// normalizes alike (" The", "the", "THE") share one id. The n-gram hashes run
// over these ids (model/deepseek_v4/engram.h), and the hash multipliers derive
// from the map's size, so it must match the one the model was trained with
// exactly: DeepSeek's `engram.build_compressed_token_map` over the HF tokenizer.
//
// Per token id, in id order:
//   text = the token decoded alone (HF `decode([id], skip_special_tokens=False)`:
//          the byte-level decoder over the token text, added tokens included,
//          invalid UTF-8 replaced by U+FFFD);
//   key  = the raw token text (HF `id_to_token`) when text holds a U+FFFD,
//          else EngramNormalize(text), or text when that is empty;
// compressed ids are handed out in order of first appearance of each key.
#ifndef DSV4_TOKENIZER_TOKEN_MAP_H_
#define DSV4_TOKENIZER_TOKEN_MAP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4 {

class BpeTokenizer;

struct CompressedTokenMap {
  std::vector<int32_t> ids;  // [vocab_size] token id -> compressed id
  int32_t count = 0;         // number of distinct compressed ids
};

// HF tokenizers' normalizers.Sequence that engram.py builds, on well-formed
// UTF-8 `text`: NFKC, NFD, StripAccents (drops every General_Category Mark:
// Mn, Mc, Me), Lowercase (per code point, full mapping, like Rust's
// char::to_lowercase), runs of [ \t\r\n] -> " ", a text that is exactly " "
// kept as " ", else both ends stripped of White_Space. ICU's Unicode tables
// may be newer than those of the Rust crates HF tokenizers builds on; on the
// DeepSeek-V4 vocabulary the two agree on every token (token_map_test).
// Ill-formed input gives an InvalidArgument.
Result<std::string> EngramNormalize(std::string_view text);

// The text HF `decode([id], skip_special_tokens=False)` gives for one token of
// a byte-level BPE vocabulary: the GPT-2 byte-level decoder applied to the
// stored token text (added tokens too; characters outside the byte alphabet
// stay as they are), then invalid UTF-8 replaced by U+FFFD as Rust's
// String::from_utf8_lossy does.
std::string DecodeTokenLikeHf(const BpeTokenizer& tokenizer, int32_t id);

// The map over ids [0, tokenizer.vocab_size()). Fails (InvalidArgument, naming
// the token) when the vocabulary is empty or a token's normalization fails.
Result<CompressedTokenMap> BuildCompressedTokenMap(const BpeTokenizer& tokenizer);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_TOKEN_MAP_H_
