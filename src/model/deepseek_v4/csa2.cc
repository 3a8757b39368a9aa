// DeepSeek-V4.1 attention (CSA2); see csa2.h.
#include "model/deepseek_v4/csa2.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "model/deepseek_v4/numerics.h"
#include "ops/matmul.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

// out[T, N] = x[T, K] · Wᵀ for an unquantized matrix used in fp32.
void MatrixProduct(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t T) {
  ops::MatMul(pool, out, x, w, T);
}

// qr [T, Q] = q_norm(wq_a · x), q [T, H·A] = wq_b · qr, kv [T, A] =
// kv_norm(wkv · x), RoPE at positions pos0 .., kv to FP8 (whole row, blocks of 32).
void Project(const LayerContext& ctx, const AttentionWeights& w, const float* x, int64_t T,
             int64_t pos0, Csa2Scratch& s) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const NumericsOptions& opts = ctx.numerics;
  const int64_t Q = c.q_lora_rank, H = c.num_attention_heads, A = c.head_dim;
  const int64_t R = c.qk_rope_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Grow(s.qr, T * Q);
  Grow(s.q, T * H * A);
  Grow(s.kv, T * A);
  Linear(pool, s.qr.data(), LinearInput(pool, x, T, w.wq_a, opts, s.act), w.wq_a, T);
  for (int64_t t = 0; t < T; ++t) RmsNorm(&s.qr[t * Q], &s.qr[t * Q], w.q_norm.data(), Q, eps);
  Linear(pool, s.q.data(), LinearInput(pool, s.qr.data(), T, w.wq_b, opts, s.act), w.wq_b, T);
  Linear(pool, s.kv.data(), LinearInput(pool, x, T, w.wkv, opts, s.act), w.wkv, T);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos0 + t;
    for (int64_t h = 0; h < H; ++h) ctx.rope.Rotate(&s.q[(t * H + h) * A + A - R], p, false);
    float* kv = &s.kv[t * A];
    RmsNorm(kv, kv, w.kv_norm.data(), A, eps);
    ctx.rope.Rotate(kv + A - R, p, false);
    if (opts.kv_quant) ops::ref::QuantizeDequantizeFp8(kv, A, 32);
  }
}

// o [nh, A] = for each of nh heads (queries q [nh, A], sinks [nh]): softmax
// over the keys with the sink (denominator only) · keys, fp32.
void Attend(const float* q, int64_t nh, const std::vector<const float*>& keys, const float* sinks,
            float scale, int64_t A, std::vector<float>& logit, float* o) {
  const int64_t nk = static_cast<int64_t>(keys.size());
  logit.resize(nh * nk);
  ops::DotMany(q, nh, A, keys.data(), nk, A, logit.data());
  for (int64_t h = 0; h < nh; ++h) {
    float* l = &logit[h * nk];
    float m = sinks[h];
    for (int64_t i = 0; i < nk; ++i) {
      l[i] *= scale;
      m = std::max(m, l[i]);
    }
    float den = std::exp(sinks[h] - m);
    for (int64_t i = 0; i < nk; ++i) {
      l[i] = std::exp(l[i] - m);
      den += l[i];
    }
    for (int64_t i = 0; i < nk; ++i) l[i] /= den;
  }
  std::fill(o, o + nh * A, 0.0f);
  ops::AxpyMany(o, nh, A, logit.data(), keys.data(), nk, A);
}

// The grouped output of s.o [T, H, A]: z [T, G·O], group g = wo_a rows g·O..
// on heads g·H/G..; out [T, D] = wo_b · z.
void GroupedOutput(const LayerContext& ctx, const AttentionWeights& w, int64_t T, Csa2Scratch& s,
                   float* out) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const NumericsOptions& opts = ctx.numerics;
  const int64_t H = c.num_attention_heads, A = c.head_dim;
  const int64_t G = c.o_groups, O = c.o_lora_rank, HG = H / G;
  Grow(s.z, T * G * O);
  Grow(s.o_group, T * HG * A);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t) {
      std::copy(&s.o[(t * H + g * HG) * A], &s.o[(t * H + (g + 1) * HG) * A],
                &s.o_group[t * HG * A]);
    }
    const float* in = LinearInput(pool, s.o_group.data(), T, w.wo_a, opts, s.act);
    LinearRows(pool, &s.z[g * O], G * O, in, w.wo_a, T, g * O, (g + 1) * O);
  }
  Linear(pool, out, LinearInput(pool, s.z.data(), T, w.wo_b, opts, s.act), w.wo_b, T);
}

}  // namespace

// ---------------------------------------------------------------------------
// Per-sequence stores
// ---------------------------------------------------------------------------

void Csa2LayerState::Init(const DeepSeekV4Config& c, const LayerPlan& p, int64_t history) {
  const int64_t A = c.head_dim;
  window_size = c.sliding_window;
  window.Init(A, c.sliding_window + history);
  ratio = p.csa2.kv_source ? p.compress_ratio : 0;
  if (ratio > 1) {
    pending_kv.Init(A, ratio + history);
    pending_gate.Init(A, ratio + history);
  }
  if (ratio > 0) entries.Init(A, 0);
  if (p.csa2.owns_index_keys) index_keys.Init(c.index_head_dim, 0);
}

void Csa2LayerState::Reset() {
  window.Reset();
  pending_kv.Reset();
  pending_gate.Reset();
  entries.Reset();
  index_keys.Reset();
}

void Csa2LayerState::Truncate(int64_t n) {
  window.Truncate(n);
  if (ratio > 1) {
    pending_kv.Truncate(n);
    pending_gate.Truncate(n);
  }
  if (ratio > 0) {
    entries.Truncate(n / ratio);
    if (index_keys.width() > 0) index_keys.Truncate(n / ratio);
  }
}

bool Csa2LayerState::CanTruncate(int64_t n) const {
  // The window rows of positions n − W .. n − 1 and the open group's compressor rows.
  return n <= window.end() && window.Holds(std::max<int64_t>(0, n - window_size), n) &&
         (ratio <= 1 || pending_kv.Holds(n - n % ratio, n));
}

void Csa2LayerState::Write(ByteWriter& w) const {
  w.Put(ratio);
  for (const RowHistory* h : {&window, &pending_kv, &pending_gate, &entries, &index_keys}) {
    h->Write(w);
  }
}

bool Csa2LayerState::Read(ByteReader& r) {
  int64_t saved_ratio = 0;
  if (!r.Get(saved_ratio) || saved_ratio != ratio) return false;
  for (RowHistory* h : {&window, &pending_kv, &pending_gate, &entries, &index_keys}) {
    if (!h->Read(r)) return false;
  }
  return true;
}

int64_t Csa2LayerState::allocated_bytes() const {
  return window.allocated_bytes() + pending_kv.allocated_bytes() + pending_gate.allocated_bytes() +
         entries.allocated_bytes() + index_keys.allocated_bytes();
}

// ---------------------------------------------------------------------------
// The sublayer
// ---------------------------------------------------------------------------

void Csa2Attention(const LayerContext& ctx, const AttentionWeights& w, const float* x, int64_t T,
                   int64_t pos0, std::span<Csa2LayerState> states, Csa2Shared& shared,
                   IndexKeyReading reading, Csa2Scratch& s, float* out) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const LayerPlan& plan = ctx.plan;
  const NumericsOptions& opts = ctx.numerics;
  const RopeFrequencies& rope = ctx.rope;
  const int64_t H = c.num_attention_heads, A = c.head_dim;
  const int64_t R = c.qk_rope_head_dim, W = c.sliding_window;
  const int64_t r = plan.compress_ratio, end = pos0 + T;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Csa2LayerState& own = states[plan.layer];

  // ---- projections (qr, q, kv), the window rows ----
  Project(ctx, w, x, T, pos0, s);
  for (int64_t t = 0; t < T; ++t) std::copy_n(&s.kv[t * A], A, own.window.Append(pos0 + t));

  // ---- compressed entries (kv sources), index keys (key owners) ----
  const Csa2Roles& roles = plan.csa2;
  bool published = false;
  if (r > 0 && roles.kv_source) {
    const CompressorWeights& cw = w.compressor;
    Grow(s.ckv, T * A);
    MatrixProduct(pool, s.ckv.data(), x, cw.wkv, T);
    if (r > 1) {
      Grow(s.cgate, T * A);
      MatrixProduct(pool, s.cgate.data(), x, cw.wgate, T);
      for (int64_t t = 0; t < T; ++t) {
        std::copy(&s.ckv[t * A], &s.ckv[(t + 1) * A], own.pending_kv.Append(pos0 + t));
        std::copy(&s.cgate[t * A], &s.cgate[(t + 1) * A], own.pending_gate.Append(pos0 + t));
      }
    }
    Grow(s.latent, A);
    const int64_t ID = c.index_head_dim;
    Grow(s.key, ID);
    for (int64_t g = pos0 / r; (g + 1) * r <= end; ++g) {
      if ((g + 1) * r <= pos0) continue;  // completed before this call
      float* lat = s.latent.data();
      if (r == 1) {
        std::copy(&s.ckv[(g - pos0) * A], &s.ckv[(g - pos0 + 1) * A], lat);
      } else {
        // this call's rows from the scratch (the ring may have wrapped past
        // them), earlier ones from the pending store
        auto kv_row = [&](int64_t p) {
          return p >= pos0 ? &s.ckv[(p - pos0) * A] : own.pending_kv.Row(p);
        };
        auto gate_row = [&](int64_t p) {
          return p >= pos0 ? &s.cgate[(p - pos0) * A] : own.pending_gate.Row(p);
        };
        // softmax over the group's r rows of each channel, in fp32
        for (int64_t a = 0; a < A; ++a) {
          float m = kNegInf;
          for (int64_t i = 0; i < r; ++i) m = std::max(m, gate_row(g * r + i)[a]);
          float sum = 0.0f;
          for (int64_t i = 0; i < r; ++i) sum += std::exp(gate_row(g * r + i)[a] - m);
          float acc = 0.0f;
          for (int64_t i = 0; i < r; ++i) {
            const float p = std::exp(gate_row(g * r + i)[a] - m) / sum;
            acc += kv_row(g * r + i)[a] * p;
          }
          lat[a] = acc;
        }
      }
      RmsNorm(lat, lat, cw.norm.data(), A, eps);
      const int64_t gpos = g * r;  // an entry stands for the first token of its group
      if (roles.owns_index_keys) {
        float* key = s.key.data();
        ops::MatMulRows(key, ID, lat, w.indexer.wk, 1, 0, ID);
        RmsNorm(key, key, w.indexer.k_norm.data(), ID, eps);
        rope.Rotate(key + ID - R, gpos, false);
        if (opts.index_quant) ops::ref::QuantizeDequantizeFp4(key, ID, 32);
        std::copy(key, key + ID, own.index_keys.Append(g));
        published = true;
      }
      rope.Rotate(lat + A - R, gpos, false);
      if (opts.kv_quant) ops::ref::QuantizeDequantizeFp4E4m3Scale(lat, A, 16);
      std::copy(lat, lat + A, own.entries.Append(g));
    }
  }
  if (published) shared.key_slot = plan.layer;

  // ---- the indexer (index sources): picks [T, k] of entries 0 .. end/r − 1 ----
  const int64_t n_entries = r > 0 ? end / r : 0;
  if (r > 0 && roles.index_source) {
    const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
    const int64_t k = std::min(c.index_topk, n_entries);
    shared.picks.assign(T * std::max<int64_t>(k, 0), -1);
    shared.picks_width = k;
    if (n_entries > 0) {
      const int64_t owner = reading == IndexKeyReading::kOwner || shared.key_slot < 0
                                ? roles.keys_from
                                : shared.key_slot;
      const RowHistory& keys = states[owner].index_keys;
      CHECK(keys.Holds(0, n_entries),
            "layer %lld: index keys of layer %lld hold [%lld, %lld), "
            "need [0, %lld)",
            static_cast<long long>(plan.layer), static_cast<long long>(owner),
            static_cast<long long>(keys.begin()), static_cast<long long>(keys.end()),
            static_cast<long long>(n_entries));
      const IndexerWeights& iw = w.indexer;
      Grow(s.iq, T * IH * ID);
      Grow(s.iw, T * IH);
      Linear(pool, s.iq.data(), LinearInput(pool, s.qr.data(), T, iw.wq_b, opts, s.act), iw.wq_b,
             T);
      MatrixProduct(pool, s.iw.data(), x, iw.weights_proj, T);
      const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID)) /
                                              std::sqrt(static_cast<double>(IH)));
      Grow(s.scores, T * n_entries);
      if (roles.candidate_source) {
        shared.candidates.assign(T * n_entries, 0);
        shared.candidates_width = n_entries;
      }
      CHECK(!roles.uses_candidates || shared.candidates_width == n_entries,
            "layer %lld: candidates for %lld entries, scores over %lld",
            static_cast<long long>(plan.layer), static_cast<long long>(shared.candidates_width),
            static_cast<long long>(n_entries));
      pool.ParallelFor(T, [&](int64_t t0, int64_t t1, int) {
        std::vector<float> block, dots;
        std::vector<const float*> rows;
        std::vector<int64_t> order(n_entries);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t p = pos0 + t;
          float* q = &s.iq[t * IH * ID];
          float* wt = &s.iw[t * IH];
          for (int64_t h = 0; h < IH; ++h) {
            rope.Rotate(q + h * ID + ID - R, p, false);
            if (opts.index_quant) ops::ref::QuantizeDequantizeFp4(q + h * ID, ID, 32);
            wt[h] *= wscale;
          }
          const int64_t visible = (p + 1) / r;
          float* sc = &s.scores[t * n_entries];
          // Σ_h relu(q_h · k_e) · w_h over the visible entries, −inf past them
          const int64_t nv = std::min(visible, n_entries);
          rows.resize(nv);
          dots.resize(IH * nv);
          for (int64_t e = 0; e < nv; ++e) rows[e] = keys.Row(e);
          ops::DotMany(q, IH, ID, rows.data(), nv, ID, dots.data());
          for (int64_t e = 0; e < nv; ++e) {
            float acc = 0.0f;
            for (int64_t h = 0; h < IH; ++h) acc += std::max(dots[h * nv + e], 0.0f) * wt[h];
            sc[e] = acc;
          }
          for (int64_t e = nv; e < n_entries; ++e) sc[e] = kNegInf;
          if (roles.candidate_source) {
            // level one: the candidate_topk_blocks best blocks by their best
            // entry, the block of the newest visible entry always kept
            const int64_t B = c.candidate_block_size;
            const int64_t nb = (n_entries + B - 1) / B;
            block.assign(nb, kNegInf);
            for (int64_t e = 0; e < n_entries; ++e) block[e / B] = std::max(block[e / B], sc[e]);
            if (visible > 0) block[(visible - 1) / B] = std::numeric_limits<float>::infinity();
            std::vector<int64_t> bo(nb);
            for (int64_t b = 0; b < nb; ++b) bo[b] = b;
            const int64_t kb = std::min(c.candidate_topk_blocks, nb);
            std::partial_sort(bo.begin(), bo.begin() + kb, bo.end(), [&](int64_t a, int64_t b) {
              return block[a] > block[b] || (block[a] == block[b] && a < b);
            });
            uint8_t* keep = &shared.candidates[t * n_entries];
            for (int64_t i = 0; i < kb; ++i) {
              if (block[bo[i]] == kNegInf) continue;
              for (int64_t e = bo[i] * B; e < std::min(n_entries, (bo[i] + 1) * B); ++e)
                keep[e] = 1;
            }
          } else if (roles.uses_candidates) {
            const uint8_t* keep = &shared.candidates[t * n_entries];
            for (int64_t e = 0; e < n_entries; ++e) {
              if (!keep[e]) sc[e] = kNegInf;
            }
          }
          // level two: the k best, in position order; unreachable ones −1
          for (int64_t e = 0; e < n_entries; ++e) order[e] = e;
          std::partial_sort(
              order.begin(), order.begin() + k, order.end(),
              [&](int64_t a, int64_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
          std::sort(order.begin(), order.begin() + k);
          int32_t* pk = &shared.picks[t * k];
          for (int64_t i = 0; i < k; ++i) {
            pk[i] = order[i] < visible ? static_cast<int32_t>(order[i]) : -1;
          }
        }
      });
      if (ctx.trace.on()) {
        std::vector<float> as_float(shared.picks.begin(), shared.picks.end());
        ctx.trace("attn.indexer_topk", plan.layer, as_float.data(), {T, k});
      }
    }
  }

  // ---- attention: window keys + the picked compressed entries, a sink per head ----
  Grow(s.o, T * H * A);
  const Csa2LayerState* src = r > 0 ? &states[roles.kv_from] : nullptr;
  const int64_t k = r > 0 ? shared.picks_width : 0;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(A)));
  // Work items: (token, head range); a short call splits each token's heads.
  const int64_t splits = T >= pool.size() ? 1 : std::min<int64_t>(H, pool.size());
  pool.ParallelFor(T * splits, [&](int64_t b, int64_t e, int) {
    std::vector<const float*> keys;
    std::vector<float> logit;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / splits, part = item % splits, p = pos0 + t;
      const int64_t h0 = H * part / splits, h1 = H * (part + 1) / splits, nh = h1 - h0;
      keys.clear();
      for (int64_t j = std::max<int64_t>(0, p - W + 1); j <= p; ++j) {
        keys.push_back(j >= pos0 ? &s.kv[(j - pos0) * A] : own.window.Row(j));
      }
      if (src != nullptr && k > 0) {
        const int32_t* pk = &shared.picks[t * k];
        for (int64_t i = 0; i < k; ++i) {
          if (pk[i] >= 0) keys.push_back(src->entries.Row(pk[i]));
        }
      }
      float* o = &s.o[(t * H + h0) * A];
      Attend(&s.q[(t * H + h0) * A], nh, keys, &w.attn_sink[h0], scale, A, logit, o);
      for (int64_t h = 0; h < nh; ++h) rope.Rotate(o + h * A + A - R, p, true);
    }
  });

  GroupedOutput(ctx, w, T, s, out);
}

// ---------------------------------------------------------------------------
// DSpark (the V4.1 reference's DSparkAttention)
// ---------------------------------------------------------------------------

void Csa2DSparkRingRows(const LayerContext& ctx, const AttentionWeights& w, const float* main_x,
                        int64_t n, int64_t pos0, RowHistory& ring, Csa2Scratch& s) {
  const DeepSeekV4Config& c = ctx.config;
  const int64_t A = c.head_dim, R = c.qk_rope_head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Grow(s.kv, n * A);
  Linear(ctx.pool, s.kv.data(), LinearInput(ctx.pool, main_x, n, w.wkv, ctx.numerics, s.act), w.wkv,
         n);
  for (int64_t t = 0; t < n; ++t) {
    float* kv = &s.kv[t * A];
    RmsNorm(kv, kv, w.kv_norm.data(), A, eps);
    ctx.rope.Rotate(kv + A - R, pos0 + t, false);
    if (ctx.numerics.kv_quant) ops::ref::QuantizeDequantizeFp8(kv, A, 32);
    std::copy_n(kv, A, ring.Append(pos0 + t));
  }
}

void Csa2DSparkAttention(const LayerContext& ctx, const AttentionWeights& w, const float* x,
                         int64_t B, int64_t p, const RowHistory& ring, Csa2Scratch& s, float* out) {
  const DeepSeekV4Config& c = ctx.config;
  const int64_t H = c.num_attention_heads, A = c.head_dim, R = c.qk_rope_head_dim;
  const int64_t W = c.sliding_window;
  CHECK(ring.end() == p + 1 && ring.Holds(std::max<int64_t>(0, p - W + 1), p + 1),
        "DSpark stage %lld: a block after position %lld, the ring holds [%lld, %lld)",
        static_cast<long long>(ctx.plan.layer), static_cast<long long>(p),
        static_cast<long long>(ring.begin()), static_cast<long long>(ring.end()));
  Project(ctx, w, x, B, p + 1, s);
  // Keys of every block row: ring slot i < min(W, p + 1) (the newest committed
  // position ≡ i mod W, in slot order as the reference's index set), then the
  // B block rows (no mask inside the block).
  const int64_t n_ring = std::min(W, p + 1);
  std::vector<const float*> keys;
  for (int64_t i = 0; i < n_ring; ++i) keys.push_back(ring.Row(p - ((p - i) % W)));
  for (int64_t j = 0; j < B; ++j) keys.push_back(&s.kv[j * A]);
  Grow(s.o, B * H * A);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(A)));
  ctx.pool.ParallelFor(B * H, [&](int64_t b, int64_t e, int) {
    std::vector<float> logit;
    for (int64_t jh = b; jh < e; ++jh) {
      const int64_t j = jh / H, h = jh % H;
      float* o = &s.o[(j * H + h) * A];
      Attend(&s.q[(j * H + h) * A], 1, keys, &w.attn_sink[h], scale, A, logit, o);
      ctx.rope.Rotate(o + A - R, p + 1 + j, true);
    }
  });
  GroupedOutput(ctx, w, B, s, out);
}

}  // namespace dsv4::deepseek_v4
