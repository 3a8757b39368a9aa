// Parsing and validation of DeepSeek-V4 config.json (see config.h).
// nlohmann::json is used without exceptions (parse with allow_exceptions =
// false, every access type-checked first), so nothing escapes this module.
#include "model/deepseek_v4/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "io/gguf.h"

namespace dsv4::deepseek_v4 {
namespace {

using Json = nlohmann::json;

std::string Str(int64_t v) { return std::to_string(v); }
std::string Str(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Reads typed fields from one JSON object, under a primary key and aliases.
// The first type or consistency problem is kept and reported by status().
class FieldReader {
 public:
  static std::vector<const char*> Keys(const ConfigField& field) {
    std::vector<const char*> keys = {field.key};
    for (const char* a : field.aliases) {
      if (a != nullptr) keys.push_back(a);
    }
    return keys;
  }

  FieldReader(const Json& obj, std::string source) : obj_(obj), source_(std::move(source)) {}

  // The value under the first present key of `keys`; nullptr when none.
  // Two present keys with different values are an error (e.g. dim vs hidden_size).
  const Json* Find(const std::vector<const char*>& keys) {
    const Json* found = nullptr;
    const char* found_key = nullptr;
    for (const char* k : keys) {
      auto it = obj_.find(k);
      if (it == obj_.end() || it->is_null()) continue;
      if (found == nullptr) {
        found = &*it;
        found_key = k;
      } else if (*found != *it) {
        Fail(std::string("'") + found_key + "' = " + found->dump() + " and its alias '" + k +
                 "' = " + it->dump() + " disagree",
             "keep one spelling, or make them equal");
      }
    }
    return found;
  }

  void Int(const std::vector<const char*>& keys, int64_t& out) {
    const Json* v = Find(keys);
    if (v == nullptr) return;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      out = static_cast<int64_t>(v->get<double>());
    } else {
      TypeError(*keys.begin(), "an integer", *v);
    }
  }
  void Int32(const std::vector<const char*>& keys, int32_t& out) {
    int64_t v = out;
    Int(keys, v);
    if (v < INT32_MIN || v > INT32_MAX) {
      Fail(std::string("'") + *keys.begin() + "' = " + Str(v) + " does not fit in 32 bits");
      return;
    }
    out = static_cast<int32_t>(v);
  }
  void Float(const std::vector<const char*>& keys, double& out) {
    const Json* v = Find(keys);
    if (v == nullptr) return;
    if (v->is_number()) {
      out = v->get<double>();
    } else {
      TypeError(*keys.begin(), "a number", *v);
    }
  }
  void Bool(const std::vector<const char*>& keys, bool& out) {
    const Json* v = Find(keys);
    if (v == nullptr) return;
    if (v->is_boolean()) {
      out = v->get<bool>();
    } else {
      TypeError(*keys.begin(), "true or false", *v);
    }
  }
  // Returns false when absent.
  bool String(const std::vector<const char*>& keys, std::string& out) {
    const Json* v = Find(keys);
    if (v == nullptr) return false;
    if (!v->is_string()) {
      TypeError(*keys.begin(), "a string", *v);
      return false;
    }
    out = v->get<std::string>();
    return true;
  }
  // Returns nullopt when absent.
  std::optional<std::vector<int64_t>> IntList(const std::vector<const char*>& keys) {
    const Json* v = Find(keys);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) {
      TypeError(*keys.begin(), "a list of integers", *v);
      return std::nullopt;
    }
    std::vector<int64_t> out;
    for (const Json& e : *v) {
      if (!e.is_number_integer() && !e.is_number_unsigned()) {
        TypeError(*keys.begin(), "a list of integers", *v);
        return std::nullopt;
      }
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  std::optional<std::vector<std::string>> StringList(const std::vector<const char*>& keys) {
    const Json* v = Find(keys);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) {
      TypeError(*keys.begin(), "a list of strings", *v);
      return std::nullopt;
    }
    std::vector<std::string> out;
    for (const Json& e : *v) {
      if (!e.is_string()) {
        TypeError(*keys.begin(), "a list of strings", *v);
        return std::nullopt;
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  // One field of the table (config.h), by the type of its member.
  void Read(const ConfigField& field, int64_t& out) { Int(Keys(field), out); }
  void Read(const ConfigField& field, int32_t& out) { Int32(Keys(field), out); }
  void Read(const ConfigField& field, double& out) { Float(Keys(field), out); }
  void Read(const ConfigField& field, bool& out) { Bool(Keys(field), out); }
  void Read(const ConfigField& field, std::string& out) { String(Keys(field), out); }

  void Fail(std::string message, std::string hint = {}) {
    if (status_.ok()) status_ = InvalidArgument(source_ + ": " + message, std::move(hint));
  }
  const Status& status() const { return status_; }

 private:
  void TypeError(const char* key, const char* want, const Json& got) {
    std::string shown = got.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    Fail(std::string("'") + key + "' must be " + want + ", got " + shown);
  }

  const Json& obj_;
  std::string source_;
  Status status_;
};

// HF transformers' `layer_types` labels (configuration_deepseek_v4.py).
constexpr const char* kSlidingAttention = "sliding_attention";
constexpr const char* kCompressedSparse = "compressed_sparse_attention";
constexpr const char* kHeavilyCompressed = "heavily_compressed_attention";

Status Field(const std::string& field, const std::string& value, const std::string& supported) {
  return InvalidArgument("config field '" + field + "' = " + value + " is not supported",
                         "supported: " + supported);
}

}  // namespace

std::string_view ScoringFuncName(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
    case ScoringFunc::kSigmoid:
      return "sigmoid";
    case ScoringFunc::kSoftmax:
      return "softmax";
  }
  return "?";
}

std::string_view ExpertDTypeName(ExpertDType d) {
  switch (d) {
    case ExpertDType::kDefault:
      return "default";
    case ExpertDType::kFp8:
      return "fp8";
    case ExpertDType::kFp4:
      return "fp4";
  }
  return "?";
}

std::string_view LayerTypeName(int64_t compress_ratio) {
  if (compress_ratio == 0) return kSlidingAttention;
  if (compress_ratio == 4) return kCompressedSparse;
  return kHeavilyCompressed;
}

int64_t DeepSeekV4Config::compress_ratio(int64_t layer) const {
  CHECK(layer >= 0 && layer < n_layers_total(), "layer %lld out of range",
        static_cast<long long>(layer));
  return layer < static_cast<int64_t>(compress_ratios.size()) ? compress_ratios[layer] : 0;
}

namespace {
Result<DeepSeekV4Config> ParseConfig(std::string_view text, const std::string& source);
}  // namespace

Result<DeepSeekV4Config> DeepSeekV4Config::FromJson(std::string_view text,
                                                    const std::string& source) {
  Result<DeepSeekV4Config> c = ParseConfig(text, source);
  if (!c.ok()) {
    // Every error names the file it came from.
    const Status& s = c.status();
    if (s.message().rfind(source, 0) != 0) return s.WithContext(source);
    return s;
  }
  RETURN_IF_ERROR(c->Validate().WithContext(source));
  return c;
}

namespace {
// YaRN and the RoPE bases beyond the table: rope_scaling, rope_parameters, the
// inference keys.
Status ReadRope(FieldReader& f, const Json& root, const std::string& source, DeepSeekV4Config& c) {
  // YaRN and the RoPE bases' HF spellings: `rope_scaling`, or HF v5
  // `rope_parameters` ({"main": {...}, "compress": {...}}).
  const Json* scaling = f.Find({"rope_scaling"});
  if (const Json* rp = f.Find({"rope_parameters"}); rp != nullptr && rp->is_object()) {
    if (rp->contains("main") && (*rp)["main"].is_object()) {
      FieldReader m((*rp)["main"], source + " rope_parameters.main");
      m.Float({"rope_theta"}, c.rope_theta);
      std::string type = "default";
      m.String({"rope_type", "type"}, type);
      if (type != "default") {
        return Field("rope_parameters.main.rope_type", "\"" + type + "\"",
                     "\"default\" (sliding-window layers use plain RoPE, spec §4.2)");
      }
      RETURN_IF_ERROR(m.status());
    }
    if (rp->contains("compress") && (*rp)["compress"].is_object()) {
      FieldReader m((*rp)["compress"], source + " rope_parameters.compress");
      m.Float({"rope_theta"}, c.compress_rope_theta);
      RETURN_IF_ERROR(m.status());
      if (scaling == nullptr) scaling = &(*rp)["compress"];
    } else if (!rp->contains("main") && scaling == nullptr) {
      scaling = rp;  // a flat rope_parameters dict is the compressed layers' YaRN
    }
  }
  if (scaling != nullptr) {
    if (!scaling->is_object()) {
      return InvalidArgument(source + ": 'rope_scaling' must be an object or null, got " +
                             scaling->dump());
    }
    FieldReader s(*scaling, source + " rope_scaling");
    std::string type = "yarn";
    s.String({"type", "rope_type"}, type);
    if (type == "yarn") {
      c.rope_scaling.enabled = true;
    } else if (type == "default" || type == "none") {
      c.rope_scaling.enabled = false;
    } else {
      return Field("rope_scaling.type", "\"" + type + "\"", "\"yarn\" or none");
    }
    s.Float({"factor"}, c.rope_scaling.factor);
    s.Int({"original_max_position_embeddings"}, c.rope_scaling.original_max_position);
    s.Float({"beta_fast"}, c.rope_scaling.beta_fast);
    s.Float({"beta_slow"}, c.rope_scaling.beta_slow);
    double attention_factor = 1.0;
    s.Float({"attention_factor"}, attention_factor);
    double mscale = 1.0, mscale_all_dim = 1.0;
    s.Float({"mscale"}, mscale);
    s.Float({"mscale_all_dim"}, mscale_all_dim);
    RETURN_IF_ERROR(s.status());
    if (attention_factor != 1.0 || mscale != mscale_all_dim) {
      return Field("rope_scaling.attention_factor", Str(attention_factor),
                   "1.0: DeepSeek-V4 applies no YaRN amplitude (mscale) factor (spec §4.2)");
    }
  } else if (root.contains("original_seq_len") || root.contains("rope_factor")) {
    // Inference ModelArgs spelling; original_seq_len == 0 disables YaRN.
    int64_t original = 0;
    f.Int({"original_seq_len"}, original);
    f.Float({"rope_factor"}, c.rope_scaling.factor);
    f.Float({"beta_fast"}, c.rope_scaling.beta_fast);
    f.Float({"beta_slow"}, c.rope_scaling.beta_slow);
    c.rope_scaling.enabled = original > 0;
    if (original > 0) c.rope_scaling.original_max_position = original;
  } else if (root.contains("rope_scaling")) {
    c.rope_scaling.enabled = false;  // explicit null
  }
  return f.status();
}

// The router: scoring_func; and the features of other families V4 lacks.
Status ReadRouting(FieldReader& f, const Json& root, const std::string& source,
                   DeepSeekV4Config& c) {
  std::string scoring = "sqrtsoftplus";
  if (f.String({"scoring_func", "score_func"}, scoring)) {
    if (scoring == "sqrtsoftplus") {
      c.scoring_func = ScoringFunc::kSqrtSoftplus;
    } else if (scoring == "sigmoid") {
      c.scoring_func = ScoringFunc::kSigmoid;
    } else if (scoring == "softmax") {
      c.scoring_func = ScoringFunc::kSoftmax;
    } else {
      return Field("scoring_func", "\"" + scoring + "\"", "sqrtsoftplus, sigmoid, softmax");
    }
  }

  // Features of other families that V4 does not have: reject non-default values
  // instead of silently ignoring them.
  int64_t first_k_dense = 0, n_group = 1, topk_group = 1;
  f.Int({"first_k_dense_replace"}, first_k_dense);
  f.Int({"n_group"}, n_group);
  f.Int({"topk_group"}, topk_group);
  if (first_k_dense != 0) {
    return Field("first_k_dense_replace", Str(first_k_dense), "0 (every V4 layer is MoE)");
  }
  if (n_group > 1 || topk_group > 1) {
    return Field("n_group", Str(n_group), "1 (V4 routing has no expert groups, spec §5.1)");
  }
  bool attention_bias = false, mlp_bias = false;
  f.Bool({"attention_bias"}, attention_bias);
  f.Bool({"mlp_bias"}, mlp_bias);
  if (attention_bias || mlp_bias) {
    return Field(attention_bias ? "attention_bias" : "mlp_bias", "true",
                 "false (DeepSeek-V4 linears have no bias)");
  }
  std::string hidden_act = "silu";
  f.String({"hidden_act"}, hidden_act);
  if (hidden_act != "silu") return Field("hidden_act", "\"" + hidden_act + "\"", "\"silu\"");
  return f.status();
}

// Weight formats and the QAT simulations.
Status ReadWeightFormats(FieldReader& f, const Json& root, const std::string& source,
                         DeepSeekV4Config& c) {
  // Weight formats: HF quantization_config, and the inference keys dtype /
  // scale_fmt / expert_dtype / scale_dtype.
  std::string expert_dtype;
  if (f.String({"expert_dtype"}, expert_dtype)) {
    if (expert_dtype == "fp4") {
      c.expert_dtype = ExpertDType::kFp4;
    } else if (expert_dtype == "fp8") {
      c.expert_dtype = ExpertDType::kFp8;
    } else if (expert_dtype == "bf16" || expert_dtype == "bfloat16") {
      c.expert_dtype = ExpertDType::kDefault;
    } else {
      return Field("expert_dtype", "\"" + expert_dtype + "\"", "fp4, fp8, bf16 or absent");
    }
  }
  if (const Json* q = f.Find({"quantization_config"}); q != nullptr) {
    if (!q->is_object()) {
      return InvalidArgument(source + ": 'quantization_config' must be an object, got " +
                             q->dump());
    }
    QuantizationConfig& qc = c.quantization_config;
    qc.present = true;
    FieldReader r(*q, source + " quantization_config");
    r.String({"quant_method"}, qc.quant_method);
    r.String({"fmt"}, qc.fmt);
    if (!r.String({"scale_fmt"}, qc.scale_fmt)) qc.scale_fmt.clear();
    if (auto block = r.IntList({"weight_block_size"})) qc.weight_block_size = *block;
    r.String({"activation_scheme"}, qc.activation_scheme);
    RETURN_IF_ERROR(r.status());
  }
  std::string dtype;
  if (f.String({"dtype"}, dtype)) {
    if (dtype == "fp8") {
      c.quantization_config.present = true;  // inference config.json: FP8 dense weights
    } else if (dtype == "bf16") {
      // inference config.json: unquantized weights
    } else if (!root.contains("torch_dtype")) {
      c.torch_dtype = dtype;  // transformers v5 writes torch_dtype as `dtype`
    }
  }
  std::string scale_fmt;
  if (f.String({"scale_fmt"}, scale_fmt)) c.quantization_config.scale_fmt = scale_fmt;
  // QAT simulations: the official FP8 releases were trained with them.
  c.qat_simulation = c.quantization_config.present;
  f.Bool({"qat_simulation"}, c.qat_simulation);
  return f.status();
}

// The attention schedule and the hash layers.
Status ReadSchedule(FieldReader& f, const Json& root, const std::string& source,
                    DeepSeekV4Config& c) {
  // ---- attention schedule ----
  // compress_ratios (official and HF legacy) or layer_types (+ compress_rates).
  std::map<std::string, int64_t> rates = {{kCompressedSparse, 4}, {kHeavilyCompressed, 128}};
  if (const Json* cr = f.Find({"compress_rates"}); cr != nullptr) {
    if (!cr->is_object()) {
      return InvalidArgument(source + ": 'compress_rates' must be an object, got " + cr->dump());
    }
    for (auto it = cr->begin(); it != cr->end(); ++it) {
      if (!it->is_number_integer()) {
        return InvalidArgument(source + ": 'compress_rates." + it.key() + "' must be an integer");
      }
      rates[it.key()] = it->get<int64_t>();
    }
  }
  f.Int({"compress_rate_csa"}, rates[kCompressedSparse]);
  f.Int({"compress_rate_hca"}, rates[kHeavilyCompressed]);
  std::optional<std::vector<int64_t>> ratios = f.IntList({"compress_ratios"});
  std::optional<std::vector<std::string>> layer_types = f.StringList({"layer_types"});
  RETURN_IF_ERROR(f.status());
  if (layer_types) {
    std::vector<int64_t> from_types;
    for (size_t i = 0; i < layer_types->size(); ++i) {
      const std::string& t = (*layer_types)[i];
      if (t == kSlidingAttention) {
        from_types.push_back(0);
      } else if (rates.count(t)) {
        from_types.push_back(rates[t]);
      } else {
        return Field("layer_types[" + std::to_string(i) + "]", "\"" + t + "\"",
                     "sliding_attention, compressed_sparse_attention, "
                     "heavily_compressed_attention");
      }
    }
    if (ratios) {
      for (size_t i = 0; i < from_types.size() && i < ratios->size(); ++i) {
        if (from_types[i] != (*ratios)[i]) {
          return InvalidArgument(source + ": layer " + std::to_string(i) + " is '" +
                                     (*layer_types)[i] +
                                     "' in layer_types but has compress_ratios[" +
                                     std::to_string(i) + "] = " + Str((*ratios)[i]),
                                 "make compress_ratios and layer_types agree");
        }
      }
    } else {
      ratios = from_types;
    }
  }
  if (!ratios) {
    return InvalidArgument(source + ": neither 'compress_ratios' nor 'layer_types' is present",
                           "the attention schedule must come from the checkpoint's config "
                           "(spec §1.2); add compress_ratios with one entry per layer");
  }
  c.compress_ratios = *ratios;

  // mlp_layer_types (HF v5): hash_moe for the first layers, then moe.
  if (auto mlp = f.StringList({"mlp_layer_types"})) {
    int64_t n_hash = 0;
    bool seen_moe = false;
    for (size_t i = 0; i < mlp->size(); ++i) {
      const std::string& t = (*mlp)[i];
      if (t == "hash_moe" && !seen_moe) {
        ++n_hash;
      } else if (t == "moe") {
        seen_moe = true;
      } else {
        return Field("mlp_layer_types[" + std::to_string(i) + "]", "\"" + t + "\"",
                     "\"hash_moe\" for a leading run of layers, then \"moe\"");
      }
    }
    if (root.contains("num_hash_layers") && n_hash != c.num_hash_layers) {
      return InvalidArgument(source + ": mlp_layer_types has " + Str(n_hash) +
                                 " hash_moe layers but num_hash_layers = " + Str(c.num_hash_layers),
                             "make them agree");
    }
    c.num_hash_layers = n_hash;
  }
  // DSpark's target layers, kept in layer order (the reference collects them
  // in its layer loop whatever the order of the list).
  if (auto targets = f.IntList({"dspark_target_layer_ids"})) {
    std::sort(targets->begin(), targets->end());
    c.dspark_target_layer_ids = *targets;
  }
  return f.status();
}

// DeepSeek-V4.1's lists (CSA2 roles, Engram) and the defaults that differ
// from V4: no hash-routed layers, FP8 weights in 32×32 blocks.
Status ReadV41(FieldReader& f, const Json& root, DeepSeekV4Config& c) {
  if (auto v = f.IntList({"kv_source_layers", "kv_source_layer_ids"})) c.kv_source_layers = *v;
  if (auto v = f.IntList({"index_source_layers", "index_source_layer_ids"})) {
    c.index_source_layers = *v;
  }
  if (auto v = f.IntList({"engram_layer_ids"})) c.engram_layer_ids = *v;
  if (auto v = f.IntList({"engram_num_embeddings"})) c.engram_num_embeddings = *v;
  if (!c.v41()) return f.status();
  if (!root.contains("num_hash_layers") && !root.contains("n_hash_layers")) c.num_hash_layers = 0;
  const Json* q = f.Find({"quantization_config"});
  if (c.quantization_config.present && (q == nullptr || !q->contains("weight_block_size"))) {
    c.quantization_config.weight_block_size = {32, 32};
  }
  return f.status();
}

Result<DeepSeekV4Config> ParseConfig(std::string_view text, const std::string& source) {
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return InvalidArgument(source + ": not valid JSON", "is this a config.json file?");
  }
  if (!root.is_object()) {
    return InvalidArgument(source + ": the top level is not a JSON object",
                           "a config.json holds one object of hyper-parameters");
  }
  DeepSeekV4Config c;
  FieldReader f(root, source);

  if (!f.String({"model_type"}, c.model_type)) {
    // The reference's inference/config.json (ModelArgs keys) names no type:
    // V4.1's has the CSA2 source lists.
    if (!root.contains("n_layers") || !root.contains("dim")) {
      return InvalidArgument(source + ": 'model_type' is missing",
                             "a DeepSeek-V4 config.json has \"model_type\": \"deepseek_v4\"");
    }
    c.model_type = root.contains("kv_source_layers") ? "deepseek_v41" : "deepseek_v4";
  }
  // Every scalar field of the table, under its key or an alias.
  VisitConfigFields(c, [&](const ConfigField& field, auto& value) { f.Read(field, value); });
  if (root.contains("partial_rotary_factor") && !root.contains("qk_rope_head_dim") &&
      !root.contains("rope_head_dim")) {
    double factor = 0.0;
    f.Float({"partial_rotary_factor"}, factor);
    c.qk_rope_head_dim = static_cast<int64_t>(std::llround(factor * c.head_dim));
  }
  if (const Json* eos = f.Find({"eos_token_id"}); eos != nullptr && eos->is_array()) {
    // HF allows a list; the first id is the end-of-sequence token.
    if (eos->empty() || !(*eos)[0].is_number_integer()) {
      return InvalidArgument(source + ": 'eos_token_id' must be an integer or a list of them");
    }
    c.eos_token_id = (*eos)[0].get<int32_t>();
  } else {
    f.Read(ConfigField{"eos_token_id"}, c.eos_token_id);
  }

  RETURN_IF_ERROR(ReadRope(f, root, source, c));
  RETURN_IF_ERROR(ReadRouting(f, root, source, c));
  RETURN_IF_ERROR(ReadWeightFormats(f, root, source, c));
  RETURN_IF_ERROR(ReadSchedule(f, root, source, c));
  RETURN_IF_ERROR(ReadV41(f, root, c));
  return c;
}
}  // namespace

Result<DeepSeekV4Config> DeepSeekV4Config::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

namespace {

// The full GGUF key of a field-table spelling (ConfigField::gguf).
std::string GgufKey(const char* key, const std::string& prefix = "deepseek4.") {
  const std::string k(key);
  return k.rfind("tokenizer.", 0) == 0 ? k : prefix + k;
}

// Keys llama.cpp's converter does not always write: the config default stands
// (vocab_size then comes from the tokenizer or the embedding).
bool GgufKeyOptional(std::string_view key) {
  return key == "vocab_size" || key == "nextn_predict_layers" || key == "attention.head_count_kv" ||
         key == "context_length" || key == "tokenizer.ggml.bos_token_id";
}

Status ReadGgufValue(const GgufFile& f, const std::string& key, int64_t& out) {
  ASSIGN_OR_RETURN(out, f.GetI64(key));
  return Status::Ok();
}
Status ReadGgufValue(const GgufFile& f, const std::string& key, int32_t& out) {
  ASSIGN_OR_RETURN(out, f.GetI32(key));
  return Status::Ok();
}
Status ReadGgufValue(const GgufFile& f, const std::string& key, double& out) {
  ASSIGN_OR_RETURN(float v, f.GetF32(key));
  out = v;
  return Status::Ok();
}
Status ReadGgufValue(const GgufFile& f, const std::string& key, bool& out) {
  ASSIGN_OR_RETURN(out, f.GetBool(key));
  return Status::Ok();
}
Status ReadGgufValue(const GgufFile& f, const std::string& key, std::string& out) {
  ASSIGN_OR_RETURN(out, f.GetString(key));
  return Status::Ok();
}

// `arch_name`: deepseek4, or dflash (a DSpark draft's file: the same keys).
Result<DeepSeekV4Config> ParseGguf(const GgufFile& f, const std::string& arch_name = "deepseek4") {
  const std::string prefix = arch_name + ".";
  const std::string& path = f.path();
  ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch == "dflash" && arch_name == "deepseek4") {
    return InvalidArgument(path + ": a DSpark draft module (GGUF architecture dflash)",
                           "pass the main model with --model and this file with --model-draft");
  }
  if (arch != arch_name) {
    return InvalidArgument(path + ": GGUF architecture '" + arch + "' is not " + arch_name,
                           "DeepSeek-V4 GGUF files are written by llama.cpp's "
                           "convert_hf_to_gguf.py with architecture deepseek4");
  }
  DeepSeekV4Config c;
  // The converter writes the main model only (its MTP layers go to a separate
  // file), with no quantisation config: the dense FP8 weights became Q8_0.
  c.num_nextn_predict_layers = 0;
  c.quantization_config.present = false;
  Status status = Status::Ok();
  VisitConfigFields(c, [&](const ConfigField& field, auto& value) {
    if (!status.ok() || field.gguf == nullptr) return;
    const std::string key = GgufKey(field.gguf, prefix);
    if (!f.HasMeta(key)) {
      if (!GgufKeyOptional(field.gguf)) {
        status =
            NotFound(path + ": metadata key '" + key + "' (config '" + field.key + "') is missing",
                     "is this a deepseek4 GGUF written by llama.cpp's converter?");
      }
      return;
    }
    status = ReadGgufValue(f, key, value);
  });
  RETURN_IF_ERROR(status);
  if (!f.HasMeta(prefix + "vocab_size")) {
    if (f.HasMeta("tokenizer.ggml.tokens")) {
      c.vocab_size = static_cast<int64_t>(f.GetMeta("tokenizer.ggml.tokens")->count);
    } else if (const TensorInfo* embd = f.Find("token_embd.weight");
               embd != nullptr && embd->shape.size() == 2) {
      c.vocab_size = embd->shape[0];
    }
  }
  if (f.HasMeta("tokenizer.ggml.eos_token_id")) {
    ASSIGN_OR_RETURN(c.eos_token_id, f.GetI32("tokenizer.ggml.eos_token_id"));
  }

  // block_count counts the NextN blocks of a file that holds them (an MTP
  // file, nextn_predict_layers > 0).
  if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers >= c.num_hidden_layers) {
    return InvalidArgument(
        path + ": 'deepseek4.nextn_predict_layers' = " + Str(c.num_nextn_predict_layers) + " of " +
            Str(c.num_hidden_layers) + " blocks",
        "fewer NextN blocks than blocks");
  }
  c.num_hidden_layers -= c.num_nextn_predict_layers;

  // compress_ratios: the config's list, MTP entries included; the file holds
  // the main layers.
  ASSIGN_OR_RETURN(std::vector<int32_t> ratios,
                   f.GetI32Array(prefix + "attention.compress_ratios"));
  if (static_cast<int64_t>(ratios.size()) < c.num_hidden_layers + c.num_nextn_predict_layers) {
    return InvalidArgument(path + ": 'deepseek4.attention.compress_ratios' has " +
                               Str(static_cast<int64_t>(ratios.size())) + " entries for " +
                               Str(c.num_hidden_layers) + " layers (deepseek4.block_count)",
                           "one entry per layer");
  }
  c.compress_ratios.assign(ratios.begin(),
                           ratios.begin() + c.num_hidden_layers + c.num_nextn_predict_layers);

  // The router's gating function (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE).
  ASSIGN_OR_RETURN(uint32_t gating, f.GetU32(prefix + "expert_gating_func"));
  switch (gating) {
    case 1:
      c.scoring_func = ScoringFunc::kSoftmax;
      break;
    case 2:
      c.scoring_func = ScoringFunc::kSigmoid;
      break;
    case 4:
      c.scoring_func = ScoringFunc::kSqrtSoftplus;
      break;
    default:
      return InvalidArgument(
          path + ": 'deepseek4.expert_gating_func' = " + Str(int64_t{gating}) + " is not supported",
          "supported: 1 (softmax), 2 (sigmoid), 4 (sqrtsoftplus)");
  }

  // The SwiGLU clamp, one value per layer (shared experts may have their own).
  ASSIGN_OR_RETURN(std::vector<float> clamp, f.GetF32Array(prefix + "swiglu_clamp_exp"));
  std::vector<float> clamp_shared = clamp;
  if (f.HasMeta(prefix + "swiglu_clamp_shexp")) {
    ASSIGN_OR_RETURN(clamp_shared, f.GetF32Array(prefix + "swiglu_clamp_shexp"));
  }
  if (clamp.empty()) {
    return InvalidArgument(path + ": 'deepseek4.swiglu_clamp_exp' is empty",
                           "one SwiGLU limit per layer");
  }
  for (const std::vector<float>* list : {&clamp, &clamp_shared}) {
    for (float v : *list) {
      if (v != clamp[0]) {
        return Unimplemented(path +
                                 ": the SwiGLU clamp differs between layers or between routed "
                                 "and shared experts (deepseek4.swiglu_clamp_exp/_shexp)",
                             "dsv4 applies one swiglu_limit to every expert");
      }
    }
  }
  c.swiglu_limit = clamp[0];

  // YaRN (spec §4.2), on the compressed layers.
  c.rope_scaling.enabled = false;
  if (f.HasMeta(prefix + "rope.scaling.type")) {
    ASSIGN_OR_RETURN(std::string type, f.GetString(prefix + "rope.scaling.type"));
    if (type == "yarn") {
      c.rope_scaling.enabled = true;
      ASSIGN_OR_RETURN(float factor, f.GetF32(prefix + "rope.scaling.factor"));
      c.rope_scaling.factor = factor;
      ASSIGN_OR_RETURN(c.rope_scaling.original_max_position,
                       f.GetI64(prefix + "rope.scaling.original_context_length"));
      if (f.HasMeta(prefix + "rope.scaling.yarn_beta_fast")) {
        ASSIGN_OR_RETURN(float v, f.GetF32(prefix + "rope.scaling.yarn_beta_fast"));
        c.rope_scaling.beta_fast = v;
      }
      if (f.HasMeta(prefix + "rope.scaling.yarn_beta_slow")) {
        ASSIGN_OR_RETURN(float v, f.GetF32(prefix + "rope.scaling.yarn_beta_slow"));
        c.rope_scaling.beta_slow = v;
      }
    } else if (type != "none") {
      return Field(prefix + "rope.scaling.type", "\"" + type + "\"", "\"yarn\" or none");
    }
  }

  // Routed experts in MXFP4 come from the FP4 release, whose training
  // simulated the quantisations of spec §9.2: the forward reproduces them,
  // as for that release's safetensors.
  for (const GgufTensorInfo& t : f.ggml_tensors()) {
    if (t.ggml_type == static_cast<uint32_t>(GgmlType::kMXFP4)) {
      c.expert_dtype = ExpertDType::kFp4;
      break;
    }
  }
  c.qat_simulation = c.expert_dtype == ExpertDType::kFp4;
  return c;
}

}  // namespace

Result<DeepSeekV4Config> DeepSeekV4Config::FromGguf(const GgufFile& file) {
  Result<DeepSeekV4Config> c = ParseGguf(file);
  if (c.ok() && c->num_nextn_predict_layers > 0 && file.Find("blk.0.attn_norm.weight") == nullptr) {
    return InvalidArgument(file.path() + ": a NextN MTP file (its " +
                               Str(c->num_nextn_predict_layers) +
                               " draft block(s) without the model's layers)",
                           "pass the main model with --model and this file with --model-draft");
  }
  // A file holding the main layers and NextN blocks together: the blocks are
  // not read (llama.cpp's converter writes them to a file of their own).
  if (c.ok()) {
    c->num_nextn_predict_layers = 0;
    c->compress_ratios.resize(c->num_hidden_layers);
  }
  if (!c.ok()) {
    const Status& s = c.status();
    if (s.message().rfind(file.path(), 0) != 0) return s.WithContext(file.path());
    return s;
  }
  RETURN_IF_ERROR(c->Validate().WithContext(file.path()));
  return c;
}

Result<DeepSeekV4Config> DeepSeekV4Config::FromGguf(const GgufFile& file,
                                                    const GgufFile& draft_file) {
  auto in_context = [](const Status& s, const std::string& path) {
    return s.message().rfind(path, 0) == 0 ? s : s.WithContext(path);
  };
  Result<DeepSeekV4Config> c = ParseGguf(file);
  if (!c.ok()) return in_context(c.status(), file.path());
  const std::string& path = draft_file.path();
  ASSIGN_OR_RETURN(std::string arch, draft_file.GetString("general.architecture"));
  const bool dspark = arch == "dflash";
  Result<DeepSeekV4Config> d = ParseGguf(draft_file, dspark ? "dflash" : "deepseek4");
  if (!d.ok()) return in_context(d.status(), path);
  const std::string same_checkpoint =
      "the draft file must be converted from the model's checkpoint (llama.cpp's "
      "convert_hf_to_gguf.py: --mtp for a NextN block, the DSpark model with "
      "--target-model-dir for DSpark)";
  int64_t n_draft = 0;
  if (dspark) {
    // A DSpark module (llama.cpp architecture dflash): its stages are the
    // blocks; block_size, target_layers (1-based) and the mask token are
    // dspark_block_size, dspark_target_layer_ids and dspark_noise_token_id.
    n_draft = d->num_hidden_layers;
    ASSIGN_OR_RETURN(c->dspark_block_size, draft_file.GetI64("dflash.block_size"));
    ASSIGN_OR_RETURN(std::vector<int32_t> targets, draft_file.GetI32Array("dflash.target_layers"));
    c->dspark_target_layer_ids.clear();
    for (int32_t t : targets) c->dspark_target_layer_ids.push_back(int64_t{t} - 1);
    ASSIGN_OR_RETURN(c->dspark_noise_token_id, draft_file.GetI32("tokenizer.ggml.mask_token_id"));
    const TensorInfo* w1 = draft_file.Find("markov_w1.weight");
    if (w1 == nullptr || w1->shape.size() != 2) {
      return NotFound(path + ": tensor 'markov_w1.weight' (the DSpark Markov head) is missing",
                      same_checkpoint);
    }
    c->dspark_markov_rank = w1->shape[1];
    // Without a vocabulary (a file written without the target's tokenizer)
    // the Markov head's rows are the vocabulary.
    if (!draft_file.HasMeta("dflash.vocab_size") && !draft_file.HasMeta("tokenizer.ggml.tokens")) {
      d->vocab_size = w1->shape[0];
    }
  } else {
    n_draft = d->num_nextn_predict_layers;
    if (n_draft < 1) {
      return InvalidArgument(path +
                                 ": the draft model has no NextN block "
                                 "(deepseek4.nextn_predict_layers is 0 or absent)",
                             "pass the NextN MTP file llama.cpp's converter writes with --mtp "
                             "(mtp-*.gguf), or a DSpark GGUF (architecture dflash)");
    }
    if (d->num_hidden_layers != c->num_hidden_layers) {
      return InvalidArgument(path + ": " + Str(n_draft) + " NextN block(s) after " +
                                 Str(d->num_hidden_layers) +
                                 " main layers (deepseek4.nextn_predict_layers, block_count); "
                                 "the model (" +
                                 file.path() + ") has " + Str(c->num_hidden_layers) + " layers",
                             same_checkpoint);
    }
  }
  // Every other GGUF field must be the model's.
  std::map<std::string, std::string> draft_values;
  auto text = [](const auto& value) {
    using T = std::decay_t<decltype(value)>;
    std::ostringstream os;
    if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) os << value;
    return os.str();
  };
  VisitConfigFields(*d, [&](const ConfigField& field, const auto& value) {
    if (field.gguf != nullptr) draft_values[field.key] = text(value);
  });
  Status mismatch = Status::Ok();
  VisitConfigFields(*c, [&](const ConfigField& field, const auto& value) {
    if (!mismatch.ok() || field.gguf == nullptr) return;
    const std::string key = field.key;
    // The draft's own block counts; DSpark stages are all score-routed.
    if (key == "num_hidden_layers" || key == "num_nextn_predict_layers" ||
        (dspark && key == "num_hash_layers")) {
      return;
    }
    if (const std::string mine = text(value); draft_values[key] != mine) {
      mismatch =
          InvalidArgument(path + ": '" + GgufKey(field.gguf, arch + ".") + "' is " +
                              draft_values[key] + ", the model's (" + file.path() + ") is " + mine,
                          same_checkpoint);
    }
  });
  RETURN_IF_ERROR(mismatch);
  if (!dspark) c->num_nextn_predict_layers = n_draft;
  c->compress_ratios.resize(c->num_hidden_layers);
  c->compress_ratios.insert(c->compress_ratios.end(), d->compress_ratios.end() - n_draft,
                            d->compress_ratios.end());
  RETURN_IF_ERROR(c->Validate().WithContext(file.path()));
  return c;
}

namespace {

// The last entry of an ascending layer list that is ≤ layer, or −1.
int64_t LatestAtOrBefore(const std::vector<int64_t>& layers, int64_t layer) {
  int64_t found = -1;
  for (int64_t l : layers) {
    if (l <= layer) found = l;
  }
  return found;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A layer list: ascending, distinct, main layers only.
Status CheckLayerList(const char* key, const std::vector<int64_t>& v, int64_t n_layers) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= n_layers || (i > 0 && v[i] <= v[i - 1])) {
      return Field(std::string(key) + "[" + Str(static_cast<int64_t>(i)) + "]", Str(v[i]),
                   "ascending, distinct main-layer indices in [0, " + Str(n_layers) + ")");
    }
  }
  return Status::Ok();
}

// The CSA2 roles and Engram of a DeepSeek-V4.1 config, as the reference's
// shared runtime needs them: every compressed layer reads the cache of the
// latest kv source before it (same ratio), every index source scores the index
// keys of the latest kv source before it (which must own keys: be an index
// source too), every other compressed layer reuses the latest index source's
// picks (same ratio), and the index sources after the candidate source choose
// inside its blocks (same ratio).
Status ValidateV41(const DeepSeekV4Config& c) {
  const int64_t L = c.num_hidden_layers;
  if (c.num_hash_layers != 0) {
    return Field("num_hash_layers", Str(c.num_hash_layers), "0 (DeepSeek-V4.1 has no hash layers)");
  }
  RETURN_IF_ERROR(CheckLayerList("kv_source_layers", c.kv_source_layers, L));
  RETURN_IF_ERROR(CheckLayerList("index_source_layers", c.index_source_layers, L));
  for (int64_t l = 0; l < L; ++l) {
    const int64_t r = c.compress_ratio(l);
    const bool kv_source = Contains(c.kv_source_layers, l);
    const bool index_source = Contains(c.index_source_layers, l);
    const std::string at = "layer " + Str(l) + " (compress ratio " + Str(r) + ")";
    if (r == 0) {
      if (kv_source || index_source) {
        return Field(kv_source ? "kv_source_layers" : "index_source_layers", Str(l),
                     "layers with a compress ratio > 0; " + at + " is window-only");
      }
      continue;
    }
    const int64_t src = LatestAtOrBefore(c.kv_source_layers, l);
    if (src < 0 || c.compress_ratio(src) != r) {
      return Field("kv_source_layers", src < 0 ? "none at or before layer " + Str(l) : Str(src),
                   "a kv source at or before " + at +
                       " with the same ratio, whose compressed "
                       "cache it reads");
    }
    if (index_source && !Contains(c.index_source_layers, src)) {
      return Field("index_source_layers", Str(src),
                   "to include kv source " + Str(src) + ": index source " + Str(l) +
                       " scores its index keys, which only an index source makes");
    }
    const int64_t picks = LatestAtOrBefore(c.index_source_layers, l);
    if (picks < 0 || c.compress_ratio(picks) != r) {
      return Field("index_source_layers",
                   picks < 0 ? "none at or before layer " + Str(l) : Str(picks),
                   "an index source at or before " + at +
                       " with the same ratio, whose picks it "
                       "attends to");
    }
  }
  if (c.candidate_source_layer >= 0) {
    const int64_t cs = c.candidate_source_layer;
    if (cs >= L || !Contains(c.index_source_layers, cs)) {
      return Field("candidate_source_layer", Str(cs), "an index source layer, or −1 (none)");
    }
    if (c.candidate_topk_blocks < 1 || c.candidate_block_size < 1) {
      return Field(
          c.candidate_topk_blocks < 1 ? "candidate_topk_blocks" : "candidate_block_size",
          Str(c.candidate_topk_blocks < 1 ? c.candidate_topk_blocks : c.candidate_block_size),
          "a positive integer when candidate_source_layer is set");
    }
    for (int64_t l : c.index_source_layers) {
      if (l > cs && c.compress_ratio(l) != c.compress_ratio(cs)) {
        return Field("index_source_layers", Str(l),
                     "index sources after candidate source " + Str(cs) + " with its ratio " +
                         Str(c.compress_ratio(cs)) + " (they choose inside its blocks)");
      }
    }
  }
  RETURN_IF_ERROR(CheckLayerList("engram_layer_ids", c.engram_layer_ids, L));
  if (!c.engram_layer_ids.empty()) {
    if (c.engram_num_embeddings.size() != c.engram_layer_ids.size()) {
      return Field("engram_num_embeddings",
                   "a list of " + Str(static_cast<int64_t>(c.engram_num_embeddings.size())),
                   "one table size per engram_layer_ids entry (" +
                       Str(static_cast<int64_t>(c.engram_layer_ids.size())) + ")");
    }
    if (c.engram_max_ngram_size < 2 || c.engram_n_heads < 1 || c.engram_vocab_size < 2 ||
        c.engram_compressed_vocab_size < 1) {
      return Field("engram_max_ngram_size", Str(c.engram_max_ngram_size),
                   "Engram needs engram_max_ngram_size ≥ 2, engram_n_heads ≥ 1, "
                   "engram_vocab_size ≥ 2 and engram_compressed_vocab_size ≥ 1");
    }
    if (c.engram_head_dim < 32 || c.engram_head_dim % 32 != 0) {
      return Field("engram_head_dim", Str(c.engram_head_dim),
                   "a multiple of 32 (the tables' FP8 rows carry one scale per 32 values)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status DeepSeekV4Config::Validate() const {
  if (model_type != "deepseek_v4" && model_type != "deepseek_v41") {
    return Field("model_type", "\"" + model_type + "\"",
                 "\"deepseek_v4\" or \"deepseek_v41\" (DeepSeek-V4.1)");
  }
  // The integer ranges of the field table.
  Status range = Status::Ok();
  VisitConfigFields(*this, [&](const ConfigField& field, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, int64_t>) {
      if (!range.ok()) return;
      if (value < field.min) {
        range = Field(field.key, Str(value),
                      field.min == 1 ? "a positive integer" : "at least " + Str(field.min));
      } else if (value > field.max) {
        range = Field(field.key, Str(value),
                      field.range_hint != nullptr ? field.range_hint : "at most " + Str(field.max));
      }
    }
  });
  RETURN_IF_ERROR(range);
  if (qk_rope_head_dim > head_dim || qk_rope_head_dim % 2 != 0) {
    return Field("qk_rope_head_dim", Str(qk_rope_head_dim),
                 "an even number ≤ head_dim = " + Str(head_dim));
  }
  if (num_attention_heads % o_groups != 0) {
    return Field("o_groups", Str(o_groups),
                 "a divisor of num_attention_heads = " + Str(num_attention_heads));
  }
  if (num_experts_per_tok > n_routed_experts) {
    return Field("num_experts_per_tok", Str(num_experts_per_tok),
                 "at most n_routed_experts = " + Str(n_routed_experts));
  }
  if (num_hash_layers < 0 || num_hash_layers > num_hidden_layers) {
    return Field("num_hash_layers", Str(num_hash_layers),
                 "0..num_hidden_layers = " + Str(num_hidden_layers));
  }
  if (topk_method != "noaux_tc" && topk_method != "greedy") {
    return Field("topk_method", "\"" + topk_method + "\"",
                 "\"noaux_tc\" (bias for selection only, no groups)");
  }
  if (!norm_topk_prob && scoring_func != ScoringFunc::kSoftmax) {
    return Field("norm_topk_prob", "false",
                 "true with " + std::string(ScoringFuncName(scoring_func)) +
                     " scores (the reference always normalises them, spec §5.1)");
  }
  if (!(routed_scaling_factor > 0.0) || !std::isfinite(routed_scaling_factor)) {
    return Field("routed_scaling_factor", Str(routed_scaling_factor), "a positive number");
  }
  if (!(swiglu_limit >= 0.0) || !std::isfinite(swiglu_limit)) {
    return Field("swiglu_limit", Str(swiglu_limit), "a non-negative number (0 = no clamp)");
  }
  if (!(hc_eps >= 0.0) || !(rms_norm_eps > 0.0) || !std::isfinite(rms_norm_eps)) {
    return Field(hc_eps >= 0.0 ? "rms_norm_eps" : "hc_eps",
                 Str(hc_eps >= 0.0 ? rms_norm_eps : hc_eps), "a small positive number");
  }
  if (!(rope_theta > 1.0) || !(compress_rope_theta > 1.0)) {
    return Field(rope_theta > 1.0 ? "compress_rope_theta" : "rope_theta",
                 Str(rope_theta > 1.0 ? compress_rope_theta : rope_theta), "a base > 1");
  }
  if (rope_scaling.enabled &&
      (!(rope_scaling.factor >= 1.0) || rope_scaling.original_max_position <= 0 ||
       !(rope_scaling.beta_fast > 0.0) || !(rope_scaling.beta_slow > 0.0))) {
    return Field("rope_scaling", "factor " + Str(rope_scaling.factor),
                 "yarn with factor ≥ 1, original_max_position_embeddings > 0, betas > 0");
  }
  if (bos_token_id < 0 || bos_token_id >= vocab_size) {
    return Field("bos_token_id", Str(int64_t{bos_token_id}), "an id in [0, vocab_size)");
  }
  if (eos_token_id < 0 || eos_token_id >= vocab_size) {
    return Field("eos_token_id", Str(int64_t{eos_token_id}), "an id in [0, vocab_size)");
  }
  if (tie_word_embeddings) {
    return Field("tie_word_embeddings", "true",
                 "false (DeepSeek-V4 has a separate head.weight, spec §6.2)");
  }
  const QuantizationConfig& q = quantization_config;
  if (q.present) {
    if (q.quant_method != "fp8") {
      return Field("quantization_config.quant_method", "\"" + q.quant_method + "\"", "\"fp8\"");
    }
    if (q.fmt != "e4m3") {
      return Field("quantization_config.fmt", "\"" + q.fmt + "\"", "\"e4m3\"");
    }
    if (!q.scale_fmt.empty() && q.scale_fmt != "ue8m0") {
      return Field("quantization_config.scale_fmt", "\"" + q.scale_fmt + "\"",
                   "\"ue8m0\" or absent (f32 scales)");
    }
    const std::vector<int64_t> block = {v41() ? 32 : 128, v41() ? 32 : 128};
    if (q.weight_block_size != block) {
      std::string shown;
      for (int64_t b : q.weight_block_size) shown += (shown.empty() ? "" : ", ") + Str(b);
      return Field("quantization_config.weight_block_size", "[" + shown + "]",
                   v41() ? "[32, 32] (DeepSeek-V4.1)" : "[128, 128]");
    }
    if (q.activation_scheme != "dynamic") {
      return Field("quantization_config.activation_scheme", "\"" + q.activation_scheme + "\"",
                   "\"dynamic\"");
    }
  }
  const int64_t n_ratios = static_cast<int64_t>(compress_ratios.size());
  if (dspark() && n_ratios <= num_hidden_layers) {
    return Field("compress_ratios", "a list of " + Str(n_ratios) + " entries",
                 "with dspark_block_size > 0, one entry per main layer (" + Str(num_hidden_layers) +
                     ") and then one 0 per DSpark draft stage");
  }
  if (dspark() && n_draft_layers() > 16) {
    return Field(
        "compress_ratios", "a list of " + Str(n_ratios) + " entries",
        "at most 16 DSpark draft stages after the " + Str(num_hidden_layers) + " main layers");
  }
  if (!dspark() && n_ratios != num_hidden_layers && n_ratios != n_layers_total()) {
    return Field("compress_ratios", "a list of " + Str(n_ratios) + " entries",
                 "one entry per layer: " + Str(num_hidden_layers) + " (+ " +
                     Str(num_nextn_predict_layers) + " MTP) entries");
  }
  for (int64_t l = 0; l < n_ratios; ++l) {
    const int64_t r = compress_ratios[l];
    if (r < 0 || r > 65536) {
      return Field("compress_ratios[" + Str(l) + "]", Str(r),
                   "0 (window), 4 (CSA) or another ratio in 1..65536 (HCA)");
    }
  }
  for (int64_t l = num_hidden_layers; l < n_ratios; ++l) {
    if (compress_ratios[l] != 0) {
      return Field("compress_ratios[" + Str(l) + "]", Str(compress_ratios[l]),
                   "0 (draft layers are window-only)");
    }
  }
  if (dspark()) {
    if (dspark_target_layer_ids.empty()) {
      return Field("dspark_target_layer_ids", "[]",
                   "the main layers (in [0, " + Str(num_hidden_layers) +
                       ")) whose outputs feed the DSpark draft");
    }
    for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) {
      const int64_t id = dspark_target_layer_ids[i];
      if (id < 0 || id >= num_hidden_layers || (i > 0 && id <= dspark_target_layer_ids[i - 1])) {
        return Field("dspark_target_layer_ids[" + Str(static_cast<int64_t>(i)) + "]", Str(id),
                     "distinct main-layer indices in [0, " + Str(num_hidden_layers) + ")");
      }
    }
    if (dspark_noise_token_id < 0 || dspark_noise_token_id >= vocab_size) {
      return Field("dspark_noise_token_id", Str(int64_t{dspark_noise_token_id}),
                   "an id in [0, vocab_size)");
    }
  }
  if (v41()) RETURN_IF_ERROR(ValidateV41(*this));
  return Status::Ok();
}

Status DeepSeekV4Config::CheckForwardSupported() const {
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    if (compress_ratio(l) != 4) continue;
    // The indexer rotates its keys and queries with a Hadamard transform and
    // RoPE on their last qk_rope_head_dim dims (spec §4.5).
    if ((index_head_dim & (index_head_dim - 1)) != 0 || index_head_dim < qk_rope_head_dim) {
      return Unimplemented(
          "config field 'index_head_dim' = " + Str(index_head_dim) + ": layer " + Str(l) +
              " is compressed sparse attention (CSA), whose indexer needs a power-of-two "
              "index_head_dim of at least qk_rope_head_dim = " +
              Str(qk_rope_head_dim),
          "V4 uses index_head_dim 128");
    }
  }
  return Status::Ok();
}

}  // namespace dsv4::deepseek_v4
