// Tests of base/status.h: Status, Result<T>, RETURN_IF_ERROR and
// ASSIGN_OR_RETURN, including that errors propagate unchanged, that the
// macros evaluate their argument once, and that misuse aborts (CHECK).
#include "base/status.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, HelpersSetCodeMessageAndHint) {
  struct Case {
    Status s;
    StatusCode code;
  };
  const std::vector<Case> cases = {
      {InvalidArgument("m1", "h1"), StatusCode::kInvalidArgument},
      {NotFound("m2", "h2"), StatusCode::kNotFound},
      {DataLoss("m3", "h3"), StatusCode::kDataLoss},
      {OutOfRange("m4", "h4"), StatusCode::kOutOfRange},
      {Unimplemented("m5", "h5"), StatusCode::kUnimplemented},
      {ResourceExhausted("m6", "h6"), StatusCode::kResourceExhausted},
      {IoError("m7", "h7"), StatusCode::kIo},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Status& s = cases[i].s;
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), cases[i].code);
    const std::string n = std::to_string(i + 1);
    EXPECT_EQ(s.message(), std::string("m").append(n));
    EXPECT_EQ(s.hint(), std::string("h").append(n));
  }
}

TEST(StatusTest, ToStringIncludesHintOnlyWhenPresent) {
  EXPECT_EQ(NotFound("tensor 'x' missing").ToString(), "tensor 'x' missing");
  EXPECT_EQ(NotFound("tensor 'x' missing", "check the name").ToString(),
            "tensor 'x' missing (hint: check the name)");
}

TEST(StatusTest, WithContextPrependsAndKeepsCodeAndHint) {
  const Status s = DataLoss("truncated at byte 12", "re-download").WithContext("loading a.bin");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "loading a.bin: truncated at byte 12");
  EXPECT_EQ(s.hint(), "re-download");
  EXPECT_TRUE(Status::Ok().WithContext("anything").ok());
  EXPECT_TRUE(Status::Ok().WithContext("anything").message().empty());
}

TEST(StatusTest, CodeNamesAreDistinct) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const std::string name = StatusCodeName(static_cast<StatusCode>(c));
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(StatusCode::kInternal) + 1);
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  *r = 7;
  EXPECT_EQ(r.value(), 7);
}

TEST(ResultTest, HoldsError) {
  Result<std::string> r = OutOfRange("offset 99 past end 10", "file truncated?");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(), "offset 99 past end 10");
}

TEST(ResultTest, ArrowAndMoveOnly) {
  Result<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
  Result<std::unique_ptr<int>> p = std::make_unique<int>(5);
  std::unique_ptr<int> taken = std::move(p).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> r = NotFound("no such tensor 'w'");
  EXPECT_DEATH((void)r.value(), "no such tensor 'w'");
}

TEST(ResultDeathTest, BuildingFromOkStatusAborts) {
  EXPECT_DEATH(
      {
        Result<int> r = Status::Ok();
        (void)r;
      },
      "ok Status");
}

// ---- macros ----

int g_calls = 0;

Status Step(bool fail) {
  ++g_calls;
  return fail ? InvalidArgument("step failed") : Status::Ok();
}

Status TwoSteps(bool fail_first, bool* reached_second) {
  RETURN_IF_ERROR(Step(fail_first));
  *reached_second = true;
  RETURN_IF_ERROR(Step(false));
  return Status::Ok();
}

TEST(MacroTest, ReturnIfErrorPropagatesAndStops) {
  g_calls = 0;
  bool reached = false;
  Status s = TwoSteps(true, &reached);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "step failed");
  EXPECT_FALSE(reached);
  EXPECT_EQ(g_calls, 1);

  g_calls = 0;
  reached = false;
  EXPECT_TRUE(TwoSteps(false, &reached).ok());
  EXPECT_TRUE(reached);
  EXPECT_EQ(g_calls, 2);
}

Result<int> Parse(int v) {
  ++g_calls;
  if (v < 0) return InvalidArgument("negative: " + std::to_string(v));
  return v * 2;
}

Result<int> SumParsed(int a, int b) {
  ASSIGN_OR_RETURN(int x, Parse(a));  // declaration
  int y = 0;
  ASSIGN_OR_RETURN(y, Parse(b));  // existing variable
  return x + y;
}

TEST(MacroTest, AssignOrReturnAssignsOrPropagates) {
  g_calls = 0;
  Result<int> ok = SumParsed(1, 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 6);
  EXPECT_EQ(g_calls, 2);  // each expression evaluated exactly once

  g_calls = 0;
  Result<int> bad = SumParsed(-3, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "negative: -3");
  EXPECT_EQ(g_calls, 1);

  Result<int> bad2 = SumParsed(3, -4);
  ASSERT_FALSE(bad2.ok());
  EXPECT_EQ(bad2.status().message(), "negative: -4");
}

Result<std::unique_ptr<int>> MakeBox(int v) {
  if (v == 0) return NotFound("zero");
  return std::make_unique<int>(v);
}

Status UseBoxes(int* out) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> a, MakeBox(3));
  ASSIGN_OR_RETURN(auto b, MakeBox(4));  // two on different lines do not collide
  *out = *a + *b;
  ASSIGN_OR_RETURN(auto c, MakeBox(0));
  *out = -1;  // not reached
  (void)c;
  return Status::Ok();
}

TEST(MacroTest, AssignOrReturnMovesMoveOnlyValuesIntoStatusFunction) {
  int out = 0;
  Status s = UseBoxes(&out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(out, 7);
}

// The negative-test matcher (tests/common/status_matchers.h) fails on success,
// on another code and on another cause.
TEST(StatusMatchers, IsErrorChecksCodeAndCause) {
  const Status bad = InvalidArgument("--top-k: -3 is negative", "use 0 or more");
  EXPECT_TRUE(dsv4::testing::IsError(bad, StatusCode::kInvalidArgument, "--top-k"));
  EXPECT_TRUE(dsv4::testing::IsError(bad, StatusCode::kInvalidArgument, "use 0 or more"));
  EXPECT_FALSE(dsv4::testing::IsError(bad, StatusCode::kNotFound, "--top-k"));
  EXPECT_FALSE(dsv4::testing::IsError(bad, StatusCode::kInvalidArgument, "--top-p"));
  EXPECT_FALSE(dsv4::testing::IsError(Status::Ok(), StatusCode::kInvalidArgument, "--top-k"));
  const Result<int> r = NotFound("model.gguf: no such file");
  EXPECT_ERROR(r, StatusCode::kNotFound, "model.gguf");
}

}  // namespace
}  // namespace dsv4
