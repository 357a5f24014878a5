// The C4D analyser: finds a fault in a training job from its communication syndrome.
//
// One JobAnalyser per TrainingJob, owned by the caller. Every window (Thresholds::windowSeconds,
// default 1 s) the caller builds a JobSnapshot from the report store and calls tick(snapshot,
// now). The analyser
//   1. aggregates every rank's newest report per (peer, direction) and joins both ends of each
//      rank->rank connection into an edge: bytes moved this window (cumulative counters, a
//      decrease or a changed connection set = a reset, not measured), ops in flight and their
//      age, receive wait and transfer time;
//   2. derives per-window matrices (sparse, existing edges only): transfer rate
//      (bytes / transfer time), wait share (receive wait / window), in-flight age, and per-rank
//      liveness (silent = no report for silenceSeconds);
//   3. applies the rules of the five classes (crash, communication hang, non-communication hang,
//      communication slow, non-communication slow) and the telemetry-missing observation;
//   4. confirms a finding after it persisted for confirmationWindows consecutive ticks, emits it
//      once as a Verdict, and clears it after clearWindows ticks without it.
// The rules, formulas and defaults are in docs/c4d.md.
//
// Pure: no I/O, no threads, no clock of its own (time is the `now` argument and the snapshot's
// report times). Not thread-safe: one caller at a time per JobAnalyser. A tick with invalid input
// returns kInvalidArgument and leaves the state untouched.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "operator/c4d/snapshot.h"
#include "operator/c4d/verdict.h"

namespace c4::c4d {

class JobAnalyser {
 public:
  JobAnalyser() = default;

  // Analyses one window of `snapshot` at time `now`. `now` must not go backwards.
  Result<TickResult> tick(const JobSnapshot& snapshot, WallTime now);

  // Forgets everything (as after construction).
  void reset();

  // Confirmed verdicts that have not cleared.
  std::vector<Verdict> activeVerdicts() const;

 private:
  // Per rank->rank edge, kept between ticks.
  struct EdgeState {
    std::uint64_t key = 0;  // src << 32 | dst
    std::uint64_t recv_bytes = 0;
    std::uint32_t recv_conns = 0;
    WallTime last_progress{};  // the last time the receiver's bytes moved (or the edge appeared)
    std::uint64_t recv_wire = 0;
    WallTime last_wire_progress{};  // the same for the receiver's socket-level (wire) bytes
  };
  struct PeerError {
    std::int32_t reporter = -1;
    std::int32_t target = -1;
    WallTime time{};
  };
  struct Finding {
    Verdict verdict;
    int consecutive = 0;
    int missing = 0;
    bool confirmed = false;
    bool seen_this_tick = false;
  };
  struct ObservationState {
    WallTime first_seen{};
    int ticks = 0;  // consecutive ticks seen; reported from confirmationWindows on
    bool seen_this_tick = false;
  };

  bool started_ = false;
  std::uint32_t attempt_ = 0;
  std::int64_t ticks_in_attempt_ = 0;
  WallTime last_tick_{};
  std::optional<WallTime> last_pause_seen_;
  std::vector<EdgeState> edges_;  // sorted by key
  std::vector<PeerError> peer_errors_;
  std::vector<char> crash_victims_;  // per rank: died of another rank's crash in this attempt
  // Per rank: the last tick it had a measured connection slower than half the job's reference rate
  // (a rank on a slow link is not a straggler, even in a window where the link measured normal).
  std::map<std::int32_t, WallTime> slow_transfer_at_;
  // The last tick with a slow connection (comm-slow rule) anywhere in the job.
  std::optional<WallTime> last_slow_link_seen_;
  // The comm-slow reference of the recent windows (measured connections only), oldest first.
  struct RefSample {
    WallTime time{};
    double rate = 0.0;
  };
  std::vector<RefSample> ref_history_;
  std::map<std::string, Finding> findings_;
  std::map<std::string, ObservationState> observations_;
};

}  // namespace c4::c4d
