// ops::MatMul and friends: the matmul entry points model code calls. Each
// picks the SIMD kernel for the weight's stored format once per call
// (ops/simd, Highway runtime dispatch) and splits the output features across
// the thread pool; formats without a SIMD kernel fall back to ops/ref.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_MATMUL_H_
#define DSV4_OPS_MATMUL_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4::ops {

// Multiply-adds a pool chunk must have to be worth splitting work over
// threads (below it, the hand-off costs as much as the work).
inline constexpr int64_t kMinMacsPerChunk = int64_t{1} << 17;
// The least weight bytes per thread chunk of a one-token product (memory-
// bound: a few microseconds of streaming against about one of a fork-join).
inline constexpr int64_t kMinDecodeChunkBytes = int64_t{64} << 10;

// Rows per chunk when splitting a product's output rows over the pool, for
// rows of macs_per_row multiply-adds each: at least kMinMacsPerChunk per
// chunk, in multiples of 32 (the kernels work in 4-row groups).
int64_t RowGrain(int64_t macs_per_row);

// Whether this is a DSV4_STREAM_ONLY measurement build, whose one-token
// matvecs compute nothing (ops/simd/x86_util.h); `dsv4 bench` says so.
bool StreamOnlyBuild();

// How GGUF quant weights (q8_0, the k-quants, the legacy and i-quants, mxfp4)
// meet their activations, for the whole process. kQ8K (the default)
// quantises each token's activations to the format llama.cpp's CPU backend
// pairs with the weight type (q8_K for the k- and i-quants, q8_0 or q8_1 for
// the 32-value types; ops/ref/kquant_ref.h, ops/ref/ggml_dot_ref.h) and sums
// the products in integers as its kernels do (its logits to within float
// rounding); kF32 multiplies the exactly dequantised weights by the f32
// activations (the logits of the weights dequantised to f32 first, to within
// float rounding; several times slower). On every CPU: the AVX-512 kernels
// where the CPU has them, else portable Highway ones with the same bits.
enum class KQuantActivations { kQ8K, kF32 };
void SetKQuantActivations(KQuantActivations a);
KQuantActivations GetKQuantActivations();

// Activations quantised once for the products of one x with GGUF quant
// weights of one dtype (the kQ8K path above), so that a product split into
// row ranges (MatMulRows per thread chunk) does not quantise them again per
// range. Empty, and ignored, for other dtypes, with kF32 activations, or where
// the kernel quantises for itself (q8_0 on AVX-512 VNNI).
class PreparedActivations {
 public:
  // Quantises x[T, K] for weights of w_dtype when that path applies.
  void Prepare(const float* x, int64_t n_tokens, int64_t k, DType w_dtype);
  // Holds nothing (For returns nullptr) until the next Prepare.
  void Reset() { x_ = nullptr; }
  // The quantised tokens for a product of (x, n_tokens, w), or nullptr when
  // not prepared for exactly those (then the kernel quantises).
  const void* For(const float* x, int64_t n_tokens, const TensorView& w) const;
  // Bytes of one quantised token.
  int64_t token_bytes() const { return token_bytes_; }

 private:
  std::vector<uint8_t> buf_;  // grows once
  const float* x_ = nullptr;
  int64_t n_tokens_ = 0, k_ = 0, token_bytes_ = 0;
  DType dtype_ = DType::kF32;
};

// out[T, N] = x[T, K] · w[N, K]ᵀ, fp32 accumulation. w: f32, f16, bf16 and
// the GGUF quant types take the SIMD kernels where they have one; any other
// dtype the scalar one.
void MatMul(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens);

// The same for block-scaled weights as DeepSeek-V4 ships them (see
// ops/ref/quant_matmul_ref.h for the formats): FP8 e4m3 with a
// [ceil(N/b), ceil(K/b)] scale for b × b weight tiles (fp8_block b: 128, or
// 32 for DeepSeek-V4.1-Flash), FP4 e2m1 with a [N, K/32] scale.
void MatMulFp8Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens, int64_t fp8_block = 128);
void MatMulFp4Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens);

// Single-threaded row-range forms, for callers that split rows themselves or
// compute a group of rows: out[t * out_stride + (n - row_begin)] for n in
// [row_begin, row_end). Same arguments as their ops::ref twins.
void MatMulRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                int64_t n_tokens, int64_t row_begin, int64_t row_end,
                const PreparedActivations* prepared = nullptr);
void MatMulFp8BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end, int64_t fp8_block = 128);
void MatMulFp4BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end);

}  // namespace dsv4::ops

#endif  // DSV4_OPS_MATMUL_H_
