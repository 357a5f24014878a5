// Work queue and rate limiters on simulated time.
#include "operator/controller/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace c4::op {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<RateLimiter> noLimit() {
  return std::make_unique<ExponentialFailureRateLimiter>(milliseconds{5}, seconds{1000});
}

TEST(WorkQueueTest, DeduplicatesQueuedKeys) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.len(), 2u);
  EXPECT_EQ(q.get(), "a");
  EXPECT_EQ(q.get(), "b");
  EXPECT_EQ(q.len(), 0u);
}

TEST(WorkQueueTest, KeyAddedWhileProcessingIsRequeuedOnceWhenDone) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  q.add("a");
  auto key = q.get();
  ASSERT_EQ(key, "a");
  q.add("a");
  q.add("a");
  EXPECT_EQ(q.len(), 0u) << "a key in processing must not be handed to a second worker";
  q.done("a");
  EXPECT_EQ(q.len(), 1u);
  EXPECT_EQ(q.get(), "a");
  q.done("a");
  EXPECT_EQ(q.len(), 0u);
}

TEST(WorkQueueTest, AddAfterWaitsForSimulatedTimeAndKeepsEarliest) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  q.addAfter("a", seconds{10});
  q.addAfter("a", seconds{3});  // earlier wins
  q.addAfter("a", seconds{20});
  EXPECT_EQ(q.waitingLen(), 1u);
  std::atomic<bool> got{false};
  std::thread worker([&] {
    auto key = q.get();
    got = key.has_value();
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(seconds{2});
  EXPECT_FALSE(got.load());
  clock.advance(seconds{1});
  worker.join();
  EXPECT_TRUE(got.load());
}

TEST(WorkQueueTest, AddAfterWakesAGetterThatWaitsLonger) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  q.addAfter("late", seconds{100});
  std::optional<std::string> key;
  std::thread worker([&] { key = q.get(); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  q.addAfter("early", seconds{1});
  clock.advance(seconds{1});
  worker.join();
  EXPECT_EQ(key, "early");
}

TEST(WorkQueueTest, ShutDownWakesGetters) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  std::optional<std::string> key = "x";
  std::thread worker([&] { key = q.get(); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  q.shutDown();
  worker.join();
  EXPECT_FALSE(key.has_value());
  q.add("a");
  EXPECT_EQ(q.len(), 0u);
}

TEST(RateLimiterTest, ExponentialBackoffFrom5msTo1000s) {
  ExponentialFailureRateLimiter limiter(milliseconds{5}, seconds{1000});
  EXPECT_EQ(limiter.when("k"), milliseconds{5});
  EXPECT_EQ(limiter.when("k"), milliseconds{10});
  EXPECT_EQ(limiter.when("k"), milliseconds{20});
  EXPECT_EQ(limiter.numRequeues("k"), 3);
  EXPECT_EQ(limiter.when("other"), milliseconds{5}) << "per-key history";
  for (int i = 0; i < 40; ++i) limiter.when("k");
  EXPECT_EQ(limiter.when("k"), seconds{1000});
  limiter.forget("k");
  EXPECT_EQ(limiter.numRequeues("k"), 0);
  EXPECT_EQ(limiter.when("k"), milliseconds{5});
}

TEST(RateLimiterTest, TokenBucketAllowsBurstThenPaces) {
  SimulatedClock clock;
  TokenBucket bucket(clock, 10.0, 3);
  EXPECT_EQ(bucket.reserve(), Duration::zero());
  EXPECT_EQ(bucket.reserve(), Duration::zero());
  EXPECT_EQ(bucket.reserve(), Duration::zero());
  EXPECT_EQ(bucket.reserve(), milliseconds{100});
  EXPECT_EQ(bucket.reserve(), milliseconds{200});
  clock.advance(seconds{10});
  EXPECT_EQ(bucket.reserve(), Duration::zero()) << "refilled, capped at burst";
}

TEST(RateLimiterTest, DefaultControllerLimiterIsMaxOfBothLimits) {
  SimulatedClock clock;
  auto limiter = defaultControllerRateLimiter(clock);
  // First 100 items pass the bucket; the per-key backoff (5 ms) dominates.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(limiter->when(std::to_string(i)), milliseconds{5});
  }
  // The 101st has to wait for the bucket (10 qps): 100 ms > 5 ms.
  EXPECT_EQ(limiter->when("k-extra"), milliseconds{100});
}

TEST(WorkQueueTest, AddRateLimitedUsesPerKeyBackoff) {
  SimulatedClock clock;
  WorkQueue q(clock, noLimit());
  q.addRateLimited("a");  // 5 ms
  EXPECT_EQ(q.len(), 0u);
  clock.advance(milliseconds{5});
  EXPECT_EQ(q.get(), "a");
  q.done("a");
  q.addRateLimited("a");  // 10 ms
  clock.advance(milliseconds{9});
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.numRequeues("a"), 2);
  q.forget("a");
  EXPECT_EQ(q.numRequeues("a"), 0);
}

}  // namespace
}  // namespace c4::op
