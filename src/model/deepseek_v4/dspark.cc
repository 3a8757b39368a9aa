// DSpark attention (see dspark.h).
#include "model/deepseek_v4/dspark.h"

#include <algorithm>
#include <cmath>

#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {

void DSparkRingRows(const LayerContext& ctx, const AttentionWeights& w, const float* main_x,
                    int64_t n, int64_t pos0, RowHistory& ring, std::vector<float>& kv,
                    std::vector<float>& act) {
  const DeepSeekV4Config& c = ctx.config;
  const int64_t A = c.head_dim, R = c.qk_rope_head_dim, nope = A - R;
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (static_cast<int64_t>(kv.size()) < n * A) kv.resize(n * A);
  // ---- main_kv = kv_norm(wkv · main_x) -> [n, A] ----
  Linear(ctx.pool, kv.data(), LinearInput(ctx.pool, main_x, n, w.wkv, ctx.numerics, act), w.wkv, n);
  RotationCache rot(ctx.rope);
  for (int64_t t = 0; t < n; ++t) {
    float* row = kv.data() + t * A;
    RmsNorm(row, row, w.kv_norm.data(), A, eps);
    rot.Rotate(row + nope, pos0 + t, /*inverse=*/false);
    if (ctx.numerics.kv_quant) ops::QuantizeDequantizeFp8(row, nope, 64);
    std::copy_n(row, A, ring.Append(pos0 + t));
  }
  ctx.trace("dspark.main_kv", ctx.plan.layer, kv.data(), {n, A});
}

void DSparkAttentionCore(const LayerContext& ctx, const AttentionWeights& w, int64_t p,
                         int64_t n_rows, const RowHistory& ring, AttentionScratch& s) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const int64_t B = n_rows, H = c.num_attention_heads, A = c.head_dim;
  const int64_t R = c.qk_rope_head_dim, nope = A - R, W = c.sliding_window;
  const float eps = static_cast<float>(c.rms_norm_eps);
  CHECK(ring.end() == p + 1, "DSpark stage %lld: draft at position %lld, ring ends at %lld",
        static_cast<long long>(ctx.plan.layer), static_cast<long long>(p),
        static_cast<long long>(ring.end()));
  float* q = s.q.data();    // [B, H, A]
  float* kv = s.kv.data();  // [B, A]
  // Per-head unweighted RMS norm of q and RoPE; kv = kv_norm(wkv · x), RoPE,
  // FP8 simulation — as window attention, at the block positions p+1 ...
  pool.ParallelFor(B * (H + 1), [&](int64_t i_begin, int64_t i_end, int) {
    RotationCache rot(ctx.rope);
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t j = i / (H + 1), h = i % (H + 1), pos = p + 1 + j;
      if (h < H) {
        float* qh = q + (j * H + h) * A;
        RmsNorm(qh, qh, nullptr, A, eps);
        rot.Rotate(qh + nope, pos, /*inverse=*/false);
        continue;
      }
      float* kvj = kv + j * A;
      RmsNorm(kvj, kvj, w.kv_norm.data(), A, eps);
      rot.Rotate(kvj + nope, pos, /*inverse=*/false);
      if (ctx.numerics.kv_quant) ops::QuantizeDequantizeFp8(kvj, nope, 64);
    }
  });
  ctx.trace("attn.q", ctx.plan.layer, q, {B, H, A});
  ctx.trace("attn.kv", ctx.plan.layer, kv, {B, A});

  // The keys, the same for every block row: ring slot i (i < min(W, p+1))
  // holds the newest committed position ≡ i mod W, then the B block rows.
  const int64_t n_ring = std::min(W, p + 1), n_keys = n_ring + B;
  const int64_t n_threads = pool.size();
  if (static_cast<int64_t>(s.keys.size()) < n_threads * n_keys) s.keys.resize(n_threads * n_keys);
  if (static_cast<int64_t>(s.scores.size()) < n_threads * H * n_keys) {
    s.scores.resize(n_threads * H * n_keys);
  }
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(A));
  float* o = s.o.data();  // [B, H, A]
  pool.ParallelFor(B, [&](int64_t j_begin, int64_t j_end, int thread) {
    float* scores = s.scores.data() + thread * H * n_keys;
    const float** keys = s.keys.data() + thread * n_keys;
    for (int64_t i = 0; i < n_ring; ++i) keys[i] = ring.Row(p - ((p - i) % W));
    for (int64_t j = 0; j < B; ++j) keys[n_ring + j] = kv + j * A;
    RotationCache rot(ctx.rope);
    for (int64_t j = j_begin; j < j_end; ++j) {
      ops::DotMany(q + j * H * A, H, A, keys, n_keys, A, scores);
      for (int64_t h = 0; h < H; ++h) {
        ops::SoftmaxWithSink(scores + h * n_keys, n_keys, softmax_scale, w.attn_sink[h]);
      }
      float* oj = o + j * H * A;
      std::fill_n(oj, H * A, 0.0f);
      ops::AxpyMany(oj, H, A, scores, keys, n_keys, A);
      for (int64_t h = 0; h < H; ++h) rot.Rotate(oj + h * A + nope, p + 1 + j, /*inverse=*/true);
    }
  });
  ctx.trace("attn.o", ctx.plan.layer, o, {B, H, A});
}

}  // namespace dsv4::deepseek_v4
