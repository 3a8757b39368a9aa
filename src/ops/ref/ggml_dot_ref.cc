#include "ops/ref/ggml_dot_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/float_types.h"
#include "ops/ref/kquant_ref.h"

namespace dsv4::ops::ref {

ActFormat ActivationFormat(DType w) {
  switch (w) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kMXFP4:
      return ActFormat::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1:
      return ActFormat::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
      return ActFormat::kQ8_K;
    default:
      break;
  }
  CHECK(false, "ActivationFormat: %s is not a GGUF quant type", std::string(DTypeName(w)).c_str());
  return ActFormat::kQ8_0;
}

int64_t ActivationBytes(ActFormat f, int64_t k) {
  switch (f) {
    case ActFormat::kQ8_0:
      return k / 32 * static_cast<int64_t>(sizeof(BlockQ8_0));
    case ActFormat::kQ8_1:
      return k / 32 * static_cast<int64_t>(sizeof(BlockQ8_1));
    case ActFormat::kQ8_K:
      return k / kQK_K * static_cast<int64_t>(sizeof(BlockQ8K));
  }
  return 0;
}

void QuantizeRowQ8_1(const float* x, int64_t k, BlockQ8_1* y) {
  DCHECK(k % kQK4 == 0);
  for (int64_t b = 0; b < k / kQK4; ++b) {
    const float* xb = x + b * kQK4;
    float amax = 0.0f;
    for (int j = 0; j < kQK4; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // llama.cpp's x86 quantize_row_q8_1 (as QuantizeRowQ8_0): id = 127 / amax,
    // ties to even.
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK4; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
      sum += y[b].qs[j];
    }
    y[b].d = F32ToF16(d);
    y[b].s = F32ToF16(static_cast<float>(sum) * d);
  }
}

void QuantizeActivations(ActFormat f, const float* x, int64_t k, void* y) {
  switch (f) {
    case ActFormat::kQ8_0:
      QuantizeRowQ8_0(x, k, static_cast<BlockQ8_0*>(y));
      return;
    case ActFormat::kQ8_1:
      QuantizeRowQ8_1(x, k, static_cast<BlockQ8_1*>(y));
      return;
    case ActFormat::kQ8_K:
      QuantizeRowQ8K(x, k, static_cast<BlockQ8K*>(y));
      return;
  }
}

namespace {
// ggml's GGML_E8M0_TO_FP32_HALF(e) = 2^(e − 128), built from its bits.
float E8m0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
}  // namespace

float DotMxfp4Q8_0(const uint8_t* row, const BlockQ8_0* xq, int64_t k) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k / kQK4; ++b) {
    BlockMXFP4 w;
    std::memcpy(&w, row + b * sizeof(BlockMXFP4), sizeof(w));
    int32_t isum = 0;
    for (int j = 0; j < kQK4 / 2; ++j) {
      isum += kMxfp4Values[w.qs[j] & 0xf] * xq[b].qs[j];
      isum += kMxfp4Values[w.qs[j] >> 4] * xq[b].qs[j + kQK4 / 2];
    }
    const float d = F16ToF32(xq[b].d) * E8m0Half(w.e);
    acc = acc + d * static_cast<float>(isum);
  }
  return acc;
}

float DotGgmlQ8(DType w, const uint8_t* row, const void* xq, int64_t k) {
  switch (w) {
    case DType::kMXFP4:
      return DotMxfp4Q8_0(row, static_cast<const BlockQ8_0*>(xq), k);
    case DType::kQ8_0:
      return DotQ8_0Q8_0(row, static_cast<const BlockQ8_0*>(xq), k / 32);
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
      return DotIqQ8K(w, row, static_cast<const BlockQ8K*>(xq), k);
    default:
      return DotBasicQ8(w, row, xq, k);
  }
}

void MatMulGgmlQ8(float* out, const float* x, const TensorView& w, int64_t n_tokens,
                  int64_t out_stride) {
  const int64_t n_out = w.sizes[0], k = w.sizes[1];
  if (out_stride < 0) out_stride = n_out;
  const ActFormat f = ActivationFormat(w.dtype);
  const int64_t xb = ActivationBytes(f, k);
  std::vector<uint8_t> xq(static_cast<size_t>(n_tokens * xb));
  for (int64_t t = 0; t < n_tokens; ++t) QuantizeActivations(f, x + t * k, k, xq.data() + t * xb);
  const int64_t row_bytes = DTypeBytes(w.dtype, w.strides[0]);
  for (int64_t n = 0; n < n_out; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * row_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      out[t * out_stride + n] = DotGgmlQ8(w.dtype, row, xq.data() + t * xb, k);
    }
  }
}

}  // namespace dsv4::ops::ref
