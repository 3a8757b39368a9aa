// The DeepSeek-V4 lightning indexer (see indexer.h), in the order of the
// reference `Indexer.forward`.
#include "model/deepseek_v4/indexer.h"

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/attention.h"  // RopeFrequencies
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {

void IndexerForward(ThreadPool& pool, const DeepSeekV4Config& c, const IndexerWeights& w,
                    const RopeFrequencies& rope, const NumericsOptions& opts,
                    const Tracer& trace, int64_t layer, const float* x, const float* qr,
                    int64_t n_tokens, int64_t pos0, CompressorState& keys, IndexerScratch& s,
                    int32_t* top) {
  const int64_t T = n_tokens, IH = c.index_n_heads, ID = c.index_head_dim;
  const int64_t R = c.qk_rope_head_dim, k = c.index_topk, r = keys.ratio;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // ---- Index keys: the indexer's own compressor (Hadamard-rotated entries) ----
  CompressorAppend(pool, w.compressor, CompressorKind::kIndexer, rope, R, opts, eps, x, T, pos0,
                   keys, s.compressor);
  const int64_t n_end = keys.n_entries();  // = (pos0 + T) div r
  trace("attn.indexer_kv", layer, keys.entries.data(), {n_end, ID});

  // ---- Index queries: qI = wq_b · qr -> [T, IH, ID], RoPE, Hadamard, (FP4 sim) ----
  if (static_cast<int64_t>(s.q.size()) < T * IH * ID) s.q.resize(T * IH * ID);
  float* q = s.q.data();
  Linear(pool, q, LinearInput(qr, T, w.wq_b, opts, s.act), w.wq_b, T);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < IH; ++h) {
      float* qh = q + (t * IH + h) * ID;
      rope.Rotate(qh + ID - R, pos0 + t, /*inverse=*/false);
      HadamardRotate(qh, ID);
      if (opts.index_quant) ops::ref::QuantizeDequantizeFp4(qh, ID, 32);
    }
  }

  // ---- Head weights: w = weights_proj · x · ID^−½ · IH^−½ ----
  if (static_cast<int64_t>(s.head_weight.size()) < T * IH) s.head_weight.resize(T * IH);
  float* hw = s.head_weight.data();  // [T, IH]
  ops::MatMul(pool, hw, x, w.weights_proj, T);
  const float scale = static_cast<float>(std::pow(static_cast<double>(ID), -0.5) *
                                         std::pow(static_cast<double>(IH), -0.5));
  for (int64_t i = 0; i < T * IH; ++i) hw[i] *= scale;

  // ---- Scores over the visible entries and top-k ----
  if (static_cast<int64_t>(s.scores.size()) < n_end) s.scores.resize(n_end);
  std::vector<float> traced;  // [T, n_end], only when tracing
  if (trace.on()) traced.assign(T * n_end, -INFINITY);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos0 + t;
    const int64_t n_visible = (p + 1) / r;  // entry s is complete once token (s+1)·r − 1 is in
    float* sc = s.scores.data();
    for (int64_t e = 0; e < n_visible; ++e) {
      const float* key = keys.entry(e);
      float acc = 0.0f;
      for (int64_t h = 0; h < IH; ++h) {
        const float dot = ops::Dot(q + (t * IH + h) * ID, key, ID);
        acc += std::max(dot, 0.0f) * hw[t * IH + h];
      }
      sc[e] = acc;
    }
    if (!traced.empty()) std::copy_n(sc, n_visible, traced.data() + t * n_end);
    int32_t* row = top + t * k;
    const int64_t n_pick = std::min(k, n_visible);
    if (n_pick > 0) ops::ref::TopK(sc, n_visible, n_pick, row);
    std::fill(row + n_pick, row + k, -1);
  }
  if (trace.on()) {
    trace("attn.indexer_scores", layer, traced.data(), {T, n_end});
    std::vector<float> picks(top, top + T * k);
    trace("attn.indexer_topk", layer, picks.data(), {T, k});
  }
}

}  // namespace dsv4::deepseek_v4
