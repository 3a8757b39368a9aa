// SentencePiece-style BPE: tok512 / GGUF vocabulary loading and the
// priority-queue merge loop. See spm_tokenizer.h for the algorithm.
#include "tokenizer/spm_tokenizer.h"

#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <queue>
#include <utility>

#include "base/mapped_file.h"  // MappedFile

namespace dsv4 {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

bool IsKnownType(int32_t type) {
  return type >= static_cast<int32_t>(SpmTokenType::kUndefined) &&
         type <= static_cast<int32_t>(SpmTokenType::kByte);
}

// Pieces that text may turn into (see the header comment).
bool IsProducibleType(int32_t type) {
  const auto t = static_cast<SpmTokenType>(type);
  return t == SpmTokenType::kNormal || t == SpmTokenType::kUserDefined ||
         t == SpmTokenType::kUnused || t == SpmTokenType::kUndefined;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xXX>" piece, or -1.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]);
  const int lo = HexDigit(piece[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

// A piece for an error message: printable ASCII as is, other bytes as \xNN.
std::string Printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 64)) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0x20 && b < 0x7F && c != '"' && c != '\\') {
      out.push_back(c);
    } else {
      out += fmt::format("\\x{:02X}", b);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

// `s` with every `from` replaced by `to`.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

int32_t LoadI32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));  // little-endian hosts only (x86-64, aarch64)
  return v;
}
float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

// ---- tok512.bin -------------------------------------------------------------

Result<SpmVocab> ParseTok512(std::span<const uint8_t> bytes, int32_t vocab_size,
                             std::string_view source) {
  if (vocab_size != -1 && vocab_size < 3) {
    return InvalidArgument(
        fmt::format("{}: vocab_size {} is too small for a llama2.c tokenizer", source, vocab_size),
        "ids 0, 1, 2 are <unk>, BOS, EOS, so at least 3 tokens; pass -1 to read them all");
  }
  const size_t size = bytes.size();
  if (size < 4) {
    return DataLoss(
        fmt::format("{}: {} bytes, too short for the 4-byte max_token_length header", source, size),
        "is this a llama2.c tokenizer.bin (e.g. tok512.bin)?");
  }
  SpmVocab vocab;
  size_t offset = 4;  // skip max_token_length: pieces carry their own lengths
  const std::string expected = vocab_size < 0 ? std::string("tokens up to the end of the file")
                                              : fmt::format("the model's {} tokens", vocab_size);
  while (vocab_size < 0 ? offset < size : vocab.pieces.size() < static_cast<size_t>(vocab_size)) {
    const size_t index = vocab.pieces.size();
    if (size - offset < 8) {
      return DataLoss(
          fmt::format("{}: token {}: score and length need 8 bytes at offset {}, {} left; "
                      "the file ends before {}",
                      source, index, offset, size - offset, expected),
          "the file is truncated, or belongs to a model with a smaller vocabulary");
    }
    const float score = LoadF32(bytes.data() + offset);
    const int32_t length = LoadI32(bytes.data() + offset + 4);
    if (length < 0) {
      return DataLoss(fmt::format("{}: token {}: negative length {} at offset {}", source, index,
                                  length, offset + 4),
                      "the file is corrupt or not a llama2.c tokenizer");
    }
    offset += 8;
    if (static_cast<size_t>(length) > size - offset) {
      return DataLoss(fmt::format("{}: token {}: length {} at offset {} runs past the end of the "
                                  "file ({} bytes left)",
                                  source, index, length, offset - 4, size - offset),
                      "the file is truncated or corrupt");
    }
    vocab.pieces.emplace_back(reinterpret_cast<const char*>(bytes.data() + offset),
                              static_cast<size_t>(length));
    vocab.scores.push_back(score);
    offset += static_cast<size_t>(length);
    if (vocab.pieces.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return OutOfRange(fmt::format("{}: more than 2^31-1 tokens", source));
    }
  }
  if (offset != size) {
    return DataLoss(fmt::format("{}: {} bytes left over after {}", source, size - offset, expected),
                    "the tokenizer has more tokens than the model's vocab_size: use the "
                    "tokenizer that came with the model");
  }
  if (vocab.pieces.size() < 3) {
    return DataLoss(fmt::format("{}: only {} tokens", source, vocab.pieces.size()),
                    "a llama2.c tokenizer starts with <unk>, BOS, EOS");
  }
  vocab.types.resize(vocab.pieces.size(), static_cast<int32_t>(SpmTokenType::kNormal));
  vocab.types[0] = static_cast<int32_t>(SpmTokenType::kUnknown);
  vocab.types[1] = static_cast<int32_t>(SpmTokenType::kControl);
  vocab.types[2] = static_cast<int32_t>(SpmTokenType::kControl);
  for (size_t i = 3; i < vocab.pieces.size(); ++i) {
    if (ParseBytePiece(vocab.pieces[i]) >= 0) {
      vocab.types[i] = static_cast<int32_t>(SpmTokenType::kByte);
    }
  }
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  vocab.add_space_prefix = true;  // llama2.c always adds the dummy prefix
  return vocab;
}

Result<SpmVocab> ReadTok512(const std::string& path, int32_t vocab_size) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return ParseTok512(file->bytes(), vocab_size, path);
}

// ---- GGUF metadata ----------------------------------------------------------

Result<SpmVocab> SpmVocabFromGguf(GgufSpmMetadata metadata) {
  const size_t n = metadata.tokens.size();
  if (n == 0) {
    return InvalidArgument("GGUF tokenizer.ggml.tokens is empty",
                           "the file has no vocabulary; pass a tokenizer file instead");
  }
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return OutOfRange(fmt::format("GGUF tokenizer.ggml.tokens has {} entries (max 2^31-1)", n));
  }
  if (!metadata.scores.empty() && metadata.scores.size() != n) {
    return InvalidArgument(fmt::format("GGUF tokenizer.ggml.scores has {} entries, "
                                       "tokenizer.ggml.tokens {}",
                                       metadata.scores.size(), n),
                           "the vocabulary arrays must have one entry per token");
  }
  if (!metadata.types.empty() && metadata.types.size() != n) {
    return InvalidArgument(fmt::format("GGUF tokenizer.ggml.token_type has {} entries, "
                                       "tokenizer.ggml.tokens {}",
                                       metadata.types.size(), n),
                           "the vocabulary arrays must have one entry per token");
  }
  SpmVocab vocab;
  const auto to_id = [n](int64_t id, std::string_view key) -> Result<int32_t> {
    if (id == -1 || id == 0xFFFFFFFFll) return -1;
    if (id < 0 || static_cast<uint64_t>(id) >= n) {
      return InvalidArgument(
          fmt::format("GGUF {} = {} is not a token id (the vocabulary has {} tokens)", key, id, n),
          "the file's tokenizer metadata is inconsistent");
    }
    return static_cast<int32_t>(id);
  };
  ASSIGN_OR_RETURN(vocab.bos, to_id(metadata.bos, "tokenizer.ggml.bos_token_id"));
  ASSIGN_OR_RETURN(vocab.eos, to_id(metadata.eos, "tokenizer.ggml.eos_token_id"));
  ASSIGN_OR_RETURN(vocab.unk, to_id(metadata.unk, "tokenizer.ggml.unknown_token_id"));
  vocab.add_space_prefix = metadata.add_space_prefix;
  vocab.pieces = std::move(metadata.tokens);
  for (std::string& piece : vocab.pieces) piece = ReplaceAll(piece, kMetaspace, " ");
  vocab.scores = metadata.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(metadata.scores);
  vocab.types = metadata.types.empty()
                    ? std::vector<int32_t>(n, static_cast<int32_t>(SpmTokenType::kNormal))
                    : std::move(metadata.types);
  return vocab;
}

// ---- SpmTokenizer -----------------------------------------------------------

Result<std::unique_ptr<SpmTokenizer>> SpmTokenizer::Create(SpmVocab vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0) return InvalidArgument("SentencePiece vocabulary is empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return OutOfRange(fmt::format("SentencePiece vocabulary has {} tokens (max 2^31-1)", n));
  }
  if (vocab.scores.size() != n || vocab.types.size() != n) {
    return InvalidArgument(fmt::format("SentencePiece vocabulary: {} pieces, {} scores, {} types",
                                       n, vocab.scores.size(), vocab.types.size()),
                           "every token needs a piece, a score and a type");
  }
  for (const auto& [id, name] : {std::pair{vocab.bos, "BOS"}, std::pair{vocab.eos, "EOS"},
                                 std::pair{vocab.unk, "unknown-token"}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return InvalidArgument(
          fmt::format("SentencePiece vocabulary: {} id {} is outside [0, {})", name, id, n),
          "use -1 for a vocabulary without one");
    }
  }
  bool have_all_bytes = true;
  std::array<bool, 256> have_byte{};
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = vocab.types[i];
    if (!IsKnownType(type)) {
      return InvalidArgument(fmt::format("SentencePiece vocabulary: token {} (\"{}\") has type "
                                         "{}, not one of 0..6",
                                         i, Printable(vocab.pieces[i]), type),
                             "types are GGUF token types: 1 normal, 2 unknown, 3 control, "
                             "4 user-defined, 5 unused, 6 byte");
    }
    if (std::isnan(vocab.scores[i])) {
      return InvalidArgument(fmt::format("SentencePiece vocabulary: token {} (\"{}\") has a NaN "
                                         "score",
                                         i, Printable(vocab.pieces[i])),
                             "the tokenizer file is corrupt");
    }
    if (type == static_cast<int32_t>(SpmTokenType::kByte)) {
      const int byte = ParseBytePiece(vocab.pieces[i]);
      if (byte < 0) {
        return InvalidArgument(fmt::format("SentencePiece vocabulary: byte token {} has piece "
                                           "\"{}\", not <0xXX>",
                                           i, Printable(vocab.pieces[i])),
                               "the tokenizer file is corrupt");
      }
      have_byte[static_cast<size_t>(byte)] = true;
    }
  }
  for (const bool b : have_byte) have_all_bytes = have_all_bytes && b;
  if (!have_all_bytes && vocab.unk < 0) {
    return InvalidArgument(
        "SentencePiece vocabulary has neither all 256 byte tokens nor an unknown token",
        "text outside the vocabulary could not be encoded; set the unknown-token id");
  }
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(vocab)));
}

SpmTokenizer::SpmTokenizer(SpmVocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.pieces.size();
  byte_to_id_.fill(-1);
  decoded_.resize(n);
  piece_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& piece = vocab_.pieces[i];
    const auto type = static_cast<SpmTokenType>(vocab_.types[i]);
    if (type == SpmTokenType::kByte) {
      const int byte = ParseBytePiece(piece);
      if (byte_to_id_[static_cast<size_t>(byte)] < 0) byte_to_id_[static_cast<size_t>(byte)] = id;
      decoded_[i] = std::string(1, static_cast<char>(byte));
    } else if (type == SpmTokenType::kControl || type == SpmTokenType::kUnknown) {
      decoded_[i].clear();
    } else {
      decoded_[i] = piece;
    }
    if (IsProducibleType(vocab_.types[i]) && !piece.empty()) {
      // The lowest id wins when a piece repeats.
      if (piece_to_id_.emplace(std::string_view(piece), id).second) {
        max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
      }
    }
  }
}

int32_t SpmTokenizer::PieceToId(std::string_view piece) const {
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

namespace {

// One token of the text being encoded: text[start, start + len). Symbols form a
// doubly linked list in text order; a merge grows the left one and unlinks the
// right one (len 0).
struct Symbol {
  int64_t prev;
  int64_t next;  // -1 at the end
  size_t start;
  uint32_t len;
  int32_t id;
  bool mergeable;  // false for byte-fallback tokens
};

// A pair of adjacent symbols whose concatenation is piece `id`.
struct Bigram {
  float score;
  int32_t id;
  uint32_t size;  // len of left + len of right when queued; stale if they changed
  int64_t left;
  int64_t right;
};

// Highest score first, then the leftmost pair (lowest index: symbols keep text order).
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  if (text.empty()) return ids;

  std::string buffer;
  if (vocab_.add_space_prefix) {
    buffer.reserve(text.size() + 1);
    buffer.push_back(' ');
  }
  buffer.append(text);
  const std::string_view s = buffer;

  // Characters, grouped as llama2.c does: a byte that is not a continuation
  // byte (10xxxxxx) starts a group, continuation bytes join it, at most 4. The
  // dummy prefix is a group of its own (run.c adds it as a token), so it never
  // absorbs continuation bytes at the start of the text.
  std::vector<Symbol> symbols;
  symbols.reserve(s.size());
  const auto push = [&symbols](size_t start, uint32_t len, int32_t id, bool mergeable) {
    const auto index = static_cast<int64_t>(symbols.size());
    symbols.push_back({index - 1, index + 1, start, len, id, mergeable});
  };
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i + 1;
    const bool prefix = i == 0 && vocab_.add_space_prefix;
    while (!prefix && j < s.size() && j - i < 4 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) {
      ++j;
    }
    const int32_t id = PieceToId(s.substr(i, j - i));
    if (id >= 0) {
      push(i, static_cast<uint32_t>(j - i), id, true);
    } else {
      bool have_bytes = true;
      for (size_t k = i; k < j; ++k) have_bytes &= byte_to_id_[static_cast<uint8_t>(s[k])] >= 0;
      if (have_bytes) {
        for (size_t k = i; k < j; ++k) push(k, 1, byte_to_id_[static_cast<uint8_t>(s[k])], false);
      } else {
        push(i, static_cast<uint32_t>(j - i), vocab_.unk, false);  // Create checked unk >= 0
      }
    }
    i = j;
  }
  symbols.back().next = -1;

  std::vector<Bigram> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{},
                                                                     std::move(storage));
  const auto try_add = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    if (!l.mergeable || !r.mergeable) return;
    const size_t size = static_cast<size_t>(l.len) + r.len;
    if (size > max_piece_bytes_) return;
    const int32_t id = PieceToId(s.substr(l.start, size));
    if (id < 0) return;
    queue.push(
        {vocab_.scores[static_cast<size_t>(id)], id, static_cast<uint32_t>(size), left, right});
  };
  for (size_t k = 1; k < symbols.size(); ++k) {
    try_add(static_cast<int64_t>(k - 1), static_cast<int64_t>(k));
  }

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(bigram.left)];
    Symbol& r = symbols[static_cast<size_t>(bigram.right)];
    // Lengths only grow, so equal lengths mean neither side changed since queued.
    if (l.len == 0 || r.len == 0 || l.len + r.len != bigram.size) continue;
    l.len = bigram.size;
    l.id = bigram.id;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = bigram.left;
    try_add(l.prev, bigram.left);
    try_add(bigram.left, l.next);
  }

  for (int64_t k = 0; k >= 0; k = symbols[static_cast<size_t>(k)].next) {
    ids.push_back(symbols[static_cast<size_t>(k)].id);
  }
  return ids;
}

std::string SpmTokenizer::Decode(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return decoded_[static_cast<size_t>(id)];
}

std::string SpmTokenizer::DecodeNext(int32_t prev_id, int32_t id) const {
  std::string text = Decode(id);
  if (prev_id >= 0 && prev_id == vocab_.bos && vocab_.add_space_prefix && !text.empty() &&
      text[0] == ' ' &&
      vocab_.types[static_cast<size_t>(id)] != static_cast<int32_t>(SpmTokenType::kByte)) {
    text.erase(0, 1);
  }
  return text;
}

}  // namespace dsv4
