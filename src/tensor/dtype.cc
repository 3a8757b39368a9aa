#include "tensor/dtype.h"

#include <cstring>

#include "base/check.h"
#include "base/float_types.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {
namespace {
constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4},       {"f16", 1, 2},      {"bf16", 1, 2},       {"fp8_e4m3", 1, 1},
    {"e8m0", 1, 1},      {"fp4_e2m1", 2, 1}, {"i8", 1, 1},         {"i32", 1, 4},
    {"i64", 1, 8},       {"q8_0", 32, 34},   {"q4_K", 256, 144},   {"q6_K", 256, 210},
    {"q4_0", 32, 18},    {"q4_1", 32, 20},   {"q5_0", 32, 22},     {"q5_1", 32, 24},
    {"q2_K", 256, 84},   {"q3_K", 256, 110}, {"q5_K", 256, 176},   {"iq2_xxs", 256, 66},
    {"iq2_xs", 256, 74}, {"iq2_s", 256, 82}, {"iq3_xxs", 256, 98}, {"iq3_s", 256, 110},
    {"iq1_s", 256, 50},  {"iq1_m", 256, 56}, {"iq4_nl", 32, 18},   {"iq4_xs", 256, 136},
    {"mxfp4", 32, 17},
};
static_assert(sizeof(kInfos) / sizeof(kInfos[0]) == static_cast<size_t>(DType::kCount));
}  // namespace

const DTypeInfo& GetDTypeInfo(DType t) {
  CHECK(t < DType::kCount, "bad dtype %d", static_cast<int>(t));
  return kInfos[static_cast<int>(t)];
}

int64_t DTypeBytes(DType t, int64_t n) {
  const DTypeInfo& info = GetDTypeInfo(t);
  DCHECK(n % info.block_elems == 0);
  return n / info.block_elems * info.block_bytes;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    if (kInfos[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

void DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  if (n <= 0) return;  // src may be null for an empty row
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, p, n * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case DType::kFp8E4m3:
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp8E4m3ToF32(p[i]);
      return;
    case DType::kE8m0:
      for (int64_t i = 0; i < n; ++i) dst[i] = E8m0ToF32(p[i]);
      return;
    case DType::kFp4E2m1:
      DCHECK(n % 2 == 0);
      for (int64_t i = 0; i < n / 2; ++i) {
        dst[2 * i] = Fp4E2m1ToF32(p[i] & 0xf);
        dst[2 * i + 1] = Fp4E2m1ToF32(p[i] >> 4);
      }
      return;
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kQ8_0: {
      DCHECK(n % 32 == 0);
      for (int64_t b = 0; b < n / 32; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, p + b * sizeof(BlockQ8_0), sizeof(BlockQ8_0));
        const float d = F16ToF32(blk.d);
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * static_cast<float>(blk.qs[j]);
      }
      return;
    }
    case DType::kQ4_K: {
      DCHECK(n % kQK_K == 0);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ4_K blk;
        std::memcpy(&blk, p + b * sizeof(BlockQ4_K), sizeof(BlockQ4_K));
        const float d = F16ToF32(blk.d);
        const float dmin = F16ToF32(blk.dmin);
        float* y = dst + b * kQK_K;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          Q4KScaleMin(blk.scales, j, &sc, &m);
          // Two roundings, as ggml and gguf-py: (d·sc)·q, then minus dmin·m.
          const float scale = d * static_cast<float>(sc);
          const float min = dmin * static_cast<float>(m);
          const uint8_t* q = blk.qs + 32 * (j / 2);
          const int shift = 4 * (j % 2);
          for (int l = 0; l < 32; ++l) {
            const float prod = scale * static_cast<float>((q[l] >> shift) & 0xF);
            y[32 * j + l] = prod - min;
          }
        }
      }
      return;
    }
    case DType::kQ6_K: {
      DCHECK(n % kQK_K == 0);
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ6_K blk;
        std::memcpy(&blk, p + b * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
        const float d = F16ToF32(blk.d);
        float* y = dst + b * kQK_K;
        for (int k = 0; k < kQK_K; ++k) {
          const int h = k / 128, g = (k % 128) / 32, l = k % 32;
          const int lo = (blk.ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
          const int hi = (blk.qh[32 * h + l] >> (2 * g)) & 3;
          const float scale = d * static_cast<float>(blk.scales[k / 16]);
          y[k] = scale * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
      return;
    }
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      DequantizeBasicRow(t, p, n, dst);
      return;
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
      DequantizeIqRow(t, p, n, dst);
      return;
    case DType::kMXFP4:
      DCHECK(n % kQK4 == 0);
      for (int64_t b = 0; b < n / kQK4; ++b) {
        BlockMXFP4 blk;
        std::memcpy(&blk, p + b * sizeof(BlockMXFP4), sizeof(BlockMXFP4));
        const float scale = E8m0ToF32(blk.e);
        for (int j = 0; j < kQK4 / 2; ++j) {
          dst[b * kQK4 + j] = Fp4E2m1ToF32(blk.qs[j] & 0xf) * scale;
          dst[b * kQK4 + j + kQK4 / 2] = Fp4E2m1ToF32(blk.qs[j] >> 4) * scale;
        }
      }
      return;
    case DType::kCount:
      break;
  }
  CHECK(false, "DequantizeRow: bad dtype %d", static_cast<int>(t));
}

}  // namespace dsv4
