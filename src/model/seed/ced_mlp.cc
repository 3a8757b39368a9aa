// CED fused MLP, layouts and the layout converter (see ced_mlp.h).
#include "model/seed/ced_mlp.h"

#include <cmath>
#include <cstring>

#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/vec_ops.h"

namespace dsv4::seed {

std::string_view LayoutName(Layout l) { return l == Layout::kColMajor ? "col_major" : "row_major"; }

Layout DetectLayout(const TensorView& w) {
  if (w.rank == 2 && w.strides[0] == 1 && w.strides[1] == w.sizes[0] && w.sizes[1] > 1) {
    return Layout::kColMajor;
  }
  return Layout::kRowMajor;
}

TensorView ColMajorView(const void* data, DType dtype, int64_t rows, int64_t cols) {
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols});
  v.strides[0] = 1;
  v.strides[1] = rows;
  return v;
}

Result<TensorView> CheckedStridedView(const void* data, int64_t storage_elems, DType dtype,
                                      int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                                      std::string_view what) {
  if (rows < 0 || cols < 0 || s0 < 0 || s1 < 0 || storage_elems < 0) {
    return InvalidArgument(std::string(what) + ": strided view [" + std::to_string(rows) + ", " +
                               std::to_string(cols) + "] strides (" + std::to_string(s0) + ", " +
                               std::to_string(s1) + ") has a negative size or stride",
                           "sizes and strides are element counts >= 0 (S-078)");
  }
  if (rows > 0 && cols > 0) {
    const __int128 max_off =
        static_cast<__int128>(rows - 1) * s0 + static_cast<__int128>(cols - 1) * s1;
    if (max_off >= storage_elems) {
      return OutOfRange(
          std::string(what) + ": strided view [" + std::to_string(rows) + ", " +
              std::to_string(cols) + "] strides (" + std::to_string(s0) + ", " +
              std::to_string(s1) + ") reaches element " +
              std::to_string(static_cast<long long>(max_off)) + " of a storage of " +
              std::to_string(storage_elems),
          "a column-major [rows, cols] view has strides (1, rows); the seed's (rows, 1) reads "
          "past the tensor (S-078, C-03)");
    }
  }
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols});
  v.strides[0] = s0;
  v.strides[1] = s1;
  return v;
}

void MatMulAnyLayout(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                     int64_t n_tokens, LayoutScratch* scratch) {
  const bool column = w.rank == 2 && w.sizes[0] > 1 && w.sizes[1] > 1 && w.strides[0] == 1 &&
                      w.strides[1] >= w.sizes[0];
  if (!column) {
    ops::MatMul(pool, out, x, w, n_tokens);
    return;
  }
  CHECK(!IsBlockDType(w.dtype), "col_major %s weights are not supported",
        std::string(DTypeName(w.dtype)).c_str());
  LayoutScratch local;
  LayoutScratch& s = scratch != nullptr ? *scratch : local;
  const int64_t N = w.sizes[0], K = w.sizes[1], ld = w.strides[1], T = n_tokens;
  const size_t threads = static_cast<size_t>(pool.size());
  if (s.acc.size() < threads) s.acc.resize(threads);
  if (s.col.size() < threads) s.col.resize(threads);
  // Output rows split over the pool; column k of w (rows [nb, ne)) is read once
  // and scaled into every token's accumulator.
  pool.ParallelFor(
      N,
      [&](int64_t nb, int64_t ne, int thread) {
        const int64_t n = ne - nb;
        std::vector<float>& acc = s.acc[static_cast<size_t>(thread)];
        std::vector<float>& col = s.col[static_cast<size_t>(thread)];
        if (static_cast<int64_t>(acc.size()) < T * n) acc.resize(T * n);
        if (w.dtype != DType::kF32 && static_cast<int64_t>(col.size()) < n) col.resize(n);
        std::fill_n(acc.data(), T * n, 0.0f);
        for (int64_t k = 0; k < K; ++k) {
          const uint8_t* src =
              static_cast<const uint8_t*>(w.data) + DTypeBytes(w.dtype, k * ld + nb);
          const float* c = reinterpret_cast<const float*>(src);
          if (w.dtype != DType::kF32) {
            DequantizeRow(w.dtype, src, n, col.data());
            c = col.data();
          }
          for (int64_t t = 0; t < T; ++t) {
            const float xk = x[t * K + k];
            float* a = acc.data() + t * n;
            for (int64_t r = 0; r < n; ++r) a[r] += xk * c[r];
          }
        }
        for (int64_t t = 0; t < T; ++t) std::copy_n(acc.data() + t * n, n, out + t * N + nb);
      },
      16);
}

TensorView RowSlice(const TensorView& w, int64_t begin, int64_t end) {
  CHECK(w.rank == 2 && 0 <= begin && begin <= end && end <= w.sizes[0]);
  TensorView v = w;
  v.data = static_cast<uint8_t*>(w.data) + DTypeBytes(w.dtype, begin * w.strides[0]);
  v.sizes[0] = end - begin;
  return v;
}

namespace {
float At(const TensorView& w, int64_t r, int64_t c) {
  float v;
  const int64_t off = r * w.strides[0] + c * w.strides[1];
  DequantizeRow(w.dtype, static_cast<const uint8_t*>(w.data) + DTypeBytes(w.dtype, off), 1, &v);
  return v;
}
}  // namespace

OwnedMatrix ToLayout(const TensorView& w, Layout want) {
  CHECK(w.rank == 2);
  CHECK(!IsBlockDType(w.dtype));
  const int64_t R = w.sizes[0], C = w.sizes[1];
  OwnedMatrix m;
  m.data.resize(R * C);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      m.data[want == Layout::kRowMajor ? r * C + c : c * R + r] = At(w, r, c);
    }
  }
  m.view = want == Layout::kRowMajor ? TensorView::Contiguous(m.data.data(), DType::kF32, {R, C})
                                     : ColMajorView(m.data.data(), DType::kF32, R, C);
  return m;
}

namespace {

// out[t, h] = Σ_j down[h, j] · p[t, j >> 1] for p rows of `p_stride` floats:
// the down stage both paths share, reading down directly, index-mapped (C-19):
// per output row h, down's pairs are summed once (down[h, 2j] + down[h, 2j+1],
// I/2 floats of per-thread scratch) and dotted with every token's p. Rows of
// down are split over the pool.
void CedDown(ThreadPool& pool, const CedMlpWeights& w, const float* p, int64_t p_stride, int64_t T,
             float* out, CedScratch& s) {
  const int64_t I = w.fused.sizes[0], half = I / 2, H = w.down.sizes[0];
  const size_t threads = static_cast<size_t>(pool.size());
  if (s.pair.size() < threads) s.pair.resize(threads);
  if (s.rows.size() < threads) s.rows.resize(threads);
  pool.ParallelFor(H, [&](int64_t hb, int64_t he, int thread) {
    std::vector<float>& pair = s.pair[static_cast<size_t>(thread)];
    std::vector<float>& row = s.rows[static_cast<size_t>(thread)];
    if (static_cast<int64_t>(pair.size()) < half) pair.resize(half);
    for (int64_t h = hb; h < he; ++h) {
      const TensorView dr = w.down[h];
      const float* r = static_cast<const float*>(dr.data);
      if (dr.dtype != DType::kF32) {
        if (static_cast<int64_t>(row.size()) < I) row.resize(I);
        DequantizeRow(dr.dtype, dr.data, I, row.data());
        r = row.data();
      }
      for (int64_t j = 0; j < half; ++j) pair[j] = r[2 * j] + r[2 * j + 1];
      for (int64_t t = 0; t < T; ++t)
        out[t * H + h] = ops::Dot(pair.data(), p + t * p_stride, half);
    }
  });
}

}  // namespace

void CedMlpForward(ThreadPool& pool, const CedMlpWeights& w, const float* x, int64_t T, float* out,
                   CedScratch& s) {
  const int64_t I = w.fused.sizes[0], half = I / 2;
  if (static_cast<int64_t>(s.fused.size()) < T * I) s.fused.resize(T * I);
  MatMulAnyLayout(pool, s.fused.data(), x, w.fused, T, &s.layout);
  for (int64_t t = 0; t < T; ++t) {
    float* f = s.fused.data() + t * I;
    if (!w.bias.empty()) {
      for (int64_t j = 0; j < I; ++j) f[j] += w.bias[j];
    }
    // p[j'] = silu(gate[j']) · up[j'], written over the gate half.
    for (int64_t j = 0; j < half; ++j) f[j] = ops::ref::Silu(f[j]) * f[half + j];
  }
  CedDown(pool, w, s.fused.data(), I, T, out, s);
}

void CedMlpBaseline(ThreadPool& pool, const CedMlpWeights& w, const float* x, int64_t T, float* out,
                    CedScratch& s) {
  const int64_t I = w.fused.sizes[0], half = I / 2;
  if (static_cast<int64_t>(s.gate.size()) < T * half) {
    s.gate.resize(T * half);
    s.up.resize(T * half);
  }
  MatMulAnyLayout(pool, s.gate.data(), x, RowSlice(w.fused, 0, half), T, &s.layout);
  MatMulAnyLayout(pool, s.up.data(), x, RowSlice(w.fused, half, I), T, &s.layout);
  for (int64_t t = 0; t < T; ++t) {
    float* g = s.gate.data() + t * half;
    const float* u = s.up.data() + t * half;
    for (int64_t j = 0; j < half; ++j) {
      const float gj = w.bias.empty() ? g[j] : g[j] + w.bias[j];
      const float uj = w.bias.empty() ? u[j] : u[j] + w.bias[half + j];
      g[j] = ops::ref::Silu(gj) * uj;
    }
  }
  CedDown(pool, w, s.gate.data(), half, T, out, s);
}

void CedMlpExplicit(const CedMlpWeights& w, const float* x, int64_t T, float* out) {
  const int64_t I = w.fused.sizes[0], half = I / 2, H = w.down.sizes[0], K = w.fused.sizes[1];
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> fused(I);
    for (int64_t n = 0; n < I; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(At(w.fused, n, k)) * x[t * K + k];
      fused[n] = acc + (w.bias.empty() ? 0.0 : w.bias[n]);
    }
    std::vector<double> gate(fused.begin(), fused.begin() + half),
        up(fused.begin() + half, fused.end());
    std::vector<double> gate_i(I), up_i(I), prod(I);
    for (int64_t j = 0; j < I; ++j) {
      gate_i[j] = gate[j / 2] / (1.0 + std::exp(-gate[j / 2]));  // repeat_interleave(silu(gate), 2)
      up_i[j] = up[j / 2];
      prod[j] = gate_i[j] * up_i[j];
    }
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0;
      for (int64_t j = 0; j < I; ++j) acc += static_cast<double>(At(w.down, h, j)) * prod[j];
      out[t * H + h] = static_cast<float>(acc);
    }
  }
}

Result<CedOwned> ConvertSwiGluToCed(const TensorView& gate, const TensorView& up,
                                    const TensorView& down) {
  if (gate.rank != 2 || up.rank != 2 || down.rank != 2 || gate.sizes != up.sizes ||
      down.sizes[0] != gate.sizes[1] || down.sizes[1] != gate.sizes[0]) {
    return InvalidArgument("SwiGLU → CED: shapes gate " + gate.ShapeString() + ", up " +
                               up.ShapeString() + ", down " + down.ShapeString() + " do not fit",
                           "expected gate/up [F, H] and down [H, F]");
  }
  const int64_t F = gate.sizes[0], H = gate.sizes[1];
  OwnedMatrix g = ToLayout(gate, Layout::kRowMajor), u = ToLayout(up, Layout::kRowMajor);
  OwnedMatrix d = ToLayout(down, Layout::kRowMajor);
  CedOwned c;
  c.fused.data.resize(2 * F * H);
  for (int64_t r = 0; r < 2 * F; ++r) {
    const float* src = r < F ? g.data.data() + r * H : u.data.data() + (r - F) * H;
    for (int64_t k = 0; k < H; ++k) c.fused.data[k * 2 * F + r] = src[k];  // col_major
  }
  c.fused.view = ColMajorView(c.fused.data.data(), DType::kF32, 2 * F, H);
  c.down.data.assign(H * 2 * F, 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t j = 0; j < F; ++j) c.down.data[h * 2 * F + 2 * j] = d.data[h * F + j];
  }
  c.down.view = TensorView::Contiguous(c.down.data.data(), DType::kF32, {H, 2 * F});
  c.bias.assign(2 * F, 0.0f);
  return c;
}

Result<SwiGluOwned> ConvertCedToSwiGlu(const CedMlpWeights& ced) {
  const int64_t I = ced.fused.sizes[0], H = ced.fused.sizes[1], F = I / 2;
  if (ced.fused.rank != 2 || I % 2 != 0 || ced.down.rank != 2 || ced.down.sizes[0] != H ||
      ced.down.sizes[1] != I) {
    return InvalidArgument("CED → SwiGLU: shapes fused " + ced.fused.ShapeString() + ", down " +
                               ced.down.ShapeString() + " do not fit",
                           "expected fused [I, H] with I even and down [H, I]");
  }
  for (float b : ced.bias) {
    if (b != 0.0f) {
      return InvalidArgument("CED → SwiGLU: ced_bias is not zero; a standard SwiGLU has no bias",
                             "keep the CED layout for this checkpoint");
    }
  }
  OwnedMatrix f = ToLayout(ced.fused, Layout::kRowMajor), d = ToLayout(ced.down, Layout::kRowMajor);
  SwiGluOwned s;
  s.gate.data.assign(f.data.begin(), f.data.begin() + F * H);
  s.up.data.assign(f.data.begin() + F * H, f.data.end());
  s.down.data.resize(H * F);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t j = 0; j < F; ++j) {
      s.down.data[h * F + j] = d.data[h * I + 2 * j] + d.data[h * I + 2 * j + 1];
    }
  }
  s.gate.view = TensorView::Contiguous(s.gate.data.data(), DType::kF32, {F, H});
  s.up.view = TensorView::Contiguous(s.up.data.data(), DType::kF32, {F, H});
  s.down.view = TensorView::Contiguous(s.down.data.data(), DType::kF32, {H, F});
  return s;
}

}  // namespace dsv4::seed
