#include "c4/common/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <thread>

namespace c4::metrics {
namespace {

TEST(MetricsTest, CounterExposition) {
  Registry reg;
  auto& fam = reg.counter("c4_test_events_total", "Events seen.", {"kind"});
  fam.labels({"a"}).inc();
  fam.labels({"a"}).inc(2);
  fam.labels({"b"}).inc(0.5);
  fam.labels({"b"}).inc(-3);  // ignored: counters never decrease
  EXPECT_EQ(reg.expose(),
            "# HELP c4_test_events_total Events seen.\n"
            "# TYPE c4_test_events_total counter\n"
            "c4_test_events_total{kind=\"a\"} 3\n"
            "c4_test_events_total{kind=\"b\"} 0.5\n");
}

TEST(MetricsTest, GaugeWithoutLabels) {
  Registry reg;
  auto& g = reg.gauge("c4_test_depth", "Queue depth.").get();
  g.set(7);
  g.dec(2);
  g.inc();
  EXPECT_EQ(g.value(), 6);
  EXPECT_NE(reg.expose().find("c4_test_depth 6\n"), std::string::npos);
}

TEST(MetricsTest, RemoveDropsOneSeries) {
  Registry reg;
  auto& fam = reg.gauge("c4_test_job_seconds", "Seconds by job.", {"job"});
  fam.labels({"a"}).set(1);
  fam.labels({"b"}).set(2);
  EXPECT_TRUE(fam.remove({"a"}));
  EXPECT_FALSE(fam.remove({"a"}));
  EXPECT_FALSE(fam.remove({"missing"}));
  EXPECT_EQ(reg.expose(),
            "# HELP c4_test_job_seconds Seconds by job.\n"
            "# TYPE c4_test_job_seconds gauge\n"
            "c4_test_job_seconds{job=\"b\"} 2\n");
  EXPECT_EQ(fam.labels({"a"}).value(), 0);  // a new series, not the old one
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry reg;
  auto& h = reg.histogram("c4_test_latency_seconds", "Latency.", {}, {0.1, 1}).get();
  h.observe(0.05);
  h.observe(0.1);  // le is inclusive
  h.observe(0.5);
  h.observe(5);
  const std::string text = reg.expose();
  EXPECT_NE(text.find("# TYPE c4_test_latency_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("c4_test_latency_seconds_bucket{le=\"0.10000000000000001\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("c4_test_latency_seconds_bucket{le=\"1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("c4_test_latency_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("c4_test_latency_seconds_sum 5.6500000000000004\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("c4_test_latency_seconds_count 4\n"), std::string::npos);
}

TEST(MetricsTest, HistogramWithLabelsPutsLeLast) {
  Registry reg;
  reg.histogram("c4_h_seconds", "h", {"op"}, {1}).labels({"get"}).observe(2);
  const std::string text = reg.expose();
  EXPECT_NE(text.find("c4_h_seconds_bucket{op=\"get\",le=\"1\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("c4_h_seconds_bucket{op=\"get\",le=\"+Inf\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("c4_h_seconds_count{op=\"get\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  Registry reg;
  reg.counter("c4_esc_total", "Help with \\ and\nnewline.", {"v"}).labels({"a\"b\\c\nd"}).inc();
  const std::string text = reg.expose();
  EXPECT_NE(text.find("# HELP c4_esc_total Help with \\\\ and\\nnewline.\n"), std::string::npos);
  EXPECT_NE(text.find("c4_esc_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
}

TEST(MetricsTest, RejectsBadNamesAndConflicts) {
  Registry reg;
  EXPECT_THROW(reg.counter("1bad", "x"), std::invalid_argument);
  EXPECT_THROW(reg.counter("bad-name", "x"), std::invalid_argument);
  EXPECT_THROW(reg.counter("ok_total", "x", {"__reserved"}), std::invalid_argument);
  EXPECT_THROW(reg.histogram("h_seconds", "x", {"le"}), std::invalid_argument);
  EXPECT_THROW(reg.histogram("h2_seconds", "x", {}, {1, 1}), std::invalid_argument);
  auto& a = reg.counter("same_total", "x", {"l"});
  EXPECT_EQ(&a, &reg.counter("same_total", "x", {"l"}));
  EXPECT_THROW(reg.gauge("same_total", "x", {"l"}), std::invalid_argument);
  EXPECT_THROW(reg.counter("same_total", "x", {"other"}), std::invalid_argument);
  EXPECT_THROW(a.labels({"1", "2"}), std::invalid_argument);
}

TEST(MetricsTest, FormatValue) {
  EXPECT_EQ(formatValue(3), "3");
  EXPECT_EQ(formatValue(-2), "-2");
  EXPECT_EQ(formatValue(0.25), "0.25");
  EXPECT_EQ(formatValue(INFINITY), "+Inf");
  EXPECT_EQ(formatValue(-INFINITY), "-Inf");
  EXPECT_EQ(formatValue(NAN), "NaN");
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Registry reg;
  auto& c = reg.counter("c4_conc_total", "x").get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.inc();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
}

TEST(MetricsTest, CollectHooksRefreshGaugesBeforeExposition) {
  Registry reg;
  auto& g = reg.gauge("c4_test_oldest_seconds", "Oldest item.").get();
  double computed = 3;
  int calls = 0;
  auto hook = reg.onCollect([&] {
    ++calls;
    g.set(computed);
  });
  EXPECT_NE(reg.expose().find("c4_test_oldest_seconds 3\n"), std::string::npos);
  computed = 5;
  EXPECT_NE(reg.expose().find("c4_test_oldest_seconds 5\n"), std::string::npos);
  EXPECT_EQ(calls, 2);

  CollectHook moved = std::move(hook);  // the registration follows the handle
  computed = 6;
  EXPECT_NE(reg.expose().find("c4_test_oldest_seconds 6\n"), std::string::npos);
  EXPECT_EQ(calls, 3);
  moved.reset();
  computed = 7;
  EXPECT_NE(reg.expose().find("c4_test_oldest_seconds 6\n"), std::string::npos);
  EXPECT_EQ(calls, 3) << "a removed hook is not called";
  {
    auto scoped = reg.onCollect([&] { ++calls; });
    (void)reg.expose();
  }
  (void)reg.expose();
  EXPECT_EQ(calls, 4) << "a destroyed handle removes its hook";
}

TEST(MetricsTest, RemovingAHookWaitsForItsRunningCall) {
  Registry reg;
  std::atomic<bool> entered{false};
  std::atomic<bool> release{false};
  std::atomic<bool> finished{false};
  auto hook = std::make_unique<CollectHook>(reg.onCollect([&] {
    entered = true;
    while (!release) std::this_thread::yield();
    finished = true;
  }));
  std::thread scraper([&] { (void)reg.expose(); });
  while (!entered) std::this_thread::yield();
  std::thread remover([&] {
    hook.reset();  // blocks until the running call returns
    EXPECT_TRUE(finished);
  });
  release = true;
  remover.join();
  scraper.join();
}

TEST(MetricsTest, ExponentialBuckets) {
  auto b = exponentialBuckets(1, 2, 4);
  EXPECT_EQ(b, (std::vector<double>{1, 2, 4, 8}));
  EXPECT_THROW(exponentialBuckets(0, 2, 3), std::invalid_argument);
}

}  // namespace
}  // namespace c4::metrics
