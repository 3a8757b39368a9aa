// Matmul kernels against the memory roofline (not a test). For each weight
// format: decode-shaped products (T = 1) over a weight matrix far larger than
// the last-level cache, reported as weight GB/s and as a fraction of the read
// bandwidth ops::MeasureReadBandwidth measures with the same threads; and
// prefill-shaped products (T = 512) in GFLOP/s. Every figure is the median of
// --repeat runs. Built on demand from any build tree:
//   cmake --build build/release --target matmul_bench
//   build/release/tests/ops/matmul_bench [THREADS] [DECODE_MB] [REPEAT] [FORMAT] [K] [decode]
// FORMAT "" runs every format; K (default 4096) is the row length; "decode"
// skips the prefill products ("decode:C": the decode product as consecutive
// calls of C MB each, one parallel region per call, as a model's decode runs
// its many small matrices), "prefill:T:N" runs only a prefill product of T
// tokens and N rows. DSV4_BENCH_X=f32 gives x full f32 mantissas (as
// DeepSeek-V4's wo_a and head see them) instead of bf16-exact values;
// DSV4_BENCH_X_OFFSET=F starts x F floats past a 64-byte boundary, in decode
// and prefill (a model's activations are 16-byte aligned).
// DSV4_BENCH_FP8_BLOCK=32 gives fp8_e4m3 weights 32×32 scale tiles (as
// DeepSeek-V4.1-Flash's dense weights) instead of 128×128.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/huge_page_buffer.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "ops/bandwidth.h"
#include "ops/matmul.h"
#include "ops/simd/simd_kernels.h"

namespace {

using dsv4::DType;
using dsv4::TensorView;

// The FP8 weights' scale tile (DSV4_BENCH_FP8_BLOCK): 128 or 32.
int64_t Fp8Block() {
  const char* env = std::getenv("DSV4_BENCH_FP8_BLOCK");
  return env != nullptr && std::string(env) == "32" ? 32 : 128;
}

// The weights on 2 MiB pages, as a model's mapped checkpoint is read
// (base/mapped_file.h): on 4 KiB pages the kernels' rates differ.
struct Weight {
  DType dtype;
  int64_t n, k;
  std::shared_ptr<dsv4::HugePageBuffer> mem;
  std::span<uint8_t> bytes;
  std::vector<uint8_t> scale;
  TensorView view() const { return TensorView::Contiguous(bytes.data(), dtype, {n, k}); }
  TensorView scale_view() const {
    if (dtype == DType::kFp8E4m3) {
      const int64_t b = Fp8Block();
      return TensorView::Contiguous(scale.data(), DType::kE8m0, {(n + b - 1) / b, (k + b - 1) / b});
    }
    return TensorView::Contiguous(scale.data(), DType::kE8m0, {n, k / 32});
  }
};

// Random codes with realistic spreads (no NaN codes), e8m0 scales near 2^-8.
Weight MakeWeight(DType dtype, int64_t n, int64_t k) {
  Weight w{dtype, n, k, {}, {}, {}};
  w.mem =
      std::make_shared<dsv4::HugePageBuffer>(static_cast<size_t>(dsv4::DTypeBytes(dtype, n * k)));
  w.bytes = w.mem->bytes();
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (auto& b : w.bytes) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    b = static_cast<uint8_t>(s >> 40);
  }
  if (dtype == DType::kFp8E4m3) {
    for (auto& b : w.bytes) b = (b & 0x7f) == 0x7f ? b & 0xbf : b;
  } else if (dtype == DType::kQ8_0) {
    for (int64_t i = 0; i < n * k / 32; ++i) {
      const uint16_t d = 0x2000;  // f16 2^-7
      std::memcpy(&w.bytes[i * 34], &d, 2);
    }
  } else if (dtype == DType::kQ4_K || dtype == DType::kQ6_K) {
    const int64_t block_bytes = dsv4::GetDTypeInfo(dtype).block_bytes;
    const int64_t d_at = dtype == DType::kQ4_K ? 0 : block_bytes - 2;  // q4_K: d, dmin first
    for (int64_t i = 0; i < n * k / 256; ++i) {
      const uint16_t d = 0x2000;  // f16 2^-7
      std::memcpy(&w.bytes[i * block_bytes + d_at], &d, 2);
      if (dtype == DType::kQ4_K) std::memcpy(&w.bytes[i * block_bytes + 2], &d, 2);
    }
  } else if (dsv4::IsGgmlQuant(dtype)) {
    // The legacy and other k-quant types (tensor/ggml_quants.h): f16 2^-7 in
    // the scale and min fields (byte offsets in the block; -1: none).
    int d_at = 0, m_at = -1;
    switch (dtype) {
      case DType::kQ4_1:
      case DType::kQ5_1:
      case DType::kQ5_K:
        m_at = 2;
        break;
      case DType::kQ2_K:
        d_at = 80, m_at = 82;
        break;
      case DType::kQ3_K:
        d_at = 108;
        break;
      default:
        break;
    }
    const int64_t block_bytes = dsv4::GetDTypeInfo(dtype).block_bytes;
    for (int64_t i = 0; i < dsv4::DTypeBytes(dtype, n * k) / block_bytes; ++i) {
      const uint16_t d = 0x2000;
      std::memcpy(&w.bytes[i * block_bytes + d_at], &d, 2);
      if (m_at >= 0) std::memcpy(&w.bytes[i * block_bytes + m_at], &d, 2);
    }
  } else if (dtype == DType::kF32) {
    float* f = reinterpret_cast<float*>(w.bytes.data());
    for (int64_t i = 0; i < n * k; ++i) f[i] = static_cast<float>(w.bytes[i * 4] % 17) * 0.01f;
  } else if (dtype == DType::kBF16) {
    for (size_t i = 1; i < w.bytes.size(); i += 2) w.bytes[i] = 0x3c;  // |w| ~ 1e-2
  } else if (dtype == DType::kF16) {
    for (size_t i = 1; i < w.bytes.size(); i += 2)
      w.bytes[i] = (w.bytes[i] & 0x83) | 0x20;  // ~1e-2
  }
  w.scale.assign(static_cast<size_t>(n * std::max<int64_t>(k / 32, 1)), 119);
  return w;
}

// Inputs as a DeepSeek-V4 FP8/FP4 linear sees them after its FP8 activation
// quantisation: e4m3 values (here multiples of 1/64 up to ±1.5), exactly bf16,
// so the bf16 dot-product kernels take them where the CPU has those.
// With DSV4_BENCH_X=f32 the inputs have full f32 mantissas instead (as
// DeepSeek-V4's wo_a and head see them): the bf16 dot-product kernels decline
// them and the f32-input kernels run.
std::vector<float> MakeX(int64_t n) {
  const char* kind = std::getenv("DSV4_BENCH_X");
  const bool f32 = kind != nullptr && std::string(kind) == "f32";
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i * 37) % 193 - 96) / 64.0f;
    if (f32) x[i] *= 1.0f + static_cast<float>(i % 1009) * 1.3e-5f;
  }
  return x;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median wall seconds of `repeat` runs; *cpu_secs: the median CPU seconds of
// the process over the same runs (on a loaded machine, the figure that says
// what the kernel costs rather than how much of the core it got).
// chunk_rows > 0: the product runs as consecutive calls of that many rows
// (one parallel region each), as a model's decode runs many small matrices.
double RunMedian(dsv4::ThreadPool& pool, const Weight& w, const float* x, std::vector<float>& out,
                 int64_t t, int repeat, double* cpu_secs = nullptr, int64_t chunk_rows = 0) {
  std::vector<double> secs, cpus;
  const int64_t step = chunk_rows > 0 ? chunk_rows : w.n;
  for (int r = 0; r <= repeat; ++r) {
    dsv4::Timer timer;
    const double cpu0 = CpuSeconds();
    for (int64_t r0 = 0; r0 < w.n; r0 += step) {
      const int64_t r1 = std::min(w.n, r0 + step);
      const TensorView v = w.view().Slice(r0, r1);
      float* o = out.data() + r0 * t;
      if (w.dtype == DType::kFp8E4m3) {
        // Scale rows follow the b-row blocks (chunks are multiples of 128).
        const int64_t b = Fp8Block();
        const TensorView s = w.scale_view().Slice(r0 / b, (r1 + b - 1) / b);
        dsv4::ops::MatMulFp8Block(pool, o, x, v, s, t, b);
      } else if (w.dtype == DType::kFp4E2m1) {
        dsv4::ops::MatMulFp4Block(pool, o, x, v, w.scale_view().Slice(r0, r1), t);
      } else {
        dsv4::ops::MatMul(pool, o, x, v, t);
      }
    }
    if (r > 0) {  // r == 0 warms up
      secs.push_back(timer.Seconds());
      cpus.push_back(CpuSeconds() - cpu0);
    }
  }
  std::sort(secs.begin(), secs.end());
  std::sort(cpus.begin(), cpus.end());
  if (cpu_secs != nullptr) *cpu_secs = cpus[cpus.size() / 2];
  return secs[secs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : dsv4::ThreadPool::DefaultThreads();
  const int64_t decode_mb = argc > 2 ? std::atoll(argv[2]) : 512;
  const int repeat = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string only = argc > 4 ? argv[4] : "";         // one format's name, e.g. fp8_e4m3
  const int64_t k = argc > 5 ? std::atoll(argv[5]) : 4096;  // inputs per row
  // "decode" or "decode:C": decode only, C = MB per call (default: one call).
  const bool decode_only = argc > 6 && std::string(argv[6]).rfind("decode", 0) == 0;
  double chunk_mb = 0;
  if (decode_only) std::sscanf(argv[6], "decode:%lf", &chunk_mb);
  // "prefill:T:N": the prefill product with T tokens and N rows instead of 512 × 4096.
  int64_t prefill_t = 512, prefill_n = 4096;
  const bool prefill_only = argc > 6 && std::string(argv[6]).rfind("prefill:", 0) == 0;
  if (prefill_only) {
    std::sscanf(argv[6], "prefill:%ld:%ld", &prefill_t, &prefill_n);
  }
  dsv4::ThreadPool pool(threads);
  // DSV4_BENCH_PROBES=0 skips the roofline probes (their columns then read 0):
  // for callers that only compare the products' rates.
  const char* probes_env = std::getenv("DSV4_BENCH_PROBES");
  const bool probes = probes_env == nullptr || std::string(probes_env) != "0";
  dsv4::ops::BandwidthResult bw;
  dsv4::ops::FlopsResult peak, dot_peak, int8_peak;
  if (probes) {
    bw = dsv4::ops::MeasureReadBandwidth(pool, int64_t{1} << 30, repeat);
    peak = dsv4::ops::MeasurePeakFlops(pool, int64_t{1} << 27, repeat);
    // FP8/FP4 prefill runs on bf16 dot products where the CPU has them (x
    // here is exactly bf16): measured against that roof.
    dot_peak = dsv4::ops::MeasurePeakBf16DotFlops(pool, int64_t{1} << 28, repeat);
    // The GGUF quant types' prefill (q8 activations) runs on int8 dot products.
    int8_peak = dsv4::ops::MeasurePeakInt8DotFlops(pool, int64_t{1} << 29, repeat);
  }
  std::printf(
      "target %s, %d threads, read bandwidth %.1f GB/s (1 GiB, median of %d), peak fp32 FMA "
      "%.1f GFLOP/s, peak bf16 dot %.1f GFLOP/s, peak int8 dot %.1f GOP/s\n",
      dsv4::ops::simd::ActiveTargetName(), threads, bw.gb_per_s, repeat, peak.gflops,
      dot_peak.gflops, int8_peak.gflops);
  for (DType dt :
       {DType::kF32,     DType::kBF16,   DType::kF16,     DType::kQ8_0,   DType::kFp8E4m3,
        DType::kFp4E2m1, DType::kQ4_K,   DType::kQ6_K,    DType::kQ4_0,   DType::kQ4_1,
        DType::kQ5_0,    DType::kQ5_1,   DType::kIQ4_NL,  DType::kQ2_K,   DType::kQ3_K,
        DType::kQ5_K,    DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S,
        DType::kIQ3_XXS, DType::kIQ3_S,  DType::kIQ1_S,   DType::kIQ1_M,  DType::kMXFP4}) {
    if (!only.empty() && only != dsv4::DTypeName(dt)) continue;
    // Decode: a [N, 4096] matrix of decode_mb MB.
    const int64_t row_bytes = dsv4::DTypeBytes(dt, k);
    const int64_t n = decode_mb * 1000000 / row_bytes / 128 * 128;
    if (!prefill_only) {
      const Weight w = MakeWeight(dt, n, k);
      // x at DSV4_BENCH_X_OFFSET floats past a 64-byte boundary (default 0).
      const char* off_env = std::getenv("DSV4_BENCH_X_OFFSET");
      const int64_t x_off =
          off_env != nullptr ? std::clamp<int64_t>(std::atoll(off_env), 0, 15) : 0;
      const std::vector<float> x0 = MakeX(k);
      std::vector<float> xbuf(static_cast<size_t>(k + 32)), out(n);
      float* x = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xbuf.data()) + 63) &
                                          ~uintptr_t{63}) +
                 x_off;
      std::copy(x0.begin(), x0.end(), x);
      double cpu = 0;
      const int64_t chunk_rows =
          chunk_mb > 0
              ? std::max<int64_t>(1, static_cast<int64_t>(chunk_mb * 1e6) / row_bytes / 128) * 128
              : 0;
      const double s = RunMedian(pool, w, x, out, 1, repeat, &cpu, chunk_rows);
      const double gbs = static_cast<double>(w.bytes.size()) / s / 1e9;
      std::printf(
          "decode  %-9s [%lld, %lld] T=1:   %8.3f ms  %6.1f GB/s  %5.1f%% of bandwidth  "
          "(%.1f GB/s per CPU-second)\n",
          std::string(dsv4::DTypeName(dt)).c_str(), static_cast<long long>(n),
          static_cast<long long>(k), s * 1e3, gbs, 100.0 * gbs / bw.gb_per_s,
          static_cast<double>(w.bytes.size()) / cpu / 1e9);
    }
    if (!decode_only) {
      const int64_t t = prefill_t, np = prefill_n;
      const Weight w = MakeWeight(dt, np, k);
      // x at DSV4_BENCH_X_OFFSET floats past a 64-byte boundary here too.
      const char* off_env = std::getenv("DSV4_BENCH_X_OFFSET");
      const int64_t x_off =
          off_env != nullptr ? std::clamp<int64_t>(std::atoll(off_env), 0, 15) : 0;
      const std::vector<float> x0 = MakeX(t * k);
      std::vector<float> xbuf(static_cast<size_t>(t * k + 32)), out(t * np);
      float* x = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xbuf.data()) + 63) &
                                          ~uintptr_t{63}) +
                 x_off;
      std::copy(x0.begin(), x0.end(), x);
      const double s = RunMedian(pool, w, x, out, t, std::max(1, repeat / 2));
      const double gflops = 2.0 * t * np * k / s / 1e9;
      const bool dot =
          dot_peak.gflops > 0 && k % 128 == 0 && (dt == DType::kFp8E4m3 || dt == DType::kFp4E2m1);
      const bool int8 =
          int8_peak.gflops > 0 &&
          (dt == DType::kQ4_K || dt == DType::kQ6_K ||
           (dsv4::IsGgmlQuant(dt) && dt != DType::kQ8_0) ||
           (dt == DType::kQ8_0 && dsv4::ops::simd::Q8_0Q8MatMulKernel() != nullptr)) &&
          dsv4::ops::GetKQuantActivations() == dsv4::ops::KQuantActivations::kQ8K;
      const double roof = int8 ? int8_peak.gflops : dot ? dot_peak.gflops : peak.gflops;
      std::printf(
          "prefill %-9s [%lld, %lld] T=%lld: %8.1f ms  %6.1f GFLOP/s  %5.1f%% of peak (%s)\n",
          std::string(dsv4::DTypeName(dt)).c_str(), static_cast<long long>(np),
          static_cast<long long>(k), static_cast<long long>(t), s * 1e3, gflops,
          100.0 * gflops / roof,
          int8  ? "int8 dot"
          : dot ? "bf16 dot"
                : "fp32 FMA");
    }
  }
  return 0;
}
