// ops::MatMul and friends: the matmul entry points model code calls. Each
// picks the SIMD kernel for the weight's stored format once per call
// (ops/simd, Highway runtime dispatch) and splits the output features across
// the thread pool; formats without a SIMD kernel fall back to ops/ref.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_MATMUL_H_
#define DSV4_OPS_MATMUL_H_

#include <cstdint>

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

// How GGUF k-quant weights (q4_K, q6_K) meet their activations, for the whole
// process. kQ8K (the default) quantises each token's activations to q8_K and
// sums the products in integers, as llama.cpp's CPU kernels do (its logits to
// within float rounding; ops/ref/kquant_ref.h); kF32 multiplies the exactly
// dequantised weights by the f32 activations (the logits of the weights
// dequantised to f32 first, to within float rounding; several times slower).
// q8_0 weights follow the same switch: kQ8K quantises their activations to
// q8_0 (32 values per block, llama.cpp's arithmetic for them) on every CPU,
// on the AVX-512 VNNI kernels (ops/simd/q8_0_x86.cc) where the CPU has them,
// else on the portable ones (ops/simd/mxfp4_q8_simd.cc): the same bits,
// ops::ref::MatMulQ8_0Q8_0's. (CPUs without AVX-512 VNNI used to multiply q8_0
// weights by the f32 activations under kQ8K too; their q8_0 products now carry
// the activation rounding as everywhere else.) kF32 takes the f32 kernels.
enum class KQuantActivations { kQ8K, kF32 };
void SetKQuantActivations(KQuantActivations a);
KQuantActivations GetKQuantActivations();

// out[T, N] = x[T, K] · w[N, K]ᵀ, fp32 accumulation. w: f32, f16, bf16, GGUF
// q8_0, q4_K, q6_K, mxfp4 and the grid i-quants take the SIMD kernels; any other
// dtype the scalar one.
void MatMul(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens);

// The same for block-scaled weights as DeepSeek-V4 ships them (see
// ops/ref/quant_matmul_ref.h for the formats): FP8 e4m3 with a
// [ceil(N/128), ceil(K/128)] scale, FP4 e2m1 with a [N, K/32] scale.
void MatMulFp8Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens);
void MatMulFp4Block(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                    const TensorView& scale, int64_t n_tokens);

// Single-threaded row-range forms, for callers that split rows themselves or
// compute a group of rows: out[t * out_stride + (n - row_begin)] for n in
// [row_begin, row_end). Same arguments as their ops::ref twins.
void MatMulRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                int64_t n_tokens, int64_t row_begin, int64_t row_end);
void MatMulFp8BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end);
void MatMulFp4BlockRows(float* out, int64_t out_stride, const float* x, const TensorView& w,
                        const TensorView& scale, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end);

}  // namespace dsv4::ops

#endif  // DSV4_OPS_MATMUL_H_
