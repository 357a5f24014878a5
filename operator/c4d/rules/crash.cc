// Crash: a rank whose pod failed or is gone, or that went silent while its peers report its
// connections closed or failed. A rank that died of another rank's failure (a cascade) is a
// victim, not a culprit. Publishes Findings::crash_candidate.
#include <set>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

class CrashRule final : public Rule {
 public:
  std::string_view name() const override { return "crash"; }
  void evaluate(const Window& w, Findings& out) override;

 private:
  struct PeerError {
    std::int32_t reporter = -1;
    std::int32_t target = -1;
    WallTime time{};
  };
  std::vector<PeerError> peer_errors_;  // remembered for anomalyMemorySeconds
  std::vector<char> crash_victims_;     // per rank: died of another rank's crash in this attempt
};

void CrashRule::evaluate(const Window& w, Findings& out) {
  const Thresholds& th = w.th;
  const std::int32_t n = w.size();
  const auto un = static_cast<std::size_t>(n);
  for (std::int32_t r = 0; r < n; ++r) {
    for (const AnomalySample& a : w.rank(r).anomalies) {
      if ((a.kind == report::AnomalyKind::kPeerClosed ||
           a.kind == report::AnomalyKind::kConnectionError) &&
          a.peer_rank >= 0 && a.peer_rank < n && a.peer_rank != r) {
        peer_errors_.push_back({r, a.peer_rank, a.time});
      }
    }
  }
  std::erase_if(peer_errors_, [&](const PeerError& e) {
    return secs(w.now - e.time) > th.anomaly_memory_seconds;
  });
  std::vector<WallTime> accusedAt(un, WallTime::max());
  std::vector<std::set<std::int32_t>> accusers(un);
  for (const PeerError& e : peer_errors_) {
    const auto t = static_cast<std::size_t>(e.target);
    accusedAt[t] = std::min(accusedAt[t], e.time);
    accusers[t].insert(e.reporter);
  }
  std::vector<char>& crashCand = out.crash_candidate;
  for (std::int32_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (w.finished[ur]) continue;
    const bool off = w.offends(w.nodeOf(r));
    const auto need = static_cast<std::size_t>(
        std::max(1, std::min(w.peersIf(off), std::max<std::int32_t>(1, w.out_degree[ur]))));
    const bool podEvidence = w.gone[ur] && w.silent_for[ur] > th.window_seconds;
    const bool peerEvidence = !w.reporting[ur] && accusers[ur].size() >= need;
    const bool peerAndPod = w.gone[ur] && !accusers[ur].empty();
    if (podEvidence || peerEvidence || peerAndPod) crashCand[ur] = 1;
  }
  // A candidate that reported an error towards another candidate no later than anyone accused it
  // died of that peer's failure (a cascade): it is a victim, not a culprit.
  crash_victims_.resize(un, 0);
  std::vector<char> victim(un, 0);
  for (const PeerError& e : peer_errors_) {
    const auto rep = static_cast<std::size_t>(e.reporter);
    if (crashCand[rep] && crashCand[static_cast<std::size_t>(e.target)] &&
        e.time <= accusedAt[rep]) {
      victim[rep] = 1;
    }
  }
  {
    bool anyRoot = false;
    for (std::size_t r = 0; r < un; ++r) anyRoot = anyRoot || (crashCand[r] && !victim[r]);
    if (!anyRoot) std::fill(victim.begin(), victim.end(), 0);  // cannot tell: report them all
    // Once a victim, always a victim in this attempt (the errors that showed it expire).
    for (std::size_t r = 0; r < un; ++r) {
      if (victim[r]) crash_victims_[r] = 1;
      if (crash_victims_[r]) victim[r] = 1;
    }
  }
  for (std::int32_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (!crashCand[ur] || victim[ur]) continue;
    const NodeSnapshot& ns = w.node(w.nodeOf(r));
    const double silent = w.silent_for[ur];
    Candidate c = crashOfRank(
        w, r,
        strf("rank %d (pod %s on node %s): pod %s, %s; %zu peer(s) reported the connection closed "
             "or failed within %.0f s",
             r, w.rank(r).pod.c_str(), ns.name.c_str(),
             std::string(podStateName(w.rank(r).pod_state)).c_str(),
             silent == kInf ? "never reported" : strf("no report for %.1f s", silent).c_str(),
             accusers[ur].size(), th.anomaly_memory_seconds));
    Verdict& v = c.verdict;
    v.evidence.numbers = {{"silentSeconds", silent == kInf ? -1.0 : silent},
                          {"peersReportingErrors", static_cast<double>(accusers[ur].size())},
                          {"podGone", w.gone[ur] ? 1.0 : 0.0}};
    out.candidates.push_back(std::move(c));
  }
}

}  // namespace

Candidate crashOfRank(const Window& w, std::int32_t r, std::string message) {
  const std::size_t node = w.nodeOf(r);
  const NodeSnapshot& ns = w.node(node);
  const bool hw = ns.hasHardwareFault();
  const bool off = w.offends(node);
  Candidate c;
  Verdict& v = c.verdict;
  v.fault_class = FaultClass::kCrash;
  v.ranks = {r};
  v.node_evidence = hw;
  v.repeat_offender = off;
  c.relaxed = off;
  if (hw || off) {
    v.culprit = nodeCulprit(ns.name);
    v.action = Action::kCordonAndRestart;
  } else {
    v.culprit = rankCulprit(ns.name, r);
    v.action = Action::kRestartOnly;
  }
  v.evidence.message = std::move(message);
  if (hw) v.evidence.message += "; node health: " + ns.health_detail;
  if (off) v.evidence.message += strf("; repeat offender (score %.0f)", ns.repeat_offender_score);
  if (!hw && !off) v.evidence.message += "; no node-level evidence: restart without cordon";
  return c;
}

std::unique_ptr<Rule> makeCrashRule() {
  return std::make_unique<CrashRule>();
}

}  // namespace c4::c4d
