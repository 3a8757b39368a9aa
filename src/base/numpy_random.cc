// numpy's SeedSequence, PCG64 and Generator.integers for int64 (see
// numpy_random.h): numpy/random/bit_generator.pyx (SeedSequence),
// src/pcg64/pcg64.h (PCG64), src/distributions/distributions.c and
// _bounded_integers.pyx.in (bounded draws, Lemire's method).
#include "base/numpy_random.h"

#include <array>

#include "base/check.h"

namespace dsv4 {
namespace {

constexpr int kPoolSize = 4;
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;

uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

std::array<uint32_t, kPoolSize> MixEntropy(std::span<const uint32_t> entropy) {
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = HashMix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0u, hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      pool[dst] = Mix(pool[dst], HashMix(entropy[src], hash_const));
    }
  }
  return pool;
}

constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

}  // namespace

std::vector<uint32_t> NumpySeedSequenceState(std::span<const uint32_t> entropy, int n_words) {
  const std::array<uint32_t, kPoolSize> pool = MixEntropy(entropy);
  std::vector<uint32_t> out(static_cast<size_t>(n_words));
  uint32_t hash_const = kInitB;
  for (int i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hash_const;
    hash_const *= kMultB;
    v *= hash_const;
    v ^= v >> kXShift;
    out[i] = v;
  }
  return out;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  *this = NumpyPcg64(std::span<const uint32_t>(words));
}

NumpyPcg64::NumpyPcg64(std::span<const uint32_t> entropy) {
  // generate_state(4, np.uint64): 8 words, pairs read little-endian; the
  // 128-bit seed is (w[0] high, w[1] low), the stream (w[2] high, w[3] low).
  const std::vector<uint32_t> s = NumpySeedSequenceState(entropy, 8);
  uint64_t w[4];
  for (int i = 0; i < 4; ++i) w[i] = s[2 * i] | (static_cast<uint64_t>(s[2 * i + 1]) << 32);
  const unsigned __int128 seed = (static_cast<unsigned __int128>(w[0]) << 64) | w[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(w[2]) << 64) | w[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += seed;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t NumpyPcg64::NextUint64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
  const uint64_t lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyPcg64::NextUint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t next = NextUint64();
  has_uint32_ = true;
  uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

std::vector<int64_t> NumpyPcg64::IntegersInt64(int64_t low, int64_t high, int64_t n) {
  CHECK(low < high, "IntegersInt64: low %lld >= high %lld", static_cast<long long>(low),
        static_cast<long long>(high));
  CHECK(n >= 0, "IntegersInt64: negative count");
  // rng: the inclusive range width, as numpy computes it (high is exclusive).
  const uint64_t rng = static_cast<uint64_t>(high - 1) - static_cast<uint64_t>(low);
  const uint64_t off = static_cast<uint64_t>(low);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& v : out) {
    uint64_t draw = 0;
    if (rng == 0) {
      draw = 0;
    } else if (rng <= 0xFFFFFFFFull) {
      if (rng == 0xFFFFFFFFull) {
        draw = NextUint32();
      } else {
        // buffered_bounded_lemire_uint32
        const uint32_t rng_excl = static_cast<uint32_t>(rng) + 1;
        uint64_t m = static_cast<uint64_t>(NextUint32()) * rng_excl;
        uint32_t leftover = static_cast<uint32_t>(m);
        if (leftover < rng_excl) {
          const uint32_t threshold = (UINT32_MAX - static_cast<uint32_t>(rng)) % rng_excl;
          while (leftover < threshold) {
            m = static_cast<uint64_t>(NextUint32()) * rng_excl;
            leftover = static_cast<uint32_t>(m);
          }
        }
        draw = m >> 32;
      }
    } else if (rng == UINT64_MAX) {
      draw = NextUint64();
    } else {
      // bounded_lemire_uint64
      const uint64_t rng_excl = rng + 1;
      unsigned __int128 m = static_cast<unsigned __int128>(NextUint64()) * rng_excl;
      uint64_t leftover = static_cast<uint64_t>(m);
      if (leftover < rng_excl) {
        const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
        while (leftover < threshold) {
          m = static_cast<unsigned __int128>(NextUint64()) * rng_excl;
          leftover = static_cast<uint64_t>(m);
        }
      }
      draw = static_cast<uint64_t>(m >> 64);
    }
    v = static_cast<int64_t>(off + draw);
  }
  return out;
}

}  // namespace dsv4
