// Generation with self-speculative decoding through the model's draft head
// (model/draft.h; DeepSeek-V4: its NextN MTP layer, spec §6.3, or its DSpark
// module, §13): each round the draft session drafts up to k tokens, the main
// model verifies them in one Forward of k+1 tokens, and the main cache and the
// draft session roll back past the rejected ones exactly.
//   - greedy (temperature 0): the longest prefix agreeing with the main
//     model's greedy choices is accepted, plus its next token; the emitted
//     tokens are those of Generate() with temperature 0;
//   - sampling (temperature > 0, top-k / top-p / min-p): drafts are drawn from
//     the sampler chain's distribution over the draft logits and verified by
//     lossless rejection sampling (sampling/speculative_sampling.h); the
//     emitted tokens follow the distribution of Generate()'s sampling.
// Penalties depend on the tokens before each position and are not supported.
//
// Round at main position n (tokens < n in the cache, x = the token at n):
//   draft:  DraftSession::Draft(x) → d_1 .. d_k
//   verify: Forward([x, d_1 .. d_k]) → greedy g_0 .. g_k
//   accept: a = longest prefix with d_{i+1} = g_i; emit x, d_1 .. d_a; next x = g_a
//   undo:   main cache → n + 1 + a tokens; DraftSession::Observe([x, d ..], a + 1)
#ifndef DSV4_ENGINE_SPECULATIVE_H_
#define DSV4_ENGINE_SPECULATIVE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/generate.h"
#include "engine/loader.h"

namespace dsv4 {

// Chooses each round's draft length k in [0, max] to maximise the expected
// tokens per second: from the measured time of a verification of k + 1
// tokens (and of a draft), and the running acceptance of draft j given that
// drafts < j were accepted, a round of k drafts yields
//   E(k) = 1 + Σ_{j ≤ k} Π_{i ≤ j} α_i  tokens in  t_draft·[k > 0] + t_verify(k).
// Every k is measured once first; then the best k, with a neighbour re-timed
// every `explore_every` rounds (the machine's speed drifts).
class DraftLengthController {
 public:
  explicit DraftLengthController(int64_t max_k, int64_t explore_every = 16);
  int64_t Choose();
  // After a round: its k, drafts accepted, and the times of its draft and verification.
  void Record(int64_t k, int64_t accepted, double draft_seconds, double verify_seconds);
  double ExpectedTokens(int64_t k) const;
  // Seconds of a verification of k + 1 tokens (measured, else interpolated); < 0: unknown.
  double VerifySeconds(int64_t k) const;
  double DraftSeconds() const { return draft_seconds_; }
  double Acceptance(int64_t j) const;  // α_j, j ≥ 1
  int64_t max_k() const { return max_k_; }
  const std::vector<int64_t>& rounds_by_k() const { return rounds_by_k_; }

 private:
  int64_t max_k_, explore_every_, rounds_ = 0;
  std::vector<double> verify_;         // [max_k + 1] EMA of seconds; < 0 unmeasured
  std::vector<int64_t> tried_, kept_;  // [max_k + 1]: draft j offered / accepted
  std::vector<int64_t> rounds_by_k_;
  double draft_seconds_ = -1.0;
};

struct SpeculativeOptions {
  int64_t draft_tokens = 2;  // k drafts per round (adaptive: the most); 0 = plain decoding
  bool adaptive = false;     // k chosen per round in [0, draft_tokens] (DraftLengthController)
  SamplingParams sampling{.temperature = 0.0f};  // temperature 0: greedy; no penalties
  int64_t max_tokens = 256;                      // tokens generated after the prompt
  bool stop_at_eos = true;                       // as GenerateOptions
  int64_t prefill_chunk = 512;                   // prompt tokens per Forward call
  // Tests only: called with the drafts of each round (for main positions
  // n+1 ..) before verification, and may change them.
  std::function<void(int64_t position, std::span<int32_t> drafts)> edit_drafts = nullptr;
};

struct SpeculativeStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::string stop_reason;  // "length", "eos", "context"
  int64_t rounds = 0;       // main-model decode forwards (verifications)
  int64_t drafted = 0;      // draft tokens verified
  int64_t accepted = 0;     // of them accepted
  // adaptive: rounds run with each k, and the controller's last estimates
  std::vector<int64_t> rounds_by_k;
  std::vector<double> verify_seconds_by_k;  // one verification of k + 1 tokens
  double draft_seconds = 0.0;               // one draft call
  int64_t chosen_k = -1;                    // the k of the last round
  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
};

// Options with speculation off (0 drafts per round).
inline SpeculativeOptions NoSpeculation() {
  SpeculativeOptions o;
  o.draft_tokens = 0;
  return o;
}

// The command line's --speculative: "K" (K ≥ 0 drafts per round; 0 = off) or
// "auto" (adaptive, up to kAutoMaxDrafts — a DSpark module's block caps it).
inline constexpr int64_t kAutoMaxDrafts = 8;
Result<SpeculativeOptions> ParseSpeculative(const std::string& spec);

// The model's draft head, or Unimplemented naming the model and the hint to
// run without --speculative (dsv4 run and dsv4 serve give the same error).
Result<DraftModel*> DraftHead(LoadedModel& m);

// Prefills `prompt` (non-empty; include BOS yourself) and decodes greedily
// with speculation. Errors: a model without a draft head (a DeepSeek-V4
// checkpoint without MTP weights, any other model); k < 0; the prompt does not
// fit the context.
Result<SpeculativeStats> GenerateSpeculative(LoadedModel& m, std::span<const int32_t> prompt,
                                             const SpeculativeOptions& options,
                                             const TokenCallback& on_token);

}  // namespace dsv4

#endif  // DSV4_ENGINE_SPECULATIVE_H_
