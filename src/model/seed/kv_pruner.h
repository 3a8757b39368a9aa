// SemanticKVPruner as a KV-cache policy (specs/seed-mechanisms.md S-059…S-065, C-25).
//   score  = Hardtanh_[0,1](fc2 · GELU(fc1 · h + b1) + b2), per token, from the last
//            layer's output h (a *retain* score; the seed's pooled [B,1] mode: PooledScore)
//   r      = live / (budget · eff)                                  S-062
//   tau    = min(base · (1 + 0.5·r), tau_max)                      S-060
//   evict every unprotected live token with score < tau            S-061
//   eff    after a step that pruned: min(0.95, eff·1.02); after one that did not,
//          with r >= prune_pressure: max(0.75, eff·0.98) (S-063 resolved; "seed"
//          mode is the article's literal direction)
//   then, while live > budget, evict the lowest-score unprotected token (ties: older first).
// Protected: positions < protect_sink and the newest protect_recent positions.
// Write-then-evict (S-065): the model writes the step's K/V, computes its
// outputs, then calls Step; freed slots are reused by the next step. The
// policy works on (position, score) pairs only, so any model's cache where
// eviction is meaningful can use it.
#ifndef DSV4_MODEL_SEED_KV_PRUNER_H_
#define DSV4_MODEL_SEED_KV_PRUNER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/seed/config.h"
#include "model/seed/hca.h"
#include "tensor/tensor.h"

namespace dsv4::seed {

struct PrunerWeights {
  TensorView fc1;            // [hidden, H]
  std::vector<float> fc1_b;  // [hidden]
  TensorView fc2;            // [1, hidden]
  float fc2_b = 0;
};

// Per-token retain scores in [0, 1] of h [T, H].
void PrunerScores(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H,
                  float* scores);
// The same with caller-owned buffers.
void PrunerScores(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H,
                  float* scores, MlpScratch& scratch);
// The seed's pooled score of the mean of h over T tokens ([B, 1] mode).
float PooledScore(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H);

double PrunerTau(const KvPrunerConfig& c, double r);

// S-063, kv_pruner.eff_mode resolved once (KvPrunerPolicy's constructor):
// "resolved" raises eff after a step that pruned; "seed" (the article's
// literal code) lowers it.
enum class EffRule { kResolved, kSeed };

class KvPrunerPolicy {
 public:
  KvPrunerPolicy(const KvPrunerConfig& config, int64_t budget)
      : c_(config),
        budget_(budget),
        eff_(config.efficiency_factor),
        eff_rule_(config.eff_mode == "seed" ? EffRule::kSeed : EffRule::kResolved) {}

  struct Decision {
    double r = 0, tau = 0;
    std::vector<int64_t> evict;  // positions, ascending
    int64_t forced = 0;          // of which evicted by the budget rule
  };
  // `pos` and `score` describe the live tokens after this step's write;
  // next_pos is one past the newest position.
  Decision Step(std::span<const int64_t> pos, std::span<const float> score, int64_t next_pos);
  // The same into `out` (its vectors reused): no allocation once the policy's
  // buffers and out.evict have held this many live tokens.
  void Step(std::span<const int64_t> pos, std::span<const float> score, int64_t next_pos,
            Decision& out);

  // Sizes Step's buffers for up to n live tokens.
  void Reserve(int64_t n) {
    gone_.reserve(static_cast<size_t>(n));
    order_.reserve(static_cast<size_t>(n));
  }
  double efficiency() const { return eff_; }
  // Back to the state of a new policy (the config's efficiency factor): a cache
  // reused for another request must not inherit this one's adaptation (S-063).
  void Reset() { eff_ = c_.efficiency_factor; }
  int64_t budget() const { return budget_; }
  bool Protected(int64_t p, int64_t next_pos) const {
    return p < c_.protect_sink || p >= next_pos - c_.protect_recent;
  }

 private:
  KvPrunerConfig c_;
  int64_t budget_;
  double eff_;
  EffRule eff_rule_;
  std::vector<uint8_t> gone_;   // scratch of Step
  std::vector<int64_t> order_;  // scratch of Step
};

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_KV_PRUNER_H_
