// The grid i-quants × q8_K activations in the arithmetic of ggml's scalar
// dot products (ggml-cpu's ggml_vec_dot_<type>_q8_K_generic). Per 256-value
// block b, with d = dw·dx (the weight's f16 scale times the activations'
// scale, one rounded product), q8 the activation codes, w the signed grid
// values and ls the odd sub-block scales:
//   iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s:
//     bsum = Σ_sub ls · Σ_{k in sub} w[k]·q8[k]   (exact, int32)
//     acc = acc + d·float(bsum)
//   and at the end: iq2_*: 0.125·acc;  iq3_xxs: 0.25·acc;  iq3_s: acc.
//   iq1_s, iq1_m (w = grid value −1/0/1, δ = ±1 per group of 8):
//     sumi = Σ_sub ls · Σ w[k]·q8[k],  sumi1 = Σ_sub ls · Σ δ·q8[k]   (exact)
//     acc = acc + d·(float(sumi) + 0.125·float(sumi1))
// from acc = 0, blocks in order, each operation rounded (this file is compiled
// with -ffp-contract=off). float(bsum) may round (|bsum| can pass 2^24); the
// iq1 sums stay below 2^24, so there only the last addition and the products
// with d round. The SIMD kernels (ops/simd/ggml_iq_simd.cc) give these bits.
#include <cstddef>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/ggml_dot_ref.h"
#include "tensor/ggml_grids.h"

namespace dsv4::ops::ref {
namespace {

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
// Byte j of a grid row (value j, little-endian packing).
int GridByte(uint64_t row, int j) { return static_cast<int>((row >> (8 * j)) & 0xFFu); }
int GridByte4(uint32_t row, int j) { return static_cast<int>((row >> (8 * j)) & 0xFFu); }
int Sign(unsigned signs, int j) { return (signs & kKmaskIq2xs[j]) != 0 ? -1 : 1; }
float ActScale(const BlockQ8K& x) { return x.d; }

// Σ over 8 values of the unsigned grid row g times the signs and q8.
int Dot8(uint64_t g, unsigned signs, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += GridByte(g, j) * q8[j] * Sign(signs, j);
  return s;
}

float Iq2xxs(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ2_XXS)) {
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    const uint8_t* qs = row + offsetof(BlockIQ2_XXS, qs);
    const int8_t* q8 = x[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t idx = U32(qs + 8 * ib), aux = U32(qs + 8 * ib + 4);
      const int32_t ls = 2 * static_cast<int32_t>(aux >> 28) + 1;
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        sumi +=
            Dot8(kIq2xxsGrid[(idx >> (8 * l)) & 255u], kKsignsIq2xs[(aux >> (7 * l)) & 127u], q8);
      }
      bsum += sumi * ls;
    }
    acc += d * static_cast<float>(bsum);
  }
  return 0.125f * acc;
}

float Iq2xs(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ2_XS)) {
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    const uint8_t* qs = row + offsetof(BlockIQ2_XS, qs);
    const uint8_t* sc = row + offsetof(BlockIQ2_XS, scales);
    const int8_t* q8 = x[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int32_t ls[2] = {2 * (sc[ib] & 15) + 1, 2 * (sc[ib] >> 4) + 1};
      for (int half = 0; half < 2; ++half) {
        int32_t sumi = 0;
        for (int l = 2 * half; l < 2 * half + 2; ++l, q8 += 8) {
          const uint16_t q = U16(qs + 2 * (4 * ib + l));
          sumi += Dot8(kIq2xsGrid[q & 511u], kKsignsIq2xs[q >> 9], q8);
        }
        bsum += sumi * ls[half];
      }
    }
    acc += d * static_cast<float>(bsum);
  }
  return 0.125f * acc;
}

float Iq2s(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ2_S)) {
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    const uint8_t* qs = row + offsetof(BlockIQ2_S, qs);
    const uint8_t* signs = qs + kQK_K / 8;
    const uint8_t* qh = row + offsetof(BlockIQ2_S, qh);
    const uint8_t* sc = row + offsetof(BlockIQ2_S, scales);
    const int8_t* q8 = x[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int32_t ls[2] = {2 * (sc[ib] & 15) + 1, 2 * (sc[ib] >> 4) + 1};
      int32_t sumi[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const unsigned idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3u) << 8);
        sumi[l / 2] += Dot8(kIq2sGrid[idx], signs[4 * ib + l], q8);
      }
      bsum += ls[0] * sumi[0] + ls[1] * sumi[1];
    }
    acc += d * static_cast<float>(bsum);
  }
  return 0.125f * acc;
}

// Σ over 8 values made of two 4-value grid rows.
int Dot4x2(uint32_t g0, uint32_t g1, unsigned signs, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 4; ++j) {
    s += GridByte4(g0, j) * q8[j] * Sign(signs, j);
    s += GridByte4(g1, j) * q8[j + 4] * Sign(signs, j + 4);
  }
  return s;
}

float Iq3xxs(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ3_XXS)) {
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    const uint8_t* q3 = row + offsetof(BlockIQ3_XXS, qs);
    const uint8_t* gas = q3 + kQK_K / 4;
    const int8_t* q8 = x[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = U32(gas + 4 * ib);
      const int32_t ls = 2 * static_cast<int32_t>(aux >> 28) + 1;
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        sumi += Dot4x2(kIq3xxsGrid[q3[8 * ib + 2 * l]], kIq3xxsGrid[q3[8 * ib + 2 * l + 1]],
                       kKsignsIq2xs[(aux >> (7 * l)) & 127u], q8);
      }
      bsum += sumi * ls;
    }
    acc += d * static_cast<float>(bsum);
  }
  return 0.25f * acc;
}

float Iq3s(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ3_S)) {
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    const uint8_t* qs = row + offsetof(BlockIQ3_S, qs);
    const uint8_t* qh = row + offsetof(BlockIQ3_S, qh);
    const uint8_t* signs = row + offsetof(BlockIQ3_S, signs);
    const uint8_t* sc = row + offsetof(BlockIQ3_S, scales);
    const int8_t* q8 = x[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int32_t ls = 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const unsigned i0 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1u) << 8);
        const unsigned i1 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1u) << 8);
        sumi += Dot4x2(kIq3sGrid[i0], kIq3sGrid[i1], signs[4 * ib + l], q8);
      }
      bsum += sumi * ls;
    }
    acc += d * static_cast<float>(bsum);
  }
  return acc;
}

// Σ over 8 values of the int8 iq1 grid row times q8.
int Dot8Iq1(uint64_t g, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += static_cast<int8_t>(GridByte(g, j)) * q8[j];
  return s;
}
int Sum8(const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += q8[j];
  return s;
}

float Iq1s(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ1_S)) {
    const uint8_t* qs = row + offsetof(BlockIQ1_S, qs);
    const uint8_t* qh = row + offsetof(BlockIQ1_S, qh);
    const int8_t* q8 = x[i].qs;
    int32_t sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t h = U16(qh + 2 * ib);
      const int32_t ls = 2 * ((h >> 12) & 7) + 1;
      const int32_t delta = (h & 0x8000u) != 0 ? -1 : 1;
      int32_t lsum = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        lsum += Dot8Iq1(kIq1sGrid[qs[4 * ib + l] | (((h >> (3 * l)) & 7u) << 8)], q8);
      }
      sumi += ls * lsum;
      sumi1 += ls * delta * (x[i].bsums[2 * ib] + x[i].bsums[2 * ib + 1]);
    }
    const float d = F16ToF32(U16(row)) * ActScale(x[i]);
    acc += d * (static_cast<float>(sumi) + kIq1sDelta * static_cast<float>(sumi1));
  }
  return acc;
}

float Iq1m(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, row += sizeof(BlockIQ1_M)) {
    const uint8_t* qs = row + offsetof(BlockIQ1_M, qs);
    const uint8_t* qh = row + offsetof(BlockIQ1_M, qh);
    const uint8_t* sc = row + offsetof(BlockIQ1_M, scales);
    uint16_t s[4];
    for (int j = 0; j < 4; ++j) s[j] = U16(sc + 2 * j);
    const auto dbits = static_cast<uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0x00f0u) |
                                             ((s[2] >> 4) & 0x0f00u) | (s[3] & 0xf000u));
    const int8_t* q8 = x[i].qs;
    int32_t sumi1 = 0, sumi2 = 0;
    for (int ib = 0; ib < 8; ++ib) {
      int32_t sum1[2] = {0, 0}, sum2[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const unsigned nib = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15u;
        const int32_t delta = (nib & 8u) != 0 ? -1 : 1;
        sum1[l / 2] += Dot8Iq1(kIq1sGrid[qs[4 * ib + l] | ((nib & 7u) << 8)], q8);
        sum2[l / 2] += Sum8(q8) * delta;
      }
      const int32_t ls1 = 2 * ((s[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
      const int32_t ls2 = 2 * ((s[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
      sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
      sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
    }
    const float d = F16ToF32(dbits) * ActScale(x[i]);
    acc += d * (static_cast<float>(sumi1) + kIq1sDelta * static_cast<float>(sumi2));
  }
  return acc;
}

}  // namespace

float DotIqQ8K(DType w, const uint8_t* row, const BlockQ8K* xq, int64_t k) {
  CHECK(k % kQK_K == 0, "DotIqQ8K: K = %lld is not a multiple of %d", static_cast<long long>(k),
        kQK_K);
  const int64_t nb = k / kQK_K;
  switch (w) {
    case DType::kIQ2_XXS:
      return Iq2xxs(row, xq, nb);
    case DType::kIQ2_XS:
      return Iq2xs(row, xq, nb);
    case DType::kIQ2_S:
      return Iq2s(row, xq, nb);
    case DType::kIQ3_XXS:
      return Iq3xxs(row, xq, nb);
    case DType::kIQ3_S:
      return Iq3s(row, xq, nb);
    case DType::kIQ1_S:
      return Iq1s(row, xq, nb);
    case DType::kIQ1_M:
      return Iq1m(row, xq, nb);
    default:
      break;
  }
  CHECK(false, "DotIqQ8K: %s is not a grid i-quant", std::string(DTypeName(w)).c_str());
  return 0.0f;
}

}  // namespace dsv4::ops::ref
