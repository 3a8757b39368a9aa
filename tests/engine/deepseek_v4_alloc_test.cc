// The DeepSeek-V4 decode loop does no heap allocation: with the counting
// operator new of tests/common/alloc_counter.h, Model::Forward of one token
// (after a warm-up call) and ForwardBatch over several sequences' decode
// tokens allocate nothing, on every tiny checkpoint (sliding window, FP8/FP4,
// CSA + indexer + HCA + MTP layers), with one thread and with a pool of two.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../common/alloc_counter.h"
#include "engine/loader.h"

namespace dsv4 {
namespace {

using ::dsv4::testing::AllocationCount;

const std::string kData = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";

struct Case {
  std::string dir;
  int threads;
};

class DeepSeekV4AllocTest : public ::testing::TestWithParam<Case> {};

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(DeepSeekV4Alloc, CounterSeesAllocations) {
  const int64_t before = AllocationCount();
  void* p = ::operator new(64);  // an explicit call: not elided
  const int64_t after = AllocationCount();
  ::operator delete(p);
  EXPECT_EQ(after - before, 1);
}

TEST_P(DeepSeekV4AllocTest, DecodeAllocatesNothingAfterWarmUp) {
  LoadOptions options;
  options.model_path = kData + GetParam().dir;
  options.threads = GetParam().threads;
  auto loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Model& model = *loaded->model;
  const int64_t V = model.info().vocab_size;
  auto cache = model.NewCache(256);
  std::vector<float> logits(V);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  ASSERT_TRUE(model.Forward(prompt, *cache, logits, false).ok());
  int32_t next = Argmax(logits);
  ASSERT_TRUE(model.Forward(std::span<const int32_t>(&next, 1), *cache, logits, false).ok());

  // 40 decode steps cross several compression boundaries (ratio 4 and 128 layers).
  const int64_t before = AllocationCount();
  for (int i = 0; i < 40; ++i) {
    next = Argmax(logits);
    ASSERT_TRUE(model.Forward(std::span<const int32_t>(&next, 1), *cache, logits, false).ok());
  }
  const int64_t allocated = AllocationCount() - before;
  EXPECT_EQ(allocated, 0) << GetParam().dir << ", " << GetParam().threads
                          << " threads: " << allocated << " heap allocations in 40 decode steps";
  EXPECT_EQ(cache->length(), static_cast<int64_t>(prompt.size()) + 41);
}

TEST_P(DeepSeekV4AllocTest, BatchedDecodeAllocatesNothingAfterWarmUp) {
  LoadOptions options;
  options.model_path = kData + GetParam().dir;
  options.threads = GetParam().threads;
  auto loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Model& model = *loaded->model;
  constexpr int kSeqs = 3;
  const int64_t V = model.info().vocab_size;
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<std::vector<float>> logits(kSeqs, std::vector<float>(V));
  int32_t next[kSeqs];
  std::vector<BatchEntry> entries(kSeqs);
  auto step = [&] {
    for (int i = 0; i < kSeqs; ++i) {
      next[i] = Argmax(logits[i]);
      entries[i] = BatchEntry{.tokens = std::span<const int32_t>(&next[i], 1),
                              .cache = caches[i].get(),
                              .logits = logits[i]};
    }
    return model.ForwardBatch(entries);
  };
  for (int i = 0; i < kSeqs; ++i) {
    caches.push_back(model.NewCache(256));
    std::vector<int32_t> prompt;
    for (int j = 0; j < 9 + 5 * i; ++j) prompt.push_back(static_cast<int32_t>((j * 5 + i) % V));
    ASSERT_TRUE(model.Forward(prompt, *caches[i], logits[i], false).ok());
  }
  ASSERT_TRUE(step().ok());  // warm-up
  const int64_t before = AllocationCount();
  for (int k = 0; k < 24; ++k) ASSERT_TRUE(step().ok());
  const int64_t allocated = AllocationCount() - before;
  EXPECT_EQ(allocated, 0) << GetParam().dir << ", " << GetParam().threads
                          << " threads: " << allocated << " heap allocations in 24 batched steps";
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepSeekV4AllocTest,
                         ::testing::Values(Case{"swa_bf16", 1}, Case{"swa_fp8", 1},
                                           Case{"swa_fp8", 2}, Case{"mixed_mtp_bf16", 1},
                                           Case{"mixed_mtp_bf16", 2}, Case{"long_hca128_bf16", 2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.dir + "_" + std::to_string(info.param.threads) + "t";
                         });

}  // namespace
}  // namespace dsv4
