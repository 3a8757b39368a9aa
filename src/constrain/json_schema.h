// JSON Schema -> Grammar: the schema subset structured output supports,
// compiled once into a table of nodes that json_automaton.h runs byte by byte.
//
// Supported (everything else is refused, naming the keyword and where it is):
//   type (a name or a list of names), properties, required,
//   additionalProperties (true / false / a schema; absent means true), items,
//   minItems, maxItems, minLength, maxLength (code points), format (date, time,
//   date-time and uuid are enforced by shape: digits and hex digits in place;
//   other formats are annotations, as JSON Schema 2020-12 has them), enum,
//   const, anyOf, oneOf (enforced as anyOf: an output may match more than one
//   alternative), allOf with one entry, $ref to "#", "#/$defs/..." or
//   "#/definitions/..." (not recursive), and the annotations (title,
//   description, default, examples, $schema, $id, $comment, readOnly,
//   writeOnly, deprecated, discriminator, strict).
//
// Outputs the automaton accepts are a subset of what the schema validates:
// object keys are written without escapes unless a property's name needs them
// (an additional key may not contain '\'); \u escapes of surrogates are
// refused (non-BMP characters are written as UTF-8); enum and const values are
// written as compact JSON (nlohmann's dump: no spaces); an integer has no
// fraction or exponent.
//
// The schema is untrusted input: its size is bounded (kMaxNodes, kMaxDepth,
// kMaxProperties per object, kMaxLiterals per enum, minLength / minItems up
// to kMaxMinCount), $ref cycles are refused, and every error is
// InvalidArgument or Unimplemented with the JSON pointer of the offending
// place (fuzzed by tests/fuzz/fuzz_json_schema.cc).
#ifndef DSV4_CONSTRAIN_JSON_SCHEMA_H_
#define DSV4_CONSTRAIN_JSON_SCHEMA_H_

#include <nlohmann/json.hpp>

#include <array>
#include <bitset>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace dsv4::constrain {

inline constexpr int kMaxNodes = 4096;
inline constexpr int kMaxDepth = 64;
inline constexpr int kMaxProperties = 64;  // per object: the automaton keeps a 64-bit "seen" set
inline constexpr int kMaxLiterals = 1024;  // per enum
inline constexpr uint32_t kMaxMinCount = 4096;
inline constexpr size_t kMaxMinValueBytes = 1 << 16;  // the smallest valid value's text
inline constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

enum class NodeKind : uint8_t {
  kAny,  // any JSON value (dispatched on its first byte to the generic nodes)
  kObject,
  kArray,
  kString,
  kNumber,
  kInteger,
  kLiteral,  // one of `literals` (true / false / null, enum, const), byte for byte
  kAnyOf,    // one of `alternatives`
};

struct Property {
  std::string key;  // the name as a JSON string body (escaped, without the quotes)
  int32_t node = 0;
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::kAny;
  // kObject: sorted by key; additional: the node of other keys, -1 none.
  std::vector<Property> properties;
  uint64_t required_mask = 0;  // bit i: properties[i] is required
  int32_t additional = -1;
  // kArray
  int32_t items = 0;
  uint32_t min_items = 0, max_items = kUnbounded;
  // kString: lengths in code points; format: a shape, one byte per character
  // ('d' a digit, 'x' a hex digit, anything else itself), "" for none.
  uint32_t min_length = 0, max_length = kUnbounded;
  std::string format;
  std::string format_example;  // a valid value of that shape (completions write it)
  // kLiteral: sorted, distinct JSON texts, none a prefix of another unless a
  // number (those end where a following byte cannot continue them).
  std::vector<std::string> literals;
  // kAnyOf: no kAnyOf among them (nested ones are flattened).
  std::vector<int32_t> alternatives;
  // Bytes a value of this node may start with.
  std::bitset<256> first;
  // The shortest valid value (the completion of a value not yet begun).
  std::string min_value;
};

// The generic nodes every grammar starts with (kAny dispatches to them).
inline constexpr int32_t kAnyNode = 0;
inline constexpr int32_t kAnyObjectNode = 1;  // {} with any members
inline constexpr int32_t kAnyArrayNode = 2;
inline constexpr int32_t kAnyStringNode = 3;
inline constexpr int32_t kAnyNumberNode = 4;
inline constexpr int32_t kAnyLiteralNode = 5;  // true, false, null

class MaskCache;  // token_mask.h

struct Grammar {
  std::vector<Node> nodes;
  int32_t root = kAnyNode;
  std::string source;  // the schema as compiled (compact JSON), "" for json_object
  // The token masks of this grammar's states, shared by every sequence that
  // decodes with it (token_mask.h).
  std::shared_ptr<MaskCache> masks;
};

// The grammar of any JSON object (response_format {"type": "json_object"}).
std::shared_ptr<const Grammar> JsonObjectGrammar();

// Compiles `schema`. InvalidArgument for a malformed schema, Unimplemented for
// a keyword outside the subset; the message names the keyword and its JSON
// pointer (e.g. "/properties/age/minimum").
Result<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema);

// Compiled grammars by schema text (an LRU of `capacity`), so a schema that
// many requests send is compiled once; thread-safe.
class SchemaCache {
 public:
  explicit SchemaCache(size_t capacity = 16) : capacity_(capacity) {}
  Result<std::shared_ptr<const Grammar>> Get(const nlohmann::json& schema);
  size_t size() const;
  int64_t hits() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Grammar>>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;                                            // most recent first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;  // Hash64 of the text
  int64_t hits_ = 0;
};

}  // namespace dsv4::constrain

#endif  // DSV4_CONSTRAIN_JSON_SCHEMA_H_
