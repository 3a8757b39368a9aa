// Exact dequantisation of the legacy (q4_0, q4_1, q5_0, q5_1, iq4_nl) and
// k-quant (q2_K, q3_K, q5_K, iq4_xs) GGUF blocks: gguf-py's
// gguf.quants.dequantize bit for bit. gguf-py computes in numpy float32, one
// rounding per operation, so the order of the operations below is its order:
//   q4_0:   d·(q − 8)                      q4_1:  (d·q) + m
//   q5_0:   d·(q − 16)                     q5_1:  (d·q) + m
//   iq4_nl: d·kv[q]
//   q2_K:   (d·sc)·q − (dmin·m)            (sc, m: the 4-bit halves of scales[j])
//   q3_K:   (d·(sc − 32))·q                (q in −4…3)
//   q5_K:   (d·sc)·q − (dmin·m)            (sc, m as q4_K's; q in 0…31)
//   iq4_xs: (d·(ls − 32))·kv[q]
// where d, m, dmin are the block's f16 fields as f32 and the integer codes are
// exact in f32. The file is compiled without multiply-add contraction
// (src/tensor/CMakeLists.txt): (d·sc)·q − dmin·m must round the product first.
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/float_types.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {

// llama.cpp's kvalues_iq4nl: the 16 non-linear levels of iq4_nl and iq4_xs.
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Code j (0…31) of a legacy block's 16 nibble bytes: low nibbles are values
// 0…15, high nibbles 16…31.
int Nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

// The fifth bit of value j of a q5_0 / q5_1 block: bit j of the little-endian qh.
int HighBit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void Q4_0Block(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ4_0, d));
  const uint8_t* qs = b + offsetof(BlockQ4_0, qs);
  for (int j = 0; j < kQK4; ++j) y[j] = d * static_cast<float>(Nibble(qs, j) - 8);
}

void Q4_1Block(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ4_1, d));
  const float m = F16At(b + offsetof(BlockQ4_1, m));
  const uint8_t* qs = b + offsetof(BlockQ4_1, qs);
  for (int j = 0; j < kQK4; ++j) {
    const float prod = d * static_cast<float>(Nibble(qs, j));
    y[j] = prod + m;
  }
}

void Q5_0Block(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ5_0, d));
  const uint8_t* qh = b + offsetof(BlockQ5_0, qh);
  const uint8_t* qs = b + offsetof(BlockQ5_0, qs);
  for (int j = 0; j < kQK4; ++j) {
    const int q = Nibble(qs, j) | (HighBit(qh, j) << 4);
    y[j] = d * static_cast<float>(q - 16);
  }
}

void Q5_1Block(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ5_1, d));
  const float m = F16At(b + offsetof(BlockQ5_1, m));
  const uint8_t* qh = b + offsetof(BlockQ5_1, qh);
  const uint8_t* qs = b + offsetof(BlockQ5_1, qs);
  for (int j = 0; j < kQK4; ++j) {
    const int q = Nibble(qs, j) | (HighBit(qh, j) << 4);
    const float prod = d * static_cast<float>(q);
    y[j] = prod + m;
  }
}

void IQ4_NLBlock(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockIQ4_NL, d));
  const uint8_t* qs = b + offsetof(BlockIQ4_NL, qs);
  for (int j = 0; j < kQK4; ++j) y[j] = d * static_cast<float>(kIq4nlValues[Nibble(qs, j)]);
}

// q2_K value k = 128h + 32g + l (h < 2, g < 4, l < 32): q = bits 2g, 2g+1 of
// qs[32h + l]; sub-block j = k / 16 has scale scales[j] & 15, min scales[j] >> 4.
void Q2_KBlock(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ2_K, d));
  const float dmin = F16At(b + offsetof(BlockQ2_K, dmin));
  const uint8_t* sc = b + offsetof(BlockQ2_K, scales);
  const uint8_t* qs = b + offsetof(BlockQ2_K, qs);
  for (int k = 0; k < kQK_K; ++k) {
    const int h = k / 128, g = k % 128 / 32, l = k % 32, j = k / 16;
    const int q = (qs[32 * h + l] >> (2 * g)) & 3;
    const float dl = d * static_cast<float>(sc[j] & 0xF);
    const float ml = dmin * static_cast<float>(sc[j] >> 4);
    const float prod = dl * static_cast<float>(q);
    y[k] = prod - ml;
  }
}

// q3_K value k = 128h + 32g + l: the low two bits are bits 2g, 2g+1 of
// qs[32h + l]; bit 4h + g of hmask[l] set means q as is, clear means q − 4.
// Sub-block j = k / 16 has the 6-bit scale Q3KScale(j) − 32.
int Q3KScale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

void Q3_KBlock(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ3_K, d));
  const uint8_t* hm = b + offsetof(BlockQ3_K, hmask);
  const uint8_t* qs = b + offsetof(BlockQ3_K, qs);
  const uint8_t* sc = b + offsetof(BlockQ3_K, scales);
  for (int k = 0; k < kQK_K; ++k) {
    const int h = k / 128, g = k % 128 / 32, l = k % 32;
    const int q = ((qs[32 * h + l] >> (2 * g)) & 3) - (((hm[l] >> (4 * h + g)) & 1) ? 0 : 4);
    const float dl = d * static_cast<float>(Q3KScale(sc, k / 16) - 32);
    y[k] = dl * static_cast<float>(q);
  }
}

// q5_K value k = 32j + l (sub-block j < 8): the low nibble is nibble j % 2 of
// qs[32·(j / 2) + l], the fifth bit is bit j of qh[l].
void Q5_KBlock(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockQ5_K, d));
  const float dmin = F16At(b + offsetof(BlockQ5_K, dmin));
  const uint8_t* qh = b + offsetof(BlockQ5_K, qh);
  const uint8_t* qs = b + offsetof(BlockQ5_K, qs);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    Q4KScaleMin(b + offsetof(BlockQ5_K, scales), j, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | (((qh[l] >> j) & 1) << 4);
      const float prod = dl * static_cast<float>(q);
      y[32 * j + l] = prod - ml;
    }
  }
}

// iq4_xs sub-block j < 8 (32 values): ls = nibble j % 2 of scales_l[j / 2] |
// bits 2j, 2j+1 of scales_h << 4; value 32j + l is kv[nibble of qs[16j + l % 16]],
// the low nibble for l < 16.
void IQ4_XSBlock(const uint8_t* b, float* y) {
  const float d = F16At(b + offsetof(BlockIQ4_XS, d));
  uint16_t sh;
  std::memcpy(&sh, b + offsetof(BlockIQ4_XS, scales_h), 2);
  const uint8_t* sl = b + offsetof(BlockIQ4_XS, scales_l);
  const uint8_t* qs = b + offsetof(BlockIQ4_XS, qs);
  for (int j = 0; j < 8; ++j) {
    const int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int l = 0; l < 32; ++l) {
      y[32 * j + l] = dl * static_cast<float>(kIq4nlValues[Nibble(qs + 16 * j, l)]);
    }
  }
}

}  // namespace

void DequantizeBasicRow(DType t, const uint8_t* src, int64_t n, float* dst) {
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::kQ4_0:
      block = &Q4_0Block;
      break;
    case DType::kQ4_1:
      block = &Q4_1Block;
      break;
    case DType::kQ5_0:
      block = &Q5_0Block;
      break;
    case DType::kQ5_1:
      block = &Q5_1Block;
      break;
    case DType::kIQ4_NL:
      block = &IQ4_NLBlock;
      break;
    case DType::kQ2_K:
      block = &Q2_KBlock;
      break;
    case DType::kQ3_K:
      block = &Q3_KBlock;
      break;
    case DType::kQ5_K:
      block = &Q5_KBlock;
      break;
    case DType::kIQ4_XS:
      block = &IQ4_XSBlock;
      break;
    default:
      CHECK(false, "DequantizeBasicRow: %s is not a legacy or k-quant GGUF type",
            std::string(DTypeName(t)).c_str());
      return;
  }
  const DTypeInfo& info = GetDTypeInfo(t);
  CHECK(n % info.block_elems == 0, "DequantizeBasicRow: %lld values of %s, not whole blocks",
        static_cast<long long>(n), std::string(DTypeName(t)).c_str());
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    block(src + b * info.block_bytes, dst + b * info.block_elems);
  }
}

}  // namespace dsv4
