// ggml's MXFP4 block (GGUF type 39; spec deepseek-v4.md §14.3): 32 values in
// 17 bytes, one e8m0 scale byte then 16 bytes of e2m1 codes, where byte j holds
// element j in its low nibble and element j + 16 in its high nibble. A value is
// fp4_e2m1(code) · 2^(e − 127): the same codes and scales as DeepSeek-V4's FP4
// experts (§7.4), whose bytes hold elements 2i (low) and 2i + 1 (high) and whose
// scales are a separate [N, K/32] e8m0 tensor. So an MXFP4 row repacks into
// dsv4's FP4 layout bit for bit, and the FP4 kernels compute it exactly as they
// compute the release's safetensors.
#ifndef DSV4_OPS_REF_MXFP4_REF_H_
#define DSV4_OPS_REF_MXFP4_REF_H_

#include <cstdint>

namespace dsv4::ops::ref {

inline constexpr int64_t kMxfp4BlockElems = 32;
inline constexpr int64_t kMxfp4BlockBytes = 17;

// The values: DequantizeRow(DType::kMXFP4, ...) (tensor/ggml_quants.h).

// The n values of `blocks` (n a multiple of 32) in dsv4's FP4 layout:
// codes[n/2] (byte i: element 2i low nibble, 2i + 1 high) and scales[n/32].
void RepackMxfp4Row(const uint8_t* blocks, int64_t n, uint8_t* codes, uint8_t* scales);

}  // namespace dsv4::ops::ref

#endif  // DSV4_OPS_REF_MXFP4_REF_H_
