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
#include <span>
#include <string>
#include <vector>

#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/weights.h"
#include "ops/matmul.h"
#include "tensor/dtype.h"

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

// The Markov loop of a draft block (spec §13.5), V4's and V4.1's alike: row j
// of out.logits (the shared head on the draft's output) gains the Markov bias
// W2 · W1[prev_j] (prev_0 = anchor, then the drafts), out.confidence[j] =
// w · [y_j ; e_j] with y [n_rows, D] the rows before the final norm, and
// out.tokens[j] = pick(row j). e: scratch. Errors name `who` and the row
// whose pick falls outside the vocabulary.
template <class Block, class Pick>
Status DSparkMarkovLoop(ThreadPool& pool, const DSparkWeights& d, int32_t anchor, int64_t n_rows,
                        int64_t D, int64_t V, const float* y, std::vector<float>& e,
                        const Pick& pick, Block& out, const char* who) {
  const int64_t r = d.markov_w1.sizes[1];
  e.resize(r);
  int32_t prev = anchor;
  for (int64_t j = 0; j < n_rows; ++j) {
    DequantizeRow(d.markov_w1.dtype, d.markov_w1[prev].data, r, e.data());
    float* bias = out.markov_bias.data() + j * V;
    ops::MatMul(pool, bias, e.data(), d.markov_w2, 1);  // [V] fp32
    float* row = out.logits.data() + j * V;
    for (int64_t v = 0; v < V; ++v) row[v] += bias[v];
    double conf = 0.0;  // no bias
    for (int64_t i = 0; i < D; ++i) conf += static_cast<double>(d.confidence[i]) * y[j * D + i];
    for (int64_t i = 0; i < r; ++i) conf += static_cast<double>(d.confidence[D + i]) * e[i];
    out.confidence[j] = static_cast<float>(conf);
    const int32_t next = pick(std::span<float>(row, V), j);
    if (next < 0 || next >= V) {
      return InvalidArgument(std::string(who) + " DSparkDraft: the pick of row " +
                             std::to_string(j) + " is token " + std::to_string(next) +
                             ", outside [0, " + std::to_string(V) + ")");
    }
    out.tokens[j] = next;
    prev = next;
  }
  return Status::Ok();
}

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_DSPARK_H_
