// The non-communication hang found from collective progress alone (profiler telemetry): four
// ranks on two nodes whose only communicator runs over NVLink/SHM, so no report carries a
// connection. Snapshots are built by hand, one per simulated second.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "operator/c4d/analyser.h"

namespace c4::c4d {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kComm = 0x5eed;

class CommJob {
 public:
  // `ranks` ranks, two per node.
  explicit CommJob(bool communicators, int ranks = 4)
      : communicators_(communicators), telemetry_(static_cast<std::size_t>(ranks / 2), true) {
    for (int r = 0; r < ranks; ++r) ranks_.push_back(Rank{});
  }
  // Whether node `i`'s node plugin delivers its batches (its ranks' reports and its health).
  void setNodeTelemetry(int i, bool arriving) {
    telemetry_[static_cast<std::size_t>(i)] = arriving;
  }
  // Each rank also reports a ring's connections (profiler telemetry over a network transport):
  // it sends to rank + 1 and receives from rank - 1.
  void useRing() { ring_ = true; }

  // One second: every rank that is not stuck enters the next collective; all finish it unless
  // someone has not arrived.
  void step() {
    now_ += std::chrono::seconds{1};
    const std::uint64_t next = newest() + 1;
    bool all_arrive = true;
    for (const Rank& r : ranks_) all_arrive = all_arrive && !r.stuck && !r.frozen;
    for (Rank& r : ranks_) {
      if (r.stuck || r.frozen) continue;
      if (all_arrive) {
        r.entered = r.finished = next;
        r.waiting_since.reset();
      } else if (r.entered < next && r.entered == r.finished) {
        r.entered = next;  // enters and waits for the one that has not arrived
        r.waiting_since = now_;
      }
    }
  }

  // What the analyser gets this second.
  JobSnapshot snapshot() {
    JobSnapshot s;
    s.ns = "team";
    s.name = "llm";
    s.world_size = static_cast<std::int32_t>(ranks_.size());
    s.nodes.resize(telemetry_.size());
    for (std::size_t i = 0; i < telemetry_.size(); ++i) {
      s.nodes[i].name = "node-" + std::to_string(i);
      s.nodes[i].telemetry_arriving = telemetry_[i];
    }
    for (int i = 0; i < s.world_size; ++i) {
      Rank& r = ranks_[static_cast<std::size_t>(i)];
      if (!r.frozen && telemetry_[static_cast<std::size_t>(i / 2)]) {
        ReportSample sample;
        sample.time = now_;
        if (communicators_) {
          report::CommunicatorProgress c;
          c.comm_hash = kComm;
          c.nranks = static_cast<std::int32_t>(ranks_.size());
          c.rank = i;
          c.coll_entered = r.entered;
          c.coll_finished = r.finished;
          c.last_coll_seq = r.entered;
          if (r.waiting_since) {
            c.oldest_unfinished_us = static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::microseconds>(now_ - *r.waiting_since)
                    .count());
          }
          sample.communicators.push_back(c);
          if (ring_) {
            const int n = static_cast<int>(ranks_.size());
            const auto bytes = r.finished * 1'000'000;
            ConnSample send;
            send.id = 1;
            send.direction = report::Direction::kSend;
            send.peer_rank = (i + 1) % n;
            send.bytes = send.wire_bytes = bytes;
            send.ops = r.finished;
            ConnSample recv = send;
            recv.id = 2;
            recv.direction = report::Direction::kRecv;
            recv.peer_rank = (i + n - 1) % n;
            sample.connections = {send, recv};
          }
          if (r.busy_elsewhere) {
            report::CommunicatorProgress other = c;
            other.comm_hash = kComm + 1;
            other.nranks = 2;
            other.rank = 0;
            other.coll_entered = 1;
            other.coll_finished = 0;
            other.oldest_unfinished_us = 20'000'000;
            sample.communicators.push_back(other);
          }
        }
        r.reports.push_back(std::move(sample));
        if (r.reports.size() > 3) r.reports.erase(r.reports.begin());
      }
      RankSnapshot rs;
      rs.node = i / 2;
      rs.pod = "llm-" + std::to_string(i);
      rs.pod_state = PodState::kRunning;
      // A process that ends in order marks its newest report its last (RankReport.last).
      if (r.exit_pending && r.sends_last && !r.reports.empty()) {
        r.reports.back().last = true;
        if (r.last_without_connections) r.reports.back().connections.clear();
      }
      rs.reports = r.reports;
      if (r.progress) rs.progress = ProgressSample{*r.progress, 100, now_};
      if (r.exit_pending) {  // the node plugin's notice, delivered once
        AnomalySample a;
        a.kind = report::AnomalyKind::kProcessExited;
        a.time = now_ + r.exit_delay;
        rs.anomalies.push_back(a);
        r.exit_pending = false;
        if (r.closed_by >= 0) {  // what the net plugin says of the peer that closed first
          AnomalySample closed;
          closed.kind = report::AnomalyKind::kPeerClosed;
          closed.peer_rank = r.closed_by;
          closed.time = now_;
          rs.anomalies.push_back(closed);
        }
      }
      s.ranks.push_back(std::move(rs));
    }
    return s;
  }

  // Runs `seconds` windows; the verdicts confirmed on the way.
  std::vector<Verdict> run(int seconds) {
    std::vector<Verdict> out;
    for (int i = 0; i < seconds; ++i) {
      step();
      auto result = analyser_.tick(snapshot(), now_);
      EXPECT_TRUE(result.has_value()) << result.error().toString();
      if (!result) break;
      for (auto& v : result->verdicts) out.push_back(std::move(v));
      for (auto& o : result->observations) observations_.push_back(std::move(o));
      if (!out.empty() && first_ == 0) first_ = i + 1;
    }
    return out;
  }

  struct Rank {
    std::uint64_t entered = 0;
    std::uint64_t finished = 0;
    std::optional<WallTime> waiting_since;
    bool stuck = false;           // alive, reporting, never enters the next collective
    bool frozen = false;          // stopped: no more reports (SIGSTOP)
    bool busy_elsewhere = false;  // waits in another communicator
    bool exit_pending = false;    // its process exited: the node plugin's notice is on its way
    std::chrono::milliseconds exit_delay{0};        // when, after the second's start
    std::optional<report::ProgressState> progress;  // what its progress notices said last
    std::int32_t closed_by = -1;  // with its exit, it reported this peer's connection closed
    bool sends_last = false;      // it exits in order: its newest report is its last
    bool last_without_connections = false;  // ... and carries no connections
    std::vector<ReportSample> reports;
  };
  Rank& rank(int r) { return ranks_[static_cast<std::size_t>(r)]; }
  int firstVerdictAfter() const { return first_; }
  // Marks every rank's newest report its last (RankReport.last) without an exit.
  void markLastReports() {
    for (Rank& r : ranks_) {
      if (!r.reports.empty()) r.reports.back().last = true;
    }
  }
  // Every observation of the ticks run so far.
  const std::vector<Observation>& observations() const { return observations_; }

 private:
  std::uint64_t newest() const {
    std::uint64_t n = 0;
    for (const Rank& r : ranks_) n = std::max(n, r.entered);
    return n;
  }

  bool communicators_;
  bool ring_ = false;
  std::vector<bool> telemetry_;  // per node
  WallTime now_ = WallTime{} + std::chrono::hours{490'000};
  std::vector<Rank> ranks_;
  JobAnalyser analyser_;
  int first_ = 0;
  std::vector<Observation> observations_;
};

// Every rank stops and exits: rank 2 first, the others 70 ms later (a cascade over sockets).
void exitRank2ThenTheOthers(CommJob& job) {
  for (int r = 0; r < 4; ++r) {
    job.rank(r).frozen = true;
    job.rank(r).exit_pending = true;
    job.rank(r).exit_delay = std::chrono::milliseconds{r == 2 ? 0 : 150};
  }
}

TEST(CollectiveProgress, AHealthyJobOverNvlinkHasNoVerdict) {
  CommJob job(true);
  EXPECT_TRUE(job.run(60).empty());
}

TEST(CollectiveProgress, ARankThatNeverEntersTheNextCollectiveIsANonCommunicationHang) {
  CommJob job(true);
  ASSERT_TRUE(job.run(10).empty());
  job.rank(2).stuck = true;
  const auto v = job.run(30);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key(), "nonCommHang/node/node-1");
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_EQ(v[0].action, Action::kCordonAndRestart);
  EXPECT_THAT(v[0].evidence.message, HasSubstr("has not entered it (it entered 10)"));
  EXPECT_THAT(v[0].evidence.message,
              HasSubstr("3 of 3 other ranks of communicator 0000000000005eed wait in "
                        "collective #11"));
  EXPECT_EQ(v[0].evidence.number("collectivesBehind"), 1.0);
  // hangSeconds (10 s) of waiting, then the confirmation windows.
  EXPECT_GE(job.firstVerdictAfter(), 10);
  EXPECT_LE(job.firstVerdictAfter(), 14);
}

// The control: the same hang with net-plugin telemetry only (no communicators) shows nothing
// over NVLink.
TEST(CollectiveProgress, WithoutCommunicatorsTheSameHangIsInvisible) {
  CommJob job(false);
  ASSERT_TRUE(job.run(10).empty());
  job.rank(2).stuck = true;
  EXPECT_TRUE(job.run(30).empty());
}

TEST(CollectiveProgress, AFrozenMemberIsFoundAfterSilenceSeconds) {
  CommJob job(true);
  ASSERT_TRUE(job.run(10).empty());
  job.rank(1).frozen = true;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key(), "nonCommHang/node/node-0");
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{1});
  EXPECT_THAT(v[0].evidence.message, HasSubstr("stopped reporting"));
  EXPECT_LE(job.firstVerdictAfter(), 7);
}

// A rank whose process died while its pod stays up (an MPI-style worker): the node plugin saw
// the exit and its peers wait for it in the collective. A crash of that rank, restarted without a
// cordon (no node evidence) — not a hang of its node.
TEST(CollectiveProgress, ARankWhoseProcessExitedWhileItsPeersWaitIsACrash) {
  CommJob job(true);
  ASSERT_TRUE(job.run(10).empty());
  job.rank(1).frozen = true;
  job.rank(1).exit_pending = true;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].fault_class, FaultClass::kCrash);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{1});
  EXPECT_EQ(v[0].action, Action::kRestartOnly);
  EXPECT_THAT(v[0].evidence.message, HasSubstr("process exited"));
  EXPECT_THAT(v[0].evidence.message, HasSubstr("3 other rank(s) wait for it"));
  EXPECT_EQ(v[0].evidence.number("processExited"), 1.0);
  EXPECT_LE(job.firstVerdictAfter(), 7);
}

// The control: every rank exits (the job ended, its pods still up): nobody waits, no verdict.
// ... and no missing telemetry either: the ranks' pods still run (an MPI-style worker stays up),
// but the node plugin saw their processes exit. The control: the same ranks silent without an
// exit are telemetry missing.
TEST(CollectiveProgress, EveryRankExitingIsNoVerdictAndNoMissingTelemetry) {
  for (const bool exits : {true, false}) {
    CommJob job(true);
    ASSERT_TRUE(job.run(10).empty());
    for (int r = 0; r < 4; ++r) {
      job.rank(r).frozen = true;
      job.rank(r).exit_pending = exits;
    }
    EXPECT_TRUE(job.run(30).empty());
    const auto& obs = job.observations();
    const bool missing = std::any_of(obs.begin(), obs.end(), [](const Observation& o) {
      return o.kind == ObservationKind::kTelemetryMissing;
    });
    EXPECT_EQ(missing, !exits) << (exits ? "exited ranks read as missing telemetry"
                                         : "the control saw no missing telemetry");
  }
}

// A rank that ended its telemetry in order (its last report) and goes on without NCCL is not
// missing telemetry either, though the node plugin saw no exit.
TEST(CollectiveProgress, ARankThatEndedItsTelemetryInOrderIsNotMissing) {
  CommJob job(true);
  ASSERT_TRUE(job.run(10).empty());
  for (int r = 0; r < 4; ++r) job.rank(r).frozen = true;
  // The newest report of each is its last (the profiler's last finalize), no exit.
  job.markLastReports();
  EXPECT_TRUE(job.run(30).empty());
  for (const Observation& o : job.observations()) {
    EXPECT_NE(o.kind, ObservationKind::kTelemetryMissing) << o.message;
  }
}

// Over NCCL's socket transport the peers of a killed rank die of its closed connections within
// milliseconds: nobody is left waiting. Ranks that said they were training (progress notices)
// and exited without saying they finished crashed; the first to exit is the culprit, the others
// (150 ms later) its victims.
TEST(CollectiveProgress, TheFirstOfACascadeOfExitsMidTrainingIsTheCrash) {
  CommJob job(true);
  for (int r = 0; r < 4; ++r) job.rank(r).progress = report::ProgressState::kTraining;
  ASSERT_TRUE(job.run(10).empty());
  exitRank2ThenTheOthers(job);
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].fault_class, FaultClass::kCrash);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_EQ(v[0].action, Action::kRestartOnly);
  EXPECT_THAT(v[0].evidence.message, HasSubstr("had not said it finished"));
  EXPECT_THAT(v[0].evidence.message, HasSubstr("3 other rank(s) exited with or after it"));
}

// Eight ranks on a ring, training for 10 s; then every rank stops and exits, rank r
// `delayMs(r)` ms after the second's start (what its node plugin saw).
template <typename DelayMs>
void ringExitsMidTraining(CommJob& job, DelayMs delayMs) {
  job.useRing();
  for (int r = 0; r < 8; ++r) job.rank(r).progress = report::ProgressState::kTraining;
  ASSERT_TRUE(job.run(10).empty());
  for (int r = 0; r < 8; ++r) {
    job.rank(r).frozen = true;
    job.rank(r).exit_pending = true;
    job.rank(r).exit_delay = std::chrono::milliseconds{delayMs(r)};
  }
}

// The killed rank's ring neighbours die of its closed connections within a millisecond; the node
// plugins see the three exits in an order their scheduling chose (here the left neighbour first,
// the killed rank 1 ms later). Time cannot order them; the connections can: one rank joined to
// both others explains their exits, and only it is the crash.
TEST(CollectiveProgress, OfExitsTooCloseToOrderTheOneJoinedToTheOthersIsTheCrash) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) { return r == 1 ? 0 : r == 2 ? 1 : r == 3 ? 2 : 300; });
  if (HasFatalFailure()) return;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].fault_class, FaultClass::kCrash);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_THAT(v[0].evidence.message, HasSubstr("7 other rank(s) exited with or after it"));
}

// Five exits within 4 ms, each joined to the next: one cascade, so one crash (the one its order
// and connections name), not one per rank left over once the first one's neighbours are settled.
TEST(CollectiveProgress, ExitsTooCloseToOrderJoinedThroughEachOtherAreOneCrash) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) {
    return r == 3 ? 0 : r == 2 ? 1 : r == 4 ? 2 : r == 1 ? 3 : r == 5 ? 4 : 300;
  });
  if (HasFatalFailure()) return;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{3});
  EXPECT_THAT(v[0].evidence.message, HasSubstr("7 other rank(s) exited with or after it"));
}

// The node plugins stamped the killed rank 2 after its neighbours (3 first, 2 five ms later):
// time and connections both point at rank 3, the one joined to both. But the victims exited
// through exit() and sent their last reports; rank 2, killed, sent none. It is the crash.
TEST(CollectiveProgress, OfExitsTooCloseToOrderTheOneWithoutALastReportIsTheCrash) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) {
    return r == 3 ? 0 : r == 2 ? 5 : r == 4 ? 8 : r == 1 ? 10 : 300;
  });
  if (HasFatalFailure()) return;
  for (int r = 0; r < 8; ++r) job.rank(r).sends_last = r != 2;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].fault_class, FaultClass::kCrash);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_THAT(v[0].evidence.message, HasSubstr("it sent no last report (killed or crashed) while "
                                               "7 of them ended theirs in order"));
  EXPECT_EQ(v[0].evidence.number("lastReport"), 0.0);
}

// What the profiler e2e saw: the killed rank 2 stamped 20 ms after its neighbour 3, the other
// victims 60-85 ms after it, and the victims' last reports carrying no connections (sent after
// their communicators were gone), so no edge joins them. Each must not be a cascade of its own:
// they ended in order while rank 2 vanished; rank 2 alone is the crash.
TEST(CollectiveProgress, AVanishedRankAmongExitsThatEndedInOrderIsTheCrashEvenWithoutEdges) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) { return r == 3 ? 0 : r == 2 ? 20 : 60 + 3 * r; });
  if (HasFatalFailure()) return;
  for (int r = 0; r < 8; ++r) {
    job.rank(r).sends_last = r != 2;
    job.rank(r).last_without_connections = true;
  }
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_THAT(v[0].evidence.message, HasSubstr("7 other rank(s) exited with or after it"));
}

// The reverse: rank 2 raised an error of its own and left through exit() (a last report); its
// victims aborted (none), one of them stamped first. The odd ending names the cause.
TEST(CollectiveProgress, AnExitInOrderAmongAbortedVictimsIsTheCrash) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) { return r == 3 ? 0 : r == 2 ? 5 : 8 + 3 * r; });
  if (HasFatalFailure()) return;
  job.rank(2).sends_last = true;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
  EXPECT_THAT(v[0].evidence.message,
              HasSubstr("it ended its telemetry in order (an exit of its own) while 7 of them"));
  EXPECT_EQ(v[0].evidence.number("lastReport"), 1.0);
}

// Two ranks killed at once among victims that left through exit(): both vanished, both crashes.
TEST(CollectiveProgress, TwoVanishedRanksAmongOrderlyExitsAreTwoCrashes) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) { return r == 2 ? 0 : r == 6 ? 2 : 10 + r; });
  if (HasFatalFailure()) return;
  for (int r = 0; r < 8; ++r) job.rank(r).sends_last = r != 2 && r != 6;
  std::vector<std::int32_t> culprits;
  for (const auto& verdict : job.run(15)) {
    culprits.insert(culprits.end(), verdict.ranks.begin(), verdict.ranks.end());
  }
  std::sort(culprits.begin(), culprits.end());
  EXPECT_EQ(culprits, (std::vector<std::int32_t>{2, 6}));
}

// The control: the same exits where every rank sent its last report (rank 2 left through an
// exception of its own, say): nothing tells rank 2 apart, and time and connections name rank 3.
TEST(CollectiveProgress, WhenEveryTiedExitSentItsLastReportTimeAndConnectionsDecide) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) {
    return r == 3 ? 0 : r == 2 ? 5 : r == 4 ? 8 : r == 1 ? 10 : 300;
  });
  if (HasFatalFailure()) return;
  for (int r = 0; r < 8; ++r) job.rank(r).sends_last = true;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{3});
  EXPECT_EQ(v[0].evidence.number("lastReport"), 1.0);
}

// Two ranks killed at once, far apart on the ring, with their neighbours: each explains its own
// neighbours' exits, so both are crashes.
TEST(CollectiveProgress, TwoSimultaneousKillsAreTwoCrashes) {
  CommJob job(true, 8);
  ringExitsMidTraining(job, [](int r) { return r == 2 || r == 6 ? 1 : r % 2 ? 0 : 300; });
  if (HasFatalFailure()) return;
  auto v = job.run(15);
  std::vector<std::int32_t> culprits;
  for (const auto& verdict : v) {
    EXPECT_EQ(verdict.fault_class, FaultClass::kCrash);
    culprits.insert(culprits.end(), verdict.ranks.begin(), verdict.ranks.end());
  }
  std::sort(culprits.begin(), culprits.end());
  EXPECT_EQ(culprits, (std::vector<std::int32_t>{2, 6}));
}

// Net-plugin telemetry: the peers also report the killed rank's connections closed, which names
// it by the older rule; their own exits, 150 ms later, stay victims of it.
TEST(CollectiveProgress, ExitsAfterAnAccusedCrashAreItsVictims) {
  CommJob job(true);
  for (int r = 0; r < 4; ++r) job.rank(r).progress = report::ProgressState::kTraining;
  ASSERT_TRUE(job.run(10).empty());
  exitRank2ThenTheOthers(job);
  for (int r : {0, 1, 3}) job.rank(r).closed_by = 2;
  const auto v = job.run(15);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].fault_class, FaultClass::kCrash);
  EXPECT_EQ(v[0].ranks, std::vector<std::int32_t>{2});
}

// The control: the same exits after every rank said it finished are the job's end.
TEST(CollectiveProgress, ExitsAfterFinishedAreNoVerdict) {
  CommJob job(true);
  for (int r = 0; r < 4; ++r) job.rank(r).progress = report::ProgressState::kFinished;
  ASSERT_TRUE(job.run(10).empty());
  exitRank2ThenTheOthers(job);
  EXPECT_TRUE(job.run(30).empty());
}

// A node plugin restarting (its ranks silent, its telemetry missing) while a rank on another node
// really hangs: the silent ranks look behind in the collective, but their silence is no evidence.
// It lowers no threshold and names no culprit; the real root is named after hangSeconds.
TEST(CollectiveProgress, ATelemetryGapIsNoEvidenceAgainstItsNode) {
  CommJob job(true, 8);
  ASSERT_TRUE(job.run(10).empty());
  job.setNodeTelemetry(0, false);
  job.rank(7).stuck = true;
  const auto v = job.run(20);
  ASSERT_FALSE(v.empty());
  for (const auto& verdict : v) {
    EXPECT_EQ(verdict.key(), "nonCommHang/node/node-3") << verdict.evidence.message;
  }
  EXPECT_GE(job.firstVerdictAfter(), 10) << "the real root's hangSeconds, not silenceSeconds";
}

// A member behind in one communicator but waiting in another waits on someone else: it is not
// the root.
TEST(CollectiveProgress, AMemberWaitingInAnotherCommunicatorIsNotTheRoot) {
  CommJob job(true);
  ASSERT_TRUE(job.run(10).empty());
  job.rank(2).stuck = true;
  job.rank(2).busy_elsewhere = true;
  for (const auto& v : job.run(30)) {
    EXPECT_EQ(std::find(v.ranks.begin(), v.ranks.end(), 2), v.ranks.end()) << v.key();
  }
}

}  // namespace
}  // namespace c4::c4d
