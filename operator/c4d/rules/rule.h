// The analyser's rules: each reads one tick's Window and adds what it finds to Findings.
//
// A rule object lives for one attempt of the job (a new attempt makes new ones), so what a rule
// remembers between ticks is its own members. The rules run every tick in the order of
// makeRules(); a rule may read the per-tick facts the rules before it published in Findings (the
// fields below say who writes them), and nothing else of theirs.
//
// Adding a rule: one file in this folder defining a Rule and its factory, the factory declared
// at the end of this header and added to makeRules() (registry.cc) after the rules whose facts it
// reads. If it is a new fault class, verdict.h (FaultClass) and the detector's handling of the
// class change too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "operator/c4d/verdict.h"
#include "operator/c4d/window.h"

namespace c4::c4d {

// A finding of this tick, before confirmation.
struct Candidate {
  Verdict verdict;       // first_seen and confirmed_at are set by the confirmation
  bool relaxed = false;  // a repeat offender is involved: confirmed one window sooner
};

// What one tick's rules found, and the facts they publish for the rules after them.
struct Findings {
  explicit Findings(std::size_t ranks)
      : crash_candidate(ranks, 0),
        exited(ranks, 0),
        hang_root(ranks, 0),
        touches_slow(ranks, 0),
        slow_transfer(ranks, 0) {}

  std::vector<Candidate> candidates;      // in the order found (the first of a key wins)
  std::vector<Observation> observations;  // the observing rule confirms them itself

  // crash, processExit: per rank, a crash candidate (never a hang root or a straggler).
  std::vector<char> crash_candidate;
  // processExit: per rank, its process exited in this attempt (the node plugin saw it) or ended
  // its telemetry in order (its newest report is its last): its silence is no missing telemetry.
  std::vector<char> exited;
  // nonCommHang: per rank, the root of a non-communication hang.
  std::vector<char> hang_root;
  // commSlow: per rank, an end of a slow edge this tick.
  std::vector<char> touches_slow;
  // commSlow: per rank, an end of an edge measured under half the reference this tick.
  std::vector<char> slow_transfer;
  // commSlow: a slow edge anywhere in the job this tick.
  bool slow_link = false;
  // commSlow: the job's reference transfer rate this tick, bytes/s (0: none).
  double reference_rate = 0.0;
};

class Rule {
 public:
  virtual ~Rule() = default;
  // A short camelCase name for the rule: "crash", "nonCommHang", "straggler", ...
  virtual std::string_view name() const = 0;
  // Adds this tick's candidates (or observations) to `out`.
  virtual void evaluate(const Window& w, Findings& out) = 0;
};

// A crash of rank `r` (rules/crash.cc): its node is the culprit (cordonAndRestart) when the node
// has a hardware fault or is a repeat offender, else the rank (restartOnly); `message` is the
// evidence, to which the node's part is appended.
Candidate crashOfRank(const Window& w, std::int32_t r, std::string message);

// A fresh set of every rule, in evaluation order.
std::vector<std::unique_ptr<Rule>> makeRules();

// The rules (rules/<name>.cc).
std::unique_ptr<Rule> makeCrashRule();
std::unique_ptr<Rule> makeProcessExitRule();
std::unique_ptr<Rule> makeNonCommHangRule();
std::unique_ptr<Rule> makeCommHangRule();
std::unique_ptr<Rule> makeCommSlowRule();
std::unique_ptr<Rule> makeStragglerRule();
std::unique_ptr<Rule> makeTelemetryMissingRule();

}  // namespace c4::c4d
