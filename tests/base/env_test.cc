// base/env.h: every variable read as documented. Each accessor reads its
// variable once per process, so one test sets them all before the first read.
#include "base/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace dsv4 {
namespace {

TEST(Env, ReadsEveryVariable) {
  ::setenv("DSV4_SPIN_US", "17", 1);
  ::setenv("DSV4_THP", "0", 1);
  ::setenv("DSV4_THP_REFRESH", "", 1);  // empty: as unset
  ::setenv("DSV4_KERNELS", "portable", 1);
  ::setenv("DSV4_POOL_TRACE_FILE", "/tmp/trace.csv", 1);
  EXPECT_EQ(env::SpinMicros(200), 17);
  EXPECT_FALSE(env::HugePageAdvice());
  EXPECT_TRUE(env::PageCacheRefresh());
  EXPECT_TRUE(env::PortableKernelsOnly());
  ASSERT_NE(env::PoolTraceFile(), nullptr);
  EXPECT_EQ(std::string(env::PoolTraceFile()), "/tmp/trace.csv");
  // Read once: later changes are not seen.
  ::setenv("DSV4_SPIN_US", "5", 1);
  ::unsetenv("DSV4_KERNELS");
  EXPECT_EQ(env::SpinMicros(200), 17);
  EXPECT_TRUE(env::PortableKernelsOnly());
}

}  // namespace
}  // namespace dsv4
