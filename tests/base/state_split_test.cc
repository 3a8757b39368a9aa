// bench::StateSplit (bench/state_split.h), which the benchmarks' two-state
// reports rely on.
#include "bench/state_split.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsv4::bench {
namespace {

// Two states: 20 values at 35 and 20 at 60 split at their middle; one state
// (within 25%) or nothing: 0.
TEST(StateSplit, FindsTwoStates) {
  std::vector<double> two(20, 35.0);
  two.insert(two.end(), 20, 60.0);
  EXPECT_DOUBLE_EQ(StateSplit(two), 47.5);
  std::vector<double> one = {35.0, 36.0, 38.0, 40.0, 41.0, 42.0};
  EXPECT_EQ(StateSplit(one), 0.0);
  EXPECT_EQ(StateSplit({}), 0.0);
}

}  // namespace
}  // namespace dsv4::bench
