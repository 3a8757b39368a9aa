// MXFP4 (DequantizeRow, tensor/ggml_quants.h) against gguf-py's MXFP4 dequantisation
// (tests/data/dtype/mxfp4_*, tools/goldens/mxfp4_blocks.py), and the repack to
// dsv4's FP4 layout against the dequantised values.
#include "ops/ref/mxfp4_ref.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "tensor/dtype.h"

namespace dsv4::ops::ref {
namespace {

std::vector<uint8_t> ReadBytes(const std::string& name) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/dtype/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Mxfp4, DequantizeMatchesGgufPyUpToTheSignOfZero) {
  const std::vector<uint8_t> blocks = ReadBytes("mxfp4_blocks.u8");
  const std::vector<uint8_t> want_bytes = ReadBytes("mxfp4_dequant.u32");
  ASSERT_EQ(blocks.size() % kMxfp4BlockBytes, 0u);
  const int64_t n = static_cast<int64_t>(blocks.size() / kMxfp4BlockBytes) * kMxfp4BlockElems;
  ASSERT_EQ(want_bytes.size(), static_cast<size_t>(4 * n));
  std::vector<float> got(n);
  DequantizeRow(DType::kMXFP4, blocks.data(), n, got.data());
  for (int64_t i = 0; i < n; ++i) {
    uint32_t want;
    std::memcpy(&want, want_bytes.data() + 4 * i, 4);
    // Code 8 is −0 in e2m1 (and to dsv4); ggml's value table has +0 there.
    // Every other value agrees bit for bit (±inf included).
    const bool same = got[i] == 0.0f ? std::bit_cast<float>(want) == 0.0f
                                     : std::bit_cast<uint32_t>(got[i]) == want;
    EXPECT_TRUE(same) << "value " << i << " (block " << i / 32 << "): " << got[i] << " vs "
                      << std::bit_cast<float>(want);
  }
}

TEST(Mxfp4, RepackKeepsEveryValue) {
  const std::vector<uint8_t> blocks = ReadBytes("mxfp4_blocks.u8");
  const int64_t n = static_cast<int64_t>(blocks.size() / kMxfp4BlockBytes) * kMxfp4BlockElems;
  std::vector<float> want(n);
  DequantizeRow(DType::kMXFP4, blocks.data(), n, want.data());
  std::vector<uint8_t> codes(n / 2), scales(n / 32);
  RepackMxfp4Row(blocks.data(), n, codes.data(), scales.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = i % 2 == 0 ? codes[i / 2] & 0xf : codes[i / 2] >> 4;
    const float got = Fp4E2m1ToF32(code) * E8m0ToF32(scales[i / 32]);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[i])) << "value " << i;
  }
}

TEST(Mxfp4, ElementOrderInsideABlock) {
  // Byte j holds element j (low) and j + 16 (high): code 2 (1.0) at element 0,
  // code 4 (2.0) at element 16, the rest 0; scale 2^0.
  uint8_t block[kMxfp4BlockBytes] = {127, 0x42};
  float v[32];
  DequantizeRow(DType::kMXFP4, block, 32, v);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[16], 2.0f);
  EXPECT_EQ(v[1], 0.0f);
  uint8_t codes[16], scales[1];
  RepackMxfp4Row(block, 32, codes, scales);
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(codes[0], 0x02);  // elements 0 (low) and 1 (high)
  EXPECT_EQ(codes[8], 0x04);  // elements 16 and 17
}

}  // namespace
}  // namespace dsv4::ops::ref
