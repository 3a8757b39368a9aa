// ForEachTarget: runs a test body once per SIMD target compiled in and
// supported by this CPU, with the Highway dispatcher forced to that target
// (the SIMD-vs-scalar-twin tests of tests/ops).
#ifndef DSV4_TESTS_COMMON_FOR_EACH_TARGET_H_
#define DSV4_TESTS_COMMON_FOR_EACH_TARGET_H_

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cstdint>
#include <vector>

#include "ops/simd/simd_kernels.h"

namespace dsv4::testing {

// Runs body() once per compiled and supported target, with the dispatcher
// forced to that target; fails if dispatch did not follow.
template <class Body>
void ForEachTarget(Body body) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ASSERT_STREQ(ops::simd::ActiveTargetName(), hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_COMMON_FOR_EACH_TARGET_H_
