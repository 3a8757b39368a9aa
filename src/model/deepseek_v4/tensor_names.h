// The one table of DeepSeek-V4 tensor names: the official checkpoint spelling
// (the canonical key everywhere in this code), the HF transformers spelling
// (spec deepseek-v4.md §7.5: what `save_pretrained` writes after the load-time
// renames) and the llama.cpp GGUF spelling (§7.6, recorded for the GGUF loader;
// GGUF dims are innermost-first and FP8 tensors are re-quantised there).
//
// Patterns are relative to a scope: the top level, a layer (`layers.{L}.` /
// `model.layers.{L}.` / `blk.{L}.`) or an MTP layer (`mtp.{M}.`, which HF drops).
// `{X}` is a routed expert index. HF stacks the routed experts of a layer into
// `mlp.experts.gate_up_proj` [E, 2F, D] (w1 rows then w3 rows) and
// `mlp.experts.down_proj` [E, D, F].
#ifndef DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_
#define DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/checkpoint.h"

namespace dsv4::deepseek_v4 {

enum class NameScheme { kOfficial, kHf, kGguf };
std::string_view NameSchemeName(NameScheme s);  // "official", "hf", "gguf"

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

// Which spelling a checkpoint uses, from its embedding tensor's name; nullopt
// when none of the three is present.
std::optional<NameScheme> DetectNameScheme(const CheckpointReader& reader);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_TENSOR_NAMES_H_
