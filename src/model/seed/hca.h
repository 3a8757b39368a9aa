// "HCA" gating controller of the seed family (specs/seed-mechanisms.md §1.5):
//   g     = hca_gate_proj · h          layer-level Linear(H → H) on the FFN input (C-13)
//   f     = [g ; μ ; σ]                [T, 3H]; μ, σ per sequence (population std,
//                                      σ = sqrt(var + ε), C-15): by default over the
//                                      tokens up to each token (causal), else over the
//                                      whole call or the call alone (config.h hca.stats)
//   w     = sigmoid(fc2 · GELU(fc1 · f + b1) + b2)   3H → hidden (256) → H  (S-032)
//   g_hca = g ⊙ w                      feeds the router (S-040); the experts read h.
// The same hca_gate_proj gives the CSA global branch its token importance,
// mean over features of hca_gate_proj · (attention input) (S-019, S-035).
// S-034: tokens with mean(w_t) < skip_threshold bypass the MoE (0 = off).
#ifndef DSV4_MODEL_SEED_HCA_H_
#define DSV4_MODEL_SEED_HCA_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4::seed {

struct HcaWeights {
  TensorView fc1;            // [hidden, 3H]
  std::vector<float> fc1_b;  // [hidden]
  TensorView fc2;            // [H, hidden]
  std::vector<float> fc2_b;  // [H]
};

// Per-feature mean and std over n rows of width H (population variance, +eps).
void FeatureStats(const float* rows, int64_t n, int64_t H, double eps, std::vector<double>& mu,
                  std::vector<double>& sigma);

// C-15 "causal": for each of the T rows after the first n0 of `rows`
// ([n0 + T, H]), the mean and std over rows [0, n0 + t] (Welford in row order,
// so row t's statistics equal FeatureStats over its prefix bit for bit).
// mu, sigma: [T, H].
void PrefixFeatureStats(const float* rows, int64_t n0, int64_t T, int64_t H, double eps,
                        std::vector<double>& mu, std::vector<double>& sigma);

// exact GELU, 0.5·x·(1 + erf(x/√2)).
float Gelu(float x);

// Buffers of HcaGate and of the pruner's score MLP (grow-only, reused).
struct MlpScratch {
  std::vector<float> in, hidden, out;
};

// g [T, H] → g_hca [T, H] and w_mean [T] (mean of w per token).
void HcaGate(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
             const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
             float* w_mean);
// The same with caller-owned buffers (no allocation once they are large enough).
void HcaGate(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
             const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
             float* w_mean, MlpScratch& scratch);
// The same with statistics per token: mu, sigma [T, H] (PrefixFeatureStats).
void HcaGatePerToken(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
                     const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
                     float* w_mean, MlpScratch& scratch);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_HCA_H_
