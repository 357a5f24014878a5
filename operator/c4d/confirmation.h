// The confirmation step: turns each tick's candidates (rules/rule.h) into verdicts. A finding,
// identified by Verdict::key(), must be found in confirmationWindows consecutive ticks (one fewer
// when relaxed for a repeat offender); one tick without it before that drops it. Once confirmed
// it is reported once as new and as active on every tick while it lasts; after clearWindows
// consecutive ticks without it, it clears (its key is reported) and the same fault later is a new
// verdict.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "operator/c4d/rules/rule.h"
#include "operator/c4d/snapshot.h"
#include "operator/c4d/verdict.h"

namespace c4::c4d {

class Confirmation {
 public:
  // Weighs this tick's `candidates` (consumed; the first of a key in a tick counts) at `now`:
  // appends to result.verdicts (newly confirmed), result.active, result.cleared, and sets
  // result.stats.pending_findings.
  void apply(std::vector<Candidate>& candidates, const Thresholds& th, WallTime now,
             TickResult& result);

  // Confirmed verdicts that have not cleared.
  std::vector<Verdict> active() const;

  // Forgets everything; returns the keys of the confirmed verdicts it forgot.
  std::vector<std::string> clear();

 private:
  struct Finding {
    Verdict verdict;
    int consecutive = 0;
    int missing = 0;
    bool confirmed = false;
    bool seen_this_tick = false;
  };
  std::map<std::string, Finding> findings_;
};

}  // namespace c4::c4d
