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

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

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
  int64_t num_nextn_predict_layers = 1;  // MTP layers (n_mtp_layers)
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 1;
  bool tie_word_embeddings = false;

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
  int64_t n_layers_total() const { return num_hidden_layers + num_nextn_predict_layers; }
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
};

// The HF `layer_types` label of a compress ratio: "sliding_attention",
// "compressed_sparse_attention" (4), "heavily_compressed_attention" (others).
std::string_view LayerTypeName(int64_t compress_ratio);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_CONFIG_H_
