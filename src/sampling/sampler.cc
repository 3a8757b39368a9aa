// Sampler chain (see sampler.h): penalties, top-k, top-p, min-p, temperature,
// and a seeded draw.
#include "sampling/sampler.h"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace dsv4 {

Status ValidateSamplingParams(const SamplingParams& p) {
  const auto bad = [](std::string_view field, double value, std::string_view want) {
    return InvalidArgument(fmt::format("sampling parameter {} = {} is out of range", field, value),
                           fmt::format("{} must be {}", field, want));
  };
  if (!std::isfinite(p.temperature))
    return bad("temperature", p.temperature, "finite (<= 0: greedy)");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "in [0, 1] (1: off)");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "in [0, 1] (0: off)");
  if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f)) {
    return bad("repeat_penalty", p.repeat_penalty, "finite and > 0 (1: off)");
  }
  if (p.repeat_last_n < 0 || p.repeat_last_n > kMaxRepeatLastN) {
    return bad("repeat_last_n", p.repeat_last_n,
               fmt::format("in [0, {}] (0: off; for llama.cpp's -1 pass the context length)",
                           kMaxRepeatLastN));
  }
  if (!std::isfinite(p.presence_penalty))
    return bad("presence_penalty", p.presence_penalty, "finite");
  if (!std::isfinite(p.frequency_penalty)) {
    return bad("frequency_penalty", p.frequency_penalty, "finite");
  }
  for (const auto& [id, amount] : p.logit_bias) {
    if (id < 0) return bad("logit_bias token", id, "a token id >= 0");
    if (!std::isfinite(amount)) return bad("logit_bias amount", amount, "finite");
  }
  return Status::Ok();
}

// ---- xoshiro256** -----------------------------------------------------------

namespace {
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (uint64_t& word : s_) word = SplitMix64(&seed);
}

Xoshiro256 Xoshiro256::FromState(const std::array<uint64_t, 4>& state) {
  CHECK(state[0] != 0 || state[1] != 0 || state[2] != 0 || state[3] != 0,
        "xoshiro256** state must not be all zero");
  Xoshiro256 rng;
  rng.s_ = state;
  return rng;
}

uint64_t Xoshiro256::Next() {
  const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

double Xoshiro256::NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

// ---- stages -----------------------------------------------------------------

namespace {
bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
}  // namespace

void SortCandidates(std::span<Candidate> c) { std::sort(c.begin(), c.end(), Before); }

size_t ApplyTopK(std::span<Candidate> c, int32_t k) {
  if (k <= 0) return c.size();
  const size_t keep = std::min(c.size(), static_cast<size_t>(k));
  if (keep < c.size()) {
    std::nth_element(c.begin(), c.begin() + static_cast<ptrdiff_t>(keep), c.end(), Before);
  }
  std::sort(c.begin(), c.begin() + static_cast<ptrdiff_t>(keep), Before);
  return keep;
}

size_t ApplyTopP(std::span<const Candidate> c, float p) {
  if (p >= 1.0f || c.empty()) return c.size();
  const float max = c[0].logit;
  if (!std::isfinite(max)) return c.size();  // Draw handles all -inf / +inf
  double total = 0.0;
  for (const Candidate& x : c) total += std::exp(static_cast<double>(x.logit - max));
  double mass = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    mass += std::exp(static_cast<double>(c[i].logit - max)) / total;
    if (mass >= p) return i + 1;
  }
  return c.size();
}

size_t ApplyMinP(std::span<Candidate> c, float p) {
  if (p <= 0.0f || c.empty()) return c.size();
  float max = -std::numeric_limits<float>::infinity();
  for (const Candidate& x : c) max = std::max(max, x.logit);
  if (!std::isfinite(max)) return c.size();
  const float threshold = max + std::log(p);
  size_t kept = 0;
  for (const Candidate& x : c) {
    if (x.logit >= threshold) c[kept++] = x;
  }
  return kept;
}

// ---- Sampler ----------------------------------------------------------------

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  const Status status = ValidateSamplingParams(params);
  CHECK(status.ok(), "%s", status.ToString().c_str());
  history_.resize(static_cast<size_t>(params.repeat_last_n));
}

void Sampler::Accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_next_] = token;
  history_next_ = (history_next_ + 1) % history_.size();
  history_size_ = std::min(history_size_ + 1, history_.size());
}

void Sampler::Reset() {
  history_size_ = 0;
  history_next_ = 0;
  rng_ = Xoshiro256(params_.seed);
  last_size_ = 0;
}

void Sampler::ApplyPenalties(std::span<float> logits) {
  const SamplingParams& p = params_;
  if (history_size_ == 0 ||
      (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)) {
    return;
  }
  // The window is the whole ring once it is full, else its first history_size_ slots.
  const std::span<const int32_t> window(history_.data(), history_size_);
  const auto in_range = [&](int32_t t) { return t >= 0 && static_cast<size_t>(t) < logits.size(); };
  for (const int32_t t : window) {
    if (in_range(t)) ++counts_[static_cast<size_t>(t)];
  }
  for (const int32_t t : window) {
    if (!in_range(t)) continue;
    int32_t& count = counts_[static_cast<size_t>(t)];
    if (count == 0) continue;  // this token was already penalised
    float& logit = logits[static_cast<size_t>(t)];
    if (logit <= 0.0f) {
      logit *= p.repeat_penalty;
    } else {
      logit /= p.repeat_penalty;
    }
    logit -= static_cast<float>(count) * p.frequency_penalty +
             (count > 0 ? 1.0f : 0.0f) * p.presence_penalty;
    count = 0;
  }
}

int32_t Sampler::Sample(std::span<float> logits) {
  CHECK(!logits.empty(), "Sample on an empty logit row");
  CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  const size_t n = logits.size();
  if (candidates_.size() < n) {  // the first call (or a larger vocab): the only allocation
    candidates_.resize(n);
    weights_.resize(n);
    counts_.resize(n, 0);
  }
  for (const auto& [id, amount] : params_.logit_bias) {
    if (static_cast<size_t>(id) < n) logits[static_cast<size_t>(id)] += amount;
  }
  ApplyPenalties(logits);
  last_size_ = 0;

  if (params_.temperature <= 0.0f) {
    size_t best = 0;
    float best_logit = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
      if (logits[i] > best_logit) {  // false for NaN; strict: the lowest id wins ties
        best = i;
        best_logit = logits[i];
      }
    }
    return static_cast<int32_t>(best);
  }

  const std::span<const Candidate> c = Filter(logits, false);
  last_size_ = c.size();
  return Draw(c);
}

std::span<const Candidate> Sampler::Filter(std::span<const float> logits, bool add_bias) {
  const size_t n = logits.size();
  for (size_t i = 0; i < n; ++i) {
    const float logit = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
    candidates_[i] = {logit, static_cast<int32_t>(i)};
  }
  if (add_bias) {
    for (const auto& [id, amount] : params_.logit_bias) {
      if (static_cast<size_t>(id) < n) candidates_[static_cast<size_t>(id)].logit += amount;
    }
  }
  std::span<Candidate> c(candidates_.data(), n);
  bool sorted = false;
  if (params_.top_k > 0) {
    c = c.first(ApplyTopK(c, params_.top_k));
    sorted = true;
  }
  if (params_.top_p < 1.0f) {
    if (!sorted) SortCandidates(c);
    sorted = true;
    c = c.first(ApplyTopP(c, params_.top_p));
  }
  if (params_.min_p > 0.0f) c = c.first(ApplyMinP(c, params_.min_p));
  for (Candidate& x : c) x.logit /= params_.temperature;
  return c;
}

void Sampler::Probabilities(std::span<const float> logits, std::span<float> probs) {
  CHECK(!logits.empty() && probs.size() == logits.size(), "Probabilities: sizes");
  CHECK(params_.temperature > 0.0f, "Probabilities of a greedy sampler");
  if (candidates_.size() < logits.size()) {
    candidates_.resize(logits.size());
    weights_.resize(logits.size());
    counts_.resize(logits.size(), 0);
  }
  const std::span<const Candidate> c = Filter(logits, true);
  std::fill(probs.begin(), probs.end(), 0.0f);
  float max = -std::numeric_limits<float>::infinity();
  for (const Candidate& x : c) max = std::max(max, x.logit);
  if (!std::isfinite(max)) {  // as Draw: all mass on the first of the maxima
    for (const Candidate& x : c) {
      if (x.logit == max) {
        probs[x.id] = 1.0f;
        return;
      }
    }
    probs[c[0].id] = 1.0f;
    return;
  }
  double total = 0.0;
  for (const Candidate& x : c) total += std::exp(static_cast<double>(x.logit - max));
  for (const Candidate& x : c) {
    probs[x.id] = static_cast<float>(std::exp(static_cast<double>(x.logit - max)) / total);
  }
}

int32_t Sampler::Draw(std::span<const Candidate> c) {
  CHECK(!c.empty());
  float max = -std::numeric_limits<float>::infinity();
  for (const Candidate& x : c) max = std::max(max, x.logit);
  if (!std::isfinite(max)) {
    // All -inf: the first candidate. Some +inf: the first of those.
    for (const Candidate& x : c) {
      if (x.logit == max) return x.id;
    }
    return c[0].id;
  }
  double total = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    weights_[i] = std::exp(static_cast<double>(c[i].logit - max));
    total += weights_[i];
  }
  const double target = rng_.NextDouble() * total;
  double cumulative = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (weights_[i] == 0.0) continue;
    cumulative += weights_[i];
    last_nonzero = i;
    if (cumulative > target) return c[i].id;
  }
  return c[last_nonzero].id;  // rounding: target == total
}

}  // namespace dsv4
