#include "base/float_types.h"

namespace dsv4 {

uint16_t F32ToF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (au >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (au < 0x38800000u) {                        // below 2^-14: subnormal or zero
    // Value in units of 2^-24, rounded to nearest even.
    const float a = std::bit_cast<float>(au);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias exponent 127 -> 15 and round the mantissa 23 -> 10 bits.
  uint32_t m = au - (112u << 23);
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | static_cast<uint16_t>(m >> 13);
}

uint8_t F32ToFp8E4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t au = u & 0x7fffffffu;
  // >= 480, inf or NaN: NaN. (464, 480) also ends at 0x7f (NaN) via the rounding below.
  if (au >= 0x43f00000u) return sign | 0x7fu;
  if (au < 0x3c800000u) {  // below 2^-6: subnormal, units of 2^-9
    const float a = std::bit_cast<float>(au);
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  uint32_t m = au - (120u << 23);  // rebias 127 -> 7
  m += 0x7ffffu + ((m >> 20) & 1u);
  return sign | static_cast<uint8_t>(m >> 20);
}

uint8_t F32ToFp4E2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  // ml_dtypes: numeric_limits<float4_e2m1fn>::quiet_NaN() is 0b1000, negated for -NaN.
  if (std::isnan(f)) return sign ^ 0x8;
  const float a = std::fabs(f);
  // Representable magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; midpoints break ties to even code.
  uint8_t code;
  if (a <= 0.25f)
    code = 0;
  else if (a < 0.75f)
    code = 1;
  else if (a <= 1.25f)
    code = 2;
  else if (a < 1.75f)
    code = 3;
  else if (a <= 2.5f)
    code = 4;
  else if (a < 3.5f)
    code = 5;
  else if (a <= 5.0f)
    code = 6;
  else
    code = 7;
  return sign | code;
}

}  // namespace dsv4
