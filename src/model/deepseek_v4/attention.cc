// DeepSeek-V4 sliding-window attention (see attention.h). One function, top to
// bottom in the order of the reference `Attention.forward`.
#include "model/deepseek_v4/attention.h"

#include <algorithm>
#include <cmath>

#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {

void AttentionState::Init(const DeepSeekV4Config& c, const LayerPlan& plan, int64_t history) {
  spec = plan.cache;
  const bool all = history == RollbackOptions::kAll;
  ring.Init(c.head_dim, all ? 0 : c.sliding_window + std::max<int64_t>(0, history));
  if (plan.compress_ratio > 0) compressed.Init(plan.compress_ratio, c.head_dim, history);
  if (plan.has_indexer) index_keys.Init(plan.compress_ratio, c.index_head_dim, history);
}

void AttentionState::Reset() {
  ring.Reset();
  if (compressed.ratio > 0) compressed.Reset();
  if (index_keys.ratio > 0) index_keys.Reset();
}

void AttentionState::Reserve(int64_t n) {
  ring.Reserve(n);
  for (CompressorState* cs : {&compressed, &index_keys}) {
    if (cs->ratio == 0) continue;
    cs->rows.Reserve(n);
    cs->entries.reserve(n / cs->ratio * cs->width);
  }
}

void AttentionState::Truncate(int64_t n) {
  ring.Truncate(n);
  if (compressed.ratio > 0) compressed.Truncate(n);
  if (index_keys.ratio > 0) index_keys.Truncate(n);
}

bool AttentionState::CanTruncate(int64_t n) const {
  return ring.Holds(RingRowsFrom(spec, n), n) &&
         (compressed.ratio == 0 || compressed.CanTruncate(n)) &&
         (index_keys.ratio == 0 || index_keys.CanTruncate(n));
}

void AttentionState::Save(int64_t n, Saved& out) const {
  out.n_tokens = n;
  out.ring.clear();
  out.compressed_rows.clear();
  out.index_rows.clear();
  // Exact sizes: checkpoints are counted by EngineCacheBytes (cache.h).
  out.ring.reserve((n - RingRowsFrom(spec, n)) * ring.width());
  if (compressed.ratio > 0) {
    out.compressed_rows.reserve((n - CompressorRowsFrom(spec, n)) * compressed.rows.width());
  }
  if (index_keys.ratio > 0) {
    out.index_rows.reserve((n - CompressorRowsFrom(spec, n)) * index_keys.rows.width());
  }
  ring.Save(RingRowsFrom(spec, n), n, out.ring);
  if (compressed.ratio > 0) {
    compressed.rows.Save(CompressorRowsFrom(spec, n), n, out.compressed_rows);
  }
  if (index_keys.ratio > 0) {
    index_keys.rows.Save(CompressorRowsFrom(spec, n), n, out.index_rows);
  }
}

void AttentionState::Restore(const Saved& saved) {
  const int64_t n = saved.n_tokens;
  ring.Restore(RingRowsFrom(spec, n), n, saved.ring.data());
  if (compressed.ratio > 0) {
    compressed.rows.Restore(CompressorRowsFrom(spec, n), n, saved.compressed_rows.data());
    compressed.entries.resize(std::min(compressed.n_entries(), n / compressed.ratio) *
                              compressed.width);
  }
  if (index_keys.ratio > 0) {
    index_keys.rows.Restore(CompressorRowsFrom(spec, n), n, saved.index_rows.data());
    index_keys.entries.resize(std::min(index_keys.n_entries(), n / index_keys.ratio) *
                              index_keys.width);
  }
}

void AttentionState::Write(ByteWriter& w) const {
  ring.Write(w);
  for (const CompressorState* c : {&compressed, &index_keys}) {
    w.Put(c->ratio);
    if (c->ratio == 0) continue;
    c->rows.Write(w);
    w.Put(c->n_entries());
    w.PutBytes(c->entries.data(), c->entries.size() * sizeof(float));
  }
}

bool AttentionState::Read(ByteReader& r, int64_t n) {
  if (!ring.Read(r) || ring.end() != n) return false;
  for (CompressorState* c : {&compressed, &index_keys}) {
    int64_t ratio = 0, n_entries = 0;
    if (!r.Get(ratio) || ratio != c->ratio) return false;
    if (ratio == 0) continue;
    if (!c->rows.Read(r) || c->rows.end() != n) return false;
    // Entry i pools tokens [i·r, (i+1)·r): n tokens made n div r of them.
    if (!r.Get(n_entries) || n_entries != n / ratio) return false;
    if (!r.GetArray(static_cast<uint64_t>(n_entries * c->width), c->entries)) return false;
  }
  // The rows the next token needs must be there (a ring that held fewer).
  return CanTruncate(n);
}

void AttentionScratch::ReserveContext(const DeepSeekV4Config& c, std::span<const LayerPlan> plans,
                                      int64_t max_tokens, int n_threads) {
  int64_t min_ratio = 0;
  for (int64_t r : c.compress_ratios) {
    if (r > 0 && (min_ratio == 0 || r < min_ratio)) min_ratio = r;
  }
  const int64_t entries = min_ratio > 0 ? max_tokens / min_ratio : 0;
  // AttentionCore's max_keys on the layer with the most: the window plus the
  // indexer's top-k (CSA) or every compressed entry (HCA). Exact per layer,
  // as the scores take H times as much.
  int64_t max_keys = c.sliding_window;
  for (const LayerPlan& p : plans) {
    const int64_t r = p.compress_ratio;
    const int64_t compressed = r == 0 ? 0 : p.has_indexer ? c.index_topk : max_tokens / r;
    max_keys = std::max(max_keys, c.sliding_window + compressed);
  }
  const auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(scores, n_threads * c.num_attention_heads * max_keys);
  grow(keys, n_threads * max_keys);
  grow(indexer.scores, n_threads * entries);
  grow(indexer.heap, n_threads * c.index_topk);
  grow(indexer.dots, c.index_n_heads * entries);  // one query (decode) against every entry
}

void AttentionScratch::Reserve(const DeepSeekV4Config& c, int64_t n) {
  if (n <= n_tokens) return;
  n_tokens = n;
  const int64_t H = c.num_attention_heads, A = c.head_dim;
  qr.resize(n * c.q_lora_rank);
  q.resize(n * H * A);
  kv.resize(n * A);
  o.resize(n * H * A);
  o_group.resize(c.o_groups * n * c.heads_per_group() * A);
  o_jobs.reserve(c.o_groups);
  o_job_rows.reserve(c.o_groups + 1);
  proj_jobs.reserve(8);
  proj_job_rows.reserve(9);
  z.resize(n * c.o_groups * c.o_lora_rank);
  top.resize(n * c.index_topk);
}

void AttentionProject(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                      int64_t n_rows, AttentionScratch& s) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const LayerPlan& plan = ctx.plan;
  const NumericsOptions& opts = ctx.numerics;
  const Tracer& trace = ctx.trace;
  const int64_t N = n_rows, Q = c.q_lora_rank, layer = plan.layer;
  const float eps = static_cast<float>(c.rms_norm_eps);
  s.Reserve(c, N);
  // Everything that reads x runs as one pooled step: the low-rank query and
  // the shared K=V head (below), and on compressing layers the compressor's
  // k and g and the indexer's (its compressor's, and its head weights). One
  // fork-join instead of up to three, and the small products stream beside
  // the large ones.
  std::vector<LinearJob>& jobs = s.proj_jobs;  // capacity reserved: no allocation
  jobs.clear();
  // ---- Low-rank query (§4.1): qr = q_norm(wq_a · x); q = wq_b · qr -> [N, H, A] ----
  // ---- and the shared K=V head: kv = wkv · x -> [N, A] (norm and RoPE in AttentionCore) ----
  float* qr = s.qr.data();  // [N, Q]
  const float* xq = LinearInput(pool, x, N, w.wq_a, opts, s.act);
  jobs.push_back({.w = &w.wq_a, .x = xq, .out = qr, .n_tokens = N});
  if (w.wq_a.takes_fp8_input() == w.wkv.takes_fp8_input()) {
    jobs.push_back({.w = &w.wkv, .x = xq, .out = s.kv.data(), .n_tokens = N});
  } else {  // its own input copy (s.act holds wq_a's)
    Linear(pool, s.kv.data(), LinearInput(pool, x, N, w.wkv, opts, s.kv_act), w.wkv, N);
  }
  // ---- The compressors' k and g (§4.4), the indexer's head weights (§4.5) ----
  LinearJob more[5];  // CompressorJobs writes 2, IndexerJobs 3
  int64_t n_more = 0;
  if (plan.compress_ratio > 0) n_more += CompressorJobs(w.compressor, x, N, s.compressor, more);
  if (plan.has_indexer) n_more += IndexerJobs(w.indexer, x, N, s.indexer, more + n_more);
  jobs.insert(jobs.end(), more, more + n_more);
  LinearMany(pool, jobs, s.proj_job_rows);
  for (int64_t t = 0; t < N; ++t) RmsNorm(qr + t * Q, qr + t * Q, w.q_norm.data(), Q, eps);
  trace("attn.qr", layer, qr, {N, Q});
  // q and the index queries both read qr: one pooled step when they take the
  // same input (both block-quantised or both dense).
  jobs.clear();
  const float* qr_in = LinearInput(pool, qr, N, w.wq_b, opts, s.act);
  jobs.push_back({.w = &w.wq_b, .x = qr_in, .out = s.q.data(), .n_tokens = N});
  if (plan.has_indexer) {
    const bool same = w.wq_b.takes_fp8_input() == w.indexer.wq_b.takes_fp8_input();
    LinearJob job;
    IndexerQueryJob(w.indexer,
                    same ? qr_in : LinearInput(pool, qr, N, w.indexer.wq_b, opts, s.indexer.act), N,
                    s.indexer, &job);
    jobs.push_back(job);
  }
  LinearMany(pool, jobs, s.proj_job_rows);
}

void AttentionCore(const LayerContext& ctx, const AttentionWeights& w, TokenRun run,
                   AttentionState& state, AttentionScratch& s) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const LayerPlan& plan = ctx.plan;
  const RopeFrequencies& rope = ctx.rope;
  const NumericsOptions& opts = ctx.numerics;
  const Tracer& trace = ctx.trace;
  const int64_t row0 = run.row0, n_tokens = run.n_tokens, pos0 = run.pos0;
  const int64_t layer = plan.layer;
  CHECK(state.ring.end() == pos0, "layer %lld: attention at position %lld, cache at %lld",
        static_cast<long long>(plan.layer), static_cast<long long>(pos0),
        static_cast<long long>(state.ring.end()));
  const int64_t T = n_tokens, H = c.num_attention_heads, A = c.head_dim;
  const int64_t R = c.qk_rope_head_dim, nope = A - R;
  const int64_t W = c.sliding_window;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* q = s.q.data() + row0 * H * A;  // [T, H, A]
  float* kv = s.kv.data() + row0 * A;    // [T, A]

  // Per-head unweighted RMS norm of q, then RoPE on the trailing R dims;
  // kv = kv_norm(wkv · x), RoPE on the last R. On the pool by (token, head),
  // item H of a token its kv row, so that a decoded token's heads split too.
  pool.ParallelFor(T * (H + 1), [&](int64_t i_begin, int64_t i_end, int) {
    RotationCache rot(rope);
    for (int64_t i = i_begin; i < i_end; ++i) {
      const int64_t t = i / (H + 1), h = i % (H + 1);
      if (h < H) {
        float* qh = q + (t * H + h) * A;
        RmsNorm(qh, qh, nullptr, A, eps);
        rot.Rotate(qh + nope, pos0 + t, /*inverse=*/false);
        continue;
      }
      float* kvt = kv + t * A;
      RmsNorm(kvt, kvt, w.kv_norm.data(), A, eps);
      rot.Rotate(kvt + nope, pos0 + t, /*inverse=*/false);
      // QAT: FP8-simulate the nope dims in blocks of 64; rope dims stay exact (§4.1).
      if (opts.kv_quant) ops::QuantizeDequantizeFp8(kvt, nope, 64);
    }
  });
  trace("attn.q", layer, q, {T, H, A});
  trace("attn.kv", layer, kv, {T, A});
  // ---- Compressed keys (§4.4, §4.5): entries completed by these tokens come first ----
  const int64_t r = plan.compress_ratio;
  if (r > 0) {
    CompressorFinish(ctx, w.compressor, CompressorKind::kMain, run, state.compressed, s.compressor);
    trace("attn.compressed_kv", layer, state.compressed.entries.data(),
          {state.compressed.n_entries(), A});
  }
  const int64_t k = c.index_topk;
  if (plan.has_indexer) {
    IndexerForward(ctx, w.indexer, run, state.index_keys, s.indexer, s.top.data());
  }
  const int64_t max_keys = W + (r == 0 ? 0 : plan.has_indexer ? k : state.compressed.n_entries());
  const int64_t n_threads = pool.size();
  if (static_cast<int64_t>(s.keys.size()) < n_threads * max_keys) {
    s.keys.resize(n_threads * max_keys);
  }
  if (static_cast<int64_t>(s.scores.size()) < n_threads * H * max_keys) {
    s.scores.resize(n_threads * H * max_keys);
  }

  // ---- Attention with a per-head sink over window ∪ compressed keys (§4.6) ----
  // Window keys of position p: positions max(0, p − W + 1) .. p; those before
  // pos0 come from the ring, the rest from this call's kv. (Token, head)
  // pairs run in parallel — whole tokens in prefill, heads in
  // decode — each thread with its own key list and scores. A chunk's heads
  // of one token share that token's keys (MQA), so they run as one block:
  // one DotMany for their scores, one AxpyMany for their outputs, each
  // bit for bit the per-head Dot and Axpy calls.
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(A));
  float* o = s.o.data() + row0 * H * A;  // [T, H, A]
  const auto run_items = [&](int64_t i_begin, int64_t i_end, int thread) {
    float* scores = s.scores.data() + thread * H * max_keys;  // [heads of a block, n_keys]
    const float** keys = s.keys.data() + thread * max_keys;
    for (int64_t item = i_begin; item < i_end;) {
      // The block: heads h0 .. h1 − 1 of token t.
      const int64_t t = item / H, h0 = item % H;
      const int64_t h1 = std::min(H, h0 + (i_end - item));
      item += h1 - h0;
      const int64_t p = pos0 + t;
      int64_t n_keys = 0;
      for (int64_t j = std::max<int64_t>(0, p - W + 1); j <= p; ++j) {
        keys[n_keys++] = j < pos0 ? state.ring.Row(j) : kv + (j - pos0) * A;
      }
      if (r > 0) {
        const int64_t n_visible = (p + 1) / r;  // entry i is complete once token (i+1)·r − 1 is in
        if (plan.has_indexer) {
          for (int64_t j = 0; j < k; ++j) {
            const int32_t e = s.top[t * k + j];
            if (e >= 0) keys[n_keys++] = state.compressed.entry(e);
          }
        } else {
          for (int64_t e = 0; e < n_visible; ++e) keys[n_keys++] = state.compressed.entry(e);
        }
      }
      ops::DotMany(q + (t * H + h0) * A, h1 - h0, A, keys, n_keys, A, scores);
      // Per head: softmax weights in place, scores -> alpha = p_i / denom.
      // The sink only adds to the denominator; the max is over the real logits.
      for (int64_t h = h0; h < h1; ++h) {
        ops::SoftmaxWithSink(scores + (h - h0) * n_keys, n_keys, softmax_scale, w.attn_sink[h]);
      }
      float* ob = o + (t * H + h0) * A;  // [h1 − h0, A]
      std::fill_n(ob, (h1 - h0) * A, 0.0f);
      ops::AxpyMany(ob, h1 - h0, A, scores, keys, n_keys, A);
      // V = K carries rotated dims: undo the rotation at the query position (§4.2).
      RotationCache rot(rope);
      for (int64_t h = h0; h < h1; ++h) rot.Rotate(ob + (h - h0) * A + nope, p, /*inverse=*/true);
    }
  };
  if (T >= n_threads) {
    // Later tokens see more keys: tokens go round-robin, whole per item.
    pool.ParallelForStrided(T,
                            [&](int64_t t, int thread) { run_items(t * H, (t + 1) * H, thread); });
  } else {
    pool.ParallelFor(T * H, run_items);
  }
  trace("attn.o", layer, o, {T, H, A});
  // The window now ends at pos0 + T − 1 (rows kept by position, cache.h).
  for (int64_t t = 0; t < T; ++t) std::copy_n(kv + t * A, A, state.ring.Append(pos0 + t));
}

void AttentionOutput(const LayerContext& ctx, const AttentionWeights& w, int64_t n_rows,
                     AttentionScratch& s, float* out) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const NumericsOptions& opts = ctx.numerics;
  const Tracer& trace = ctx.trace;
  const int64_t layer = ctx.plan.layer;
  const int64_t T = n_rows, H = c.num_attention_heads, A = c.head_dim;
  const int64_t G = c.o_groups, O = c.o_lora_rank, HG = c.heads_per_group();
  const float* o = s.o.data();  // [T, H, A]
  // ---- Grouped low-rank output (§4.7): z_g = wo_a[g] · o_g; out = wo_b · z ----
  // wo_a runs unquantized in the reference (a bf16 einsum of bf16 o), so no
  // act quant here; with opts.o_bf16, o rounded to bf16 as the reference
  // holds it. The G products run as one pooled step (LinearMany), rows g·O …
  // of wo_a on group g's heads.
  float* og = s.o_group.data();  // [G, T, (H/G)·A]
  float* z = s.z.data();         // [T, G·O]
  s.o_jobs.clear();
  pool.ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        const float* src = o + (t * H + g * HG) * A;
        float* dst = og + (g * T + t) * HG * A;
        if (opts.o_bf16) {
          ops::RoundToBf16Row(src, dst, HG * A);
        } else {
          std::copy_n(src, HG * A, dst);
        }
      }
    }
  });
  for (int64_t g = 0; g < G; ++g) {
    float* x = og + g * T * HG * A;
    s.o_jobs.push_back(LinearJob{.w = &w.wo_a,
                                 .x = x,
                                 .out = z + g * O,
                                 .n_tokens = T,
                                 .row_begin = g * O,
                                 .row_end = (g + 1) * O,
                                 .out_stride = G * O});
  }
  LinearMany(pool, s.o_jobs, s.o_job_rows);
  trace("attn.wo_b_in", layer, z, {T, G * O});
  Linear(pool, out, LinearInput(pool, z, T, w.wo_b, opts, s.act), w.wo_b, T);
}

void AttentionForward(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                      int64_t n_tokens, int64_t pos0, AttentionState& state, AttentionScratch& s,
                      float* out) {
  AttentionProject(ctx, w, x, n_tokens, s);
  AttentionCore(ctx, w, TokenRun{.row0 = 0, .n_tokens = n_tokens, .pos0 = pos0}, state, s);
  AttentionOutput(ctx, w, n_tokens, s, out);
}

}  // namespace dsv4::deepseek_v4
