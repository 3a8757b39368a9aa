// The Llama decode loop does no heap allocation: this binary replaces the
// global operator new/delete with counting versions and checks that
// Model::Forward for one token (after a warm-up call) allocates nothing, nor
// does ForwardBatch over several sequences' decode tokens, with
// one thread and with a pool of two.
#include <gtest/gtest.h>

#include "../common/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "engine/loader.h"

namespace dsv4 {
namespace {

const std::string kModels = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/";

int64_t Allocations() { return ::dsv4::testing::AllocationCount(); }

TEST(LlamaAlloc, CounterSeesAllocations) {
  // The counting operator new is the one in use (else the test below proves nothing).
  const int64_t before = Allocations();
  void* p = ::operator new(64);  // an explicit call: never elided
  const int64_t after = Allocations();
  ::operator delete(p);
  EXPECT_EQ(after - before, 1);
}

class LlamaAllocTest : public ::testing::TestWithParam<int> {};

TEST_P(LlamaAllocTest, DecodeForwardAllocatesNothingAfterWarmUp) {
  for (const char* file : {"stories260K.bin", "stories260K.gguf"}) {
    LoadOptions options;
    options.model_path = kModels + file;
    options.threads = GetParam();
    auto loaded = LoadModel(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    Model& model = *loaded->model;
    auto cache = model.NewCache(256);
    std::vector<float> logits(model.info().vocab_size);
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 383, 432, 410, 317};
    ASSERT_TRUE(model.Forward(prompt, *cache, logits, false).ok());
    int32_t next = 1;
    const int32_t warm[1] = {next};
    ASSERT_TRUE(model.Forward(warm, *cache, logits, false).ok());

    const int64_t before = Allocations();
    for (int i = 0; i < 64; ++i) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const int32_t one[1] = {next};
      ASSERT_TRUE(model.Forward(one, *cache, logits, false).ok());
    }
    const int64_t allocated = Allocations() - before;
    EXPECT_EQ(allocated, 0) << file << ", " << GetParam() << " threads: " << allocated
                            << " heap allocations in 64 decode steps";
    EXPECT_EQ(cache->length(), static_cast<int64_t>(prompt.size()) + 65);
  }
}

TEST_P(LlamaAllocTest, BatchedDecodeAllocatesNothingAfterWarmUp) {
  LoadOptions options;
  options.model_path = kModels + "stories260K.bin";
  options.threads = GetParam();
  auto loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Model& model = *loaded->model;
  constexpr int kSeqs = 4;
  const int64_t V = model.info().vocab_size;
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<std::vector<float>> logits(kSeqs, std::vector<float>(V));
  int32_t next[kSeqs];
  std::vector<BatchEntry> entries(kSeqs);
  auto step = [&] {
    for (int i = 0; i < kSeqs; ++i) {
      next[i] = static_cast<int32_t>(std::max_element(logits[i].begin(), logits[i].end()) -
                                     logits[i].begin());
      entries[i] = BatchEntry{.tokens = std::span<const int32_t>(&next[i], 1),
                              .cache = caches[i].get(),
                              .logits = logits[i]};
    }
    return model.ForwardBatch(entries);
  };
  for (int i = 0; i < kSeqs; ++i) {
    caches.push_back(model.NewCache(256));
    const std::vector<int32_t> prompt = {1, 403 + i, 407, 261};
    ASSERT_TRUE(model.Forward(prompt, *caches[i], logits[i], false).ok());
  }
  ASSERT_TRUE(step().ok());  // warm-up
  const int64_t before = Allocations();
  for (int k = 0; k < 32; ++k) ASSERT_TRUE(step().ok());
  const int64_t allocated = Allocations() - before;
  EXPECT_EQ(allocated, 0) << GetParam() << " threads: " << allocated
                          << " heap allocations in 32 batched decode steps";
  EXPECT_EQ(caches[0]->length(), 4 + 33);
}

INSTANTIATE_TEST_SUITE_P(Threads, LlamaAllocTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace dsv4
