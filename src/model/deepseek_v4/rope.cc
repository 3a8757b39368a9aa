// RoPE / YaRN frequencies and rotations (see rope.h).
#include "model/deepseek_v4/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"

namespace dsv4::deepseek_v4 {

RopeFrequencies::RopeFrequencies(int64_t rope_dim, double base, const YarnScaling* yarn) {
  CHECK(rope_dim > 0 && rope_dim % 2 == 0);
  const int64_t half = rope_dim / 2;
  omega_.resize(half);
  // ω_i = 1 / base^(2i/R), in fp32 like the reference's float32 arange.
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    omega_[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  if (yarn == nullptr) return;
  // YaRN (reference `precompute_freqs_cis`): pairs below `low` keep ω, pairs
  // above `high` get ω / factor, a linear ramp blends in between.
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(rope_dim) *
           std::log(static_cast<double>(yarn->original_max_position) /
                    (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(yarn->beta_fast)), 0.0);
  double high =
      std::min(std::ceil(correction_dim(yarn->beta_slow)), static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(yarn->factor);
  for (int64_t i = 0; i < half; ++i) {
    const float linear =
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    const float ramp = std::clamp(linear, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    omega_[i] = omega_[i] / factor * (1.0f - smooth) + omega_[i] * smooth;
  }
}

void RopeFrequencies::Rotate(float* x, int64_t pos, bool inverse) const {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < omega_.size(); ++i) {
    const float angle = p * omega_[i];
    const float c = std::cos(angle);
    const float s = inverse ? -std::sin(angle) : std::sin(angle);
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

void RotationCache::Rotate(float* x, int64_t pos, bool inverse) {
  const std::vector<float>& omega = f_.omega();
  const size_t n = omega.size();
  if (n > kMaxPairs) {
    f_.Rotate(x, pos, inverse);
    return;
  }
  if (pos != pos_) {
    const float p = static_cast<float>(pos);
    for (size_t i = 0; i < n; ++i) {
      const float angle = p * omega[i];  // as RopeFrequencies::Rotate
      cos_[i] = std::cos(angle);
      sin_[i] = std::sin(angle);
    }
    pos_ = pos;
  }
  for (size_t i = 0; i < n; ++i) {
    const float c = cos_[i], s = inverse ? -sin_[i] : sin_[i];
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

}  // namespace dsv4::deepseek_v4
