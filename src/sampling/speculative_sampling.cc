// Lossless speculative sampling (see speculative_sampling.h).
#include "sampling/speculative_sampling.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4 {

int32_t DrawFrom(std::span<const float> probs, Xoshiro256& rng) {
  CHECK(!probs.empty());
  double total = 0.0;
  for (float p : probs) total += p;
  const double target = rng.NextDouble() * total;
  double mass = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    mass += probs[i];
    last = static_cast<int32_t>(i);
    if (mass > target) return last;
  }
  return last;  // rounding: the last token with mass
}

Verified VerifyDraftsLossless(std::span<const int32_t> drafts, std::span<const float> q,
                              std::span<const float> pi, Xoshiro256& rng,
                              std::vector<float>& residual) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  const int64_t V = static_cast<int64_t>(pi.size()) / (k + 1);
  CHECK(static_cast<int64_t>(q.size()) == k * V && static_cast<int64_t>(pi.size()) == (k + 1) * V,
        "VerifyDraftsLossless: sizes");
  Verified out;
  for (int64_t i = 0; i < k; ++i) {
    const float* qi = q.data() + i * V;
    const float* pii = pi.data() + i * V;
    const int32_t d = drafts[i];
    const double ratio = qi[d] > 0.0f ? static_cast<double>(pii[d]) / qi[d] : 0.0;
    if (rng.NextDouble() < ratio) {
      ++out.accepted;
      continue;
    }
    // Rejected: the next token from the residual max(π_i − q_i, 0).
    residual.resize(V);
    double mass = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      residual[v] = std::max(0.0f, pii[v] - qi[v]);
      mass += residual[v];
    }
    out.next =
        mass > 1e-12 ? DrawFrom(residual, rng) : DrawFrom(std::span<const float>(pii, V), rng);
    return out;
  }
  out.next = DrawFrom(pi.subspan(k * V, V), rng);
  return out;
}

}  // namespace dsv4
