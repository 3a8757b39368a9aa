// engine/distributed.h: --layers-split parsing (the MPI runs themselves are
// tests/integration/test_mpi.py), and what a micro-batched pipeline prefill
// rests on: a prompt run in chunks gives the logits of one call bit for bit.
#include "engine/distributed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/loader.h"

namespace dsv4 {
namespace {

TEST(LayersSplit, AutoGivesTheRemainderToTheLastRanks) {
  auto s = ParseLayersSplit("auto", 43, 4);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 10, 21, 32, 43}));
  s = ParseLayersSplit("auto", 8, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 2, 4, 6, 8}));
  s = ParseLayersSplit("auto", 3, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(LayersSplit, ExplicitCounts) {
  auto s = ParseLayersSplit("1,3,2,2", 8, 4);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 1, 4, 6, 8}));
}

TEST(LayersSplit, Errors) {
  struct Case {
    const char* text;
    int64_t layers;
    int ranks;
    const char* message;
  };
  for (const Case& c : {
           Case{"auto", 2, 3, "3 ranks but the model has only 2 layers"},
           Case{"1,2", 4, 2, "gives 2 ranks 3 layers; the job has 2 ranks and the model 4"},
           Case{"2,2", 4, 3, "gives 2 ranks 4 layers; the job has 3 ranks"},
           Case{"4,0", 4, 2, "'0' is not a layer count"},
           Case{"2,x", 4, 2, "'x' is not a layer count"},
           Case{"2,,2", 4, 2, "'' is not a layer count"},
           Case{"", 4, 2, "'' is not a layer count"},
           Case{"2,2 ", 4, 2, "'2 ' is not a layer count"},
       }) {
    auto s = ParseLayersSplit(c.text, c.layers, c.ranks);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.status().message().find(c.message), std::string::npos)
        << c.text << ": " << s.status().message();
    EXPECT_FALSE(s.status().hint().empty()) << c.text;
  }
}

// Pipeline micro-batches run a prompt as consecutive Forward calls of a few
// tokens each (docs/distributed.md), so that must give one call's logits bit
// for bit: every tiny model (window, CSA, HCA; hash and scored routing; MTP,
// DSpark), chunk sizes that do and do not divide the prompt, 1 and 2 threads.
TEST(MicroBatch, ChunkedPrefillIsBitIdenticalToOneCall) {
  const std::string data = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";
  for (const char* name : {"swa_bf16", "swa_fp8", "swa_bf16_v2", "mixed_mtp_bf16",
                           "long_hca128_bf16", "dspark_mixed_bf16", "dspark_swa_bf16"}) {
    for (int threads : {1, 2}) {
      LoadOptions o;
      o.model_path = data + name;
      o.threads = threads;
      auto loaded = LoadModelInProcess(o);
      ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status().ToString();
      Model& m = *loaded->model;
      std::ifstream in(data + name + "/input_ids.txt");
      std::vector<int32_t> ids{std::istream_iterator<int32_t>(in), {}};
      ASSERT_GE(ids.size(), 8u) << name;
      const int64_t T = static_cast<int64_t>(ids.size()), V = m.info().vocab_size;
      std::vector<float> want(T * V), got(T * V);
      auto one = m.NewCache(T);
      ASSERT_TRUE(m.Forward(ids, *one, want, /*all_logits=*/true).ok());
      for (int64_t chunk : {2, 3, 5, 8, 13, 64}) {
        auto cache = m.NewCache(T);
        std::fill(got.begin(), got.end(), 0.0f);
        for (int64_t t = 0; t < T; t += chunk) {
          const int64_t n = std::min(chunk, T - t);
          ASSERT_TRUE(m.Forward(std::span<const int32_t>(ids).subspan(t, n), *cache,
                                std::span<float>(got).subspan(t * V, n * V), true)
                          .ok());
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
            << name << ", " << threads << " threads, chunks of " << chunk;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
