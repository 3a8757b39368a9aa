// What one DeepSeek-V4 token costs in weights (model/model.h WeightWork),
// counted from a checkpoint's tensor list: dsv4 bench's rooflines.
#ifndef DSV4_MODEL_DEEPSEEK_V4_WORK_COUNTS_H_
#define DSV4_MODEL_DEEPSEEK_V4_WORK_COUNTS_H_

#include <cstdint>
#include <vector>

#include "io/checkpoint.h"
#include "model/deepseek_v4/numerics.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

// Bytes of weights one decoded token reads, as stored (WeightWork::bytes) —
// the routed experts of each layer scaled by top_k / n_experts, one row of the
// embedding and of the hash tables, MTP layers not counted.
int64_t WeightBytesPerToken(const std::vector<TensorInfo>& tensors, int64_t n_experts,
                            int64_t top_k);

// All of WeightWork; `numerics` decides which products run on the bf16
// dot-product kernels (0 of them when the CPU lacks the kernels).
WeightWork CountWeightWork(const std::vector<TensorInfo>& tensors, int64_t n_experts, int64_t top_k,
                           const NumericsOptions& numerics);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_WORK_COUNTS_H_
