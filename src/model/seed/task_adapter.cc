// TaskAdapter (see task_adapter.h).
#include "model/seed/task_adapter.h"

#include "model/seed/hca.h"
#include "ops/matmul.h"

namespace dsv4::seed {

Result<std::vector<float>> TaskAdapterOut(ThreadPool& pool, const TaskAdapterWeights& w,
                                          const float* t, int64_t layer) {
  const int64_t L = w.layer_embedding.size(0), r = w.layer_embedding.size(1);
  if (layer < 0 || layer >= L) {
    return OutOfRange("TaskAdapter: layer_id " + std::to_string(layer) + " is outside [0, " +
                          std::to_string(L - 1) + "]",
                      "the adapter's layer embedding has one row per layer (S-057)");
  }
  std::vector<float> cat(2 * r), hid(r);
  DequantizeRow(w.layer_embedding.dtype, w.layer_embedding[layer].data, r, cat.data());
  ops::MatMul(pool, cat.data() + r, t, w.task_embedding, 1);
  for (int64_t i = 0; i < r; ++i) cat[r + i] += w.task_embedding_b[i];
  ops::MatMul(pool, hid.data(), cat.data(), w.mlp0, 1);
  for (int64_t i = 0; i < r; ++i) hid[i] = Gelu(hid[i] + w.mlp0_b[i]);
  const int64_t F = w.mlp2.size(0);
  std::vector<float> out(F);
  ops::MatMul(pool, out.data(), hid.data(), w.mlp2, 1);
  for (int64_t i = 0; i < F; ++i) out[i] += w.mlp2_b[i];
  return out;
}

int64_t TaskAdapterParams(int64_t L, int64_t H, int64_t r, int64_t F) {
  return L * r + (r * H + r) + (2 * r * r + r) + (F * r + F);
}

}  // namespace dsv4::seed
