// Self-speculative greedy decoding with the model's draft head (see speculative.h).
#include "engine/speculative.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <vector>

#include "base/timer.h"
#include "model/draft.h"
#include "ops/vec_ops.h"
#include "sampling/speculative_sampling.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

// The greedy token (ops::Argmax: the lowest id among equal maxima, as the
// Sampler picks).
int32_t Greedy(const float* logits, int64_t n) {
  return static_cast<int32_t>(ops::Argmax(logits, n));
}

}  // namespace

DraftLengthController::DraftLengthController(int64_t max_k, int64_t explore_every)
    : max_k_(std::max<int64_t>(0, max_k)),
      explore_every_(std::max<int64_t>(1, explore_every)),
      verify_(max_k_ + 1, -1.0),
      tried_(max_k_ + 1, 0),
      kept_(max_k_ + 1, 0),
      rounds_by_k_(max_k_ + 1, 0) {}

double DraftLengthController::Acceptance(int64_t j) const {
  // A weak prior worth two drafts: 1/2 for the first draft, the previous
  // draft's rate for later ones (a length not tried yet borrows from the
  // shorter ones instead of looking worse than them).
  const double prior = j <= 1 ? 0.5 : Acceptance(j - 1);
  return (static_cast<double>(kept_[j]) + 2.0 * prior) / (static_cast<double>(tried_[j]) + 2.0);
}

double DraftLengthController::ExpectedTokens(int64_t k) const {
  double e = 1.0, run = 1.0;
  for (int64_t j = 1; j <= k; ++j) {
    run *= Acceptance(j);
    e += run;
  }
  return e;
}

double DraftLengthController::VerifySeconds(int64_t k) const {
  if (verify_[k] >= 0.0) return verify_[k];
  // Interpolate between the nearest measured lengths (the cost grows with k).
  int64_t lo = k, hi = k;
  while (lo >= 0 && verify_[lo] < 0.0) --lo;
  while (hi <= max_k_ && verify_[hi] < 0.0) ++hi;
  if (lo >= 0 && hi <= max_k_) {
    return verify_[lo] +
           (verify_[hi] - verify_[lo]) * static_cast<double>(k - lo) / static_cast<double>(hi - lo);
  }
  return lo >= 0 ? verify_[lo] : hi <= max_k_ ? verify_[hi] : -1.0;
}

int64_t DraftLengthController::Choose() {
  // First every length once, longest first.
  for (int64_t k = max_k_; k >= 0; --k) {
    if (verify_[k] < 0.0) return k;
  }
  int64_t best = 0;
  double best_rate = -1.0;
  for (int64_t k = 0; k <= max_k_; ++k) {
    const double t = VerifySeconds(k) + (k > 0 ? std::max(0.0, draft_seconds_) : 0.0);
    const double rate = t > 0.0 ? ExpectedTokens(k) / t : 0.0;
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  // Now and then a neighbour, so that its cost stays current.
  if (rounds_ % explore_every_ == explore_every_ - 1) {
    const int64_t up = std::min(max_k_, best + 1), down = std::max<int64_t>(0, best - 1);
    best = (rounds_ / explore_every_) % 2 == 0 ? up : down;
  }
  return best;
}

void DraftLengthController::Record(int64_t k, int64_t accepted, double draft_seconds,
                                   double verify_seconds) {
  ++rounds_;
  ++rounds_by_k_[k];
  constexpr double kKeep = 0.8;  // EMA weight of the history
  verify_[k] =
      verify_[k] < 0.0 ? verify_seconds : kKeep * verify_[k] + (1 - kKeep) * verify_seconds;
  if (k > 0) {
    draft_seconds_ =
        draft_seconds_ < 0.0 ? draft_seconds : kKeep * draft_seconds_ + (1 - kKeep) * draft_seconds;
  }
  // Draft j was offered when drafts < j were accepted.
  for (int64_t j = 1; j <= k && j <= accepted + 1; ++j) {
    ++tried_[j];
    if (j <= accepted) ++kept_[j];
  }
}

Result<SpeculativeOptions> ParseSpeculative(const std::string& spec) {
  SpeculativeOptions o;
  if (spec == "auto") {
    o.draft_tokens = kAutoMaxDrafts;
    o.adaptive = true;
    return o;
  }
  int64_t k = -1;
  const auto [end, ec] = std::from_chars(spec.data(), spec.data() + spec.size(), k);
  if (ec != std::errc() || end != spec.data() + spec.size() || k < 0 || k > 64) {
    return InvalidArgument("--speculative '" + spec + "' is not a draft count or auto",
                           "use --speculative K (0..64 drafts per round; 0 = off) or auto");
  }
  o.draft_tokens = k;
  return o;
}

Result<DraftModel*> DraftHead(LoadedModel& m) {
  DraftModel* drafter = m.model->draft_model();
  if (drafter == nullptr) {
    return Unimplemented(m.path +
                             ": speculative decoding needs a model with a draft head (a "
                             "DeepSeek-V4 checkpoint with its MTP layer or DSpark module, or a "
                             "DeepSeek-V4.1 one with its DSpark stages, mtp.*)",
                         "run without --speculative");
  }
  return drafter;
}

Result<SpeculativeStats> GenerateSpeculative(LoadedModel& m, std::span<const int32_t> prompt,
                                             const SpeculativeOptions& options,
                                             const TokenCallback& on_token) {
  Model& model = *m.model;
  ASSIGN_OR_RETURN(DraftModel * drafter, DraftHead(m));
  const SamplingParams& sp = options.sampling;
  RETURN_IF_ERROR(ValidateSamplingParams(sp));
  if (sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
    return InvalidArgument("speculative decoding takes no repeat/presence/frequency penalties",
                           "drop the penalties, or run without --speculative");
  }
  const bool sampling = sp.temperature > 0.0f;
  if (options.draft_tokens < 0) {
    return InvalidArgument(
        "speculative draft length " + std::to_string(options.draft_tokens) + " is negative",
        "use --speculative K with K ≥ 1 (0 = off)");
  }
  if (prompt.empty()) return InvalidArgument("empty prompt", "start the prompt with BOS");
  const ModelInfo& info = model.info();
  const int64_t ctx = info.max_context, V = info.vocab_size;
  if (static_cast<int64_t>(prompt.size()) >= ctx) {
    return InvalidArgument("prompt has " + std::to_string(prompt.size()) +
                               " tokens; the model's context is " + std::to_string(ctx),
                           "shorten the prompt");
  }
  int64_t k = options.draft_tokens;
  // DSpark drafts at most its block per round.
  if (drafter->max_drafts() > 0 && k > drafter->max_drafts()) k = drafter->max_drafts();
  DraftLengthController controller(k);
  // Caches sized for this request (as Generate's), not the model's context:
  // the prompt, the tokens to generate and one round's drafts.
  const int64_t cap =
      std::min<int64_t>(ctx, static_cast<int64_t>(prompt.size()) + options.max_tokens + k + 1);
  auto main = model.NewCache(cap);
  // No drafts (k = 0): the draft head never runs.
  std::unique_ptr<DraftSession> draft = k > 0 ? drafter->NewDraftSession(cap) : nullptr;
  std::vector<float> logits((k + 1) * V);
  // Sampling: the chain's distributions of the drafts (q) and of the target (π).
  Sampler sampler(sp);
  Xoshiro256 rng(sp.seed);
  std::vector<float> q(k * V), pi((k + 1) * V), residual;
  const DraftPick pick = [&](std::span<float> row, int64_t j) {
    const std::span<float> qj = std::span<float>(q).subspan(j * V, V);
    sampler.Probabilities(row, qj);
    return DrawFrom(qj, rng);
  };
  // The first token after the prompt, or after an accepted run: from π.
  const auto choose = [&](const float* row) {
    if (!sampling) return Greedy(row, V);
    sampler.Probabilities(std::span<const float>(row, V), std::span<float>(pi).first(V));
    return DrawFrom(std::span<const float>(pi).first(V), rng);
  };
  std::optional<StreamDecoder> decoder;
  if (m.tokenizer) decoder.emplace(*m.tokenizer, prompt.back());

  SpeculativeStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  Timer timer;
  for (size_t begin = 0; begin < prompt.size(); begin += options.prefill_chunk) {
    const size_t end = std::min(prompt.size(), begin + options.prefill_chunk);
    const std::span<const int32_t> chunk = prompt.subspan(begin, end - begin);
    RETURN_IF_ERROR(model.Forward(chunk, *main, std::span<float>(logits).first(V), false));
    if (draft) RETURN_IF_ERROR(draft->Observe(chunk, static_cast<int64_t>(chunk.size())));
  }
  stats.prefill_seconds = timer.Seconds();
  timer.Reset();

  int32_t x = choose(logits.data());  // the token at main position n
  std::vector<int32_t> verify;        // [x, d_1 .. d_k]
  stats.stop_reason = "length";
  // Emits one token; false when generation ends before or with it.
  auto emit = [&](int32_t id) {
    if (options.stop_at_eos && m.IsStop(id)) {
      stats.stop_reason = "eos";
      return false;
    }
    ++stats.generated_tokens;
    on_token(id, decoder ? decoder->Push(id) : std::string());
    return stats.generated_tokens < options.max_tokens;
  };
  while (options.max_tokens > 0) {
    if (!emit(x)) break;
    const int64_t n = main->length();  // x's position
    if (n >= cap) {                    // cap < ctx only when max_tokens ends generation first
      stats.stop_reason = "context";
      break;
    }
    const int64_t k_round = options.adaptive ? controller.Choose() : k;
    int64_t kr = std::clamp<int64_t>(
        std::min({k_round, options.max_tokens - stats.generated_tokens - 1, cap - n - 1}), 0, k);
    Timer round_timer;
    // ---- Draft up to kr tokens after x ----
    verify.assign(1 + kr, x);
    if (draft) {
      ASSIGN_OR_RETURN(kr, draft->Draft(x, std::span<int32_t>(verify).subspan(1),
                                        sampling ? pick : DraftPick()));
      verify.resize(1 + kr);
    }
    const double draft_seconds = round_timer.Seconds();
    if (kr > 0 && options.edit_drafts) {
      options.edit_drafts(n + 1, std::span<int32_t>(verify).subspan(1));
    }

    // ---- Verify all drafts in one batched forward ----
    const int64_t T = static_cast<int64_t>(verify.size());
    round_timer.Reset();
    RETURN_IF_ERROR(model.Forward(verify, *main, std::span<float>(logits).first(T * V), true));
    const double verify_seconds = round_timer.Seconds();
    int64_t a = 0;
    int32_t next = -1;
    if (sampling) {
      for (int64_t i = 0; i <= kr; ++i) {
        sampler.Probabilities(std::span<const float>(logits).subspan(i * V, V),
                              std::span<float>(pi).subspan(i * V, V));
      }
      const Verified v = VerifyDraftsLossless(
          std::span<const int32_t>(verify).subspan(1), std::span<const float>(q).first(kr * V),
          std::span<const float>(pi).first((kr + 1) * V), rng, residual);
      a = v.accepted;
      next = v.next;
    } else {
      while (a < kr && verify[a + 1] == Greedy(logits.data() + a * V, V)) ++a;
      next = Greedy(logits.data() + a * V, V);
    }
    ++stats.rounds;
    stats.drafted += kr;
    stats.accepted += a;
    if (options.adaptive && kr == k_round) controller.Record(kr, a, draft_seconds, verify_seconds);
    stats.chosen_k = kr;

    // ---- Roll back what the rejected drafts left ----
    if (a < kr) main->Truncate(n + 1 + a);
    if (draft) RETURN_IF_ERROR(draft->Observe(verify, a + 1));

    bool go_on = true;
    for (int64_t i = 1; i <= a && go_on; ++i) go_on = emit(verify[i]);
    if (!go_on) break;
    x = next;  // the bonus token
  }
  if (options.adaptive) {
    stats.rounds_by_k = controller.rounds_by_k();
    for (int64_t j = 0; j <= controller.max_k(); ++j) {
      stats.verify_seconds_by_k.push_back(controller.VerifySeconds(j));
    }
    stats.draft_seconds = controller.DraftSeconds();
  }
  const std::string tail = decoder ? decoder->Flush() : std::string();
  if (!tail.empty()) on_token(-1, tail);
  stats.decode_seconds = timer.Seconds();
  return stats;
}

}  // namespace dsv4
