// Manifold-constrained hyper-connections (mHC), DeepSeek-V4's residual stream:
// C parallel copies of the hidden state, collapsed before each sublayer by
// `pre` weights and re-expanded after it by `post` weights plus a
// Sinkhorn-normalised (doubly stochastic) C×C mixing matrix `comb`; a separate
// head collapses the streams before the final norm. All math in fp32.
//
// Source: specs/deepseek-v4.md §3 (reference `Block.hc_pre/hc_post`,
// `ParallelHead.hc_head`, `kernel.hc_split_sinkhorn`); gotchas §11 items 8–10.
//
// Dimensions: T tokens, C streams (hc_mult), D hidden, M = (2 + C)·C mix width.
#ifndef DSV4_MODEL_DEEPSEEK_V4_HYPER_CONNECTION_H_
#define DSV4_MODEL_DEEPSEEK_V4_HYPER_CONNECTION_H_

#include <cstdint>

#include "base/thread_pool.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

struct HcParams {
  int64_t streams = 4;  // C
  int64_t hidden = 0;   // D
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;    // pre offset and Sinkhorn denominators
  float norm_eps = 1e-6f;  // the unweighted RMS over all C·D inputs
};

// Mixing coefficients of one layer site for T tokens (spec §3.1):
//   m = (fn · v) / rms(v) with v = x[t] flattened [C·D];
//   pre  = sigmoid(m[0:C]·scale[0] + base[0:C]) + hc_eps        -> pre  [T, C]
//   post = 2·sigmoid(m[C:2C]·scale[1] + base[C:2C])              -> post [T, C]
//   comb = Sinkhorn(m[2C:]·scale[2] + base[2C:]) as [C(src), C(dst)] -> comb [T, C, C]
// Where one site's coefficients for T tokens go.
struct HcMix {
  float* mix = nullptr;   // [T, M] scratch, M = (2 + C)·C
  float* pre = nullptr;   // [T, C]
  float* post = nullptr;  // [T, C]
  float* comb = nullptr;  // [T, C, C]
};

// x: [T, C, D].
void HcSiteCoefficients(ThreadPool& pool, const HcParams& p, const HyperConnectionWeights& w,
                        const float* x, int64_t n_tokens, const HcMix& out);

// u[t] = Σ_c pre[t, c] · x[t, c]   (u: [T, D]; pre is not renormalised).
void HcCollapse(const HcParams& p, const float* x, const float* pre, int64_t n_tokens, float* u);

// x[t, k] ← post[t, k] · y[t] + Σ_j comb[t, j, k] · x[t, j], in place.
// Note the transpose: comb row j is the SOURCE stream (§11 item 8).
// y: [T, D].
void HcExpand(const HcParams& p, float* x, const float* y, const float* post, const float* comb,
              int64_t n_tokens);

// The same two over the pool, tokens split across threads (prefill).
void HcCollapse(ThreadPool& pool, const HcParams& p, const float* x, const float* pre,
                int64_t n_tokens, float* u);
void HcExpand(ThreadPool& pool, const HcParams& p, float* x, const float* y, const float* post,
              const float* comb, int64_t n_tokens);

// The final head (spec §3.3): pre = sigmoid((fn · v)/rms(v)·scale[0] + base) + hc_eps
// (no ×2, no Sinkhorn), u[t] = Σ_c pre[t, c] · x[t, c].
// x: [T, C, D]; uses out.mix [T, C] and out.pre [T, C]; u: [T, D].
void HcHead(ThreadPool& pool, const HcParams& p, const HyperConnectionWeights& w, const float* x,
            int64_t n_tokens, const HcMix& out, float* u);

// Sinkhorn projection of one C×C logits matrix, in place (spec §3.1 step 6):
// row softmax, + eps; column normalise; then (iters − 1) × (row, column).
void SinkhornProject(float* comb, int64_t streams, int64_t iters, float eps);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_HYPER_CONNECTION_H_
