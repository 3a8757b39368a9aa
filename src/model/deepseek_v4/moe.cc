// DeepSeek-V4 MoE: router, routed experts, shared expert (see moe.h).
#include "model/deepseek_v4/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/log.h"
#include "model/deepseek_v4/expert_cache.h"
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::deepseek_v4 {
namespace {
// Rows per pool chunk of the elementwise steps: a decoded token's (top-k + 1
// expert rows) stay on the calling thread.
constexpr int64_t kRowsPerChunk = 16;
}  // namespace
namespace {

// PyTorch softplus (beta 1, threshold 20): linear above the threshold.
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

int64_t MoeScratch::bytes() const {
  const size_t f = routing.scores.capacity() + routing.weights.capacity() + logits.capacity() +
                   ahead.scores.capacity() + ahead.weights.capacity() + row_weight.capacity() +
                   xe.capacity() + gate.capacity() + up.capacity() + down.capacity() +
                   y.capacity() + act.capacity() + act_w2.capacity() + biased.capacity();
  const size_t i = routing.experts.capacity() + rows.capacity() + order.capacity() +
                   active.capacity() + ahead.experts.capacity() + ahead_ids.capacity();
  const size_t l = first.capacity() + count.capacity() + job_rows.capacity();
  return static_cast<int64_t>(f * sizeof(float) + i * sizeof(int32_t) + l * sizeof(int64_t) +
                              jobs.capacity() * sizeof(LinearJob));
}

void MoeScratch::Reserve(const DeepSeekV4Config& c, int64_t n) {
  if (n <= n_tokens) return;
  n_tokens = n;
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok, D = c.hidden_size;
  const int64_t F = c.moe_intermediate_size;
  const int64_t rows_max = n * k + n;  // routed picks, then all tokens (shared)
  routing.scores.resize(n * E);
  routing.experts.resize(n * k);
  routing.weights.resize(n * k);
  logits.resize(n * E);
  rows.resize(n * k);
  row_weight.resize(n * k);
  xe.resize(rows_max * D);
  gate.resize(rows_max * F);
  up.resize(rows_max * F);
  down.resize(rows_max * D);
  y.resize(n * D);
  biased.resize(E);
  order.resize(E);
  active.resize(E);
  first.resize(E);
  count.resize(E);
  cursor.resize(E);
  routed.resize(E);
  pending.resize(E);
  job_order.reserve(E + 1);
  jobs.reserve(2 * (E + 1));
  job_rows.reserve(2 * (E + 1) + 1);
}

void Route(const LayerContext& ctx, const MoeWeights& w, const float* x,
           std::span<const int32_t> token_ids, MoeScratch& s) {
  s.Reserve(ctx.config, static_cast<int64_t>(token_ids.size()));
  RouteInto(ctx, ctx.plan, w, x, token_ids, s.logits.data(), s.biased.data(), s.order.data(),
            s.routing);
}

void RouteInto(const LayerContext& ctx, const LayerPlan& plan, const MoeWeights& w, const float* x,
               std::span<const int32_t> token_ids, float* logits, float* biased, int32_t* order,
               Routing& r) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const int64_t T = static_cast<int64_t>(token_ids.size());
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  if (static_cast<int64_t>(r.scores.size()) < T * E) r.scores.resize(T * E);
  if (static_cast<int64_t>(r.experts.size()) < T * k) r.experts.resize(T * k);
  if (static_cast<int64_t>(r.weights.size()) < T * k) r.weights.resize(T * k);
  ops::MatMul(pool, logits, x, w.gate, T);  // [T, E], fp32
  // Runtime options (scored layers only).
  const ScoredRouterOptions* ro = plan.router != RouterKind::kHash ? ctx.router_options : nullptr;
  CHECK(ro == nullptr || ((ro->allow.empty() || static_cast<int64_t>(ro->allow.size()) == E) &&
                          (!ro->freeze || (static_cast<int64_t>(ro->freeze_experts.size()) == k &&
                                           static_cast<int64_t>(ro->freeze_weights.size()) == k))),
        "scored router options do not fit E = %lld, k = %lld", static_cast<long long>(E),
        static_cast<long long>(k));
  for (int64_t t = 0; t < T; ++t) {
    float* sc = r.scores.data() + t * E;
    const float* lg = logits + t * E;
    switch (c.scoring_func) {
      case ScoringFunc::kSqrtSoftplus:
        for (int64_t e = 0; e < E; ++e) sc[e] = std::sqrt(Softplus(lg[e]));
        break;
      case ScoringFunc::kSigmoid:
        for (int64_t e = 0; e < E; ++e) sc[e] = 1.0f / (1.0f + std::exp(-lg[e]));
        break;
      case ScoringFunc::kSoftmax:
        std::copy_n(lg, E, sc);
        ops::ref::Softmax(sc, E);
        break;
    }
    int32_t* idx = r.experts.data() + t * k;
    if (plan.router == RouterKind::kHash) {
      // The token's own id picks the experts; no bias, no top-k (§5.1).
      std::copy_n(w.tid2eid.data() + static_cast<int64_t>(token_ids[t]) * k, k, idx);
    } else if (ro != nullptr && ro->freeze) {
      // Frozen: fixed experts and weights for every token.
      float* wt = r.weights.data() + t * k;
      for (int64_t j = 0; j < k; ++j) {
        idx[j] = ro->freeze_experts[j];
        wt[j] = ro->freeze_weights[j] * static_cast<float>(c.routed_scaling_factor);
      }
      continue;
    } else {
      // The bias shifts the selection only; weights use the unbiased scores.
      for (int64_t e = 0; e < E; ++e) biased[e] = sc[e] + (w.bias.empty() ? 0.0f : w.bias[e]);
      if (ro != nullptr && !ro->allow.empty()) {  // masked experts never make the top-k
        for (int64_t e = 0; e < E; ++e) {
          if (ro->allow[e] == 0) biased[e] = -std::numeric_limits<float>::infinity();
        }
      }
      ops::ref::TopK(biased, E, k, idx, order);
    }
    float* wt = r.weights.data() + t * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      wt[j] = sc[idx[j]];
      sum += wt[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      if (c.scoring_func != ScoringFunc::kSoftmax) wt[j] /= sum;  // no epsilon (reference)
      wt[j] *= static_cast<float>(c.routed_scaling_factor);
    }
  }
}

namespace {

// With an expert cache: the experts the next main layer will likely pick (its
// router applied to this layer's FFN input x [T, D]; exact when it is
// hash-routed) are read while this layer computes, when they fit beside this
// layer's n_active experts. Only a guess: that layer's Begin takes its own
// router's choice.
void ReadAheadNextLayer(const LayerContext& ctx, const float* x, std::span<const int32_t> token_ids,
                        int64_t n_active, MoeScratch& s) {
  if (ctx.next_plan == nullptr || ctx.next_moe == nullptr) return;
  const int64_t T = static_cast<int64_t>(token_ids.size()), k = ctx.config.num_experts_per_tok;
  if (T * k > (ctx.expert_cache->capacity() - n_active) / 2) return;  // prefill: no room
  RouteInto(ctx, *ctx.next_plan, *ctx.next_moe, x, token_ids, s.logits.data(), s.biased.data(),
            s.order.data(), s.ahead);
  std::vector<int32_t>& ids = s.ahead_ids;
  ids.clear();
  for (int64_t i = 0; i < T * k; ++i) {  // distinct, in order of token, then rank
    const int32_t e = s.ahead.experts[i];
    if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
  }
  ctx.expert_cache->ReadAhead(ctx.next_plan->layer, ids);
}

}  // namespace

void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x,
                std::span<const int32_t> token_ids, MoeScratch& s, float* out) {
  ThreadPool& pool = ctx.pool;
  const DeepSeekV4Config& c = ctx.config;
  const LayerPlan& plan = ctx.plan;
  const NumericsOptions& opts = ctx.numerics;
  const Tracer& trace = ctx.trace;
  const int64_t T = static_cast<int64_t>(token_ids.size());
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok, D = c.hidden_size;
  const float limit = static_cast<float>(c.swiglu_limit);
  Route(ctx, w, x, token_ids, s);
  const Routing& r = s.routing;
  if (trace.on()) {
    trace("router_scores", plan.layer, r.scores.data(), {T, E});
    std::vector<float> ids(r.experts.begin(), r.experts.begin() + T * k);
    trace("router_indices", plan.layer, ids.data(), {T, k});
    trace("router_weights", plan.layer, r.weights.data(), {T, k});
  }

  // The routed experts' picks, gathered per expert in ascending id (expert i
  // owns rows [first[i], first[i] + count[i]) of xe/gate/up/down), then the
  // shared expert's T rows after them. Every expert then runs as part of three
  // pooled steps (w1 and w3 for all, SwiGLU, w2 for all), one fork-join each.
  // A counting sort: picks per expert, then each pick's row (in order of
  // token, then pick), then the inputs copied on the pool.
  const int64_t F = c.moe_intermediate_size;
  std::fill_n(s.cursor.data(), E, 0);
  for (int64_t i = 0; i < T * k; ++i) ++s.cursor[r.experts[i]];
  int64_t n_active = 0, n_rows = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t picks = s.cursor[e];
    s.cursor[e] = n_rows;
    if (picks == 0) continue;
    s.active[n_active] = static_cast<int32_t>(e);
    s.first[n_active] = n_rows;
    s.count[n_active] = picks;
    ++n_active;
    n_rows += picks;
  }
  s.experts_run += n_active;
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t row = s.cursor[r.experts[i]]++;
    s.rows[row] = static_cast<int32_t>(i / k);
    s.row_weight[row] = r.weights[i];
  }
  const int64_t n_all = n_rows + T;
  // Expert parallel (ExpertShard): this rank runs the routed experts of ids
  // [E·r/n, E·(r+1)/n) alone — active experts [own_a, own_b), whose rows are
  // contiguous (rows go by ascending id) — and gathers the others' rows of
  // `down` after the products; the sum below is then the one-process sum.
  const ExpertShard* shard = ctx.expert_shard;
  int64_t own_a = 0, own_b = n_active;
  if (shard != nullptr) {
    const auto first_active_from = [&](int64_t rank) {
      const int64_t e0 = E * rank / shard->ranks;
      int64_t i = 0;
      while (i < n_active && s.active[i] < e0) ++i;
      return i;
    };
    own_a = first_active_from(shard->rank);
    own_b = first_active_from(shard->rank + 1);
    s.shard_offsets.resize(shard->ranks + 1);
    for (int r = 0; r <= shard->ranks; ++r) {
      const int64_t i = first_active_from(r);
      s.shard_offsets[r] = (i < n_active ? s.first[i] : n_rows) * D;
    }
  }
  const auto skipped = [&](int64_t i) { return i < n_active && (i < own_a || i >= own_b); };
  // One token with distinct picks (a hash table or frozen routing may repeat
  // an expert): every expert's one input row is that token's, so nothing is
  // gathered and its activations are quantised once (per row: the bits of a
  // gathered copy's).
  const bool one_token = T == 1 && n_active == k;
  if (!one_token) {
    pool.ParallelFor(n_all, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {  // rows from n_rows on: the shared expert's
        const int64_t t = i < n_rows ? s.rows[i] : i - n_rows;
        std::copy_n(x + t * D, D, s.xe.data() + i * D);
      }
    });
  }
  // The experts' weights as mapped: shapes and formats (and the data, unless
  // an expert cache streams them: `routed` then points at its copies).
  const auto weights_of = [&](int64_t i) -> const ExpertWeights& {
    return i < n_active ? w.experts[s.active[i]] : w.shared;
  };
  std::vector<const ExpertWeights*>& routed = s.routed;
  const auto first_of = [&](int64_t i) { return i < n_active ? s.first[i] : n_rows; };
  const auto count_of = [&](int64_t i) { return i < n_active ? s.count[i] : T; };
  // Activation quantisation is per token row, so one pass over all gathered
  // rows equals one per expert (it applies when every w1/w3 is FP8/FP4;
  // checkpoints store the routed and shared experts alike).
  const auto quantised_input = [&](const float* in, int64_t rows, auto member,
                                   std::vector<float>& scratch) -> const float* {
    const LinearWeight& lw0 = weights_of(0).*member;
    for (int64_t i = 1; i <= n_active; ++i) {
      CHECK((weights_of(i).*member).takes_fp8_input() == lw0.takes_fp8_input(),
            "MoE layer %lld: experts mix dense and block-quantised weights",
            static_cast<long long>(plan.layer));
    }
    return LinearInput(pool, in, rows, lw0, opts, scratch);
  };
  const float* xin = one_token ? quantised_input(x, 1, &ExpertWeights::w1, s.act)
                               : quantised_input(s.xe.data(), n_all, &ExpertWeights::w1, s.act);
  // GGUF quant w2 with quantised activations: the routing weight scales w2's
  // output, llama.cpp's order (llm_graph::build_moe_ffn: ggml_mul(experts,
  // weights) after the down projection). The reference's order (below) is the
  // same product up to rounding in f32, but not with activations quantised
  // to q8_0/q8_1, whose f16 block scale f16(w · amax / 127) is not
  // w · f16(amax / 127): llama.cpp's logits are those of its order.
  const bool weight_after_w2 = IsGgmlQuant(weights_of(0).w2.weight.dtype) &&
                               ops::GetKQuantActivations() == ops::KQuantActivations::kQ8K;
  // The experts run in segments of at most the expert cache's capacity (one
  // segment, the shared expert included, without a cache or when they fit;
  // else the routed ones in turn, then the shared one alone). Every row's
  // result is the same whichever segment computes it.
  const int64_t per_segment =
      ctx.expert_cache != nullptr ? ctx.expert_cache->capacity() : std::max<int64_t>(n_active, 1);
  const bool one_segment = n_active <= per_segment;
  const int64_t routed_segments = one_segment ? 0 : (n_active + per_segment - 1) / per_segment;
  for (int64_t seg = 0; seg <= routed_segments; ++seg) {
    // [a, b): this segment's routed experts (in s.active order).
    const bool with_shared = seg == routed_segments;
    const int64_t a = one_segment ? 0 : std::min(n_active, seg * per_segment);
    const int64_t b = one_segment   ? n_active
                      : with_shared ? a
                                    : std::min(n_active, a + per_segment);
    // With an expert cache, the experts not resident are read while the
    // resident ones (and the shared expert) run their w1/w3 products; then
    // the read ones run theirs. (Each row's products are the same whichever
    // call computes them.)
    std::vector<uint8_t>& pending = s.pending;
    std::fill(pending.begin() + a, pending.begin() + b, 0);
    const bool streaming = ctx.expert_cache != nullptr && b > a;
    if (streaming) {
      ctx.expert_cache->Begin(plan.layer, std::span<const int32_t>(s.active).subspan(a, b - a),
                              std::span<const ExpertWeights*>(routed).subspan(a, b - a),
                              std::span<uint8_t>(pending).subspan(a, b - a));
    } else {
      for (int64_t i = a; i < b; ++i) routed[i] = &w.experts[s.active[i]];
    }
    const auto data_of = [&](int64_t i) -> const ExpertWeights& {
      return i < n_active ? *routed[i] : w.shared;
    };
    // The shared expert's jobs first: its FP8 rows beside the routed FP4 ones
    // of the other thread, and a split that each layer learns for itself (the
    // pool keys it on the first job's weights, which would otherwise be a
    // routed expert's, changing from token to token).
    std::vector<int64_t>& order = s.job_order;
    order.clear();
    if (with_shared) order.push_back(n_active);
    for (int64_t i = a; i < b; ++i) order.push_back(i);
    std::vector<LinearJob>& jobs = s.jobs;
    // read_now false: the resident experts and the shared one; true: the read ones.
    const auto w1_w3 = [&](bool read_now) {
      jobs.clear();  // capacity reserved: no allocation
      for (int64_t i : order) {
        if ((i < n_active && pending[i] != 0) != read_now || skipped(i)) continue;
        const ExpertWeights& ew = data_of(i);
        const int64_t f0 = first_of(i), n = count_of(i);
        const float* in = one_token ? xin : xin + f0 * D;
        jobs.push_back({&ew.w1, in, s.gate.data() + f0 * F, n});
        jobs.push_back({&ew.w3, in, s.up.data() + f0 * F, n});
      }
      if (!jobs.empty()) LinearMany(pool, jobs, s.job_rows);
    };
    w1_w3(false);
    if (streaming) {
      if (one_segment) ReadAheadNextLayer(ctx, x, token_ids, n_active, s);
      // A failed read: those experts read the mapped weights instead (the
      // same bytes, paged in by the kernel), with a warning.
      if (const Status st = ctx.expert_cache->Finish(); !st.ok()) {
        LOG_WARNING("MoE layer {}: {}; reading these experts through the mapping", plan.layer,
                    st.ToString());
        for (int64_t i = a; i < b; ++i) {
          if (pending[i]) routed[i] = &w.experts[s.active[i]];
        }
      }
      w1_w3(true);
    }
    // This segment's rows: its experts' (contiguous, ascending id), then the
    // shared expert's after n_rows.
    const int64_t r0 = with_shared && !one_segment ? n_rows : first_of(a);
    const int64_t r1 = with_shared ? n_all : first_of(b);
    // h = silu(min(g, limit)) · clamp(u, ±limit) · routing weight (the routed
    // experts' weight scales h before w2, the reference's order, §11 item 3).
    // Rows over the pool in prefill (a decoded token's few rows stay inline:
    // split over 2 threads, they took as long, fork-join included).
    pool.ParallelFor(
        r1 - r0,
        [&](int64_t q0, int64_t q1, int) {
          for (int64_t row = r0 + q0; row < r0 + q1; ++row) {
            float* g = s.gate.data() + row * F;
            // One SIMD pass: limits, silu(g) · u (SIMD exp), the routed weight.
            ops::SwiGluLimited(g, g, s.up.data() + row * F, F, limit,
                               row < n_rows && !weight_after_w2 ? s.row_weight[row] : 1.0f);
          }
        },
        kRowsPerChunk);
    // (Its own scratch: xin, in s.act, serves the segments after this one.)
    const float* hin =
        quantised_input(s.gate.data() + r0 * F, r1 - r0, &ExpertWeights::w2, s.act_w2);
    jobs.clear();
    for (int64_t i : order) {
      if (skipped(i)) continue;
      const int64_t f0 = first_of(i);
      jobs.push_back({&data_of(i).w2, hin + (f0 - r0) * F, s.down.data() + f0 * D, count_of(i)});
    }
    if (!jobs.empty()) LinearMany(pool, jobs, s.job_rows);
  }
  if (shard != nullptr && shard->ranks > 1) {
    shard->link->AllGather(std::span<float>(s.down.data(), n_rows * D), s.shard_offsets,
                           ctx.plan.layer);
  }

  // y (fp32) = Σ over experts in ascending id of their outputs, then + shared.
  // Features split over the pool in prefill; every element still sums its
  // experts in row order.
  float* y = s.y.data();
  const float* shared = s.down.data() + n_rows * D;
  pool.ParallelFor(
      D,
      [&](int64_t d0, int64_t d1, int) {
        for (int64_t t = 0; t < T; ++t) std::fill(y + t * D + d0, y + t * D + d1, 0.0f);
        for (int64_t i = 0; i < n_rows; ++i) {
          const float* d = s.down.data() + i * D;
          float* yt = y + static_cast<int64_t>(s.rows[i]) * D;
          if (weight_after_w2) {
            const float wt = s.row_weight[i];
            for (int64_t dd = d0; dd < d1; ++dd) yt[dd] += d[dd] * wt;
          } else {
            for (int64_t dd = d0; dd < d1; ++dd) yt[dd] += d[dd];
          }
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t dd = d0; dd < d1; ++dd) out[t * D + dd] = y[t * D + dd] + shared[t * D + dd];
        }
      },
      T >= kRowsPerChunk ? 64 : D);
}

}  // namespace dsv4::deepseek_v4
