// Hash64: a fast 64-bit non-cryptographic hash of a byte string, the same on
// every run and machine (little-endian words). For checksums of the files
// dsv4 writes and for content addresses; not for anything an adversary may
// choose to collide (callers compare the content itself where that matters).
#ifndef DSV4_BASE_HASH_H_
#define DSV4_BASE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dsv4 {

uint64_t Hash64(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t Hash64(std::string_view s, uint64_t seed = 0) {
  return Hash64(s.data(), s.size(), seed);
}

// Running Hash64 over several pieces: Update(a); Update(b) hashes differently
// from Update(ab) (each piece's length is mixed in), so fields cannot shift
// into each other.
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0) : h_(seed) {}
  Hasher& Update(const void* data, size_t n) {
    h_ = Hash64(data, n, h_ ^ (n * 0x9e3779b97f4a7c15ull));
    return *this;
  }
  Hasher& Update(std::string_view s) { return Update(s.data(), s.size()); }
  template <typename T>
  Hasher& UpdatePod(const T& v) {
    return Update(&v, sizeof(v));
  }
  uint64_t digest() const { return h_; }

 private:
  uint64_t h_;
};

}  // namespace dsv4

#endif  // DSV4_BASE_HASH_H_
