// Scalar number formats of model weights and their exact conversions to and
// from float: bf16, f16 (IEEE binary16), fp8 e4m3 ("fn": no infinities, NaN is
// S.1111.111, max 448), e8m0 (power-of-two scale 2^(e-127), 0xFF is NaN) and
// fp4 e2m1 (values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no NaN). Decoding is exact;
// encoding rounds to nearest, ties to even, with the overflow rules of
// PyTorch's c10 types (ml_dtypes agrees), which made the reference weights.
// Tests compare every code against tables made by ml_dtypes/numpy.
#ifndef DSV4_BASE_FLOAT_TYPES_H_
#define DSV4_BASE_FLOAT_TYPES_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dsv4 {

// ---- bf16: the top 16 bits of an f32 ----
inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// ---- f16: IEEE binary16 ----
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}
uint16_t F32ToF16(float f);

// ---- fp8 e4m3fn: bias 7, subnormals, no inf ----
inline float Fp8E4m3ToF32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  float r;
  if (exp == 15 && man == 7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);  // man/8 * 2^-6
  } else {
    r = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1+man/8) * 2^(exp-7)
  }
  return neg ? -r : r;
}
// Rounds to nearest even, as c10 and ml_dtypes: |f| <= 464 (the tie half-way from
// 448 to the next step, 480) rounds to at most ±448; anything larger, ±inf and NaN
// give the NaN code S.1111.111 with the input's sign.
uint8_t F32ToFp8E4m3(float f);

// ---- e8m0: an 8-bit biased exponent, the block scale of FP8/FP4 weights ----
inline float E8m0ToF32(uint8_t e) {
  if (e == 0xff) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 (f32 subnormal)
  return std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// ---- fp4 e2m1: one nibble ----
inline float Fp4E2m1ToF32(uint8_t nibble) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[nibble & 0xf];
}
// Rounds to nearest even, saturating at ±6 (±inf too), as ml_dtypes float4_e2m1fn.
// fp4 has no NaN and the MX spec leaves NaN conversion implementation-defined; we
// follow ml_dtypes, whose NaN stand-in is the code 0b1000 (-0) with the NaN's sign
// flipped into it: +NaN -> 0x8 (-0), -NaN -> 0x0 (+0). A NaN weight is a bug upstream.
uint8_t F32ToFp4E2m1(float f);

}  // namespace dsv4

#endif  // DSV4_BASE_FLOAT_TYPES_H_
