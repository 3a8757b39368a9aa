// SeedConfig: the hyper-parameters of a "seed-article" checkpoint
// (config.json with model_type "deepseek_v4_seed"), the config-driven model
// family that runs the mechanisms the three seed articles describe
// (specs/seed-mechanisms.md, group 1: S-001…S-065). It is a separate family
// beside the real DeepSeek-V4 and never changes how a real V4 checkpoint
// computes.
//
// The base is a Llama-style decoder (GQA attention, RoPE, SwiGLU). Each
// mechanism is switched on by one key of the `extensions` object, with its
// parameters (defaults from the digest; contradictions resolved as in its
// Analysis (a)). `seed_profile` ("P-V4", "P-CED", "P-V4-7B", §0.5) only fills
// the defaults that differ per profile (router input, capacity factor);
// everything else is read from the file. Unknown keys, at the top level and in
// every extension, are rejected naming the key.
#ifndef DSV4_MODEL_SEED_CONFIG_H_
#define DSV4_MODEL_SEED_CONFIG_H_

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::seed {

inline constexpr std::string_view kSeedModelType = "deepseek_v4_seed";

enum class Profile { kV4, kCed, kV47B };
std::string_view ProfileName(Profile p);  // "P-V4", "P-CED", "P-V4-7B"

// "CSA" multi-scale attention (S-016…S-023, C-07…C-09).
struct CsaConfig {
  bool enabled = false;
  int64_t local_window = 512;     // S-017: keys [i-511, i]
  int64_t segment_window = 4096;  // S-018: keys [i-4095, i]
  int64_t global_topk = 1024;     // S-019: K = min(1024, i+1) keys chosen by importance
  std::array<double, 3> branch_weights = {0.4, 0.4, 0.2};  // S-020 (local, segment, global)
  // S-019/C-08: "causal" = importance-selected keys, causal (default);
  // "seed" = selected tokens attend to each other non-causally, others get 0.
  std::string global_mode = "causal";
  // S-021/C-09: "weighted" (default) or "residual_layernorm" (the prose form).
  std::string fusion_mode = "weighted";
};

// "HCA" gating controller (S-030…S-035, C-13, C-15, C-17).
struct HcaConfig {
  bool enabled = false;
  int64_t hidden = 256;  // S-032: 3H -> 256 -> H
  // C-15, which tokens each token's μ and σ are taken over:
  //   "causal" (default): the sequence's tokens up to and including it (cached +
  //     this call's up to it, Welford, updated across the prompt), so a prefill
  //     gives every position the logits one-token-at-a-time decoding gives;
  //   "whole_call": the cached tokens and every token of the current call, so
  //     a prefill's earlier positions see its later tokens (not causal);
  //   "batch": the current call's tokens only (the seed's batch mode).
  std::string stats = "causal";
  double eps = 1e-6;            // σ = sqrt(var + eps), population variance
  double skip_threshold = 0.0;  // S-034: tokens with mean(w) < threshold skip the MoE; 0 = off
};

// Dynamic RoPE theta (S-025, C-11).
struct DynamicRopeConfig {
  bool enabled = false;
  int64_t base_len = 2048;  // L_base
  int64_t dim = 0;          // exponent denominator; 0 = hidden_size (the seed's d_model)
};

// Segmented RoPE (S-027…S-029, C-12).
struct SegmentedRopeConfig {
  bool enabled = false;
  int64_t segment_length = 2048;
};

// Mixture of experts with capacity routing (S-040…S-053, C-04…C-06, C-20…C-23).
struct MoeConfig {
  bool enabled = false;
  int64_t num_experts = 16;           // E (S-010)
  int64_t num_experts_per_tok = 2;    // k (C-04: clamped to [1, E])
  int64_t moe_intermediate_size = 0;  // expert width; 0 = intermediate_size
  std::string routing = "topk";       // "topk" | "group_limited" (S-043)
  int64_t n_group = 4;
  int64_t topk_group = 2;
  int64_t per_group_k = 2;
  bool dynamic_k = false;    // S-042: k = clamp(max(2, floor(0.015 T)), 1, E)
  std::string router_input;  // "hidden" | "hca" | "hidden_plus_attn" (S-040); "" = profile default
  double capacity_factor =
      -1;  // S-044: ceil(cf·N·k/E); 0 = unlimited (the parser fills the profile default)
  std::string assign = "topk_capped";  // S-045: "topk_capped" | "seed_greedy"
  std::string expert_naming =
      "deepseek";  // S-072: "deepseek" (w1 gate, w3 up) | "seed" (w1 up, w3 gate)
  double utilization_threshold =
      0.05;  // S-053 (runtime reweighting is off unless enabled in options)
};

// CED block and fused MLP (S-013, S-037…S-039, S-074…S-079, C-02, C-03, C-18, C-43).
struct CedConfig {
  bool enabled = false;
  // S-075: "auto" keeps the stored layout of ced_weight (detected from the
  // safetensors metadata); "true" forces col_major, "false" row_major (copying
  // when the stored one differs; the override is logged).
  std::string layout = "auto";
  // Block topology per layer: "auto" detects it from the checkpoint (CED when
  // ced_scale_factor is present and the norm weights absent), "all", "none".
  std::string block = "auto";
};

// TaskAdapter (S-055…S-058, C-24).
struct TaskAdapterConfig {
  bool enabled = false;
  int64_t adapter_dim = 128;  // r
  std::string task_source =
      "first_token";  // "first_token" | "mean" (of the first call's embeddings)
};

// SemanticKVPruner (S-059…S-065, C-25).
struct KvPrunerConfig {
  bool enabled = false;
  int64_t hidden = 256;          // score_net width
  double base_threshold = 0.35;  // S-060
  double tau_max = 0.6;
  double efficiency_factor = 0.85;  // S-062, adapts in [0.75, 0.95] (S-063)
  double prune_pressure = 0.9;
  int64_t protect_recent = 128;  // C-25
  int64_t protect_sink = 4;
  int64_t kv_budget = 0;              // live tokens kept; 0 = the cache's slot count
  std::string eff_mode = "resolved";  // "resolved" | "seed" (S-063 literal code)

  // The smallest budget the pruner can hold: more than the tokens it never
  // evicts (protect_sink + protect_recent), so the budget rule can always reach it.
  int64_t min_budget() const { return protect_sink + protect_recent + 1; }
};

struct RopeScaling {
  bool enabled = false;  // rope_scaling {"type": "linear", "factor": f} (S-026)
  double factor = 1.0;
};

struct SeedConfig {
  Profile profile = Profile::kV4;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;          // H
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // nh
  int64_t num_key_value_heads = 0;  // nkv
  int64_t intermediate_size = 0;    // I (dense / CED fused width)
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  int32_t bos_token_id = 1;
  int32_t eos_token_id = 2;
  bool tie_word_embeddings = false;

  CsaConfig csa;
  HcaConfig hca;
  DynamicRopeConfig dynamic_rope;
  SegmentedRopeConfig segmented_rope;
  MoeConfig moe;
  CedConfig ced;
  TaskAdapterConfig task_adapter;
  KvPrunerConfig kv_pruner;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }  // S-004
  int64_t kv_dim() const { return num_key_value_heads * head_dim(); }
  int64_t expert_width() const {
    return moe.moe_intermediate_size > 0 ? moe.moe_intermediate_size : intermediate_size;
  }
  // Positions the model supports: max_position_embeddings × the linear factor (S-007).
  int64_t max_context() const;
  // Experts each token is routed to with k from the config (C-04; group-limited: topk_group ×
  // per_group_k).
  int64_t routed_k() const;

  // Every field; errors name the field, the value and what is allowed.
  Status Validate() const;
  // Parses config.json text (`source` names it in errors) and validates.
  static Result<SeedConfig> FromJson(std::string_view text, const std::string& source);
  static Result<SeedConfig> FromFile(const std::string& path);
};

// One scalar key of a seed config.json and what Validate accepts of it. The
// table below (VisitSeedFields, after gemma.cpp's VisitFields) is the one
// place each key is written: the parser reads the keys it lists and rejects
// any other (naming the known ones), Validate checks each enabled section's
// fields against their range or allowed values, and `dsv4 inspect` lists
// them. The structured keys (model_type, seed_profile, rope_scaling.type,
// extensions.csa.branch_weights) and the checks across fields (head counts
// dividing, group sizes, the pruner's budget) are written around it.
struct SeedField {
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  // "" (top level), "rope_scaling", or the extension read from
  // extensions.<section> ("csa", "hca", ..., "kv_pruner").
  const char* section;
  const char* key;
  // Numbers (integers too): the accepted range; min_open excludes min.
  double min = -kInf;
  double max = kInf;
  bool min_open = false;
  // Strings: the allowed values (nullptr after the last); JSON true/false are
  // read as "true"/"false" when bool_spelling.
  std::array<const char*, 3> allowed{};
  bool bool_spelling = false;
  const char* hint = nullptr;  // Validate's "allowed: ..." (default: from the range or values)
};

template <class Config, class Visitor>  // Config: SeedConfig, const or not
void VisitSeedFields(Config& c, Visitor&& v) {
  constexpr double kInf = SeedField::kInf;
  // ---- top level ----
  v(SeedField{"", "vocab_size", 1}, c.vocab_size);
  v(SeedField{"", "hidden_size", 1}, c.hidden_size);
  v(SeedField{"", "num_hidden_layers", 1}, c.num_hidden_layers);
  v(SeedField{"", "num_attention_heads", 1}, c.num_attention_heads);
  v(SeedField{"", "num_key_value_heads", 1}, c.num_key_value_heads);  // absent: nh
  v(SeedField{"", "intermediate_size", 1}, c.intermediate_size);
  v(SeedField{"", "max_position_embeddings", 1}, c.max_position_embeddings);
  v(SeedField{"", "rope_theta", 0, kInf, true}, c.rope_theta);
  v(SeedField{"", "rms_norm_eps", 0, kInf, true}, c.rms_norm_eps);
  v(SeedField{"", "bos_token_id"}, c.bos_token_id);
  v(SeedField{"", "eos_token_id"}, c.eos_token_id);
  v(SeedField{"", "tie_word_embeddings"}, c.tie_word_embeddings);
  v(SeedField{"rope_scaling", "factor", 1}, c.rope_scaling.factor);  // S-026
  // ---- CSA (S-016…S-023) ----
  v(SeedField{"csa", "local_window", 1}, c.csa.local_window);
  v(SeedField{"csa", "segment_window", 1}, c.csa.segment_window);
  v(SeedField{"csa", "global_topk", 1}, c.csa.global_topk);
  v(SeedField{.section = "csa", .key = "global_mode", .allowed = {"causal", "seed"}},
    c.csa.global_mode);
  v(
      SeedField{
          .section = "csa", .key = "fusion_mode", .allowed = {"weighted", "residual_layernorm"}},
      c.csa.fusion_mode);
  // ---- HCA (S-030…S-035) ----
  v(SeedField{"hca", "enabled"}, c.hca.enabled);
  v(SeedField{"hca", "hidden", 1}, c.hca.hidden);
  v(SeedField{.section = "hca",
              .key = "stats",
              .allowed = {"causal", "whole_call", "batch"},
              .hint = "causal (default), whole_call, batch (the former \"sequence\" is "
                      "whole_call; docs/seed-mechanisms.md)"},
    c.hca.stats);
  v(SeedField{"hca", "eps", 0, kInf, true}, c.hca.eps);
  v(SeedField{"hca", "skip_threshold", 0, 1}, c.hca.skip_threshold);
  // ---- RoPE variants (S-025…S-029) ----
  v(SeedField{"dynamic_rope", "base_len", 1}, c.dynamic_rope.base_len);
  v(SeedField{.section = "dynamic_rope",
              .key = "dim",
              .min = 0,
              .hint = "0 (hidden_size) or a positive integer"},
    c.dynamic_rope.dim);
  v(SeedField{"segmented_rope", "segment_length", 1}, c.segmented_rope.segment_length);
  // ---- MoE (S-040…S-053) ----
  v(SeedField{"moe", "num_experts", 1}, c.moe.num_experts);
  v(SeedField{.section = "moe",
              .key = "num_experts_per_tok",
              .min = 1,
              .hint = "a positive integer (clamped to num_experts)"},
    c.moe.num_experts_per_tok);
  v(SeedField{.section = "moe",
              .key = "moe_intermediate_size",
              .min = 0,
              .hint = "0 (intermediate_size) or a positive integer"},
    c.moe.moe_intermediate_size);
  v(SeedField{.section = "moe", .key = "routing", .allowed = {"topk", "group_limited"}},
    c.moe.routing);
  v(SeedField{"moe", "n_group"}, c.moe.n_group);          // group_limited: checked across fields
  v(SeedField{"moe", "topk_group"}, c.moe.topk_group);    // 〃
  v(SeedField{"moe", "per_group_k"}, c.moe.per_group_k);  // 〃
  v(SeedField{"moe", "dynamic_k"}, c.moe.dynamic_k);
  v(SeedField{.section = "moe",
              .key = "router_input",
              .allowed = {"hidden", "hca", "hidden_plus_attn"}},
    c.moe.router_input);  // absent: the profile's
  v(SeedField{.section = "moe",
              .key = "capacity_factor",
              .min = 0,
              .hint = "0 (unlimited) or a positive number"},
    c.moe.capacity_factor);  // absent: the profile's
  v(SeedField{.section = "moe", .key = "assign", .allowed = {"topk_capped", "seed_greedy"}},
    c.moe.assign);
  v(SeedField{.section = "moe", .key = "expert_naming", .allowed = {"deepseek", "seed"}},
    c.moe.expert_naming);
  v(SeedField{"moe", "utilization_threshold", 0, kInf, true}, c.moe.utilization_threshold);
  // ---- CED (S-013, S-037…S-039, S-074…S-079) ----
  v(SeedField{.section = "ced",
              .key = "layout",
              .allowed = {"auto", "true", "false"},
              .bool_spelling = true},
    c.ced.layout);
  v(SeedField{.section = "ced", .key = "block", .allowed = {"auto", "all", "none"}}, c.ced.block);
  // ---- TaskAdapter (S-055…S-058) ----
  v(SeedField{"task_adapter", "adapter_dim", 1}, c.task_adapter.adapter_dim);
  v(SeedField{.section = "task_adapter", .key = "task_source", .allowed = {"first_token", "mean"}},
    c.task_adapter.task_source);
  // ---- SemanticKVPruner (S-059…S-065) ----
  v(SeedField{"kv_pruner", "hidden", 1}, c.kv_pruner.hidden);
  v(SeedField{"kv_pruner", "base_threshold", 0, 1, true}, c.kv_pruner.base_threshold);
  v(SeedField{"kv_pruner", "tau_max"}, c.kv_pruner.tau_max);  // [base_threshold, 1]: across
  v(SeedField{.section = "kv_pruner",
              .key = "efficiency_factor",
              .min = 0.75,
              .max = 0.95,
              .hint = "a number in [0.75, 0.95] (S-063)"},
    c.kv_pruner.efficiency_factor);
  v(SeedField{"kv_pruner", "prune_pressure", 0, kInf, true}, c.kv_pruner.prune_pressure);
  v(SeedField{"kv_pruner", "protect_recent", 0}, c.kv_pruner.protect_recent);
  v(SeedField{"kv_pruner", "protect_sink", 0}, c.kv_pruner.protect_sink);
  v(SeedField{"kv_pruner", "kv_budget"}, c.kv_pruner.kv_budget);  // checked across fields
  v(SeedField{.section = "kv_pruner", .key = "eff_mode", .allowed = {"resolved", "seed"}},
    c.kv_pruner.eff_mode);
}

// Whether `section` of VisitSeedFields is on in `c` ("" always; an extension
// when present in the file).
bool SeedSectionEnabled(const SeedConfig& c, std::string_view section);
// "extensions.moe." for "moe", "rope_scaling." for it, "" for the top level:
// the prefix errors and inspect name a field with.
std::string SeedFieldPrefix(std::string_view section);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_CONFIG_H_
