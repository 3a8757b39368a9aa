// AlignedVector<T>: a std::vector whose storage starts on a 64-byte boundary
// (a cache line, one AVX-512 vector). For activations the SIMD kernels read
// whole vectors at a time: malloc's 16-byte alignment would have every
// 64-byte load of a row straddle two cache lines, which slows the products
// measurably (`DSV4_BENCH_X_OFFSET=4 matmul_bench 1 8 5 f16 2048
// prefill:128:5632` shows it).
#ifndef DSV4_BASE_ALIGNED_VECTOR_H_
#define DSV4_BASE_ALIGNED_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace dsv4 {

inline constexpr std::size_t kCacheLineBytes = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {
  }  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLineBytes});
  }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace dsv4

#endif  // DSV4_BASE_ALIGNED_VECTOR_H_
