// Token buckets and rate-limited logs on simulated time.
#include "operator/ingest/rate_limit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>

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

// Lines of `sink` that contain `text`.
long countLines(const CaptureLogSink& sink, std::string_view text) {
  auto lines = sink.lines();
  return std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
    return line.find(text) != std::string::npos;
  });
}

// Waits (real time, up to 5 s) until `sink` has a line containing `text`.
bool awaitLine(const CaptureLogSink& sink, std::string_view text) {
  for (int i = 0; i < 5000; ++i) {
    if (countLines(sink, text) > 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return false;
}

// Issue #27: a burst of warnings followed by silence still reports how many were suppressed,
// when their interval ends on the injected clock. Before, the summary came only with the next
// warning, so a burst that ended never said what it had suppressed.
TEST(RateLimitedLogTest, ABurstThenSilenceIsSummarisedWhenTheIntervalEnds) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  SimulatedClock clock;
  {
    RateLimitedLog log(clock, Logger("test"), "Suppressed test lines", 3, std::chrono::seconds{10});
    for (int i = 0; i < 50; ++i) log.warn("A refusal", {{"i", i}});
    EXPECT_EQ(countLines(*sink, "A refusal"), 3);
    clock.advance(std::chrono::seconds{9});
    std::this_thread::sleep_for(std::chrono::milliseconds{50});  // the interval still runs
    EXPECT_EQ(countLines(*sink, "Suppressed test lines"), 0);
    clock.advance(std::chrono::seconds{1});  // the interval ends; no warning comes
    ASSERT_TRUE(awaitLine(*sink, "Suppressed test lines")) << "the burst was never summarised";
    EXPECT_EQ(countLines(*sink, "suppressed=47"), 1);
    EXPECT_EQ(countLines(*sink, "maxPerInterval=3"), 1);
    // Reported once: neither the next interval's end nor its first warning repeats it.
    clock.advance(std::chrono::seconds{20});
    log.warn("A refusal", {{"i", 50}});
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
    EXPECT_EQ(countLines(*sink, "Suppressed test lines"), 1);
    EXPECT_EQ(countLines(*sink, "A refusal"), 4);
    // A second burst is summarised on its own.
    for (int i = 0; i < 5; ++i) log.warn("A refusal", {{"i", 51 + i}});
    clock.advance(std::chrono::seconds{10});
    ASSERT_TRUE(awaitLine(*sink, "suppressed=3"));
    EXPECT_EQ(countLines(*sink, "Suppressed test lines"), 2);
  }
  setLogSink(nullptr);
}

TEST(LogLimiterTest, TheSummaryIsDueAtTheEndOfTheIntervalAndTakenOnce) {
  SimulatedClock clock;
  LogLimiter limiter(1, std::chrono::seconds{10});
  const MonoTime t0 = clock.monoNow();
  EXPECT_TRUE(limiter.take(t0).log);
  EXPECT_EQ(limiter.summaryDue(), std::nullopt);  // nothing suppressed yet
  EXPECT_FALSE(limiter.take(t0 + std::chrono::seconds{1}).log);
  EXPECT_FALSE(limiter.take(t0 + std::chrono::seconds{2}).log);
  ASSERT_TRUE(limiter.summaryDue());
  EXPECT_EQ(*limiter.summaryDue(), t0 + std::chrono::seconds{10});
  EXPECT_EQ(limiter.takeSummary(t0 + std::chrono::seconds{9}), 0u);  // the interval still runs
  EXPECT_EQ(limiter.takeSummary(t0 + std::chrono::seconds{10}), 2u);
  EXPECT_EQ(limiter.summaryDue(), std::nullopt);
  auto next = limiter.take(t0 + std::chrono::seconds{11});
  EXPECT_TRUE(next.log);
  EXPECT_EQ(next.suppressed, 0u) << "reported twice";
}

}  // namespace
}  // namespace c4::op::ingest
