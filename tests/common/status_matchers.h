// Negative-test helpers: a failed call is checked for WHICH error it is — its
// status code and the part of its message (or hint) that names the cause —
// so that a test cannot pass on an unrelated failure.
#ifndef DSV4_TESTS_COMMON_STATUS_MATCHERS_H_
#define DSV4_TESTS_COMMON_STATUS_MATCHERS_H_

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::testing {

inline const Status& StatusOf(const Status& s) { return s; }
template <class T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

// Passes when `s` failed with `code` and its message or hint contains `cause`.
inline ::testing::AssertionResult IsError(const Status& s, StatusCode code,
                                          std::string_view cause) {
  if (s.ok())
    return ::testing::AssertionFailure() << "succeeded; expected an error naming '" << cause << "'";
  if (s.code() != code) {
    return ::testing::AssertionFailure() << "code " << static_cast<int>(s.code()) << " (expected "
                                         << static_cast<int>(code) << "): " << s.ToString();
  }
  if (s.message().find(cause) == std::string::npos && s.hint().find(cause) == std::string::npos) {
    return ::testing::AssertionFailure() << "'" << cause << "' not in: " << s.ToString();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dsv4::testing

// EXPECT_ERROR(call, StatusCode::kInvalidArgument, "part of the message").
#define EXPECT_ERROR(expr, code, cause) \
  EXPECT_TRUE(::dsv4::testing::IsError(::dsv4::testing::StatusOf(expr), code, cause))
#define ASSERT_ERROR(expr, code, cause) \
  ASSERT_TRUE(::dsv4::testing::IsError(::dsv4::testing::StatusOf(expr), code, cause))

#endif  // DSV4_TESTS_COMMON_STATUS_MATCHERS_H_
