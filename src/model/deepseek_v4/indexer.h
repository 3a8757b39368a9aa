// The DeepSeek-V4 lightning indexer (CSA layers): picks, for every query, the
// top-k compressed entries it attends to. Index keys come from the indexer's
// own overlapping compressor (width ID, Hadamard-rotated); index queries are
// a low-rank projection of the attention's qr, rotated the same way; the score
// of entry s is Σ_h w_h · ReLU(q_h · K_s) with per-head weights from x.
//
// Source: specs/deepseek-v4.md §4.5 (reference `Indexer`), §11 item 13.
//
// Dimensions: T tokens in a call, D hidden, Q q_lora_rank, IH index heads,
// ID index head dim, R rope dims (the last R of ID), n compressed entries,
// k = index_topk.
#ifndef DSV4_MODEL_DEEPSEEK_V4_INDEXER_H_
#define DSV4_MODEL_DEEPSEEK_V4_INDEXER_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/layer_context.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4 {

struct IndexerScratch {
  std::vector<float> q;            // [T, IH, ID]
  std::vector<float> head_weight;  // [T, IH]
  std::vector<float> dots;         // [Tb, IH, n] a block of queries' dots with every key
  std::vector<float> scores;       // [threads, n] one query's index scores per thread
  std::vector<int32_t> heap;       // [threads, k] top-k selection
  std::vector<int32_t> topk;       // one query's pooled top-k (ops::TopK)
  std::vector<float> act;          // activation-quant copies
  CompressorScratch compressor;
  LinearWeight weights_proj;  // the head weights' job weight (IndexerJobs)
};

// The indexer's products, as LinearJobs for the attention's pooled steps (valid
// while s lives), on n_rows rows:
// IndexerJobs: on the attention input x [n_rows, D], its compressor's k and g
// (CompressorJobs) and the head weights weights_proj · x into s.head_weight
// [n_rows, IH] (not yet scaled). Writes jobs[0 .. 3); returns 3.
int64_t IndexerJobs(const IndexerWeights& w, const float* x, int64_t n_rows, IndexerScratch& s,
                    LinearJob* jobs);
// IndexerQueryJob: the index queries wq_b · qr_in into s.q [n_rows, IH·ID];
// qr_in is LinearInput(qr) for w.wq_b. Writes *job; returns 1.
int64_t IndexerQueryJob(const IndexerWeights& w, const float* qr_in, int64_t n_rows,
                        IndexerScratch& s, LinearJob* job);

// After the jobs ran, for T tokens at positions pos0.. (rows row0 .. row0+T−1
// of the jobs' outputs): appends the index keys of the windows they complete
// to `keys`, then writes for each token t the entries it attends to: top[t, j]
// for j < k = index_topk, the ids of the top-min(k, visible) scores among the
// visible entries s < (p+1) div 4, best first; −1 pads the rest.
void IndexerForward(const LayerContext& ctx, const IndexerWeights& w, TokenRun run,
                    CompressorState& keys, IndexerScratch& s, int32_t* top);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_INDEXER_H_
