// The window builder's rates (operator/c4d/window.cc): a rank's newest two reports give the bytes
// moved between them, and the newest report's transfer time covers only its own interval. When a
// report in between was lost (a node plugin that dropped or coalesced it), the bytes span two
// intervals and the time one: such a rate would be inflated, so it is not measured.
#include "operator/c4d/window.h"

#include <gtest/gtest.h>

namespace c4::c4d {
namespace {

const WallTime kStart = WallTime{} + std::chrono::hours{490'000};

ConnSample conn(report::Direction dir, std::int32_t peer, std::uint64_t bytes,
                std::uint64_t xferUs) {
  ConnSample c;
  c.id = 1;
  c.direction = dir;
  c.peer_rank = peer;
  c.bytes = bytes;
  c.ops = bytes / 1'000'000;
  c.transfer.count = 10;
  c.transfer.sum_us = xferUs;
  c.transfer.max_us = xferUs / 10;
  return c;
}

// Rank 0 on node-0 sends 1 GB a second to rank 1 on node-1, each transfer second at 2 GB/s (the
// link's rate): 0.5 s of transfer per 1 s interval. Reports at `times` (seconds after kStart).
JobSnapshot job(const std::vector<int>& times) {
  JobSnapshot s;
  s.ns = "team";
  s.name = "llm";
  s.world_size = 2;
  s.nodes = {NodeSnapshot{}, NodeSnapshot{}};
  s.nodes[0].name = "node-0";
  s.nodes[1].name = "node-1";
  for (std::int32_t r = 0; r < 2; ++r) {
    RankSnapshot rs;
    rs.node = r;
    rs.pod = "llm-" + std::to_string(r);
    rs.pod_state = PodState::kRunning;
    for (int t : times) {
      ReportSample sample;
      sample.time = kStart + std::chrono::seconds{t};
      sample.interval_ms = 1000;
      const auto bytes = static_cast<std::uint64_t>(t) * std::uint64_t{1'000'000'000};
      sample.connections.push_back(r == 0 ? conn(report::Direction::kSend, 1, bytes, 500'000)
                                          : conn(report::Direction::kRecv, 0, bytes, 500'000));
      rs.reports.push_back(sample);
    }
    s.ranks.push_back(rs);
  }
  return s;
}

TEST(C4dWindow, ARateIsBytesOverTransferTimeOfTheSameInterval) {
  const JobSnapshot s = job({9, 10});
  WindowBuilder builder;
  const Window w = builder.build(s, kStart + std::chrono::seconds{10}, 20);
  ASSERT_EQ(w.edges.size(), 1u);
  EXPECT_TRUE(w.edges[0].measured);
  EXPECT_DOUBLE_EQ(w.edges[0].rate, 2e9);
}

TEST(C4dWindow, AfterALostReportTheBytesSpanTwoIntervalsAndAreNotRated) {
  const JobSnapshot s = job({8, 10});  // the report of second 9 never arrived
  WindowBuilder builder;
  const Window w = builder.build(s, kStart + std::chrono::seconds{10}, 20);
  ASSERT_EQ(w.edges.size(), 1u);
  EXPECT_TRUE(w.edges[0].moved) << "the bytes moved all the same";
  EXPECT_FALSE(w.edges[0].measured) << "rate " << w.edges[0].rate << " (2 GB over 0.5 s)";
  EXPECT_FALSE(w.edges[0].fast);
  EXPECT_TRUE(w.rates.empty());
}

// The builder keeps each rank's newest report's aggregates for the next window, whose older
// report it is when the caller shares the report's connections (ConnSamples, as the detector's
// ReportSampleCache does): the rate is the one unshared copies give, and an older report whose
// connections were written since (a copy of its own) is aggregated anew.
TEST(C4dWindow, AnOlderReportsAggregatesAreReusedOnlyForTheSameConnections) {
  const JobSnapshot first = job({9, 10});
  JobSnapshot second = job({10, 11});
  for (std::size_t r = 0; r < 2; ++r) second.ranks[r].reports[0] = first.ranks[r].reports[1];
  ASSERT_EQ(second.ranks[0].reports[0].connections.shared(),
            first.ranks[0].reports[1].connections.shared());
  WindowBuilder shared;
  (void)shared.build(first, kStart + std::chrono::seconds{10}, 20);
  const Window a = shared.build(second, kStart + std::chrono::seconds{11}, 21);
  ASSERT_EQ(a.edges.size(), 1u);
  EXPECT_TRUE(a.edges[0].measured);
  EXPECT_DOUBLE_EQ(a.edges[0].rate, 2e9);

  // The same older report with 0.5 GB less on both sides, written into the shared connections:
  // the write copies them (the first snapshot still says what it said), so the builder sees new
  // connections and the bytes between the two reports are 1.5 GB (3 GB/s over 0.5 s).
  JobSnapshot third = second;
  for (std::size_t r = 0; r < 2; ++r) third.ranks[r].reports[0].connections[0].bytes -= 500'000'000;
  EXPECT_NE(third.ranks[0].reports[0].connections.shared(),
            first.ranks[0].reports[1].connections.shared());
  EXPECT_EQ(first.ranks[0].reports[1].connections[0].bytes, 10'000'000'000u);
  WindowBuilder rebuilt;
  (void)rebuilt.build(first, kStart + std::chrono::seconds{10}, 20);
  const Window b = rebuilt.build(third, kStart + std::chrono::seconds{11}, 21);
  ASSERT_EQ(b.edges.size(), 1u);
  EXPECT_TRUE(b.edges[0].measured);
  EXPECT_DOUBLE_EQ(b.edges[0].rate, 3e9);
}

}  // namespace
}  // namespace c4::c4d
