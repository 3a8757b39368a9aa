// ops::ref dot products of the legacy and k-quant GGUF weights with their
// quantised activations, in the arithmetic of ggml-cpu's scalar
// ggml_vec_dot_<type>_q8_<x>_generic (quants.c). Per block b the integer sums
// are exact; then the block's float steps, from acc = 0, blocks in order, each
// product rounded (this file is compiled with -ffp-contract=off). With dw, m,
// dmin the weight block's f16 fields as f32, dx (and s) the activation
// block's scale (and q8_1's f16 d·Σ codes), x8 the activation codes:
//
//   q4_0   isum = Σ (q − 8)·x8            acc = acc + (isum·dw)·dx
//   q4_1   isum = Σ q·x8                  acc = acc + ((dw·dx)·isum + m·s)
//   q5_0   isum = Σ (q − 16)·x8           acc = acc + (dw·dx)·isum
//   q5_1   isum = Σ q·x8                  acc = acc + ((dw·dx)·isum + m·s)
//   iq4_nl isum = Σ kv[q]·x8              acc = acc + (dx·dw)·isum
//   q2_K   isum = Σ_j sc[j]·Σ_{k in j} q·x8,  summs = Σ_j m[j]·bsums[j]  (16 sub-blocks)
//          acc = acc + ((dx·dw)·isum − (dx·dmin)·summs)
//   q3_K   isum = Σ_j (sc[j] − 32)·Σ_{k in j} q·x8                     (q in −4…3)
//          acc = acc + (dw·dx)·isum
//   q5_K   isum = Σ_j sc[j]·Σ_{k in j} q·x8,  imin = Σ_i m[i / 2]·bsums[i]   (8 sub-blocks)
//          acc = acc + (dw·dx)·isum;  acc = acc − (dmin·dx)·imin
//   iq4_xs per sub-block j < 8 in order:  isum_j = Σ_{k in j} kv[q]·x8
//          acc = acc + ((dw·dx)·(ls[j] − 32))·isum_j
//
// (an int times a float converts the int to f32 first). The legacy and q2_K /
// iq4_xs steps are the generic code's exactly; ggml's generic q3_K / q5_K
// spread the integer sums over 8 float partial sums, here one accumulator
// takes them per block as ops/ref's q4_K (kquant_ref.h) does. These are the
// uncontracted values: a llama.cpp build compiled with multiply-add
// contraction (GCC's default for GNU C where the target has FMA) fuses
// (dw·dx)·isum + m·s (q4_1, q5_1) and dall·isum − dmin·summs (q2_K) into one
// FMA, and its q4_0, q5_0, iq4_nl and iq4_xs agree with these bit for bit.
#include <cstddef>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/ggml_dot_ref.h"

namespace dsv4::ops::ref {
namespace {

constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

int Nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }
int HighBit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Weight blocks are addressed by byte offsets, not struct pointers: rows need
// not be aligned for the f16 fields.
float DotQ4_0(const uint8_t* row, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ4_0));
    const uint8_t* qs = blk + offsetof(BlockQ4_0, qs);
    int32_t isum = 0;
    for (int j = 0; j < kQK4; ++j) isum += (Nibble(qs, j) - 8) * x[b].qs[j];
    const float p = static_cast<float>(isum) * F16At(blk + offsetof(BlockQ4_0, d));
    acc = acc + p * F16ToF32(x[b].d);
  }
  return acc;
}

float DotQ4_1(const uint8_t* row, const BlockQ8_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ4_1));
    const uint8_t* qs = blk + offsetof(BlockQ4_1, qs);
    int32_t isum = 0;
    for (int j = 0; j < kQK4; ++j) isum += Nibble(qs, j) * x[b].qs[j];
    const float dd = F16At(blk + offsetof(BlockQ4_1, d)) * F16ToF32(x[b].d);
    const float ms = F16At(blk + offsetof(BlockQ4_1, m)) * F16ToF32(x[b].s);
    acc = acc + (dd * static_cast<float>(isum) + ms);
  }
  return acc;
}

float DotQ5_0(const uint8_t* row, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ5_0));
    const uint8_t* qh = blk + offsetof(BlockQ5_0, qh);
    const uint8_t* qs = blk + offsetof(BlockQ5_0, qs);
    int32_t isum = 0;
    for (int j = 0; j < kQK4; ++j) {
      isum += ((Nibble(qs, j) | (HighBit(qh, j) << 4)) - 16) * x[b].qs[j];
    }
    const float dd = F16At(blk + offsetof(BlockQ5_0, d)) * F16ToF32(x[b].d);
    acc = acc + dd * static_cast<float>(isum);
  }
  return acc;
}

float DotQ5_1(const uint8_t* row, const BlockQ8_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ5_1));
    const uint8_t* qh = blk + offsetof(BlockQ5_1, qh);
    const uint8_t* qs = blk + offsetof(BlockQ5_1, qs);
    int32_t isum = 0;
    for (int j = 0; j < kQK4; ++j) isum += (Nibble(qs, j) | (HighBit(qh, j) << 4)) * x[b].qs[j];
    const float dd = F16At(blk + offsetof(BlockQ5_1, d)) * F16ToF32(x[b].d);
    const float ms = F16At(blk + offsetof(BlockQ5_1, m)) * F16ToF32(x[b].s);
    acc = acc + (dd * static_cast<float>(isum) + ms);
  }
  return acc;
}

float DotIQ4_NL(const uint8_t* row, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockIQ4_NL));
    const uint8_t* qs = blk + offsetof(BlockIQ4_NL, qs);
    int32_t isum = 0;
    for (int j = 0; j < kQK4; ++j) isum += kIq4nlValues[Nibble(qs, j)] * x[b].qs[j];
    const float d = F16ToF32(x[b].d) * F16At(blk + offsetof(BlockIQ4_NL, d));
    acc = acc + d * static_cast<float>(isum);
  }
  return acc;
}

float DotQ2_K(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ2_K));
    const uint8_t* sc = blk + offsetof(BlockQ2_K, scales);
    const uint8_t* qs = blk + offsetof(BlockQ2_K, qs);
    int32_t isum = 0, summs = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int i = 0; i < 16; ++i) {
        const int k = 16 * j + i, h = k / 128, g = k % 128 / 32, l = k % 32;
        dot += ((qs[32 * h + l] >> (2 * g)) & 3) * x[b].qs[k];
      }
      isum += (sc[j] & 0xF) * dot;
      summs += (sc[j] >> 4) * x[b].bsums[j];
    }
    const float dall = x[b].d * F16At(blk + offsetof(BlockQ2_K, d));
    const float dmin = x[b].d * F16At(blk + offsetof(BlockQ2_K, dmin));
    acc = acc + (dall * static_cast<float>(isum) - dmin * static_cast<float>(summs));
  }
  return acc;
}

int Q3KScale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

float DotQ3_K(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ3_K));
    const uint8_t* hm = blk + offsetof(BlockQ3_K, hmask);
    const uint8_t* qs = blk + offsetof(BlockQ3_K, qs);
    const uint8_t* sc = blk + offsetof(BlockQ3_K, scales);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int i = 0; i < 16; ++i) {
        const int k = 16 * j + i, h = k / 128, g = k % 128 / 32, l = k % 32;
        const int q = ((qs[32 * h + l] >> (2 * g)) & 3) - (((hm[l] >> (4 * h + g)) & 1) ? 0 : 4);
        dot += q * x[b].qs[k];
      }
      isum += (Q3KScale(sc, j) - 32) * dot;
    }
    const float d = F16At(blk + offsetof(BlockQ3_K, d)) * x[b].d;
    acc = acc + d * static_cast<float>(isum);
  }
  return acc;
}

float DotQ5_K(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ5_K));
    const uint8_t* qh = blk + offsetof(BlockQ5_K, qh);
    const uint8_t* qs = blk + offsetof(BlockQ5_K, qs);
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      Q4KScaleMin(blk + offsetof(BlockQ5_K, scales), j, &sc, &m);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | (((qh[l] >> j) & 1) << 4);
        dot += q * x[b].qs[32 * j + l];
      }
      isum += sc * dot;
      imin += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    const float d = F16At(blk + offsetof(BlockQ5_K, d)) * x[b].d;
    const float dmin = F16At(blk + offsetof(BlockQ5_K, dmin)) * x[b].d;
    acc = acc + d * static_cast<float>(isum);
    acc = acc - dmin * static_cast<float>(imin);
  }
  return acc;
}

float DotIQ4_XS(const uint8_t* row, const BlockQ8K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockIQ4_XS));
    uint16_t sh;
    std::memcpy(&sh, blk + offsetof(BlockIQ4_XS, scales_h), 2);
    const uint8_t* sl = blk + offsetof(BlockIQ4_XS, scales_l);
    const uint8_t* qs = blk + offsetof(BlockIQ4_XS, qs);
    const float d4d8 = F16At(blk + offsetof(BlockIQ4_XS, d)) * x[b].d;
    for (int j = 0; j < 8; ++j) {
      const int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
      int32_t isum = 0;
      for (int l = 0; l < 32; ++l) {
        isum += kIq4nlValues[Nibble(qs + 16 * j, l)] * x[b].qs[32 * j + l];
      }
      const float dl = d4d8 * static_cast<float>(ls - 32);
      acc = acc + dl * static_cast<float>(isum);
    }
  }
  return acc;
}

}  // namespace

float DotBasicQ8(DType w, const uint8_t* row, const void* xq, int64_t k) {
  const auto* q8_0 = static_cast<const BlockQ8_0*>(xq);
  const auto* q8_1 = static_cast<const BlockQ8_1*>(xq);
  const auto* q8_k = static_cast<const BlockQ8K*>(xq);
  switch (w) {
    case DType::kQ4_0:
      return DotQ4_0(row, q8_0, k / kQK4);
    case DType::kQ4_1:
      return DotQ4_1(row, q8_1, k / kQK4);
    case DType::kQ5_0:
      return DotQ5_0(row, q8_0, k / kQK4);
    case DType::kQ5_1:
      return DotQ5_1(row, q8_1, k / kQK4);
    case DType::kIQ4_NL:
      return DotIQ4_NL(row, q8_0, k / kQK4);
    case DType::kQ2_K:
      return DotQ2_K(row, q8_k, k / kQK_K);
    case DType::kQ3_K:
      return DotQ3_K(row, q8_k, k / kQK_K);
    case DType::kQ5_K:
      return DotQ5_K(row, q8_k, k / kQK_K);
    case DType::kIQ4_XS:
      return DotIQ4_XS(row, q8_k, k / kQK_K);
    default:
      break;
  }
  CHECK(false, "DotBasicQ8: %s is not a legacy or k-quant GGUF type",
        std::string(DTypeName(w)).c_str());
  return 0.0f;
}

}  // namespace dsv4::ops::ref
