// The generate loop and the scoring loop, shared by the CLI and (later) the
// server's engine thread. Front ends call only engine/*.h.
#ifndef DSV4_ENGINE_GENERATE_H_
#define DSV4_ENGINE_GENERATE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/loader.h"
#include "sampling/sampler.h"

namespace dsv4 {

struct GenerateOptions {
  int64_t max_tokens = 256;  // tokens generated after the prompt
  SamplingParams sampling;
  bool stop_at_eos = true;      // stop when a stop id (LoadedModel::stop_ids) is sampled
  int64_t prefill_chunk = 512;  // prompt tokens per Forward call
  // llama.cpp's --prompt-cache FILE: the state saved in FILE is reused when
  // its tokens begin the prompt, and the prompt's state is saved there after
  // prefill (unless prompt_cache_ro). state_fingerprint guards the file
  // (StateFingerprint). Empty: none.
  std::string prompt_cache;
  bool prompt_cache_ro = false;
  uint64_t state_fingerprint = 0;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // of them, from the prompt cache
  int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::string stop_reason;  // "length", "eos", "context"
};

// Called once per generated token with its id and the text it completes
// (UTF-8-safe: may be empty while a multi-byte character is incomplete).
using TokenCallback = std::function<void(int32_t id, std::string_view text)>;

// Prefills `prompt` (which must be non-empty; include BOS yourself) and samples
// up to max_tokens tokens.
Result<GenerateStats> Generate(LoadedModel& m, std::span<const int32_t> prompt,
                               const GenerateOptions& options, const TokenCallback& on_token);

struct PerplexityResult {
  double nll = 0.0;    // mean negative log-likelihood, nats/token
  double ppl = 0.0;    // exp(nll)
  int64_t tokens = 0;  // predicted tokens
};

// Scores each document (token ids starting with BOS): every token after the
// first is predicted from those before it. Documents longer than the context
// are scored in windows of max_context tokens, each window after the first
// restarting from BOS followed by the next tokens.
Result<PerplexityResult> Perplexity(LoadedModel& m,
                                    const std::vector<std::vector<int32_t>>& documents);

// The k (≤ logits.size()) largest logits' ids, largest first; ties go to the
// lower id (`dsv4 logits`).
std::vector<int32_t> TopLogitIds(std::span<const float> logits, int64_t k);

// Splits `text` on `separator` and trims surrounding whitespace; empty
// documents are dropped.
std::vector<std::string> SplitDocuments(std::string_view text, std::string_view separator);

}  // namespace dsv4

#endif  // DSV4_ENGINE_GENERATE_H_
