// PriorityTokenBucket on simulated time: burst, pacing, critical first, FIFO within a priority,
// and the bound on how long a normal request can be held back.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/client/throttle.h"

namespace c4::kube {
namespace {

using std::chrono::milliseconds;

// Records the order in which waiters got through.
class Order {
 public:
  void add(const std::string& who) {
    std::lock_guard lock(mu_);
    order_.push_back(who);
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mu_);
    return order_;
  }
  // Real-time wait until n entries (the waiters run on their own threads).
  bool awaitSize(std::size_t n) {
    for (int i = 0; i < 2000; ++i) {
      if (get().size() >= n) return true;
      std::this_thread::sleep_for(milliseconds{1});
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> order_;
};

TEST(PriorityTokenBucketTest, BurstIsImmediateThenPacedAtQps) {
  SimulatedClock clock;
  PriorityTokenBucket bucket(clock, 10.0, 3);
  for (int i = 0; i < 3; ++i) bucket.wait(RequestPriority::kNormal);  // no time passes
  Order order;
  std::thread t([&] {
    bucket.wait(RequestPriority::kNormal);
    order.add("fourth");
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(milliseconds{99});
  ASSERT_TRUE(clock.awaitWaiters(1));  // still waiting: a token takes 100 ms
  EXPECT_TRUE(order.get().empty());
  clock.advance(milliseconds{1});
  ASSERT_TRUE(order.awaitSize(1));
  t.join();
}

TEST(PriorityTokenBucketTest, CriticalRequestsGoFirstAndEachPriorityIsFifo) {
  SimulatedClock clock;
  PriorityTokenBucket bucket(clock, 10.0, 1, std::chrono::seconds{10});
  bucket.wait(RequestPriority::kNormal);  // empties the bucket
  Order order;
  std::vector<std::thread> threads;
  auto start = [&](const std::string& who, RequestPriority p, int parked) {
    threads.emplace_back([&, who, p] {
      bucket.wait(p);
      order.add(who);
    });
    ASSERT_TRUE(clock.awaitWaiters(parked));  // queued in this order
  };
  start("normal-1", RequestPriority::kNormal, 1);
  start("normal-2", RequestPriority::kNormal, 2);
  start("critical-1", RequestPriority::kCritical, 3);
  start("critical-2", RequestPriority::kCritical, 4);
  for (std::size_t served = 1; served <= 4; ++served) {
    clock.advance(milliseconds{100});
    ASSERT_TRUE(order.awaitSize(served));
    if (served < 4) {
      ASSERT_TRUE(clock.awaitWaiters(static_cast<int>(4 - served)));
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(order.get(),
            (std::vector<std::string>{"critical-1", "critical-2", "normal-1", "normal-2"}));
}

TEST(PriorityTokenBucketTest, ANormalRequestWaitsAtMostMaxNormalWaitBehindCriticalOnes) {
  SimulatedClock clock;
  PriorityTokenBucket bucket(clock, 10.0, 1, milliseconds{500});
  bucket.wait(RequestPriority::kNormal);
  Order order;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    bucket.wait(RequestPriority::kNormal);
    order.add("status");
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  constexpr int kCritical = 20;  // 2 s of pod creations at 10 qps
  for (int i = 0; i < kCritical; ++i) {
    threads.emplace_back([&] {
      bucket.wait(RequestPriority::kCritical);
      order.add("pod");
    });
    ASSERT_TRUE(clock.awaitWaiters(i + 2));
  }
  for (int served = 1; served <= kCritical + 1; ++served) {
    clock.advance(milliseconds{100});
    ASSERT_TRUE(order.awaitSize(static_cast<std::size_t>(served)));
    if (served <= kCritical) {
      ASSERT_TRUE(clock.awaitWaiters(kCritical + 1 - served));
    }
  }
  for (auto& t : threads) t.join();
  auto got = order.get();
  auto pos = std::find(got.begin(), got.end(), "status") - got.begin();
  // The first 4 tokens (t = 100..400 ms) go to pods; at 500 ms the status write has waited
  // max_normal_wait and takes the 5th.
  EXPECT_EQ(pos, 4) << "served " << pos << " requests before the status write";
}

TEST(PriorityTokenBucketTest, ManyThreadsGetExactlyTheRateOverTime) {
  SimulatedClock clock;
  PriorityTokenBucket bucket(clock, 50.0, 5);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 25; ++i) {
    threads.emplace_back([&, i] {
      bucket.wait(i % 2 ? RequestPriority::kCritical : RequestPriority::kNormal);
      ++done;
    });
  }
  // 5 from the burst at once, then one per 20 ms: all 25 after 400 ms, not before.
  for (int i = 0; i < 2000 && done.load() < 5; ++i) std::this_thread::sleep_for(milliseconds{1});
  ASSERT_TRUE(clock.awaitWaiters(20));
  EXPECT_EQ(done.load(), 5);
  for (int step = 1; step <= 20; ++step) {
    clock.advance(milliseconds{20});
    for (int i = 0; i < 2000 && done.load() < 5 + step; ++i) {
      std::this_thread::sleep_for(milliseconds{1});
    }
    ASSERT_EQ(done.load(), 5 + step) << "after " << step * 20 << " ms";
    if (step < 20) {
      ASSERT_TRUE(clock.awaitWaiters(20 - step));
    }
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace c4::kube
