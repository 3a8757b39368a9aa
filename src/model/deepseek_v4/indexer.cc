// The DeepSeek-V4 lightning indexer (see indexer.h), in the order of the
// reference `Indexer.forward`.
#include "model/deepseek_v4/indexer.h"

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/rope.h"
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/topk.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {
namespace {

// Scratch budget of one block of query-entry dot products (floats).
constexpr int64_t kDotsBudget = int64_t{1} << 20;

}  // namespace

int64_t IndexerJobs(const IndexerWeights& w, const float* x, int64_t n_rows, IndexerScratch& s,
                    LinearJob* jobs) {
  const int64_t IH = w.weights_proj.sizes[0];
  if (static_cast<int64_t>(s.head_weight.size()) < n_rows * IH) s.head_weight.resize(n_rows * IH);
  CompressorJobs(w.compressor, x, n_rows, s.compressor, jobs);
  s.weights_proj =
      LinearWeight{.weight = w.weights_proj, .scale = {}, .format = LinearFormat::kDense};
  jobs[2] = {.w = &s.weights_proj, .x = x, .out = s.head_weight.data(), .n_tokens = n_rows};
  return 3;
}

int64_t IndexerQueryJob(const IndexerWeights& w, const float* qr_in, int64_t n_rows,
                        IndexerScratch& s, LinearJob* job) {
  const int64_t rows = w.wq_b.rows();  // IH·ID
  if (static_cast<int64_t>(s.q.size()) < n_rows * rows) s.q.resize(n_rows * rows);
  *job = {.w = &w.wq_b, .x = qr_in, .out = s.q.data(), .n_tokens = n_rows};
  return 1;
}

void IndexerForward(const LayerContext& ctx, const IndexerWeights& w, TokenRun run,
                    CompressorState& keys, IndexerScratch& s, int32_t* top) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const RopeFrequencies& rope = ctx.rope;
  const NumericsOptions& opts = ctx.numerics;
  const Tracer& trace = ctx.trace;
  const int64_t layer = ctx.plan.layer;
  const int64_t row0 = run.row0, n_tokens = run.n_tokens, pos0 = run.pos0;
  const int64_t T = n_tokens, IH = c.index_n_heads, ID = c.index_head_dim;
  const int64_t R = c.qk_rope_head_dim, k = c.index_topk, r = keys.ratio;

  // ---- Index keys: the indexer's own compressor (Hadamard-rotated entries) ----
  CompressorFinish(ctx, w.compressor, CompressorKind::kIndexer, run, keys, s.compressor);
  const int64_t n_end = keys.n_entries();  // = (pos0 + T) div r
  trace("attn.indexer_kv", layer, keys.entries.data(), {n_end, ID});

  // ---- Index queries: qI = wq_b · qr (IndexerQueryJob), RoPE, Hadamard, (FP4 sim) ----
  float* q = s.q.data() + row0 * IH * ID;
  pool.ParallelFor(T * IH, [&](int64_t i_begin, int64_t i_end, int) {
    RotationCache rot(rope);
    for (int64_t i = i_begin; i < i_end; ++i) {  // i = t · IH + h
      float* qh = q + i * ID;
      rot.Rotate(qh + ID - R, pos0 + i / IH, /*inverse=*/false);
      HadamardRotate(qh, ID);
      if (opts.index_quant) ops::QuantizeDequantizeFp4(qh, ID, 32);
    }
  });

  // ---- Head weights: w = weights_proj · x (IndexerJobs) · ID^−½ · IH^−½ ----
  float* hw = s.head_weight.data() + row0 * IH;  // [T, IH]
  const float scale = static_cast<float>(std::pow(static_cast<double>(ID), -0.5) *
                                         std::pow(static_cast<double>(IH), -0.5));
  for (int64_t i = 0; i < T * IH; ++i) hw[i] *= scale;

  // ---- Scores over the visible entries and top-k ----
  // For a block of Tb queries: dots[t, h, e] = qI[t, h] · K[e] as one GEMM
  // over the entries visible to the block's last query (the keys are the
  // "weight" rows), then I(t, e) = Σ_h w[t, h] · ReLU(dots[t, h, e]).
  const int64_t n_max = (pos0 + T) / r;  // = n_end
  const int64_t block = std::clamp<int64_t>(kDotsBudget / std::max<int64_t>(1, IH * n_max), 1, T);
  if (static_cast<int64_t>(s.dots.size()) < block * IH * n_max) s.dots.resize(block * IH * n_max);
  const int64_t n_threads = pool.size();
  if (static_cast<int64_t>(s.scores.size()) < n_threads * n_end) s.scores.resize(n_threads * n_end);
  if (static_cast<int64_t>(s.heap.size()) < n_threads * k) s.heap.resize(n_threads * k);
  // ops::TopK's scratch for the full k, so that it never grows as the
  // visible entries do.
  if (static_cast<int64_t>(s.topk.size()) < n_threads * (2 * k + 2)) {
    s.topk.resize(n_threads * (2 * k + 2));
  }
  std::vector<float> traced;  // [T, n_end], only when tracing
  if (trace.on()) traced.assign(T * n_end, -INFINITY);
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t tb = std::min(block, T - t0);
    const int64_t n_block = (pos0 + t0 + tb) / r;  // visible to the block's last query
    const float* dots = s.dots.data();             // [tb, IH, n_block]
    if (n_block > 0) {
      const TensorView keys_view =
          TensorView::Contiguous(keys.entries.data(), DType::kF32, {n_block, ID});
      ops::MatMul(pool, s.dots.data(), q + t0 * IH * ID, keys_view, tb * IH);
    }
    // Query i of the block: sc[e] = Σ_h w[t, h] · ReLU(dots[i, h, e]) for
    // entries [e0, e1), the heads in order.
    const auto score = [&](int64_t i, int64_t e0, int64_t e1, float* sc) {
      std::fill(sc + e0, sc + e1, 0.0f);
      for (int64_t h = 0; h < IH; ++h) {
        const float* d = dots + (i * IH + h) * n_block;
        const float wh = hw[(t0 + i) * IH + h];
        for (int64_t e = e0; e < e1; ++e) sc[e] += std::max(d[e], 0.0f) * wh;
      }
    };
    if (tb == 1) {
      // One query (a decoded token): its entries split over the pool, for
      // the scores and then the top-k (which is what grows with the context).
      const int64_t t = t0, n_visible = (pos0 + t + 1) / r;
      float* sc = s.scores.data();
      pool.ParallelFor(
          n_visible, [&](int64_t e0, int64_t e1, int) { score(0, e0, e1, sc); }, ops::kTopKGrain);
      if (!traced.empty()) std::copy_n(sc, n_visible, traced.data() + t * n_end);
      int32_t* row = top + t * k;
      const int64_t n_pick = std::min(k, n_visible);
      ops::TopK(pool, sc, n_visible, n_pick, row, s.topk);
      std::fill(row + n_pick, row + k, -1);
      continue;
    }
    // Per query (in parallel, per-thread buffers): scores, then top-k. Later
    // queries see more entries, so they go round-robin.
    pool.ParallelForStrided(tb, [&](int64_t i, int thread) {
      float* sc = s.scores.data() + thread * n_end;
      int32_t* heap = s.heap.data() + thread * k;
      const int64_t t = t0 + i, p = pos0 + t;
      const int64_t n_visible = (p + 1) / r;  // entry e is complete once token (e+1)·r − 1 is in
      score(i, 0, n_visible, sc);
      if (!traced.empty()) std::copy_n(sc, n_visible, traced.data() + t * n_end);
      int32_t* row = top + t * k;
      const int64_t n_pick = std::min(k, n_visible);
      ops::TopKRange(sc, 0, n_visible, n_pick, heap, row);
      std::fill(row + n_pick, row + k, -1);
    });
  }
  if (trace.on()) {
    trace("attn.indexer_scores", layer, traced.data(), {T, n_end});
    std::vector<float> picks(top, top + T * k);
    trace("attn.indexer_topk", layer, picks.data(), {T, k});
  }
}

}  // namespace dsv4::deepseek_v4
