// Tests of tensor/dtype.h: the dtype table (names, block sizes, byte counts)
// and DequantizeRow, which must reproduce the ml_dtypes/numpy decode tables in
// tests/data/dtype/ bit for bit for every code (NaN by NaN-ness), unpack fp4
// low nibble first, and decode hand-built GGUF q8_0 blocks.
#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

// Reads a little-endian table of T from tests/data/dtype/<name>.
template <typename T>
std::vector<T> ReadTable(const std::string& name) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/dtype/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

float TableValue(const std::vector<uint32_t>& table, uint32_t code) {
  return std::bit_cast<float>(table.at(code));
}

// got[i] must equal want[i] bit for bit, or both be NaN.
void ExpectSameFloats(const char* what, const std::vector<float>& got,
                      const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) ||
                      std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]);
    if (!same && ++misses <= 10) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " elements differ";
}

// ---- the dtype table ----

TEST(DTypeTest, NamesAreUniqueAndRoundTrip) {
  std::set<std::string_view> names;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const DType t = static_cast<DType>(i);
    const std::string_view name = DTypeName(t);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    const std::optional<DType> back = DTypeFromName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(DTypeFromName("float99").has_value());
  EXPECT_FALSE(DTypeFromName("").has_value());
  EXPECT_FALSE(DTypeFromName("F32").has_value());  // names are lower case
}

TEST(DTypeTest, BlockSizesAndBytes) {
  EXPECT_EQ(DTypeBytes(DType::kF32, 10), 40);
  EXPECT_EQ(DTypeBytes(DType::kF16, 3), 6);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 3), 6);
  EXPECT_EQ(DTypeBytes(DType::kFp8E4m3, 7), 7);
  EXPECT_EQ(DTypeBytes(DType::kE8m0, 5), 5);
  EXPECT_EQ(DTypeBytes(DType::kI8, 9), 9);
  EXPECT_EQ(DTypeBytes(DType::kI32, 2), 8);
  EXPECT_EQ(DTypeBytes(DType::kI64, 2), 16);
  EXPECT_EQ(DTypeBytes(DType::kFp4E2m1, 64), 32);  // two per byte
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68);     // 2 blocks of 2 + 32 bytes
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 0), 0);
  EXPECT_TRUE(IsBlockDType(DType::kFp4E2m1));
  EXPECT_TRUE(IsBlockDType(DType::kQ8_0));
  EXPECT_FALSE(IsBlockDType(DType::kF32));
  EXPECT_FALSE(IsBlockDType(DType::kFp8E4m3));
  EXPECT_EQ(GetDTypeInfo(DType::kQ8_0).block_elems, 32);
  EXPECT_EQ(GetDTypeInfo(DType::kQ8_0).block_bytes, static_cast<int>(sizeof(BlockQ8_0)));
}

// ---- DequantizeRow against the exhaustive tables ----

TEST(DequantizeRowTest, Bf16EveryCode) {
  const auto table = ReadTable<uint32_t>("bf16_to_f32.u32");
  ASSERT_EQ(table.size(), 65536u);
  std::vector<uint8_t> src(2 * 65536);
  for (uint32_t c = 0; c < 65536; ++c) {  // little-endian u16 codes
    src[2 * c] = c & 0xff;
    src[2 * c + 1] = c >> 8;
  }
  std::vector<float> got(65536), want(65536);
  DequantizeRow(DType::kBF16, src.data(), 65536, got.data());
  for (uint32_t c = 0; c < 65536; ++c) want[c] = TableValue(table, c);
  ExpectSameFloats("bf16", got, want);
}

TEST(DequantizeRowTest, F16EveryCode) {
  const auto table = ReadTable<uint32_t>("f16_to_f32.u32");
  ASSERT_EQ(table.size(), 65536u);
  std::vector<uint8_t> src(2 * 65536);
  for (uint32_t c = 0; c < 65536; ++c) {
    src[2 * c] = c & 0xff;
    src[2 * c + 1] = c >> 8;
  }
  std::vector<float> got(65536), want(65536);
  DequantizeRow(DType::kF16, src.data(), 65536, got.data());
  for (uint32_t c = 0; c < 65536; ++c) want[c] = TableValue(table, c);
  ExpectSameFloats("f16", got, want);
}

TEST(DequantizeRowTest, UnalignedSource) {
  const auto table = ReadTable<uint32_t>("bf16_to_f32.u32");
  ASSERT_EQ(table.size(), 65536u);
  // Codes 0x3f80, 0xc0a0, 0x0001 starting at an odd address.
  const uint8_t src[7] = {0xee, 0x80, 0x3f, 0xa0, 0xc0, 0x01, 0x00};
  std::vector<float> got(3);
  DequantizeRow(DType::kBF16, src + 1, 3, got.data());
  ExpectSameFloats(
      "bf16 unaligned", got,
      {TableValue(table, 0x3f80), TableValue(table, 0xc0a0), TableValue(table, 0x0001)});
}

TEST(DequantizeRowTest, Fp8E4m3EveryCode) {
  const auto table = ReadTable<uint32_t>("fp8_e4m3fn_to_f32.u32");
  ASSERT_EQ(table.size(), 256u);
  std::vector<uint8_t> src(256);
  for (int c = 0; c < 256; ++c) src[c] = static_cast<uint8_t>(c);
  std::vector<float> got(256), want(256);
  DequantizeRow(DType::kFp8E4m3, src.data(), 256, got.data());
  for (int c = 0; c < 256; ++c) want[c] = TableValue(table, c);
  ExpectSameFloats("fp8_e4m3fn", got, want);
}

TEST(DequantizeRowTest, E8m0EveryCode) {
  const auto table = ReadTable<uint32_t>("e8m0fnu_to_f32.u32");
  ASSERT_EQ(table.size(), 256u);
  std::vector<uint8_t> src(256);
  for (int c = 0; c < 256; ++c) src[c] = static_cast<uint8_t>(c);
  std::vector<float> got(256), want(256);
  DequantizeRow(DType::kE8m0, src.data(), 256, got.data());
  for (int c = 0; c < 256; ++c) want[c] = TableValue(table, c);
  ExpectSameFloats("e8m0fnu", got, want);
}

TEST(DequantizeRowTest, Fp4EveryBytePackedLowNibbleFirst) {
  const auto table = ReadTable<uint32_t>("fp4_e2m1fn_to_f32.u32");
  ASSERT_EQ(table.size(), 16u);
  std::vector<uint8_t> src(256);
  for (int b = 0; b < 256; ++b) src[b] = static_cast<uint8_t>(b);
  std::vector<float> got(512), want(512);
  DequantizeRow(DType::kFp4E2m1, src.data(), 512, got.data());
  for (int b = 0; b < 256; ++b) {
    want[2 * b] = TableValue(table, b & 0xf);  // element 2i: low nibble
    want[2 * b + 1] = TableValue(table, b >> 4);
  }
  ExpectSameFloats("fp4_e2m1fn", got, want);
}

TEST(DequantizeRowTest, Fp4HandBuiltBytes) {
  // 0x72: low nibble 2 (1.0) first, then high nibble 7 (6.0); 0x9f: -6.0 then -0.5.
  const uint8_t src[2] = {0x72, 0x9f};
  float got[4];
  DequantizeRow(DType::kFp4E2m1, src, 4, got);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 6.0f);
  EXPECT_EQ(got[2], -6.0f);
  EXPECT_EQ(got[3], -0.5f);
}

// GGUF q8_0: per block a little-endian f16 scale d, then 32 signed bytes q; value = d * q.
TEST(DequantizeRowTest, Q8_0HandBuiltBlocks) {
  const auto f16 = ReadTable<uint32_t>("f16_to_f32.u32");
  ASSERT_EQ(f16.size(), 65536u);
  const uint16_t scales[4] = {0x3c00 /* 1.0 */, 0x2e66 /* ~0.1 */, 0xbc00 /* -1.0 */,
                              0x0001 /* 2^-24, subnormal */};
  std::vector<uint8_t> src;
  std::vector<float> want;
  for (int b = 0; b < 4; ++b) {
    src.push_back(scales[b] & 0xff);
    src.push_back(scales[b] >> 8);
    const float d = TableValue(f16, scales[b]);
    for (int j = 0; j < 32; ++j) {
      // Block 0 holds -128, 127, 0 and a ramp; the others a spread over [-128, 127].
      int q = (j * 37 + b * 11) % 256 - 128;
      if (b == 0) q = j == 0 ? -128 : j == 1 ? 127 : j == 2 ? 0 : j * 8 - 128;
      src.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
      want.push_back(d * static_cast<float>(q));
    }
  }
  ASSERT_EQ(src.size(), 4 * 34u);
  std::vector<float> got(128);
  DequantizeRow(DType::kQ8_0, src.data(), 128, got.data());
  ExpectSameFloats("q8_0", got, want);
  EXPECT_EQ(got[0], -128.0f);
  EXPECT_EQ(got[1], 127.0f);
  EXPECT_EQ(got[2], 0.0f);
}

TEST(DequantizeRowTest, PlainIntegerAndF32) {
  const int8_t i8[4] = {-128, -1, 0, 127};
  float got[4];
  DequantizeRow(DType::kI8, i8, 4, got);
  EXPECT_EQ(got[0], -128.0f);
  EXPECT_EQ(got[1], -1.0f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 127.0f);

  const int32_t i32[3] = {-7, 0, 1 << 20};
  DequantizeRow(DType::kI32, i32, 3, got);
  EXPECT_EQ(got[0], -7.0f);
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_EQ(got[2], 1048576.0f);

  const int64_t i64[2] = {-3, int64_t{1} << 40};
  DequantizeRow(DType::kI64, i64, 2, got);
  EXPECT_EQ(got[0], -3.0f);
  EXPECT_EQ(got[1], 1099511627776.0f);

  const float f32[3] = {1.5f, -0.0f, 3e38f};
  DequantizeRow(DType::kF32, f32, 3, got);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(f32[i]));
}

TEST(DequantizeRowTest, ZeroElementsWritesNothing) {
  float dst[2] = {123.0f, 456.0f};
  const uint8_t src[1] = {0};
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    DequantizeRow(static_cast<DType>(i), src, 0, dst);
  }
  EXPECT_EQ(dst[0], 123.0f);
  EXPECT_EQ(dst[1], 456.0f);
}

}  // namespace
}  // namespace dsv4
