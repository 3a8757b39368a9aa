// Rotary position embedding of DeepSeek-V4 (spec §4.2): partial RoPE on the
// trailing R dims of a head, adjacent pairs (x[2i], x[2i+1]) rotated by pos·ω_i;
// plain frequencies ω_i = base^(−2i/R) on window layers, YaRN-interpolated ones
// (no amplitude factor) on compressed layers. The attention rotates q and kv
// (and undoes it on the output, V = K); the compressor and the indexer rotate
// their entries and queries.
//
// Dimensions: R rope dims.
#ifndef DSV4_MODEL_DEEPSEEK_V4_ROPE_H_
#define DSV4_MODEL_DEEPSEEK_V4_ROPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/config.h"

namespace dsv4::deepseek_v4 {

// RoPE frequencies of one layer kind (spec §4.2): ω_i = base^(−2i/R) in fp32,
// with YaRN interpolation for compressed layers; no amplitude factor.
class RopeFrequencies {
 public:
  RopeFrequencies() = default;
  // `yarn` null: plain RoPE.
  RopeFrequencies(int64_t rope_dim, double base, const YarnScaling* yarn);

  // Rotates the adjacent pairs (x[2i], x[2i+1]) of x[R] by angle pos·ω_i
  // (by −pos·ω_i when inverse). Angles in fp32 as the reference's outer product.
  void Rotate(float* x, int64_t pos, bool inverse) const;
  const std::vector<float>& omega() const { return omega_; }  // [R/2]

 private:
  std::vector<float> omega_;
};

// Rotate for many vectors at few positions (a token's heads): keeps the cos
// and sin of the last position asked for, so that they are computed once per
// position instead of once per vector (R/2 sincos calls each; at one decoded
// token they were most of the q/kv norm step). Bit for bit Rotate. One per
// thread (it is scratch).
class RotationCache {
 public:
  explicit RotationCache(const RopeFrequencies& f) : f_(f) {}
  void Rotate(float* x, int64_t pos, bool inverse);

 private:
  static constexpr size_t kMaxPairs = 128;  // larger R: no caching
  const RopeFrequencies& f_;
  int64_t pos_ = -1;
  float cos_[kMaxPairs], sin_[kMaxPairs];
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_ROPE_H_
