// The C4D analyser: finds a fault in a training job from its communication syndrome.
//
// One JobAnalyser per TrainingJob, owned by the caller. Every window (Thresholds::windowSeconds,
// default 1 s) the caller builds a JobSnapshot from the report store and calls tick(snapshot,
// now). The analyser
//   1. builds the tick's Window (window.h): every rank's newest report aggregated per (peer,
//      direction), both ends of each rank->rank connection joined into an edge (bytes moved this
//      window, ops in flight and their age, receive wait, transfer rate; a decrease or a changed
//      connection set = a reset, not measured), per-rank liveness, the wait-for graph and
//      collective progress;
//   2. runs the rules (rules/rule.h, one file each, in the order of makeRules()): crash,
//      non-communication hang, communication hang, communication slow, non-communication slow
//      (straggler), and the telemetry-missing observation;
//   3. confirms the findings (confirmation.h): a finding that persisted for
//      confirmationWindows consecutive ticks is emitted once as a Verdict, and clears after
//      clearWindows ticks without it.
// The rules, formulas and defaults are in docs/c4d.md.
//
// Pure: no I/O, no threads, no clock of its own (time is the `now` argument and the snapshot's
// report times). Not thread-safe: one caller at a time per JobAnalyser. A tick with invalid input
// returns kInvalidArgument and leaves the state untouched.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "operator/c4d/confirmation.h"
#include "operator/c4d/rules/rule.h"
#include "operator/c4d/snapshot.h"
#include "operator/c4d/verdict.h"
#include "operator/c4d/window.h"

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
  bool started_ = false;
  std::uint32_t attempt_ = 0;
  std::int64_t ticks_in_attempt_ = 0;
  WallTime last_tick_{};
  WindowBuilder window_;
  std::vector<std::unique_ptr<Rule>> rules_;  // this attempt's, made when it starts
  Confirmation confirmation_;
};

}  // namespace c4::c4d
