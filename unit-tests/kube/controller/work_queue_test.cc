// Work queue and rate limiters on simulated time.
#include "kube/controller/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <thread>
#include <vector>

namespace c4::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<RateLimiter> noLimit() {
  return std::make_unique<ExponentialFailureRateLimiter>(milliseconds{5}, seconds{1000});
}

// The value of one series in a fresh exposition (which runs the collect hooks), as a scraper
// sees it; nullopt when the series is absent.
std::optional<double> scrape(const metrics::Registry& registry, const std::string& series) {
  std::istringstream in(registry.expose());
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

std::string series(const std::string& family, const std::string& queue = "jobs") {
  return "c4_operator_workqueue_" + family + "{name=\"" + queue + "\"}";
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

TEST(WorkQueueMetricsTest, EveryFamilyIsExportedFromTheStart) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  for (const char* family : {"adds_total", "depth", "retries_total", "unfinished_work_seconds",
                             "longest_running_processor_seconds", "queue_duration_seconds_count",
                             "work_duration_seconds_count"}) {
    EXPECT_EQ(scrape(registry, series(family)), 0.0) << family;
  }
  EXPECT_EQ(scrape(registry,
                   "c4_operator_workqueue_queue_duration_seconds_bucket{name=\"jobs\","
                   "le=\"1e-08\"}"),
            0.0)
      << "client-go's buckets: 10 ns .. 10 s\n"
      << registry.expose();
}

TEST(WorkQueueMetricsTest, AddsDepthAndQueueDuration) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  q.add("a");
  q.add("a");  // deduplicated: not an add
  clock.advance(seconds{1});
  q.add("b");
  EXPECT_EQ(scrape(registry, series("adds_total")), 2.0);
  EXPECT_EQ(scrape(registry, series("depth")), 2.0);

  clock.advance(seconds{2});
  ASSERT_EQ(q.get(), "a");  // waited 3 s
  EXPECT_EQ(scrape(registry, series("depth")), 1.0);
  ASSERT_EQ(q.get(), "b");  // waited 2 s
  EXPECT_EQ(scrape(registry, series("depth")), 0.0);
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_count")), 2.0);
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_sum")), 5.0);
  EXPECT_EQ(scrape(registry,
                   "c4_operator_workqueue_queue_duration_seconds_bucket{name=\"jobs\","
                   "le=\"1\"}"),
            0.0);
  EXPECT_EQ(scrape(registry,
                   "c4_operator_workqueue_queue_duration_seconds_bucket{name=\"jobs\","
                   "le=\"10\"}"),
            2.0);

  // Re-added while processing: queued (depth 1, one more add) but not handed out until done().
  q.add("a");
  EXPECT_EQ(scrape(registry, series("adds_total")), 3.0);
  EXPECT_EQ(scrape(registry, series("depth")), 1.0);
  EXPECT_EQ(q.len(), 0u);
  clock.advance(seconds{4});
  q.done("a");
  ASSERT_EQ(q.get(), "a");
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_sum")), 9.0)
      << "from the add, including the wait for the running reconcile of the same key";
  q.shutDown();
  EXPECT_EQ(scrape(registry, series("depth")), 0.0);
}

TEST(WorkQueueMetricsTest, WorkDurationUnfinishedWorkAndLongestRunningProcessor) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  q.add("a");
  q.add("b");
  ASSERT_EQ(q.get(), "a");
  clock.advance(seconds{1});
  ASSERT_EQ(q.get(), "b");
  clock.advance(seconds{9});
  // Nobody called done(): the gauges come from the collect hook at scrape time.
  EXPECT_EQ(scrape(registry, series("unfinished_work_seconds")), 19.0);
  EXPECT_EQ(scrape(registry, series("longest_running_processor_seconds")), 10.0);
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_count")), 0.0);

  q.done("a");
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_count")), 1.0);
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_sum")), 10.0);
  EXPECT_EQ(scrape(registry, series("unfinished_work_seconds")), 9.0);
  EXPECT_EQ(scrape(registry, series("longest_running_processor_seconds")), 9.0);
  clock.advance(seconds{1});
  q.done("b");
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_count")), 2.0);
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_sum")), 20.0);
  EXPECT_EQ(scrape(registry, series("unfinished_work_seconds")), 0.0);
  EXPECT_EQ(scrape(registry, series("longest_running_processor_seconds")), 0.0);
  q.done("b");  // a second done() of the same key observes nothing
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_count")), 2.0);

  // updateUnfinishedWorkMetrics() refreshes the gauges without an exposition too.
  q.add("c");
  ASSERT_EQ(q.get(), "c");
  clock.advance(seconds{4});
  q.updateUnfinishedWorkMetrics();
  auto& longest =
      registry.gauge("c4_operator_workqueue_longest_running_processor_seconds", "", {"name"});
  EXPECT_EQ(longest.labels({"jobs"}).value(), 4.0);
}

TEST(WorkQueueMetricsTest, RetriesCountRateLimitedAddsOnly) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  q.addRateLimited("a");
  q.addRateLimited("a");
  q.addAfter("b", seconds{1});  // a requeue-after, not a retry
  q.add("c");
  EXPECT_EQ(scrape(registry, series("retries_total")), 2.0);
  q.shutDown();
  q.addRateLimited("a");
  EXPECT_EQ(scrape(registry, series("retries_total")), 2.0) << "nothing is retried after shutdown";
}

TEST(WorkQueueMetricsTest, DueKeysCountFromTheirDueTime) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  q.addAfter("a", seconds{5});
  EXPECT_EQ(scrape(registry, series("depth")), 0.0) << "waiting keys are not in the queue yet";
  EXPECT_EQ(scrape(registry, series("adds_total")), 0.0);
  clock.advance(seconds{5});
  // Every worker is busy (nobody in get()); a scrape still sees the key that became due.
  EXPECT_EQ(scrape(registry, series("depth")), 1.0);
  EXPECT_EQ(scrape(registry, series("adds_total")), 1.0);
  clock.advance(seconds{2});
  ASSERT_EQ(q.get(), "a");
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_sum")), 2.0);
  // Due keys that no scrape promoted count from their due time as well.
  q.addAfter("b", seconds{1});
  clock.advance(seconds{4});
  ASSERT_EQ(q.get(), "b");
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_sum")), 5.0);
}

TEST(WorkQueueMetricsTest, QueuesAreLabelledByName) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue jobs(clock, noLimit(), &registry, "jobs");
  {
    WorkQueue nodes(clock, noLimit(), &registry, "nodes");
    nodes.add("n1");
    nodes.add("n2");
    jobs.add("j1");
    EXPECT_EQ(scrape(registry, series("adds_total", "nodes")), 2.0);
    EXPECT_EQ(scrape(registry, series("adds_total", "jobs")), 1.0);
    ASSERT_EQ(nodes.get(), "n1");
    clock.advance(seconds{3});
    EXPECT_EQ(scrape(registry, series("longest_running_processor_seconds", "nodes")), 3.0);
  }
  // A destroyed queue's hook is gone: scraping still works and leaves its last values.
  clock.advance(seconds{3});
  EXPECT_EQ(scrape(registry, series("longest_running_processor_seconds", "nodes")), 3.0);
  EXPECT_EQ(scrape(registry, series("depth", "jobs")), 1.0);
}

TEST(WorkQueueMetricsTest, ConcurrentWorkersAndScrapes) {
  SimulatedClock clock;
  metrics::Registry registry;
  WorkQueue q(clock, noLimit(), &registry, "jobs");
  constexpr int kKeys = 200;
  std::atomic<int> processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.get()) {
        q.done(*key);
        ++processed;
      }
    });
  }
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop) (void)registry.expose();
  });
  for (int i = 0; i < kKeys; ++i) q.add(std::to_string(i));
  while (processed < kKeys) std::this_thread::yield();
  stop = true;
  scraper.join();
  q.shutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(scrape(registry, series("adds_total")), kKeys);
  EXPECT_EQ(scrape(registry, series("work_duration_seconds_count")), kKeys);
  EXPECT_EQ(scrape(registry, series("queue_duration_seconds_count")), kKeys);
  EXPECT_EQ(scrape(registry, series("unfinished_work_seconds")), 0.0);
}

}  // namespace
}  // namespace c4::kube
