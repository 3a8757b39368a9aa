// Byte-level BPE (see bpe_tokenizer.h): vocabulary loading from tokenizer.json
// or a GGUF-style BpeVocab, added-token splitting, BPE merges, decoding.
#include "tokenizer/bpe_tokenizer.h"

#include <fmt/core.h>
#include <zlib.h>  // inflateInit2, inflate: gzip'd tokenizer.json

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "base/log.h"
#include "base/mapped_file.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

using Json = nlohmann::json;

// Ids beyond this are rejected as corrupt (V4 has 129,280).
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int32_t kDeadSymbol = -2;

// GPT-2 `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) map to U+0100..U+0143
// in byte order, so every byte has a visible character.
struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 324> char_to_byte{};  // -1: not a byte-level character

  ByteLevelTables() {
    char_to_byte.fill(-1);
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next_extra++);
      byte_to_char[b] = cp;
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

std::string ByteLevelDecode(std::string_view text) {
  const ByteLevelTables& t = Tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    utf8::Scan scan = utf8::ScanFirst(text.substr(pos));
    if (scan.result != utf8::ScanResult::kComplete) {
      out.append(text.substr(pos, scan.length));
      pos += scan.length;
      continue;
    }
    char32_t cp = 0;
    const auto* p = reinterpret_cast<const uint8_t*>(text.data() + pos);
    switch (scan.length) {
      case 1:
        cp = p[0];
        break;
      case 2:
        cp = ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
        break;
      case 3:
        cp = ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        break;
      default:
        cp = ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
    if (cp < t.char_to_byte.size() && t.char_to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(t.char_to_byte[cp]));
    } else {
      out.append(text.substr(pos, scan.length));
    }
    pos += scan.length;
  }
  return out;
}

namespace {

std::string QuoteForRegex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::strchr("\\^$.|?*+()[]{}-/", c) != nullptr && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Added-token trie: leftmost-longest matching over bytes.

struct BpeTokenizer::AddedTokenTrie {
  struct Node {
    int32_t id = -1;  // token ending here
  };
  std::vector<Node> nodes{Node{}};
  std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child
  std::array<bool, 256> first_byte{};
  size_t count = 0;

  void Insert(std::string_view text, int32_t id) {
    if (text.empty()) return;
    first_byte[static_cast<uint8_t>(text[0])] = true;
    int32_t node = 0;
    for (unsigned char b : text) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges.find(key);
      if (it == edges.end()) {
        nodes.push_back(Node{});
        it = edges.emplace(key, static_cast<int32_t>(nodes.size() - 1)).first;
      }
      node = it->second;
    }
    if (nodes[node].id < 0) ++count;
    nodes[node].id = id;
  }

  // Longest token starting at text[pos]: {length, id}, or {0, -1}.
  std::pair<size_t, int32_t> LongestAt(std::string_view text, size_t pos) const {
    std::pair<size_t, int32_t> best{0, -1};
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]);
      auto it = edges.find(key);
      if (it == edges.end()) break;
      node = it->second;
      if (nodes[node].id >= 0) best = {i + 1 - pos, nodes[node].id};
    }
    return best;
  }
};

// ---------------------------------------------------------------------------
// Merge table: (left id, right id) -> (rank, merged id), open addressing.

struct BpeTokenizer::MergeTable {
  struct Entry {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0;
    int32_t id = 0;
  };
  std::vector<Entry> slots;
  uint64_t mask = 0;

  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static uint64_t Hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
  }

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }

  // False when the pair is already present (the first, higher-priority rank wins).
  bool Insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = Key(left, right);
    for (uint64_t i = Hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return false;
      if (slots[i].key == ~uint64_t{0}) {
        slots[i] = Entry{key, rank, id};
        return true;
      }
    }
  }

  const Entry* Find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    uint64_t key = Key(left, right);
    for (uint64_t i = Hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == ~uint64_t{0}) return nullptr;
    }
  }
};

BpeTokenizer::BpeTokenizer() { byte_to_id_.fill(-1); }
BpeTokenizer::~BpeTokenizer() = default;

// ---------------------------------------------------------------------------
// Construction.

namespace {

// Splits a GGUF/tokenizer.json merge "left right" at the first space after the
// first character (a token never starts with a space in byte-level vocabularies).
bool SplitMerge(std::string_view merge, std::string_view* left, std::string_view* right) {
  if (merge.size() < 3) return false;
  size_t space = merge.find(' ', 1);
  if (space == std::string_view::npos || space + 1 >= merge.size()) return false;
  *left = merge.substr(0, space);
  *right = merge.substr(space + 1);
  return true;
}

}  // namespace

Status BpeTokenizer::Finalize(std::string_view origin) {
  const size_t n = token_text_.size();
  if (n == 0) return InvalidArgument(fmt::format("{}: the vocabulary is empty", origin));
  token_bytes_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    BpeTokenType type = token_type_[id];
    // Added tokens are literal text; everything else is byte-level encoded.
    bool literal = type == BpeTokenType::kControl || type == BpeTokenType::kUserDefined ||
                   type == BpeTokenType::kUnused;
    token_bytes_[id] = literal ? token_text_[id] : ByteLevelDecode(token_text_[id]);
  }
  // Initial symbols: the byte-level character of each byte, looked up in the
  // BPE vocabulary first, then among added tokens (DeepSeek-LLM lists the 13
  // bytes that never occur in UTF-8 as user-defined tokens).
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8::Append(Tables().byte_to_char[b], &ch);
    if (auto it = model_vocab_.find(ch); it != model_vocab_.end()) {
      byte_to_id_[b] = it->second;
    } else if (auto jt = added_vocab_.find(ch); jt != added_vocab_.end()) {
      byte_to_id_[b] = jt->second;
    }
  }
  if (bos_id_ >= static_cast<int64_t>(n) || eos_id_ >= static_cast<int64_t>(n) || bos_id_ < -1 ||
      eos_id_ < -1) {
    return OutOfRange(fmt::format("{}: bos id {} / eos id {} outside the vocabulary of {} tokens",
                                  origin, bos_id_, eos_id_, n));
  }
  return Status::Ok();
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromVocab(const BpeVocab& vocab,
                                                              std::string_view origin) {
  const size_t n = vocab.tokens.size();
  if (n == 0) {
    return InvalidArgument(fmt::format("{}: tokenizer.ggml.tokens is empty", origin),
                           "the file has no BPE vocabulary");
  }
  if (static_cast<int64_t>(n) > kMaxVocab) {
    return OutOfRange(
        fmt::format("{}: {} tokens is more than the {} this engine accepts", origin, n, kMaxVocab));
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return InvalidArgument(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens",
                                       origin, vocab.token_types.size(), n));
  }
  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  auto pre_type = PreTokenizerTypeFromName(vocab.pre);
  if (!pre_type.ok()) return pre_type.status().WithContext(std::string(origin));
  auto splitter = RegexSplitter::Create(PreTokenizerPatterns(*pre_type));
  if (!splitter.ok()) return splitter.status().WithContext(std::string(origin));
  tok->splitter_.emplace(std::move(splitter).value());

  tok->token_text_ = vocab.tokens;
  tok->token_type_.assign(n, BpeTokenType::kNormal);
  auto plain = std::make_unique<AddedTokenTrie>();
  auto all = std::make_unique<AddedTokenTrie>();
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    if (!vocab.token_types.empty()) {
      int32_t t = vocab.token_types[id];
      if (t < 0 || t > static_cast<int32_t>(BpeTokenType::kByte)) {
        return InvalidArgument(fmt::format("{}: token {} ('{}') has token type {}, expected 0..6",
                                           origin, id, utf8::Sanitize(text), t));
      }
      tok->token_type_[id] = static_cast<BpeTokenType>(t);
    }
    tok->model_vocab_.emplace(text, static_cast<int32_t>(id));
    BpeTokenType type = tok->token_type_[id];
    if (type == BpeTokenType::kControl || type == BpeTokenType::kUserDefined) {
      tok->added_vocab_.emplace(text, static_cast<int32_t>(id));
      tok->added_ids_.push_back(static_cast<int32_t>(id));
      all->Insert(text, static_cast<int32_t>(id));
      if (type == BpeTokenType::kUserDefined) plain->Insert(text, static_cast<int32_t>(id));
    }
  }
  tok->passes_all_.push_back(std::move(all));
  tok->passes_plain_.push_back(std::move(plain));

  tok->merges_ = std::make_unique<MergeTable>(vocab.merges.size());
  size_t skipped = 0;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    std::string_view left, right;
    if (!SplitMerge(vocab.merges[rank], &left, &right)) {
      return InvalidArgument(fmt::format("{}: merge {} ('{}') is not 'left right'", origin, rank,
                                         utf8::Sanitize(vocab.merges[rank])));
    }
    auto l = tok->model_vocab_.find(std::string(left));
    auto r = tok->model_vocab_.find(std::string(right));
    auto m = tok->model_vocab_.find(std::string(left) + std::string(right));
    if (l == tok->model_vocab_.end() || r == tok->model_vocab_.end() ||
        m == tok->model_vocab_.end()) {
      ++skipped;  // llama.cpp tolerates these too; they can never apply
      continue;
    }
    if (tok->merges_->Insert(l->second, r->second, static_cast<int32_t>(rank), m->second)) {
      ++tok->num_merges_;
    }
  }
  if (skipped > 0) {
    LOG_WARNING("{}: skipped {} merges whose tokens are not in the vocabulary", origin, skipped);
  }
  tok->bos_id_ = vocab.bos_id;
  tok->eos_id_ = vocab.eos_id;
  tok->add_bos_ = vocab.add_bos;
  RETURN_IF_ERROR(tok->Finalize(origin));
  return tok;
}

namespace {

// Reads a required member of `type`; errors name the JSON path.
Result<const Json*> Member(const Json& object, const char* key, Json::value_t type,
                           std::string_view where, std::string_view origin) {
  if (!object.is_object()) {
    return InvalidArgument(fmt::format("{}: {} is not an object", origin, where));
  }
  auto it = object.find(key);
  if (it == object.end()) {
    return InvalidArgument(fmt::format("{}: {} has no \"{}\"", origin, where, key));
  }
  bool ok =
      it->type() == type || (type == Json::value_t::number_integer && it->is_number_unsigned());
  if (!ok) {
    return InvalidArgument(fmt::format("{}: {}.{} is a {}, expected {}", origin, where, key,
                                       it->type_name(), Json(type).type_name()));
  }
  return &*it;
}

bool IsNullOrFalse(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_boolean() && !it->get<bool>());
}

bool IsNullOrEmptyString(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

// Collects the regexes of an HF pre_tokenizer (Sequence / Split / ByteLevel).
Status CollectPreTokenizer(const Json& pre, std::string_view origin, std::string_view where,
                           std::vector<std::string>* patterns) {
  if (pre.is_null()) return Status::Ok();
  ASSIGN_OR_RETURN(const Json* type, Member(pre, "type", Json::value_t::string, where, origin));
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list,
                     Member(pre, "pretokenizers", Json::value_t::array, where, origin));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(CollectPreTokenizer((*list)[i], origin,
                                          fmt::format("{}.pretokenizers[{}]", where, i), patterns));
    }
    return Status::Ok();
  }
  if (name == "Split") {
    ASSIGN_OR_RETURN(const Json* pattern,
                     Member(pre, "pattern", Json::value_t::object, where, origin));
    std::string behavior = pre.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" || !IsNullOrFalse(pre, "invert")) {
      return Unimplemented(
          fmt::format("{}: {} is a Split with behavior '{}'{}", origin, where, behavior,
                      IsNullOrFalse(pre, "invert") ? "" : " and invert"),
          "only Isolated, non-inverted splits are supported (all DeepSeek tokenizers use them)");
    }
    if (auto it = pattern->find("Regex"); it != pattern->end() && it->is_string()) {
      patterns->push_back(it->get<std::string>());
    } else if (auto jt = pattern->find("String"); jt != pattern->end() && jt->is_string()) {
      patterns->push_back(QuoteForRegex(jt->get<std::string>()));
    } else {
      return InvalidArgument(
          fmt::format("{}: {}.pattern has neither a \"Regex\" nor a \"String\"", origin, where));
    }
    return Status::Ok();
  }
  if (name == "ByteLevel") {
    if (!IsNullOrFalse(pre, "add_prefix_space")) {
      return Unimplemented(fmt::format("{}: {} is ByteLevel with add_prefix_space", origin, where),
                           "only add_prefix_space=false is supported");
    }
    auto it = pre.find("use_regex");
    bool use_regex = it == pre.end() || (it->is_boolean() && it->get<bool>());
    if (use_regex) patterns->push_back(PreTokenizerPatterns(PreTokenizerType::kGpt2)[0]);
    return Status::Ok();
  }
  return Unimplemented(fmt::format("{}: {} has pre-tokenizer type '{}'", origin, where, name),
                       "supported: Sequence, Split (Isolated), ByteLevel");
}

// Checks that the decoder is byte-level (possibly inside a Sequence).
Status CheckDecoder(const Json& decoder, std::string_view origin) {
  if (decoder.is_null()) return Status::Ok();
  std::string type = decoder.is_object() ? decoder.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array()) {
    for (const Json& d : decoder["decoders"]) RETURN_IF_ERROR(CheckDecoder(d, origin));
    return Status::Ok();
  }
  return Unimplemented(fmt::format("{}: decoder type '{}' is not supported", origin, type),
                       "byte-level BPE tokenizers use the ByteLevel decoder");
}

// The content of a tokenizer_config.json token entry: "..." or {"content": "..."}.
std::optional<std::string> ConfigTokenContent(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromTokenizerJson(std::string_view json_text,
                                                                      std::string_view config_json,
                                                                      std::string_view origin) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return InvalidArgument(
        fmt::format("{}: not valid JSON at byte {}: {}", origin, e.byte, e.what()),
        "is this a tokenizer.json? a truncated download?");
  } catch (const Json::exception& e) {  // e.g. a number too large for a double
    return InvalidArgument(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  // nlohmann's accessors throw on type mismatches; every access below is
  // checked first, and this catch keeps anything missed from escaping.
  try {
    if (!root.is_object())
      return InvalidArgument(fmt::format("{}: top level is not an object", origin));
    ASSIGN_OR_RETURN(const Json* model,
                     Member(root, "model", Json::value_t::object, "root", origin));
    std::string model_type = model->value("type", std::string("BPE"));
    if (model_type != "BPE") {
      return Unimplemented(
          fmt::format("{}: model type '{}' is not supported here", origin, model_type),
          "BpeTokenizer reads byte-level BPE; SentencePiece vocabularies use spm_tokenizer");
    }
    if (!IsNullOrEmptyString(*model, "continuing_subword_prefix") ||
        !IsNullOrEmptyString(*model, "end_of_word_suffix") ||
        !IsNullOrFalse(*model, "byte_fallback")) {
      return Unimplemented(fmt::format("{}: BPE model uses continuing_subword_prefix, "
                                       "end_of_word_suffix or byte_fallback",
                                       origin),
                           "only plain byte-level BPE is supported");
    }
    if (!IsNullOrFalse(*model, "ignore_merges")) {
      return Unimplemented(fmt::format("{}: BPE ignore_merges is set", origin),
                           "DeepSeek tokenizers do not use it; add support in EncodePiece");
    }
    if (auto d = model->find("dropout");
        d != model->end() && d->is_number() && d->get<double>() != 0) {
      return Unimplemented(fmt::format("{}: BPE dropout is set", origin),
                           "use a tokenizer without dropout");
    }
    if (auto n = root.find("normalizer"); n != root.end() && !n->is_null()) {
      bool empty_sequence = n->is_object() && n->value("type", std::string()) == "Sequence" &&
                            n->contains("normalizers") && (*n)["normalizers"].is_array() &&
                            (*n)["normalizers"].empty();
      if (!empty_sequence) {
        return Unimplemented(
            fmt::format("{}: normalizers are not supported ({})", origin, n->dump().substr(0, 80)),
            "DeepSeek tokenizers have none (an empty Sequence)");
      }
    }
    auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
    std::vector<std::string> patterns;
    RETURN_IF_ERROR(CollectPreTokenizer(root.value("pre_tokenizer", Json()), origin,
                                        "pre_tokenizer", &patterns));
    RETURN_IF_ERROR(CheckDecoder(root.value("decoder", Json()), origin));
    auto splitter = RegexSplitter::Create(patterns);
    if (!splitter.ok()) return splitter.status().WithContext(std::string(origin));
    tok->splitter_.emplace(std::move(splitter).value());

    // BPE vocabulary.
    ASSIGN_OR_RETURN(const Json* vocab,
                     Member(*model, "vocab", Json::value_t::object, "model", origin));
    int64_t max_id = -1;
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it.value().is_number_integer()) {
        return InvalidArgument(fmt::format("{}: model.vocab[\"{}\"] is a {}, expected an id",
                                           origin, utf8::Sanitize(it.key()),
                                           it.value().type_name()));
      }
      int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= kMaxVocab) {
        return OutOfRange(fmt::format("{}: model.vocab[\"{}\"] = {} is outside [0, {})", origin,
                                      utf8::Sanitize(it.key()), id, kMaxVocab));
      }
      max_id = std::max(max_id, id);
    }
    // Added tokens.
    struct Added {
      std::string content;
      int32_t id;
      bool special;
      bool normalized;
    };
    std::vector<Added> added;
    if (auto a = root.find("added_tokens"); a != root.end() && !a->is_null()) {
      if (!a->is_array())
        return InvalidArgument(fmt::format("{}: added_tokens is not an array", origin));
      for (size_t i = 0; i < a->size(); ++i) {
        const Json& entry = (*a)[i];
        std::string where = fmt::format("added_tokens[{}]", i);
        ASSIGN_OR_RETURN(const Json* id,
                         Member(entry, "id", Json::value_t::number_integer, where, origin));
        ASSIGN_OR_RETURN(const Json* content,
                         Member(entry, "content", Json::value_t::string, where, origin));
        int64_t value = id->get<int64_t>();
        if (value < 0 || value >= kMaxVocab) {
          return OutOfRange(
              fmt::format("{}: {}.id = {} is outside [0, {})", origin, where, value, kMaxVocab));
        }
        if (content->get_ref<const std::string&>().empty()) {
          return InvalidArgument(fmt::format("{}: {}.content is empty", origin, where));
        }
        if (!IsNullOrFalse(entry, "lstrip") || !IsNullOrFalse(entry, "rstrip") ||
            !IsNullOrFalse(entry, "single_word")) {
          return Unimplemented(fmt::format("{}: {} ('{}') uses lstrip/rstrip/single_word", origin,
                                           where, utf8::Sanitize(content->get<std::string>())),
                               "only plain added tokens are supported");
        }
        added.push_back({content->get<std::string>(), static_cast<int32_t>(value),
                         entry.value("special", false),
                         entry.value("normalized", !entry.value("special", false))});
        max_id = std::max(max_id, value);
      }
    }
    const size_t n = static_cast<size_t>(max_id + 1);
    tok->token_text_.assign(n, std::string());
    tok->token_type_.assign(n, BpeTokenType::kUnused);
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      int32_t id = static_cast<int32_t>(it.value().get<int64_t>());
      if (!tok->token_text_[id].empty() || tok->token_type_[id] != BpeTokenType::kUnused) {
        return InvalidArgument(fmt::format("{}: id {} appears twice in model.vocab ('{}' and '{}')",
                                           origin, id, utf8::Sanitize(tok->token_text_[id]),
                                           utf8::Sanitize(it.key())));
      }
      tok->token_text_[id] = it.key();
      tok->token_type_[id] = BpeTokenType::kNormal;
      tok->model_vocab_.emplace(it.key(), id);
    }
    // Pass 1: tokens matched on the raw text (normalized=false), pass 2: the
    // others. With an empty normalizer both see the same text, but the order
    // of the passes still decides overlaps, so it is kept.
    for (int pass = 0; pass < 2; ++pass) {
      auto all = std::make_unique<AddedTokenTrie>();
      auto plain = std::make_unique<AddedTokenTrie>();
      for (const Added& a : added) {
        if (a.normalized != (pass == 1)) continue;
        all->Insert(a.content, a.id);
        if (!a.special) plain->Insert(a.content, a.id);
      }
      if (all->count == 0) continue;
      tok->passes_all_.push_back(std::move(all));
      tok->passes_plain_.push_back(std::move(plain));
    }
    for (const Added& a : added) {
      tok->token_text_[a.id] = a.content;
      tok->token_type_[a.id] = a.special ? BpeTokenType::kControl : BpeTokenType::kUserDefined;
      tok->added_vocab_[a.content] = a.id;
      tok->added_ids_.push_back(a.id);
    }

    // Merges: "left right" strings (tokenizers < 0.20) or ["left", "right"].
    ASSIGN_OR_RETURN(const Json* merges,
                     Member(*model, "merges", Json::value_t::array, "model", origin));
    tok->merges_ = std::make_unique<MergeTable>(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const Json& m = (*merges)[rank];
      std::string left, right;
      if (m.is_string()) {
        std::string_view l, r;
        if (!SplitMerge(m.get_ref<const std::string&>(), &l, &r)) {
          return InvalidArgument(fmt::format("{}: model.merges[{}] ('{}') is not 'left right'",
                                             origin, rank, utf8::Sanitize(m.get<std::string>())));
        }
        left = l, right = r;
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>(), right = m[1].get<std::string>();
      } else {
        return InvalidArgument(fmt::format(
            "{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", origin, rank));
      }
      auto l = tok->model_vocab_.find(left);
      auto r = tok->model_vocab_.find(right);
      auto merged = tok->model_vocab_.find(left + right);
      if (l == tok->model_vocab_.end() || r == tok->model_vocab_.end() ||
          merged == tok->model_vocab_.end()) {
        return InvalidArgument(
            fmt::format(
                "{}: model.merges[{}] ('{}' + '{}') uses a token that is not in model.vocab",
                origin, rank, utf8::Sanitize(left), utf8::Sanitize(right)),
            "the vocabulary and merges do not belong together");
      }
      if (tok->merges_->Insert(l->second, r->second, static_cast<int32_t>(rank), merged->second)) {
        ++tok->num_merges_;
      }
    }

    // BOS/EOS and add_bos from tokenizer_config.json, else by well-known names.
    std::optional<std::string> bos_text, eos_text;
    if (!config_json.empty()) {
      Json config;
      try {
        config = Json::parse(config_json.begin(), config_json.end());
      } catch (const Json::exception& e) {
        return InvalidArgument(
            fmt::format("{} (tokenizer_config.json): not valid JSON: {}", origin, e.what()));
      }
      if (!config.is_object()) {
        return InvalidArgument(
            fmt::format("{} (tokenizer_config.json): top level is not an object", origin));
      }
      bos_text = ConfigTokenContent(config, "bos_token");
      eos_text = ConfigTokenContent(config, "eos_token");
      if (auto it = config.find("add_bos_token"); it != config.end() && it->is_boolean()) {
        tok->add_bos_ = it->get<bool>();
      }
    } else {
      for (const char* name :
           {"<｜begin▁of▁sentence｜>", "<s>", "<|begin_of_text|>", "<|startoftext|>"}) {
        if (!bos_text && tok->added_vocab_.count(name)) bos_text = name;
      }
      for (const char* name :
           {"<｜end▁of▁sentence｜>", "</s>", "<|end_of_text|>", "<|endoftext|>"}) {
        if (!eos_text && tok->added_vocab_.count(name)) eos_text = name;
      }
    }
    if (bos_text) {
      auto id = tok->TokenToId(*bos_text);
      if (!id)
        return NotFound(
            fmt::format("{}: bos_token '{}' is not in the vocabulary", origin, *bos_text));
      tok->bos_id_ = *id;
    }
    if (eos_text) {
      auto id = tok->TokenToId(*eos_text);
      if (!id)
        return NotFound(
            fmt::format("{}: eos_token '{}' is not in the vocabulary", origin, *eos_text));
      tok->eos_id_ = *id;
    }
    RETURN_IF_ERROR(tok->Finalize(origin));
    return tok;
  } catch (const Json::exception& e) {
    return InvalidArgument(fmt::format("{}: unexpected JSON structure: {}", origin, e.what()),
                           "compare the file with an HF tokenizer.json");
  }
}

// ---------------------------------------------------------------------------
// Encoding.

void BpeTokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const {
  const size_t n = piece.size();
  if (n == 1) {
    int32_t id = byte_to_id_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) ids->push_back(id);
    return;
  }
  // Scratch reused across calls on this thread: no allocation per word.
  thread_local std::vector<int32_t> sym;    // [n] token id of the symbol starting here
  thread_local std::vector<int32_t> prev;   // [n] previous live symbol, -1 at the start
  thread_local std::vector<int32_t> next;   // [n] next live symbol, -1 at the end
  thread_local std::vector<uint64_t> heap;  // (rank << 32 | left position), min-heap
  sym.resize(n);
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_to_id_[static_cast<uint8_t>(piece[i])];
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  auto push = [&](int32_t left) {
    const MergeTable::Entry* m = merges_->Find(sym[left], sym[next[left]]);
    if (m != nullptr) {
      heap.push_back((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(left));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  // Lowest rank first, leftmost among equals (HF `Word::merge_all`).
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    uint64_t top = heap.back();
    heap.pop_back();
    int32_t left = static_cast<int32_t>(top & 0xffffffffu);
    int32_t rank = static_cast<int32_t>(top >> 32);
    if (sym[left] == kDeadSymbol) continue;
    int32_t right = next[left];
    if (right < 0) continue;
    const MergeTable::Entry* m = merges_->Find(sym[left], sym[right]);
    if (m == nullptr || m->rank != rank) continue;  // stale entry
    sym[left] = m->id;
    sym[right] = kDeadSymbol;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    if (prev[left] >= 0) push(prev[left]);
    if (next[left] >= 0) push(left);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) {
    if (sym[i] >= 0) ids->push_back(sym[i]);  // a byte with no token is dropped, as in HF
  }
}

void BpeTokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  splitter_->Split(text, &pieces);
  // A direct-mapped cache of this call's words (texts repeat a lot); entries
  // point at earlier output, which only grows.
  struct Slot {
    const char* data = nullptr;
    uint32_t size = 0;
    uint32_t start = 0;
    uint32_t count = 0;
  };
  constexpr size_t kSlots = 4096;
  std::vector<Slot> cache;
  if (pieces.size() > 256) cache.resize(kSlots);
  for (std::string_view piece : pieces) {
    if (cache.empty() || piece.size() < 2 || piece.size() > 256) {
      EncodePiece(piece, ids);
      continue;
    }
    Slot& slot = cache[std::hash<std::string_view>{}(piece) & (kSlots - 1)];
    if (slot.size == piece.size() && std::memcmp(slot.data, piece.data(), piece.size()) == 0) {
      for (uint32_t k = 0; k < slot.count; ++k) {
        int32_t id = (*ids)[slot.start + k];
        ids->push_back(id);
      }
      continue;
    }
    size_t start = ids->size();
    EncodePiece(piece, ids);
    slot = Slot{piece.data(), static_cast<uint32_t>(piece.size()), static_cast<uint32_t>(start),
                static_cast<uint32_t>(ids->size() - start)};
  }
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text,
                                          const BpeEncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  // Segments: (text, id); id >= 0 for an added token, -1 for ordinary text.
  std::vector<std::pair<std::string_view, int32_t>> segments{{text, -1}};
  const auto& passes = options.parse_special ? passes_all_ : passes_plain_;
  const bool ranged = !options.plain_ranges.empty();
  for (const auto& trie : passes) {
    if (trie->count == 0) continue;
    std::vector<std::pair<std::string_view, int32_t>> out;
    for (const auto& [segment, id] : segments) {
      if (id >= 0) {
        out.emplace_back(segment, id);
        continue;
      }
      size_t gap = 0;
      for (size_t pos = 0; pos < segment.size();) {
        if (!trie->first_byte[static_cast<uint8_t>(segment[pos])]) {
          ++pos;
          continue;
        }
        auto [length, token] = trie->LongestAt(segment, pos);
        if (length != 0 && ranged) {
          // An added token that overlaps a plain range is text there.
          const size_t at = static_cast<size_t>(segment.data() - text.data()) + pos;
          const size_t end = at + length;
          for (const TextRange& r : options.plain_ranges) {
            if (r.begin < end && at < r.end) length = 0;
          }
        }
        if (length == 0) {
          ++pos;
          continue;
        }
        if (pos > gap) out.emplace_back(segment.substr(gap, pos - gap), -1);
        out.emplace_back(segment.substr(pos, length), token);
        pos += length;
        gap = pos;
      }
      if (gap < segment.size()) out.emplace_back(segment.substr(gap), -1);
    }
    segments.swap(out);
  }
  for (const auto& [segment, id] : segments) {
    if (id >= 0) {
      ids.push_back(id);
    } else {
      EncodeOrdinary(segment, &ids);
    }
  }
  return ids;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool add_bos) const {
  return Encode(text, BpeEncodeOptions{.add_bos = add_bos, .parse_special = true});
}

std::vector<int32_t> BpeTokenizer::EncodeWithPlainRanges(std::string_view text, bool add_bos,
                                                         std::span<const TextRange> plain) const {
  return Encode(text,
                BpeEncodeOptions{.add_bos = add_bos, .parse_special = true, .plain_ranges = plain});
}

// ---------------------------------------------------------------------------
// Decoding and lookups.

std::string BpeTokenizer::Decode(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  if (token_type_[id] == BpeTokenType::kControl) return {};
  return token_bytes_[id];
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

std::string_view BpeTokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_text_[id];
}

BpeTokenType BpeTokenizer::TokenType(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return BpeTokenType::kUndefined;
  return token_type_[id];
}

std::optional<int32_t> BpeTokenizer::TokenToId(std::string_view text) const {
  std::string key(text);
  if (auto it = added_vocab_.find(key); it != added_vocab_.end()) return it->second;
  if (auto it = model_vocab_.find(key); it != model_vocab_.end()) return it->second;
  return std::nullopt;
}

std::string BpeTokenizer::DecodeText(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && token_type_[id] == BpeTokenType::kControl) continue;
    out += token_bytes_[id];
  }
  return out;
}

// ---------------------------------------------------------------------------
// Files.

Result<std::string> ReadFileMaybeGzip(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (!gz) return std::string(reinterpret_cast<const char*>(file->data()), file->size());
  z_stream zs{};
  // 15 + 16: a gzip header is required.
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return IoError(fmt::format("{}: zlib init failed", path));
  zs.next_in = const_cast<Bytef*>(file->data());
  zs.avail_in = static_cast<uInt>(file->size());
  std::string out;
  constexpr size_t kChunk = 1 << 20;
  constexpr size_t kMaxOut = size_t{1} << 31;  // 2 GiB: refuse decompression bombs
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    size_t old = out.size();
    if (old >= kMaxOut) {
      inflateEnd(&zs);
      return OutOfRange(fmt::format("{}: decompresses to more than 2 GiB", path));
    }
    out.resize(old + kChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    zs.avail_out = kChunk;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + kChunk - zs.avail_out);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      std::string why = zs.msg ? zs.msg : fmt::format("zlib error {}", rc);
      inflateEnd(&zs);
      return DataLoss(fmt::format("{}: gzip data is corrupt or truncated ({})", path, why),
                      "re-create the file with gzip");
    }
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return DataLoss(fmt::format("{}: gzip stream ends early", path), "the file is truncated");
    }
  }
  inflateEnd(&zs);
  return out;
}

Result<std::unique_ptr<BpeTokenizer>> LoadTokenizerJson(const std::string& path,
                                                        const std::string& config_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileMaybeGzip(path));
  std::string config;
  if (!config_path.empty()) {
    ASSIGN_OR_RETURN(config, ReadFileMaybeGzip(config_path));
  } else {
    std::filesystem::path sibling =
        std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::exists(sibling, ec)) {
      ASSIGN_OR_RETURN(config, ReadFileMaybeGzip(sibling.string()));
    }
  }
  return BpeTokenizer::FromTokenizerJson(text, config, path);
}

}  // namespace dsv4
