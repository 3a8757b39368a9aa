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

#include "base/status.h"
#include "engine/generate.h"
#include "engine/loader.h"

namespace dsv4 {

struct SpeculativeOptions {
  int64_t draft_tokens = 2;                      // k drafts per round; 0 = plain decoding
  SamplingParams sampling{.temperature = 0.0f};  // temperature 0: greedy; no penalties
  int64_t max_tokens = 256;                      // tokens generated after the prompt
  bool stop_at_eos = true;                       // as GenerateOptions
  int64_t prefill_chunk = 512;                   // prompt tokens per Forward call
  // Tests only: called with the drafts of each round (for main positions
  // n+1 ..) before verification, and may change them.
  std::function<void(int64_t position, std::span<int32_t> drafts)> edit_drafts;
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
  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
};

// Prefills `prompt` (non-empty; include BOS yourself) and decodes greedily
// with speculation. Errors: a model without a draft head (a DeepSeek-V4
// checkpoint without MTP weights, any other model); k < 0; the prompt does not
// fit the context.
Result<SpeculativeStats> GenerateSpeculative(LoadedModel& m, std::span<const int32_t> prompt,
                                             const SpeculativeOptions& options,
                                             const TokenCallback& on_token);

}  // namespace dsv4

#endif  // DSV4_ENGINE_SPECULATIVE_H_
