// DeepSeek-V4 weight work per token (see work_counts.h).
#include "model/deepseek_v4/work_counts.h"

#include <algorithm>
#include <map>
#include <string>

#include "model/deepseek_v4/model.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::deepseek_v4 {
namespace {

// The layer i of a routed expert's tensor in any of the three namings
// (tensor_names.h) — official `layers.{i}.ffn.experts.…`, HF
// `model.layers.{i}.mlp.experts.…`, GGUF `blk.{i}.ffn_{gate,up,down}_exps.…`
// (with the `.scale` of a repacked MXFP4 one) — else -1.
int64_t RoutedExpertLayer(const std::string& name) {
  struct Form {
    std::string_view prefix, infix;
  };
  static constexpr Form kForms[] = {{"layers.", ".ffn.experts."},
                                    {"model.layers.", ".mlp.experts."},
                                    {"blk.", ".ffn_gate_exps."},
                                    {"blk.", ".ffn_up_exps."},
                                    {"blk.", ".ffn_down_exps."}};
  for (const Form& f : kForms) {
    if (name.rfind(f.prefix, 0) != 0) continue;
    const size_t dot = name.find('.', f.prefix.size());
    if (dot == std::string::npos || dot == f.prefix.size() ||
        name.compare(dot, f.infix.size(), f.infix) != 0) {
      continue;
    }
    int64_t layer = 0;
    for (size_t i = f.prefix.size(); i < dot; ++i) {
      if (name[i] < '0' || name[i] > '9') return -1;
      layer = layer * 10 + (name[i] - '0');
    }
    return layer;
  }
  return -1;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Σ over the tensors of per_tensor(t), routed experts scaled by
// top_k / n_experts: the shared walk of the bytes and the multiply-adds.
// `routed` (optional) receives the routed experts' part and one expert's
// mean over the MoE layers.
struct RoutedShare {
  int64_t per_token = 0, one_expert = 0;
};
template <typename PerTensor>
int64_t PerToken(const std::vector<TensorInfo>& tensors, int64_t n_experts, int64_t top_k,
                 PerTensor per_tensor, RoutedShare* routed = nullptr) {
  int64_t total = 0;
  std::map<int64_t, int64_t> expert_sum;  // layer -> the sum over all its routed experts
  for (const TensorInfo& t : tensors) {
    if (t.name.rfind("mtp.", 0) == 0) continue;  // MTP runs only when speculating
    const int64_t layer = RoutedExpertLayer(t.name);
    if (layer >= 0) {
      expert_sum[layer] += per_tensor(t);
    } else {
      total += per_tensor(t);
    }
  }
  int64_t routed_total = 0, all_experts = 0;
  for (const auto& [layer, sum] : expert_sum) {
    routed_total += sum / n_experts * top_k;
    all_experts += sum;
  }
  if (routed != nullptr && !expert_sum.empty()) {
    routed->per_token = routed_total;
    routed->one_expert = all_experts / n_experts / static_cast<int64_t>(expert_sum.size());
  }
  return total + routed_total;
}

// Bytes as stored, one row of the embedding and of the hash table.
int64_t StoredBytes(const TensorInfo& t) {
  if (t.name == "embed.weight" || t.name == "model.embed_tokens.weight" ||
      t.name == "token_embd.weight" || EndsWith(t.name, ".ffn.gate.tid2eid") ||
      EndsWith(t.name, ".mlp.gate.tid2eid") || EndsWith(t.name, ".ffn_gate_tid2eid.weight")) {
    return t.nbytes / std::max<int64_t>(1, t.shape.empty() ? 1 : t.shape[0]);  // one row
  }
  return t.nbytes;
}

}  // namespace

int64_t WeightBytesPerToken(const std::vector<TensorInfo>& tensors, int64_t n_experts,
                            int64_t top_k) {
  return PerToken(tensors, n_experts, top_k, &StoredBytes);
}

WeightWork CountWeightWork(const std::vector<TensorInfo>& tensors, int64_t n_experts, int64_t top_k,
                           const NumericsOptions& numerics) {
  WeightWork w;
  RoutedShare routed;
  w.bytes = PerToken(tensors, n_experts, top_k, &StoredBytes, &routed);
  w.routed_bytes = routed.per_token;
  w.routed_expert_bytes = routed.one_expert;
  w.macs = PerToken(tensors, n_experts, top_k, [](const TensorInfo& t) -> int64_t {
    // 2-D weights a token is multiplied by; not the embedding (a lookup),
    // block scales or the hash table.
    if (t.shape.size() != 2 || t.name == "embed.weight" || EndsWith(t.name, "scale") ||
        EndsWith(t.name, ".tid2eid")) {
      return 0;
    }
    const int64_t elements = t.shape[0] * t.shape[1];
    return t.dtype == DType::kI8 ? 2 * elements : elements;  // FP4: two per stored byte
  });
  if (!numerics.act_quant || ops::simd::Fp8Bf16DotKernel() == nullptr ||
      ops::simd::Fp4Bf16DotKernel() == nullptr) {
    return w;
  }
  const bool wo_a_bf16 = numerics.o_bf16;
  w.bf16_dot_macs =
      PerToken(tensors, n_experts, top_k, [wo_a_bf16](const TensorInfo& t) -> int64_t {
        // FP8 (F8_E4M3) and FP4 (packed in I8) weights whose input the reference
        // FP8-quantises, and wo_a when its input is rounded to bf16 (o_bf16; a
        // bf16 einsum in the reference), with K % 128 == 0.
        const bool fp8 = t.dtype == DType::kFp8E4m3, fp4 = t.dtype == DType::kI8;
        const bool wo_a = t.name.find(".attn.wo_a.") != std::string::npos;
        if (t.shape.size() != 2 || !(fp8 || fp4) || (wo_a && !wo_a_bf16)) return 0;
        const int64_t k = fp4 ? 2 * t.shape[1] : t.shape[1];
        return k % 128 == 0 ? t.shape[0] * k : 0;
      });
  return w;
}

std::optional<WeightWork> DeepSeekV4Model::weight_work_per_token() const {
  // The tensor list of the checkpoint the weights are mapped from (reading a
  // large checkpoint's headers again took seconds).
  return CountWeightWork(reader_->tensors(), config_.n_routed_experts, config_.num_experts_per_tok,
                         numerics_);
}

}  // namespace dsv4::deepseek_v4
