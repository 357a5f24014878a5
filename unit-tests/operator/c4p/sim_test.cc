// The C4P simulator (bench/c4p_sim.cc) against closed forms, before its numbers are trusted.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/c4p_sim.h"

namespace c4::bench::c4psim {
namespace {

// Exact E[max] against hand-computable cases.
TEST(C4pSimTest, ExpectedMaxLoadClosedForm) {
  EXPECT_NEAR(expectedMaxLoad(1, 5), 1.0, 1e-12);
  EXPECT_NEAR(expectedMaxLoad(2, 2), 1.5, 1e-12);         // {1,1} or {2,0}: 1/2 each
  EXPECT_NEAR(expectedMaxLoad(3, 3), 17.0 / 9.0, 1e-12);  // 6/27·1 + 18/27·2 + 3/27·3
  EXPECT_NEAR(expectedMaxLoad(4, 4), 2.125, 1e-12);       // 24·1 + 180·2 + 48·3 + 4·4 over 256
  EXPECT_NEAR(expectedMaxLoad(2, 1), 2.0, 1e-12);
}

TEST(C4pSimTest, MaxMinRatesOnAKnownNetwork) {
  // Links: 0 (cap 1), 1 (cap 2). Flows: a over 0; b over 0 and 1; c over 1.
  auto r = maxMinRates({1.0, 2.0}, {{0}, {0, 1}, {1}});
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 0.5);
  EXPECT_DOUBLE_EQ(r[2], 1.5);
  auto t = completionTimes({1.0, 2.0}, {{0}, {0, 1}, {1}}, {1.0, 1.0, 3.0});
  // a and b at 0.5 until t=2; c at 1.5 until 2 (3 Gbit done at 2).
  EXPECT_NEAR(t[0], 2.0, 1e-9);
  EXPECT_NEAR(t[1], 2.0, 1e-9);
  EXPECT_NEAR(t[2], 2.0, 1e-9);
  auto u = completionTimes({1.0}, {{0}, {0}}, {1.0, 3.0});
  EXPECT_NEAR(u[0], 2.0, 1e-9);  // half rate until the first finishes
  EXPECT_NEAR(u[1], 4.0, 1e-9);  // then alone: 2 Gbit left at rate 1
}

// n flows from n nodes of leaf 0 to n nodes of leaf 1 over n uplinks, hashed by ECMP: a link
// with m flows gives each 1/m, so the step takes max load and E[1/busbw] = E[max load] — the
// closed form. Mean over many seeds within 4 standard errors.
TEST(C4pSimTest, EcmpMatchesTheClosedFormExpectedMaxLoad) {
  for (int n : {2, 4, 8, 16}) {
    LeafSpine fabric{2, n, n, 1.0, 1.0, {}};
    SimJob job;
    for (int i = 0; i < n; ++i) job.connections.emplace_back(i, n + i);
    const int seeds = 3000;
    double sum = 0, sum2 = 0;
    for (int s = 0; s < seeds; ++s) {
      Routes routes = ecmpRoutes(fabric, {job}, 1000U + static_cast<std::uint64_t>(s));
      double t = 1.0 / ringStepBusbw(fabric, {job}, routes)[0];
      sum += t;
      sum2 += t * t;
      // The pipelined model sees the same bottleneck: pace = 1 / (most flows on one link).
      EXPECT_NEAR(1.0 / ringPipelinedBusbw(fabric, {job}, routes)[0], t, 1e-9);
    }
    double mean = sum / seeds;
    double sd = std::sqrt(std::max(0.0, sum2 / seeds - mean * mean));
    double exact = expectedMaxLoad(n, n);
    EXPECT_NEAR(mean, exact, 4 * sd / std::sqrt(seeds) + 1e-9) << "n=" << n;
  }
}

TEST(C4pSimTest, PlannedPathsGiveTheHostRate) {
  LeafSpine fabric{4, 4, 4, 100.0, 100.0, {}};
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) {
    for (int l = 0; l < 4; ++l) order.push_back(l * 4 + i);
  }
  SimJob job = ringJob(order, 1);
  // Connection k leaves leaf k % 4 from host k / 4: give it uplink k / 4 — distinct per leaf.
  Routes routes(1);
  for (std::size_t k = 0; k < job.connections.size(); ++k) {
    routes[0].push_back({{static_cast<int>(k / 4), 1.0}});
  }
  EXPECT_NEAR(ringStepBusbw(fabric, {job}, routes)[0], 100.0, 1e-9);
  EXPECT_NEAR(idealBusbw(fabric, {job}, 0), 100.0, 1e-9);
  // Two connections of one leaf on one uplink halve the ring.
  routes[0][4][0].path = routes[0][0][0].path;
  EXPECT_NEAR(ringStepBusbw(fabric, {job}, routes)[0], 50.0, 1e-9);
  // One failed uplink: 4 host rates over 3 links.
  fabric.failed = {{2, 1}};
  EXPECT_NEAR(idealBusbw(fabric, {job}, 0), 75.0, 1e-9);
}

// Weighted subflows: job 0's connection puts 2/3 on an uplink of its own and 1/3 on one it
// shares with job 1's single-subflow connection. Both paces rise together until the shared link
// is full: P/3 + P = 100, so both stop at 75 (job 0's own uplink carries only 50 then).
TEST(C4pSimTest, PipelinedModelIsWeightedMaxMinOverJobs) {
  LeafSpine fabric{2, 2, 2, 100.0, 100.0, {}};
  SimJob a, b;
  a.connections = {{0, 2}};
  a.subflows = 2;
  b.connections = {{1, 3}};
  b.subflows = 1;
  Routes routes = {{{{0, 2.0 / 3.0}, {1, 1.0 / 3.0}}}, {{{1, 1.0}}}};
  auto p = ringPipelinedBusbw(fabric, {a, b}, routes);
  EXPECT_NEAR(p[0], 75.0, 1e-9);
  EXPECT_NEAR(p[1], 75.0, 1e-9);
  // Job 1 alone on the shared uplink, job 0 entirely on its own: each at its host rate.
  Routes apart = {{{{0, 1.0}, {0, 0.0}}}, {{{1, 1.0}}}};
  auto q = ringPipelinedBusbw(fabric, {a, b}, apart);
  EXPECT_NEAR(q[0], 100.0, 1e-9);
  EXPECT_NEAR(q[1], 100.0, 1e-9);
  // Uplink 1 of leaf 0 failed: a ring of two nodes with all weight on uplink 0 keeps the host
  // rate, which is what the links allow.
  fabric.failed = {{0, 1}};
  SimJob c = ringJob({0, 2}, 2);
  Routes live = {{{{0, 1.0}, {1, 0.0}}, {{0, 1.0}, {1, 0.0}}}};
  EXPECT_NEAR(ringPipelinedBusbw(fabric, {c}, live)[0], 100.0, 1e-9);
  EXPECT_NEAR(idealBusbw(fabric, {c}, 0), 100.0, 1e-9);
}

}  // namespace
}  // namespace c4::bench::c4psim
