// The one table of DeepSeek-V4 tensor names: the official checkpoint spelling
// (the canonical key everywhere in this code), the HF transformers spelling
// (spec deepseek-v4.md §7.5: what `save_pretrained(save_original_format=False)`
// writes, HF's internal names) and the llama.cpp `deepseek4` GGUF spelling
// (§14.2; the GGUF reader exposes dims outermost-first, as the official
// shapes; FP8 tensors are re-quantised to Q8_0 there and the routed experts
// stacked per layer into MXFP4 `ffn_*_exps` [E, N, K]). A fourth spelling, transformers' default
// `save_pretrained` (which reverses its load-time renames only in part), is
// derived from the official one: official layer names under `model.`, with
// `model.embed_tokens.weight`, `model.norm.weight`, `model.hc_head.hc_*` at the
// top and a layer's attention `kv_norm` written as `attn.norm.weight`.
//
// Patterns are relative to a scope: the top level, a layer (`layers.{L}.` /
// `model.layers.{L}.` / `blk.{L}.`) or an MTP layer (`mtp.{M}.`). transformers
// drops `mtp.*` on load, so HF files carry the draft layer only when a user
// copies the release's tensors back: under their official names, or under
// `model.mtp.{M}.` next to a default save.
// `{X}` is a routed expert index. HF stacks the routed experts of a layer into
// `mlp.experts.gate_up_proj` [E, 2F, D] (w1 rows then w3 rows) and
// `mlp.experts.down_proj` [E, D, F].
//
// Which spelling a checkpoint uses is decided per tensor (CandidateNames): a
// checkpoint may mix them.
#ifndef DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_
#define DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"

namespace dsv4::deepseek_v4 {

enum class NameScheme { kOfficial, kHf, kHfSave, kGguf };
// "official", "hf", "hf default save", "gguf"
std::string_view NameSchemeName(NameScheme s);
// The safetensors spellings, in the order CandidateNames tries them.
inline constexpr NameScheme kSafetensorsSchemes[] = {NameScheme::kOfficial, NameScheme::kHf,
                                                     NameScheme::kHfSave};
// A llama.cpp `deepseek4` GGUF file's one spelling.
inline constexpr NameScheme kGgufSchemes[] = {NameScheme::kGguf};

enum class NameScope { kTop, kLayer, kMtp };

// Where an HF stacked expert tensor keeps one official per-expert weight.
enum class HfStack {
  kNone,      // a tensor of its own
  kGateHalf,  // rows [0, F) of gate_up_proj[X]   (official w1)
  kUpHalf,    // rows [F, 2F) of gate_up_proj[X]  (official w3)
  kWhole,     // down_proj[X]                      (official w2)
};

struct TensorNameRow {
  NameScope scope;
  std::string_view official;  // e.g. "attn.wq_a.weight" (scope-relative)
  std::string_view hf;        // "" = HF has no such tensor
  std::string_view gguf;      // "" = not stored / not known in GGUF
  HfStack hf_stack = HfStack::kNone;
};

// Every row, in checkpoint order (top level, then per layer, then MTP-only).
std::span<const TensorNameRow> TensorNameTable();

// A concrete official name translated to another scheme.
struct ResolvedName {
  std::string name;  // e.g. "model.layers.3.self_attn.q_a_proj.weight"
  HfStack hf_stack = HfStack::kNone;
  int64_t expert = -1;  // the {X} of the official name, -1 when none
};
// nullopt when the name is not in the table or the scheme has no spelling for it.
std::optional<ResolvedName> TranslateName(std::string_view official, NameScheme scheme);

// A concrete official name in each of `schemes` that has one, in that order
// (names may repeat where two spellings agree). In the GGUF spelling a routed
// expert's weight resolves to its layer's stacked `ffn_*_exps` tensor, with
// `expert` saying which slice.
struct CandidateName {
  NameScheme scheme;
  ResolvedName resolved;
};
std::vector<CandidateName> CandidateNames(
    std::string_view official, std::span<const NameScheme> schemes = kSafetensorsSchemes);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_
