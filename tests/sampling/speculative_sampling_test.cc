// Lossless speculative sampling (sampling/speculative_sampling.h), proved
// statistically: with fixed target distributions π_0, π_1, π_2 and draft
// distributions q_0, q_1 that differ from them (and put mass where π has none),
// the first two emitted tokens of 200,000 verification rounds follow π_0 ⊗ π_1
// (chi-square over the 25 cells, false-alarm probability below 1e-4), and the
// acceptance rate is the theoretical Σ_v min(π_0, q_0). Plus DrawFrom.
#include "sampling/speculative_sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv4 {
namespace {

TEST(SpeculativeSampling, DrawFromFollowsTheProbabilities) {
  Xoshiro256 rng(7);
  const std::vector<float> p = {0.0f, 0.5f, 0.0f, 0.25f, 0.25f};
  std::vector<int> counts(5, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++counts[DrawFrom(p, rng)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  for (int v : {1, 3, 4}) EXPECT_NEAR(counts[v] / static_cast<double>(n), p[v], 0.01) << v;
}

TEST(SpeculativeSampling, EmittedTokensFollowTheTargetDistribution) {
  constexpr int V = 5;
  // pi [3, V]: the target at positions 0, 1, 2; q [2, V]: the drafts'.
  const std::vector<float> pi = {0.40f, 0.30f, 0.20f, 0.10f, 0.00f,   // π_0 (no mass on 4)
                                 0.05f, 0.05f, 0.10f, 0.30f, 0.50f,   // π_1
                                 0.20f, 0.20f, 0.20f, 0.20f, 0.20f};  // π_2
  const std::vector<float> q = {0.10f, 0.10f, 0.30f, 0.30f, 0.20f,    // q_0 (mass on 4)
                                0.50f, 0.20f, 0.10f, 0.10f, 0.10f};   // q_1
  Xoshiro256 rng(12345);
  std::vector<float> residual;
  const int n = 200000;
  std::vector<int64_t> cells(V * V, 0);
  int64_t accepted_first = 0;
  for (int r = 0; r < n; ++r) {
    int32_t drafts[2] = {DrawFrom(std::span<const float>(q).first(V), rng),
                         DrawFrom(std::span<const float>(q).subspan(V, V), rng)};
    const Verified v = VerifyDraftsLossless(drafts, q, pi, rng, residual);
    ASSERT_GE(v.next, 0);
    // The emitted sequence: the accepted drafts, then `next`.
    int32_t t0, t1;
    if (v.accepted == 0) {
      t0 = v.next;
      // Position 1 would come from a fresh draw of π_1 in the next round.
      t1 = DrawFrom(std::span<const float>(pi).subspan(V, V), rng);
    } else {
      t0 = drafts[0];
      t1 = v.accepted >= 2 ? drafts[1] : v.next;
      ++accepted_first;
    }
    ++cells[t0 * V + t1];
  }
  double chi2 = 0.0;
  int df = -1;
  for (int a = 0; a < V; ++a) {
    for (int b = 0; b < V; ++b) {
      const double expected = static_cast<double>(pi[a]) * pi[V + b] * n;
      if (expected == 0.0) {
        EXPECT_EQ(cells[a * V + b], 0) << a << "," << b;  // π_0(4) = 0: never emitted
        continue;
      }
      ++df;
      const double o = static_cast<double>(cells[a * V + b]);
      chi2 += (o - expected) * (o - expected) / expected;
    }
  }
  // df = 19: P(chi2 > 50) < 1e-4.
  EXPECT_EQ(df, 19);
  EXPECT_LT(chi2, 50.0) << "chi2 " << chi2;
  // Acceptance of the first draft: Σ_v min(π_0(v), q_0(v)) = 0.1+0.1+0.2+0.1+0 = 0.5.
  EXPECT_NEAR(accepted_first / static_cast<double>(n), 0.5, 0.005);
}

}  // namespace
}  // namespace dsv4
