// The block layouts of GGUF's quant types beyond q8_0 / q4_K / q6_K
// (tensor/dtype.h), as llama.cpp writes them (ggml-common.h), and their exact
// scalar dequantisation (the values gguf-py's gguf.quants.dequantize gives;
// goldens in tests/data/ggml_quants).
//
//   legacy (32 values per block):  q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4
//   k-quants (256 per block):      q2_K, q3_K, q5_K, iq4_xs
//   i-quants on lattice grids (256 per block, tensor/ggml_grids.h):
//                                  iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m
//
// f16 fields are stored as raw bits (uint16_t).
#ifndef DSV4_TENSOR_GGML_QUANTS_H_
#define DSV4_TENSOR_GGML_QUANTS_H_

#include <cstdint>

#include "tensor/dtype.h"

namespace dsv4 {

inline constexpr int kQK4 = 32;  // values per legacy block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4 / 2];  // value j: low nibble of qs[j] (j < 16) or high of qs[j − 16]
};
static_assert(sizeof(BlockQ4_0) == 18);
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: the fifth bit of value j
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);
// ggml's q8_1: the activations q4_1 / q5_1 weights multiply in llama.cpp
// (never stored in a file): value j = d·qs[j]; s = d·Σ qs (f16).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK4];
};
static_assert(sizeof(BlockQ8_1) == 36);
// ggml's mxfp4 (spec deepseek-v4.md §14.3): an e8m0 scale byte e, then 16
// bytes of e2m1 codes, byte j holding value j (low nibble) and j + 16 (high).
// Value = fp4_e2m1(code) · 2^(e − 127), with dsv4's e8m0 and e2m1 (0xff is NaN,
// code 8 is −0; ggml reads those as 2^127 and +0), so DequantizeRow gives
// ggml's values otherwise. The same codes and scales as DeepSeek-V4's FP4
// experts, whose bytes hold elements 2i and 2i + 1 (ops/ref/mxfp4_ref.h).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK4 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4 / 2];  // 4-bit indices into the non-linear table kIq4nlValues
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // 4-bit scale (low) and min (high) per 16 values
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];  // 16 6-bit scales
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // as q4_K's (Q4KScaleMin)
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_XS) == 74);
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_S) == 82);
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];
};
static_assert(sizeof(BlockIQ3_XXS) == 98);
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
static_assert(sizeof(BlockIQ3_S) == 110);
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_S) == 50);
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];  // 3-bit sub-scales; the f16 scale in the top nibbles
};
static_assert(sizeof(BlockIQ1_M) == 56);

// Exact dequantisation of n values (a multiple of the type's block) of a row
// starting at `src`, gguf-py's values bit for bit. DequantizeRow
// (tensor/dtype.h) calls these; other dtypes are a CHECK failure.
//   legacy and k-quant families (ggml_quants_basic.cc)
void DequantizeBasicRow(DType t, const uint8_t* src, int64_t n, float* dst);
//   grid i-quants (ggml_quants_iq.cc)
void DequantizeIqRow(DType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace dsv4

#endif  // DSV4_TENSOR_GGML_QUANTS_H_
