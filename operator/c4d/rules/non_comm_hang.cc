// Non-communication hang: enough peers wait on a rank (over connections, or in a communicator's
// collective it has not entered) and the rank is either frozen (silent while its pod runs) or
// idle (reports, posts nothing towards its waiters, waits on no one, no unfinished operation).
// Off while hang rules are paused. Reads Findings::crash_candidate; publishes
// Findings::hang_root.
#include <map>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

class NonCommHangRule final : public Rule {
 public:
  std::string_view name() const override { return "nonCommHang"; }
  void evaluate(const Window& w, Findings& out) override;
};

void NonCommHangRule::evaluate(const Window& w, Findings& out) {
  if (w.hang_rules_off) return;
  const Thresholds& th = w.th;
  const std::int32_t n = w.size();
  const auto un = static_cast<std::size_t>(n);
  const auto& reporting = w.reporting;
  const auto& silentFor = w.silent_for;
  const auto& waiters = w.waiters;
  const auto& outDegree = w.out_degree;
  const auto& commWait = w.comm_wait;
  std::vector<char> byCollective(un, 0);  // the evidence is collective progress, not connections
  std::map<std::size_t, std::vector<std::int32_t>> byNode;
  for (std::int32_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if ((waiters[ur] == 0 && commWait[ur].waiters == 0) || out.crash_candidate[ur] ||
        w.finished[ur]) {
      continue;
    }
    const bool off = w.offends(w.nodeOf(r));
    const std::int32_t need = std::min(w.peersIf(off), std::max<std::int32_t>(1, outDegree[ur]));
    const std::int32_t commNeed =
        std::min(w.peersIf(off), std::max<std::int32_t>(1, commWait[ur].peers));
    const bool byEdges = waiters[ur] > 0 && waiters[ur] >= need;
    const bool byComm = commWait[ur].waiters > 0 && commWait[ur].waiters >= commNeed;
    if (!byEdges && !byComm) continue;
    // Silent with its node's telemetry missing: nothing is known of it (never a root).
    const bool frozen = !reporting[ur] && w.alive[ur] && !w.telemetry_gap[ur];
    const bool idleRoot =
        reporting[ur] && !w.posts_to_waiters[ur] && !w.waits_on_someone[ur] && !w.in_collective[ur];
    if (!frozen && !idleRoot) continue;
    out.hang_root[ur] = 1;
    byCollective[ur] = byEdges ? 0 : 1;
    byNode[w.nodeOf(r)].push_back(r);
  }
  for (auto& [node, ranks] : byNode) {
    const NodeSnapshot& ns = w.node(node);
    const bool off = w.offends(node);
    Candidate c;
    Verdict& v = c.verdict;
    v.fault_class = FaultClass::kNonCommHang;
    v.culprit = nodeCulprit(ns.name);
    v.ranks = ranks;
    v.action = Action::kCordonAndRestart;
    v.node_evidence = ns.hasHardwareFault();
    v.repeat_offender = off;
    c.relaxed = off;
    const std::int32_t r = ranks.front();
    const auto ur = static_cast<std::size_t>(r);
    const bool frozen = !reporting[ur];
    const double threshold =
        frozen ? w.relaxedIf(off, th.silence_seconds) : w.relaxedIf(off, th.hang_seconds);
    const CommWait& cw = commWait[ur];
    if (byCollective[ur] != 0) {
      const std::string state =
          frozen ? (silentFor[ur] == kInf ? std::string("has not reported")
                                          : strf("stopped reporting %.1f s ago", silentFor[ur])) +
                       " while its pod runs"
                 : strf("has not entered it (it entered %llu) and waits in no collective",
                        static_cast<unsigned long long>(cw.entered));
      v.evidence.message = strf(
          "rank %d on node %s %s; %d of %d other ranks of communicator %016llx wait in "
          "collective #%llu (longest %.1f s, threshold %s %.1f s)",
          r, ns.name.c_str(), state.c_str(), cw.waiters, cw.peers,
          static_cast<unsigned long long>(cw.comm_hash),
          static_cast<unsigned long long>(cw.collective), cw.max_wait,
          frozen ? "silenceSeconds" : "hangSeconds", threshold);
      if (ranks.size() > 1) v.evidence.message += "; ranks " + rankList(ranks);
      if (v.node_evidence) v.evidence.message += "; node health: " + ns.health_detail;
      v.evidence.numbers = {
          {"waitingPeers", static_cast<double>(cw.waiters)},
          {"peers", static_cast<double>(cw.peers)},
          {"longestWaitSeconds", cw.max_wait},
          {"thresholdSeconds", threshold},
          {"collectivesBehind", static_cast<double>(cw.collective - cw.entered)},
          {"silentSeconds", frozen && silentFor[ur] != kInf ? silentFor[ur] : 0.0}};
      out.candidates.push_back(std::move(c));
      continue;
    }
    if (frozen) {
      const std::string silence = silentFor[ur] == kInf
                                      ? std::string("has not reported")
                                      : strf("stopped reporting %.1f s ago", silentFor[ur]);
      v.evidence.message = strf(
          "rank %d on node %s %s while its pod runs; %d of %d peers wait on it with no bytes "
          "moving (longest %.1f s, threshold silenceSeconds %.1f s)",
          r, ns.name.c_str(), silence.c_str(), waiters[ur], outDegree[ur], w.max_wait_on[ur],
          threshold);
    } else {
      v.evidence.message = strf(
          "rank %d on node %s posts nothing and waits on no one while %d of %d peers wait on "
          "it with no bytes moving (longest %.1f s, threshold hangSeconds %.1f s)",
          r, ns.name.c_str(), waiters[ur], outDegree[ur], w.max_wait_on[ur], threshold);
    }
    if (ranks.size() > 1) v.evidence.message += "; ranks " + rankList(ranks);
    if (v.node_evidence) v.evidence.message += "; node health: " + ns.health_detail;
    v.evidence.numbers = {{"waitingPeers", static_cast<double>(waiters[ur])},
                          {"peers", static_cast<double>(outDegree[ur])},
                          {"longestWaitSeconds", w.max_wait_on[ur]},
                          {"thresholdSeconds", threshold},
                          {"silentSeconds", frozen && silentFor[ur] != kInf ? silentFor[ur] : 0.0}};
    out.candidates.push_back(std::move(c));
  }
}

}  // namespace

std::unique_ptr<Rule> makeNonCommHangRule() {
  return std::make_unique<NonCommHangRule>();
}

}  // namespace c4::c4d
