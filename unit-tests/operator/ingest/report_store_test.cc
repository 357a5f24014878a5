// ReportStore: bounds (history, connections, anomalies, nodes), attempts and job deletion,
// checkpoint aggregation, the reader interface and the debug summary.
#include "operator/ingest/report_store.h"

#include <gtest/gtest.h>

#include "ingest_testing.h"

namespace c4::op::ingest {
namespace {

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
    }
    if (seq == 2 || seq == 4) {
      report::AnomalyNotice a;
      a.id = identity("ns1", "job", 1, "node-a");
      a.time_unix_ns = kT0 + static_cast<std::int64_t>(seq);
      a.detail = "a" + std::to_string(seq);
      batch.notices.push_back(a);
    }
    store_.apply(batch, facts(), now(), 0);
    clock_.advance(std::chrono::seconds{1});
  }
  EXPECT_FALSE(store_.recentReports("ns1", "other", {}));
  RecentReportsQuery query;
  query.reports = 2;
  query.anomalies_after_ns = kT0 + 2;
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
  EXPECT_EQ(rank.reports[0].header.seq, 3u);
  EXPECT_EQ(rank.reports[1].header.seq, 4u);
  EXPECT_EQ(rank.reports[1].header.received, now() - std::chrono::seconds{1});
  ASSERT_EQ(rank.reports[0].connections.size(), 2u);
  EXPECT_EQ(rank.reports[0].connections[0].id, 1u);
  EXPECT_EQ(rank.reports[0].connections[1].bytes, 3000u);
  ASSERT_EQ(rank.reports[1].connections.size(), 1u) << "connection 2 was not in report 4";
  EXPECT_EQ(rank.reports[1].connections[0].bytes, 4000u);
  ASSERT_EQ(recent->ranks.at(0).reports.size(), 2u);
  EXPECT_EQ(recent->ranks.at(0).reports[1].connections.size(), 2u);
  ASSERT_EQ(recent->anomalies.size(), 1u);
  EXPECT_EQ(recent->anomalies[0].detail, "a4");
  ASSERT_EQ(recent->nodes.size(), 1u);
  EXPECT_EQ(recent->nodes.at("node-a").batches, 4u);
  // More than the history asks for what there is.
  query.reports = 10;
  query.anomalies_after_ns = std::numeric_limits<std::int64_t>::min();
  recent = store_.recentReports("ns1", "job", query);
  ASSERT_TRUE(recent);
  EXPECT_EQ(recent->ranks.at(0).reports.size(), 3u);
  EXPECT_EQ(recent->anomalies.size(), 2u);
}

TEST_F(ReportStoreTest, AnomaliesAndNodesAreBounded) {
  const std::vector<std::string> details = {"a0", "a1", "a2", "a3", "a4"};
  for (int i = 0; i < 5; ++i) {
    auto batch = nodeReport("node-" + std::to_string(i), 1, kT0);
    report::AnomalyNotice a;
    a.id = identity("ns1", "job", 0, "node-a");
    a.time_unix_ns = kT0 + i;
    a.detail = details[static_cast<std::size_t>(i)];
    batch.notices.push_back(a);
    store_.apply(batch, facts(), now(), 0);
    clock_.advance(std::chrono::seconds{1});
  }
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    ASSERT_EQ(job.anomalies.size(), 2u);
    EXPECT_EQ(job.anomalies.front().detail, "a3");
    EXPECT_EQ(job.anomalies.back().detail, "a4");
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
