// Self-speculative greedy decoding with the model's draft head (see speculative.h).
#include "engine/speculative.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/timer.h"
#include "model/draft.h"
#include "sampling/speculative_sampling.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

// Greedy choice with the Sampler's tie rule: the lowest id among equal maxima.
int32_t Greedy(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

Result<SpeculativeStats> GenerateSpeculative(LoadedModel& m, std::span<const int32_t> prompt,
                                             const SpeculativeOptions& options,
                                             const TokenCallback& on_token) {
  Model& model = *m.model;
  DraftModel* drafter = model.draft_model();
  if (drafter == nullptr) {
    return Unimplemented(m.path +
                             ": speculative decoding needs a model with a draft head (a "
                             "DeepSeek-V4 checkpoint with its MTP layer, mtp.0.*)",
                         "run without --speculative");
  }
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
  const int64_t k = options.draft_tokens;
  auto main = model.NewCache(ctx);
  // No drafts (k = 0): the draft head never runs.
  std::unique_ptr<DraftSession> draft = k > 0 ? drafter->NewDraftSession(ctx) : nullptr;
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
    if (n >= ctx) {
      stats.stop_reason = "context";
      break;
    }
    int64_t kr = std::clamp<int64_t>(
        std::min({k, options.max_tokens - stats.generated_tokens - 1, ctx - n - 1}), 0, k);
    // ---- Draft up to kr tokens after x ----
    verify.assign(1 + kr, x);
    if (draft) {
      ASSIGN_OR_RETURN(kr, draft->Draft(x, std::span<int32_t>(verify).subspan(1),
                                        sampling ? pick : DraftPick()));
      verify.resize(1 + kr);
    }
    if (kr > 0 && options.edit_drafts) {
      options.edit_drafts(n + 1, std::span<int32_t>(verify).subspan(1));
    }

    // ---- Verify all drafts in one batched forward ----
    const int64_t T = static_cast<int64_t>(verify.size());
    RETURN_IF_ERROR(model.Forward(verify, *main, std::span<float>(logits).first(T * V), true));
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

    // ---- Roll back what the rejected drafts left ----
    if (a < kr) main->Truncate(n + 1 + a);
    if (draft) RETURN_IF_ERROR(draft->Observe(verify, a + 1));

    bool go_on = true;
    for (int64_t i = 1; i <= a && go_on; ++i) go_on = emit(verify[i]);
    if (!go_on) break;
    x = next;  // the bonus token
  }
  const std::string tail = decoder ? decoder->Flush() : std::string();
  if (!tail.empty()) on_token(-1, tail);
  stats.decode_seconds = timer.Seconds();
  return stats;
}

}  // namespace dsv4
