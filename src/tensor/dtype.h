// DType: the element types tensors are stored in, as a table. Block types
// (fp4 packs 2 values per byte; GGUF q8_0 packs 32 values with an f16 scale)
// are described by elements per block and bytes per block.
#ifndef DSV4_TENSOR_DTYPE_H_
#define DSV4_TENSOR_DTYPE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kFp8E4m3,  // float8_e4m3fn
  kE8m0,     // float8_e8m0fnu: power-of-two block scales
  kFp4E2m1,  // float4_e2m1fn, packed two per byte, element 2i in the low nibble
  kI8,
  kI32,
  kI64,
  kQ8_0,  // GGUF block: f16 scale d, then 32 x int8; value = d * q
  kQ4_K,  // GGUF k-quant: 256 values, 4-bit, 8 sub-blocks of 32 with 6-bit scale and min
  kQ6_K,  // GGUF k-quant: 256 values, 6-bit, 16 sub-blocks of 16 with int8 scales
  // The other GGUF quant types of llama.cpp's ladders (layouts in
  // tensor/ggml_quants.h; computed by ops/ref/ggml_dot_ref.h and ops/simd).
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ5_K,
  kIQ2_XXS,
  kIQ2_XS,
  kIQ2_S,
  kIQ3_XXS,
  kIQ3_S,
  kIQ1_S,
  kIQ1_M,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,  // GGUF: 32 e2m1 values with one e8m0 scale (tensor/ggml_quants.h)
  kCount,
};

struct DTypeInfo {
  std::string_view name;  // "f32", "bf16", "fp8_e4m3", ...
  int block_elems;        // elements per block (1 for plain types)
  int block_bytes;        // bytes per block
};

const DTypeInfo& GetDTypeInfo(DType t);
inline std::string_view DTypeName(DType t) { return GetDTypeInfo(t).name; }
inline bool IsBlockDType(DType t) { return GetDTypeInfo(t).block_elems > 1; }
// The GGUF block-quantised types (q8_0, the k-quants, the legacy and i-quants):
// a matrix of one of these is a plain weight for ops::MatMul.
inline bool IsGgmlQuant(DType t) { return t >= DType::kQ8_0 && t < DType::kCount; }
// Bytes taken by `n` elements; n must be a multiple of the block size.
int64_t DTypeBytes(DType t, int64_t n);
std::optional<DType> DTypeFromName(std::string_view name);

// GGUF's block layout for q8_0.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// GGUF's k-quant layouts (ggml-common.h), 256 values per block.
inline constexpr int kQK_K = 256;
// q4_K: value = d·sc[s]·q − dmin·m[s] for sub-block s = k / 32, with 6-bit
// sc/m packed in `scales` (see Q4KScaleMin) and q the 4-bit code of value k:
// byte qs[32·(k / 64) + k % 32], low nibble when k % 64 < 32, else high.
struct BlockQ4_K {
  uint16_t d;     // f16 super-scale of the scales
  uint16_t dmin;  // f16 super-scale of the mins
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);
// The 6-bit scale and min of sub-block j (0..7) of a q4_K block.
inline void Q4KScaleMin(const uint8_t scales[12], int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}
// q6_K: value = d·scales[k / 16]·(q − 32), q the 6-bit code of value k: with
// h = k / 128, g = (k % 128) / 32, l = k % 32, its low 4 bits are nibble g / 2
// of ql[64h + 32·(g % 2) + l] and its high 2 bits are bits 2g, 2g+1 of qh[32h + l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16 super-scale
};
static_assert(sizeof(BlockQ6_K) == 210);
// ggml's q8_K, the activations that k-quant weights multiply in llama.cpp's CPU
// kernels (never stored in a file): value k of a block = d·qs[k]; bsums[j] =
// Σ qs[16j … 16j + 15]. Made by ops::ref::QuantizeRowQ8K.
struct BlockQ8K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// Converts n consecutive elements starting at element 0 of `src` to f32.
// Exact for every type (the scalar reference used by tests and ops/ref).
// For block types n must be a multiple of the block size.
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);

}  // namespace dsv4

#endif  // DSV4_TENSOR_DTYPE_H_
