// The telemetry core both NCCL plugins share: RankEnv from the environment, the names' rules and
// the histogram's interval summary.
#include "c4/common/rank_telemetry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace c4::telemetry {
namespace {

RankEnv load(const std::map<std::string, std::string>& env) {
  RankEnv out;
  EnvLoader l(
      [&](const char* name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      out.sources, out.warnings);
  loadRankEnv(l, out);
  return out;
}

TEST(RankEnvTest, ReadsEveryNameAndRecordsWhereEachCameFrom) {
  auto e = load({{"C4_RANK", "3"},
                 {"RANK", "9"},
                 {"C4_POD_NAME", "job-1"},
                 {"C4_NODE_NAME", "node-7"},
                 {"C4_JOB", "job"},
                 {"C4_NAMESPACE", "team"},
                 {"WORLD_SIZE", "8"},
                 {"C4_RESTART_ATTEMPT", "2"},
                 {"C4_AGENT_SOCKET", "/run/c4/agent.sock"},
                 {"C4_REPORT_INTERVAL_MS", "250"}});
  EXPECT_EQ(e.rank, 3) << "C4_RANK wins over RANK";
  EXPECT_EQ(e.pod, "job-1");
  EXPECT_EQ(e.node, "node-7");
  EXPECT_EQ(e.job, "job");
  EXPECT_EQ(e.ns, "team");
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.restart_attempt, 2u);
  EXPECT_EQ(e.agent_socket, "/run/c4/agent.sock");
  EXPECT_EQ(e.report_interval_ms, 250u);
  EXPECT_TRUE(e.warnings.empty());
  EXPECT_EQ(e.sources.front(), "C4_RANK=3 (env)");
  EXPECT_NE(std::find(e.sources.begin(), e.sources.end(), "C4_JOB=job (env)"), e.sources.end());
}

TEST(RankEnvTest, RankFallsBackToTheLaunchersRank) {
  EXPECT_EQ(load({{"RANK", "5"}}).rank, 5);
  EXPECT_EQ(load({}).rank, -1);
}

TEST(RankEnvTest, BadValuesKeepTheirDefaultsWithAWarningEach) {
  auto e = load({{"C4_RANK", "x"},
                 {"WORLD_SIZE", "-1"},
                 {"C4_REPORT_INTERVAL_MS", "5"},
                 {"C4_POD_NAME", "Job_1"}});
  EXPECT_EQ(e.rank, -1);
  EXPECT_EQ(e.world_size, 0);
  EXPECT_EQ(e.report_interval_ms, 1000u);
  EXPECT_EQ(e.pod, "job-1");
  EXPECT_EQ(e.warnings.size(), 4u);
  EXPECT_NE(std::find(e.sources.begin(), e.sources.end(),
                      "C4_REPORT_INTERVAL_MS=1000 (default(invalid env))"),
            e.sources.end());
}

TEST(RankEnvTest, ARankOutsideTheWorldDropsTheWorldSize) {
  auto e = load({{"C4_RANK", "8"}, {"WORLD_SIZE", "8"}});
  EXPECT_EQ(e.rank, 8);
  EXPECT_EQ(e.world_size, 0);
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_EQ(e.warnings[0], "rank 8 >= WORLD_SIZE 8; WORLD_SIZE ignored");
  // The schema's bound: ranks below kMaxRank.
  EXPECT_EQ(load({{"C4_RANK", std::to_string(report::kMaxRank)}}).rank, -1);
}

TEST(RankEnvTest, SanitizedNames) {
  EXPECT_EQ(sanitizeName("Host_1.Example.COM"), "host-1.example.com");
  EXPECT_EQ(sanitizeName("--x--"), "x");
  EXPECT_EQ(sanitizeName("___"), "");
}

// A report too large for one datagram goes in parts: every connection once, in order, the
// communicators in part 0.
TEST(EncodeReportPartsTest, LargeReportsAreSplitIntoParts) {
  report::RankReport r;
  r.id.node = "node-a";
  r.id.rank = 3;
  r.seq = 17;
  r.time_unix_ns = 1'700'000'000'000'000'000;
  for (std::uint64_t i = 0; i < 100; ++i) {
    report::ConnectionStats c;
    c.id = i + 1;
    c.peer_node = "node-b";
    c.subflows.resize(4);
    r.connections.push_back(c);
  }
  r.communicators = {{0xabc, 8, 3, 10, 9, 0, 0, 10, 1500}, {0xdef, 2, 1, 4, 4, 2, 2, 4, 0}};
  auto whole = encodeReportParts(r, report::kMaxDatagramBytes);
  ASSERT_TRUE(whole.has_value()) << whole.error().toString();
  EXPECT_EQ(whole->size(), 1u);
  std::size_t limit = (*whole)[0].size() / 5;
  auto parts = encodeReportParts(r, limit);
  ASSERT_TRUE(parts.has_value()) << parts.error().toString();
  EXPECT_GE(parts->size(), 5u);
  std::vector<std::uint64_t> ids;
  for (std::size_t p = 0; p < parts->size(); ++p) {
    EXPECT_LE((*parts)[p].size(), limit);
    auto m = report::decodeMessageCbor((*parts)[p]);
    ASSERT_TRUE(m.has_value());
    auto* rep = std::get_if<report::RankReport>(&*m);
    ASSERT_NE(rep, nullptr);
    EXPECT_EQ(rep->seq, 17u);
    EXPECT_EQ(rep->part, p);
    EXPECT_EQ(rep->parts, parts->size());
    for (const auto& c : rep->connections) ids.push_back(c.id);
    if (p == 0) {
      EXPECT_EQ(rep->communicators, r.communicators);
    } else {
      EXPECT_TRUE(rep->communicators.empty()) << "part " << p;
    }
  }
  ASSERT_EQ(ids.size(), 100u);  // every connection exactly once, in order
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], i + 1);
  EXPECT_FALSE(encodeReportParts(r, 10).has_value());  // cannot fit: an error, not a loop
}

// Percentiles are bucket bounds capped by the interval's own max, which the reader takes (and
// resets) once per interval.
TEST(LatencyHistogramTest, SummarisesAnIntervalWithItsOwnMax) {
  LatencyHistogram h;
  h.record(1000);
  const auto first = h.snapshot();
  EXPECT_EQ(h.takeIntervalMax(), 1000u);
  for (std::uint64_t us : {3u, 5u, 6u, 100u}) h.record(us);
  const auto s = LatencyHistogram::summarize(first, h.snapshot(), h.takeIntervalMax());
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.sum_us, 114u);
  EXPECT_EQ(s.max_us, 100u) << "not the 1000 of the interval before";
  EXPECT_EQ(s.p50_us, 7u);    // the 2nd of 4 values, 5: bucket [4, 7]
  EXPECT_EQ(s.p99_us, 100u);  // bucket [64, 127] capped by the max
  EXPECT_EQ(LatencyHistogram::summarize(h.snapshot(), h.snapshot(), 0).count, 0u);
}

}  // namespace
}  // namespace c4::telemetry
