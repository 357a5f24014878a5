#include "c4/common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace c4 {
namespace {

using namespace std::chrono_literals;

TEST(SimulatedClockTest, TimeMovesOnlyOnAdvance) {
  SimulatedClock clock;
  const auto m0 = clock.monoNow();
  const auto w0 = clock.wallNow();
  EXPECT_EQ(clock.monoNow(), m0);
  clock.advance(1500ms);
  EXPECT_EQ(clock.monoNow() - m0, 1500ms);
  EXPECT_EQ(clock.wallNow() - w0, 1500ms);
}

TEST(SimulatedClockTest, NegativeAdvanceThrows) {
  SimulatedClock clock;
  EXPECT_THROW(clock.advance(-1ms), std::invalid_argument);
}

TEST(SimulatedClockTest, SetWallLeavesMonotonicAlone) {
  SimulatedClock clock;
  const auto m0 = clock.monoNow();
  clock.setWall(WallTime{std::chrono::seconds{42}});
  EXPECT_EQ(clock.wallNow(), WallTime{std::chrono::seconds{42}});
  EXPECT_EQ(clock.monoNow(), m0);
}

TEST(SimulatedClockTest, SleepWakesWhenTimeReachesDeadline) {
  SimulatedClock clock;
  std::atomic<bool> woke{false};
  std::thread t([&] {
    clock.sleepFor(10s);
    woke = true;
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(9s);
  // Still asleep: one waiter left after advancing short of the deadline.
  EXPECT_EQ(clock.waiters(), 1);
  EXPECT_FALSE(woke.load());
  clock.advance(1s);
  t.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(SimulatedClockTest, WaitUntilReturnsOnPredicate) {
  SimulatedClock clock;
  std::mutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  bool result = false;
  std::thread t([&] {
    std::unique_lock lock(mu);
    result = clock.waitFor(lock, cv, 1h, [&] { return ready; });
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  t.join();
  EXPECT_TRUE(result);
}

TEST(SimulatedClockTest, WaitUntilTimesOutOnSimulatedTime) {
  SimulatedClock clock;
  std::mutex mu;
  std::condition_variable_any cv;
  std::atomic<bool> done{false};
  bool result = true;
  std::thread t([&] {
    std::unique_lock lock(mu);
    result = clock.waitFor(lock, cv, 30s, [] { return false; });
    done = true;
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(29s);
  std::this_thread::sleep_for(20ms);  // real time: give the waiter a chance to (wrongly) return
  EXPECT_FALSE(done.load());
  clock.advance(1s);
  t.join();
  EXPECT_FALSE(result);
}

TEST(RealClockTest, MovesForward) {
  Clock& c = realClock();
  const auto a = c.monoNow();
  c.sleepFor(2ms);
  EXPECT_GE(c.monoNow() - a, 2ms);
  EXPECT_GT(toUnixNanos(c.wallNow()), 1'600'000'000'000'000'000LL);
}

TEST(ClockFormatTest, Rfc3339) {
  const WallTime t = fromUnixNanos(1'764'673'209'123'456'789LL);
  EXPECT_EQ(formatRfc3339(t), "2025-12-02T11:00:09Z");
  EXPECT_EQ(formatRfc3339Micro(t), "2025-12-02T11:00:09.123456Z");
  EXPECT_EQ(toUnixNanos(fromUnixNanos(123456789)), 123456789);
}

}  // namespace
}  // namespace c4
