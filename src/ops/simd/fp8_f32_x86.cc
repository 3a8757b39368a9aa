// ops/simd FP8 × f32 matvec on AVX-512 (with VBMI): the decode path of
// ops::MatMulFp8Block when x is not exactly bf16, so that the bf16 dot
// products (bf16dot_x86.cc) decline it — DeepSeek-V4's wo_a, whose input is
// the attention output in fp32.
//
// Bit for bit the Highway matvec (matmul_simd.cc, Fp8Fmt on AVX-512), so that
// a token's result still does not depend on how many tokens share its call
// (the tile path sums in that order too). That order, per output row:
//   - rows go four at a time from row_begin; a quad whose rows share their
//     b-row block's scales takes x·(s·256) once per b-input block (b =
//     args.fp8_block, the weight tile a scale covers: 128, or 32);
//   - lane i of one accumulator takes, in k order, the products of inputs
//     k ≡ i (mod 16): per 32 inputs j…j+31, FMA(w[j+i]/256, xs[j+i]) then
//     FMA(w[j+16+i]/256, xs[j+16+i]);
//   - the output is _mm512_reduce_add_ps of the accumulator, plus 0.0f.
// Here the weights are decoded by two byte table lookups (vpermi2b) into
// bf16 of e4m3/256 — the same value the Highway path gets through f16 — and
// widened by unpacking with zero; one vpermb first orders each 64 bytes so
// that the unpacks give inputs in natural lane order: 10 shuffles and 4 FMAs
// per 64 weights where the f16 route takes 14 conversions and shifts. The
// rows are prefetched as one stream into L2 (kAheadBytes,
// x86::PrefetchWeights): the table decoding alone leaves the kernel waiting
// on memory, and a prefetch into L1 holds the stream to L1's lines in flight
// (`DSV4_BENCH_X=f32 matmul_bench 1 128 5 fp8_e4m3 2048 decode:8`).
// Quads whose rows straddle two b-row blocks, or whose block has a NaN
// scale (e8m0 255), run on the Highway kernel itself.
//
// Shapes, outermost first: K input features, N output features.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/float_types.h"
#include "ops/simd/simd_kernels.h"
#include "ops/simd/x86_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_HAVE_FP8_F32 1
#include <immintrin.h>
// GCC 12 flags the self-initialised "undefined" vectors inside its AVX-512
// intrinsic headers as (maybe-)uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define DSV4_HAVE_FP8_F32 0
#endif

namespace dsv4::ops::simd {

#if DSV4_HAVE_FP8_F32
namespace {

#define DSV4_FP8F32_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))

constexpr int64_t kStep = 64;  // inputs per step of Quad
// How far ahead of the quad being read its rows are prefetched: the next quad
// (8 KiB) is too close for the misses to overlap; 24 and 32 KiB measured best
// (`DSV4_BENCH_X=f32 matmul_bench 1 256 3 fp8_e4m3 2048 decode`).
constexpr int64_t kAheadBytes = 24 * 1024;

struct Tables {
  alignas(64) uint8_t hi[128];    // high byte of bf16(e4m3 magnitude code / 256)
  alignas(64) uint8_t lo[128];    // low byte
  alignas(64) uint8_t order[64];  // vpermb: byte 16L + 4q + m takes input 16q + 4L + m
};

const Tables& GetTables() {
  static const Tables t = [] {
    Tables t{};
    for (int c = 0; c < 128; ++c) {
      // NaN codes (0x7f) decode as 480, as the Highway path does.
      const float v = (c == 0x7f ? 480.0f : Fp8E4m3ToF32(static_cast<uint8_t>(c))) / 256.0f;
      uint32_t u;
      std::memcpy(&u, &v, 4);
      t.hi[c] = static_cast<uint8_t>(u >> 24);
      t.lo[c] = static_cast<uint8_t>(u >> 16);
    }
    for (int p = 0; p < 64; ++p) {
      const int lane = p / 16, q = (p % 16) / 4, m = p % 4;
      t.order[p] = static_cast<uint8_t>(16 * q + 4 * lane + m);
    }
    return t;
  }();
  return t;
}

// The f32 weights (÷256) of inputs [0, 16), [16, 32), [32, 48), [48, 64) of
// the 64 bytes at p.
DSV4_FP8F32_TARGET inline void Decode(const uint8_t* p, const __m512i tab[5], __m512 w[4]) {
  const __m512i b = _mm512_permutexvar_epi8(tab[4], x86::Opaque(_mm512_loadu_si512(p)));
  __m512i hi = _mm512_permutex2var_epi8(tab[0], b, tab[1]);
  const __m512i lo = _mm512_permutex2var_epi8(tab[2], b, tab[3]);
  hi = _mm512_ternarylogic_epi32(hi, b, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);
  const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
  const __m512i zero = _mm512_setzero_si512();
  w[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0));
  w[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0));
  w[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1));
  w[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1));
}

// Outputs of rows [n0, n0 + rows) (rows ≤ 4, one b-row block) from xs =
// x·(s·256) per input; [next, next + next_bytes): where the prefetch stream
// runs (an address, not a pointer: it may lie past the weights, unread).
DSV4_FP8F32_TARGET void Quad(const uint8_t* base, int64_t row_bytes, int64_t n0, int rows,
                             int64_t k_size, const float* xs, const __m512i tab[5], uintptr_t next,
                             int64_t next_bytes, float* out) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  const uint8_t* row[4];
  for (int r = 0; r < 4; ++r) row[r] = base + (n0 + std::min(r, rows - 1)) * row_bytes;
  for (int64_t k = 0; k < k_size; k += kStep) {
    // The rows' bytes kAheadBytes on, fetched along as one stream at this
    // pace (a non-temporal hint left 4 rows side by side much slower).
    for (int64_t off = 4 * k; off < std::min(next_bytes, 4 * k + 256); off += 64) {
      x86::PrefetchWeights(reinterpret_cast<const char*>(next + static_cast<uintptr_t>(off)));
    }
    const __m512 x0 = _mm512_loadu_ps(xs + k), x1 = _mm512_loadu_ps(xs + k + 16);
    const __m512 x2 = _mm512_loadu_ps(xs + k + 32), x3 = _mm512_loadu_ps(xs + k + 48);
    for (int r = 0; r < 4; ++r) {
      if (r >= rows) break;
      __m512 w[4];
      Decode(row[r] + k, tab, w);
      acc[r] = _mm512_fmadd_ps(w[0], x0, acc[r]);
      acc[r] = _mm512_fmadd_ps(w[1], x1, acc[r]);
      acc[r] = _mm512_fmadd_ps(w[2], x2, acc[r]);
      acc[r] = _mm512_fmadd_ps(w[3], x3, acc[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + 0.0f;
}

struct Scratch {
  std::vector<float> xs;
};

DSV4_FP8F32_TARGET bool TryMatVec(const MatMulArgs& a) {
  const int64_t k_size = a.w.sizes[1];
  const int64_t tile = a.fp8_block;  // FP8 scale block (rows and inputs): 128 or 32
  if (a.n_tokens != 1 || (tile != 128 && tile != 32) || k_size % tile != 0 || k_size % kStep != 0 ||
      k_size == 0 || a.scale.dtype != DType::kE8m0 || a.scale.strides[1] != 1) {
    return false;
  }
  if (a.row_end <= a.row_begin) return true;
  if constexpr (x86::kStreamOnly) {
    const int64_t b0 = a.row_begin / tile, b1 = (a.row_end + tile - 1) / tile;
    x86::StreamOnly(static_cast<const uint8_t*>(a.w.data) + a.row_begin * a.w.strides[0],
                    (a.row_end - a.row_begin) * a.w.strides[0],
                    static_cast<const uint8_t*>(a.scale.data) + b0 * a.scale.strides[0],
                    (b1 - b0) * a.scale.strides[0], kAheadBytes, a.out, a.row_end - a.row_begin);
    return true;
  }
  const Tables& tb = GetTables();
  __m512i tab[5];
  tab[0] = _mm512_load_si512(tb.hi);
  tab[1] = _mm512_load_si512(tb.hi + 64);
  tab[2] = _mm512_load_si512(tb.lo);
  tab[3] = _mm512_load_si512(tb.lo + 64);
  tab[4] = _mm512_load_si512(tb.order);
  // xs on a 64-byte boundary (its four loads per step then stay within lines).
  thread_local Scratch s;
  if (s.xs.size() < static_cast<size_t>(k_size + 16)) s.xs.resize(static_cast<size_t>(k_size + 16));
  float* xs =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s.xs.data()) + 63) & ~uintptr_t{63});
  const int64_t row_bytes = a.w.strides[0];  // fp8: one byte per element
  const uint8_t* base = static_cast<const uint8_t*>(a.w.data);
  const uint8_t* scales = static_cast<const uint8_t*>(a.scale.data);
  const int64_t k_blocks = k_size / tile;
  int64_t xs_block = -1;  // whose scales xs holds; -2: that block has a NaN scale
  const MatMulFn highway = Fp8BlockMatMulKernel();
  for (int64_t n0 = a.row_begin; n0 < a.row_end; n0 += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, a.row_end - n0));
    const int64_t block = n0 / tile;
    float* out = a.out + (n0 - a.row_begin);
    const bool straddles = (n0 + rows - 1) / tile != block;
    if (!straddles && block != xs_block && xs_block != -2 - block) {
      // xs = x · (s · 256), as the Highway matvec scales x for a quad.
      const uint8_t* e = scales + block * a.scale.strides[0];
      bool nan = false;
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        nan |= e[kb] == 255;
        const __m512 vs = _mm512_set1_ps(E8m0ToF32(e[kb]) * 256.0f);
        for (int64_t k = kb * tile; k < (kb + 1) * tile; k += 16) {
          _mm512_storeu_ps(xs + k, _mm512_mul_ps(_mm512_loadu_ps(a.x + k), vs));
        }
      }
      xs_block = nan ? -2 - block : block;
    }
    if (straddles || xs_block != block) {
      // Rows in two b-row blocks, or a NaN scale: the Highway kernel's own
      // quad (it compares the rows' scales per input block).
      MatMulArgs q = a;
      q.row_begin = n0;
      q.row_end = n0 + rows;
      q.out = out;
      highway(q);
      continue;
    }
    // Prefetch from kAheadBytes past the quad's start, up to the range's end.
    const int64_t ahead = n0 * row_bytes + kAheadBytes, end = a.row_end * row_bytes;
    Quad(base, row_bytes, n0, rows, k_size, xs, tab,
         reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(ahead),
         std::max<int64_t>(0, end - ahead), out);
  }
  return true;
}

}  // namespace

TryMatMulFn Fp8F32MatVecKernel() {
  static const bool on = x86::KernelsOn() && __builtin_cpu_supports("avx512vbmi");
  return on ? &TryMatVec : nullptr;
}

#else  // !DSV4_HAVE_FP8_F32

TryMatMulFn Fp8F32MatVecKernel() { return nullptr; }

#endif

}  // namespace dsv4::ops::simd
