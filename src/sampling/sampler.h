// Sampler: picks the next token from a row of logits, with llama.cpp's default
// sampler chain and defaults (common/sampling.cpp):
//
//   logit bias -> penalties -> top-k -> top-p -> min-p -> temperature -> draw
//
// (logit bias: a fixed amount added to given tokens' logits, OpenAI's
// logit_bias, llama.cpp's first stage)
// with temperature <= 0 meaning greedy (argmax of the penalised logits, the
// lowest id on ties). Each stage follows llama.cpp's llama-sampling.cpp:
//   - penalties, over the last `repeat_last_n` accepted tokens, once per
//     distinct token with count c: logit <= 0 ? logit *= repeat_penalty
//     : logit /= repeat_penalty; then logit -= c * frequency_penalty
//     + (c > 0) * presence_penalty (OpenAI's formula, but over the same window
//     as the repeat penalty, as llama.cpp does, not the whole text);
//   - top-k: keep the k highest logits (k <= 0: off);
//   - top-p: keep the shortest prefix, by descending probability, whose
//     probability mass (softmax over what is left) reaches p (p >= 1: off);
//   - min-p: keep tokens whose logit >= max logit + ln(p), i.e. probability at
//     least p times the top one's (p <= 0: off);
//   - temperature: logits / T, then softmax and one draw.
// Ties in logit are broken by the lower id everywhere, and the draw uses
// xoshiro256** seeded through splitmix64 and a 53-bit uniform double, so a
// seed gives the same tokens on every platform (up to libm's expf).
//
// Cost per call: O(V) for top-k (nth_element) and the draw; top-p without
// top-k sorts the whole vocabulary, O(V log V). No allocation per call: buffers
// are sized on the first Sample (to the vocab) and at construction (the penalty
// window). Not thread-safe; one per request.
#ifndef DSV4_SAMPLING_SAMPLER_H_
#define DSV4_SAMPLING_SAMPLER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4 {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // in [0, 1]; 1: off
  float min_p = 0.05f;             // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;     // > 0; 1: off
  int32_t repeat_last_n = 64;      // penalty window in accepted tokens; 0: penalties off.
                                   // llama.cpp's -1 ("the context") is for the caller to
                                   // translate into the context length.
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
  uint64_t seed = 0;               // every value is a valid seed; the caller picks a random
                                   // one when the user gives none
  // (token id, amount) added to that token's logit before everything else;
  // ids must be in the vocabulary (the caller checks; ids past a row are
  // ignored), amounts finite (-inf is not: use a large negative amount).
  std::vector<std::pair<int32_t, float>> logit_bias = {};
};

// Largest repeat_last_n accepted (the window is allocated up front).
inline constexpr int32_t kMaxRepeatLastN = 1 << 24;

// Ok, or InvalidArgument naming the first field out of range. Front ends call
// this on user input; the Sampler constructor CHECKs it.
Status ValidateSamplingParams(const SamplingParams& params);

// xoshiro256** 1.0 (Blackman & Vigna, https://prng.di.unimi.it/), its state
// filled by splitmix64 from the seed as the authors recommend.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  // A generator in exactly this state (not all zero), for tests against the
  // reference implementation.
  static Xoshiro256 FromState(const std::array<uint64_t, 4>& state);
  uint64_t Next();
  // Uniform in [0, 1): the top 53 bits of Next() times 2^-53.
  double NextDouble();

 private:
  Xoshiro256() = default;
  std::array<uint64_t, 4> s_{};
};

// One token still in the running: its (possibly penalised or scaled) logit.
struct Candidate {
  float logit;
  int32_t id;
};

// The chain's stages on a candidate list, public for tests. Each returns how
// many candidates remain: the kept ones are c[0, returned size).
//
// Sorts by logit descending, the lower id first on ties.
void SortCandidates(std::span<Candidate> c);
// Keeps the k best and leaves them sorted (k >= size sorts all); k <= 0: no-op.
size_t ApplyTopK(std::span<Candidate> c, int32_t k);
// `c` must be sorted. Keeps the shortest prefix with softmax mass >= p; p >= 1: no-op.
size_t ApplyTopP(std::span<const Candidate> c, float p);
// Keeps candidates with logit >= max + ln(p), in their order; p <= 0: no-op.
size_t ApplyMinP(std::span<Candidate> c, float p);

class Sampler {
 public:
  // `params` must pass ValidateSamplingParams (CHECKed).
  explicit Sampler(const SamplingParams& params);

  // Picks a token id in [0, logits.size()). `logits` (non-empty) is modified in
  // place: on return it holds the biased, penalised logits (the later stages work on a
  // copy). NaN logits count as -inf. If every logit is -inf, returns the first
  // (lowest) id; +inf logits win over all finite ones.
  int32_t Sample(std::span<float> logits);
  // The distribution Sample draws from for `logits` when no penalties apply
  // (temperature > 0): the logit bias, top-k, top-p, min-p and temperature, then a
  // softmax, written densely into probs [logits.size()] (0 for the tokens the
  // filters drop). Speculative sampling verifies drafts against it. The
  // random sequence and the accepted tokens are not touched.
  void Probabilities(std::span<const float> logits, std::span<float> probs);
  // Records a token of the text (prompt or generated) for the penalties.
  void Accept(int32_t token);
  // Forgets the accepted tokens and restarts the random sequence from the seed.
  void Reset();

  const SamplingParams& params() const { return params_; }
  // The random sequence Sample draws from. Speculative sampling in the
  // serving engine draws its drafts and verifications from it too, so that a
  // sequence has one seeded stream (two streams from one seed would be
  // correlated).
  Xoshiro256& rng() { return rng_; }
  // The candidates of the last non-greedy draw after all filters, with
  // temperature-scaled logits, in the order the draw walked them. Empty after a
  // greedy call.
  std::span<const Candidate> last_candidates() const { return {candidates_.data(), last_size_}; }

 private:
  void ApplyPenalties(std::span<float> logits);
  // The chain's filters and temperature on a copy of `logits`: the candidates
  // left. `add_bias`: the logit bias is added first (Probabilities; Sample
  // biases the row itself).
  std::span<const Candidate> Filter(std::span<const float> logits, bool add_bias);
  // Draws from softmax(c.logit) with one random number.
  int32_t Draw(std::span<const Candidate> c);

  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<int32_t> history_;       // [repeat_last_n] ring buffer of accepted tokens
  size_t history_size_ = 0;            // valid entries
  size_t history_next_ = 0;            // where the next token goes
  std::vector<int32_t> counts_;        // [V] scratch, all zero between calls
  std::vector<Candidate> candidates_;  // [V]
  std::vector<double> weights_;        // [V] scratch for the draw
  size_t last_size_ = 0;
};

}  // namespace dsv4

#endif  // DSV4_SAMPLING_SAMPLER_H_
