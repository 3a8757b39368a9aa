// The environment variables dsv4 reads: all of them, here, each once per
// process (the first call reads it; later calls return that value). They are
// for the user of a shared or unusual machine and for diagnostics; the
// defaults are the fast paths. docs/performance.md lists them.
//
//   DSV4_SPIN_US          microseconds a pool thread spins for work before it
//                         sleeps (base/thread_pool.h); default 200, 0 = sleep
//                         at once.
//   DSV4_THP              "0": weights are not mapped with MADV_HUGEPAGE, and
//                         the page-cache refresh below is off
//                         (base/mapped_file.cc).
//   DSV4_THP_REFRESH      "0": a model file cached in small pages is left so
//                         (base/page_cache.h).
//   DSV4_KERNELS          "portable": the hand-written x86-64 kernels of
//                         ops/simd (*_x86.cc) are off; every product takes the
//                         Highway kernels or the scalar ops/ref ones, as on a
//                         CPU without AVX-512. Unset, "" or "native": the
//                         fastest kernels the CPU has.
//   DSV4_POOL_TRACE_FILE  in a -DDSV4_POOL_TRACE=ON build, the file the pool
//                         writes its trace to (base/thread_pool.cc).
#ifndef DSV4_BASE_ENV_H_
#define DSV4_BASE_ENV_H_

#include <cstdint>

namespace dsv4::env {

// DSV4_SPIN_US as a non-negative integer; `fallback` when unset, empty or not
// one.
int64_t SpinMicros(int64_t fallback);
// DSV4_THP is not "0".
bool HugePageAdvice();
// DSV4_THP_REFRESH is not "0".
bool PageCacheRefresh();
// DSV4_KERNELS is "portable" (any value but "", "native" and "portable" is
// reported once as a warning and read as "native").
bool PortableKernelsOnly();
// DSV4_POOL_TRACE_FILE; nullptr when unset or empty.
const char* PoolTraceFile();

}  // namespace dsv4::env

#endif  // DSV4_BASE_ENV_H_
