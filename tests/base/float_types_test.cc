// Tests of base/float_types.h: every decode is compared bit for bit against
// the exhaustive tables that tools/goldens/dtype_tables.py made with ml_dtypes
// and numpy (tests/data/dtype/), and every encode against the library's
// rounding of a fixed set of ~7000 f32 inputs (ties, subnormals, overflow,
// NaN, inf, random bit patterns). NaN results compare by NaN-ness only.
#include "base/float_types.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

// Reads a whole little-endian table of T from tests/data/dtype/<name>.
template <typename T>
std::vector<T> ReadTable(const std::string& name) {
  const std::string path = std::string(DSV4_TEST_DATA_DIR) + "/dtype/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.size() % sizeof(T), 0u) << path;
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// Bit-exact, except that any NaN equals any NaN.
bool SameFloat(float got, uint32_t want_bits) {
  const float want = std::bit_cast<float>(want_bits);
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::bit_cast<uint32_t>(got) == want_bits;
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Compares decode(code) with table[code] for every code; reports the first few misses.
template <typename Decode>
void ExpectDecodeMatches(const char* what, const std::vector<uint32_t>& table, Decode decode) {
  int misses = 0;
  for (uint32_t code = 0; code < table.size(); ++code) {
    const float got = decode(code);
    if (!SameFloat(got, table[code])) {
      if (++misses <= 10) {
        ADD_FAILURE() << what << " code " << Hex(code) << ": got "
                      << Hex(std::bit_cast<uint32_t>(got)) << " (" << got << "), want "
                      << Hex(table[code]) << " (" << std::bit_cast<float>(table[code]) << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": decode disagrees with ml_dtypes on " << misses << " codes";
}

TEST(FloatTypesDecode, Bf16AllCodes) {
  const auto table = ReadTable<uint32_t>("bf16_to_f32.u32");
  ASSERT_EQ(table.size(), 65536u);
  ExpectDecodeMatches("bf16", table,
                      [](uint32_t c) { return Bf16ToF32(static_cast<uint16_t>(c)); });
}

TEST(FloatTypesDecode, F16AllCodes) {
  const auto table = ReadTable<uint32_t>("f16_to_f32.u32");
  ASSERT_EQ(table.size(), 65536u);
  ExpectDecodeMatches("f16", table, [](uint32_t c) { return F16ToF32(static_cast<uint16_t>(c)); });
}

TEST(FloatTypesDecode, Fp8E4m3AllCodes) {
  const auto table = ReadTable<uint32_t>("fp8_e4m3fn_to_f32.u32");
  ASSERT_EQ(table.size(), 256u);
  ExpectDecodeMatches("fp8_e4m3fn", table,
                      [](uint32_t c) { return Fp8E4m3ToF32(static_cast<uint8_t>(c)); });
}

TEST(FloatTypesDecode, E8m0AllCodes) {
  const auto table = ReadTable<uint32_t>("e8m0fnu_to_f32.u32");
  ASSERT_EQ(table.size(), 256u);
  ExpectDecodeMatches("e8m0fnu", table,
                      [](uint32_t c) { return E8m0ToF32(static_cast<uint8_t>(c)); });
}

TEST(FloatTypesDecode, Fp4E2m1AllCodes) {
  const auto table = ReadTable<uint32_t>("fp4_e2m1fn_to_f32.u32");
  ASSERT_EQ(table.size(), 16u);
  ExpectDecodeMatches("fp4_e2m1fn", table,
                      [](uint32_t c) { return Fp4E2m1ToF32(static_cast<uint8_t>(c)); });
}

// Spot checks of the format definitions, independent of the tables.
TEST(FloatTypesDecode, KnownValues) {
  EXPECT_EQ(Fp8E4m3ToF32(0x7e), 448.0f);                // max finite
  EXPECT_EQ(Fp8E4m3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(0xff)));
  EXPECT_EQ(E8m0ToF32(127), 1.0f);
  EXPECT_EQ(E8m0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8m0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8m0ToF32(255)));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Fp4E2m1ToF32(0x7), 6.0f);
  EXPECT_EQ(Fp4E2m1ToF32(0xf), -6.0f);
  EXPECT_TRUE(std::signbit(Fp4E2m1ToF32(0x8)));
}

struct EncodeCases {
  std::vector<uint32_t> inputs;
  std::vector<uint16_t> bf16, f16;
  std::vector<uint8_t> fp8, fp4;
};

const EncodeCases& Cases() {
  static const EncodeCases* cases = [] {
    auto* c = new EncodeCases;
    c->inputs = ReadTable<uint32_t>("encode_inputs_f32.u32");
    c->bf16 = ReadTable<uint16_t>("encode_bf16.u16");
    c->f16 = ReadTable<uint16_t>("encode_f16.u16");
    c->fp8 = ReadTable<uint8_t>("encode_fp8_e4m3fn.u8");
    c->fp4 = ReadTable<uint8_t>("encode_fp4_e2m1fn.u8");
    return c;
  }();
  return *cases;
}

TEST(FloatTypesEncode, TablesAreConsistent) {
  const EncodeCases& c = Cases();
  EXPECT_GT(c.inputs.size(), 5000u);
  EXPECT_EQ(c.bf16.size(), c.inputs.size());
  EXPECT_EQ(c.f16.size(), c.inputs.size());
  EXPECT_EQ(c.fp8.size(), c.inputs.size());
  EXPECT_EQ(c.fp4.size(), c.inputs.size());
}

// Compares encode(x) with the reference code for every input. Codes that decode
// to NaN match any NaN code (the payload is not part of the contract).
template <typename Code, typename Encode, typename Decode>
void ExpectEncodeMatches(const char* what, const std::vector<Code>& want, Encode encode,
                         Decode decode) {
  const EncodeCases& c = Cases();
  ASSERT_EQ(want.size(), c.inputs.size());
  int misses = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const float x = std::bit_cast<float>(c.inputs[i]);
    const Code got = encode(x);
    const bool both_nan = std::isnan(decode(got)) && std::isnan(decode(want[i]));
    if (got != want[i] && !both_nan) {
      if (++misses <= 10) {
        ADD_FAILURE() << what << " encode of " << Hex(c.inputs[i]) << " (" << x << "): got "
                      << Hex(got) << ", ml_dtypes " << Hex(want[i]);
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": encode disagrees with ml_dtypes on " << misses << " inputs";
}

TEST(FloatTypesEncode, Bf16) {
  ExpectEncodeMatches<uint16_t>("bf16", Cases().bf16, F32ToBf16, Bf16ToF32);
}

TEST(FloatTypesEncode, F16) {
  ExpectEncodeMatches<uint16_t>("f16", Cases().f16, F32ToF16, F16ToF32);
}

TEST(FloatTypesEncode, Fp8E4m3) {
  ExpectEncodeMatches<uint8_t>("fp8_e4m3fn", Cases().fp8, F32ToFp8E4m3, Fp8E4m3ToF32);
}

TEST(FloatTypesEncode, Fp4E2m1) {
  // fp4 has no NaN code, so this compares every input exactly, NaN inputs included.
  ExpectEncodeMatches<uint8_t>("fp4_e2m1fn", Cases().fp4, F32ToFp4E2m1,
                               [](uint8_t) { return 0.0f; });
}

// Round trip: every finite code survives decode then encode unchanged.
TEST(FloatTypesEncode, RoundTripEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    if (!std::isnan(Bf16ToF32(h))) {
      EXPECT_EQ(F32ToBf16(Bf16ToF32(h)), h) << Hex(c);
    }
    if (!std::isnan(F16ToF32(h))) {
      EXPECT_EQ(F32ToF16(F16ToF32(h)), h) << Hex(c);
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (!std::isnan(Fp8E4m3ToF32(b))) {
      EXPECT_EQ(F32ToFp8E4m3(Fp8E4m3ToF32(b)), b) << Hex(c);
    }
  }
  for (uint8_t n = 0; n < 16; ++n) EXPECT_EQ(F32ToFp4E2m1(Fp4E2m1ToF32(n)), n) << int(n);
}

// The overflow rules named in float_types.h, spelled out.
TEST(FloatTypesEncode, Fp8OverflowRule) {
  EXPECT_EQ(F32ToFp8E4m3(448.0f), 0x7e);
  EXPECT_EQ(F32ToFp8E4m3(464.0f), 0x7e);  // the tie rounds to even (448)
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(std::nextafter(464.0f, 1e9f)))));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(480.0f))));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(-500.0f))));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(INFINITY))));
  EXPECT_EQ(F32ToFp4E2m1(100.0f), 0x7);  // fp4 saturates
  EXPECT_EQ(F32ToFp4E2m1(-INFINITY), 0xf);
  EXPECT_EQ(F32ToFp4E2m1(NAN), 0x8);  // ml_dtypes' NaN stand-in (-0)
  EXPECT_EQ(F32ToFp4E2m1(-NAN), 0x0);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // f16 overflows to inf
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
}

}  // namespace
}  // namespace dsv4
