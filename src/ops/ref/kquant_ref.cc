// ops::ref k-quant matmul: block-wise exact dequantisation, then a scalar dot.
#include "ops/ref/kquant_ref.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"

namespace dsv4::ops::ref {

bool IsKQuant(DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; }

void MatMulKQuant(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                  int64_t out_stride) {
  CHECK(w.rank == 2 && w.strides[1] == 1 && IsKQuant(w.dtype) && w.sizes[1] % kQK_K == 0,
        "MatMulKQuant: w must be a row-major [N, K] q4_K/q6_K matrix with K %% 256 == 0, got %s",
        w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0];
  const int64_t n_in = w.sizes[1];
  const int64_t block_bytes = GetDTypeInfo(w.dtype).block_bytes;
  if (out_stride < 0) out_stride = n_out;
  float block[kQK_K];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n_in;
    for (int64_t n = 0; n < n_out; ++n) {
      const uint8_t* row = static_cast<const uint8_t*>(w[n].data);
      float acc = 0.0f;
      for (int64_t b = 0; b < n_in / kQK_K; ++b) {
        DequantizeRow(w.dtype, row + b * block_bytes, kQK_K, block);
        const float* xb = xt + b * kQK_K;
        for (int k = 0; k < kQK_K; ++k) acc += xb[k] * block[k];
      }
      out[t * out_stride + n] = acc;
    }
  }
}

void QuantizeRowQ8K(const float* x, int64_t k, BlockQ8K* y) {
  CHECK(k % kQK_K == 0, "QuantizeRowQ8K: %lld values, not a multiple of 256",
        static_cast<long long>(k));
  for (int64_t b = 0; b < k / kQK_K; ++b, x += kQK_K) {
    BlockQ8K& o = y[b];
    float max = 0.0f, amax = 0.0f;  // the value of largest magnitude, the first of ties
    for (int i = 0; i < kQK_K; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    const float iscale = -127.0f / max;
    // All zeros (or NaN: nothing compares greater than 0), or so small that
    // iscale overflows (|max| < 127 / FLT_MAX, where ggml's codes are undefined).
    if (amax == 0.0f || std::isinf(iscale)) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    for (int i = 0; i < kQK_K; ++i) {
      // Round to nearest, ties to even (the default mode: ggml's nearest_int).
      const float v = std::nearbyint(iscale * x[i]);
      o.qs[i] = static_cast<int8_t>(std::fmin(v, 127.0f));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += o.qs[16 * j + i];
      o.bsums[j] = static_cast<int16_t>(sum);
    }
    o.d = 1.0f / iscale;
  }
}

namespace {
float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}
}  // namespace

float DotKQuantQ8K(DType w_dtype, const uint8_t* row, const BlockQ8K* x, int64_t n_blocks) {
  CHECK(IsKQuant(w_dtype), "DotKQuantQ8K: %s is not a k-quant", DTypeName(w_dtype).data());
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ8K& xb = x[b];
    if (w_dtype == DType::kQ4_K) {
      // Byte offsets, not a BlockQ4_K*: rows need not be aligned for its uint16s.
      const uint8_t* blk = row + b * sizeof(BlockQ4_K);
      const uint8_t* qs = blk + offsetof(BlockQ4_K, qs);
      int32_t isum = 0, imin = 0;
      for (int s = 0; s < 8; ++s) {
        uint8_t sc, m;
        Q4KScaleMin(blk + offsetof(BlockQ4_K, scales), s, &sc, &m);
        int32_t dot = 0, sum = 0;
        for (int i = 0; i < 32; ++i) {
          const int k = 32 * s + i;
          const uint8_t byte = qs[32 * (k / 64) + k % 32];
          const int q = (k % 64 < 32) ? (byte & 0xF) : (byte >> 4);
          dot += q * xb.qs[k];
          sum += xb.qs[k];
        }
        isum += sc * dot;
        imin += m * sum;
      }
      const float dw = F16At(blk + offsetof(BlockQ4_K, d));
      const float dmin = F16At(blk + offsetof(BlockQ4_K, dmin));
      acc = acc + (xb.d * dw) * static_cast<float>(isum);
      acc = acc - (xb.d * dmin) * static_cast<float>(imin);
    } else {
      const uint8_t* blk = row + b * sizeof(BlockQ6_K);
      const uint8_t* ql = blk + offsetof(BlockQ6_K, ql);
      const uint8_t* qh = blk + offsetof(BlockQ6_K, qh);
      const auto* scales = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
      int32_t isum = 0;
      for (int s = 0; s < 16; ++s) {
        int32_t dot = 0;
        for (int i = 0; i < 16; ++i) {
          const int k = 16 * s + i, h = k / 128, g = k % 128 / 32, l = k % 32;
          const int lo = (ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
          const int hi = (qh[32 * h + l] >> (2 * g)) & 3;
          dot += ((lo | (hi << 4)) - 32) * xb.qs[k];
        }
        isum += scales[s] * dot;
      }
      acc = acc + (xb.d * F16At(blk + offsetof(BlockQ6_K, d))) * static_cast<float>(isum);
    }
  }
  return acc;
}

void MatMulKQuantQ8K(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                     int64_t out_stride) {
  CHECK(w.rank == 2 && w.strides[1] == 1 && IsKQuant(w.dtype) && w.sizes[1] % kQK_K == 0,
        "MatMulKQuantQ8K: w must be a row-major [N, K] q4_K/q6_K matrix with K %% 256 == 0, got "
        "%s",
        w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0], n_in = w.sizes[1], n_blocks = n_in / kQK_K;
  if (out_stride < 0) out_stride = n_out;
  std::vector<BlockQ8K> xq(static_cast<size_t>(n_blocks));
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeRowQ8K(x + t * n_in, n_in, xq.data());
    for (int64_t n = 0; n < n_out; ++n) {
      out[t * out_stride + n] =
          DotKQuantQ8K(w.dtype, static_cast<const uint8_t*>(w[n].data), xq.data(), n_blocks);
    }
  }
}

void QuantizeRowQ8_0(const float* x, int64_t k, BlockQ8_0* y) {
  CHECK(k % 32 == 0, "QuantizeRowQ8_0: %lld values, not a multiple of 32",
        static_cast<long long>(k));
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    // llama.cpp's x86 quantize_row_q8_0 (not its _ref): id = 127 / amax, not
    // 1 / d, and ties to even (_mm256_round_ps), not roundf.
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = F32ToF16(d);
    for (int i = 0; i < 32; ++i) y[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  }
}

float DotQ8_0Q8_0(const uint8_t* row, const BlockQ8_0* x, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    // Byte offsets, not a BlockQ8_0*: rows need not be aligned for its uint16.
    const uint8_t* blk = row + b * static_cast<int64_t>(sizeof(BlockQ8_0));
    const int8_t* qs = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_0, qs));
    int32_t isum = 0;
    for (int i = 0; i < 32; ++i) isum += int32_t{qs[i]} * int32_t{x[b].qs[i]};
    const float dw = F16At(blk + offsetof(BlockQ8_0, d));
    acc = acc + (dw * F16ToF32(x[b].d)) * static_cast<float>(isum);
  }
  return acc;
}

void MatMulQ8_0Q8_0(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                    int64_t out_stride) {
  CHECK(w.rank == 2 && w.strides[1] == 1 && w.dtype == DType::kQ8_0 && w.sizes[1] % 32 == 0,
        "MatMulQ8_0Q8_0: w must be a row-major [N, K] q8_0 matrix, got %s",
        w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0], n_in = w.sizes[1], n_blocks = n_in / 32;
  if (out_stride < 0) out_stride = n_out;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(n_blocks));
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeRowQ8_0(x + t * n_in, n_in, xq.data());
    for (int64_t n = 0; n < n_out; ++n) {
      out[t * out_stride + n] =
          DotQ8_0Q8_0(static_cast<const uint8_t*>(w[n].data), xq.data(), n_blocks);
    }
  }
}

}  // namespace dsv4::ops::ref
