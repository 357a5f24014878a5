// Token buckets on simulated time.
#include "operator/ingest/rate_limit.h"

#include <gtest/gtest.h>

namespace c4::op::ingest {
namespace {

TEST(TokenBucketTest, BurstThenRate) {
  SimulatedClock clock;
  TokenBucket bucket({2, 3}, clock.monoNow());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.take(clock.monoNow()), std::nullopt) << i;
  auto wait = bucket.take(clock.monoNow());
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, std::chrono::milliseconds{500});  // one token per 0.5 s
  EXPECT_EQ(retryAfterSeconds(*wait), 1);
  clock.advance(std::chrono::milliseconds{499});
  EXPECT_TRUE(bucket.take(clock.monoNow()));
  clock.advance(std::chrono::milliseconds{1});
  EXPECT_EQ(bucket.take(clock.monoNow()), std::nullopt);
  // Never more than the burst, however long it waited.
  clock.advance(std::chrono::hours{1});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.take(clock.monoNow()), std::nullopt);
  EXPECT_TRUE(bucket.take(clock.monoNow()));
}

TEST(TokenBucketTest, RetryAfterRoundsUpToWholeSeconds) {
  SimulatedClock clock;
  TokenBucket bucket({0.25, 1}, clock.monoNow());
  EXPECT_EQ(bucket.take(clock.monoNow()), std::nullopt);
  auto wait = bucket.take(clock.monoNow());
  ASSERT_TRUE(wait);
  EXPECT_EQ(retryAfterSeconds(*wait), 4);
  clock.advance(std::chrono::milliseconds{2500});
  wait = bucket.take(clock.monoNow());
  ASSERT_TRUE(wait);
  EXPECT_EQ(retryAfterSeconds(*wait), 2);  // 1.5 s left
}

TEST(TokenBucketTest, ZeroRateIsUnlimited) {
  SimulatedClock clock;
  TokenBucket bucket({0, 0}, clock.monoNow());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bucket.take(clock.monoNow()), std::nullopt);
}

TEST(KeyedBucketsTest, OneBucketPerKeyBoundedByLru) {
  SimulatedClock clock;
  KeyedBuckets buckets({1, 1}, 2);
  EXPECT_EQ(buckets.take("a", clock.monoNow()), std::nullopt);
  EXPECT_TRUE(buckets.take("a", clock.monoNow()));
  EXPECT_EQ(buckets.take("b", clock.monoNow()), std::nullopt);  // independent of "a"
  EXPECT_TRUE(buckets.take("b", clock.monoNow()));
  EXPECT_EQ(buckets.take("c", clock.monoNow()), std::nullopt);  // evicts "a"
  EXPECT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets.take("a", clock.monoNow()), std::nullopt);  // a fresh bucket
  buckets.giveBack("a");
  EXPECT_EQ(buckets.take("a", clock.monoNow()), std::nullopt);
}

}  // namespace
}  // namespace c4::op::ingest
