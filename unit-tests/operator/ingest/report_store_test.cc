// ReportStore: bounds (history, connections, anomalies, nodes), attempts and job deletion,
// checkpoint aggregation, the reader interface and the debug summary.
#include "operator/ingest/report_store.h"

#include <gtest/gtest.h>

#include "ingest_testing.h"

namespace c4::op::ingest {
namespace {

using testing::anomalyNotice;
using testing::checkpointNotice;
using testing::identity;
using testing::nodeReport;
using testing::rankReport;

constexpr std::int64_t kT0 = 1'700'000'000'000'000'000;
const std::string kJob = "ns1/job";

std::map<std::string, JobFacts> facts(std::uint32_t attempt = 0, std::int32_t world = 2,
                                      const std::string& uid = "uid-1") {
  return {{kJob, JobFacts{uid, attempt, world}}};
}

class ReportStoreTest : public ::testing::Test {
 protected:
  WallTime now() const { return clock_.wallNow(); }
  void applyReports(std::uint64_t seq, int connections = 2, std::uint32_t attempt = 0) {
    auto batch = nodeReport("node-a", seq, kT0);
    for (int r = 0; r < 2; ++r) {
      batch.reports.push_back(rankReport(identity("ns1", "job", r, "node-a", attempt), seq,
                                         kT0 + static_cast<std::int64_t>(seq), connections));
    }
    store_.apply(batch, facts(attempt), now(), 0);
  }
  void checkpoint(int rank, std::int64_t step, std::uint32_t attempt = 0, std::int32_t world = 2) {
    auto batch = nodeReport("node-a", 1, kT0);
    batch.notices.push_back(
        checkpointNotice(identity("ns1", "job", rank, "node-a", attempt), step, kT0 + step));
    store_.apply(batch, facts(attempt, world), now(), 0);
  }

  SimulatedClock clock_;
  ReportStoreConfig config_{.history = 3,
                            .max_connections_per_rank = 4,
                            .max_anomalies_per_job = 2,
                            .max_checkpoint_steps = 4,
                            .max_nodes = 2};
  metrics::Registry registry_;
  ReportStore store_{config_, &registry_};
};

TEST_F(ReportStoreTest, KeepsABoundedHistoryPerRankAndConnection) {
  for (std::uint64_t seq = 1; seq <= 5; ++seq) {
    applyReports(seq);
    clock_.advance(std::chrono::seconds{1});
  }
  bool found = store_.readJob("ns1", "job", [&](const JobRecord& job) {
    ASSERT_EQ(job.ranks.size(), 2u);
    const RankRecord& rank = job.ranks.at(1);
    EXPECT_EQ(rank.reports_total, 5u);
    ASSERT_EQ(rank.reports.size(), 3u);
    EXPECT_EQ(rank.reports.front().seq, 3u);
    EXPECT_EQ(rank.reports.back().seq, 5u);
    ASSERT_EQ(rank.connections.size(), 2u);
    const auto& samples = rank.connections.at(1).samples;
    ASSERT_EQ(samples.size(), 3u);
    EXPECT_EQ(samples.back().stats.bytes, 5000u);
    EXPECT_EQ(rank.identity.pod, "job-1");
    EXPECT_EQ(job.reports_total, 10u);
  });
  EXPECT_TRUE(found);
  StoreStats s = store_.stats();
  EXPECT_EQ(s.jobs, 1u);
  EXPECT_EQ(s.ranks, 2u);
  EXPECT_EQ(s.connections, 4u);
  EXPECT_EQ(s.samples, 2u * (3u + 2u * 3u));
  std::string exposed = registry_.expose();
  EXPECT_NE(exposed.find("c4_ingest_store_ranks 2"), std::string::npos) << exposed;
}

TEST_F(ReportStoreTest, ForgetsConnectionsAbsentForTheHistoryAndCapsTheirNumber) {
  applyReports(1, 4);
  applyReports(2, 6);  // two over the cap of 4 per rank: not tracked
  store_.readJob("ns1", "job",
                 [](const JobRecord& job) { EXPECT_EQ(job.ranks.at(0).connections.size(), 4u); });
  applyReports(3, 1);
  applyReports(4, 1);
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    EXPECT_EQ(job.ranks.at(0).connections.size(), 4u);  // seen 2 reports ago: still kept
  });
  applyReports(5, 1);  // connections 2..4 were last in report 2, three reports ago
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    ASSERT_EQ(job.ranks.at(0).connections.size(), 1u);
    EXPECT_TRUE(job.ranks.at(0).connections.contains(1));
  });
}

// The store shares its reports with readers instead of copying them: a report that leaves the
// history stays whole for a reader still holding it, and a connection absent from the reports
// since keeps its sample of it.
TEST_F(ReportStoreTest, AReportLeavesTheHistoryWholeAndStaysValidWhereHeld) {
  applyReports(1, 2);
  auto held = store_.recentReports("ns1", "job", {});
  ASSERT_TRUE(held);
  const StoredReportPtr first = held->ranks.at(0).reports.back();
  held.reset();
  applyReports(2, 1);
  applyReports(3, 2);
  applyReports(4, 1);  // report 1 leaves the history of 3; connection 2 was in reports 1 and 3
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    const RankRecord& rank = job.ranks.at(0);
    ASSERT_EQ(rank.whole_reports.size(), 3u);
    EXPECT_EQ(rank.whole_reports.front()->header.seq, 2u);
    const auto& samples = rank.connections.at(2).samples;
    ASSERT_EQ(samples.size(), 2u);
    EXPECT_EQ(samples.front().report_seq, 1u);
    EXPECT_EQ(samples.front().stats.bytes, 1000u);
    EXPECT_EQ(samples.back().stats.bytes, 3000u);
  });
  EXPECT_EQ(first->header.seq, 1u);
  ASSERT_EQ(first->connections.size(), 2u);
  EXPECT_EQ(first->connections[1].id, 2u);
  EXPECT_EQ(first->connections[1].bytes, 1000u);
}

TEST_F(ReportStoreTest, AResentReportIsStoredOnce) {
  applyReports(1);
  applyReports(1);
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    EXPECT_EQ(job.ranks.at(0).reports_total, 1u);
    EXPECT_EQ(job.ranks.at(0).reports.size(), 1u);
  });
}

// recentReports: each rank's newest whole reports (header and the connections that came with
// it, a connection missing from a report missing from it too), the ranks' identities and
// progress, the anomalies after a bound and the reporting nodes' records.
TEST_F(ReportStoreTest, RecentReportsAreWholeReportsWithTheirNodes) {
  for (std::uint64_t seq = 1; seq <= 4; ++seq) {
    auto batch = nodeReport("node-a", seq, kT0);
    for (int r = 0; r < 2; ++r) {
      // Rank 1's report 4 carries only connection 1.
      const int connections = r == 1 && seq == 4 ? 1 : 2;
      batch.reports.push_back(rankReport(identity("ns1", "job", r, "node-a"), seq,
                                         kT0 + static_cast<std::int64_t>(seq), connections));
      batch.reports.back().communicators = {{0x5eed, 2, r, seq, seq - 1, 0, 0, seq, 1000}};
      batch.reports.back().last = r == 1 && seq == 4;  // rank 1's process ended in order
    }
    if (seq == 2 || seq == 4) {
      batch.notices.push_back(anomalyNotice(identity("ns1", "job", 1, "node-a"),
                                            kT0 + static_cast<std::int64_t>(seq),
                                            "a" + std::to_string(seq)));
    }
    store_.apply(batch, facts(), now(), 0);
    clock_.advance(std::chrono::seconds{1});
  }
  EXPECT_FALSE(store_.recentReports("ns1", "other", {}));
  RecentReportsQuery query;
  query.reports = 2;
  query.anomalies_after_seq = 1;  // a2, the first anomaly stored
  auto recent = store_.recentReports("ns1", "job", query);
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->ns, "ns1");
  EXPECT_EQ(recent->name, "job");
  EXPECT_EQ(recent->facts, facts().at(kJob));
  ASSERT_EQ(recent->ranks.size(), 2u);
  const RecentRank& rank = recent->ranks.at(1);
  EXPECT_EQ(rank.identity.pod, "job-1");
  EXPECT_EQ(rank.identity.node, "node-a");
  ASSERT_EQ(rank.reports.size(), 2u);
  EXPECT_EQ(rank.reports[0]->header.seq, 3u);
  EXPECT_EQ(rank.reports[1]->header.seq, 4u);
  EXPECT_EQ(rank.reports[1]->header.received, now() - std::chrono::seconds{1});
  ASSERT_EQ(rank.reports[0]->connections.size(), 2u);
  EXPECT_EQ(rank.reports[0]->connections[0].id, 1u);
  EXPECT_EQ(rank.reports[0]->connections[1].bytes, 3000u);
  ASSERT_EQ(rank.reports[1]->connections.size(), 1u) << "connection 2 was not in report 4";
  EXPECT_EQ(rank.reports[1]->connections[0].bytes, 4000u);
  ASSERT_EQ(rank.reports[1]->header.communicators.size(), 1u);
  EXPECT_EQ(rank.reports[1]->header.communicators[0].coll_entered, 4u);
  EXPECT_EQ(rank.reports[1]->header.communicators[0].rank, 1);
  EXPECT_FALSE(rank.reports[0]->header.last);
  EXPECT_TRUE(rank.reports[1]->header.last);
  EXPECT_FALSE(recent->ranks.at(0).reports[1]->header.last);
  ASSERT_EQ(recent->ranks.at(0).reports.size(), 2u);
  EXPECT_EQ(recent->ranks.at(0).reports[1]->connections.size(), 2u);
  ASSERT_EQ(recent->anomalies.size(), 1u);
  EXPECT_EQ(recent->anomalies[0].detail, "a4");
  EXPECT_EQ(recent->anomaly_seq, 2u);
  ASSERT_EQ(recent->nodes.size(), 1u);
  EXPECT_EQ(recent->nodes.at("node-a").batches, 4u);
  // More than the history asks for what there is.
  query.reports = 10;
  query.anomalies_after_seq = 0;
  recent = store_.recentReports("ns1", "job", query);
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->ranks.at(0).reports.size(), 3u);
  EXPECT_EQ(recent->anomalies.size(), 2u);
}

// Sender clocks order no evidence: each node's clock offset is estimated from its batches' stamps
// (the fastest delivery's sample), and anomaly stamps are moved onto the operator's clock.
TEST_F(ReportStoreTest, AnomalyTimesAreMovedOntoTheOperatorsClock) {
  ReportStoreConfig config = config_;
  config.max_anomalies_per_job = 8;
  config.max_nodes = 8;
  ReportStore store(config);
  const auto ahead = std::chrono::seconds{30};    // node-a's clock - the operator's
  const auto behind = std::chrono::seconds{-30};  // node-b's
  // A few batches each, sent 5 to 200 ms before they arrive, stamped by the node's clock.
  for (int i = 0; i < 4; ++i) {
    const std::chrono::milliseconds delay{i == 2 ? 5 : 200};
    store.apply(nodeReport("node-a", 1, toUnixNanos(now() - delay + ahead)), facts(), now(), 0);
    store.apply(nodeReport("node-b", 1, toUnixNanos(now() - delay + behind)), facts(), now(), 0);
    clock_.advance(std::chrono::seconds{1});
  }
  ASSERT_TRUE(store.node("node-a")->clock_offset_ns);
  EXPECT_EQ(*store.node("node-a")->clock_offset_ns,
            std::chrono::nanoseconds(-ahead + std::chrono::milliseconds{5}).count());
  EXPECT_EQ(*store.node("node-b")->clock_offset_ns,
            std::chrono::nanoseconds(-behind + std::chrono::milliseconds{5}).count());

  // Rank 0 on node-a sees its peer close 1 s before rank 1 on node-b does; by the senders'
  // stamps rank 1's came 59 s earlier. Both arrive now, in batches sent now: the fastest delivery
  // yet, so the estimates are now exact.
  const WallTime event_a = now() - std::chrono::seconds{3};
  const WallTime event_b = event_a + std::chrono::seconds{1};
  auto anomaly = [](const std::string& node, std::int32_t rank, WallTime stamp,
                    const std::string& detail) {
    return anomalyNotice(identity("ns1", "job", rank, node), toUnixNanos(stamp), detail);
  };
  auto a = nodeReport("node-a", 2, toUnixNanos(now() + ahead));
  a.notices.push_back(anomaly("node-a", 0, event_a + ahead, "a"));
  auto b = nodeReport("node-b", 2, toUnixNanos(now() + behind));
  b.notices.push_back(anomaly("node-b", 1, event_b + behind, "b"));
  // A stamp in the future of its own node's clock is clamped to its arrival.
  b.notices.push_back(anomaly("node-b", 1, now() + behind + std::chrono::hours{1}, "future"));
  // A node that sent no stamp yet: its anomaly takes its arrival time.
  auto c = nodeReport("node-c", 1, 0);
  c.notices.push_back(anomaly("node-c", 0, now() - std::chrono::minutes{5}, "unstamped"));
  store.apply(a, facts(), now(), 0);
  store.apply(b, facts(), now(), 0);
  store.apply(c, facts(), now(), 0);

  auto recent = store.recentReports("ns1", "job", {});
  ASSERT_TRUE(recent);
  ASSERT_EQ(recent->anomalies.size(), 4u);
  const auto at = [&](std::size_t i) { return fromUnixNanos(recent->anomalies[i].time_unix_ns); };
  EXPECT_EQ(recent->anomalies[0].detail, "a");
  EXPECT_EQ(at(0), event_a);
  EXPECT_EQ(recent->anomalies[1].detail, "b");
  EXPECT_EQ(at(1), event_b);
  EXPECT_EQ(recent->anomalies[2].detail, "future");
  EXPECT_EQ(at(2), now());
  EXPECT_EQ(recent->anomalies[3].detail, "unstamped");
  EXPECT_EQ(at(3), now());
  store.readJob("ns1", "job", [&](const JobRecord& job) {
    EXPECT_EQ(job.anomalies[1].sender_time_unix_ns, toUnixNanos(event_b + behind))
        << "the sender's stamp is kept";
  });
}

// Readers ask by arrival: an anomaly that arrives after a reader's last query is returned by the
// next one, even when it happened before everything the reader saw (a batch delayed in the node
// plugin's retries) or was stamped in the future.
TEST_F(ReportStoreTest, AnomaliesAreReadByArrivalNotByStamp) {
  auto send = [&](const std::string& node, std::int64_t stamp, const std::string& detail) {
    auto batch = nodeReport(node, 1, 0);
    batch.notices.push_back(anomalyNotice(identity("ns1", "job", 0, node), stamp, detail));
    store_.apply(batch, facts(), now(), 0);
  };
  send("node-a", toUnixNanos(now() + std::chrono::hours{1}), "future");
  auto first = store_.recentReports("ns1", "job", {});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->anomalies.size(), 1u);
  clock_.advance(std::chrono::seconds{1});
  send("node-b", toUnixNanos(now() - std::chrono::seconds{20}), "late");
  RecentReportsQuery next;
  next.anomalies_after_seq = first->anomaly_seq;
  auto second = store_.recentReports("ns1", "job", next);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->anomalies.size(), 1u);
  EXPECT_EQ(second->anomalies[0].detail, "late");
  next.anomalies_after_seq = second->anomaly_seq;
  auto third = store_.recentReports("ns1", "job", next);
  ASSERT_TRUE(third);
  EXPECT_TRUE(third->anomalies.empty());
  EXPECT_EQ(third->anomaly_seq, second->anomaly_seq);
}

TEST_F(ReportStoreTest, AnomaliesAndNodesAreBounded) {
  const std::vector<std::string> details = {"a0", "a1", "a2", "a3", "a4"};
  for (int i = 0; i < 5; ++i) {
    auto batch = nodeReport("node-" + std::to_string(i), 1, kT0);
    batch.notices.push_back(anomalyNotice(identity("ns1", "job", 0, "node-a"), kT0 + i,
                                          details[static_cast<std::size_t>(i)]));
    store_.apply(batch, facts(), now(), 0);
    clock_.advance(std::chrono::seconds{1});
  }
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    ASSERT_EQ(job.anomalies.size(), 2u);
    EXPECT_EQ(job.anomalies.front().notice.detail, "a3");
    EXPECT_EQ(job.anomalies.back().notice.detail, "a4");
    EXPECT_EQ(job.notices_total, 5u);
  });
  auto nodes = store_.nodes();
  ASSERT_EQ(nodes.size(), 2u);  // the longest silent went first
  EXPECT_EQ(nodes[0].name, "node-3");
  EXPECT_EQ(nodes[1].name, "node-4");
  EXPECT_FALSE(store_.node("node-0"));
}

// Sender clocks order nothing: the last notice received is the rank's state, timed by the
// operator's clock. A "checkpointing" stamped an hour ahead (a skewed or forged clock) neither
// outranks the "training" that follows it nor keeps a pause alive until its stamp.
TEST_F(ReportStoreTest, ProgressIsOrderedByArrivalAndTimedByTheOperator) {
  auto notice = [&](report::ProgressState state, std::int64_t stamp) {
    report::ProgressNotice p;
    p.id = identity("ns1", "job", 1, "node-a");
    p.time_unix_ns = stamp;
    p.step = 40;
    p.state = state;
    auto batch = nodeReport("node-a", 1, kT0);
    batch.notices.push_back(p);
    store_.apply(batch, facts(), now(), 0);
  };
  clock_.setWall(fromUnixNanos(kT0));
  const std::int64_t hourAhead = kT0 + 3600LL * 1'000'000'000;
  notice(report::ProgressState::kCheckpointing, hourAhead);
  store_.readJob("ns1", "job", [&](const JobRecord& job) {
    ASSERT_TRUE(job.ranks.at(1).progress);
    EXPECT_EQ(job.ranks.at(1).progress->state, report::ProgressState::kCheckpointing);
    EXPECT_EQ(job.ranks.at(1).progress->time_unix_ns, kT0) << "the pause ages from its receipt";
    ASSERT_TRUE(job.progress);
    EXPECT_EQ(job.progress->time_unix_ns, kT0);
  });
  clock_.advance(std::chrono::seconds{2});
  notice(report::ProgressState::kTraining, kT0);  // stamped before the future one
  store_.readJob("ns1", "job", [&](const JobRecord& job) {
    EXPECT_EQ(job.ranks.at(1).progress->state, report::ProgressState::kTraining);
    EXPECT_EQ(job.ranks.at(1).progress->time_unix_ns, kT0 + 2'000'000'000);
    EXPECT_EQ(job.progress->state, report::ProgressState::kTraining);
  });
}

// Last words a node plugin resends to an operator process that took over (NodeReport.replay):
// a dead rank's last report is as old as its stamp (on the operator's clock), not as new as its
// arrival, or the dead rank would read as reporting; a replayed state never replaces one heard
// here; a report already held is not stored twice. The control: the same report in a regular
// batch is timed by its arrival.
TEST_F(ReportStoreTest, AReplayedReportIsAsOldAsItsStampAndNeverReplacesAHeardState) {
  clock_.setWall(fromUnixNanos(kT0) + std::chrono::minutes{1});
  const auto ahead = std::chrono::seconds{30};  // node-a's clock - the operator's
  auto stamp = [&](WallTime t) { return toUnixNanos(t + ahead); };
  auto progress = [&](int rank, report::ProgressState state, WallTime at) {
    report::ProgressNotice p;
    p.id = identity("ns1", "job", rank, "node-a");
    p.time_unix_ns = stamp(at);
    p.step = 40;
    p.state = state;
    return p;
  };
  auto regular = nodeReport("node-a", 1, stamp(now()));
  regular.reports.push_back(rankReport(identity("ns1", "job", 0, "node-a"), 5, stamp(now())));
  regular.notices.push_back(progress(0, report::ProgressState::kTraining, now()));
  store_.apply(regular, facts(), now(), 0);
  clock_.advance(std::chrono::seconds{2});

  const WallTime last_said = now() - std::chrono::seconds{20};
  const WallTime last_state = now() - std::chrono::seconds{25};
  auto replay = nodeReport("node-a", 2, stamp(now()));
  replay.replay = true;
  replay.reports.push_back(rankReport(identity("ns1", "job", 1, "node-a"), 3, stamp(last_said)));
  replay.reports.push_back(rankReport(identity("ns1", "job", 0, "node-a"), 5, stamp(now())));
  replay.notices.push_back(progress(1, report::ProgressState::kTraining, last_state));
  replay.notices.push_back(progress(0, report::ProgressState::kFinished, last_state));
  store_.apply(replay, facts(), now(), 0);
  store_.readJob("ns1", "job", [&](const JobRecord& job) {
    const RankRecord& dead = job.ranks.at(1);
    EXPECT_EQ(dead.last_report, last_said) << "timed by its stamp, not by its arrival";
    ASSERT_EQ(dead.reports.size(), 1u);
    EXPECT_EQ(dead.reports.back().received, last_said);
    ASSERT_TRUE(dead.progress);
    EXPECT_EQ(dead.progress->state, report::ProgressState::kTraining);
    EXPECT_EQ(dead.progress->time_unix_ns, toUnixNanos(last_state));
    const RankRecord& heard = job.ranks.at(0);
    EXPECT_EQ(heard.reports_total, 1u) << "a report already held is not stored twice";
    ASSERT_TRUE(heard.progress);
    EXPECT_EQ(heard.progress->state, report::ProgressState::kTraining)
        << "a replayed state replaced the one heard here";
    ASSERT_TRUE(job.progress);
    EXPECT_EQ(job.progress->state, report::ProgressState::kTraining);
  });

  // A replayed report older than what the rank reported here since (a process of the same pod,
  // rank and attempt that runs now) is ignored: it would make the running one look silent.
  auto live = nodeReport("node-a", 3, stamp(now()));
  auto running = rankReport(identity("ns1", "job", 1, "node-a"), 1, stamp(now()));
  running.id.pid = 999;
  live.reports.push_back(running);
  store_.apply(live, facts(), now(), 0);
  auto late = nodeReport("node-a", 4, stamp(now()));
  late.replay = true;
  late.reports.push_back(rankReport(identity("ns1", "job", 1, "node-a"), 4, stamp(last_said)));
  store_.apply(late, facts(), now(), 0);
  store_.readJob("ns1", "job", [&](const JobRecord& job) {
    EXPECT_EQ(job.ranks.at(1).last_report, now());
    EXPECT_EQ(job.ranks.at(1).identity.pid, 999u) << "an old replayed report displaced a live one";
  });

  // The control: in a regular batch the same report reads as just received.
  ReportStore store(config_);
  store.apply(regular, facts(), now(), 0);
  replay.replay = false;
  store.apply(replay, facts(), now(), 0);
  store.readJob("ns1", "job",
                [&](const JobRecord& job) { EXPECT_EQ(job.ranks.at(1).last_report, now()); });
}

TEST_F(ReportStoreTest, NodeRecordKeepsTheLatestHealthAndCounters) {
  auto batch = nodeReport("node-a", 7, kT0);
  batch.dropped_messages = 3;
  batch.rejected_messages = 2;
  batch.health.gpus.push_back(report::GpuHealth{0, "GPU-1", false, "xid 79"});
  store_.apply(batch, {}, now(), 4);
  auto node = store_.node("node-a");
  ASSERT_TRUE(node);
  EXPECT_EQ(node->last_seq, 7u);
  EXPECT_EQ(node->batches, 1u);
  EXPECT_EQ(node->plugin_dropped, 3u);
  EXPECT_EQ(node->plugin_rejected, 2u);
  EXPECT_EQ(node->operator_dropped, 4u);
  EXPECT_EQ(node->health, batch.health);
  EXPECT_EQ(node->last_batch, now());
}

TEST_F(ReportStoreTest, ItemsOfUnknownJobsOrOtherAttemptsAreIgnored) {
  auto batch = nodeReport("node-a", 1, kT0);
  batch.reports.push_back(rankReport(identity("ns1", "other", 0, "node-a"), 1, kT0));
  batch.reports.push_back(rankReport(identity("ns1", "job", 0, "node-a", 1), 1, kT0));
  batch.reports.push_back(rankReport(identity("ns1", "job", 5, "node-a"), 1, kT0));  // >= world
  EXPECT_EQ(store_.apply(batch, facts(0), now(), 0), 3u);
  EXPECT_TRUE(store_.jobKeys().empty());
  EXPECT_EQ(store_.node("node-a")->operator_dropped, 3u);
}

TEST_F(ReportStoreTest, DropJobForgetsEverythingOfTheJob) {
  applyReports(1);
  checkpoint(0, 5);
  checkpoint(1, 5);
  ASSERT_TRUE(store_.checkpoint("ns1", "job"));
  store_.dropJob("ns1", "job");
  EXPECT_FALSE(store_.readJob("ns1", "job", [](const JobRecord&) {}));
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));
  EXPECT_EQ(store_.stats().ranks, 0u);
  EXPECT_TRUE(store_.node("node-a"));  // node data stays
}

TEST_F(ReportStoreTest, ANewAttemptOrUidReplacesTheJobsData) {
  applyReports(1);
  store_.observeJob("ns1", "job", JobFacts{"uid-1", 0, 2});  // same: nothing changes
  EXPECT_EQ(store_.stats().ranks, 2u);
  store_.observeJob("ns1", "job", JobFacts{"uid-1", 1, 2});  // the restart began
  EXPECT_EQ(store_.stats().ranks, 0u);
  EXPECT_TRUE(store_.jobKeys().empty());
  applyReports(2, 2, 1);
  store_.readJob("ns1", "job", [](const JobRecord& job) { EXPECT_EQ(job.facts.attempt, 1u); });
  // A batch of the new attempt arriving before the informer showed it replaces the old data too.
  auto batch = nodeReport("node-a", 3, kT0);
  batch.reports.push_back(rankReport(identity("ns1", "job", 0, "node-a", 2), 3, kT0));
  store_.apply(batch, facts(2), now(), 0);
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    EXPECT_EQ(job.facts.attempt, 2u);
    EXPECT_EQ(job.ranks.size(), 1u);
  });
  // The job recreated under the same name.
  store_.observeJob("ns1", "job", JobFacts{"uid-2", 0, 2});
  EXPECT_TRUE(store_.jobKeys().empty());
}

TEST_F(ReportStoreTest, NoCheckpointUntilEveryRankReportedIt) {
  std::vector<std::string> advanced;
  store_.setCheckpointListener([&](const std::string& key) { advanced.push_back(key); });
  checkpoint(0, 100);
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));
  checkpoint(0, 100);  // a repeat of rank 0 does not count twice
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));
  EXPECT_TRUE(advanced.empty());
  checkpoint(1, 100);
  auto cp = store_.checkpoint("ns1", "job");
  ASSERT_TRUE(cp);
  EXPECT_EQ(cp->step, 100);
  EXPECT_EQ(cp->path, "/ckpt/step-100/rank-0");  // rank 0's path
  EXPECT_EQ(cp->time, fromUnixNanos(kT0 + 100));
  EXPECT_EQ(advanced, std::vector<std::string>{kJob});
}

TEST_F(ReportStoreTest, TheCheckpointIsTheNewestStepCommonToAllRanks) {
  checkpoint(0, 10);
  checkpoint(0, 20);
  checkpoint(1, 10);
  ASSERT_EQ(store_.checkpoint("ns1", "job")->step, 10);
  checkpoint(0, 30);
  checkpoint(1, 30);  // rank 1 skipped 20: 30 is common
  ASSERT_EQ(store_.checkpoint("ns1", "job")->step, 30);
  checkpoint(1, 20);  // late: never moves back
  checkpoint(0, 20);
  EXPECT_EQ(store_.checkpoint("ns1", "job")->step, 30);
  // Rank 1 first, rank 0 last: still rank 0's path.
  checkpoint(1, 40);
  checkpoint(0, 40);
  EXPECT_EQ(store_.checkpoint("ns1", "job")->path, "/ckpt/step-40/rank-0");
}

TEST_F(ReportStoreTest, CheckpointMarksAreBoundedPerJob) {
  // Rank 0 races ahead over more steps than the store tracks; the oldest are forgotten.
  for (std::int64_t step = 1; step <= 6; ++step) checkpoint(0, step);
  checkpoint(1, 1);  // forgotten step: no checkpoint
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));
  checkpoint(1, 5);
  EXPECT_EQ(store_.checkpoint("ns1", "job")->step, 5);
}

TEST_F(ReportStoreTest, AnAttemptChangeStartsCheckpointsAfresh) {
  checkpoint(0, 10);
  checkpoint(1, 10);
  ASSERT_EQ(store_.checkpoint("ns1", "job")->step, 10);
  checkpoint(0, 20);  // attempt 0, rank 1 never gets there
  checkpoint(1, 20, /*attempt=*/1);
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));  // attempt 1 has no complete step yet
  checkpoint(0, 20, 1);
  auto cp = store_.checkpoint("ns1", "job");
  ASSERT_TRUE(cp);
  EXPECT_EQ(cp->step, 20);
  EXPECT_EQ(cp->attempt, 1u);
}

TEST_F(ReportStoreTest, SummaryShowsRanksReportingAndTheCheckpoint) {
  applyReports(1);
  checkpoint(0, 7);
  checkpoint(1, 7);
  Json s = store_.summary("ns1", "job");
  ASSERT_EQ(s["jobs"].size(), 1u);
  const Json& job = s["jobs"][0];
  EXPECT_EQ(job["ranksReporting"], 2);
  EXPECT_EQ(job["worldSize"], 2);
  EXPECT_EQ(job["reports"], 2);
  EXPECT_EQ(job["checkpoint"]["step"], 7);
  EXPECT_EQ(job["ranks"][1]["pod"], "job-1");
  EXPECT_EQ(s["nodes"][0]["node"], "node-a");
  EXPECT_TRUE(store_.summary("ns2", "")["jobs"].empty());
  EXPECT_EQ(store_.summary("", "")["jobs"].size(), 1u);
}

}  // namespace
}  // namespace c4::op::ingest
