// Scalar FP8 / FP4 block-scaled matmuls and the activation QAT simulations.
// See quant_matmul_ref.h; the formats are spec deepseek-v4.md §7.4 and §9.2.
#include "ops/ref/quant_matmul_ref.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/float_types.h"

namespace dsv4::ops::ref {

float ScaleAt(const TensorView& scale, int64_t row, int64_t col) {
  const int64_t i = row * scale.strides[0] + col * scale.strides[1];
  const uint8_t* p = static_cast<const uint8_t*>(scale.data);
  switch (scale.dtype) {
    case DType::kE8m0:
      return E8m0ToF32(p[i]);
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return Bf16ToF32(h);
    }
    default:
      CHECK(false, "block scale must be e8m0, f32 or bf16, got %s", scale.ShapeString().c_str());
  }
}

namespace {

// e4m3fn code -> f32, as a table (exact; built from the scalar decoder).
struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = Fp8E4m3ToF32(static_cast<uint8_t>(i));
  }
};
const Fp8Table& Fp8Values() {
  static const Fp8Table table;
  return table;
}

void CheckFp8(const TensorView& w, const TensorView& scale, int64_t block) {
  CHECK(IsFp8WeightBlock(block), "FP8 weight block must be 128 or 32, got %lld",
        static_cast<long long>(block));
  CHECK(w.rank == 2 && w.dtype == DType::kFp8E4m3 && w.strides[1] == 1,
        "FP8 weight must be a row-major [N, K] fp8_e4m3 matrix, got %s", w.ShapeString().c_str());
  const int64_t n_blocks = (w.sizes[0] + block - 1) / block;
  const int64_t k_blocks = (w.sizes[1] + block - 1) / block;
  CHECK(scale.rank == 2 && scale.sizes[0] == n_blocks && scale.sizes[1] == k_blocks,
        "FP8 scale for %s (%lldx%lld blocks) must be [%lld, %lld], got %s", w.ShapeString().c_str(),
        static_cast<long long>(block), static_cast<long long>(block),
        static_cast<long long>(n_blocks), static_cast<long long>(k_blocks),
        scale.ShapeString().c_str());
}

void CheckFp4(const TensorView& w, const TensorView& scale) {
  CHECK(w.rank == 2 && w.dtype == DType::kFp4E2m1 && w.strides[1] == 1 &&
            w.sizes[1] % kFp4WeightBlock == 0,
        "FP4 weight must be a row-major [N, K] fp4_e2m1 matrix with K %% 32 == 0, got %s",
        w.ShapeString().c_str());
  CHECK(scale.rank == 2 && scale.sizes[0] == w.sizes[0] &&
            scale.sizes[1] == w.sizes[1] / kFp4WeightBlock,
        "FP4 scale for %s must be [%lld, %lld], got %s", w.ShapeString().c_str(),
        static_cast<long long>(w.sizes[0]), static_cast<long long>(w.sizes[1] / kFp4WeightBlock),
        scale.ShapeString().c_str());
}

}  // namespace

bool IsFp8WeightBlock(int64_t b) { return b == kFp8WeightBlock || b == kFp8SmallWeightBlock; }

int64_t Fp8WeightBlockOf(int64_t n, int64_t k, int64_t sn, int64_t sk) {
  for (const int64_t b : {kFp8WeightBlock, kFp8SmallWeightBlock}) {
    if (sn == (n + b - 1) / b && sk == (k + b - 1) / b) return b;
  }
  return 0;
}

void DequantizeFp8BlockRow(const TensorView& w, const TensorView& scale, int64_t n, float* out,
                           int64_t block) {
  CheckFp8(w, scale, block);
  CHECK(n >= 0 && n < w.sizes[0]);
  const int64_t k_size = w.sizes[1];
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * w.strides[0];
  const float* lut = Fp8Values().v;
  for (int64_t kb = 0; kb * block < k_size; ++kb) {
    const float s = ScaleAt(scale, n / block, kb);
    const int64_t end = std::min(k_size, (kb + 1) * block);
    for (int64_t k = kb * block; k < end; ++k) out[k] = lut[row[k]] * s;
  }
}

void DequantizeFp4BlockRow(const TensorView& w, const TensorView& scale, int64_t n, float* out) {
  CheckFp4(w, scale);
  CHECK(n >= 0 && n < w.sizes[0]);
  const int64_t k_size = w.sizes[1];
  // Strides are in elements; two elements per byte.
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * w.strides[0] / 2;
  for (int64_t kb = 0; kb < k_size / kFp4WeightBlock; ++kb) {
    const float s = ScaleAt(scale, n, kb);
    for (int64_t k = kb * kFp4WeightBlock; k < (kb + 1) * kFp4WeightBlock; k += 2) {
      const uint8_t byte = row[k / 2];
      out[k] = Fp4E2m1ToF32(byte & 0xf) * s;     // even element: low nibble
      out[k + 1] = Fp4E2m1ToF32(byte >> 4) * s;  // odd element: high nibble
    }
  }
}

namespace {

// Shared driver: dequantize one weight row at a time into a row buffer (exact),
// then dot it with every token in k order.
template <typename DequantRow>
void BlockMatMul(float* out, int64_t out_stride, const float* x, int64_t k_size, int64_t n_tokens,
                 int64_t row_begin, int64_t row_end, DequantRow dequant_row) {
  std::vector<float> row(k_size);
  for (int64_t n = row_begin; n < row_end; ++n) {
    dequant_row(n, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * k_size;
      float acc = 0.0f;
      for (int64_t k = 0; k < k_size; ++k) acc += xt[k] * row[k];
      out[t * out_stride + (n - row_begin)] = acc;
    }
  }
}

}  // namespace

void MatMulFp8Block(float* out, int64_t out_stride, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                    int64_t block) {
  CheckFp8(w, scale, block);
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.sizes[0]);
  BlockMatMul(out, out_stride, x, w.sizes[1], n_tokens, row_begin, row_end,
              [&](int64_t n, float* row) { DequantizeFp8BlockRow(w, scale, n, row, block); });
}

void MatMulFp4Block(float* out, int64_t out_stride, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  CheckFp4(w, scale);
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.sizes[0]);
  BlockMatMul(out, out_stride, x, w.sizes[1], n_tokens, row_begin, row_end,
              [&](int64_t n, float* row) { DequantizeFp4BlockRow(w, scale, n, row); });
}

float Pow2Ceil(float a) {
  // Reference `fast_round_scale`: e = exponent − 127 + (mantissa != 0).
  const uint32_t u = std::bit_cast<uint32_t>(a);
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xffu) - 127 + ((u & 0x7fffffu) != 0);
  return std::ldexp(1.0f, exp);
}

void QuantizeDequantizeFp8(float* x, int64_t n, int64_t block) {
  CHECK(block > 0 && n % block == 0, "FP8 act quant: %lld values, block %lld",
        static_cast<long long>(n), static_cast<long long>(block));
  for (int64_t b = 0; b < n; b += block) {
    float amax = 1e-4f;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = Pow2Ceil(amax * (1.0f / 448.0f));
    for (int64_t i = b; i < b + block; ++i) {
      const float q = std::clamp(x[i] / s, -448.0f, 448.0f);
      x[i] = Fp8E4m3ToF32(F32ToFp8E4m3(q)) * s;
    }
  }
}

void QuantizeDequantizeFp4(float* x, int64_t n, int64_t block) {
  CHECK(block > 0 && n % block == 0, "FP4 act quant: %lld values, block %lld",
        static_cast<long long>(n), static_cast<long long>(block));
  const float kMinAmax = 6.0f * std::ldexp(1.0f, -126);
  for (int64_t b = 0; b < n; b += block) {
    float amax = kMinAmax;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = Pow2Ceil(amax * (1.0f / 6.0f));
    for (int64_t i = b; i < b + block; ++i) {
      const float q = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = Fp4E2m1ToF32(F32ToFp4E2m1(q)) * s;
    }
  }
}

void QuantizeDequantizeFp4E4m3Scale(float* x, int64_t n, int64_t block) {
  CHECK(block > 0 && n % block == 0, "FP4 act quant (e4m3 scales): %lld values, block %lld",
        static_cast<long long>(n), static_cast<long long>(block));
  const float kMinAmax = 6.0f * std::ldexp(1.0f, -9);  // keeps an all-zero group's scale nonzero
  for (int64_t b = 0; b < n; b += block) {
    float amax = kMinAmax;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = Fp8E4m3ToF32(F32ToFp8E4m3(std::min(amax / 6.0f, 448.0f)));
    for (int64_t i = b; i < b + block; ++i) {
      const float q = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = Fp4E2m1ToF32(F32ToFp4E2m1(q)) * s;
    }
  }
}

}  // namespace dsv4::ops::ref
