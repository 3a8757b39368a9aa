// ops::MatMul entry points: validate once, pick the kernel for the weight
// format once, then split output rows over the pool.
#include "ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "ops/ref/ggml_dot_ref.h"
#include "ops/ref/kquant_ref.h"
#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4::ops {
namespace {

void CheckDense(const TensorView& w) {
  CHECK(w.rank == 2 && w.strides[1] == 1, "MatMul: weight must be a 2-D row-major matrix, got %s",
        w.ShapeString().c_str());
}

void CheckFp8(const TensorView& w, const TensorView& scale, int64_t block) {
  CHECK(ref::IsFp8WeightBlock(block), "FP8 weight block must be 128 or 32, got %lld",
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
            w.sizes[1] % ref::kFp4WeightBlock == 0,
        "FP4 weight must be a row-major [N, K] fp4_e2m1 matrix with K %% 32 == 0, got %s",
        w.ShapeString().c_str());
  CHECK(scale.rank == 2 && scale.sizes[0] == w.sizes[0] &&
            scale.sizes[1] == w.sizes[1] / ref::kFp4WeightBlock,
        "FP4 scale for %s must be [%lld, %lld], got %s", w.ShapeString().c_str(),
        static_cast<long long>(w.sizes[0]),
        static_cast<long long>(w.sizes[1] / ref::kFp4WeightBlock), scale.ShapeString().c_str());
}

void CheckRows(const TensorView& w, int64_t row_begin, int64_t row_end) {
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.sizes[0],
        "MatMul: rows [%lld, %lld) of %s", static_cast<long long>(row_begin),
        static_cast<long long>(row_end), w.ShapeString().c_str());
}

simd::MatMulArgs Args(float* out, int64_t out_stride, const float* x, const TensorView& w,
                      const TensorView& scale, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                      int64_t fp8_block = ref::kFp8WeightBlock) {
  simd::MatMulArgs a;
  a.fp8_block = fp8_block;
  a.out = out;
  a.out_stride = out_stride;
  a.x = x;
  a.n_tokens = n_tokens;
  a.w = w;
  a.scale = scale;
  a.row_begin = row_begin;
  a.row_end = row_end;
  return a;
}

// Runs `fn` over all rows of w, split across the pool; out rows are N apart.
// A matrix with too few rows for one grain per thread (DeepSeek-V4's
// indexer weights_proj, mHC's mixers) splits its tokens instead, when there
// are enough: every kernel computes a token's outputs the same way whatever
// tokens share its call, so the results do not change.
void RunSplit(ThreadPool& pool, simd::MatMulFn fn, float* out, const float* x, const TensorView& w,
              const TensorView& scale, int64_t n_tokens,
              const PreparedActivations* prepared = nullptr,
              int64_t fp8_block = ref::kFp8WeightBlock) {
  const auto* xq = static_cast<const uint8_t*>(prepared ? prepared->For(x, n_tokens, w) : nullptr);
  const int64_t n_out = w.sizes[0], k_size = w.sizes[1];
  const int64_t threads = pool.size();
  int64_t grain = RowGrain(k_size * n_tokens);
  if (n_tokens == 1) {
    // A decode-shaped product is memory-bound: a chunk costs its bytes, not
    // its multiply-adds. Wide rows split in 4-row grains of at least
    // kMinDecodeChunkBytes (mHC's [24, 8192] f32 mixers ran on one thread).
    const int64_t row_bytes = std::max<int64_t>(1, DTypeBytes(w.dtype, k_size));
    const int64_t rows = (kMinDecodeChunkBytes + row_bytes - 1) / row_bytes;
    grain = std::min(grain, std::max<int64_t>(4, (rows + 3) / 4 * 4));
  }
  if (threads > 1 && n_out < threads * grain && n_tokens >= 4 * threads) {
    pool.ParallelFor(n_tokens, [&](int64_t begin, int64_t end, int) {
      simd::MatMulArgs a = Args(out + begin * n_out, n_out, x + begin * k_size, w, scale,
                                end - begin, 0, n_out, fp8_block);
      if (xq != nullptr) a.xq = xq + begin * prepared->token_bytes();
      fn(a);
    });
    return;
  }
  pool.ParallelFor(
      n_out,
      [&](int64_t begin, int64_t end, int) {
        simd::MatMulArgs a = Args(out + begin, n_out, x, w, scale, n_tokens, begin, end, fp8_block);
        a.xq = xq;
        fn(a);
      },
      grain, w.data);  // each matrix balances its own split
}

// FP8/FP4: the bf16 dot-product kernels where the CPU has them and they take
// the call (x exactly bf16, K % 128 == 0), else the fp32 kernels (FP8, one
// token: their matvec's twin with table decoding where the CPU has VBMI).
void Fp8Kernel(const simd::MatMulArgs& a) {
  static const simd::TryMatMulFn dot = simd::Fp8Bf16DotKernel();
  static const simd::TryMatMulFn f32_matvec = simd::Fp8F32MatVecKernel();
  if (dot != nullptr && dot(a)) return;
  if (f32_matvec != nullptr && f32_matvec(a)) return;
  simd::Fp8BlockMatMulKernel()(a);
}
void Fp4Kernel(const simd::MatMulArgs& a) {
  static const simd::TryMatMulFn dot = simd::Fp4Bf16DotKernel();
  if (dot == nullptr || !dot(a)) simd::Fp4BlockMatMulKernel()(a);
}

// bf16, f32, f16 and q8_0: the one-token twins of the Highway kernels where
// the CPU has AVX-512 (DeepSeek-V4's head, compressors and MoE gate; its mHC
// mixers and llama2.c weights; GGUF f16 and q8_0 weights).
template <DType kDType, simd::TryMatMulFn (*kMatVec)()>
void DenseKernel(const simd::MatMulArgs& a) {
  static const simd::TryMatMulFn matvec = kMatVec();
  static const simd::MatMulFn highway = simd::DenseMatMulKernel(kDType);
  if (matvec == nullptr || !matvec(a)) highway(a);
}

std::atomic<KQuantActivations> g_kquant_activations{KQuantActivations::kQ8K};

// x[K] as q8_K blocks: the AVX-512 quantiser where the CPU has it, else the
// portable one (the same bytes, ops/ref's).
void QuantizeQ8K(const float* x, int64_t k, BlockQ8K* y) {
  static const simd::QuantizeQ8KFn quantize = [] {
    const simd::QuantizeQ8KFn avx512 = simd::QuantizeQ8KKernel();
    return avx512 != nullptr ? avx512 : simd::QuantizeQ8KPortableKernel();
  }();
  quantize(x, k, y);
}

// x[K] as q8_0 blocks, the same way.
void QuantizeQ8_0(const float* x, int64_t k, BlockQ8_0* y) {
  static const simd::Q8_0QuantizeFn quantize = [] {
    const simd::Q8_0QuantizeFn avx512 = simd::Q8_0QuantizeKernel();
    return avx512 != nullptr ? avx512 : simd::Q8_0QuantizePortableKernel();
  }();
  quantize(x, k, y);
}

// x[K] in the activation format of weights of dtype t (ActivationFormat).
void QuantizeFor(DType t, const float* x, int64_t k, void* y) {
  const ref::ActFormat f = ref::ActivationFormat(t);
  if (f == ref::ActFormat::kQ8_K) {
    QuantizeQ8K(x, k, static_cast<BlockQ8K*>(y));
  } else if (f == ref::ActFormat::kQ8_0) {
    QuantizeQ8_0(x, k, static_cast<BlockQ8_0*>(y));
  } else {
    ref::QuantizeActivations(f, x, k, y);
  }
}

// Bytes of one token's activations quantised for weights of dtype t.
int64_t QuantizedTokenBytes(DType t, int64_t k) {
  return ref::ActivationBytes(ref::ActivationFormat(t), k);
}

// GGUF k-quants: the q8_K path (each thread quantises the call's activations
// for its rows: a few microseconds per token) on the AVX-512 kernels, else
// the portable Highway ones (the same bits), or the f32 kernels.
template <DType kW>
void KQuantKernel(const simd::MatMulArgs& a) {
  if (g_kquant_activations.load(std::memory_order_relaxed) == KQuantActivations::kF32) {
    static const simd::MatMulFn f32 = simd::KQuantMatMulKernel(kW);
    f32(a);
    return;
  }
  static const simd::KQuantQ8KFn kernel = simd::KQuantQ8KKernel(kW);
  const int64_t k_size = a.w.sizes[1], n_blocks = k_size / kQK_K;
  thread_local std::vector<BlockQ8K> own;  // grows once; no allocation per token
  const BlockQ8K* xq = static_cast<const BlockQ8K*>(a.xq);
  if (xq == nullptr) {
    const auto need = static_cast<size_t>(a.n_tokens * n_blocks);
    if (own.size() < need) own.resize(need);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      QuantizeQ8K(a.x + t * k_size, k_size, own.data() + t * n_blocks);
    }
    xq = own.data();
  }
  if (kernel != nullptr) {
    kernel(a, xq);
    return;
  }
  static const simd::KQuantQ8KFn portable = simd::KQuantQ8KPortableKernel(kW);
  if (portable != nullptr) {
    portable(a, xq);
    return;
  }
  const int64_t row_bytes = DTypeBytes(kW, a.w.strides[0]);
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w.data) + n * row_bytes;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      a.out[t * a.out_stride + (n - a.row_begin)] =
          ref::DotKQuantQ8K(kW, row, xq + t * n_blocks, n_blocks);
    }
  }
}

// The other GGUF quant types (tensor/ggml_quants.h): each token's activations
// quantised as llama.cpp's CPU backend does for the type (q8_0, q8_1 or q8_K),
// then the type's SIMD kernel, else ops/ref's twin. With f32 activations the
// exactly dequantised weights times x (ops/ref).
void GgmlQuantKernel(const simd::MatMulArgs& a) {
  const DType t = a.w.dtype;
  const int64_t k_size = a.w.sizes[1];
  if (g_kquant_activations.load(std::memory_order_relaxed) == KQuantActivations::kF32) {
    ref::MatMul(a.out, a.x, a.w.Slice(a.row_begin, a.row_end), a.n_tokens, a.out_stride);
    return;
  }
  const int64_t xb = QuantizedTokenBytes(t, k_size);
  thread_local std::vector<uint8_t> own;  // grows once; no allocation per token
  const auto* xq = static_cast<const uint8_t*>(a.xq);
  if (xq == nullptr) {
    const auto need = static_cast<size_t>(a.n_tokens * xb);
    if (own.size() < need) own.resize(need);
    for (int64_t i = 0; i < a.n_tokens; ++i) {
      QuantizeFor(t, a.x + i * k_size, k_size, own.data() + i * xb);
    }
    xq = own.data();
  }
  simd::GgmlQ8Fn kernel = t == DType::kMXFP4  ? simd::GgmlMxfp4Q8Kernel(t)
                          : t == DType::kQ8_0 ? simd::Q8_0Q8PortableKernel()
                                              : simd::GgmlBasicQ8Kernel(t);
  if (kernel == nullptr) kernel = simd::GgmlIqQ8Kernel(t);
  if (kernel != nullptr) {
    kernel(a, xq);
    return;
  }
  const int64_t row_bytes = DTypeBytes(t, a.w.strides[0]);
  for (int64_t n = a.row_begin; n < a.row_end; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w.data) + n * row_bytes;
    for (int64_t i = 0; i < a.n_tokens; ++i) {
      a.out[i * a.out_stride + (n - a.row_begin)] = ref::DotGgmlQ8(t, row, xq + i * xb, k_size);
    }
  }
}

// GGUF q8_0: with q8 activations (the default) the q8_0 × q8_0 kernels where
// the CPU has AVX-512 VNNI, else the same arithmetic through GgmlQuantKernel;
// with f32 activations the f32 kernels.
void Q8_0Kernel(const simd::MatMulArgs& a) {
  static const simd::TryMatMulFn q8 = simd::Q8_0Q8MatMulKernel();
  if (g_kquant_activations.load(std::memory_order_relaxed) == KQuantActivations::kQ8K) {
    if (q8 == nullptr || !q8(a)) GgmlQuantKernel(a);
    return;
  }
  DenseKernel<DType::kQ8_0, &simd::Q8F32MatVecKernel>(a);
}

// The SIMD kernel for a weight without a separate scale tensor: the dense
// formats, then the GGUF k-quants; nullptr means ops/ref.
simd::MatMulFn PlainKernel(DType t) {
  if (t == DType::kBF16 && simd::DenseMatMulKernel(t) != nullptr) {
    return &DenseKernel<DType::kBF16, &simd::Bf16F32MatVecKernel>;
  }
  if (t == DType::kF32 && simd::DenseMatMulKernel(t) != nullptr) {
    return &DenseKernel<DType::kF32, &simd::F32F32MatVecKernel>;
  }
  if (t == DType::kF16 && simd::DenseMatMulKernel(t) != nullptr) {
    return &DenseKernel<DType::kF16, &simd::F16F32MatVecKernel>;
  }
  if (t == DType::kQ8_0 && simd::DenseMatMulKernel(t) != nullptr) return &Q8_0Kernel;
  if (simd::MatMulFn fn = simd::DenseMatMulKernel(t)) return fn;
  if (t == DType::kQ4_K) return &KQuantKernel<DType::kQ4_K>;
  if (t == DType::kQ6_K) return &KQuantKernel<DType::kQ6_K>;
  if (IsGgmlQuant(t)) return &GgmlQuantKernel;
  return nullptr;
}

// Whether products with weights of dtype t take activations quantised by the
// caller (the kernels' own quantisation skipped).
bool TakesPreparedActivations(DType t) {
  if (g_kquant_activations.load(std::memory_order_relaxed) != KQuantActivations::kQ8K) return false;
  if (t == DType::kQ8_0) {
    static const bool vnni = simd::Q8_0Q8MatMulKernel() != nullptr;  // quantises for itself
    return !vnni && simd::DenseMatMulKernel(t) != nullptr;
  }
  return IsGgmlQuant(t);
}

}  // namespace

void PreparedActivations::Prepare(const float* x, int64_t n_tokens, int64_t k, DType w_dtype) {
  Reset();
  if (!TakesPreparedActivations(w_dtype) || n_tokens <= 0) return;
  token_bytes_ = QuantizedTokenBytes(w_dtype, k);
  const auto need = static_cast<size_t>(n_tokens * token_bytes_);
  if (buf_.size() < need) buf_.resize(need);
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeFor(w_dtype, x + t * k, k, buf_.data() + t * token_bytes_);
  }
  x_ = x;
  n_tokens_ = n_tokens;
  k_ = k;
  dtype_ = w_dtype;
}

const void* PreparedActivations::For(const float* x, int64_t n_tokens, const TensorView& w) const {
  const bool same = x_ != nullptr && x == x_ && n_tokens == n_tokens_ && w.sizes[1] == k_ &&
                    w.dtype == dtype_ && TakesPreparedActivations(w.dtype);
  return same ? buf_.data() : nullptr;
}

void SetKQuantActivations(KQuantActivations a) { g_kquant_activations.store(a); }
KQuantActivations GetKQuantActivations() { return g_kquant_activations.load(); }

void MatMul(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens) {
  CheckDense(w);
  const simd::MatMulFn fn = PlainKernel(w.dtype);
  if (fn == nullptr) {
    const int64_t n_out = w.sizes[0];
    pool.ParallelFor(
        n_out,
        [&](int64_t begin, int64_t end, int) {
          ref::MatMul(out + begin, x, w.Slice(begin, end), n_tokens, n_out);
        },
        RowGrain(w.sizes[1] * n_tokens));
    return;
  }
  thread_local PreparedActivations prepared;  // quantised once for every chunk
  prepared.Prepare(x, n_tokens, w.sizes[1], w.dtype);
  RunSplit(pool, fn, out, x, w, TensorView{}, n_tokens, &prepared);
}

void MatMulFp8Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t fp8_block) {
  CheckFp8(w, scale, fp8_block);
  RunSplit(pool, &Fp8Kernel, out, x, w, scale, n_tokens, nullptr, fp8_block);
}

void MatMulFp4Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens) {
  CheckFp4(w, scale);
  RunSplit(pool, &Fp4Kernel, out, x, w, scale, n_tokens);
}

void MatMulRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                int64_t n_tokens, int64_t row_begin, int64_t row_end,
                const PreparedActivations* prepared) {
  CheckDense(w);
  CheckRows(w, row_begin, row_end);
  const simd::MatMulFn fn = PlainKernel(w.dtype);
  if (fn == nullptr) {
    ref::MatMul(out, x, w.Slice(row_begin, row_end), n_tokens, out_stride);
    return;
  }
  simd::MatMulArgs a = Args(out, out_stride, x, w, TensorView{}, n_tokens, row_begin, row_end);
  a.xq = prepared != nullptr ? prepared->For(x, n_tokens, w) : nullptr;
  fn(a);
}

void MatMulFp8BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end, int64_t fp8_block) {
  CheckFp8(w, scale, fp8_block);
  CheckRows(w, row_begin, row_end);
  Fp8Kernel(Args(out, out_stride, x, w, scale, n_tokens, row_begin, row_end, fp8_block));
}

void MatMulFp4BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end) {
  CheckFp4(w, scale);
  CheckRows(w, row_begin, row_end);
  Fp4Kernel(Args(out, out_stride, x, w, scale, n_tokens, row_begin, row_end));
}

bool StreamOnlyBuild() {
#if defined(DSV4_STREAM_ONLY) && DSV4_STREAM_ONLY
  return true;
#else
  return false;
#endif
}

int64_t RowGrain(int64_t macs_per_row) {
  constexpr int64_t kRowGrain = 32;
  macs_per_row = std::max<int64_t>(1, macs_per_row);
  const int64_t rows = (kMinMacsPerChunk + macs_per_row - 1) / macs_per_row;
  return std::max(kRowGrain, (rows + kRowGrain - 1) / kRowGrain * kRowGrain);
}

}  // namespace dsv4::ops
