// ops::simd — the vectorised kernels (Highway, runtime dispatch to the best
// instruction set the CPU has: AVX-512, AVX2, SSE4, NEON/SVE, or the portable
// EMU128 fallback). Each has a scalar twin in ops/ref and a test that compares
// the two on every target compiled in (tests/ops/simd_kernels_test.cc).
//
// Model code does not call these directly: it calls the ops:: entry points
// (ops/matmul.h, ops/vec_ops.h), which split work over the thread pool and
// pick the kernel for the weight format once per call.
//
// Matmul numerics: weights are read in their stored format and dequantised in
// registers (never to a temporary matrix; the prefill path decodes one panel
// of 32 rows × 768 inputs at a time into L2), products accumulate in fp32. The sum
// order differs from ops/ref (lanes, then blocks), so results agree to the
// kernel tolerances, not bit for bit. On CPUs with AVX512-BF16, FP8/FP4 products
// whose inputs are exactly bf16 run on bf16 dot products instead (the same
// exact products; Fp8Bf16DotKernel below).
//
// Shapes, outermost first: T tokens, K input features, N output features.
#ifndef DSV4_OPS_SIMD_SIMD_KERNELS_H_
#define DSV4_OPS_SIMD_SIMD_KERNELS_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace dsv4::ops::simd {

// One matmul call on a range of output rows:
//   out[t * out_stride + (n - row_begin)] = Σ_k x[t * K + k] · W[n, k]
// for t < n_tokens and n in [row_begin, row_end).
struct MatMulArgs {
  float* out = nullptr;
  int64_t out_stride = 0;
  const float* x = nullptr;  // [T, K] contiguous
  int64_t n_tokens = 0;
  TensorView w;             // [N, K], rows contiguous (strides[1] == 1)
  TensorView scale;         // block scales of FP8 [ceil(N/b), ceil(K/b)] / FP4 [N, K/32]
  int64_t fp8_block = 128;  // FP8: b, the weight tile a scale covers (b × b): 128 or 32
  int64_t row_begin = 0;
  int64_t row_end = 0;
  // The tokens' activations already quantised for a GGUF quant weight
  // (ops::PreparedActivations), or nullptr: the kernel quantises x itself.
  const void* xq = nullptr;
};

using MatMulFn = void (*)(const MatMulArgs& args);

// The getters below return the kernel itself, safe to keep: Highway's
// dispatch table points at a trampoline until a target is chosen, which asks
// the CPU for its features (a VM exit) on every call through it; they choose
// the target first (ChooseTarget, once per process).
void ChooseTarget();

// The kernel for a weight stored as f32, f16, bf16 or GGUF q8_0 (no separate
// scale tensor); nullptr for any other dtype.
MatMulFn DenseMatMulKernel(DType w_dtype);
// FP8 e4m3 weight with b × b block scales (e8m0, f32 or bf16), b =
// args.fp8_block: 128 or 32.
MatMulFn Fp8BlockMatMulKernel();
// FP4 e2m1 weight (two per byte, low nibble first) with per-32 e8m0/f32/bf16 scales.
MatMulFn Fp4BlockMatMulKernel();
// GGUF k-quant weight, q4_K or q6_K (ops/simd/kquant_simd.cc; K a multiple of
// 256); nullptr for any other dtype.
MatMulFn KQuantMatMulKernel(DType w_dtype);
// The q8_K path for the same weights (llama.cpp's arithmetic; the order in
// ops/ref/kquant_ref.h), on AVX-512 F/BW/DQ/VL (ops/simd/kquant_q8_x86.cc),
// bit for bit ops::ref::QuantizeRowQ8K and DotKQuantQ8K for finite
// activations. The kernel takes each token's activations already quantised
// (xq: T · K/256 blocks) and ignores args.x. nullptr when the CPU lacks the
// instructions or DSV4_KERNELS=portable (base/env.h; then the portable
// kernels below).
using QuantizeQ8KFn = void (*)(const float* x, int64_t k, BlockQ8K* y);
QuantizeQ8KFn QuantizeQ8KKernel();
using KQuantQ8KFn = void (*)(const MatMulArgs& args, const BlockQ8K* xq);
KQuantQ8KFn KQuantQ8KKernel(DType w_dtype);
// The same products on any CPU (Highway, every target; ops/simd/kquant_q8_simd.cc),
// bit for bit ops::ref::DotKQuantQ8K: what ops::MatMul runs where
// KQuantQ8KKernel is nullptr. nullptr for a dtype other than q4_K and q6_K.
KQuantQ8KFn KQuantQ8KPortableKernel(DType w_dtype);
// Their activation quantisation on any CPU: bit for bit
// ops::ref::QuantizeRowQ8K for finite x.
QuantizeQ8KFn QuantizeQ8KPortableKernel();
// The kernel with (vnni: AVX512-VNNI, the faster) or without VNNI, whichever
// KQuantQ8KKernel picks (the first where the CPU has it); nullptr where the
// CPU lacks it. For tests: both give the same bits.
KQuantQ8KFn KQuantQ8KKernelVariant(DType w_dtype, bool vnni);

// The GGUF quant types of tensor/ggml_quants.h × activations quantised as
// llama.cpp's CPU backend quantises them (ops/ref/ggml_dot_ref.h): xq holds
// T tokens' quantised activations, ActivationBytes(ActivationFormat(w), K)
// bytes each; args.x is ignored. The twins of ops::ref::DotGgmlQ8, bit for
// bit (the same exact integer block sums and float steps in the same order).
// nullptr for a type without a kernel on this CPU (then ops/ref).
using GgmlQ8Fn = void (*)(const MatMulArgs& args, const void* xq);
//   the legacy and k-quant families (ops/simd/ggml_basic_simd.cc)
GgmlQ8Fn GgmlBasicQ8Kernel(DType w_dtype);
//   the grid i-quants (ops/simd/ggml_iq_simd.cc)
GgmlQ8Fn GgmlIqQ8Kernel(DType w_dtype);
//   mxfp4 × q8_0 (ops/simd/mxfp4_q8_simd.cc; K a multiple of 32), bit for bit
//   ops::ref::DotMxfp4Q8_0; nullptr for any other dtype.
GgmlQ8Fn GgmlMxfp4Q8Kernel(DType w_dtype);
// GGUF q8_0 weights × activations quantised to q8_0 (xq: T · K/32 BlockQ8_0,
// ops::ref::QuantizeRowQ8_0) on any CPU (Highway, every target;
// ops/simd/mxfp4_q8_simd.cc): bit for bit ops::ref::DotQ8_0Q8_0, so
// ref::MatMulQ8_0Q8_0. What ops::MatMul runs where Q8_0Q8MatMulKernel is nullptr.
GgmlQ8Fn Q8_0Q8PortableKernel();
// Its activation quantisation on any CPU: bit for bit ops::ref::QuantizeRowQ8_0
// for finite x (the q8_0 format of mxfp4 activations too).
using Q8_0QuantizeFn = void (*)(const float* x, int64_t k, BlockQ8_0* y);
Q8_0QuantizeFn Q8_0QuantizePortableKernel();

// FP8/FP4 products on bf16 dot products (ops/simd/bf16dot_x86.cc), for
// x86-64 CPUs with AVX512-BF16 and AVX512-VBMI. A kernel declines a call (and
// returns false, writing nothing) unless K % 128 == 0 and every x is exactly
// bf16 (as after DeepSeek-V4's FP8 activation quantisation); then the caller
// runs the kernels above. Exact products, fp32 sums in another order than
// theirs. nullptr when the CPU lacks the instructions or DSV4_KERNELS=portable
// (as for every kernel below).
using TryMatMulFn = bool (*)(const MatMulArgs& args);
TryMatMulFn Fp8Bf16DotKernel();
TryMatMulFn Fp4Bf16DotKernel();
// FP8 × f32 matvec (one token) on AVX-512 with VBMI (ops/simd/fp8_f32_x86.cc):
// bit for bit Fp8BlockMatMulKernel's, with the weights decoded by byte table
// lookups instead of through f16. Declines (false, nothing written) unless
// n_tokens == 1, K is a multiple of 64 and of the block (128 or 32) and the
// scales are e8m0; the caller then runs
// Fp8BlockMatMulKernel. nullptr when the CPU lacks the instructions.
TryMatMulFn Fp8F32MatVecKernel();
// bf16 × f32 matvec (one token) on AVX-512 (ops/simd/bf16_f32_x86.cc): bit for
// bit DenseMatMulKernel(kBF16)'s, two rows at once from the two halves of the
// row range (two sequential streams).
// Declines (false, nothing written) unless n_tokens == 1 and K % 64 == 0; the
// caller then runs DenseMatMulKernel. nullptr when the CPU lacks AVX-512.
TryMatMulFn Bf16F32MatVecKernel();
// f32 × f32 matvec (one token), the same kernel for f32 weights: bit for bit
// DenseMatMulKernel(kF32)'s. Declines unless n_tokens == 1 and K % 32 == 0.
// nullptr when the CPU lacks AVX-512.
TryMatMulFn F32F32MatVecKernel();
// f16 and q8_0 × f32 matvecs (one token), the same kernel: bit for bit
// DenseMatMulKernel(kF16 / kQ8_0)'s. Decline unless n_tokens == 1 and
// K % 32 == 0. nullptr when the CPU lacks AVX-512.
TryMatMulFn F16F32MatVecKernel();
TryMatMulFn Q8F32MatVecKernel();
// GGUF q8_0 weights × activations quantised to q8_0 (llama.cpp's arithmetic,
// ops/simd/q8_0_x86.cc), AVX-512 VNNI: bit for bit ops::ref::MatMulQ8_0Q8_0
// for any token count and row range (each thread quantises the call's
// activations itself). Declines a non-q8_0 weight. nullptr when the CPU lacks
// AVX-512 VNNI; the caller then takes Q8_0Q8PortableKernel.
TryMatMulFn Q8_0Q8MatMulKernel();
// Its activation quantisation, bit for bit ops::ref::QuantizeRowQ8_0.
Q8_0QuantizeFn Q8_0QuantizeKernel();
// The bf16 dot-product FLOP/s probe's body (as FmaLoop): about `macs`
// multiply-adds on independent vdpbf16ps chains; *done gets the exact count,
// 0 where those kernels are not available.
float Bf16DotLoop(int64_t macs, int64_t* done);
// The same for the int8 dot products of the k-quant × q8_K kernels
// (KQuantQ8KKernel): independent vpdpbusd chains (64 multiply-adds each), or
// without VNNI the word pair sums that stand in for them; *done 0 where those
// kernels are not available.
float Int8DotLoop(int64_t macs, int64_t* done);

// Elementwise kernels; the semantics are those of the ops/ref twins.
void SwiGluLimited(float* out, const float* gate, const float* up, int64_t n, float limit,
                   float scale);
void SoftmaxWithSink(float* x, int64_t n, float scale, float sink);
// ops::ref::SoftmaxPool; scratch: room for n_slots · kSoftmaxPoolLanes floats.
inline constexpr int64_t kSoftmaxPoolLanes = 16;
void SoftmaxPool(float* out, const float* const* scores, const float* const* values,
                 int64_t n_slots, int64_t n, float* scratch);
// The index of the first largest of x[0, n), NaN ignored; 0 when no value
// exceeds −inf (ops::ref::Argmax).
int64_t Argmax(const float* x, int64_t n);
void RmsNorm(float* out, const float* x, const float* weight, int64_t n, float eps);
void Softmax(float* x, int64_t n);
void SwiGlu(float* out, const float* gate, const float* up, int64_t n);
void RopeInterleaved(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                     float theta);
// Σ a[i] · b[i] (attention scores).
float Dot(const float* a, const float* b, int64_t n);
// Σ x[i] (four lane-parallel partial sums; also the memory-bandwidth probe).
float Sum(const float* x, int64_t n);
// Sum, bit for bit, with a non-temporal software prefetch 8 KiB ahead: the
// other read pattern of the bandwidth probe (the matvecs read memory so).
float SumAhead(const float* x, int64_t n);
// y[i] += alpha · x[i] (attention value accumulation).
void Axpy(float* y, float alpha, const float* x, int64_t n);
// Many queries against many keys (MQA attention scores), register-blocked:
// out[h · n_keys + i] = Dot(q + h · q_stride, keys[i], n), bit for bit.
void DotMany(const float* q, int64_t n_q, int64_t q_stride, const float* const* keys,
             int64_t n_keys, int64_t n, float* out);
// Many rows of y each accumulating many x rows (MQA attention output),
// register-blocked: for h < n_y, i = 0 … n_keys − 1 in order,
// Axpy(y + h · y_stride, alpha[h · n_keys + i], x[i], n), bit for bit.
void AxpyMany(float* y, int64_t n_y, int64_t y_stride, const float* alpha, const float* const* x,
              int64_t n_keys, int64_t n);
// AxpyMany over f16 x rows (uint16_t bits, each value converted exactly):
// bit for bit AxpyMany on the rows converted to f32.
void AxpyManyF16(float* y, int64_t n_y, int64_t y_stride, const float* alpha,
                 const uint16_t* const* x, int64_t n_keys, int64_t n);
// out[i] = x[i] as f16 bits, rounded to nearest even: bit for bit
// F32ToF16 (base/float_types.h), except that a NaN's payload may differ.
void F32ToF16Row(const float* x, uint16_t* out, int64_t n);
// out[i] = x[i] rounded to bf16 (nearest even), as f32: bit for bit
// Bf16ToF32(F32ToBf16(x[i])) (base/float_types.h), NaN included. out may be x.
void RoundToBf16Row(const float* x, float* out, int64_t n);
// Σ over rows i in order, from 0, of the rounded products c[i] · x[i][j]
// (multiply, then add: no fused multiply-add), bit for bit
// ops::ref::LinearCombine (mHC's stream collapse and expansion).
void LinearCombine(float* out, const float* const* x, const float* c, int64_t n_x, int64_t n);
// ops::ref::LinearCombineRows bit for bit (each output row LinearCombine's
// bits; out rows may be x rows).
void LinearCombineRows(float* const* out, int64_t n_out, const float* const* x, int64_t n_x,
                       const float* c, int64_t n);

// FP8 e4m3 quantise-dequantise of activations per block of `block` values
// (n a multiple of block), bit for bit ops::ref::QuantizeDequantizeFp8.
void QuantizeDequantizeFp8(float* x, int64_t n, int64_t block);
// FP4 e2m1 quantise-dequantise per block of `block` values (n a multiple of
// block), bit for bit ops::ref::QuantizeDequantizeFp4 for inputs without NaN.
void QuantizeDequantizeFp4(float* x, int64_t n, int64_t block);

// The FLOP/s probe's body: about `fmas` lane-FMAs on 16 independent
// register accumulators; *done gets the exact number of lane-FMAs run. Returns
// a value that depends on every accumulator (so none is optimised away).
float FmaLoop(int64_t fmas, int64_t* done);

// The Highway target the dispatcher picks now ("AVX3", "AVX2", "SSE4", "EMU128", ...).
const char* ActiveTargetName();

}  // namespace dsv4::ops::simd

#endif  // DSV4_OPS_SIMD_SIMD_KERNELS_H_
