// The seed family's decode loop does no heap allocation: this binary replaces
// the global operator new/delete with counting versions (tests/common/alloc_counter.cc) (the
// approach of tests/engine/llama_alloc_test.cc) and checks that SeedModel::Forward for one token
// allocates nothing once warm, for every profile of tests/data/seed (P-V4: CSA + HCA + capacity
// routing; P-CED: CED blocks, both layouts, both dispatch paths; P-V4-7B: segmented RoPE,
// TaskAdapter, MoE and the SemanticKVPruner evicting every step), with one thread and with a pool
// of two. Scratch lives in the model (grow-only) and in the cache (sized by NewCache).
// DSV4_ALLOC_TRAP=1 aborts at the first allocation inside the measured window
// (run under gdb for the backtrace).
#include <gtest/gtest.h>

#include "../common/alloc_counter.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "model/seed/model.h"

namespace dsv4::seed {
namespace {

int64_t Allocations() { return ::dsv4::testing::AllocationCount(); }

TEST(SeedAlloc, CounterSeesAllocations) {
  const int64_t before = Allocations();
  void* p = ::operator new(64);  // an explicit call: never elided
  const int64_t after = Allocations();
  ::operator delete(p);
  EXPECT_EQ(after - before, 1);
}

struct Case {
  std::string profile;
  int threads;
  CedDispatch dispatch;
};

class SeedAllocTest : public ::testing::TestWithParam<Case> {};

TEST_P(SeedAllocTest, DecodeForwardAllocatesNothingAfterWarmUp) {
  const Case& c = GetParam();
  auto loaded = LoadSeedModel(std::string(DSV4_TEST_DATA_DIR) + "/seed/" + c.profile, c.threads);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto& model = dynamic_cast<SeedModel&>(**loaded);
  SeedRuntimeOptions o;
  o.ced_dispatch = c.dispatch;
  model.SetRuntimeOptions(o);
  const int64_t max_tokens = std::min<int64_t>(64, model.info().max_context);
  auto cache = model.NewCache(max_tokens);
  std::vector<float> logits(model.info().vocab_size);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 383, 432, 410, 317};
  ASSERT_TRUE(model.Forward(prompt, *cache, logits, false).ok());
  int32_t next = 1;
  for (int i = 0; i < 2; ++i) {  // warm-up: the decode-sized scratch
    const int32_t one[1] = {next};
    ASSERT_TRUE(model.Forward(one, *cache, logits, false).ok());
  }
  const int64_t steps = max_tokens - static_cast<int64_t>(prompt.size()) - 2;
  ASSERT_GT(steps, 16);
  const char* trap = std::getenv("DSV4_ALLOC_TRAP");
  const int64_t before = Allocations();
  ::dsv4::testing::SetAllocationTrap(trap != nullptr && *trap == '1');
  for (int64_t i = 0; i < steps; ++i) {
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const int32_t one[1] = {next};
    const Status st = model.Forward(one, *cache, logits, false);
    if (!st.ok()) {
      ::dsv4::testing::SetAllocationTrap(false);
      FAIL() << st.ToString();
    }
  }
  ::dsv4::testing::SetAllocationTrap(false);
  const int64_t allocated = Allocations() - before;
  EXPECT_EQ(allocated, 0) << c.profile << ", " << c.threads << " threads: " << allocated
                          << " heap allocations in " << steps << " decode steps";
  EXPECT_EQ(cache->length(), static_cast<int64_t>(prompt.size()) + 2 + steps);
  if (c.profile == "P-V4-7B") {  // the pruner evicted during the measured steps
    EXPECT_GT(static_cast<SeedCache&>(*cache).evicted_total(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, SeedAllocTest,
                         ::testing::Values(Case{"P-V4", 1, CedDispatch::kAuto},
                                           Case{"P-V4", 2, CedDispatch::kAuto},
                                           Case{"P-CED", 1, CedDispatch::kAuto},
                                           Case{"P-CED", 2, CedDispatch::kFused},
                                           Case{"P-CED", 2, CedDispatch::kBaseline},
                                           Case{"P-V4-7B", 1, CedDispatch::kAuto},
                                           Case{"P-V4-7B", 2, CedDispatch::kAuto}),
                         [](const auto& info) {
                           std::string s = info.param.profile + "_" +
                                           std::to_string(info.param.threads) + "t_" +
                                           std::string(CedDispatchName(info.param.dispatch));
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace dsv4::seed
