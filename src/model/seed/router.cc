// MoE routing with capacity and router modes (see router.h).
#include "model/seed/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/log.h"

namespace dsv4::seed {
namespace {

// Softmax over the raw logits of experts[0, n), in fp32 (max-subtracted).
void SoftmaxOver(const float* logits, const int32_t* experts, int64_t n, float* w) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[experts[i]]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::exp(logits[experts[i]] - mx);
    sum += w[i];
  }
  for (int64_t i = 0; i < n; ++i) w[i] /= sum;
}

// Experts by descending score, ties to the lower index (masked ones left out).
// std::sort with the index tie-break equals a stable sort of the index order,
// without the stable sort's temporary buffer.
void RankAll(const float* score, int64_t E, const uint8_t* mask, std::vector<int32_t>& r) {
  r.clear();
  for (int32_t e = 0; e < E; ++e) {
    if (mask == nullptr || mask[e]) r.push_back(e);
  }
  std::sort(r.begin(), r.end(), [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
}

// Top-k of one token into out[0, k); returns how many (≤ k).
int64_t SelectInto(const MoeConfig& moe, MoeModes modes, const float* logits, const float* bias,
                   const uint8_t* mask, int64_t k, RouteScratch& s, int32_t* out) {
  const int64_t E = moe.num_experts;
  s.score.resize(E);
  float* score = s.score.data();
  for (int64_t e = 0; e < E; ++e) score[e] = logits[e] + (bias != nullptr ? bias[e] : 0.0f);
  if (modes.routing != MoeRouting::kGroupLimited) {
    RankAll(score, E, mask, s.ranking);
    const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(s.ranking.size()));
    std::copy_n(s.ranking.begin(), n, out);
    return n;
  }
  const int64_t G = moe.n_group, per = E / G;
  s.group_score.assign(G, -INFINITY);
  for (int64_t g = 0; g < G; ++g) {
    s.group_top.clear();
    for (int64_t e = g * per; e < (g + 1) * per; ++e) {
      if (mask == nullptr || mask[e]) s.group_top.push_back(score[e]);
    }
    if (s.group_top.empty()) continue;
    std::sort(s.group_top.begin(), s.group_top.end(), std::greater<float>());
    s.group_score[g] =
        s.group_top[0] + (s.group_top.size() > 1 ? s.group_top[1] : 0.0f);  // top-2 sum (C-21)
  }
  s.groups.resize(G);
  std::iota(s.groups.begin(), s.groups.end(), 0);
  const float* gscore = s.group_score.data();
  std::sort(s.groups.begin(), s.groups.end(), [&](int32_t a, int32_t b) {
    return gscore[a] != gscore[b] ? gscore[a] > gscore[b] : a < b;
  });
  s.used.clear();  // the chosen experts
  for (int64_t i = 0; i < moe.topk_group && i < G; ++i) {
    const int32_t g = s.groups[i];
    if (gscore[g] == -INFINITY) break;
    s.in.clear();
    for (int32_t e = static_cast<int32_t>(g * per); e < (g + 1) * per; ++e) {
      if (mask == nullptr || mask[e]) s.in.push_back(e);
    }
    std::sort(s.in.begin(), s.in.end(), [&](int32_t a, int32_t b) {
      return score[a] != score[b] ? score[a] > score[b] : a < b;
    });
    for (int64_t j = 0; j < moe.per_group_k && j < static_cast<int64_t>(s.in.size()); ++j)
      s.used.push_back(s.in[j]);
  }
  std::sort(s.used.begin(), s.used.end(), [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(s.used.size()));
  std::copy_n(s.used.begin(), n, out);
  return n;
}

}  // namespace

MoeModes ResolveMoeModes(const MoeConfig& moe) {
  return MoeModes{
      .routing = moe.routing == "group_limited" ? MoeRouting::kGroupLimited : MoeRouting::kTopK,
      .assign = moe.assign == "seed_greedy" ? MoeAssign::kSeedGreedy : MoeAssign::kTopKCapped};
}

int64_t EffectiveK(const MoeConfig& moe, MoeModes modes, int64_t total_ctx) {
  const bool group_limited = modes.routing == MoeRouting::kGroupLimited;
  int64_t k = group_limited ? moe.topk_group * moe.per_group_k : moe.num_experts_per_tok;
  if (moe.dynamic_k && !group_limited) {
    k = std::max<int64_t>(2,
                          static_cast<int64_t>(std::floor(0.015 * static_cast<double>(total_ctx))));
  }
  return std::clamp<int64_t>(k, 1, moe.num_experts);
}

int64_t EffectiveK(const MoeConfig& moe, int64_t total_ctx) {
  return EffectiveK(moe, ResolveMoeModes(moe), total_ctx);
}

std::vector<int32_t> SelectExperts(const MoeConfig& moe, const float* logits, const float* bias,
                                   const uint8_t* mask, int64_t k) {
  RouteScratch s;
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(k, 0)));
  out.resize(static_cast<size_t>(
      SelectInto(moe, ResolveMoeModes(moe), logits, bias, mask, k, s, out.data())));
  return out;
}

Status ValidateExternalWeights(std::vector<float>& w) {
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || w[i] < 0) {
      return InvalidArgument("external routing weight " + std::to_string(i) + " = " +
                                 std::to_string(w[i]) + " is negative or not finite",
                             "routing weights must be non-negative and sum to 1 (S-052)");
    }
    sum += w[i];
  }
  if (std::fabs(sum - 1.0) > 1e-3) {
    return InvalidArgument(
        "external routing weights sum to " + std::to_string(sum) + ", not 1",
        "a sum within 1e-3 of 1 is renormalised; anything else is refused (S-052)");
  }
  for (float& x : w) x = static_cast<float>(x / sum);
  return Status::Ok();
}

namespace {

// S-049: a mask and external weights exclude each other; a mask has one flag per expert.
Status CheckMask(const RouterOptions& opt, int64_t E, bool external) {
  if (!opt.expert_mask.empty() && external) {
    return InvalidArgument("router: an expert mask and external routing weights were both given",
                           "use one mode at a time (S-049)");
  }
  if (!opt.expert_mask.empty() && static_cast<int64_t>(opt.expert_mask.size()) != E) {
    return InvalidArgument("router: the expert mask has " + std::to_string(opt.expert_mask.size()) +
                               " entries for " + std::to_string(E) + " experts",
                           "give one flag per expert");
  }
  return Status::Ok();
}

// The k to route with: EffectiveK, reduced to the experts the mask allows
// (S-051), after checking the forced experts against it.
Result<int64_t> RoutedK(const MoeConfig& moe, MoeModes modes, const RouterOptions& opt,
                        const uint8_t* mask, int64_t total_ctx) {
  const int64_t E = moe.num_experts;
  int64_t k = EffectiveK(moe, modes, total_ctx);
  if (mask != nullptr) {
    const int64_t allowed = std::count(opt.expert_mask.begin(), opt.expert_mask.end(), 1);
    if (allowed == 0) {
      return InvalidArgument("router: the expert mask allows no expert",
                             "allow at least one (S-051)");
    }
    if (allowed < k) {
      LOG_WARNING("router: only {} experts allowed, k reduced from {} (S-051)", allowed, k);
      k = allowed;
    }
  }
  for (int32_t e : opt.force_experts) {
    if (e < 0 || e >= E) {
      return InvalidArgument("router: forced expert " + std::to_string(e) + " is not in [0, " +
                                 std::to_string(E) + ")",
                             "force_experts lists expert indices (S-051)");
    }
    if (mask != nullptr && !mask[e]) {
      return InvalidArgument(
          "router: forced expert " + std::to_string(e) + " is not allowed by the expert mask",
          "allow it in the mask or do not force it (S-051)");
    }
  }
  if (static_cast<int64_t>(opt.force_experts.size()) > k) {
    return InvalidArgument("router: " + std::to_string(opt.force_experts.size()) +
                               " forced experts for k = " + std::to_string(k),
                           "force at most k experts (S-051)");
  }
  return k;
}

// S-134: every token to freeze_experts with freeze_weights, no capacity.
Status RouteFrozen(const RouterOptions& opt, int64_t E, int64_t N, RouterState& st,
                   RouteResult& out) {
  const int64_t kf = static_cast<int64_t>(opt.freeze_experts.size());
  if (kf == 0 || opt.freeze_weights.size() != opt.freeze_experts.size()) {
    return InvalidArgument("router: freeze needs as many weights as experts",
                           "e.g. 0,1:0.7,0.3 (S-134)");
  }
  for (int32_t e : opt.freeze_experts) {
    if (e < 0 || e >= E) {
      return InvalidArgument("router: frozen expert " + std::to_string(e) + " is not in [0, " +
                             std::to_string(E) + ")");
    }
  }
  out.k = kf;
  out.capacity = 0;
  out.expert.resize(N * kf);
  out.weight.resize(N * kf);
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t j = 0; j < kf; ++j) {
      out.expert[t * kf + j] = opt.freeze_experts[j];
      out.weight[t * kf + j] = opt.freeze_weights[j];
      ++out.counts[opt.freeze_experts[j]];
      ++out.selected[opt.freeze_experts[j]];
    }
  }
  for (int64_t e = 0; e < E; ++e) st.cumulative[e] += out.counts[e];
  return Status::Ok();
}

// Selection before capacity: s.sel [N, k] with s.sel_n[t] entries, forced
// experts in (S-051), weights s.w [N, k] (softmax, or Mode C's external ones);
// counts out.selected.
Status SelectTokens(const MoeConfig& moe, MoeModes modes, const RouterOptions& opt,
                    const RouterState& st, const float* logits, const uint8_t* mask, int64_t N,
                    int64_t k, const float* external_weights, RouteScratch& s, RouteResult& out) {
  const int64_t E = moe.num_experts;
  s.sel.assign(N * k, -1);
  s.sel_n.assign(N, 0);
  s.w.assign(N * k, 0.0f);
  for (int64_t t = 0; t < N; ++t) {
    int32_t* sel = s.sel.data() + t * k;
    const int64_t n = SelectInto(moe, modes, logits + t * E, st.bias.data(), mask, k, s, sel);
    s.sel_n[t] = n;
    for (int32_t fe : opt.force_experts) {  // S-051: replace the lowest-ranked non-forced
      if (std::find(sel, sel + n, fe) != sel + n) continue;
      for (int64_t j = n - 1; j >= 0; --j) {
        if (std::find(opt.force_experts.begin(), opt.force_experts.end(), sel[j]) ==
            opt.force_experts.end()) {
          sel[j] = fe;
          break;
        }
      }
    }
    float* w = s.w.data() + t * k;
    SoftmaxOver(logits + t * E, sel, n, w);
    if (external_weights != nullptr) {
      s.ext.assign(external_weights + t * k, external_weights + (t + 1) * k);
      RETURN_IF_ERROR(ValidateExternalWeights(s.ext).WithContext("token " + std::to_string(t)));
      std::copy_n(s.ext.begin(), std::min<int64_t>(k, n), w);
    }
    for (int64_t j = 0; j < n; ++j) ++out.selected[sel[j]];
  }
  return Status::Ok();
}

// topk_capped for token t (S-045): each selected slot while its expert has
// room, else the best expert outside the top-k with room, else dropped; the
// weights are the softmax over the raw logits of the experts used (the
// external ones when nothing moved).
void AssignCappedToken(int64_t E, const RouterState& st, const float* logits, const uint8_t* mask,
                       int64_t t, int64_t k, bool external, RouteScratch& s, RouteResult& out) {
  const int64_t cap = out.capacity;
  int32_t* oe = out.expert.data() + t * k;
  float* ow = out.weight.data() + t * k;
  const int32_t* sel = s.sel.data() + t * k;
  const float* w = s.w.data() + t * k;
  const int64_t n = s.sel_n[t];
  for (int64_t e = 0; e < E; ++e) s.score[e] = logits[t * E + e] + st.bias[e];
  RankAll(s.score.data(), E, mask, s.ranking);
  s.used.clear();
  for (int64_t j = 0; j < n; ++j) {
    const int32_t e = sel[j];
    int32_t pick = -1;
    if (out.counts[e] < cap) {
      pick = e;
    } else {
      for (int32_t alt : s.ranking) {
        if (std::find(sel, sel + n, alt) != sel + n) continue;
        if (std::find(s.used.begin(), s.used.end(), alt) != s.used.end()) continue;
        if (out.counts[alt] < cap) {
          pick = alt;
          break;
        }
      }
    }
    if (pick >= 0) {
      s.used.push_back(pick);
      ++out.counts[pick];
    }
  }
  if (s.used.empty()) return;
  const int64_t nu = static_cast<int64_t>(s.used.size());
  s.used_w.resize(nu);
  if (external && nu == n && std::equal(sel, sel + n, s.used.begin())) {
    std::copy_n(w, nu, s.used_w.begin());
  } else {
    SoftmaxOver(logits + t * E, s.used.data(), nu, s.used_w.data());
  }
  for (int64_t j = 0; j < nu; ++j) {
    oe[j] = s.used[j];
    ow[j] = s.used_w[j];
  }
}

// S-044 / S-045: the selected slots, token by token, against the capacity
// (out.capacity; 0 = unlimited) → out.expert, out.weight [N, k], out.counts.
void AssignWithCapacity(const MoeConfig& moe, MoeModes modes, const RouterState& st,
                        const float* logits, const uint8_t* mask, int64_t N, int64_t k,
                        bool external, RouteScratch& s, RouteResult& out) {
  const int64_t E = moe.num_experts, cap = out.capacity;
  out.expert.assign(N * k, -1);
  out.weight.assign(N * k, 0.0f);
  s.score.resize(E);
  for (int64_t t = 0; t < N; ++t) {
    int32_t* oe = out.expert.data() + t * k;
    float* ow = out.weight.data() + t * k;
    const int32_t* sel = s.sel.data() + t * k;
    const float* w = s.w.data() + t * k;
    const int64_t n = s.sel_n[t];
    if (cap == 0) {
      for (int64_t j = 0; j < n; ++j) {
        oe[j] = sel[j];
        ow[j] = w[j];
        ++out.counts[sel[j]];
      }
    } else if (modes.assign == MoeAssign::kSeedGreedy) {
      for (int64_t j = 0; j < n; ++j) {
        const int32_t e = sel[j];
        if (out.counts[e] < cap) {
          oe[0] = e;
          ow[0] = w[j];  // the original top-k weight, not renormalised (seed parity)
          ++out.counts[e];
          break;
        }
      }
    } else {
      AssignCappedToken(E, st, logits, mask, t, k, external, s, out);
    }
  }
}

// S-053 utilisation variance (selections / N, Σ u = k) and reweighting, and
// S-047's load-balance loss when diagnostics are on. N > 0.
void UpdateUtilisation(const MoeConfig& moe, const RouterOptions& opt, RouterState& st,
                       const float* logits, int64_t N, RouteScratch& s, RouteResult& out) {
  const int64_t E = moe.num_experts;
  std::vector<double>& u = s.u;
  u.assign(E, 0.0);
  double mean = 0;
  for (int64_t e = 0; e < E; ++e) {
    u[e] = static_cast<double>(out.selected[e]) / static_cast<double>(N);
    mean += u[e];
  }
  mean /= static_cast<double>(E);
  double var = 0;
  for (int64_t e = 0; e < E; ++e) var += (u[e] - mean) * (u[e] - mean);
  var /= static_cast<double>(E);
  out.utilization_variance = var;
  if (opt.reweight && var > moe.utilization_threshold) {
    for (int64_t e = 0; e < E; ++e) {
      if (u[e] > mean) st.bias[e] += static_cast<float>(std::log(0.95));
      if (u[e] < mean) st.bias[e] += static_cast<float>(std::log(1.05));
    }
    ++st.reweight_count;
    out.reweighted = true;
  }
  if (opt.diagnostics) {
    double loss = 0;
    std::vector<double> P(E, 0.0);
    for (int64_t t = 0; t < N; ++t) {
      double mx = -INFINITY, sum = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[t * E + e]));
      for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[t * E + e] - mx);
      for (int64_t e = 0; e < E; ++e)
        P[e] += std::exp(logits[t * E + e] - mx) / sum / static_cast<double>(N);
    }
    for (int64_t e = 0; e < E; ++e) loss += u[e] * P[e];
    out.lb_loss = static_cast<double>(E) * loss;
  }
}

}  // namespace

Status Route(const MoeConfig& moe, MoeModes modes, const RouterOptions& opt, RouterState& st,
             const float* logits, int64_t N, int64_t total_ctx, const float* external_weights,
             RouteResult& out, RouteScratch* scratch) {
  RouteScratch local;
  RouteScratch& s = scratch != nullptr ? *scratch : local;
  const int64_t E = moe.num_experts;
  RETURN_IF_ERROR(CheckMask(opt, E, external_weights != nullptr));
  if (st.bias.empty()) st.bias.assign(E, 0.0f);
  if (st.cumulative.empty()) st.cumulative.assign(E, 0);
  const uint8_t* mask = opt.expert_mask.empty() ? nullptr : opt.expert_mask.data();
  ASSIGN_OR_RETURN(const int64_t k, RoutedK(moe, modes, opt, mask, total_ctx));
  out.counts.assign(E, 0);
  out.selected.assign(E, 0);
  out.reweighted = false;
  out.lb_loss = 0;
  if (opt.freeze) return RouteFrozen(opt, E, N, st, out);
  RETURN_IF_ERROR(SelectTokens(moe, modes, opt, st, logits, mask, N, k, external_weights, s, out));
  const double cf = opt.capacity_factor >= 0 ? opt.capacity_factor : moe.capacity_factor;
  out.capacity = cf > 0 ? static_cast<int64_t>(std::ceil(cf * static_cast<double>(N * k) / E)) : 0;
  out.k = k;
  AssignWithCapacity(moe, modes, st, logits, mask, N, k, external_weights != nullptr, s, out);
  for (int64_t e = 0; e < E; ++e) st.cumulative[e] += out.counts[e];
  if (N > 0) UpdateUtilisation(moe, opt, st, logits, N, s, out);
  return Status::Ok();
}

Status Route(const MoeConfig& moe, const RouterOptions& opt, RouterState& st, const float* logits,
             int64_t N, int64_t total_ctx, const float* external_weights, RouteResult& out,
             RouteScratch* scratch) {
  return Route(moe, ResolveMoeModes(moe), opt, st, logits, N, total_ctx, external_weights, out,
               scratch);
}

}  // namespace dsv4::seed
