// base/huge_page_buffer.h: the memory is 2 MiB-aligned, zero-filled,
// writable over its whole size, and distinct per buffer.
#include "base/huge_page_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dsv4 {
namespace {

TEST(HugePageBuffer, AlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{4096}, (size_t{3} << 20) + 5}) {
    HugePageBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20), 0u) << bytes;
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(b.bytes().size(), bytes);
    size_t nonzero = 0;
    for (uint8_t v : b.bytes()) nonzero += v != 0;
    EXPECT_EQ(nonzero, 0u) << bytes;
    b.data()[0] = 1;
    b.data()[bytes - 1] = 2;  // the last byte is ours
    EXPECT_EQ(b.bytes()[bytes - 1], 2);
  }
}

TEST(HugePageBuffer, BuffersDoNotOverlap) {
  HugePageBuffer a(size_t{1} << 20), b(size_t{1} << 20);
  EXPECT_TRUE(a.data() + a.size() <= b.data() || b.data() + b.size() <= a.data());
}

}  // namespace
}  // namespace dsv4
