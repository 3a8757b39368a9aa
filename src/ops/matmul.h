// ops::MatMul: the matmul entry point model code calls. Splits the output
// features across the thread pool and runs the kernel for the weight's dtype
// on each slice. Today every dtype uses the scalar kernel of ops/ref; the SIMD
// kernels (issue 7) plug in here, dispatched once per call on dtype.
#ifndef DSV4_OPS_MATMUL_H_
#define DSV4_OPS_MATMUL_H_

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4::ops {

// out[T, N] = x[T, K] · w[N, K]ᵀ, fp32 accumulation.
void MatMul(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens);

}  // namespace dsv4::ops

#endif  // DSV4_OPS_MATMUL_H_
