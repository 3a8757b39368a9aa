// The exact distribution of the first two sampled tokens after a prompt, for
// the statistical tests of lossless speculative sampling:
// P(t0, t1) = π(t0 | prompt) · π(t1 | prompt, t0) under the sampler chain of
// `sp`, from the model's own logits (pairs of probability 0 left out).
#ifndef DSV4_TESTS_ENGINE_TWO_TOKEN_DISTRIBUTION_H_
#define DSV4_TESTS_ENGINE_TWO_TOKEN_DISTRIBUTION_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/model.h"
#include "sampling/sampler.h"

namespace dsv4::testing {

inline std::map<std::pair<int32_t, int32_t>, double> TwoTokenDistribution(
    Model& model, const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  const int64_t V = model.info().vocab_size;
  Sampler chain(sp);
  std::vector<float> logits(V), p0(V), p1(V);
  std::map<std::pair<int32_t, int32_t>, double> exact;
  auto cache = model.NewCache(0);
  EXPECT_TRUE(model.Forward(prompt, *cache, logits, false).ok());
  chain.Probabilities(logits, p0);
  for (int32_t t0 = 0; t0 < V; ++t0) {
    if (p0[t0] == 0.0f) continue;
    auto c = model.NewCache(0);
    std::vector<int32_t> seq = prompt;
    seq.push_back(t0);
    EXPECT_TRUE(model.Forward(seq, *c, logits, false).ok());
    chain.Probabilities(logits, p1);
    for (int32_t t1 = 0; t1 < V; ++t1) {
      if (p1[t1] > 0.0f) exact[{t0, t1}] = static_cast<double>(p0[t0]) * p1[t1];
    }
  }
  return exact;
}

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_ENGINE_TWO_TOKEN_DISTRIBUTION_H_
