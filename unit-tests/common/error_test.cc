#include "c4/common/error.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace c4 {
namespace {

Result<int> parsePositive(int v) {
  if (v <= 0) return makeError(ErrorCode::kInvalidArgument, "must be positive");
  return v;
}

Result<int> doubled(int v) {
  C4_ASSIGN_OR_RETURN(int x, parsePositive(v));
  return 2 * x;
}

Status checkBoth(int a, int b) {
  C4_RETURN_IF_ERROR(parsePositive(a));
  C4_RETURN_IF_ERROR(parsePositive(b));
  return okStatus();
}

TEST(ErrorTest, AssignOrReturnPropagatesValueAndError) {
  ASSERT_TRUE(doubled(4).has_value());
  EXPECT_EQ(*doubled(4), 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message, "must be positive");
}

TEST(ErrorTest, ReturnIfErrorStopsAtFirstFailure) {
  EXPECT_TRUE(checkBoth(1, 2).has_value());
  auto s = checkBoth(1, 0);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
}

TEST(ErrorTest, ContextAndToString) {
  Error e{ErrorCode::kNotFound, "no such pod"};
  EXPECT_EQ(e.withContext("get pod ns/a").message, "get pod ns/a: no such pod");
  EXPECT_EQ(e.toString(), "not_found: no such pod");
}

TEST(ErrorTest, RetryableCodes) {
  EXPECT_TRUE(isRetryable(ErrorCode::kUnavailable));
  EXPECT_TRUE(isRetryable(ErrorCode::kConflict));
  EXPECT_TRUE(isRetryable(ErrorCode::kResourceExhausted));
  EXPECT_FALSE(isRetryable(ErrorCode::kInvalidArgument));
  EXPECT_FALSE(isRetryable(ErrorCode::kNotFound));
  EXPECT_FALSE(isRetryable(ErrorCode::kInternal));
}

TEST(ErrorTest, ErrnoMapping) {
  EXPECT_EQ(errnoError("open", ENOENT).code, ErrorCode::kNotFound);
  EXPECT_EQ(errnoError("connect", ECONNREFUSED).code, ErrorCode::kUnavailable);
  EXPECT_EQ(errnoError("open", EACCES).code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(errnoError("read", EIO).code, ErrorCode::kIo);
  EXPECT_NE(errnoError("open", ENOENT).message.find("open: "), std::string::npos);
  EXPECT_NE(errnoError("open", ENOENT).message.find("errno 2"), std::string::npos);
}

TEST(ErrorTest, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(ErrorCode::kInternal); ++c) {
    EXPECT_NE(errorCodeName(static_cast<ErrorCode>(c)), "unknown") << c;
  }
}

}  // namespace
}  // namespace c4
