// NumpyPcg64: numpy's default generator, `np.random.default_rng(seed)`, bit for
// bit — SeedSequence (entropy = the seed's 32-bit words) -> PCG64 (XSL-RR over
// a 128-bit LCG) -> Generator.integers(low, high, dtype=np.int64). Exists so
// that values a reference computes with numpy at model build time (Engram's
// hash multipliers, model/deepseek_v4/engram.h) can be recomputed here instead
// of being shipped. numpy 2.x (its SeedSequence, PCG64 and bounded-integer
// code have been stable since 1.17).
#ifndef DSV4_BASE_NUMPY_RANDOM_H_
#define DSV4_BASE_NUMPY_RANDOM_H_

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4 {

class NumpyPcg64 {
 public:
  // np.random.default_rng(seed) for a non-negative integer seed.
  explicit NumpyPcg64(uint64_t seed);
  // A seed of any size, as its 32-bit words, least significant first (what
  // SeedSequence makes of a Python int; {0} for the seed 0).
  explicit NumpyPcg64(std::span<const uint32_t> entropy);

  // The next raw 64-bit output (PCG64.random_raw).
  uint64_t NextUint64();
  // The next 32 bits: the low half of a fresh 64-bit output, then its high
  // half (numpy buffers the other half in the generator).
  uint32_t NextUint32();

  // Generator.integers(low, high, size=n, dtype=np.int64): n draws from
  // [low, high). Requires low < high (numpy raises otherwise).
  std::vector<int64_t> IntegersInt64(int64_t low, int64_t high, int64_t n);

 private:
  unsigned __int128 state_ = 0;
  unsigned __int128 inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uint32_ = 0;
};

// SeedSequence(entropy).generate_state(n_words, np.uint32), exposed for tests.
std::vector<uint32_t> NumpySeedSequenceState(std::span<const uint32_t> entropy, int n_words);

}  // namespace dsv4

#endif  // DSV4_BASE_NUMPY_RANDOM_H_
