// SemanticKVPruner policy (see kv_pruner.h).
#include "model/seed/kv_pruner.h"

#include <algorithm>
#include <numeric>

#include "model/seed/hca.h"
#include "ops/matmul.h"

namespace dsv4::seed {

void PrunerScores(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H,
                  float* scores) {
  MlpScratch local;
  PrunerScores(pool, w, h, T, H, scores, local);
}

void PrunerScores(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H,
                  float* scores, MlpScratch& s) {
  const int64_t hid = w.fc1.size(0);
  s.hidden.resize(std::max<size_t>(s.hidden.size(), static_cast<size_t>(T * hid)));
  s.out.resize(std::max<size_t>(s.out.size(), static_cast<size_t>(T)));
  float* a = s.hidden.data();
  float* z = s.out.data();
  ops::MatMul(pool, a, h, w.fc1, T);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hid; ++j) a[t * hid + j] = Gelu(a[t * hid + j] + w.fc1_b[j]);
  }
  ops::MatMul(pool, z, a, w.fc2, T);
  for (int64_t t = 0; t < T; ++t) scores[t] = std::clamp(z[t] + w.fc2_b, 0.0f, 1.0f);
}

float PooledScore(ThreadPool& pool, const PrunerWeights& w, const float* h, int64_t T, int64_t H) {
  std::vector<float> mean(H, 0.0f);
  for (int64_t c = 0; c < H; ++c) {
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += h[t * H + c];
    mean[c] = static_cast<float>(s / static_cast<double>(T));
  }
  float out;
  PrunerScores(pool, w, mean.data(), 1, H, &out);
  return out;
}

double PrunerTau(const KvPrunerConfig& c, double r) {
  return std::min(c.base_threshold * (1.0 + 0.5 * r), c.tau_max);
}

KvPrunerPolicy::Decision KvPrunerPolicy::Step(std::span<const int64_t> pos,
                                              std::span<const float> score, int64_t next_pos) {
  Decision d;
  Step(pos, score, next_pos, d);
  return d;
}

void KvPrunerPolicy::Step(std::span<const int64_t> pos, std::span<const float> score,
                          int64_t next_pos, Decision& d) {
  CHECK(pos.size() == score.size());
  d.evict.clear();
  d.forced = 0;
  const int64_t n = static_cast<int64_t>(pos.size());
  d.r = static_cast<double>(n) / (static_cast<double>(budget_) * eff_);
  d.tau = PrunerTau(c_, d.r);
  std::vector<uint8_t>& gone = gone_;
  gone.assign(n, 0);
  int64_t pruned = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!Protected(pos[i], next_pos) && score[i] < d.tau) {
      gone[i] = 1;
      ++pruned;
    }
  }
  if (eff_rule_ == EffRule::kSeed) {
    eff_ = pruned == 0 ? std::min(0.95, eff_ * 1.02) : std::max(0.75, eff_ * 0.98);
  } else if (pruned > 0) {
    eff_ = std::min(0.95, eff_ * 1.02);
  } else if (d.r >= c_.prune_pressure) {
    eff_ = std::max(0.75, eff_ * 0.98);
  }
  // Hard budget: lowest scores first, older first on ties.
  int64_t live = n - pruned;
  if (live > budget_) {
    std::vector<int64_t>& order = order_;
    order.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (!gone[i] && !Protected(pos[i], next_pos)) order.push_back(i);
    }
    // Positions are distinct, so the order is total (no stable sort, which allocates).
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return score[a] != score[b] ? score[a] < score[b] : pos[a] < pos[b];
    });
    for (int64_t i : order) {
      if (live <= budget_) break;
      gone[i] = 1;
      --live;
      ++d.forced;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (gone[i]) d.evict.push_back(pos[i]);
  }
  std::sort(d.evict.begin(), d.evict.end());
}

}  // namespace dsv4::seed
