// ops/simd q8_0 × q8_0 kernels on AVX-512 VNNI: llama.cpp's arithmetic for
// GGUF q8_0 weights (its CPU kernels quantise the activations to q8_0 too),
// bit for bit ops::ref's twins (QuantizeRowQ8_0, DotQ8_0Q8_0; the order is
// spelled out in ops/ref/kquant_ref.h).
//
// Why: the f32 kernels (matmul_simd.cc, bf16_f32_x86.cc) convert every weight
// to a float and multiply-add it, 16 multiply-adds per instruction; prefill
// then runs at the fp32 FMA roof. Here 32-value blocks are multiplied in
// integers (vpdpbusd: four byte products summed per dword lane), exact, and
// each block ends in the ref's three float steps.
//
// One token (up to kLaneMinTokens − 1, a token at a time): four weight rows
// at a time (RowDot4), fetched ahead; per block |w| · sign(x, w) (vpabsb,
// vpsignb: unsigned × signed bytes, as vpdpbusd takes them, the same
// products), the four rows' dword sums reduced together and their float steps
// in the lanes of one vector; the last rows % 4 one at a time (RowDot). More
// tokens: sixteen in
// the lanes of a vector (Lanes), activations + 128 as unsigned bytes, each
// row's four codes broadcast against sixteen tokens' four activation bytes
// per vpdpbusd, the + 128's share (128 · Σ codes of the block) taken out per
// block; 8 rows × 16 tokens per pass. The float steps are the same either
// way, per (row, token) in block order, so a token's result does not depend on
// how many tokens share the call.
//
// Integer ranges: |codes| ≤ 128, |activations| ≤ 127: a block's sum is at
// most 32·128·127 < 2¹⁹; with the + 128 offset 32·128·255 < 2²⁰.
//
// Shapes, outermost first: T tokens, K input features, N output features.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_HAVE_Q8_0_Q8 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define DSV4_HAVE_Q8_0_Q8 0
#endif

namespace dsv4::ops::simd {

#if DSV4_HAVE_Q8_0_Q8
namespace {

#define DSV4_Q80_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))

constexpr int64_t kBlockBytes = sizeof(BlockQ8_0);  // 34: f16 d, then 32 codes
// From this many tokens on, the lanes (as the k-quant kernels).
constexpr int64_t kLanesFrom = 6;
constexpr int kLaneTokens = 16;
constexpr int kLaneRows = 8;
// The one-token path's prefetch distance along a row's stream.
constexpr int64_t kFetchAheadBytes = 8192;

DSV4_Q80_TARGET inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ---------------------------------------------------------------------------
// Activations: ops::ref::QuantizeRowQ8_0, vectorised. amax (a max: exact in any
// order), d = amax / 127 and id = 127 / amax as the ref's scalars, x · id one
// rounding, then rounded to nearest, ties to even (llama.cpp's x86
// quantize_row_q8_0).
// ---------------------------------------------------------------------------

DSV4_Q80_TARGET void QuantizeRow(const float* x, int64_t k, BlockQ8_0* y) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = F32ToF16(d);
    const __m512 vid = _mm512_set1_ps(id);
    for (int h = 0; h < 2; ++h) {
      const __m512 q = _mm512_mul_ps(h == 0 ? v0 : v1, vid);
      const __m512 r = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * h),
                       _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
    }
  }
}

// Dword sums of one block's products (8 lanes, four products each).
DSV4_Q80_TARGET inline __m256i BlockDots(const uint8_t* blk, const int8_t* xq) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

// One row against one token's blocks (the last rows % 4 of a call): per
// block its integer sum, then the ref's float steps.
DSV4_Q80_TARGET float RowDot(const uint8_t* row, const BlockQ8_0* x, const float* dx,
                             int64_t n_blocks) {
  const __m256i z = _mm256_setzero_si256();
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    x86::PrefetchWeights(reinterpret_cast<const char*>(blk + kFetchAheadBytes));
    const int32_t isum = _mm_cvtsi128_si32(x86::Sum4(BlockDots(blk, x[b].qs), z, z, z));
    acc = acc + (F16At(blk) * dx[b]) * static_cast<float>(isum);
  }
  return acc;
}

// Four rows against one token's blocks (out[r]: row r, at row0 + r ·
// row_bytes): per block the four rows' integer sums reduced together and
// their float steps in the lanes of one vector, each lane the ref's steps in
// block order, as RowDot: the same bits, with no chain of scalar adds
// through every block of a row.
DSV4_Q80_TARGET void RowDot4(const uint8_t* row0, int64_t row_bytes, const BlockQ8_0* x,
                             const float* dx, int64_t n_blocks, float* out) {
  // As the k-quant kernels: at least the next four rows' same block ahead.
  const int64_t ahead = std::max(kFetchAheadBytes, 4 * row_bytes);
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row0 + b * kBlockBytes;
    uint16_t h[4];
    __m256i dots[4];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* p = blk + r * row_bytes;
      x86::PrefetchWeights(reinterpret_cast<const char*>(p + ahead));
      dots[r] = BlockDots(p, x[b].qs);
      std::memcpy(&h[r], p, 2);
    }
    const __m128i is = x86::Sum4(dots[0], dots[1], dots[2], dots[3]);
    const __m128 dw = _mm_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]),
                       static_cast<int16_t>(h[2]), static_cast<int16_t>(h[3]), 0, 0, 0, 0));
    // acc + (dw·dx)·isum, per lane.
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(dw, _mm_set1_ps(dx[b])), _mm_cvtepi32_ps(is)));
  }
  _mm_storeu_ps(out, acc);
}

// ---------------------------------------------------------------------------
// The lanes: per block and 16 tokens, x[q] holds token j's activation bytes
// 4q … 4q + 3 (+ 128, unsigned) in dword j; dx[j] its scale (0 past the
// tokens). Per 8 rows and block, each row's scale and 128 · Σ codes.
// ---------------------------------------------------------------------------

struct alignas(64) LaneActs {
  uint8_t x[8][64];
  float dx[kLaneTokens];
};

struct LaneRowsBlock {
  float dw[kLaneRows];
  int32_t wc[kLaneRows];  // 128 · Σ codes
};

DSV4_Q80_TARGET void LayOut(const BlockQ8_0* xq, int64_t n_tokens, int64_t t0, int64_t n_blocks,
                            LaneActs* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    LaneActs& o = out[b];
    for (int j = 0; j < kLaneTokens; ++j) {
      const int64_t t = t0 + j;
      if (t < n_tokens) {
        const BlockQ8_0& xb = xq[t * n_blocks + b];
        for (int q = 0; q < 8; ++q) {
          for (int i = 0; i < 4; ++i) {
            o.x[q][4 * j + i] = static_cast<uint8_t>(xb.qs[4 * q + i] + 128);
          }
        }
        o.dx[j] = F16ToF32(xb.d);
      } else {
        for (int q = 0; q < 8; ++q) std::memset(o.x[q] + 4 * j, 128, 4);
        o.dx[j] = 0.0f;
      }
    }
  }
}

// acc[r] (lane j: token j) = row r against the 16 tokens, every block.
DSV4_Q80_TARGET void LaneBlocks(const uint8_t* const rows[kLaneRows], const LaneRowsBlock* w,
                                const LaneActs* x, int64_t n_blocks, __m512* acc) {
  for (int r = 0; r < kLaneRows; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const LaneActs& X = x[b];
    __m512i s[kLaneRows];
    for (int r = 0; r < kLaneRows; ++r) s[r] = _mm512_setzero_si512();
    for (int q = 0; q < 8; ++q) {
      const __m512i v = _mm512_load_si512(X.x[q]);
      for (int r = 0; r < kLaneRows; ++r) {
        int32_t c;
        std::memcpy(&c, rows[r] + b * kBlockBytes + 2 + 4 * q, 4);
        s[r] = _mm512_dpbusd_epi32(s[r], v, _mm512_set1_epi32(c));
      }
    }
    const __m512 dx = _mm512_load_ps(X.dx);
    for (int r = 0; r < kLaneRows; ++r) {
      const __m512i isum = _mm512_sub_epi32(s[r], _mm512_set1_epi32(w[b].wc[r]));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(w[b].dw[r]), dx);
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(isum)));
    }
  }
}

struct Scratch {
  std::vector<BlockQ8_0> xq;
  std::vector<float> dx;
  std::vector<LaneActs> acts;
  std::vector<LaneRowsBlock> rows;
};

DSV4_Q80_TARGET void MatMul(const MatMulArgs& a) {
  const int64_t k_size = a.w.sizes[1], n_blocks = k_size / 32;
  const int64_t row_bytes = DTypeBytes(DType::kQ8_0, a.w.strides[0]);
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  thread_local Scratch s;  // grows once; no allocation per token
  const auto need = static_cast<size_t>(a.n_tokens * n_blocks);
  if (s.xq.size() < need) s.xq.resize(need);
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    QuantizeRow(a.x + t * k_size, k_size, s.xq.data() + t * n_blocks);
  }
  if (a.n_tokens < kLanesFrom) {
    if (s.dx.size() < need) s.dx.resize(need);
    for (size_t i = 0; i < need; ++i) s.dx[i] = F16ToF32(s.xq[i].d);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      int64_t n = a.row_begin;
      for (; n + 4 <= a.row_end; n += 4) {
        RowDot4(base + n * row_bytes, row_bytes, s.xq.data() + t * n_blocks,
                s.dx.data() + t * n_blocks, n_blocks, a.out + t * a.out_stride + (n - a.row_begin));
      }
      for (; n < a.row_end; ++n) {
        a.out[t * a.out_stride + (n - a.row_begin)] = RowDot(
            base + n * row_bytes, s.xq.data() + t * n_blocks, s.dx.data() + t * n_blocks, n_blocks);
      }
    }
    return;
  }
  // Lanes: chunks of 16-token groups whose activations stay in L2 (~384 KiB).
  const int64_t groups = (a.n_tokens + kLaneTokens - 1) / kLaneTokens;
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{384} << 10) / (n_blocks * int64_t{sizeof(LaneActs)}), 1, groups);
  if (s.acts.size() < static_cast<size_t>(chunk * n_blocks)) s.acts.resize(chunk * n_blocks);
  if (s.rows.size() < static_cast<size_t>(n_blocks)) s.rows.resize(n_blocks);
  for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
    const int64_t g1 = std::min(groups, g0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      LayOut(s.xq.data(), a.n_tokens, g * kLaneTokens, n_blocks, &s.acts[(g - g0) * n_blocks]);
    }
    for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += kLaneRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kLaneRows, a.row_end - n0));
      const uint8_t* rows[kLaneRows];
      for (int r = 0; r < kLaneRows; ++r) rows[r] = base + (n0 + std::min(r, nr - 1)) * row_bytes;
      for (int64_t b = 0; b < n_blocks; ++b) {
        for (int r = 0; r < kLaneRows; ++r) {
          const uint8_t* blk = rows[r] + b * kBlockBytes;
          // Σ codes: the bytes + 128 summed by vpsadbw, less 32 · 128.
          const __m256i u =
              _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                               _mm256_set1_epi8(-128));
          const __m256i sad = _mm256_sad_epu8(u, _mm256_setzero_si256());
          const __m128i s2 =
              _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
          const int32_t sum =
              static_cast<int32_t>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
          s.rows[b].wc[r] = 128 * sum;
          s.rows[b].dw[r] = F16At(blk);
        }
      }
      for (int64_t g = g0; g < g1; ++g) {
        __m512 acc[kLaneRows];
        LaneBlocks(rows, s.rows.data(), &s.acts[(g - g0) * n_blocks], n_blocks, acc);
        const int64_t t0 = g * kLaneTokens;
        const int nt = static_cast<int>(std::min<int64_t>(kLaneTokens, a.n_tokens - t0));
        x86::StoreLaneTile<kLaneRows>(acc, nr, nt, a.out + t0 * a.out_stride + (n0 - a.row_begin),
                                      a.out_stride);
      }
    }
  }
}

DSV4_Q80_TARGET bool TryMatMul(const MatMulArgs& a) {
  if (a.w.dtype != DType::kQ8_0 || a.w.rank != 2 || a.w.strides[1] != 1 || a.w.sizes[1] % 32 != 0) {
    return false;
  }
  if (a.row_end > a.row_begin && a.n_tokens > 0) MatMul(a);
  return true;
}

}  // namespace

namespace {
bool Enabled() {
  static const bool on = x86::KernelsOn() && __builtin_cpu_supports("avx512vnni");
  return on;
}
}  // namespace

TryMatMulFn Q8_0Q8MatMulKernel() { return Enabled() ? &TryMatMul : nullptr; }
Q8_0QuantizeFn Q8_0QuantizeKernel() { return Enabled() ? &QuantizeRow : nullptr; }

#else  // !DSV4_HAVE_Q8_0_Q8

TryMatMulFn Q8_0Q8MatMulKernel() { return nullptr; }
Q8_0QuantizeFn Q8_0QuantizeKernel() { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
