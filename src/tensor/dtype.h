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
// Bytes taken by `n` elements; n must be a multiple of the block size.
int64_t DTypeBytes(DType t, int64_t n);
std::optional<DType> DTypeFromName(std::string_view name);

// GGUF's block layout for q8_0.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Converts n consecutive elements starting at element 0 of `src` to f32.
// Exact for every type (the scalar reference used by tests and ops/ref).
// For block types n must be a multiple of the block size.
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);

}  // namespace dsv4

#endif  // DSV4_TENSOR_DTYPE_H_
