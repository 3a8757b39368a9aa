// DeepSeekV4Config: the hyper-parameters of a DeepSeek-V4 checkpoint (V4-Flash,
// V4-Pro, their -Base siblings, tiny test models), read from an HF-style
// `config.json` (model_type "deepseek_v4"). Plain data: typed fields with the
// V4-Flash defaults, derived sizes as small methods, one Validate(). The parser
// also accepts the official inference `ModelArgs` spellings (dim, n_layers,
// window_size, ...) and the HF transformers v5 spellings (layer_types,
// mlp_layer_types, rope_parameters, partial_rotary_factor); it does not decide
// anything about the forward pass — plan.h does, from this config.
//
// Source of every field: specs/deepseek-v4.md §1.1 (values), §1.2 (schedule),
// §4.2 (RoPE / YaRN), §7.4 (weight formats).
#ifndef DSV4_MODEL_DEEPSEEK_V4_CONFIG_H_
#define DSV4_MODEL_DEEPSEEK_V4_CONFIG_H_

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4 {
class GgufFile;
}  // namespace dsv4

namespace dsv4::deepseek_v4 {

// Router activation (`scoring_func`); V4 ships sqrtsoftplus.
enum class ScoringFunc { kSqrtSoftplus, kSigmoid, kSoftmax };
std::string_view ScoringFuncName(ScoringFunc f);

// How the routed experts are stored (`expert_dtype`): FP4 in the instruct
// releases, FP8 (like the dense weights) in -Base, bf16 when unquantized.
enum class ExpertDType { kDefault, kFp8, kFp4 };
std::string_view ExpertDTypeName(ExpertDType d);

// YaRN frequency interpolation, applied only to layers with compress ratio > 0
// (spec §4.2). No amplitude (mscale) factor: attention_factor must be 1.
struct YarnScaling {
  bool enabled = true;                    // rope_scaling.type == "yarn"
  double factor = 16.0;                   // rope_scaling.factor (inference: rope_factor)
  int64_t original_max_position = 65536;  // original_max_position_embeddings (original_seq_len)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// `quantization_config` of the FP8 releases: block-scaled e4m3 weights.
struct QuantizationConfig {
  bool present = false;  // absent: unquantized (bf16) dense weights
  std::string quant_method = "fp8";
  std::string fmt = "e4m3";
  std::string scale_fmt = "ue8m0";  // power-of-two (e8m0) scales; "" = f32 scales
  std::vector<int64_t> weight_block_size = {128, 128};
  std::string activation_scheme = "dynamic";
};

// The most residual streams (hc_mult) a config may ask for: Validate's cap,
// and the size of mHC's per-token row tables (hyper_connection.cc).
inline constexpr int64_t kMaxHcMult = 64;

struct DeepSeekV4Config {
  std::string model_type = "deepseek_v4";

  // ---- sizes ----
  int64_t vocab_size = 129280;       // V
  int64_t hidden_size = 4096;        // D  (inference: dim)
  int64_t num_hidden_layers = 43;    // L  main stack, MTP not counted (n_layers)
  int64_t num_attention_heads = 64;  // H  (n_heads)
  int64_t num_key_value_heads = 1;   // one shared K=V head (MQA); only 1 is supported
  int64_t head_dim = 512;            // A  per-head width of q, kv and o
  int64_t qk_rope_head_dim = 64;     // R  trailing dims of a head that get RoPE (rope_head_dim)
  int64_t q_lora_rank = 1024;        // Q  low-rank query width
  int64_t o_groups = 8;              // G  groups of the output projection
  int64_t o_lora_rank = 1024;        // O  per-group rank of the output projection
  int64_t sliding_window = 128;      // W  window incl. the current token (window_size)
  int64_t max_position_embeddings = 1048576;

  // ---- attention schedule ----
  // One entry per layer, then one per MTP layer: 0 = sliding window only,
  // 4 = CSA (overlapping compressor + indexer), other > 0 = HCA (spec §1.2).
  std::vector<int64_t> compress_ratios;
  double rope_theta = 10000.0;            // RoPE base of ratio-0 layers (no YaRN)
  double compress_rope_theta = 160000.0;  // RoPE base of ratio > 0 layers (with YaRN)
  YarnScaling rope_scaling;

  // ---- lightning indexer (CSA layers) ----
  int64_t index_n_heads = 64;
  int64_t index_head_dim = 128;
  int64_t index_topk = 512;

  // ---- MoE ----
  int64_t n_routed_experts = 256;        // E
  int64_t num_experts_per_tok = 6;       // k  (n_activated_experts)
  int64_t n_shared_experts = 1;          // the reference asserts 1
  int64_t moe_intermediate_size = 2048;  // F  routed and shared expert width (moe_inter_dim)
  int64_t num_hash_layers = 3;           // layers [0, n) route by tid2eid[token] (n_hash_layers)
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;  // (score_func)
  std::string topk_method = "noaux_tc";                   // bias used for selection only, no groups
  bool norm_topk_prob = true;                             // top-k weights normalised to sum 1
  double routed_scaling_factor = 1.5;                     // (route_scale)
  double swiglu_limit = 10.0;  // gate ≤ limit, up ∈ [−limit, limit]; 0 = off

  // ---- manifold-constrained hyper-connections ----
  int64_t hc_mult = 4;  // C  residual streams
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  double rms_norm_eps = 1e-6;            // (norm_eps)
  int64_t num_nextn_predict_layers = 1;  // NextN MTP layers (n_mtp_layers)
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 1;
  bool tie_word_embeddings = false;

  // ---- DSpark draft module (spec §13; the 0731 releases); block size 0 = none ----
  // Its S stages are the compress_ratios entries past the L main layers (all
  // 0: window-only); num_nextn_predict_layers does not count them.
  int64_t dspark_block_size = 0;                 // B: tokens drafted per step
  int32_t dspark_noise_token_id = 0;             // fills block rows 1 .. B−1
  std::vector<int64_t> dspark_target_layer_ids;  // main layers feeding the draft, ascending
  int64_t dspark_markov_rank = 256;              // r: the Markov head's rank

  // ---- DeepSeek-V4.1 (model_type "deepseek_v41"; spec: the V4.1 reference inference/model.py)
  // ---- CSA2, cross-layer KV sharing: compress_ratios take 0, 1 or 2; only the kv_source_layers
  // own a compressor and a compressed cache, every later layer with a ratio reads the latest
  // source's cache. Only the index_source_layers run the indexer (its keys come from the kv
  // source's latent); the other compressed layers reuse the latest index source's picks. The
  // candidate source picks candidate_topk_blocks blocks of candidate_block_size entries; index
  // sources after it choose inside them.
  std::vector<int64_t> kv_source_layers;
  std::vector<int64_t> index_source_layers;
  int64_t candidate_source_layer = -1;  // −1: no candidate pre-filtering
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  // Engram: n-gram hash rows added into the residual stream before these layers.
  std::vector<int64_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer
  int64_t engram_max_ngram_size = 1;           // n-grams of 2 .. this size
  int64_t engram_vocab_size = 0;               // where each (n, head)'s prime search starts
  int64_t engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int32_t engram_pad_id = 2;                 // fills n-gram slots before the sequence start
  int64_t engram_compressed_vocab_size = 0;  // the tokenizer-normalised id space
  // The DSpark draft's own MoE (0: the main model's expert counts).
  int64_t dspark_n_routed_experts = 0;
  int64_t dspark_n_activated_experts = 0;

  // ---- weight formats ----
  ExpertDType expert_dtype = ExpertDType::kDefault;
  QuantizationConfig quantization_config;
  std::string torch_dtype = "bfloat16";
  // Whether the model was trained with the quantisation simulations of spec
  // §9.2 (FP8 activations before FP8/FP4 linears, FP8 kv nope dims, FP4
  // indexer q/k), so the forward should reproduce them. config.json key
  // "qat_simulation" (bool, this engine's); absent: true exactly when the
  // config carries the FP8 `quantization_config` of the official releases.
  // A bf16 re-export of an official checkpoint must say true explicitly.
  bool qat_simulation = false;

  // ---- derived ----
  bool v41() const { return model_type == "deepseek_v41"; }
  bool dspark() const { return dspark_block_size > 0; }
  // The draft layers after the main stack: the DSpark stages, else the NextN MTP layers.
  int64_t n_draft_layers() const {
    return dspark() ? std::max<int64_t>(
                          0, static_cast<int64_t>(compress_ratios.size()) - num_hidden_layers)
                    : num_nextn_predict_layers;
  }
  int64_t n_layers_total() const { return num_hidden_layers + n_draft_layers(); }
  // The routed experts and top-k of a draft layer's MoE: V4.1's DSpark stages
  // have their own (0: the main model's).
  int64_t draft_routed_experts() const {
    return v41() && dspark_n_routed_experts > 0 ? dspark_n_routed_experts : n_routed_experts;
  }
  int64_t draft_experts_per_tok() const {
    return v41() && dspark_n_activated_experts > 0 ? dspark_n_activated_experts
                                                   : num_experts_per_tok;
  }
  int64_t head_dim_nope() const { return head_dim - qk_rope_head_dim; }
  int64_t hc_dim() const { return hc_mult * hidden_size; }        // C·D
  int64_t hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }  // M = (2 + C)·C
  int64_t heads_per_group() const { return num_attention_heads / o_groups; }
  // Ratio of layer `layer` in [0, n_layers_total()); MTP layers past the list are 0.
  int64_t compress_ratio(int64_t layer) const;
  bool dense_fp8() const { return quantization_config.present; }

  // Checks every field; errors name the field, the value and what is supported.
  Status Validate() const;
  // What the forward pass needs beyond Validate() (e.g. a power-of-two indexer
  // width for the Hadamard rotation of CSA layers), naming the layer and field.
  // Inspection does not need it.
  Status CheckForwardSupported() const;

  // Parses config.json text; `source` names the file in errors. Runs Validate().
  static Result<DeepSeekV4Config> FromJson(std::string_view text, const std::string& source);
  // Reads and parses a config.json file.
  static Result<DeepSeekV4Config> FromFile(const std::string& path);
  // The hyper-parameters of a llama.cpp `deepseek4` GGUF file (spec §14.4),
  // through the field table's GGUF keys plus the structured ones
  // (compress_ratios, YaRN, the gating function, the SwiGLU clamp). Errors
  // name the file and the key. Runs Validate().
  static Result<DeepSeekV4Config> FromGguf(const GgufFile& file);
  // The same, with the draft module of a separate file: a NextN MTP block
  // (`mtp-*.gguf`, llama.cpp's converter with --mtp: num_nextn_predict_layers)
  // or a DSpark module (architecture dflash: the dspark_* fields from its
  // block_size, target_layers and mask token). The draft blocks' compress
  // ratios come from it; its shapes must be the main file's (an error names
  // the first key that differs).
  static Result<DeepSeekV4Config> FromGguf(const GgufFile& file, const GgufFile& draft_file);
};

// ---- the field table ----
// Every scalar config.json key dsv4 reads: its name (the released config.json
// and HF spelling), its GGUF metadata key, the other spellings that mean the
// same (the inference ModelArgs names), and for integers the range Validate
// accepts. Parsing (config.json and GGUF metadata),
// Validate's range checks and `dsv4 inspect`'s field listing all walk this one
// list (VisitConfigFields, after gemma.cpp's VisitFields). The structured keys
// (rope_scaling / rope_parameters, quantization_config, compress_ratios /
// layer_types / compress_rates, mlp_layer_types, scoring_func, expert_dtype,
// eos_token_id lists) are read by the parser around it.
struct ConfigField {
  const char* key;
  // The llama.cpp `deepseek4` GGUF metadata key (spec §14.4), after the
  // "deepseek4." prefix unless it starts with "tokenizer."; nullptr: not in GGUF.
  const char* gguf = nullptr;
  std::array<const char*, 2> aliases{};  // nullptr: none
  int64_t min = INT64_MIN;               // integers: the accepted range
  int64_t max = INT64_MAX;
  const char* range_hint = nullptr;  // a max violation's "supported: ..." (default "at most max")
};

template <class Config, class Visitor>  // Config: DeepSeekV4Config, const or not
void VisitConfigFields(Config& c, Visitor&& v) {
  constexpr int64_t kAny = INT64_MIN, kNoMax = INT64_MAX;
  // ---- sizes ----
  // The upper limits are far beyond any release (V4-Pro: vocab 129280, hidden
  // 7168, 61 layers, 384 experts): larger values are file damage, and the
  // limits keep every tensor-size product (e.g. E·L·3·F·D) far from overflow.
  v(ConfigField{"vocab_size", "vocab_size", {}, 1, int64_t{1} << 22}, c.vocab_size);
  v(ConfigField{"hidden_size", "embedding_length", {"dim"}, 1, int64_t{1} << 16}, c.hidden_size);
  v(ConfigField{"num_hidden_layers", "block_count", {"n_layers"}, 1, 1024}, c.num_hidden_layers);
  v(ConfigField{"num_attention_heads", "attention.head_count", {"n_heads"}, 1, 4096},
    c.num_attention_heads);
  v(ConfigField{"num_key_value_heads",
                "attention.head_count_kv",
                {},
                1,
                1,
                "1 (DeepSeek-V4 attention has one shared K=V head)"},
    c.num_key_value_heads);
  v(ConfigField{"head_dim", "attention.key_length", {}, 1, int64_t{1} << 14}, c.head_dim);
  v(ConfigField{"qk_rope_head_dim", "rope.dimension_count", {"rope_head_dim"}, 1, kNoMax},
    c.qk_rope_head_dim);
  v(ConfigField{"q_lora_rank", "attention.q_lora_rank", {}, 1, int64_t{1} << 16}, c.q_lora_rank);
  v(ConfigField{"o_groups", "attention.output_group_count", {}, 1, kNoMax}, c.o_groups);
  v(ConfigField{"o_lora_rank", "attention.output_lora_rank", {}, 1, int64_t{1} << 16},
    c.o_lora_rank);
  v(ConfigField{"sliding_window", "attention.sliding_window", {"window_size"}, 1, int64_t{1} << 20},
    c.sliding_window);
  v(ConfigField{"max_position_embeddings", "context_length", {}, 1, int64_t{1} << 40},
    c.max_position_embeddings);
  // ---- RoPE bases (YaRN: rope_scaling / rope_parameters) ----
  v(ConfigField{"rope_theta", "rope.freq_base"}, c.rope_theta);
  v(ConfigField{"compress_rope_theta", "attention.compress_rope_freq_base"}, c.compress_rope_theta);
  // ---- lightning indexer ----
  v(ConfigField{"index_n_heads", "attention.indexer.head_count", {}, 1, 4096}, c.index_n_heads);
  v(ConfigField{"index_head_dim", "attention.indexer.key_length", {}, 1, int64_t{1} << 14},
    c.index_head_dim);
  v(ConfigField{"index_topk", "attention.indexer.top_k", {}, 1, int64_t{1} << 24}, c.index_topk);
  // ---- MoE ----
  v(ConfigField{"n_routed_experts", "expert_count", {"num_local_experts"}, 1, int64_t{1} << 14},
    c.n_routed_experts);
  v(ConfigField{"num_experts_per_tok", "expert_used_count", {"n_activated_experts"}, 1, kNoMax},
    c.num_experts_per_tok);
  v(
      ConfigField{
          "n_shared_experts", "expert_shared_count", {}, 1, 1, "1 (the reference asserts it)"},
      c.n_shared_experts);
  v(ConfigField{"moe_intermediate_size",
                "expert_feed_forward_length",
                {"moe_inter_dim"},
                1,
                int64_t{1} << 16},
    c.moe_intermediate_size);
  v(ConfigField{"num_hash_layers", "hash_layer_count", {"n_hash_layers"}, kAny, kNoMax},
    c.num_hash_layers);
  v(ConfigField{"topk_method", nullptr}, c.topk_method);
  v(ConfigField{"norm_topk_prob", "expert_weights_norm"}, c.norm_topk_prob);
  v(ConfigField{"routed_scaling_factor", "expert_weights_scale", {"route_scale"}},
    c.routed_scaling_factor);
  v(ConfigField{"swiglu_limit", nullptr}, c.swiglu_limit);
  // ---- manifold-constrained hyper-connections ----
  v(ConfigField{"hc_mult", "hyper_connection.count", {}, 1, kMaxHcMult, "1..64 (V4 uses 4)"},
    c.hc_mult);
  v(ConfigField{"hc_sinkhorn_iters",
                "hyper_connection.sinkhorn_iterations",
                {},
                1,
                10000,
                "1..10000 (V4 uses 20)"},
    c.hc_sinkhorn_iters);
  v(ConfigField{"hc_eps", "hyper_connection.epsilon"}, c.hc_eps);
  // ---- the rest ----
  v(ConfigField{"rms_norm_eps", "attention.layer_norm_rms_epsilon", {"norm_eps"}}, c.rms_norm_eps);
  v(
      ConfigField{
          "num_nextn_predict_layers", "nextn_predict_layers", {"n_mtp_layers"}, 0, 16, "0..16"},
      c.num_nextn_predict_layers);
  v(ConfigField{"dspark_block_size", nullptr, {}, 0, 64, "0 (no DSpark) .. 64"},
    c.dspark_block_size);
  v(ConfigField{"dspark_noise_token_id", nullptr}, c.dspark_noise_token_id);
  v(ConfigField{"dspark_markov_rank", nullptr, {}, 1, int64_t{1} << 16}, c.dspark_markov_rank);
  // ---- DeepSeek-V4.1 ----
  v(ConfigField{"candidate_source_layer", nullptr, {}, -1, 1023}, c.candidate_source_layer);
  v(ConfigField{"candidate_topk_blocks", nullptr, {}, 0, int64_t{1} << 24},
    c.candidate_topk_blocks);
  v(ConfigField{"candidate_block_size", nullptr, {}, 0, int64_t{1} << 20}, c.candidate_block_size);
  v(ConfigField{"engram_max_ngram_size", nullptr, {}, 1, 16}, c.engram_max_ngram_size);
  v(ConfigField{"engram_vocab_size", nullptr, {}, 0, int64_t{1} << 40}, c.engram_vocab_size);
  v(ConfigField{"engram_n_heads", nullptr, {}, 0, 1024}, c.engram_n_heads);
  v(ConfigField{"engram_head_dim", nullptr, {}, 0, int64_t{1} << 14}, c.engram_head_dim);
  v(ConfigField{"engram_pad_id", nullptr}, c.engram_pad_id);
  v(ConfigField{"engram_compressed_vocab_size", nullptr, {}, 0, int64_t{1} << 24},
    c.engram_compressed_vocab_size);
  v(ConfigField{"dspark_n_routed_experts", nullptr, {}, 0, int64_t{1} << 14},
    c.dspark_n_routed_experts);
  v(ConfigField{"dspark_n_activated_experts", nullptr, {}, 0, int64_t{1} << 14},
    c.dspark_n_activated_experts);
  v(ConfigField{"bos_token_id", "tokenizer.ggml.bos_token_id"}, c.bos_token_id);
  v(ConfigField{"tie_word_embeddings", nullptr}, c.tie_word_embeddings);
  v(ConfigField{"torch_dtype", nullptr}, c.torch_dtype);
}

// The HF `layer_types` label of a compress ratio: "sliding_attention",
// "compressed_sparse_attention" (4), "heavily_compressed_attention" (others).
std::string_view LayerTypeName(int64_t compress_ratio);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_CONFIG_H_
