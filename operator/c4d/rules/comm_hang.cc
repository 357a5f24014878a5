// Communication hang: connections stalled with ops waiting at both ends (hangSeconds), or with
// bytes queued at the sender that do not arrive (silenceSeconds: a dead link). Stalled edges are
// grouped by node pair: pairs that all share one node name that node, otherwise each pair is a
// link (a link with exactly one end's NIC or RDMA port down names that node). Off while hang rules
// are paused.
#include <map>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

class CommHangRule final : public Rule {
 public:
  std::string_view name() const override { return "commHang"; }
  void evaluate(const Window& w, Findings& out) override;
};

void CommHangRule::evaluate(const Window& w, Findings& out) {
  if (w.hang_rules_off) return;
  const Thresholds& th = w.th;
  const auto& nodes = w.snap.nodes;
  auto nodeName = [&](std::size_t idx) -> const std::string& { return nodes[idx].name; };
  struct PairInfo {
    std::vector<std::int32_t> ranks;
    std::size_t edges = 0;
    double max_age = 0.0;
    std::int32_t example_src = -1, example_dst = -1;
    std::size_t queued_edges = 0;  // found by the queued-bytes rule (silenceSeconds)
    std::uint64_t queued_bytes = 0;
  };
  std::map<std::pair<std::size_t, std::size_t>, PairInfo> pairs;
  for (const Edge& e : w.edges) {
    if (!w.reporting[static_cast<std::size_t>(e.src)] ||
        !w.reporting[static_cast<std::size_t>(e.dst)]) {
      continue;
    }
    const std::size_t a = w.nodeOf(e.src), b = w.nodeOf(e.dst);
    const bool off = w.offends(a) || w.offends(b);
    // Ops waiting at both ends with no bytes completing for hangSeconds, or bytes queued at
    // the sender that do not move for silenceSeconds (a dead link needs no long timeout).
    const bool waiting =
        e.wait_age > 0.0 && e.posted && e.wait_age >= w.relaxedIf(off, th.hang_seconds);
    const bool queued = e.queued_age > 0.0 && e.queued_age >= w.relaxedIf(off, th.silence_seconds);
    if (!waiting && !queued) continue;
    const double age = std::max(waiting ? e.wait_age : 0.0, queued ? e.queued_age : 0.0);
    PairInfo& p = pairs[{std::min(a, b), std::max(a, b)}];
    p.ranks.push_back(e.src);
    p.ranks.push_back(e.dst);
    ++p.edges;
    if (queued) {
      ++p.queued_edges;
      p.queued_bytes += e.queued_bytes;
    }
    if (age > p.max_age) {
      p.max_age = age;
      p.example_src = e.src;
      p.example_dst = e.dst;
    }
  }
  const std::optional<std::size_t> common = commonNode(pairs);
  auto hangCandidate = [&](CulpritKind kind, std::size_t a, std::size_t b,
                           std::vector<std::int32_t> ranks, std::size_t nEdges, double maxAge,
                           std::size_t nPairs, std::int32_t exSrc, std::int32_t exDst,
                           std::size_t nQueued, std::uint64_t queuedBytes) {
    Candidate c;
    Verdict& v = c.verdict;
    v.fault_class = FaultClass::kCommHang;
    sortUnique(ranks);
    v.ranks = std::move(ranks);
    const bool off = w.offends(a) || w.offends(b);
    const double threshold = w.relaxedIf(off, nQueued > 0 ? th.silence_seconds : th.hang_seconds);
    v.repeat_offender = off;
    c.relaxed = off;
    std::string where;
    if (kind == CulpritKind::kNode) {
      v.culprit = nodeCulprit(nodeName(a));
      v.action = Action::kCordonAndRestart;
      v.node_evidence = nodes[a].hasHardwareFault();
      where = nPairs > 1 ? strf("all %zu stalled links share node %s", nPairs, nodeName(a).c_str())
                         : strf("inside node %s", nodeName(a).c_str());
    } else {
      const std::string& na = nodeName(a);
      const std::string& nb = nodeName(b);
      v.culprit = linkCulprit(na, nb);
      v.action = Action::kRestartOnly;
      where = strf("link %s<->%s", v.culprit.node.c_str(), v.culprit.peer_node.c_str());
    }
    if (nQueued > 0) {
      v.evidence.message = strf(
          "%zu connection(s) stalled, %s: %.1f MB written by the senders and not received, "
          "no bytes arriving for %.1f s while the receivers wait (threshold silenceSeconds "
          "%.1f s), e.g. rank %d -> rank %d",
          nEdges, where.c_str(), static_cast<double>(queuedBytes) / 1e6, maxAge, threshold, exSrc,
          exDst);
    } else {
      v.evidence.message = strf(
          "%zu connection(s) stalled, %s: ops in flight at both ends and no bytes moving for "
          "%.1f s (threshold hangSeconds %.1f s), e.g. rank %d -> rank %d",
          nEdges, where.c_str(), maxAge, threshold, exSrc, exDst);
    }
    if (v.node_evidence) v.evidence.message += "; node health: " + nodes[a].health_detail;
    v.evidence.numbers = {{"stalledConnections", static_cast<double>(nEdges)},
                          {"stalledLinks", static_cast<double>(nPairs)},
                          {"longestStallSeconds", maxAge},
                          {"thresholdSeconds", threshold},
                          {"queuedBytes", static_cast<double>(queuedBytes)}};
    out.candidates.push_back(std::move(c));
  };
  if (common) {
    std::vector<std::int32_t> ranks;
    std::size_t nEdges = 0, nQueued = 0;
    std::uint64_t queuedBytes = 0;
    double maxAge = 0.0;
    std::int32_t exSrc = -1, exDst = -1;
    for (const auto& [key, p] : pairs) {
      ranks.insert(ranks.end(), p.ranks.begin(), p.ranks.end());
      nEdges += p.edges;
      nQueued += p.queued_edges;
      queuedBytes += p.queued_bytes;
      if (p.max_age > maxAge) {
        maxAge = p.max_age;
        exSrc = p.example_src;
        exDst = p.example_dst;
      }
    }
    hangCandidate(CulpritKind::kNode, *common, *common, std::move(ranks), nEdges, maxAge,
                  pairs.size(), exSrc, exDst, nQueued, queuedBytes);
  } else {
    for (auto& [key, p] : pairs) {
      const auto [a, b] = key;
      CulpritKind kind = a == b ? CulpritKind::kNode : CulpritKind::kLink;
      std::size_t culpritNode = a;
      // Node evidence decides a link: exactly one end has a NIC/RDMA port down.
      const bool nicA = nodes[a].nic_down || nodes[a].rdma_port_down;
      const bool nicB = nodes[b].nic_down || nodes[b].rdma_port_down;
      if (kind == CulpritKind::kLink && nicA != nicB) {
        kind = CulpritKind::kNode;
        culpritNode = nicA ? a : b;
      }
      hangCandidate(kind, culpritNode, kind == CulpritKind::kNode ? culpritNode : b,
                    std::move(p.ranks), p.edges, p.max_age, 1, p.example_src, p.example_dst,
                    p.queued_edges, p.queued_bytes);
    }
  }
}

}  // namespace

std::unique_ptr<Rule> makeCommHangRule() {
  return std::make_unique<CommHangRule>();
}

}  // namespace c4::c4d
