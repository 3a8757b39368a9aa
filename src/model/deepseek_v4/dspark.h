// DSpark's attention (spec §13.5): a draft stage attends, from each of the B
// block rows (the anchor and B−1 noise tokens at positions p+1 .. p+B), to
// its ring of main_kv rows — one per committed position, made from the main
// model's target features — and to all B block rows (no causal mask inside
// the block). The projections and the grouped output are the window
// attention's (AttentionProject, AttentionOutput); these are the parts that
// differ.
//
// Dimensions: B block rows, n positions, D hidden, H heads, A head_dim,
// R rope dims, W window.
#ifndef DSV4_MODEL_DEEPSEEK_V4_DSPARK_H_
#define DSV4_MODEL_DEEPSEEK_V4_DSPARK_H_

#include <cstdint>

#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

// The ring rows of positions pos0 .. pos0+n−1 of one stage: main_kv =
// kv_norm(wkv · main_x), RoPE at each position, the kv FP8 simulation —
// appended to `ring`. main_x: [n, D]; kv: scratch [n, A].
void DSparkRingRows(const LayerContext& ctx, const AttentionWeights& w, const float* main_x,
                    int64_t n, int64_t pos0, RowHistory& ring, std::vector<float>& kv,
                    std::vector<float>& act);

// After AttentionProject over the B block rows: norms and RoPE on s.q and
// s.kv at positions p+1 .., then each row's attention over the ring rows of
// positions max(0, p−W+1) .. p (in ring-slot order, as the reference's index
// set) and the B block rows, with the sink, into s.o. The ring is not changed.
void DSparkAttentionCore(const LayerContext& ctx, const AttentionWeights& w, int64_t p,
                         int64_t n_rows, const RowHistory& ring, AttentionScratch& s);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_DSPARK_H_
