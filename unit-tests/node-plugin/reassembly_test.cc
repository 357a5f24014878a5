#include "c4/node_plugin/reassembly.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace c4::node {
namespace {

using testing::identityOf;
using testing::rankReport;

std::vector<report::RankReport> split(const report::RankReport& whole, std::uint16_t parts) {
  std::vector<report::RankReport> out;
  const std::size_t per = (whole.connections.size() + parts - 1) / parts;
  for (std::uint16_t p = 0; p < parts; ++p) {
    report::RankReport r = whole;
    r.part = p;
    r.parts = parts;
    r.connections.assign(whole.connections.begin() + static_cast<long>(p * per),
                         whole.connections.begin() +
                             static_cast<long>(std::min(whole.connections.size(), (p + 1) * per)));
    if (p > 0) r.communicators.clear();  // part 0 carries them, as the plugins send them
    out.push_back(r);
  }
  return out;
}

report::RankReport whole(std::uint64_t seq = 7, std::size_t conns = 6) {
  auto r = rankReport(identityOf("ns", "pod", "node", "job", 0, 0), seq, conns);
  r.communicators = {{0xabc, 8, 0, 10, 9, 0, 0, 10, 1500}, {0xdef, 2, 1, 4, 4, 2, 2, 4, 0}};
  return r;
}

TEST(ReassemblyTest, SinglePartPassesThrough) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto offer = r.offer(10, whole());
  ASSERT_EQ(offer.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*offer.report, whole());
  EXPECT_EQ(r.stats().complete, 1u);
  EXPECT_EQ(r.stats().merged, 0u);
}

TEST(ReassemblyTest, CompleteInOrderAndOutOfOrder) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(), 3);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.offer(10, parts[1]).outcome, PartOutcome::kPending);
  auto done = r.offer(10, parts[2]);
  ASSERT_EQ(done.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*done.report, whole());
  EXPECT_EQ(r.partialReports(), 0u);
  EXPECT_EQ(r.bufferedParts(), 0u);

  EXPECT_EQ(r.offer(10, split(whole(8), 3)[2]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.offer(10, split(whole(8), 3)[0]).outcome, PartOutcome::kPending);
  auto ooo = r.offer(10, split(whole(8), 3)[1]);
  ASSERT_EQ(ooo.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*ooo.report, whole(8));
  EXPECT_EQ(r.stats().merged, 2u);
}

TEST(ReassemblyTest, SameSeqFromDifferentPidsAreDifferentReports) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(), 2);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.offer(11, parts[1]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.partialReports(), 2u);
}

TEST(ReassemblyTest, DuplicateAndInconsistentParts) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(), 3);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kDuplicate);
  EXPECT_EQ(r.stats().duplicate, 1u);
  auto bad = parts[1];
  bad.id.rank = 1;  // claims another rank than part 0
  EXPECT_EQ(r.offer(10, bad).outcome, PartOutcome::kInconsistent);
  EXPECT_EQ(r.partialReports(), 0u);  // the whole report is gone
  EXPECT_EQ(r.stats().inconsistent, 1u);
  // parts differs
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  auto other = split(whole(), 2)[1];
  EXPECT_EQ(r.offer(10, other).outcome, PartOutcome::kInconsistent);
}

// A last report split into parts stays marked last; a part that disagrees is not one of it.
TEST(ReassemblyTest, TheLastMarkIsPartOfTheHeader) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto last = whole(9);
  last.last = true;
  auto parts = split(last, 2);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  auto done = r.offer(10, parts[1]);
  ASSERT_EQ(done.outcome, PartOutcome::kComplete);
  EXPECT_TRUE(done.report->last);
  EXPECT_EQ(*done.report, last);
  EXPECT_EQ(r.offer(10, parts[0]).outcome, PartOutcome::kPending);
  auto notLast = parts[1];
  notLast.last = false;
  EXPECT_EQ(r.offer(10, notLast).outcome, PartOutcome::kInconsistent);
}

TEST(ReassemblyTest, TimeoutDropsPartials) {
  SimulatedClock clock;
  Reassembler r(clock, {.max_partial = 10, .max_parts = 100, .timeout = std::chrono::seconds{2}});
  auto parts = split(whole(), 2);
  r.offer(10, parts[0]);
  clock.advance(std::chrono::milliseconds{1999});
  EXPECT_EQ(r.expire(), 0u);
  clock.advance(std::chrono::milliseconds{1});
  EXPECT_EQ(r.expire(), 1u);
  EXPECT_EQ(r.stats().timed_out, 1u);
  // The late part starts a new partial report that never completes alone.
  EXPECT_EQ(r.offer(10, parts[1]).outcome, PartOutcome::kPending);
}

TEST(ReassemblyTest, BoundsEvictOldest) {
  SimulatedClock clock;
  Reassembler r(clock, {.max_partial = 2, .max_parts = 100, .timeout = std::chrono::seconds{2}});
  r.offer(1, split(whole(1), 2)[0]);
  r.offer(1, split(whole(2), 2)[0]);
  r.offer(1, split(whole(3), 2)[0]);  // evicts seq 1
  EXPECT_EQ(r.partialReports(), 2u);
  EXPECT_EQ(r.stats().evicted, 1u);
  EXPECT_EQ(r.offer(1, split(whole(1), 2)[1]).outcome, PartOutcome::kPending);  // seq 1 is gone
  EXPECT_EQ(r.stats().evicted, 2u);  // and re-adding it evicted seq 2
  EXPECT_EQ(r.offer(1, split(whole(3), 2)[1]).outcome, PartOutcome::kComplete);

  Reassembler few(clock, {.max_partial = 100, .max_parts = 3, .timeout = std::chrono::seconds{2}});
  auto a = split(whole(1, 9), 3);
  auto b = split(whole(2, 9), 3);
  few.offer(1, a[0]);
  few.offer(1, a[1]);
  few.offer(1, b[0]);
  EXPECT_EQ(few.bufferedParts(), 3u);
  few.offer(1, b[1]);  // over max_parts: evicts report 1, not the one being completed
  EXPECT_LE(few.bufferedParts(), 3u);
  EXPECT_EQ(few.offer(1, b[2]).outcome, PartOutcome::kComplete);
}

report::RankReport ofPod(const std::string& pod, std::uint64_t seq, std::size_t conns = 6) {
  return rankReport(identityOf("ns", pod, "node", "job", 0, 0), seq, conns);
}

// One pod sending the first parts of many split reports (never the rest) must not evict the
// other pods' reports in assembly: the node's bounds evict from the pod that holds the most.
TEST(ReassemblyTest, OnePodFloodingLeavesRoomForOthers) {
  SimulatedClock clock;
  Reassembler r(clock, {.max_partial = 8, .max_parts = 100, .timeout = std::chrono::seconds{2}});
  auto b = split(ofPod("b", 1), 2);
  auto c = split(ofPod("c", 1, 9), 3);
  EXPECT_EQ(r.offer(20, b[0]).outcome, PartOutcome::kPending);
  EXPECT_EQ(r.offer(30, c[0]).outcome, PartOutcome::kPending);
  for (std::uint64_t seq = 1; seq <= 1000; ++seq) r.offer(10, split(ofPod("flood", seq), 2)[0]);
  EXPECT_EQ(r.partialReports(), 8u);  // b's, c's and the flood's newest 6
  EXPECT_EQ(r.stats().evicted, 1000u - 6u);
  EXPECT_EQ(r.offer(30, c[1]).outcome, PartOutcome::kPending);
  for (std::uint64_t seq = 1001; seq <= 1100; ++seq) r.offer(10, split(ofPod("flood", seq), 2)[0]);
  auto done_b = r.offer(20, b[1]);
  ASSERT_EQ(done_b.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*done_b.report, ofPod("b", 1));
  auto done_c = r.offer(30, c[2]);
  ASSERT_EQ(done_c.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*done_c.report, ofPod("c", 1, 9));

  // The same by parts: the flood's big reports go, not the other pod's.
  Reassembler parts(clock, {.max_partial = 100, .max_parts = 10});
  auto small = split(ofPod("b", 1), 2);
  parts.offer(20, small[0]);
  for (std::uint64_t seq = 1; seq <= 50; ++seq) {
    auto big = split(ofPod("flood", seq, 8), 4);
    for (int i = 0; i < 3; ++i) parts.offer(10, big[static_cast<std::size_t>(i)]);
  }
  EXPECT_LE(parts.bufferedParts(), 10u);
  EXPECT_EQ(parts.offer(20, small[1]).outcome, PartOutcome::kComplete);
}

// A pod's own bounds: past max_partial_per_pod its own oldest report goes (pod_limit), with room
// to spare in the node's bounds; a report of more parts than a pod may buffer is dropped at once.
TEST(ReassemblyTest, PerPodBounds) {
  SimulatedClock clock;
  Reassembler r(clock, {.max_partial = 256,
                        .max_parts = 4096,
                        .timeout = std::chrono::seconds{2},
                        .max_partial_per_pod = 4,
                        .max_parts_per_pod = 6});
  for (std::uint64_t seq = 1; seq <= 10; ++seq) r.offer(10, split(ofPod("flood", seq), 2)[0]);
  EXPECT_EQ(r.partialReports(), 4u);
  EXPECT_EQ(r.stats().pod_limit, 6u);
  EXPECT_EQ(r.stats().evicted, 0u);
  // The newest four are kept.
  EXPECT_EQ(r.offer(10, split(ofPod("flood", 10), 2)[1]).outcome, PartOutcome::kComplete);
  EXPECT_EQ(r.offer(10, split(ofPod("flood", 1), 2)[1]).outcome, PartOutcome::kPending);

  // Parts: three of 2-part reports hold 3 parts; a 4-part report's parts evict its pod's others.
  Reassembler p(clock, {.max_partial = 256,
                        .max_parts = 4096,
                        .timeout = std::chrono::seconds{2},
                        .max_partial_per_pod = 64,
                        .max_parts_per_pod = 6});
  auto big = split(ofPod("a", 100, 12), 6);
  for (std::size_t i = 0; i + 1 < big.size(); ++i) p.offer(10, big[i]);
  p.offer(11, split(ofPod("a", 1), 2)[0]);  // 6 parts: at the pod's bound
  EXPECT_EQ(p.bufferedParts(), 6u);
  auto other = split(ofPod("b", 1), 2);
  p.offer(20, other[0]);  // another pod is not affected
  EXPECT_EQ(p.offer(10, big.back()).outcome, PartOutcome::kComplete);  // evicted a's 2-part one
  EXPECT_EQ(p.stats().pod_limit, 1u);
  EXPECT_EQ(p.offer(20, other[1]).outcome, PartOutcome::kComplete);

  const std::size_t before = p.stats().pod_limit;
  EXPECT_EQ(p.offer(10, split(ofPod("a", 200, 7), 7)[0]).outcome, PartOutcome::kPending);
  EXPECT_EQ(p.partialReports(), 0u);  // never kept: 7 parts cannot fit in 6
  EXPECT_EQ(p.stats().pod_limit, before + 1);
}

TEST(ReassemblyTest, OversizeMergedReportIsDropped) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(1, report::kMaxConnectionsPerReport + 2), 2);
  r.offer(1, parts[0]);
  EXPECT_EQ(r.offer(1, parts[1]).outcome, PartOutcome::kOversize);
  EXPECT_EQ(r.stats().oversize, 1u);
  // Communicators too: each part within the limit, together over it.
  auto comms = split(whole(2), 2);
  comms[0].communicators.assign(report::kMaxCommunicatorsPerReport, comms[0].communicators[0]);
  comms[1].communicators = {comms[0].communicators[0]};
  r.offer(1, comms[0]);
  EXPECT_EQ(r.offer(1, comms[1]).outcome, PartOutcome::kOversize);
  EXPECT_EQ(r.stats().oversize, 2u);
}

// Communicators a sender spread over several parts are all kept, in part order.
TEST(ReassemblyTest, CommunicatorsOfEveryPartAreKept) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(), 2);
  parts[1].communicators = {parts[0].communicators[1]};
  parts[0].communicators.pop_back();
  r.offer(3, parts[1]);
  auto done = r.offer(3, parts[0]);
  ASSERT_EQ(done.outcome, PartOutcome::kComplete);
  EXPECT_EQ(*done.report, whole());
}

}  // namespace
}  // namespace c4::node
