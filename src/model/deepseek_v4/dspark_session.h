// DSpark as a draft head (model/draft.h; spec §13.7), for DeepSeek-V4's and
// V4.1's models alike: Observe feeds the committed positions' target features
// to the stages' rings, Draft runs one block after the anchor (the token the
// main model runs next) and proposes its first drafts.size() tokens.
//
// The model M provides: config(), last_features(entry) [T, nT·D],
// NewMtpCache(max_tokens) (the stages' rings), DSparkObserve(features,
// cache), DSparkDraft(anchor, cache, pick, block, rows), and the types
// M::DSparkBlock, M::DraftPick.
#ifndef DSV4_MODEL_DEEPSEEK_V4_DSPARK_SESSION_H_
#define DSV4_MODEL_DEEPSEEK_V4_DSPARK_SESSION_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/draft.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

// Greedy choice with the Sampler's tie rule: the lowest id among equal maxima.
inline int32_t GreedyDraft(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

template <class M>
class DSparkDraftSession final : public DraftSession {
 public:
  DSparkDraftSession(M& model, int64_t max_tokens)
      : model_(model), cache_(model.NewMtpCache(max_tokens)) {}

  Status Observe(std::span<const int32_t> tokens, int64_t kept, int64_t entry) override {
    const int64_t T = static_cast<int64_t>(tokens.size());
    if (T == 0 || kept < 1 || kept > T) {
      return InvalidArgument("DSpark draft: Observe(" + std::to_string(T) + " tokens, kept " +
                             std::to_string(kept) + ")");
    }
    const std::span<const float> f = model_.last_features(entry);  // [T, nT·D]
    const int64_t row = static_cast<int64_t>(model_.config().dspark_target_layer_ids.size()) *
                        model_.config().hidden_size;
    if (static_cast<int64_t>(f.size()) != T * row) {
      return InvalidArgument("DSpark draft: entry " + std::to_string(entry) +
                                 " of the main model's last Forward did not run these " +
                                 std::to_string(T) + " tokens",
                             "call Observe right after the sequence's Forward");
    }
    return model_.DSparkObserve(f.first(kept * row), *cache_);
  }

  Result<int64_t> Draft(int32_t next, std::span<int32_t> drafts, const DraftPick& pick) override {
    const int64_t k =
        std::min<int64_t>(static_cast<int64_t>(drafts.size()), model_.config().dspark_block_size);
    if (k == 0) return int64_t{0};
    const typename M::DraftPick row_pick = [&](std::span<float> row, int64_t j) {
      return pick ? pick(row, j) : GreedyDraft(row);
    };
    RETURN_IF_ERROR(model_.DSparkDraft(next, *cache_, row_pick, block_, k));
    std::copy_n(block_.tokens.begin(), k, drafts.begin());
    return k;
  }

 private:
  M& model_;
  std::unique_ptr<SequenceCache> cache_;
  typename M::DSparkBlock block_;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_DSPARK_SESSION_H_
