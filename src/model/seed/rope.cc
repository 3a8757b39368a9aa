// RoPE variants of the seed family (see rope.h).
#include "model/seed/rope.h"

#include <algorithm>
#include <cmath>

namespace dsv4::seed {

double DynamicTheta(double theta_base, double l_ctx, int64_t base_len, int64_t dim) {
  CHECK(base_len > 0 && dim > 0);
  const double ratio = std::max(1.0, l_ctx / static_cast<double>(base_len));
  return theta_base * std::pow(ratio, 2.0 / static_cast<double>(dim));
}

RopeParams MakeRopeParams(const SeedConfig& c, int64_t expected_ctx) {
  RopeParams r;
  const double f = c.rope_scaling.enabled ? c.rope_scaling.factor : 1.0;
  r.pos_scale = 1.0 / f;
  r.theta = c.rope_theta;
  if (c.dynamic_rope.enabled) {
    const int64_t l_ctx = std::min(expected_ctx, c.max_context());
    const int64_t dim = c.dynamic_rope.dim > 0 ? c.dynamic_rope.dim : c.hidden_size;
    r.theta =
        DynamicTheta(c.rope_theta, static_cast<double>(l_ctx) / f, c.dynamic_rope.base_len, dim);
  }
  const int64_t d = c.head_dim();
  r.inv_freq.resize(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) {
    r.inv_freq[i] = static_cast<float>(std::pow(r.theta, -2.0 * static_cast<double>(i) / d));
  }
  r.segment_length = c.segmented_rope.enabled ? c.segmented_rope.segment_length : 0;
  return r;
}

void RotatePairs(float* x, int64_t d, double a, const float* inv_freq, double s,
                 const float* shift) {
  for (int64_t i = 0; i < d / 2; ++i) {
    double angle = a * static_cast<double>(inv_freq[i]);
    if (shift != nullptr) angle += s * static_cast<double>(shift[i]);
    const double c = std::cos(angle), sn = std::sin(angle);
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = static_cast<float>(x0 * c - x1 * sn);
    x[2 * i + 1] = static_cast<float>(x0 * sn + x1 * c);
  }
}

void ApplyRope(float* x, int64_t S, int64_t n_heads, int64_t d, int64_t pos0, const RopeParams& r,
               const float* shift) {
  // Walk the segments that [pos0, pos0+S) touches; each covers at most
  // segment_length positions and the last one stops at the end (S-029).
  const int64_t L = r.segment_length > 0 ? r.segment_length : std::max<int64_t>(S, 1);
  int64_t t = 0;
  while (t < S) {
    const int64_t p = pos0 + t;
    const int64_t seg = p / L;
    const int64_t in_seg = std::min(S - t, (seg + 1) * L - p);  // tail guard
    const double s = r.segment_length > 0 ? static_cast<double>(seg) : 0.0;
    for (int64_t j = 0; j < in_seg; ++j) {
      const double a = static_cast<double>(p + j) * r.pos_scale;
      float* row = x + (t + j) * n_heads * d;
      for (int64_t h = 0; h < n_heads; ++h) {
        RotatePairs(row + h * d, d, a, r.inv_freq.data(), s,
                    shift != nullptr ? shift + h * (d / 2) : nullptr);
      }
    }
    t += in_seg;
  }
}

}  // namespace dsv4::seed
