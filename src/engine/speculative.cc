// MTP self-speculative greedy decoding (see speculative.h).
#include "engine/speculative.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/timer.h"
#include "model/deepseek_v4/model.h"
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
  auto* model = dynamic_cast<DeepSeekV4Model*>(m.model.get());
  if (model == nullptr || !model->has_mtp()) {
    return Unimplemented(m.path +
                             ": speculative decoding needs a DeepSeek-V4 checkpoint with "
                             "its MTP layer (mtp.0.*)",
                         "run without --speculative");
  }
  if (options.draft_tokens < 0) {
    return InvalidArgument(
        "speculative draft length " + std::to_string(options.draft_tokens) + " is negative",
        "use --speculative K with K ≥ 1 (0 = off)");
  }
  if (prompt.empty()) return InvalidArgument("empty prompt", "start the prompt with BOS");
  const ModelInfo& info = model->info();
  const int64_t ctx = info.max_context, V = info.vocab_size;
  if (static_cast<int64_t>(prompt.size()) >= ctx) {
    return InvalidArgument("prompt has " + std::to_string(prompt.size()) +
                               " tokens; the model's context is " + std::to_string(ctx),
                           "shorten the prompt");
  }
  const int64_t k = options.draft_tokens;
  const int64_t row = model->config().hc_mult * model->config().hidden_size;  // C·D
  auto main = model->NewCache(ctx);
  auto mtp = model->NewMtpCache(ctx);
  std::vector<float> logits((k + 1) * V), mtp_logits(V);
  std::optional<StreamDecoder> decoder;
  if (m.tokenizer) decoder.emplace(*m.tokenizer, prompt.back());

  // MTP inputs not fed yet: main hidden rows h_t [m, C·D] and the tokens
  // x_{t+1} after them (the last one is the token about to be emitted).
  std::vector<float> pend_hidden;
  std::vector<int32_t> pend_next;

  SpeculativeStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  Timer timer;
  for (size_t begin = 0; begin < prompt.size(); begin += options.prefill_chunk) {
    const size_t end = std::min(prompt.size(), begin + options.prefill_chunk);
    RETURN_IF_ERROR(model->Forward(prompt.subspan(begin, end - begin), *main,
                                   std::span<float>(logits).first(V), false));
    if (k == 0) continue;  // no drafts: the MTP layer never runs
    const std::span<const float> h = model->last_hidden();
    pend_hidden.insert(pend_hidden.end(), h.begin(), h.end());
    pend_next.insert(pend_next.end(), prompt.begin() + begin + 1,
                     prompt.begin() + std::min(prompt.size(), end + 1));
    // Feed every row whose next token is known; the last waits for its token.
    const int64_t ready = static_cast<int64_t>(pend_next.size());
    if (ready > 0 && end < prompt.size()) {
      RETURN_IF_ERROR(model->ForwardMtp(std::span<const int32_t>(pend_next).first(ready),
                                        std::span<const float>(pend_hidden).first(ready * row),
                                        *mtp, mtp_logits, false));
      pend_hidden.erase(pend_hidden.begin(), pend_hidden.begin() + ready * row);
      pend_next.clear();
    }
  }
  stats.prefill_seconds = timer.Seconds();
  timer.Reset();

  int32_t x = Greedy(logits.data(), V);  // the token at main position n
  std::vector<int32_t> verify;           // [x, d_1 .. d_k]
  std::vector<float> own_hidden(row);    // [C·D] the MTP's output, fed back for the next draft
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
    const int64_t kr = std::clamp<int64_t>(
        std::min({k, options.max_tokens - stats.generated_tokens - 1, ctx - n - 1}), 0, k);
    if (k > 0) pend_next.push_back(x);
    verify.assign(1, x);
    if (kr > 0) {
      // ---- Draft: the pending rows (true main hidden states), then chain ----
      const int64_t rows = static_cast<int64_t>(pend_next.size());
      RETURN_IF_ERROR(model->ForwardMtp(pend_next,
                                        std::span<const float>(pend_hidden).first(rows * row), *mtp,
                                        mtp_logits, false));
      pend_hidden.clear();
      pend_next.clear();
      verify.push_back(Greedy(mtp_logits.data(), V));
      for (int64_t i = 1; i < kr; ++i) {
        const std::span<const float> own = model->last_mtp_hidden();
        own_hidden.assign(own.end() - row, own.end());  // ForwardMtp overwrites its source
        const int32_t d[1] = {verify.back()};
        RETURN_IF_ERROR(model->ForwardMtp(d, own_hidden, *mtp, mtp_logits, false));
        verify.push_back(Greedy(mtp_logits.data(), V));
      }
      if (options.edit_drafts) options.edit_drafts(n + 1, std::span<int32_t>(verify).subspan(1));
    }

    // ---- Verify all drafts in one batched forward ----
    const int64_t T = static_cast<int64_t>(verify.size());
    RETURN_IF_ERROR(model->Forward(verify, *main, std::span<float>(logits).first(T * V), true));
    int64_t a = 0;
    while (a < kr && verify[a + 1] == Greedy(logits.data() + a * V, V)) ++a;
    ++stats.rounds;
    stats.drafted += kr;
    stats.accepted += a;

    // ---- Roll back what the rejected drafts left, keep the true hidden states ----
    if (a < kr) main->Truncate(n + 1 + a);
    if (kr > 1) mtp->Truncate(n);  // drafts 2.. were fed the MTP's own hidden states
    if (k > 0) {
      const std::span<const float> h = model->last_hidden();
      pend_hidden.insert(pend_hidden.end(), h.begin(), h.begin() + (a + 1) * row);
      pend_next.insert(pend_next.end(), verify.begin() + 1, verify.begin() + 1 + a);
    }

    bool go_on = true;
    for (int64_t i = 1; i <= a && go_on; ++i) go_on = emit(verify[i]);
    if (!go_on) break;
    x = Greedy(logits.data() + a * V, V);  // the bonus token
  }
  const std::string tail = decoder ? decoder->Flush() : std::string();
  if (!tail.empty()) on_token(-1, tail);
  stats.decode_seconds = timer.Seconds();
  return stats;
}

}  // namespace dsv4
