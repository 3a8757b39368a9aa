// The MTP layer as a draft head (model/draft.h; spec §6.3): DeepSeekV4Model::
// NewDraftSession. The session pairs each main hidden state h_t ([C·D], the
// final residual streams of main position t) with the token x_{t+1} that
// followed it and feeds the pairs to the MTP layer, whose last row drafts the
// token after; further drafts chain the MTP's own output hidden state.
//
// Round at main position n (x = the token at n):
//   Draft(x, k):  pending (h_t, x_{t+1}) rows, the last with x → d_1;
//                 (its own output, d_{i−1}) → d_i for i = 2..k
//   Observe([x, d_1 .. d_k], a + 1): the MTP cache back to n (drafts 2.. were
//                 fed its own hidden states), the main model's true hidden
//                 states of n .. n + a pending for the next round.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/deepseek_v4/dspark_session.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

int32_t Greedy(std::span<const float> logits) { return GreedyDraft(logits); }

class MtpDraftSession final : public DraftSession {
 public:
  MtpDraftSession(DeepSeekV4Model& model, int64_t max_tokens)
      : model_(model),
        row_(model.config().hc_mult * model.config().hidden_size),
        cache_(model.NewMtpCache(max_tokens)),
        logits_(model.info().vocab_size),
        own_hidden_(row_) {}

  Status Observe(std::span<const int32_t> tokens, int64_t kept, int64_t entry) override {
    const int64_t T = static_cast<int64_t>(tokens.size());
    if (T == 0 || kept < 1 || kept > T) {
      return InvalidArgument("MTP draft: Observe(" + std::to_string(T) + " tokens, kept " +
                             std::to_string(kept) + ")");
    }
    const std::span<const float> h = model_.last_hidden(entry);  // [T, C·D]
    if (static_cast<int64_t>(h.size()) != T * row_) {
      return InvalidArgument(
          "MTP draft: entry " + std::to_string(entry) + " of the main model's last Forward ran " +
              std::to_string(h.size() / row_) + " tokens, not " + std::to_string(T),
          "call Observe right after the sequence's Forward");
    }
    const bool after_draft = drafted_ >= 0;
    if (drafted_ > 1) cache_->Truncate(chain_base_);
    drafted_ = -1;
    // tokens[0] follows the last pending row unless Draft consumed or recorded it.
    if (pending_rows() == static_cast<int64_t>(pend_next_.size()) + 1) {
      pend_next_.push_back(tokens[0]);
    }
    pend_hidden_.insert(pend_hidden_.end(), h.begin(), h.begin() + kept * row_);
    pend_next_.insert(pend_next_.end(), tokens.begin() + 1, tokens.begin() + kept);
    // Prefill (no draft outstanding): feed the complete pairs now, so the
    // pending rows stay one chunk's worth.
    if (!after_draft) RETURN_IF_ERROR(FeedPending(static_cast<int64_t>(pend_next_.size())));
    return Status::Ok();
  }

  Result<int64_t> Draft(int32_t next, std::span<int32_t> drafts, const DraftPick& pick) override {
    if (pending_rows() == static_cast<int64_t>(pend_next_.size()) + 1) pend_next_.push_back(next);
    drafted_ = 0;
    const int64_t k = static_cast<int64_t>(drafts.size());
    if (k == 0) return int64_t{0};
    // The pending rows (true main hidden states); the last drafts d_1.
    RETURN_IF_ERROR(FeedPending(static_cast<int64_t>(pend_next_.size())));
    chain_base_ = cache_->length();
    drafts[0] = pick ? pick(logits_, 0) : Greedy(logits_);
    for (int64_t i = 1; i < k; ++i) {
      const std::span<const float> own = model_.last_mtp_hidden();
      own_hidden_.assign(own.end() - row_, own.end());  // ForwardMtp overwrites its source
      const int32_t d[1] = {drafts[i - 1]};
      RETURN_IF_ERROR(model_.ForwardMtp(d, own_hidden_, *cache_, logits_, false));
      drafts[i] = pick ? pick(logits_, i) : Greedy(logits_);
    }
    drafted_ = k;
    return k;
  }

 private:
  int64_t pending_rows() const { return static_cast<int64_t>(pend_hidden_.size()) / row_; }

  // Runs the first n pending pairs through the MTP layer (logits_: the last
  // row's draft logits) and drops them.
  Status FeedPending(int64_t n) {
    if (n == 0) return Status::Ok();
    RETURN_IF_ERROR(model_.ForwardMtp(std::span<const int32_t>(pend_next_).first(n),
                                      std::span<const float>(pend_hidden_).first(n * row_), *cache_,
                                      logits_, false));
    pend_hidden_.erase(pend_hidden_.begin(), pend_hidden_.begin() + n * row_);
    pend_next_.erase(pend_next_.begin(), pend_next_.begin() + n);
    return Status::Ok();
  }

  DeepSeekV4Model& model_;
  const int64_t row_;  // C·D floats per hidden state
  std::unique_ptr<SequenceCache> cache_;
  std::vector<float> logits_;  // [V] the last MTP row's
  // Main hidden rows not fed yet [m, C·D] and the tokens that followed them
  // (m or m − 1: the last row may still wait for its token).
  std::vector<float> pend_hidden_;
  std::vector<int32_t> pend_next_;
  std::vector<float> own_hidden_;  // [C·D] the MTP's output, fed back for the next draft
  int64_t drafted_ = -1;           // drafts of the round awaiting Observe; -1: none
  int64_t chain_base_ = 0;         // the MTP cache's length before the chained drafts
};

}  // namespace

std::unique_ptr<DraftSession> DeepSeekV4Model::NewDraftSession(int64_t max_tokens) {
  if (has_dspark()) {
    return std::make_unique<DSparkDraftSession<DeepSeekV4Model>>(*this, max_tokens);
  }
  if (!has_mtp()) return nullptr;
  return std::make_unique<MtpDraftSession>(*this, max_tokens);
}

}  // namespace dsv4::deepseek_v4
