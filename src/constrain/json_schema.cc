// JSON Schema compiler (json_schema.h).
#include "constrain/json_schema.h"

#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "base/check.h"
#include "base/hash.h"
#include "constrain/token_mask.h"

namespace dsv4::constrain {
namespace {

using Json = nlohmann::json;

// Keywords that only annotate (ignored).
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",   "examples",         "$schema",        "$id",
    "$comment", "readOnly",    "writeOnly", "deprecated",       "discriminator",  "strict",
    "$defs",    "definitions", "$anchor",   "contentMediaType", "contentEncoding"};

// Keywords that constrain the value, by the type they apply to ("" any).
const std::set<std::string, std::less<>> kSupported = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "minLength",
    "maxLength", "format",     "enum",     "const",
    "anyOf",     "oneOf",      "allOf",    "$ref"};

// Shapes of the formats enforced (json_schema.h).
struct Format {
  const char* name;
  const char* shape;    // Node::format
  const char* example;  // a valid value of that shape: what completions write
};
const Format kFormats[] = {
    {"date", "dddd-dd-dd", "2000-01-01"},
    {"time", "dd:dd:ddZ", "00:00:00Z"},
    {"date-time", "dddd-dd-ddTdd:dd:ddZ", "2000-01-01T00:00:00Z"},
    {"uuid", "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "00000000-0000-0000-0000-000000000000"},
};

std::string Escape(std::string_view token) {  // a JSON pointer token (RFC 6901)
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Where(const std::string& path) { return path.empty() ? "/" : path; }

// The JSON text of a string's body: dump() without the quotes.
std::string KeyText(const std::string& name) {
  const std::string s = Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.substr(1, s.size() - 2);
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {
    // The generic nodes (json_schema.h's k*Node order).
    g_.nodes.resize(6);
    Node& any = g_.nodes[kAnyNode];
    any.kind = NodeKind::kAny;
    Node& obj = g_.nodes[kAnyObjectNode];
    obj.kind = NodeKind::kObject;
    obj.additional = kAnyNode;
    Node& arr = g_.nodes[kAnyArrayNode];
    arr.kind = NodeKind::kArray;
    arr.items = kAnyNode;
    g_.nodes[kAnyStringNode].kind = NodeKind::kString;
    g_.nodes[kAnyNumberNode].kind = NodeKind::kNumber;
    Node& lit = g_.nodes[kAnyLiteralNode];
    lit.kind = NodeKind::kLiteral;
    lit.literals = {"false", "null", "true"};
    for (int32_t i = 1; i < 6; ++i) CHECK(Finish(i).ok());
    any.first = obj.first | arr.first | g_.nodes[kAnyStringNode].first |
                g_.nodes[kAnyNumberNode].first | lit.first;
    any.min_value = "0";
  }

  Result<std::shared_ptr<const Grammar>> Run() {
    Result<int32_t> root = Compile(root_, "", 0);
    if (!root.ok()) return root.status();
    g_.root = *root;
    g_.source = root_.dump(-1, ' ', false, Json::error_handler_t::replace);
    g_.masks = std::make_shared<MaskCache>();
    return std::make_shared<const Grammar>(std::move(g_));
  }

 private:
  Result<int32_t> NewNode(NodeKind kind, const std::string& path) {
    if (static_cast<int>(g_.nodes.size()) >= kMaxNodes) {
      return InvalidArgument(fmt::format("the schema is too large at {}", Where(path)),
                             fmt::format("at most {} schema nodes are supported", kMaxNodes));
    }
    g_.nodes.emplace_back();
    g_.nodes.back().kind = kind;
    return static_cast<int32_t>(g_.nodes.size() - 1);
  }

  // The first bytes and the smallest value of node `i`, from its children's.
  Status Finish(int32_t i) {
    Node& n = g_.nodes[i];
    switch (n.kind) {
      case NodeKind::kAny:
        break;
      case NodeKind::kObject: {
        n.first.set('{');
        std::string v = "{";
        for (const Property& p : n.properties) {
          if (!p.required) continue;
          if (v.size() > 1) v += ',';
          v += '"' + p.key + "\":" + g_.nodes[p.node].min_value;
          if (v.size() > kMaxMinValueBytes) break;
        }
        n.min_value = v + "}";
        break;
      }
      case NodeKind::kArray: {
        n.first.set('[');
        std::string v = "[";
        for (uint32_t k = 0; k < n.min_items && v.size() <= kMaxMinValueBytes; ++k) {
          if (k > 0) v += ',';
          v += g_.nodes[n.items].min_value;
        }
        n.min_value = v + "]";
        break;
      }
      case NodeKind::kString: {
        n.first.set('"');
        std::string body;
        if (!n.format.empty()) {
          body = n.format_example;
        } else {
          body.assign(n.min_length, 'a');
        }
        n.min_value = '"' + body + '"';
        break;
      }
      case NodeKind::kNumber:
      case NodeKind::kInteger:
        n.first.set('-');
        for (char c = '0'; c <= '9'; ++c) n.first.set(static_cast<unsigned char>(c));
        n.min_value = "0";
        break;
      case NodeKind::kLiteral: {
        const std::string* best = nullptr;
        for (const std::string& s : n.literals) {
          n.first.set(static_cast<unsigned char>(s[0]));
          if (best == nullptr || s.size() < best->size()) best = &s;
        }
        n.min_value = *best;
        break;
      }
      case NodeKind::kAnyOf: {
        const std::string* best = nullptr;
        for (int32_t a : n.alternatives) {
          n.first |= g_.nodes[a].first;
          const std::string& v = g_.nodes[a].min_value;
          if (best == nullptr || v.size() < best->size()) best = &v;
        }
        n.min_value = *best;
        break;
      }
    }
    if (n.min_value.size() > kMaxMinValueBytes) {
      return InvalidArgument("the smallest value the schema allows is too large",
                             fmt::format("it must fit in {} bytes (lower minItems / minLength or "
                                         "make fewer properties required)",
                                         kMaxMinValueBytes));
    }
    return Status::Ok();
  }

  Result<uint32_t> Count(const Json& s, const char* key, const std::string& path, uint32_t dflt,
                         bool is_min) {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    const std::string where = path + "/" + key;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return InvalidArgument(
          fmt::format("schema {}: '{}' must be a non-negative integer", where, key));
    }
    const int64_t v = it->get<int64_t>();
    if (is_min && v > kMaxMinCount) {
      return Unimplemented(fmt::format("schema {}: '{}' = {} is too large", where, key, v),
                           fmt::format("at most {} is supported", kMaxMinCount));
    }
    return static_cast<uint32_t>(std::min<int64_t>(v, kUnbounded - 1));
  }

  // The node of the schema at `ref` ("#", "#/$defs/X", "#/definitions/X", or
  // any JSON pointer into the root).
  Result<int32_t> Ref(const std::string& ref, const std::string& path, int depth) {
    if (ref.empty() || ref[0] != '#') {
      return Unimplemented(
          fmt::format("schema {}/$ref: only references inside the schema (\"#...\") are "
                      "supported, not \"{}\"",
                      Where(path), ref),
          "put the referenced schema under $defs");
    }
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (std::find(ref_stack_.begin(), ref_stack_.end(), ref) != ref_stack_.end()) {
      return Unimplemented(
          fmt::format("schema {}/$ref: recursive reference \"{}\" is not supported", Where(path),
                      ref),
          "unroll the recursion to a fixed depth");
    }
    Json::json_pointer ptr;
    try {
      ptr = Json::json_pointer(ref.substr(1));
    } catch (const Json::exception&) {
      return InvalidArgument(
          fmt::format("schema {}/$ref: \"{}\" is not a JSON pointer", Where(path), ref));
    }
    const Json* target = nullptr;
    try {
      target = &root_.at(ptr);
    } catch (const Json::exception&) {
      return InvalidArgument(
          fmt::format("schema {}/$ref: \"{}\" does not exist in the schema", Where(path), ref));
    }
    ref_stack_.push_back(ref);
    Result<int32_t> n = Compile(*target, ref.substr(1), depth + 1);
    ref_stack_.pop_back();
    if (n.ok()) refs_[ref] = *n;
    return n;
  }

  Result<int32_t> Compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) {
      return InvalidArgument(fmt::format("schema {}: nested too deeply", Where(path)),
                             fmt::format("at most {} levels are supported", kMaxDepth));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return kAnyNode;
      return Unimplemented(fmt::format("schema {}: the schema false allows no value", Where(path)));
    }
    if (!s.is_object()) {
      return InvalidArgument(
          fmt::format("schema {}: a schema must be an object or a boolean, "
                      "not {}",
                      Where(path), s.type_name()));
    }
    for (const auto& [key, value] : s.items()) {
      if (!kSupported.contains(key) && !kAnnotations.contains(key)) {
        return Unimplemented(
            fmt::format("schema {}/{}: keyword '{}' is not supported", path, Escape(key), key),
            "structured output supports type, properties, required, additionalProperties, "
            "items, minItems, maxItems, minLength, maxLength, format, enum, const, anyOf, oneOf, "
            "allOf (one entry) and $ref");
      }
    }
    const auto only_with = [&](const char* kw) -> Status {
      for (const auto& [key, value] : s.items()) {
        if (key != kw && kSupported.contains(key)) {
          return Unimplemented(fmt::format("schema {}: '{}' together with '{}' is not supported",
                                           Where(path), key, kw),
                               fmt::format("move '{}' into each branch of '{}'", key, kw));
        }
      }
      return Status::Ok();
    };
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) {
        return InvalidArgument(fmt::format("schema {}/$ref must be a string", path));
      }
      RETURN_IF_ERROR(only_with("$ref"));
      return Ref(it->get<std::string>(), path, depth);
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) {
        return Unimplemented(
            fmt::format("schema {}/allOf: only allOf with one schema is supported", path),
            "merge the schemas into one");
      }
      RETURN_IF_ERROR(only_with("allOf"));
      return Compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      auto it = s.find(kw);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) {
        return InvalidArgument(
            fmt::format("schema {}/{} must be a non-empty array of schemas", path, kw));
      }
      RETURN_IF_ERROR(only_with(kw));
      std::vector<int32_t> alts;
      for (size_t k = 0; k < it->size(); ++k) {
        Result<int32_t> a = Compile((*it)[k], fmt::format("{}/{}/{}", path, kw, k), depth + 1);
        if (!a.ok()) return a.status();
        AddAlternative(*a, &alts);
      }
      return AnyOf(std::move(alts), path);
    }
    if (s.contains("enum") || s.contains("const")) return Literals(s, path);
    // type: one name or a list (an anyOf of the typed nodes).
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const Json& t : *it) {
          if (!t.is_string()) {
            return InvalidArgument(fmt::format("schema {}/type: entries must be strings", path));
          }
          types.push_back(t.get<std::string>());
        }
      } else {
        return InvalidArgument(
            fmt::format("schema {}/type must be a type name or a non-empty array of them", path));
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types = {"string"};
    } else {
      return kAnyNode;
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) {
      Result<int32_t> n = Typed(s, t, path, depth);
      if (!n.ok()) return n.status();
      AddAlternative(*n, &alts);
    }
    return AnyOf(std::move(alts), path);
  }

  void AddAlternative(int32_t n, std::vector<int32_t>* alts) {
    if (g_.nodes[n].kind == NodeKind::kAnyOf) {
      for (int32_t a : g_.nodes[n].alternatives) AddAlternative(a, alts);
    } else if (std::find(alts->begin(), alts->end(), n) == alts->end()) {
      alts->push_back(n);
    }
  }

  Result<int32_t> AnyOf(std::vector<int32_t> alts, const std::string& path) {
    if (alts.size() == 1) return alts[0];
    if (std::find(alts.begin(), alts.end(), kAnyNode) != alts.end()) return kAnyNode;
    Result<int32_t> n = NewNode(NodeKind::kAnyOf, path);
    if (!n.ok()) return n.status();
    g_.nodes[*n].alternatives = std::move(alts);
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  Result<int32_t> Literals(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.items()) {
      if (kSupported.contains(key) && key != "enum" && key != "const" && key != "type") {
        return Unimplemented(
            fmt::format("schema {}: '{}' together with 'enum' / 'const' is not supported",
                        Where(path), key),
            "list only the allowed values");
      }
    }
    std::vector<Json> values;
    if (auto it = s.find("const"); it != s.end()) values.push_back(*it);
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        return InvalidArgument(fmt::format("schema {}/enum must be a non-empty array", path));
      }
      if (it->size() > static_cast<size_t>(kMaxLiterals)) {
        return Unimplemented(fmt::format("schema {}/enum has {} values", path, it->size()),
                             fmt::format("at most {} are supported", kMaxLiterals));
      }
      if (s.contains("const")) {
        // Both: the const, if the enum lists it.
        if (std::find(it->begin(), it->end(), values[0]) == it->end()) values.clear();
      } else {
        values.assign(it->begin(), it->end());
      }
    }
    // A "type" keeps the values of that type.
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      if (it->is_array()) {
        for (const Json& t : *it) {
          if (t.is_string()) types.push_back(t.get<std::string>());
        }
      }
    }
    std::set<std::string> texts;
    for (const Json& v : values) {
      if (!types.empty()) {
        bool ok = false;
        for (const std::string& t : types) ok = ok || HasType(v, t);
        if (!ok) continue;
      }
      texts.insert(v.dump(-1, ' ', false, Json::error_handler_t::replace));
    }
    if (texts.empty()) {
      return Unimplemented(
          fmt::format("schema {}: enum / const leaves no allowed value", Where(path)));
    }
    // A literal that is a prefix of another must be a number (which a
    // following byte ends); drop any other (it cannot happen for JSON texts).
    Result<int32_t> n = NewNode(NodeKind::kLiteral, path);
    if (!n.ok()) return n.status();
    g_.nodes[*n].literals.assign(texts.begin(), texts.end());
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  static bool HasType(const Json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") {
      return v.is_number_integer() ||
             (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  }

  Result<int32_t> Typed(const Json& s, const std::string& type, const std::string& path,
                        int depth) {
    // Keywords of another type are ignored, as JSON Schema does.
    if (type == "null") return Literal("null", path);
    if (type == "boolean") return BoolNode(path);
    if (type == "number" || type == "integer") {
      Result<int32_t> n = NewNode(type == "number" ? NodeKind::kNumber : NodeKind::kInteger, path);
      if (!n.ok()) return n.status();
      RETURN_IF_ERROR(Finish(*n));
      return *n;
    }
    if (type == "string") return StringNode(s, path);
    if (type == "array") return ArrayNode(s, path, depth);
    if (type == "object") return ObjectNode(s, path, depth);
    return InvalidArgument(fmt::format("schema {}/type: unknown type \"{}\"", path, type),
                           "one of object, array, string, number, integer, boolean, null");
  }

  Result<int32_t> Literal(const std::string& text, const std::string& path) {
    Result<int32_t> n = NewNode(NodeKind::kLiteral, path);
    if (!n.ok()) return n.status();
    g_.nodes[*n].literals = {text};
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  Result<int32_t> BoolNode(const std::string& path) {
    Result<int32_t> n = NewNode(NodeKind::kLiteral, path);
    if (!n.ok()) return n.status();
    g_.nodes[*n].literals = {"false", "true"};
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  Result<int32_t> StringNode(const Json& s, const std::string& path) {
    Result<uint32_t> min = Count(s, "minLength", path, 0, true);
    if (!min.ok()) return min.status();
    Result<uint32_t> max = Count(s, "maxLength", path, kUnbounded, false);
    if (!max.ok()) return max.status();
    if (*min > *max) {
      return InvalidArgument(
          fmt::format("schema {}: minLength {} is above maxLength {}", Where(path), *min, *max));
    }
    std::string format, example;
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) {
        return InvalidArgument(fmt::format("schema {}/format must be a string", path));
      }
      for (const Format& f : kFormats) {
        if (*it == f.name) {
          format = f.shape;
          example = f.example;
        }
      }
      if (!format.empty() && (s.contains("minLength") || s.contains("maxLength"))) {
        return Unimplemented(
            fmt::format("schema {}: 'format' \"{}\" together with minLength / maxLength is not "
                        "supported",
                        Where(path), it->get<std::string>()),
            "the format fixes the length");
      }
    }
    Result<int32_t> n = NewNode(NodeKind::kString, path);
    if (!n.ok()) return n.status();
    Node& node = g_.nodes[*n];
    node.min_length = *min;
    node.max_length = *max;
    node.format = format;
    node.format_example = example;
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  Result<int32_t> ArrayNode(const Json& s, const std::string& path, int depth) {
    Result<uint32_t> min = Count(s, "minItems", path, 0, true);
    if (!min.ok()) return min.status();
    Result<uint32_t> max = Count(s, "maxItems", path, kUnbounded, false);
    if (!max.ok()) return max.status();
    if (*min > *max) {
      return InvalidArgument(
          fmt::format("schema {}: minItems {} is above maxItems {}", Where(path), *min, *max));
    }
    int32_t items = kAnyNode;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        return Unimplemented(fmt::format("schema {}/items: a list of schemas (tuple validation) "
                                         "is not supported",
                                         path),
                             "give one schema for every item");
      }
      Result<int32_t> i = Compile(*it, path + "/items", depth + 1);
      if (!i.ok()) return i.status();
      items = *i;
    }
    Result<int32_t> n = NewNode(NodeKind::kArray, path);
    if (!n.ok()) return n.status();
    Node& node = g_.nodes[*n];
    node.items = items;
    node.min_items = *min;
    node.max_items = *max;
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  Result<int32_t> ObjectNode(const Json& s, const std::string& path, int depth) {
    std::vector<Property> props;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) {
        return InvalidArgument(fmt::format("schema {}/properties must be an object", path));
      }
      for (const auto& [name, sub] : it->items()) {
        Result<int32_t> p = Compile(sub, path + "/properties/" + Escape(name), depth + 1);
        if (!p.ok()) return p.status();
        props.push_back({KeyText(name), *p, false});
      }
    }
    int32_t additional = kAnyNode;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        additional = it->get<bool>() ? kAnyNode : -1;
      } else {
        Result<int32_t> a = Compile(*it, path + "/additionalProperties", depth + 1);
        if (!a.ok()) return a.status();
        additional = *a;
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) {
        return InvalidArgument(fmt::format("schema {}/required must be an array of names", path));
      }
      for (const Json& r : *it) {
        if (!r.is_string()) {
          return InvalidArgument(fmt::format("schema {}/required: entries must be strings", path));
        }
        const std::string key = KeyText(r.get<std::string>());
        auto p = std::find_if(props.begin(), props.end(),
                              [&](const Property& q) { return q.key == key; });
        if (p == props.end()) {
          if (additional < 0) {
            return InvalidArgument(
                fmt::format("schema {}/required: \"{}\" is required but not among the properties "
                            "and additionalProperties is false",
                            path, r.get<std::string>()),
                "no value can satisfy this schema");
          }
          props.push_back({key, additional, true});
        } else {
          p->required = true;
        }
      }
    }
    if (props.size() > static_cast<size_t>(kMaxProperties)) {
      return Unimplemented(
          fmt::format("schema {}: an object with {} properties is not supported", Where(path),
                      props.size()),
          fmt::format("at most {} properties per object are supported", kMaxProperties));
    }
    std::sort(props.begin(), props.end(),
              [](const Property& a, const Property& b) { return a.key < b.key; });
    Result<int32_t> n = NewNode(NodeKind::kObject, path);
    if (!n.ok()) return n.status();
    Node& node = g_.nodes[*n];
    for (size_t i = 0; i < props.size(); ++i) {
      if (props[i].required) node.required_mask |= uint64_t{1} << i;
    }
    node.properties = std::move(props);
    node.additional = additional;
    RETURN_IF_ERROR(Finish(*n));
    return *n;
  }

  const Json& root_;
  Grammar g_;
  std::unordered_map<std::string, int32_t> refs_;
  std::vector<std::string> ref_stack_;
};

}  // namespace

std::shared_ptr<const Grammar> JsonObjectGrammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    Result<std::shared_ptr<const Grammar>> r = CompileJsonSchema(Json::object());
    auto grammar = std::make_shared<Grammar>(**r);
    grammar->root = kAnyObjectNode;
    grammar->source.clear();
    grammar->masks = std::make_shared<MaskCache>();
    return std::shared_ptr<const Grammar>(std::move(grammar));
  }();
  return g;
}

Result<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema) {
  return Compiler(schema).Run();
}

Result<std::shared_ptr<const Grammar>> SchemaCache::Get(const nlohmann::json& schema) {
  std::string text = schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint64_t h = Hash64(text);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(h); it != index_.end() && it->second->first == text) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  Result<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema);
  if (!g.ok()) return g;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(h); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(std::move(text), *g);
  index_[h] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(Hash64(lru_.back().first));
    lru_.pop_back();
  }
  return g;
}

size_t SchemaCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

int64_t SchemaCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace dsv4::constrain
