// engine/distributed.h: --layers-split parsing (the MPI runs themselves are
// tests/integration/test_mpi.py).
#include "engine/distributed.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dsv4
