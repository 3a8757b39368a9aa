// Shared by the hand-written x86-64 kernels of ops/simd (bf16dot_x86.cc,
// fp8_f32_x86.cc, bf16_f32_x86.cc): the register barrier their weight loads go
// through, the CPU-feature check and the environment switch each kernel has.
#ifndef DSV4_OPS_SIMD_X86_UTIL_H_
#define DSV4_OPS_SIMD_X86_UTIL_H_

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace dsv4::ops::simd::x86 {

// Whether the environment variable `name` is "0": a kernel turned off (for
// comparisons).
inline bool TurnedOff(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, "0") == 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// Whether the CPU has AVX-512 F, BW, DQ and VL, the base every kernel here
// needs (they test their further features with __builtin_cpu_supports, which
// takes only literals).
inline bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// v as a value the compiler cannot trace back to memory: it would otherwise
// load a weight vector again for each instruction that overwrites a copy of
// it (vpermi2b its index, vpsrlw), and each extra load of a line still on its
// way from memory holds a load-queue entry until it lands.
__attribute__((target("avx512f"))) inline __m512i Opaque(__m512i v) {
  asm("" : "+v"(v));
  return v;
}

#endif

}  // namespace dsv4::ops::simd::x86

#endif  // DSV4_OPS_SIMD_X86_UTIL_H_
