// The analyser's input: an immutable picture of one TrainingJob at one moment, built by the
// caller (the ingest report store) every window, and the detection thresholds.
//
// Everything is plain data so the store can fill it cheaply: ranks are indexed 0..world_size-1,
// nodes are referenced by index into JobSnapshot::nodes, connections are compact copies of
// report::ConnectionStats (no names, no subflows). Times are wall time (the senders' Unix time,
// as carried by the reports); `now` is given to the analyser with each snapshot.
//
// Contract for the filler:
//   - reports: the newest RankReports of the rank for the current attempt, oldest first, newest
//     last (the analyser uses the newest two; more are allowed, fewer mean "not measurable yet").
//     A report split into parts is merged into one sample. Empty = never reported.
//   - anomalies: AnomalyNotices received since the previous tick (the analyser remembers them).
//   - progress: the rank's newest ProgressNotice, if any.
//   - nodes[i]: one entry per node that hosts a rank, with its health summary and whether the
//     node plugin's batches are arriving.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/report.h"

namespace c4::c4d {

// Detection thresholds (TrainingJob spec `faultTolerance`; the defaults below are the documented
// ones, see docs/c4d.md).
struct Thresholds {
  double window_seconds = 1.0;   // the analysis window (one tick)
  double silence_seconds = 3.0;  // a rank whose newest report is older than this is silent
  double hang_seconds = 10.0;    // ops waiting with no byte progress this long = hang
  double slow_factor = 4.0;      // a connection slower than median / slowFactor is slow
  // ... and, in a job quieter than that allows for, one slower than the reference times
  // 1 - slowNoiseSigmas x the job's noise (at most 0.6; docs/c4d.md). 0: slowFactor alone.
  double slow_noise_sigmas = 4.0;
  double straggler_factor = 3.0;    // a rank's lateness above this x the job's noise = straggler
  double min_lateness_share = 0.1;  // ... and above this share of the window
  // ... and slowing the job down at least this much (a milder lateness is within the noise of a
  // busy job, and costs less than anything done about it)
  double min_straggler_slowdown = 1.25;
  int confirmation_windows = 2;  // consecutive windows a finding must persist
  int clear_windows = 3;         // consecutive windows without it before a verdict clears
  int warmup_windows = 3;        // windows after an attempt starts with no rate-based rules
  int min_peers_evidence = 2;    // peers that must show the syndrome (capped at the degree)
  std::uint64_t min_measure_bytes = 1 << 20;  // bytes a connection must carry to be measured
  // ... and transfer time it must spend in the window: a rate over a few microseconds of
  // copies into socket buffers says nothing about the link.
  double min_measure_transfer_seconds = 0.01;
  double pause_grace_seconds = 2.0;      // hang rules stay off this long after a pause
  double max_pause_seconds = 600.0;      // an announced pause older than this no longer suspends
                                         // (a pause that announced its length: that length)
  double anomaly_memory_seconds = 30.0;  // how long peer connection errors count as evidence
  // Repeat offenders: a node whose score >= repeatOffenderMinScore gets thresholds relaxed by
  // repeatOffenderRelax (0 < relax <= 1; see docs/c4d.md for the exact formulas).
  double repeat_offender_min_score = 1.0;
  double repeat_offender_relax = 0.5;

  friend bool operator==(const Thresholds&, const Thresholds&) = default;
};

// kInvalidArgument naming the first bad field.
Status validate(const Thresholds& t);

// A pod's state as the API server shows it.
enum class PodState {
  kUnknown,    // not known (yet)
  kPending,    // created, not running
  kRunning,    // alive
  kSucceeded,  // exited 0: the rank finished
  kFailed,     // exited non-zero, evicted, or its node is lost
  kGone,       // deleted / not found
};

// One connection of one RankReport (compact report::ConnectionStats).
struct ConnSample {
  std::uint64_t id = 0;  // unique within the reporting process
  report::Direction direction = report::Direction::kSend;
  std::int32_t peer_rank = -1;  // -1: unknown (ignored)
  std::uint64_t bytes = 0;      // cumulative since the connection opened
  std::uint64_t ops = 0;        // cumulative
  // Payload bytes through the connection's sockets (its subflows' bytes summed), cumulative:
  // written to the sockets by the sender, read from them by the receiver, ahead of whole-op
  // completion. 0: not reported (the dead-link rule on queued bytes is then off).
  std::uint64_t wire_bytes = 0;
  std::uint32_t inflight = 0;
  std::uint64_t oldest_inflight_us = 0;
  report::LatencySummary wait;      // ops completed in the report's interval
  report::LatencySummary transfer;  // ops completed in the report's interval

  static ConnSample from(const report::ConnectionStats& c);
};

// A report's connections: a vector that snapshots share. A window's snapshot takes the ones the
// caller converted for an earlier window (the newest report of one window is the older of the
// next), and copying a snapshot copies none; a write copies first when the vector is shared.
class ConnSamples {
 public:
  using Vector = std::vector<ConnSample>;
  ConnSamples() = default;
  ConnSamples(std::initializer_list<ConnSample> items) { own() = items; }
  explicit ConnSamples(std::shared_ptr<const Vector> shared) : v_(std::move(shared)) {}

  std::size_t size() const noexcept { return v_ ? v_->size() : 0; }
  bool empty() const noexcept { return size() == 0; }
  const ConnSample& operator[](std::size_t i) const { return (*v_)[i]; }
  Vector::const_iterator begin() const { return v_ ? v_->cbegin() : Vector::const_iterator{}; }
  Vector::const_iterator end() const { return v_ ? v_->cend() : Vector::const_iterator{}; }
  // The shared vector (null when empty and never written).
  const std::shared_ptr<const Vector>& shared() const noexcept { return v_; }

  // Writes (tests, benches): on a vector of this sample's own.
  ConnSample& operator[](std::size_t i) { return own()[i]; }
  Vector::iterator begin() { return own().begin(); }
  Vector::iterator end() { return own().end(); }
  void push_back(const ConnSample& c) { own().push_back(c); }
  void reserve(std::size_t n) { own().reserve(n); }
  void clear() {
    v_.reset();
    made_ = nullptr;
  }

 private:
  // A vector this sample may write: one it made, held by no other sample.
  Vector& own() {
    if (!v_ || !made_ || v_.use_count() > 1) {
      auto fresh = v_ ? std::make_shared<Vector>(*v_) : std::make_shared<Vector>();
      made_ = fresh.get();
      v_ = std::move(fresh);
    }
    return *made_;
  }
  std::shared_ptr<const Vector> v_;
  Vector* made_ = nullptr;  // v_, when this sample (or the one it was copied from) made it
};

// ConnSample::from of each connection, in order.
std::shared_ptr<const ConnSamples::Vector> convertConnections(
    const std::vector<report::ConnectionStats>& connections);

struct ReportSample {
  WallTime time{};  // the report's timeUnixNs
  std::uint32_t interval_ms = 1000;
  ConnSamples connections;
  // The rank's NCCL communicators (profiler telemetry; empty from the net plugin).
  std::vector<report::CommunicatorProgress> communicators;
  // The process's last report: it ended its telemetry in order (RankReport.last; a killed or
  // crashed process sends none).
  bool last = false;

  static ReportSample from(const report::RankReport& r);
};

struct ProgressSample {
  report::ProgressState state = report::ProgressState::kTraining;
  std::int64_t step = 0;
  WallTime time{};
  double expected_seconds = 0.0;  // a pause's announced length (0: not said)
};

struct AnomalySample {
  report::AnomalyKind kind = report::AnomalyKind::kStall;
  std::int32_t peer_rank = -1;
  report::Direction direction = report::Direction::kSend;
  std::uint64_t age_us = 0;
  WallTime time{};
};

struct RankSnapshot {
  std::int32_t node = -1;  // index into JobSnapshot::nodes
  std::string pod;
  PodState pod_state = PodState::kUnknown;
  std::vector<ReportSample> reports;  // oldest first, newest last; current attempt only
  std::optional<ProgressSample> progress;
  std::vector<AnomalySample> anomalies;  // since the previous tick
};

// What the node plugin says about a node, reduced to the facts the rules use.
struct NodeSnapshot {
  std::string name;
  bool telemetry_arriving = true;  // the node plugin's batches arrive
  bool nic_down = false;           // a NIC carrying job traffic is down
  bool rdma_port_down = false;     // an RDMA port is not ACTIVE/LinkUp
  bool gpu_fault = false;          // a GPU is unhealthy (XID, uncorrected ECC, ...)
  std::string health_detail;       // one line naming the faulty devices ("" when none)
  // Times this node was implicated in a fault (any job) within the caller's repeat-offender
  // window; >= Thresholds::repeatOffenderMinScore relaxes the thresholds for it.
  double repeat_offender_score = 0.0;

  bool hasHardwareFault() const { return nic_down || rdma_port_down || gpu_fault; }
};

// Fills the health fields of `out` from a NodeHealth batch: NIC down = an interface that is not
// up; RDMA port down = a port not ACTIVE/LinkUp; GPU fault = a GPU not healthy, with uncorrected
// ECC errors or retired pages pending. Devices that are absent are never faults.
void applyNodeHealth(const report::NodeHealth& health, NodeSnapshot& out);

struct JobSnapshot {
  std::string ns;
  std::string name;
  std::int32_t world_size = 0;
  std::uint32_t attempt = 0;        // restart attempt; a change resets the analyser's state
  std::vector<RankSnapshot> ranks;  // size == worldSize
  std::vector<NodeSnapshot> nodes;
  Thresholds thresholds;
};

// kInvalidArgument naming the first inconsistency (sizes, indices, thresholds).
Status validate(const JobSnapshot& s);

std::string_view podStateName(PodState s) noexcept;

}  // namespace c4::c4d
