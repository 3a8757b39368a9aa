// How one thread's read patterns stream from memory (not a test). A one-token matvec reads its weights row by row;
// how many rows it reads side by side, and where those rows lie, decides
// whether the hardware prefetcher keeps up. Each pattern below sums a
// bf16 × f32 product over a [rows, K] bf16 matrix (K = 2048, one dependent
// FMA chain per row, as ops/simd/bf16_f32_x86.cc), on one thread, and prints
// GB/s beside a plain sum of the same bytes:
//
//   sum        the bytes as floats, four accumulators (the STREAM-style roof)
//   1row       one row at a time
//   2halves    row i beside row i + rows/2: two sequential streams
//   2adjacent  rows 2i and 2i + 1 side by side: one window, two rows 4 KiB apart
//   4quarters  row i beside rows i + rows/4, i + rows/2, i + 3·rows/4
//   4adjacent  rows 4i … 4i + 3 side by side (the Highway matvec's shape)
//
//   stream_patterns [MB=128] [AHEAD_BYTES=0] [HINT=t1] [REPEAT=3]
//
// AHEAD_BYTES > 0 adds a software prefetch that far ahead of every row's
// stream, HINT t0 (into L1) or t1 (into L2). Each figure is the median of
// REPEAT passes; the matrix lies on 2 MiB pages (as the probe's buffer). Use
// MB of a few hundred for memory, a few MB for the caches.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/huge_page_buffer.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// GCC 12 flags the self-initialised "undefined" vectors inside its AVX-512
// intrinsic headers as (maybe-)uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#define DSV4_STREAM_TARGET __attribute__((target("avx512f,avx512bw")))

namespace {

constexpr int64_t kK = 2048;  // inputs per row: 4 KiB of bf16
float g_xe[kK / 2] __attribute__((aligned(64)));
float g_xo[kK / 2] __attribute__((aligned(64)));
int64_t g_ahead = 0;
bool g_l2 = true;

DSV4_STREAM_TARGET inline void Fetch(const uint16_t* p) {
  if (g_ahead == 0) return;
  const char* c = reinterpret_cast<const char*>(p) + g_ahead;
  if (g_l2) {
    _mm_prefetch(c, _MM_HINT_T1);
  } else {
    _mm_prefetch(c, _MM_HINT_T0);
  }
}

// acc after the 32 weights at w (bf16) against x's evens and odds.
DSV4_STREAM_TARGET inline __m512 Step(const uint16_t* w, int64_t k, __m512 acc) {
  Fetch(w);
  const __m512i u = _mm512_loadu_si512(w);
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u, 16)), _mm512_load_ps(g_xe + k / 2),
                        acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(-65536))),
                         _mm512_load_ps(g_xo + k / 2), acc);
}

// Rows r[0..kRows) side by side, each one chain; out[j · stride] = row j's sum.
template <int kRows>
DSV4_STREAM_TARGET void Rows(const uint16_t* const* r, float* out, int64_t stride) {
  __m512 acc[kRows];
  for (int j = 0; j < kRows; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kK; k += 32) {
    for (int j = 0; j < kRows; ++j) acc[j] = Step(r[j] + k, k, acc[j]);
  }
  for (int j = 0; j < kRows; ++j) out[j * stride] = _mm512_reduce_add_ps(acc[j]);
}

// Every row of w[rows, kK] (out[row] = its sum), kRows at a time, the rows
// of a set `apart` rows from one another: 1 (adjacent) or rows / kRows.
template <int kRows>
DSV4_STREAM_TARGET void Pattern(const uint16_t* w, int64_t rows, int64_t apart, float* out) {
  const int64_t sets = rows / kRows;
  for (int64_t s = 0; s < sets; ++s) {
    // Row of set s, member j: adjacent sets step by kRows rows; far-apart
    // members (apart = sets) step by one row.
    const int64_t first = apart == 1 ? s * kRows : s;
    const uint16_t* r[kRows];
    for (int j = 0; j < kRows; ++j) r[j] = w + (first + j * apart) * kK;
    Rows<kRows>(r, out + first, apart);
  }
}

DSV4_STREAM_TARGET float Sum(const uint16_t* w, int64_t bytes) {
  const float* f = reinterpret_cast<const float*>(w);
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (int64_t i = 0; i + 64 <= bytes / 4; i += 64) {
    for (int j = 0; j < 4; ++j) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(f + i + 16 * j));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mb = argc > 1 ? std::atoll(argv[1]) : 128;
  g_ahead = argc > 2 ? std::atoll(argv[2]) : 0;
  const std::string hint = argc > 3 ? argv[3] : "t1";
  const int repeat = argc > 4 ? std::atoi(argv[4]) : 3;
  if (mb < 1 || g_ahead < 0 || repeat < 1 || (hint != "t0" && hint != "t1")) {
    std::fprintf(stderr, "usage: %s [MB>=1] [AHEAD_BYTES>=0] [t0|t1] [REPEAT>=1]\n", argv[0]);
    return 2;
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) {
    std::fprintf(stderr, "stream_patterns: this CPU lacks AVX-512 F/BW\n");
    return 2;
  }
  g_l2 = hint == "t1";
  const int64_t rows = (mb << 20) / (2 * kK) / 4 * 4, bytes = rows * kK * 2;
  dsv4::HugePageBuffer buf(static_cast<size_t>(bytes));
  uint16_t* w = reinterpret_cast<uint16_t*>(buf.data());
  for (int64_t i = 0; i < rows * kK; ++i) w[i] = static_cast<uint16_t>(0x3f80 + i % 7);
  for (int64_t i = 0; i < kK / 2; ++i) {
    g_xe[i] = 0.5f;
    g_xo[i] = 0.25f;
  }
  std::vector<float> out(static_cast<size_t>(rows));
  struct Run {
    const char* name;
    void (*fn)(const uint16_t*, int64_t, int64_t, float*);
    int64_t apart;
  };
  const Run runs[] = {{"1row", &Pattern<1>, 1},
                      {"2halves", &Pattern<2>, rows / 2},
                      {"2adjacent", &Pattern<2>, 1},
                      {"4quarters", &Pattern<4>, rows / 4},
                      {"4adjacent", &Pattern<4>, 1}};
  std::printf("one thread, [%lld, %lld] bf16 (%.0f MB), prefetch %s, median of %d (GB/s):\n",
              static_cast<long long>(rows), static_cast<long long>(kK), bytes / 1e6,
              g_ahead == 0 ? "none" : (std::to_string(g_ahead) + " B ahead, " + hint).c_str(),
              repeat);
  volatile float sink = 0.0f;
  std::vector<double> t(static_cast<size_t>(repeat));
  auto median_gbs = [&](auto&& pass) {
    for (int r = 0; r <= repeat; ++r) {  // r == 0 warms up
      const double t0 = Now();
      pass();
      if (r > 0) t[static_cast<size_t>(r - 1)] = Now() - t0;
    }
    std::sort(t.begin(), t.end());
    return static_cast<double>(bytes) / t[t.size() / 2] / 1e9;
  };
  std::printf("  %-10s %6.1f\n", "sum", median_gbs([&] { sink = sink + Sum(w, bytes); }));
  for (const Run& r : runs) {
    std::printf("  %-10s %6.1f\n", r.name, median_gbs([&] {
                  r.fn(w, rows, r.apart, out.data());
                  sink = sink + out[3];
                }));
  }
  return 0;
}

#else

int main() {
  std::fprintf(stderr, "stream_patterns: x86-64 with AVX-512 only\n");
  return 2;
}

#endif
