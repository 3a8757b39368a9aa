// Standard and "CSA" attention over the slotted cache (see attention.h).
#include "model/seed/attention.h"

#include <algorithm>
#include <cmath>

namespace dsv4::seed {
namespace {

// out[d] += w · Σ_j softmax(scores over mask)_j · v_j, over the entries of
// `idx` (indices into eligible) where mask holds. No-op when the mask is empty.
void SoftmaxAccumulate(std::span<const float> scores, std::span<const int32_t> eligible,
                       const uint8_t* mask, const float* v, int64_t v_stride, int64_t v_off,
                       int64_t d, double w, float* out, std::vector<float>& probs) {
  if (w == 0.0) return;
  const size_t n = eligible.size();
  double mx = -INFINITY;
  for (size_t j = 0; j < n; ++j) {
    if (mask == nullptr || mask[j]) mx = std::max(mx, static_cast<double>(scores[j]));
  }
  if (mx == -INFINITY) return;
  probs.assign(n, 0.0f);
  double sum = 0;
  for (size_t j = 0; j < n; ++j) {
    if (mask == nullptr || mask[j]) {
      const double e = std::exp(static_cast<double>(scores[j]) - mx);
      probs[j] = static_cast<float>(e);
      sum += e;
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    double acc = 0;
    for (size_t j = 0; j < n; ++j) {
      if (probs[j] != 0.0f)
        acc += static_cast<double>(probs[j]) * v[eligible[j] * v_stride + v_off + c];
    }
    out[c] += static_cast<float>(w * acc / sum);
  }
}

}  // namespace

void AttnScratch::Reserve(int64_t slots, int64_t head_dim) {
  const size_t n = static_cast<size_t>(slots);
  for (std::vector<int32_t>* v : {&eligible, &order}) v->reserve(n);
  for (std::vector<uint8_t>* v : {&in_global, &local, &segment}) v->reserve(n);
  scores.reserve(n);
  probs.reserve(n);
  krot.reserve(static_cast<size_t>(head_dim));
}

std::vector<int32_t> SelectByImportance(std::span<const int32_t> candidates,
                                        const float* importance, const int64_t* slot_pos,
                                        int64_t k) {
  std::vector<int32_t> order;
  SelectByImportance(candidates, importance, slot_pos, k, order);
  return order;
}

void SelectByImportance(std::span<const int32_t> candidates, const float* importance,
                        const int64_t* slot_pos, int64_t k, std::vector<int32_t>& order) {
  order.assign(candidates.begin(), candidates.end());
  const size_t kk = static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(order.size())));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kk), order.end(),
                    [&](int32_t a, int32_t b) {
                      if (importance[a] != importance[b]) return importance[a] > importance[b];
                      return slot_pos[a] < slot_pos[b];
                    });
  order.resize(kk);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return slot_pos[a] < slot_pos[b]; });
}

void Attend(const AttnShape& shape, const RopeParams& rope, const float* shift,
            const CsaConfig* csa, CsaGlobal global, const double* branch_weights, const KvView& kv,
            const float* q, int64_t pos, std::span<const int32_t> seed_selected,
            bool query_selected, float* out, AttnScratch& s) {
  const int64_t nh = shape.n_heads, d = shape.head_dim, group = nh / shape.n_kv;
  const int64_t kv_stride = shape.n_kv * d;
  const bool seed_global = csa != nullptr && global == CsaGlobal::kSeed;
  std::fill(out, out + nh * d, 0.0f);

  // Keys this query may read: pos_j <= pos (all live keys for the seed global branch).
  s.eligible.clear();
  for (int32_t slot : kv.live) {
    if (kv.slot_pos[slot] <= pos || seed_global) s.eligible.push_back(slot);
  }
  const size_t n = s.eligible.size();
  if (n == 0) return;
  std::vector<uint8_t>& local = s.local;
  std::vector<uint8_t>& segment = s.segment;
  if (csa != nullptr) {
    local.assign(n, 0);
    segment.assign(n, 0);
    s.in_global.assign(n, 0);
    for (size_t j = 0; j < n; ++j) {
      const int64_t pj = kv.slot_pos[s.eligible[j]];
      if (pj > pos) continue;  // seed mode only: future keys feed the global branch alone
      local[j] = pj > pos - csa->local_window;
      segment[j] = pj > pos - csa->segment_window;
    }
    if (seed_global) {
      if (query_selected) {
        for (size_t j = 0; j < n; ++j) {
          s.in_global[j] = std::binary_search(
              seed_selected.begin(), seed_selected.end(), s.eligible[j],
              [&](int32_t a, int32_t b) { return kv.slot_pos[a] < kv.slot_pos[b]; });
        }
      }
    } else {
      // Causal: among the keys at or before pos (eligible holds only those here).
      std::vector<int32_t>& sel = s.order;
      SelectByImportance(s.eligible, kv.importance, kv.slot_pos, csa->global_topk, sel);
      size_t m = 0;
      for (size_t j = 0; j < n && m < sel.size(); ++j) {
        if (s.eligible[j] == sel[m]) {
          s.in_global[j] = 1;
          ++m;
        }
      }
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  s.scores.resize(n);
  s.krot.resize(d);
  for (int64_t h = 0; h < nh; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * d;
    const float* sh = shift != nullptr ? shift + h * (d / 2) : nullptr;
    for (size_t j = 0; j < n; ++j) {
      const int32_t slot = s.eligible[j];
      const float* kj = kv.k + slot * kv_stride + g * d;
      const float* kr = kj;
      if (sh != nullptr) {
        std::copy(kj, kj + d, s.krot.begin());
        RotatePairs(s.krot.data(), d, 0.0, rope.inv_freq.data(),
                    static_cast<double>(SegmentOf(rope, kv.slot_pos[slot])), sh);
        kr = s.krot.data();
      }
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qh[c]) * kr[c];
      s.scores[j] = static_cast<float>(dot * scale);
    }
    float* oh = out + h * d;
    if (csa == nullptr) {
      SoftmaxAccumulate(s.scores, s.eligible, nullptr, kv.v, kv_stride, g * d, d, 1.0, oh, s.probs);
    } else {
      const double* w = branch_weights != nullptr ? branch_weights : csa->branch_weights.data();
      SoftmaxAccumulate(s.scores, s.eligible, local.data(), kv.v, kv_stride, g * d, d, w[0], oh,
                        s.probs);
      SoftmaxAccumulate(s.scores, s.eligible, segment.data(), kv.v, kv_stride, g * d, d, w[1], oh,
                        s.probs);
      SoftmaxAccumulate(s.scores, s.eligible, s.in_global.data(), kv.v, kv_stride, g * d, d, w[2],
                        oh, s.probs);
    }
  }
}

}  // namespace dsv4::seed
