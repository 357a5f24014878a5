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

}  // namespace
}  // namespace c4::c4d
