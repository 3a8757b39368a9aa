// TaskAdapter of the seed family (specs/seed-mechanisms.md S-055…S-058, C-24):
// one adapter shared by all layers, with a 128-wide bottleneck r:
//   task   = task_embedding · t + b          t = the prompt's first-token embedding
//                                            (or the mean of the first call's embeddings)
//   out(l) = mlp2 · GELU(mlp0 · [layer_embedding[l] ; task] + b0) + b2     [F]
//   gate'  = gate + α_l · out(l)             α_l = layers.l.mlp.task_gate_weight (0 if absent)
// applied to the gate projection of the layer's FFN (the dense gate_proj, or
// every routed expert's gate). The task vector is computed once at prefill
// and kept with the request (S-058), so decode steps never see it drift.
#ifndef DSV4_MODEL_SEED_TASK_ADAPTER_H_
#define DSV4_MODEL_SEED_TASK_ADAPTER_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4::seed {

struct TaskAdapterWeights {
  TensorView layer_embedding;           // [L, r]
  TensorView task_embedding;            // [r, H]
  std::vector<float> task_embedding_b;  // [r]
  TensorView mlp0;                      // [r, 2r]
  std::vector<float> mlp0_b;            // [r]
  TensorView mlp2;                      // [F, r]
  std::vector<float> mlp2_b;            // [F]
};

// out(layer) for task vector t [H]; layer must be in [0, L) (S-057: checked,
// never clamped) — an error names the layer and the range.
Result<std::vector<float>> TaskAdapterOut(ThreadPool& pool, const TaskAdapterWeights& w,
                                          const float* t, int64_t layer);

// Parameter count for widths L, H, r, F (S-056).
int64_t TaskAdapterParams(int64_t L, int64_t H, int64_t r, int64_t F);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_TASK_ADAPTER_H_
