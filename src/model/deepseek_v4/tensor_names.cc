// The DeepSeek-V4 tensor name table (see tensor_names.h).
// Official names: spec §7.2; HF: §7.5 (transformers conversion_mapping.py);
// GGUF: §14.2 (llama.cpp deepseek4, its converter and loader). The HF
// default-save spelling is derived from the official one (HfSaveName).
#include "model/deepseek_v4/tensor_names.h"

#include <cctype>

namespace dsv4::deepseek_v4 {
namespace {

using S = NameScope;
using St = HfStack;

// clang-format off
constexpr TensorNameRow kTable[] = {
  // ---- top level ----
  {S::kTop, "embed.weight",   "model.embed_tokens.weight", "token_embd.weight"},
  {S::kTop, "head.weight",    "lm_head.weight",            "output.weight"},
  {S::kTop, "norm.weight",    "model.norm.weight",         "output_norm.weight"},
  {S::kTop, "hc_head_fn",     "model.hc_head.hc_fn",       "output_hc_fn.weight"},
  {S::kTop, "hc_head_base",   "model.hc_head.hc_base",     "output_hc_base.weight"},
  {S::kTop, "hc_head_scale",  "model.hc_head.hc_scale",    "output_hc_scale.weight"},

  // ---- every layer (and the MTP block, which repeats them under mtp.{M}.) ----
  {S::kLayer, "attn_norm.weight", "input_layernorm.weight",          "attn_norm.weight"},
  {S::kLayer, "ffn_norm.weight",  "post_attention_layernorm.weight", "ffn_norm.weight"},
  {S::kLayer, "hc_attn_fn",       "attn_hc.fn",                      "hc_attn_fn.weight"},
  {S::kLayer, "hc_attn_base",     "attn_hc.base",                    "hc_attn_base.weight"},
  {S::kLayer, "hc_attn_scale",    "attn_hc.scale",                   "hc_attn_scale.weight"},
  {S::kLayer, "hc_ffn_fn",        "ffn_hc.fn",                       "hc_ffn_fn.weight"},
  {S::kLayer, "hc_ffn_base",      "ffn_hc.base",                     "hc_ffn_base.weight"},
  {S::kLayer, "hc_ffn_scale",     "ffn_hc.scale",                    "hc_ffn_scale.weight"},

  {S::kLayer, "attn.wq_a.weight",  "self_attn.q_a_proj.weight",           "attn_q_a.weight"},
  {S::kLayer, "attn.wq_a.scale",   "self_attn.q_a_proj.weight_scale_inv", ""},
  {S::kLayer, "attn.q_norm.weight","self_attn.q_a_norm.weight",           "attn_q_a_norm.weight"},
  {S::kLayer, "attn.wq_b.weight",  "self_attn.q_b_proj.weight",           "attn_q_b.weight"},
  {S::kLayer, "attn.wq_b.scale",   "self_attn.q_b_proj.weight_scale_inv", ""},
  {S::kLayer, "attn.wkv.weight",   "self_attn.kv_proj.weight",            "attn_kv.weight"},
  {S::kLayer, "attn.wkv.scale",    "self_attn.kv_proj.weight_scale_inv",  ""},
  {S::kLayer, "attn.kv_norm.weight","self_attn.kv_norm.weight",           "attn_kv_a_norm.weight"},
  {S::kLayer, "attn.wo_a.weight",  "self_attn.o_a_proj.weight",           "attn_output_a.weight"},
  {S::kLayer, "attn.wo_a.scale",   "self_attn.o_a_proj.weight_scale_inv", ""},
  {S::kLayer, "attn.wo_b.weight",  "self_attn.o_b_proj.weight",           "attn_output_b.weight"},
  {S::kLayer, "attn.wo_b.scale",   "self_attn.o_b_proj.weight_scale_inv", ""},
  {S::kLayer, "attn.attn_sink",    "self_attn.sinks",                     "attn_sinks.weight"},

  // compressor (ratio > 0) and indexer (ratio 4); HF flattens the indexer onto the compressor
  {S::kLayer, "attn.compressor.wkv.weight",   "self_attn.compressor.kv_proj.weight",   "attn_compressor_kv.weight"},
  {S::kLayer, "attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight", "attn_compressor_gate.weight"},
  {S::kLayer, "attn.compressor.ape",          "self_attn.compressor.position_bias",    "attn_compressor_ape.weight"},
  {S::kLayer, "attn.compressor.norm.weight",  "self_attn.compressor.kv_norm.weight",   "attn_compressor_norm.weight"},
  {S::kLayer, "attn.indexer.wq_b.weight",     "self_attn.compressor.indexer.q_b_proj.weight",           "indexer.attn_q_b.weight"},
  {S::kLayer, "attn.indexer.wq_b.scale",      "self_attn.compressor.indexer.q_b_proj.weight_scale_inv", ""},
  {S::kLayer, "attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight", "indexer.proj.weight"},
  {S::kLayer, "attn.indexer.compressor.wkv.weight",   "self_attn.compressor.indexer.kv_proj.weight",   "indexer_compressor_kv.weight"},
  {S::kLayer, "attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight", "indexer_compressor_gate.weight"},
  {S::kLayer, "attn.indexer.compressor.ape",          "self_attn.compressor.indexer.position_bias",    "indexer_compressor_ape.weight"},
  {S::kLayer, "attn.indexer.compressor.norm.weight",  "self_attn.compressor.indexer.kv_norm.weight",   "indexer_compressor_norm.weight"},
  // DeepSeek-V4.1 (official names only): the key owner's index-key projection, Engram
  {S::kLayer, "attn.indexer.wk.weight",     "", ""},
  {S::kLayer, "attn.indexer.k_norm.weight", "", ""},
  {S::kLayer, "engram.embed.weight",        "", ""},
  {S::kLayer, "engram.embed.scale",         "", ""},
  {S::kLayer, "engram.wkv.weight",          "", ""},
  {S::kLayer, "engram.wkv.scale",           "", ""},
  {S::kLayer, "engram.q_weight",            "", ""},
  {S::kLayer, "engram.k_weight",            "", ""},

  // MoE
  {S::kLayer, "ffn.gate.weight",  "mlp.gate.weight",                   "ffn_gate_inp.weight"},
  {S::kLayer, "ffn.gate.bias",    "mlp.gate.e_score_correction_bias",  "exp_probs_b.bias"},
  {S::kLayer, "ffn.gate.tid2eid", "mlp.gate.tid2eid",                  "ffn_gate_tid2eid.weight"},
  {S::kLayer, "ffn.experts.{X}.w1.weight", "mlp.experts.gate_up_proj", "ffn_gate_exps.weight", St::kGateHalf},
  {S::kLayer, "ffn.experts.{X}.w1.scale",  "",                         ""},
  {S::kLayer, "ffn.experts.{X}.w3.weight", "mlp.experts.gate_up_proj", "ffn_up_exps.weight",   St::kUpHalf},
  {S::kLayer, "ffn.experts.{X}.w3.scale",  "",                         ""},
  {S::kLayer, "ffn.experts.{X}.w2.weight", "mlp.experts.down_proj",    "ffn_down_exps.weight", St::kWhole},
  {S::kLayer, "ffn.experts.{X}.w2.scale",  "",                         ""},
  {S::kLayer, "ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight",           "ffn_gate_shexp.weight"},
  {S::kLayer, "ffn.shared_experts.w1.scale",  "mlp.shared_experts.gate_proj.weight_scale_inv", ""},
  {S::kLayer, "ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight",             "ffn_up_shexp.weight"},
  {S::kLayer, "ffn.shared_experts.w3.scale",  "mlp.shared_experts.up_proj.weight_scale_inv",   ""},
  {S::kLayer, "ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight",           "ffn_down_shexp.weight"},
  {S::kLayer, "ffn.shared_experts.w2.scale",  "mlp.shared_experts.down_proj.weight_scale_inv", ""},

  // ---- MTP-only tensors (mtp.{M}.); HF ignores mtp.*. In GGUF the NextN block is
  // a file of its own, its tensors listed as mtp.{M}.<name> by the reader
  // (gguf_reader.h; e_proj/h_proj split from `nextn.eh_proj`) ----
  {S::kMtp, "e_proj.weight", "", "nextn.e_proj.weight"},
  {S::kMtp, "e_proj.scale",  "", ""},
  {S::kMtp, "h_proj.weight", "", "nextn.h_proj.weight"},
  {S::kMtp, "h_proj.scale",  "", ""},
  {S::kMtp, "enorm.weight",  "", "nextn.enorm.weight"},
  {S::kMtp, "hnorm.weight",  "", "nextn.hnorm.weight"},
  {S::kMtp, "norm.weight",   "", "nextn.shared_head_norm.weight"},
  {S::kMtp, "hc_head_fn",    "", "output_hc_fn.weight"},
  {S::kMtp, "hc_head_base",  "", "output_hc_base.weight"},
  {S::kMtp, "hc_head_scale", "", "output_hc_scale.weight"},
  // DSpark (spec §13.3): stage 0 reads the target features, the last stage has the heads
  // (GGUF: llama.cpp's dflash file, its top-level tensors listed under the stage
  // that holds them, its final norm as the last stage's shared_head_norm)
  {S::kMtp, "main_proj.weight", "", "fc.weight"},
  {S::kMtp, "main_proj.scale",  "", ""},
  {S::kMtp, "main_norm.weight", "", "enc.output_norm.weight"},
  {S::kMtp, "markov_head.markov_w1.weight", "", "markov_w1.weight"},
  {S::kMtp, "markov_head.markov_w2.weight", "", "markov_w2.weight"},
  {S::kMtp, "confidence_head.proj.weight",  "", "conf_proj.weight"},
  // V4.1 (the reference's DSparkMarkovHead)
  {S::kMtp, "markov_head.embed.weight", "", ""},
  {S::kMtp, "markov_head.head.weight",  "", ""},
};
// clang-format on

// Splits a leading "<word>.<digits>." off `name`; returns the number.
std::optional<int64_t> TakeIndexedPrefix(std::string_view& name, std::string_view word) {
  if (name.substr(0, word.size()) != word || name.size() <= word.size() ||
      name[word.size()] != '.') {
    return std::nullopt;
  }
  size_t i = word.size() + 1;
  int64_t v = 0;
  const size_t digits_begin = i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    if (i - digits_begin > 9) return std::nullopt;
    v = v * 10 + (name[i] - '0');
    ++i;
  }
  if (i == digits_begin || i >= name.size() || name[i] != '.') return std::nullopt;
  name.remove_prefix(i + 1);
  return v;
}

// Matches `name` against `pattern` with at most one "{X}" (a decimal number).
bool MatchPattern(std::string_view pattern, std::string_view name, int64_t* expert) {
  const size_t hole = pattern.find("{X}");
  if (hole == std::string_view::npos) return pattern == name;
  const std::string_view head = pattern.substr(0, hole);
  const std::string_view tail = pattern.substr(hole + 3);
  if (name.size() <= head.size() + tail.size()) return false;
  if (name.substr(0, head.size()) != head) return false;
  if (name.substr(name.size() - tail.size()) != tail) return false;
  const std::string_view digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 9) return false;
  int64_t v = 0;
  for (char ch : digits) {
    if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    v = v * 10 + (ch - '0');
  }
  *expert = v;
  return true;
}

std::string Substitute(std::string_view pattern, int64_t expert) {
  std::string s(pattern);
  const size_t hole = s.find("{X}");
  if (hole != std::string::npos) s.replace(hole, 3, std::to_string(expert));
  return s;
}

}  // namespace

std::string_view NameSchemeName(NameScheme s) {
  switch (s) {
    case NameScheme::kOfficial:
      return "official";
    case NameScheme::kHf:
      return "hf";
    case NameScheme::kHfSave:
      return "hf default save";
    case NameScheme::kGguf:
      return "gguf";
  }
  return "?";
}

std::span<const TensorNameRow> TensorNameTable() { return kTable; }

std::optional<ResolvedName> TranslateName(std::string_view official, NameScheme scheme) {
  std::string_view rest = official;
  NameScope scope = NameScope::kTop;
  int64_t index = -1;
  if (auto l = TakeIndexedPrefix(rest, "layers")) {
    scope = NameScope::kLayer;
    index = *l;
  } else if (auto m = TakeIndexedPrefix(rest, "mtp")) {
    scope = NameScope::kMtp;
    index = *m;
  }
  for (const TensorNameRow& row : kTable) {
    // MTP layers repeat the per-layer rows.
    const bool scope_ok =
        row.scope == scope || (scope == NameScope::kMtp && row.scope == NameScope::kLayer);
    if (!scope_ok) continue;
    int64_t expert = -1;
    if (!MatchPattern(row.official, rest, &expert)) continue;
    ResolvedName out;
    out.expert = expert;
    switch (scheme) {
      case NameScheme::kOfficial:
        out.name = std::string(official);
        return out;
      case NameScheme::kHf:
        // HF has no draft layer of its own: one copied back keeps its official names.
        if (scope == NameScope::kMtp) {
          out.name = std::string(official);
          return out;
        }
        if (row.hf.empty()) return std::nullopt;
        out.hf_stack = row.hf_stack;
        out.name = (scope == NameScope::kLayer ? "model.layers." + std::to_string(index) + "."
                                               : std::string()) +
                   Substitute(row.hf, expert);
        return out;
      case NameScheme::kHfSave:
        // transformers reverses its renames by pattern: the anchored top-level ones
        // (embed, hc_head) do not match under `model.`, `lm_head` does. (Its
        // `.norm.` → `.kv_norm.` rename, reversed, can also turn the attention's
        // kv_norm into `norm`: CandidateNames adds that spelling.)
        if (scope == NameScope::kTop) {
          out.name = row.official == "head.weight" ? std::string(row.official) : row.hf;
          return out;
        }
        out.name = "model." + std::string(official);
        return out;
      case NameScheme::kGguf:
        if (row.gguf.empty()) return std::nullopt;
        out.name = (scope == NameScope::kLayer ? "blk." + std::to_string(index) + "."
                    : scope == NameScope::kMtp ? "mtp." + std::to_string(index) + "."
                                               : std::string()) +
                   std::string(row.gguf);
        return out;
    }
  }
  return std::nullopt;
}

std::vector<CandidateName> CandidateNames(std::string_view official,
                                          std::span<const NameScheme> schemes) {
  std::vector<CandidateName> out;
  bool hf_save = false;
  for (NameScheme s : schemes) {
    if (auto r = TranslateName(official, s)) out.push_back({s, std::move(*r)});
    hf_save = hf_save || s == NameScheme::kHfSave;
  }
  if (!hf_save) return out;
  // transformers' default save reverses `.norm.` → `.kv_norm.` on every name
  // when a checkpoint's load used that rename (a compressor norm was renamed):
  // then a layer's attention kv_norm is written `attn.norm.weight`.
  std::string_view rest = official;
  if (auto l = TakeIndexedPrefix(rest, "layers"); l && rest == "attn.kv_norm.weight") {
    out.push_back({NameScheme::kHfSave, ResolvedName{.name = "model.layers." + std::to_string(*l) +
                                                             ".attn.norm.weight"}});
  }
  return out;
}

}  // namespace dsv4::deepseek_v4
