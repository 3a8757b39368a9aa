// The draft side of speculative decoding, as the engine sees it: a model with
// a draft head (DeepSeek-V4's MTP layer, spec §6.3; later its DSpark module,
// §13) drafts tokens from the sequence's committed state, the engine verifies
// them with one main-model Forward and rolls the main cache back past the
// rejected ones, and the draft session rolls its own state back to match.
//
// One round at main position n (the cache holds tokens < n, x is the token
// about to run at n):
//   session.Draft(x, drafts)           → d_1 .. d_m (m ≤ drafts.size())
//   model.Forward([x, d_1 .. d_m], cache, all logits)  → accept a of them
//   cache.Truncate(n + 1 + a)
//   session.Observe([x, d_1 .. d_m], a + 1)
// The prompt's prefill calls Observe(chunk, chunk.size()) after each chunk's
// Forward, with no Draft in between.
//
// Batched (the serving engine): the round's Forward is one entry of a
// Model::ForwardBatch over several sequences, and each sequence's session
// observes its own entry: Observe(tokens, kept, entry). A model with a draft
// head therefore keeps every entry's captured rows in its ForwardBatch (the
// default ForwardBatch, a loop over Forward, would keep only the last).
// Between the ForwardBatch and a session's Observe only other sessions'
// Observe calls may run, no Forward and no Draft.
#ifndef DSV4_MODEL_DRAFT_H_
#define DSV4_MODEL_DRAFT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "base/status.h"

namespace dsv4 {

// Chooses a draft token from its row of draft logits (speculative sampling
// draws it, and keeps the distribution it drew from).
using DraftPick = std::function<int32_t(std::span<float> logits, int64_t row)>;

// One sequence's draft state (its own caches, the main model's captured
// features not yet consumed).
class DraftSession {
 public:
  virtual ~DraftSession() = default;
  // The main model has just run `tokens` on this session's sequence — one
  // Forward on its cache, or entry `entry` of one ForwardBatch (entry 0 after
  // a Forward), no other Forward of the model since — and kept the first
  // `kept` of them (1 ≤ kept ≤ tokens.size(); the main cache was truncated
  // past the rest). Captures what drafting needs from that entry's rows (e.g.
  // hidden states) and rolls the draft state back past the dropped tokens.
  virtual Status Observe(std::span<const int32_t> tokens, int64_t kept, int64_t entry) = 0;
  // After a Forward.
  Status Observe(std::span<const int32_t> tokens, int64_t kept) {
    return Observe(tokens, kept, /*entry=*/0);
  }
  // Proposes up to drafts.size() tokens to follow `next` (the token the main
  // model runs next) into `drafts`; returns how many it wrote (a drafter may
  // stop early, e.g. on low confidence). drafts.size() == 0 only records
  // `next`. Each draft token is `pick`(that draft's logits row [V], its index)
  // — the row may be changed, e.g. turned into the distribution drawn from —
  // or, with an empty pick, the row's argmax (greedy).
  virtual Result<int64_t> Draft(int32_t next, std::span<int32_t> drafts, const DraftPick& pick) = 0;
};

// A model's draft head (Model::draft_model()).
class DraftModel {
 public:
  virtual ~DraftModel() = default;
  // What drafts ("mtp", "dspark"): logs and errors.
  virtual std::string_view draft_kind() const = 0;
  // The most tokens one Draft proposes (0: no limit but the caller's).
  virtual int64_t max_drafts() const { return 0; }
  // A session for one sequence of at most max_tokens tokens.
  virtual std::unique_ptr<DraftSession> NewDraftSession(int64_t max_tokens) = 0;
};

}  // namespace dsv4

#endif  // DSV4_MODEL_DRAFT_H_
