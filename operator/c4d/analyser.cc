#include "operator/c4d/analyser.h"

#include <utility>

namespace c4::c4d {

void JobAnalyser::reset() {
  started_ = false;
  attempt_ = 0;
  ticks_in_attempt_ = 0;
  last_tick_ = WallTime{};
  window_.reset();
  rules_.clear();
  confirmation_.clear();
}

std::vector<Verdict> JobAnalyser::activeVerdicts() const {
  return confirmation_.active();
}

Result<TickResult> JobAnalyser::tick(const JobSnapshot& snap, WallTime now) {
  if (auto st = validate(snap); !st) return std::unexpected(st.error());
  if (started_ && now < last_tick_) {
    return makeError(ErrorCode::kInvalidArgument, "now is earlier than the previous tick");
  }
  TickResult result;

  if (!started_ || snap.attempt != attempt_) {
    result.cleared = confirmation_.clear();
    reset();
    rules_ = makeRules();
    started_ = true;
    attempt_ = snap.attempt;
  }
  last_tick_ = now;
  ++ticks_in_attempt_;

  const Window w = window_.build(snap, now, ticks_in_attempt_);
  Findings findings(static_cast<std::size_t>(snap.world_size));
  for (const auto& rule : rules_) rule->evaluate(w, findings);
  result.observations = std::move(findings.observations);
  confirmation_.apply(findings.candidates, snap.thresholds, now, result);

  std::size_t reportingCount = 0;
  for (char c : w.reporting) reportingCount += c ? 1 : 0;
  result.stats.reporting_ranks = reportingCount;
  result.stats.silent_ranks = w.reporting.size() - reportingCount;
  result.stats.edges = w.edges.size();
  result.stats.measured_edges = w.measuredEdges();
  result.stats.reference_rate_bytes_per_sec = findings.reference_rate;
  result.stats.paused = w.hang_rules_off;
  result.stats.warmup = w.warmup;
  return result;
}

}  // namespace c4::c4d
