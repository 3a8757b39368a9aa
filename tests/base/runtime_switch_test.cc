// RuntimeSwitch (base/runtime_switch.h): on unless its environment variable is
// "0", set by name through the registry, listed by name, gone from the
// registry once destroyed; StateSplit.
#include "base/runtime_switch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

bool Listed(const std::string& name) {
  const std::vector<std::string> names = RuntimeSwitchNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(RuntimeSwitch, EnvironmentSetsTheStart) {
  ::setenv("DSV4_TEST_SWITCH_A", "0", 1);
  ::setenv("DSV4_TEST_SWITCH_B", "1", 1);
  ::unsetenv("DSV4_TEST_SWITCH_C");
  const RuntimeSwitch a("DSV4_TEST_SWITCH_A"), b("DSV4_TEST_SWITCH_B"), c("DSV4_TEST_SWITCH_C");
  EXPECT_FALSE(a.on());
  EXPECT_TRUE(b.on());
  EXPECT_TRUE(c.on());
  ::unsetenv("DSV4_TEST_SWITCH_A");
  ::unsetenv("DSV4_TEST_SWITCH_B");
}

TEST(RuntimeSwitch, SetByNameListedAndUnregistered) {
  auto s = std::make_unique<RuntimeSwitch>("DSV4_TEST_SWITCH_D");
  EXPECT_TRUE(Listed("DSV4_TEST_SWITCH_D"));
  EXPECT_TRUE(SetRuntimeSwitch("DSV4_TEST_SWITCH_D", false));
  EXPECT_FALSE(s->on());
  EXPECT_TRUE(SetRuntimeSwitch("DSV4_TEST_SWITCH_D", true));
  EXPECT_TRUE(s->on());
  EXPECT_FALSE(SetRuntimeSwitch("DSV4_TEST_NO_SUCH_SWITCH", true));
  const std::vector<std::string> names = RuntimeSwitchNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  s.reset();
  EXPECT_FALSE(Listed("DSV4_TEST_SWITCH_D"));
  EXPECT_FALSE(SetRuntimeSwitch("DSV4_TEST_SWITCH_D", true));
}

// Two states: 20 values at 35 and 20 at 60 split at their middle; one state
// (within 25%) or nothing: 0.
TEST(RuntimeSwitch, StateSplitFindsTwoStates) {
  std::vector<double> two(20, 35.0);
  two.insert(two.end(), 20, 60.0);
  EXPECT_DOUBLE_EQ(StateSplit(two), 47.5);
  std::vector<double> one = {35.0, 36.0, 38.0, 40.0, 41.0, 42.0};
  EXPECT_EQ(StateSplit(one), 0.0);
  EXPECT_EQ(StateSplit({}), 0.0);
}

}  // namespace
}  // namespace dsv4
