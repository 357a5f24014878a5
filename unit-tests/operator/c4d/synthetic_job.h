// A synthetic training job for the analyser's tests: N ranks on nodes, exchanging bytes window
// by window over rings (a bidirectional ring, plus optional strided rings), producing the
// JobSnapshot a report store would build, with injectable faults.
//
// Model of one window (1 s) of a healthy job: every edge (src -> dst) carries about
// `bytesPerWindow` bytes in ~20 ops; transfer time = bytes / link rate; the receiver's wait share
// (posted -> first byte, / window) is `baseWaitShare`; every value is jittered by ±`jitter`
// independently per edge and window; a few ops are in flight with ages below 50 ms. Reports reach
// the store up to 300 ms late. Faults change the model:
//   straggler(r, f): the job runs at r's pace; r's peers wait on it (extra wait share
//     c(f-1)/(cf+1-c), c = 0.5 compute share), r waits on nobody; bytes per window drop.
//   slowLink / slowNic (factor): transfer time on the affected edges / factor; the others wait
//     for them; bytes per window drop.
//   freeze(r): r stops reporting (SIGSTOP), its pod runs; r's receivers wait on it, its senders
//     have ops queued towards it, everyone else waits on its upstream.
//   busyHang(r): as freeze, but r keeps reporting with nothing in flight.
//   blackhole(a, b) / killNic(x): the edges crossing that link / node have ops in flight at both
//     ends and no bytes move; everyone else waits.
//   crash(r): r stops reporting, its neighbours report kPeerClosed, its pod turns Failed after a
//     lag (several ranks may crash, each with its own lag); optionally every other rank dies two
//     windows later (an NCCL abort cascade).
//   pluginOutage(x): node x's node plugin is down: its ranks' reports stop, traffic flows.
//   pause(): every rank announces a checkpoint; traffic stops, receives stay posted.
//   idle(): nobody posts anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "operator/c4d/snapshot.h"

namespace c4::c4d::testing {

struct JobSpec {
  int nodes = 8;
  int ranks_per_node = 2;
  // Extra bidirectional rings with strides 3, 5, 7, ... (0: the plain ring, 2 send + 2 recv
  // connections per rank; 2: 6 + 6).
  int extra_rings = 0;
  double jitter = 0.3;
  std::uint64_t seed = 1;
  double bytes_per_window = 200e6;
  double link_bytes_per_sec = 2e9;
  double base_wait_share = 0.1;
  int start_spread_windows = 2;  // ranks start reporting within this many windows of the start
  int report_history = 3;        // K reports kept per rank
  Thresholds thresholds;
};

class SyntheticJob {
 public:
  explicit SyntheticJob(JobSpec spec);

  int worldSize() const { return static_cast<int>(ranks_.size()); }
  int nodeOfRank(int rank) const { return rank / spec_.ranks_per_node; }
  static std::string nodeName(int node);
  // Receivers of `rank`'s sends (ascending).
  std::vector<int> sendPeers(int rank) const;

  // Faults (take effect at the next step()).
  void straggler(int rank, double computeFactor);
  void slowLink(int nodeA, int nodeB, double factor);
  void slowNic(int node, double factor);
  void freeze(int rank);
  void busyHang(int rank);
  void blackhole(int nodeA, int nodeB);
  void killNic(int node);
  void crash(int rank, int podLagWindows, bool cascade = false);
  void pluginOutage(int node);
  // Rank `rank` pauses (a checkpoint): the ring stalls behind it. `announcedBy`: who sends the
  // pause state, -1 every rank (a job-wide checkpoint), else that rank alone.
  // `expectedSeconds`: the pause's announced length (0: not said).
  void pause(report::ProgressState state = report::ProgressState::kCheckpointing, int rank = 0,
             int announcedBy = -1, double expectedSeconds = 0.0);
  // Back to training. backlogLagWindows >= 0: the receives that waited through the pause
  // complete then, and the reports carrying those waits (the pause's length on every receiver
  // but the paused rank) are the ones of the two windows backlogLagWindows after the resume.
  void resume(int backlogLagWindows = -1);
  void idle();
  void healAll();     // back to healthy traffic (faults cleared, pods running)
  void newAttempt();  // restart: attempt + 1, new connections, counters from 0
  void setNodeFault(int node, bool nicDown, bool gpuFault, std::string detail);
  void setRepeatOffender(int node, double score);
  Thresholds& thresholds() { return snap_.thresholds; }

  // Advances one window and rebuilds the snapshot.
  void step();
  const JobSnapshot& snapshot() const { return snap_; }
  WallTime now() const { return now_; }

 private:
  enum class Mode { kFlow, kStalled, kPaused, kIdle };
  struct GEdge {
    int src = 0, dst = 0;
    std::uint64_t send_id = 0, recv_id = 0;
    std::uint64_t send_bytes = 0, recv_bytes = 0, send_ops = 0, recv_ops = 0;
    double slow_factor = 1.0;  // transfer rate multiplier
    bool blocked = false;      // stalled with ops at both ends (dead link)
  };
  struct GRank {
    int start_window = 0;
    bool reporting = true;  // its reports reach the store
    bool hung_busy = false;
    std::vector<int> out, in;  // edge indices
    std::vector<ReportSample> history;
    std::vector<AnomalySample> pending_anomalies;
    PodState pod = PodState::kRunning;
    std::optional<ProgressSample> progress;
  };

  double jit();
  void buildEdges();
  void enterStall();
  ConnSample sendSample(const GEdge& e, double windowBytes, bool flowing) const;

  JobSpec spec_;
  std::mt19937_64 rng_;
  JobSnapshot snap_;
  std::vector<GRank> ranks_;
  std::vector<GEdge> edges_;
  WallTime now_;
  std::int64_t window_ = 0;
  std::int64_t attempt_start_window_ = 0;
  std::uint64_t next_conn_id_ = 1;
  Mode mode_ = Mode::kFlow;
  WallTime stall_since_{};
  int straggler_rank_ = -1;
  double straggler_factor_ = 1.0;
  int frozen_rank_ = -1;
  std::map<int, std::int64_t> crashed_;  // crashed rank -> the window its pod turns Failed
  int paused_rank_ = 0;
  std::int64_t backlog_from_ = -1;  // windows whose receives carry the pause's waits
  std::int64_t backlog_to_ = -1;
  double backlog_us_ = 0.0;
  std::int64_t cascade_window_ = -1;
};

// The RankReport a rank's plugin would have sent for `sample` (what the analyser's snapshot was
// made from): for tests that feed a synthetic job's windows through the report store.
report::RankReport rankReportOf(const ReportSample& sample, report::RankIdentity id,
                                std::uint64_t seq);

}  // namespace c4::c4d::testing
