#include "ops/ref/ops_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "base/float_types.h"

namespace dsv4::ops::ref {

void MatMul(float* out, const float* x, const TensorView& w, int64_t n_tokens, int64_t out_stride) {
  CHECK(w.rank == 2 && w.strides[1] == 1, "MatMul: w must be a 2-D row-major matrix, got %s",
        w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0];
  const int64_t n_in = w.sizes[1];
  if (out_stride < 0) out_stride = n_out;
  std::vector<float> row(n_in);
  for (int64_t n = 0; n < n_out; ++n) {
    DequantizeRow(w.dtype, w[n].data, n_in, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * n_in;
      float acc = 0.0f;
      for (int64_t k = 0; k < n_in; ++k) acc += xt[k] * row[k];
      out[t * out_stride + n] = acc;
    }
  }
}

void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                     float theta) {
  for (int64_t i = 0; i < rot_dim; i += 2) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rot_dim));
    const float angle = static_cast<float>(pos) * freq;
    const float c = std::cos(angle), s = std::sin(angle);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* p = x + h * head_dim + i;
      const float a = p[0], b = p[1];
      p[0] = a * c - b * s;
      p[1] = a * s + b * c;
    }
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;  // divide, as llama2.c does
}

void SoftmaxWithSink(float* x, int64_t n, float scale, float sink) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    x[i] *= scale;
    mx = std::max(mx, x[i]);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float denom = sum + std::exp(sink - mx);
  for (int64_t i = 0; i < n; ++i) x[i] /= denom;
}

void SoftmaxPool(float* out, const float* const* scores, const float* const* values,
                 int64_t n_slots, int64_t n) {
  for (int64_t d = 0; d < n; ++d) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_slots; ++j) mx = std::max(mx, scores[j][d]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_slots; ++j) sum += std::exp(scores[j][d] - mx);
    float acc = 0.0f;
    for (int64_t j = 0; j < n_slots; ++j) {
      acc += values[j][d] * (std::exp(scores[j][d] - mx) / sum);
    }
    out[d] = acc;
  }
}

float Silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }  // llama2.c order

void SwiGlu(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void SwiGluLimited(float* out, const float* gate, const float* up, int64_t n, float limit,
                   float scale) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = Silu(g) * u * scale;
  }
}

void DotMany(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
             int64_t n_keys, int64_t n, float* out) {
  for (int64_t h = 0; h < n_q; ++h) {
    const float* qh = q + h * q_stride;
    for (int64_t i = 0; i < n_keys; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += qh[j] * keys[i][j];
      out[h * n_keys + i] = acc;
    }
  }
}

void AxpyMany(float* y, int64_t n_y, int64_t y_stride, const float* alpha, const float* const* x,
              int64_t n_keys, int64_t n) {
  for (int64_t h = 0; h < n_y; ++h) {
    float* yh = y + h * y_stride;
    for (int64_t i = 0; i < n_keys; ++i) {
      const float a = alpha[h * n_keys + i];
      for (int64_t j = 0; j < n; ++j) yh[j] += a * x[i][j];
    }
  }
}

void AxpyManyF16(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                 const uint16_t* const* x, int64_t n_keys, int64_t n) {
  for (int64_t h = 0; h < n_y; ++h) {
    float* yh = y + h * y_stride;
    for (int64_t i = 0; i < n_keys; ++i) {
      const float a = alpha[h * n_keys + i];
      for (int64_t j = 0; j < n; ++j) yh[j] += a * F16ToF32(x[i][j]);
    }
  }
}

void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n_x; ++i) {
      const float product = c[i] * x[i][j];
      acc += product;
    }
    out[j] = acc;
  }
}

void LinearCombineRows(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                       const float* c, int64_t n) {
  CHECK(n_out <= kMaxCombineRows && n_x <= 2 * kMaxCombineRows,
        "LinearCombineRows: %lld outputs of %lld rows, at most %lld of %lld",
        static_cast<long long>(n_out), static_cast<long long>(n_x),
        static_cast<long long>(kMaxCombineRows), static_cast<long long>(2 * kMaxCombineRows));
  float sums[kMaxCombineRows];
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < n_out; ++k) {
      float acc = 0.0f;
      for (int64_t i = 0; i < n_x; ++i) {
        const float product = c[k * n_x + i] * x[i][j];
        acc += product;
      }
      sums[k] = acc;
    }
    for (int64_t k = 0; k < n_out; ++k) out[k][j] = sums[k];
  }
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > best_value) {  // false for NaN; strict: the first of equals wins
      best = i;
      best_value = x[i];
    }
  }
  return best;
}

void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, int32_t* scratch) {
  std::iota(scratch, scratch + n, 0);
  k = std::min(k, n);
  std::partial_sort(scratch, scratch + k, scratch + n,
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::copy(scratch, scratch + k, indices);
}

void TopK(const float* x, int64_t n, int64_t k, int32_t* indices) {
  std::vector<int32_t> idx(n);
  TopK(x, n, k, indices, idx.data());
}

}  // namespace dsv4::ops::ref
