// Shared numerics of the DeepSeek-V4 reference forward: the precision options
// (which of the reference's quantisation simulations to reproduce), the
// trace hook that names intermediates like the golden dumps, and the two
// small row ops every block uses (RMSNorm, activation prep for a linear).
//
// Not here: the blocks themselves (hyper_connection.h, attention.h, moe.h).
#ifndef DSV4_MODEL_DEEPSEEK_V4_NUMERICS_H_
#define DSV4_MODEL_DEEPSEEK_V4_NUMERICS_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/weights.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {

// Which quantisation-aware-training simulations of the official inference code
// the forward reproduces (spec §9.2). All off = exact fp32 math on the
// dequantized weights, which is what the fp32 goldens use. The reference's
// bf16 storage of activations (spec §9.1) is not reproduced: this path keeps
// fp32 everywhere, so with the simulations on it matches the official code
// run in fp32 with them (logits_qat_fp32.f32) and approximates the released
// bf16 numerics (logits_qat_bf16.f32). Which a model gets by default comes
// from its config (DeepSeekV4Config::qat_simulation; LoadOptions::numerics).
struct NumericsOptions {
  // FP8 e4m3 activation quantisation (block 128 along K, power-of-two scales)
  // of the input of every FP8/FP4 linear, as the reference `linear()` does.
  bool act_quant = false;
  // Its block along K: 128 in V4, 32 in DeepSeek-V4.1.
  int64_t act_block = 128;
  // FP8 QAT simulation of the kv "nope" dims (block 64) after RoPE, for the
  // window kv and the compressed entries (spec §4.1, §4.4).
  bool kv_quant = false;
  // FP4 QAT simulation (block 32) of the indexer's queries and keys after the
  // Hadamard rotation (spec §4.5).
  bool index_quant = false;
  // The attention output o rounded to bf16 before wo_a: the released code
  // holds o in bf16 and runs wo_a as a bf16 einsum (spec §4.7), so wo_a then
  // multiplies the reference's operands (products exact in fp32), on the bf16
  // dot-product kernels.
  bool o_bf16 = false;
};

// The numerics a checkpoint runs with unless the caller chooses: the
// release's (every simulation above, o in bf16) for a model trained with the
// QAT simulations (DeepSeekV4Config::qat_simulation), else none of them.
inline NumericsOptions DefaultNumerics(bool qat_simulation) {
  return {.act_quant = qat_simulation,
          .kv_quant = qat_simulation,
          .index_quant = qat_simulation,
          .o_bf16 = qat_simulation};
}

// Trace(name, layer, data, shape): called with named intermediates when set.
// The name is the golden-dump key (tests/data/deepseek_v4/README.md): a
// per-layer name "attn_out" of layer 3 arrives as "layers.3.attn_out", with
// layer = 3, of MTP layer k (layer L + k) as "mtp.k.attn_out"; top-level names
// ("embed", layer −1) arrive as they are. Costs one branch when unset.
using TraceFn = std::function<void(std::string_view name, int64_t layer, const float* data,
                                   std::span<const int64_t> shape)>;
class Tracer {
 public:
  Tracer() = default;
  // n_main_layers: L; layers from L on are MTP layers.
  Tracer(const TraceFn* fn, int64_t n_main_layers) : fn_(fn), n_main_layers_(n_main_layers) {}
  bool on() const { return fn_ != nullptr && *fn_; }
  void operator()(std::string_view name, int64_t layer, const float* data,
                  std::initializer_list<int64_t> shape) const {
    if (!on()) return;
    const std::span<const int64_t> dims(shape.begin(), shape.size());
    if (layer < 0) {
      (*fn_)(name, layer, data, dims);
    } else {
      const std::string full =
          (layer < n_main_layers_ ? "layers." + std::to_string(layer)
                                  : "mtp." + std::to_string(layer - n_main_layers_)) +
          "." + std::string(name);
      (*fn_)(full, layer, data, dims);
    }
  }

 private:
  const TraceFn* fn_ = nullptr;
  int64_t n_main_layers_ = INT64_MAX;
};

// Σ v[i]² over n values in double. The squares (exact in double) go into 8
// independent sums, which vectorise: one chain of n dependent double adds
// waits on the add latency at every value, and a decoded token runs many
// norms per layer (attention and FFN norms, q norms, every head's norm).
inline double SumOfSquares(const float* v, int64_t n) {
  constexpr int64_t kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(v[i + j]) * v[i + j];
  }
  for (; i < n; ++i) lane[i % kLanes] += static_cast<double>(v[i]) * v[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// out[n] = x[n] / sqrt(mean(x²) + eps) · weight[n] (weight may be null: unweighted).
// The mean is accumulated in double, close to the reference's fp32 reduction.
inline void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  const double ss = SumOfSquares(x, n);
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight ? weight[i] * (x[i] * r) : x[i] * r;
}

// The input a linear actually multiplies: x itself, or — with act_quant on and
// an FP8/FP4 (or Q8_0) weight — an FP8-simulated copy in `scratch` (spec §7.4, §9.2).
// Tokens are split over the pool (a decoded token stays on the caller).
inline const float* LinearInput(ThreadPool& pool, const float* x, int64_t n_tokens,
                                const LinearWeight& w, const NumericsOptions& opts,
                                std::vector<float>& scratch) {
  if (!opts.act_quant || !w.takes_fp8_input()) return x;
  const int64_t k = w.cols();
  if (static_cast<int64_t>(scratch.size()) < n_tokens * k) scratch.resize(n_tokens * k);
  pool.ParallelFor(
      n_tokens,
      [&](int64_t t0, int64_t t1, int) {
        std::copy(x + t0 * k, x + t1 * k, scratch.data() + t0 * k);
        for (int64_t t = t0; t < t1; ++t) {
          ops::QuantizeDequantizeFp8(scratch.data() + t * k, k, opts.act_block);
        }
      },
      8);
  return scratch.data();
}

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_NUMERICS_H_
