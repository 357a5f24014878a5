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
    out.push_back(r);
  }
  return out;
}

report::RankReport whole(std::uint64_t seq = 7, std::size_t conns = 6) {
  return rankReport(identityOf("ns", "pod", "node", "job", 0, 0), seq, conns);
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

TEST(ReassemblyTest, OversizeMergedReportIsDropped) {
  SimulatedClock clock;
  Reassembler r(clock, {});
  auto parts = split(whole(1, report::kMaxConnectionsPerReport + 2), 2);
  r.offer(1, parts[0]);
  EXPECT_EQ(r.offer(1, parts[1]).outcome, PartOutcome::kOversize);
  EXPECT_EQ(r.stats().oversize, 1u);
}

}  // namespace
}  // namespace c4::node
