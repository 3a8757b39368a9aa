// NumpyPcg64 against numpy 2.4.6 (tests/data/deepseek_v41/engram/engram_goldens.json,
// made by tools/reference/make_engram_goldens.py): PCG64.random_raw and
// Generator.integers(0, high, dtype=np.int64) over the 32-bit buffered and the
// 64-bit Lemire paths, for seeds of one, two and three 32-bit words.
#include "base/numpy_random.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"

namespace dsv4 {
namespace {

using Json = nlohmann::json;

Json Goldens() {
  std::ifstream in(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/engram/engram_goldens.json");
  CHECK(in.good(), "engram_goldens.json missing");
  return Json::parse(in);
}

// A decimal string as 32-bit words, least significant first (Python int -> SeedSequence).
std::vector<uint32_t> Words(const std::string& decimal) {
  std::vector<uint32_t> dec;  // decimal digits, most significant first
  for (char c : decimal) dec.push_back(static_cast<uint32_t>(c - '0'));
  std::vector<uint32_t> words;
  while (!(dec.size() == 1 && dec[0] == 0) && !dec.empty()) {
    // dec /= 2^32, remainder -> words
    std::vector<uint32_t> q;
    uint64_t rem = 0;
    for (uint32_t d : dec) {
      rem = rem * 10 + d;
      const uint64_t qd = rem >> 32;
      if (!q.empty() || qd != 0) q.push_back(static_cast<uint32_t>(qd));
      rem &= 0xFFFFFFFFull;
    }
    words.push_back(static_cast<uint32_t>(rem));
    if (q.empty()) q.push_back(0);
    dec = std::move(q);
  }
  if (words.empty()) words.push_back(0);
  return words;
}

TEST(NumpyPcg64, SeedWords) {
  EXPECT_EQ(Words("0"), (std::vector<uint32_t>{0}));
  EXPECT_EQ(Words("4294967301"), (std::vector<uint32_t>{5, 1}));
  EXPECT_EQ(Words("18446744073709551617"), (std::vector<uint32_t>{1, 0, 1}));
}

TEST(NumpyPcg64, RawOutputsMatchNumpy) {
  const Json g = Goldens();
  ASSERT_FALSE(g["rng_raw"].empty());
  for (const Json& c : g["rng_raw"]) {
    const std::vector<uint32_t> words = Words(c["seed"].get<std::string>());
    NumpyPcg64 rng{std::span<const uint32_t>(words)};
    int i = 0;
    for (const Json& v : c["values"]) {
      EXPECT_EQ(rng.NextUint64(), std::stoull(v.get<std::string>()))
          << "seed " << c["seed"] << " draw " << i;
      ++i;
    }
  }
}

TEST(NumpyPcg64, IntegersInt64MatchNumpy) {
  const Json g = Goldens();
  ASSERT_GE(g["rng_integers"].size(), 10u);
  int checked = 0;
  for (const Json& c : g["rng_integers"]) {
    const std::vector<uint32_t> words = Words(c["seed"].get<std::string>());
    NumpyPcg64 rng{std::span<const uint32_t>(words)};
    const int64_t high = c["high"].get<int64_t>();
    std::vector<int64_t> got = rng.IntegersInt64(0, high, 17);
    const std::vector<int64_t> more = rng.IntegersInt64(0, high, 4);
    got.insert(got.end(), more.begin(), more.end());
    const std::vector<int64_t> want = c["values"].get<std::vector<int64_t>>();
    EXPECT_EQ(got, want) << "seed " << c["seed"] << " high " << high;
    checked += static_cast<int>(want.size());
  }
  EXPECT_GE(checked, 200);
}

TEST(NumpyPcg64, SmallSeedConstructorEqualsWords) {
  NumpyPcg64 a(10007ull * 14);
  const uint32_t w[] = {10007u * 14};
  NumpyPcg64 b{std::span<const uint32_t>(w)};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.NextUint64(), b.NextUint64());
  NumpyPcg64 big((1ull << 32) + 5);
  const uint32_t w2[] = {5, 1};
  NumpyPcg64 big2{std::span<const uint32_t>(w2)};
  EXPECT_EQ(big.NextUint64(), big2.NextUint64());
}

}  // namespace
}  // namespace dsv4
