// Exact dequantisation of GGUF's grid i-quants (layouts in tensor/ggml_quants.h,
// grids in tensor/ggml_grids.h): the values gguf-py's gguf.quants.dequantize
// gives, bit for bit. Every block splits into groups of 8 values; a group is
// one 8-value grid row (or two 4-value rows), 8 sign bits and a sub-block scale.
// The float steps, in gguf-py's (numpy float32) order, each rounded (this file
// is compiled with -ffp-contract=off):
//   iq2_xxs, iq2_xs, iq2_s:  db = (d · (0.5 + s)) · 0.25;  y = (db · g) · ±1
//   iq3_xxs:                 db = (d · (0.5 + s)) · 0.5;   y = (db · g) · ±1
//   iq3_s:                   db = d · (1 + 2s);            y = (db · g) · ±1
//   iq1_s, iq1_m:            dl = d · (2s + 1);            y = dl · (g ± 0.125)
// with d the block's f16 scale, s the 4-bit (iq1: 3-bit) sub-block scale and
// g the grid value (iq1: −1, 0 or 1; g ± 0.125 is exact).
#include <bit>
#include <cstddef>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/float_types.h"
#include "tensor/ggml_grids.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the grids pack value j in byte j of each row");

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
float LoadF16(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

// One group of 8 values: y[j] = (db · g[j]) · (bit j of signs ? −1 : 1).
void Emit8(float db, const uint8_t g[8], unsigned signs, float* y) {
  for (int j = 0; j < 8; ++j) {
    const float sign = ((signs >> j) & 1u) != 0 ? -1.0f : 1.0f;
    y[j] = db * static_cast<float>(g[j]) * sign;
  }
}

void Row8(uint64_t row, uint8_t g[8]) { std::memcpy(g, &row, 8); }
void Row4x2(uint32_t lo, uint32_t hi, uint8_t g[8]) {
  std::memcpy(g, &lo, 4);
  std::memcpy(g + 4, &hi, 4);
}

void Iq2xxsBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ2_XXS, qs);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    // 8 bytes per 32 values: 4 grid indices, then 4 × 7 sign-index bits and the scale.
    const uint32_t idx = LoadU32(qs + 8 * ib), aux = LoadU32(qs + 8 * ib + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      uint8_t g[8];
      Row8(kIq2xxsGrid[(idx >> (8 * l)) & 255u], g);
      Emit8(db, g, kKsignsIq2xs[(aux >> (7 * l)) & 127u], y + 8 * l);
    }
  }
}

void Iq2xsBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ2_XS, qs);
  const uint8_t* sc = blk + offsetof(BlockIQ2_XS, scales);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + static_cast<float>(sc[ib] & 15)) * 0.25f,
                         d * (0.5f + static_cast<float>(sc[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = LoadU16(qs + 2 * (4 * ib + l));  // 9-bit grid index, 7-bit sign index
      uint8_t g[8];
      Row8(kIq2xsGrid[q & 511u], g);
      Emit8(db[l / 2], g, kKsignsIq2xs[q >> 9], y + 8 * l);
    }
  }
}

void Iq2sBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ2_S, qs);  // 32 index bytes, then 32 sign bytes
  const uint8_t* qh = blk + offsetof(BlockIQ2_S, qh);
  const uint8_t* sc = blk + offsetof(BlockIQ2_S, scales);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + static_cast<float>(sc[ib] & 15)) * 0.25f,
                         d * (0.5f + static_cast<float>(sc[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const unsigned idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3u) << 8);
      uint8_t g[8];
      Row8(kIq2sGrid[idx], g);
      Emit8(db[l / 2], g, qs[kQK_K / 8 + 4 * ib + l], y + 8 * l);
    }
  }
}

void Iq3xxsBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ3_XXS, qs);  // 64 index bytes
  const uint8_t* gas = qs + kQK_K / 4;                   // then 8 × u32 signs and scale
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint32_t aux = LoadU32(gas + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      uint8_t g[8];
      Row4x2(kIq3xxsGrid[qs[8 * ib + 2 * l]], kIq3xxsGrid[qs[8 * ib + 2 * l + 1]], g);
      Emit8(db, g, kKsignsIq2xs[(aux >> (7 * l)) & 127u], y + 8 * l);
    }
  }
}

void Iq3sBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ3_S, qs);
  const uint8_t* qh = blk + offsetof(BlockIQ3_S, qh);
  const uint8_t* signs = blk + offsetof(BlockIQ3_S, signs);
  const uint8_t* sc = blk + offsetof(BlockIQ3_S, scales);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int s = (sc[ib / 2] >> (4 * (ib % 2))) & 15;
    const float db = d * static_cast<float>(1 + 2 * s);
    for (int l = 0; l < 4; ++l) {
      const unsigned i0 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1u) << 8);
      const unsigned i1 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1u) << 8);
      uint8_t g[8];
      Row4x2(kIq3sGrid[i0], kIq3sGrid[i1], g);
      Emit8(db, g, signs[4 * ib + l], y + 8 * l);
    }
  }
}

// iq1 group of 8: y[j] = dl · (g[j] + delta).
void Emit8Iq1(float dl, uint64_t row, float delta, float* y) {
  int8_t g[8];
  std::memcpy(g, &row, 8);
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(g[j]) + delta);
}

void Iq1sBlock(const uint8_t* blk, float* y) {
  const float d = LoadF16(blk);
  const uint8_t* qs = blk + offsetof(BlockIQ1_S, qs);
  const uint8_t* qh = blk + offsetof(BlockIQ1_S, qh);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    // u16: four 3-bit index high parts, the 3-bit scale (bits 12-14), the delta sign (bit 15).
    const uint16_t h = LoadU16(qh + 2 * ib);
    const float dl = d * static_cast<float>(2 * ((h >> 12) & 7) + 1);
    const float delta = (h & 0x8000u) != 0 ? -kIq1sDelta : kIq1sDelta;
    for (int l = 0; l < 4; ++l) {
      const unsigned idx = qs[4 * ib + l] | (((h >> (3 * l)) & 7u) << 8);
      Emit8Iq1(dl, kIq1sGrid[idx], delta, y + 8 * l);
    }
  }
}

// iq1_m's f16 scale: the top nibbles of its four u16 scale words, lowest first.
uint16_t Iq1mScaleBits(const uint8_t* sc) {
  const uint16_t s0 = LoadU16(sc), s1 = LoadU16(sc + 2), s2 = LoadU16(sc + 4), s3 = LoadU16(sc + 6);
  return static_cast<uint16_t>((s0 >> 12) | ((s1 >> 8) & 0x00f0u) | ((s2 >> 4) & 0x0f00u) |
                               (s3 & 0xf000u));
}

void Iq1mBlock(const uint8_t* blk, float* y) {
  const uint8_t* qs = blk + offsetof(BlockIQ1_M, qs);
  const uint8_t* qh = blk + offsetof(BlockIQ1_M, qh);
  const uint8_t* sc = blk + offsetof(BlockIQ1_M, scales);
  const float d = F16ToF32(Iq1mScaleBits(sc));
  for (int ib = 0; ib < 8; ++ib) {
    for (int h = 0; h < 2; ++h) {  // 16 values: one 3-bit scale, one qh byte
      const int g16 = 2 * ib + h;
      const int s = (LoadU16(sc + 2 * (g16 / 4)) >> (3 * (g16 % 4))) & 7;
      const float dl = d * static_cast<float>(2 * s + 1);
      for (int l2 = 0; l2 < 2; ++l2, y += 8) {
        const unsigned nib = (qh[g16] >> (4 * l2)) & 15u;  // 3 index bits, the delta sign
        const unsigned idx = qs[4 * ib + 2 * h + l2] | ((nib & 7u) << 8);
        const float delta = (nib & 8u) != 0 ? -kIq1sDelta : kIq1sDelta;
        Emit8Iq1(dl, kIq1sGrid[idx], delta, y);
      }
    }
  }
}

}  // namespace

void DequantizeIqRow(DType t, const uint8_t* src, int64_t n, float* dst) {
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::kIQ2_XXS:
      block = &Iq2xxsBlock;
      break;
    case DType::kIQ2_XS:
      block = &Iq2xsBlock;
      break;
    case DType::kIQ2_S:
      block = &Iq2sBlock;
      break;
    case DType::kIQ3_XXS:
      block = &Iq3xxsBlock;
      break;
    case DType::kIQ3_S:
      block = &Iq3sBlock;
      break;
    case DType::kIQ1_S:
      block = &Iq1sBlock;
      break;
    case DType::kIQ1_M:
      block = &Iq1mBlock;
      break;
    default:
      CHECK(false, "DequantizeIqRow: %s is not a grid i-quant", std::string(DTypeName(t)).c_str());
  }
  CHECK(n % kQK_K == 0, "DequantizeIqRow: n = %lld is not a multiple of %d",
        static_cast<long long>(n), kQK_K);
  const int64_t block_bytes = GetDTypeInfo(t).block_bytes;
  for (int64_t b = 0; b < n / kQK_K; ++b) block(src + b * block_bytes, dst + b * kQK_K);
}

}  // namespace dsv4
