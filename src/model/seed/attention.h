// Attention of the seed family over a slotted KV cache (specs/seed-mechanisms.md §1.3):
//   S-016 GQA: q [nh, d], cached k/v [nkv, d]; query head h reads KV head h / (nh/nkv).
//   Standard: causal softmax attention over every live cached key at pos <= p_i.
//   "CSA" (S-017…S-020, C-07…C-09), per query at position p_i:
//     local   = attention over keys with p_i - W_local   < p_j <= p_i
//     segment = attention over keys with p_i - W_segment < p_j <= p_i
//     global  = attention over the K = min(K_global, #keys <= p_i) keys of highest
//               importance among p_j <= p_i (ties: lower position) — "causal" mode;
//               in "seed" mode the selection covers every cached key, selected
//               queries attend to every selected key (not causal) and
//               unselected queries get 0 (C-08, parity only).
//     o = w_local·local + w_segment·segment + w_global·global  (per head, before o_proj).
// Keys are cached with the standard rotation; with segmented RoPE each query
// head adds its own segment phase to the keys it reads (rope.h). Evicted slots
// (SemanticKVPruner) are simply not in the live list: positions are never renumbered.
#ifndef DSV4_MODEL_SEED_ATTENTION_H_
#define DSV4_MODEL_SEED_ATTENTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "model/seed/config.h"
#include "model/seed/rope.h"

namespace dsv4::seed {

// The live keys of one layer, in position order.
struct KvView {
  const float* k = nullptr;           // [slots, nkv·d], rotated (standard angles)
  const float* v = nullptr;           // [slots, nkv·d]
  const float* importance = nullptr;  // [slots] (CSA global branch; may be null otherwise)
  const int64_t* slot_pos = nullptr;  // [slots] position held by each slot
  std::span<const int32_t> live;      // live slots sorted by position
};

// C-08, csa.global_mode resolved at load (SeedLayerPlan): "causal" selects
// among the keys at or before each query; "seed" over the whole cache, not causal.
enum class CsaGlobal { kCausal, kSeed };

struct AttnShape {
  int64_t n_heads = 0;   // nh
  int64_t n_kv = 0;      // nkv
  int64_t head_dim = 0;  // d
};

// Scratch reused across calls (no per-token allocation once grown). Reserve
// sizes it for a cache of `slots` keys and heads of `head_dim` dims, so a
// decode step that grows the context by one key allocates nothing.
struct AttnScratch {
  std::vector<int32_t> eligible;  // slots with pos <= p_i
  std::vector<int32_t> order;     // importance selection
  std::vector<uint8_t> in_global, local, segment;
  std::vector<float> scores, probs, krot;
  void Reserve(int64_t slots, int64_t head_dim);
};

// One query token at position `pos` with q [nh, d] already rotated (with its
// segment phase); writes o [nh·d]. `csa` null: standard causal attention;
// `global` is csa->global_mode as resolved at load.
// `seed_selected` (CsaGlobal::kSeed only): the slots selected over the whole
// cache, sorted by position; `query_selected` says whether this query is one of them.
// `branch_weights` override csa->branch_weights (residual_layernorm uses 1, 1, 1).
void Attend(const AttnShape& shape, const RopeParams& rope, const float* shift,
            const CsaConfig* csa, CsaGlobal global, const double* branch_weights, const KvView& kv,
            const float* q, int64_t pos, std::span<const int32_t> seed_selected,
            bool query_selected, float* out, AttnScratch& scratch);

// The top-K (K = min(k, candidates)) slots by importance among `candidates`,
// ties to the lower position; returned sorted by position.
std::vector<int32_t> SelectByImportance(std::span<const int32_t> candidates,
                                        const float* importance, const int64_t* slot_pos,
                                        int64_t k);
// The same into `out` (reused; no allocation once its capacity suffices).
void SelectByImportance(std::span<const int32_t> candidates, const float* importance,
                        const int64_t* slot_pos, int64_t k, std::vector<int32_t>& out);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_ATTENTION_H_
