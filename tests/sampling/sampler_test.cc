// Tests of sampling/sampler.h: parameter validation, greedy = argmax, seeded
// reproducibility, each filter stage on hand-made logits (exact kept sets),
// the penalty formulas, the chain order, draw frequencies against
// softmax(logits / T) (chi-square), xoshiro256** against the `randomgen`
// reference outputs, and that Sample does not allocate after the first call.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

// Counts heap allocations so a test can check that Sample makes none. (GCC
// cannot see that these new and delete replacements pair up.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace dsv4 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Only the stages under test: everything else off.
SamplingParams Plain(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::vector<float> RandomLogits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());  // first max
}

std::set<int32_t> Ids(std::span<const Candidate> c) {
  std::set<int32_t> ids;
  for (const Candidate& x : c) ids.insert(x.id);
  return ids;
}

// log of the probabilities: softmax(Logits(p)) == p.
std::vector<float> Logits(const std::vector<double>& probs) {
  std::vector<float> v;
  for (const double p : probs) v.push_back(static_cast<float>(std::log(p)));
  return v;
}

// ---- validation -----------------------------------------------------------------

TEST(SamplingParamsTest, DefaultsAreLlamaCppsAndValid) {
  const SamplingParams p;
  EXPECT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.repeat_last_n, 64);
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

void ExpectInvalid(SamplingParams p, const std::string& field) {
  const Status s = ValidateSamplingParams(p);
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.ToString();
  EXPECT_FALSE(s.hint().empty());
}

TEST(SamplingParamsTest, RejectsNanTemperature) {
  SamplingParams p;
  p.temperature = std::nanf("");
  ExpectInvalid(p, "temperature");
}
TEST(SamplingParamsTest, RejectsTopPAboveOne) {
  SamplingParams p;
  p.top_p = 1.5f;
  ExpectInvalid(p, "top_p");
}
TEST(SamplingParamsTest, RejectsNegativeTopP) {
  SamplingParams p;
  p.top_p = -0.1f;
  ExpectInvalid(p, "top_p");
}
TEST(SamplingParamsTest, RejectsMinPAboveOne) {
  SamplingParams p;
  p.min_p = 2.0f;
  ExpectInvalid(p, "min_p");
}
TEST(SamplingParamsTest, RejectsZeroRepeatPenalty) {
  SamplingParams p;
  p.repeat_penalty = 0.0f;
  ExpectInvalid(p, "repeat_penalty");
}
TEST(SamplingParamsTest, RejectsNegativeRepeatLastN) {
  SamplingParams p;
  p.repeat_last_n = -1;
  ExpectInvalid(p, "repeat_last_n");
}
TEST(SamplingParamsTest, RejectsHugeRepeatLastN) {
  SamplingParams p;
  p.repeat_last_n = kMaxRepeatLastN + 1;
  ExpectInvalid(p, "repeat_last_n");
}
TEST(SamplingParamsTest, RejectsInfinitePresencePenalty) {
  SamplingParams p;
  p.presence_penalty = kInf;
  ExpectInvalid(p, "presence_penalty");
}
TEST(SamplingParamsTest, RejectsNanFrequencyPenalty) {
  SamplingParams p;
  p.frequency_penalty = std::nanf("");
  ExpectInvalid(p, "frequency_penalty");
}

// ---- greedy -----------------------------------------------------------------------

TEST(SamplerTest, GreedyEqualsArgmax) {
  for (const float t : {0.0f, -1.0f}) {
    SamplingParams p;  // default filters on: they never change the argmax
    p.temperature = t;
    Sampler s(p);
    for (uint32_t seed = 0; seed < 50; ++seed) {
      std::vector<float> logits = RandomLogits(1000, seed);
      const int32_t expected = Argmax(logits);
      EXPECT_EQ(s.Sample(logits), expected);
      EXPECT_TRUE(s.last_candidates().empty());
    }
  }
}

TEST(SamplerTest, GreedyTakesTheLowestIdOnTiesAndSkipsNan) {
  Sampler s(Plain(0.0f));
  std::vector<float> tie = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.Sample(tie), 1);
  std::vector<float> nan = {std::nanf(""), 1.0f, 2.0f};
  EXPECT_EQ(s.Sample(nan), 2);
  std::vector<float> all_masked = {-kInf, -kInf};
  EXPECT_EQ(s.Sample(all_masked), 0);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p = Plain(1.5f);
  p.top_k = 1;
  Sampler s(p);
  for (uint32_t seed = 0; seed < 100; ++seed) {
    std::vector<float> logits = RandomLogits(300, seed);
    EXPECT_EQ(s.Sample(logits), Argmax(logits));
    ASSERT_EQ(s.last_candidates().size(), 1u);
  }
}

// ---- reproducibility ------------------------------------------------------------

std::vector<int32_t> Draws(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> copy = logits;  // Sample modifies its argument
    out.push_back(s.Sample(copy));
  }
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  const std::vector<float> logits = RandomLogits(64, 1);
  SamplingParams p = Plain(2.0f);
  p.seed = 42;
  Sampler a(p), b(p);
  const std::vector<int32_t> first = Draws(a, logits, 300);
  EXPECT_EQ(Draws(b, logits, 300), first);
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 5u);  // really random
  p.seed = 43;
  Sampler c(p);
  EXPECT_NE(Draws(c, logits, 300), first);
  a.Reset();  // back to the start of the seed's sequence
  EXPECT_EQ(Draws(a, logits, 300), first);
}

// ---- stages -------------------------------------------------------------------------

TEST(SamplerStagesTest, TopKKeepsTheKBestSorted) {
  std::vector<Candidate> c = {{0.5f, 0}, {2.0f, 1}, {-1.0f, 2}, {2.0f, 3}, {1.0f, 4}};
  ASSERT_EQ(ApplyTopK(c, 3), 3u);
  EXPECT_EQ(c[0].id, 1);  // tie at 2.0: lower id first
  EXPECT_EQ(c[1].id, 3);
  EXPECT_EQ(c[2].id, 4);
  EXPECT_EQ(ApplyTopK(c, 0), 5u);
  EXPECT_EQ(ApplyTopK(c, 99), 5u);
}

// probabilities 0.5, 0.2, 0.15, 0.1, 0.05 scattered over ids.
const std::vector<int32_t> kOrder = {3, 0, 4, 1, 2};  // id of the i-th most likely
std::vector<float> FiveLogits() {
  std::vector<double> probs(5);
  const double p[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  for (int i = 0; i < 5; ++i) probs[static_cast<size_t>(kOrder[static_cast<size_t>(i)])] = p[i];
  return Logits(probs);
}
std::set<int32_t> TopIds(int n) { return std::set<int32_t>(kOrder.begin(), kOrder.begin() + n); }

TEST(SamplerStagesTest, TopPKeepsTheShortestPrefixReachingP) {
  struct Case {
    float p;
    int kept;
  };
  // Cumulative mass: 0.5, 0.7, 0.85, 0.95, 1.0.
  for (const Case c : {Case{0.0f, 1}, Case{0.4f, 1}, Case{0.6f, 2}, Case{0.8f, 3}, Case{0.9f, 4},
                       Case{0.97f, 5}, Case{1.0f, 5}}) {
    std::vector<Candidate> cand;
    const std::vector<float> logits = FiveLogits();
    for (int32_t i = 0; i < 5; ++i) cand.push_back({logits[static_cast<size_t>(i)], i});
    SortCandidates(cand);
    EXPECT_EQ(ApplyTopP(cand, c.p), static_cast<size_t>(c.kept)) << c.p;

    SamplingParams p = Plain();
    p.top_p = c.p;
    Sampler s(p);
    std::vector<float> row = FiveLogits();
    const int32_t id = s.Sample(row);
    EXPECT_EQ(Ids(s.last_candidates()), TopIds(c.kept)) << c.p;
    EXPECT_TRUE(TopIds(c.kept).count(id));
  }
}

TEST(SamplerStagesTest, MinPKeepsTokensWithinAFactorOfTheBest) {
  struct Case {
    float p;
    int kept;
  };
  // Relative to the best (0.5): 1, 0.4, 0.3, 0.2, 0.1.
  for (const Case c : {Case{0.0f, 5}, Case{0.05f, 5}, Case{0.15f, 4}, Case{0.25f, 3},
                       Case{0.35f, 2}, Case{0.5f, 1}, Case{1.0f, 1}}) {
    std::vector<Candidate> cand;
    const std::vector<float> logits = FiveLogits();
    for (int32_t i = 0; i < 5; ++i) cand.push_back({logits[static_cast<size_t>(i)], i});
    const size_t kept = ApplyMinP(cand, c.p);
    EXPECT_EQ(kept, static_cast<size_t>(c.kept)) << c.p;
    EXPECT_EQ(Ids({cand.data(), kept}), TopIds(c.kept)) << c.p;
    // Kept candidates keep their order (ids ascending here: the input order).
    EXPECT_TRUE(std::is_sorted(cand.begin(), cand.begin() + static_cast<ptrdiff_t>(kept),
                               [](const Candidate& a, const Candidate& b) { return a.id < b.id; }));

    SamplingParams p = Plain();
    p.min_p = c.p;
    Sampler s(p);
    std::vector<float> row = FiveLogits();
    s.Sample(row);
    EXPECT_EQ(Ids(s.last_candidates()), TopIds(c.kept)) << c.p;
  }
}

TEST(SamplerStagesTest, ChainOrderTopKThenTopPThenMinP) {
  // 0.4, 0.3, 0.2, 0.1. Top-p 0.5 alone keeps two (0.4 < 0.5 <= 0.7); after
  // top-k 2 the mass is renormalised (0.571, 0.429), so top-p keeps one.
  const std::vector<float> logits = Logits({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = Plain();
  p.top_p = 0.5f;
  {
    Sampler s(p);
    std::vector<float> row = logits;
    s.Sample(row);
    EXPECT_EQ(Ids(s.last_candidates()), (std::set<int32_t>{0, 1}));
  }
  p.top_k = 2;
  {
    Sampler s(p);
    std::vector<float> row = logits;
    EXPECT_EQ(s.Sample(row), 0);
    EXPECT_EQ(Ids(s.last_candidates()), (std::set<int32_t>{0}));
  }
  // Min-p runs before temperature: at T = 100 the draw is nearly uniform, but
  // min-p 0.6 has already cut everything below 0.6 * 0.4.
  SamplingParams q = Plain(100.0f);
  q.min_p = 0.6f;
  Sampler s(q);
  std::vector<float> row = logits;
  s.Sample(row);
  EXPECT_EQ(Ids(s.last_candidates()), (std::set<int32_t>{0, 1}));
  // The candidates hold temperature-scaled logits.
  EXPECT_FLOAT_EQ(s.last_candidates()[0].logit, logits[0] / 100.0f);
}

// ---- penalties -----------------------------------------------------------------------

TEST(SamplerPenaltyTest, RepeatFrequencyAndPresenceFormulas) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.1f;
  p.presence_penalty = 0.3f;
  Sampler s(p);
  for (const int32_t t : {0, 1, 0, 3, 0}) s.Accept(t);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  s.Sample(logits);
  // token 0: count 3, positive: 2 / 2 - (3 * 0.1 + 0.3)
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 2.0f - (3 * 0.1f + 0.3f));
  // token 1: count 1, negative: -1 * 2 - (0.1 + 0.3)
  EXPECT_FLOAT_EQ(logits[1], -1.0f * 2.0f - (0.1f + 0.3f));
  EXPECT_EQ(logits[2], 0.5f);  // never accepted
  EXPECT_FLOAT_EQ(logits[3], 3.0f / 2.0f - (0.1f + 0.3f));
  EXPECT_EQ(logits[4], 0.0f);
}

TEST(SamplerPenaltyTest, OnlyTheLastNAcceptedTokensCount) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.repeat_last_n = 2;
  Sampler s(p);
  for (const int32_t t : {0, 1, 0, 3, 0}) s.Accept(t);  // window: 3, 0
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  s.Sample(logits);
  EXPECT_FLOAT_EQ(logits[0], 1.0f - 0.5f);
  EXPECT_EQ(logits[1], -1.0f);  // fell out of the window
  EXPECT_FLOAT_EQ(logits[3], 1.5f - 0.5f);
}

TEST(SamplerPenaltyTest, ZeroLogitIsMultipliedAndStaysZero) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  s.Accept(0);
  std::vector<float> logits = {0.0f, -0.5f};
  s.Sample(logits);
  EXPECT_EQ(logits[0], 0.0f);
}

TEST(SamplerPenaltyTest, PenaltyChangesTheGreedyChoice) {
  SamplingParams p = Plain(0.0f);
  p.repeat_penalty = 1.3f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 1.2f};
  EXPECT_EQ(s.Sample(logits), 1);
  s.Accept(1);
  logits = {1.0f, 1.2f};
  EXPECT_EQ(s.Sample(logits), 0);  // 1.2 / 1.3 < 1.0
}

TEST(SamplerPenaltyTest, NoEffectWhenOffOutOfRangeOrReset) {
  const std::vector<float> base = {2.0f, -1.0f, 0.5f};
  {
    SamplingParams p = Plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 0;  // off
    Sampler s(p);
    s.Accept(0);
    std::vector<float> logits = base;
    s.Sample(logits);
    EXPECT_EQ(logits, base);
  }
  {
    SamplingParams p = Plain(0.0f);
    p.repeat_penalty = 2.0f;
    Sampler s(p);
    for (const int32_t t : {-5, 3, 1000}) s.Accept(t);  // outside the vocab: ignored
    std::vector<float> logits = base;
    s.Sample(logits);
    EXPECT_EQ(logits, base);
    s.Accept(0);
    s.Reset();
    logits = base;
    s.Sample(logits);
    EXPECT_EQ(logits, base);
  }
}

// ---- the draw ------------------------------------------------------------------------

// Pearson's chi-square statistic of `counts` against probabilities `expected`.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& expected,
                 int64_t n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * static_cast<double>(n);
    if (e == 0.0) continue;
    chi2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return chi2;
}

std::vector<double> SoftmaxT(const std::vector<float>& logits, double t) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double sum = 0.0;
  for (const float l : logits) sum += std::exp((l - mx) / t);
  for (const float l : logits) p.push_back(std::exp((l - mx) / t) / sum);
  return p;
}

TEST(SamplerDrawTest, FrequenciesMatchSoftmaxOverTemperature) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -2.0f, 1.5f, 0.7f};
  const int64_t n = 200000;
  for (const uint64_t seed : {1ull, 2ull}) {
    for (const float t : {0.7f, 1.0f, 1.8f}) {
      SamplingParams p = Plain(t);
      p.seed = seed;
      Sampler s(p);
      std::vector<int64_t> counts(logits.size(), 0);
      std::vector<float> row(logits.size());
      for (int64_t i = 0; i < n; ++i) {
        std::copy(logits.begin(), logits.end(), row.begin());
        ++counts[static_cast<size_t>(s.Sample(row))];
      }
      // 7 degrees of freedom: P(chi2 > 24.32) = 0.001.
      EXPECT_LT(ChiSquare(counts, SoftmaxT(logits, t), n), 24.32) << "T=" << t;
    }
  }
}

TEST(SamplerDrawTest, TopKDrawsFollowTheRenormalisedTopK) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -2.0f, 1.5f, 0.7f};
  SamplingParams p = Plain(1.5f);
  p.top_k = 3;  // ids 3, 6, 0
  Sampler s(p);
  const int64_t n = 100000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[static_cast<size_t>(s.Sample(row))];
  }
  std::vector<double> expected(logits.size(), 0.0);
  const std::vector<double> top = SoftmaxT({logits[3], logits[6], logits[0]}, 1.5);
  expected[3] = top[0], expected[6] = top[1], expected[0] = top[2];
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << i;
    }
  }
  // 2 degrees of freedom: P(chi2 > 13.82) = 0.001.
  EXPECT_LT(ChiSquare(counts, expected, n), 13.82);
}

TEST(SamplerDrawTest, InfiniteAndMaskedLogits) {
  Sampler s(Plain(1.0f));
  std::vector<float> masked = {-kInf, -kInf, -kInf};
  EXPECT_EQ(s.Sample(masked), 0);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> one_left = {-kInf, 0.3f, -kInf, std::nanf("")};
    EXPECT_EQ(s.Sample(one_left), 1);
    std::vector<float> inf = {1.0f, kInf, 3.0f};
    EXPECT_EQ(s.Sample(inf), 1);
  }
}

TEST(SamplerDrawTest, NoAllocationAfterTheFirstCall) {
  SamplingParams p;  // the default chain, all stages on
  p.repeat_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  Sampler s(p);
  std::vector<float> logits = RandomLogits(32000, 3);
  std::vector<float> row = logits;
  s.Sample(row);
  for (int32_t t = 0; t < 100; ++t) s.Accept(t * 7);
  p.top_k = 0;  // the full-sort path too
  Sampler full(p);
  row = logits;
  full.Sample(row);
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 20; ++i) {
    std::copy(logits.begin(), logits.end(), row.begin());
    const int32_t t = s.Sample(row);
    s.Accept(t);
    std::copy(logits.begin(), logits.end(), row.begin());
    full.Accept(full.Sample(row));
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

// ---- xoshiro256** ----------------------------------------------------------------

TEST(Xoshiro256Test, MatchesTheReferenceImplementation) {
  std::ifstream in(std::string(DSV4_TEST_DATA_DIR) + "/sampling/xoshiro_goldens.txt");
  ASSERT_TRUE(in.good());
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::array<uint64_t, 4> state;
    for (uint64_t& w : state) words >> w;
    Xoshiro256 rng = Xoshiro256::FromState(state);
    for (int i = 0; i < 8; ++i) {
      uint64_t expected = 0;
      words >> expected;
      EXPECT_EQ(rng.Next(), expected) << line << " output " << i;
    }
    ++lines;
  }
  EXPECT_EQ(lines, 3);
}

TEST(Xoshiro256Test, UniformDoublesAreInRangeAndSeedsDiffer) {
  Xoshiro256 a(0), b(1);
  double sum = 0.0;
  bool differ = false;
  for (int i = 0; i < 100000; ++i) {
    const double x = a.NextDouble();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    sum += x;
    differ |= b.NextDouble() != x;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  EXPECT_TRUE(differ);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Logit bias (OpenAI logit_bias; llama.cpp's first stage): added before the
// penalties and filters, in Sample and Probabilities alike.
TEST(SamplerLogitBias, MovesTheGreedyChoiceAndTheDistribution) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
  SamplingParams p = Plain(0.0f);
  std::vector<float> row = logits;
  EXPECT_EQ(Sampler(p).Sample(row), 1);
  p.logit_bias = {{1, -100.0f}};
  row = logits;
  EXPECT_EQ(Sampler(p).Sample(row), 2);    // the best one pushed down
  p.logit_bias = {{3, 2.6f}, {7, 50.0f}};  // id 7 is past the row: ignored
  row = logits;
  EXPECT_EQ(Sampler(p).Sample(row), 3);
  EXPECT_FLOAT_EQ(row[3], 3.1f);  // the row holds the biased logits
  // Probabilities: the softmax of the biased logits.
  SamplingParams t = Plain(1.0f);
  t.logit_bias = {{0, 2.0f}};
  std::vector<float> probs(4);
  Sampler(t).Probabilities(logits, probs);
  const std::vector<float> biased = {3.0f, 3.0f, 2.0f, 0.5f};
  double z = 0;
  for (float x : biased) z += std::exp(x);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(probs[i], std::exp(biased[i]) / z, 1e-6) << i;
  // Draws follow it: token 0 and 1 equally likely, together ~84%.
  Sampler s(t);
  int hits01 = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<float> r = logits;
    hits01 += s.Sample(r) <= 1;
  }
  EXPECT_NEAR(hits01 / 4000.0, (probs[0] + probs[1]), 0.03);
}

TEST(SamplerLogitBias, RejectsNegativeIdsAndNonFiniteAmounts) {
  SamplingParams p = Plain();
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(ValidateSamplingParams(p).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ValidateSamplingParams(p).message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{3, -kInf}};
  EXPECT_EQ(ValidateSamplingParams(p).code(), StatusCode::kInvalidArgument);
  p.logit_bias = {{3, -100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

}  // namespace
}  // namespace dsv4
