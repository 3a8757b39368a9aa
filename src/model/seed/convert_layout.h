// Seed-family checkpoint layout converter (specs/seed-mechanisms.md S-143,
// C-28): rewrites a checkpoint directory's dense MLPs between the standard
// SwiGLU storage (mlp.{gate,up,down}_proj) and the CED storage (mlp.ced_weight
// [2F, H] = [gate; up] stored column-major, mlp.down_proj [H, 2F] with the
// original columns at even indices and zeros at odd ones), using the library
// converters of ced_mlp.h. Every other tensor is copied byte for byte; the
// output is model.safetensors + config.json (extensions.ced.enabled set for
// "ced") + the tokenizer files (tok*) of the input directory.
//
// Layout-only conversion preserves the function (logits unchanged). With
// topology_ced, each converted layer also becomes a norm-free CED block
// (S-013: x + c·Attn(x), then x + MLP_ced(x), no norm anywhere):
// ced_scale_factor = 0.873 (the seed's initial value) is added and both norms,
// input_layernorm and post_attention_layernorm, are dropped (a kept MLP norm
// would be applied by the loader, C-18) — NOT function preserving; a warning
// says the model needs retraining.
//
// To "standard": a CED layer whose ced_bias is non-zero cannot be expressed as
// a SwiGLU; it is kept in CED storage and named in `kept`.
#ifndef DSV4_MODEL_SEED_CONVERT_LAYOUT_H_
#define DSV4_MODEL_SEED_CONVERT_LAYOUT_H_

#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::seed {

struct ConvertLayoutOptions {
  std::string to;             // "ced" | "standard"
  bool topology_ced = false;  // with "ced": norm-free blocks too (not function preserving)
};

struct ConvertLayoutReport {
  std::vector<int64_t> converted;  // layers rewritten
  std::vector<std::string> kept;   // tensors left as they were, with the reason
  std::vector<std::string> warnings;
};

// Reads in_dir/{config.json, model.safetensors}, writes out_dir (created; must
// differ from in_dir). Errors name the file or tensor.
Result<ConvertLayoutReport> ConvertSeedLayout(const std::string& in_dir, const std::string& out_dir,
                                              const ConvertLayoutOptions& options);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_CONVERT_LAYOUT_H_
