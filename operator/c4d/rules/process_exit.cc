// Crash seen as a process exit. Profiler telemetry has no connection errors: a rank killed while
// its pod stays up shows only as silence, which alone would read as a hang of its node. The node
// plugin saw its process exit (an anomaly of kind processExited). That exit is a crash of the rank
// when its peers wait for it (connections or collective progress), or when the rank had said it
// was training (progress notices) and never said it finished — over NCCL's socket transport its
// peers die of the closed connections within milliseconds, so nobody is left waiting. A rank that
// finished, or whose peers exited too without either sign, is no crash (the job's end). Of several
// such exits the earliest are the culprits; the later ones died of them, and so did ranks that
// exited after a candidate of the crash rule. Exits too close to order by time are ordered by the
// connections between them and by which ranks sent a last report (culpritsOf). Reads and extends
// Findings::crash_candidate; publishes Findings::exited.
#include <algorithm>
#include <map>
#include <optional>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

constexpr auto kExitTie = std::chrono::milliseconds{100};

// Whether the rank's process ended its telemetry in order: its newest report is its last one
// (RankReport.last, sent by the profiler plugin from its last finalize or at exit()). A process
// killed by a signal or that crashed sends none.
bool endedInOrder(const Window& w, std::int32_t r) {
  const auto& reports = w.rank(r).reports;
  return !reports.empty() && reports.back().last;
}

// How the exits ended that the fewer of them share, when both endings occur in different numbers:
// true = in order (a last report), false = without one (killed, crashed or aborted). A cascade's
// victims end alike (the same trainer code meets the same closed connections: all leave through
// exit(), or all abort), the rank that caused it differently: a killed rank among victims that
// left through exit(), or a rank that raised an error of its own and left through exit() among
// victims that abort.
std::optional<bool> oddEnding(const Window& w, const std::vector<std::int32_t>& exits) {
  std::size_t inOrder = 0;
  for (std::int32_t r : exits) inOrder += endedInOrder(w, r) ? 1U : 0U;
  const std::size_t without = exits.size() - inOrder;
  if (inOrder == 0 || without == 0 || inOrder == without) return std::nullopt;
  return inOrder < without;
}

// Which of the exits (ranks with their exit times in `exited`) are crashes. Exits later than the
// first by more than kExitTie died of earlier ones. The first exits, within kExitTie of each
// other, are too close for the node plugins' clocks to order (each plugin sees its exits when its
// own thread runs, on a busy node tens of milliseconds late): a killed rank's peers die of its
// closed connections within milliseconds. Among them the crashes are
//   - the candidates of the crash rule, and
//   - the tied ranks whose ending is the odd one of all the exits (oddEnding): a killed process
//     sends no last report while its peers that exited of its closed connections ended theirs in
//     order, or the reverse (the others are its victims, whether or not their connections to it
//     are still in the window);
// and when the endings name none of the tied ranks, in each cascade (tied exits joined by a
// connection either way, directly or through other tied exits) that holds no candidate, the one
// rank joined to the most others of the cascade (ties: the earliest exit, then the lowest rank):
// it explains them. A tied exit joined to no other is a cascade of its own (two independent kills
// at once).
std::vector<std::int32_t> culpritsOf(const Window& w, const std::vector<char>& crashCand,
                                     const std::vector<std::int32_t>& exits,
                                     const std::map<std::int32_t, WallTime>& exited, WallTime first,
                                     std::optional<bool> odd) {
  std::vector<std::int32_t> tied;
  for (std::int32_t r : exits) {
    if (exited.at(r) <= first + kExitTie) tied.push_back(r);
  }
  if (tied.size() <= 1) return tied;
  std::sort(tied.begin(), tied.end());
  const std::size_t k = tied.size();
  std::vector<char> found(k, 0);
  bool byEnding = false;
  for (std::size_t i = 0; i < k; ++i) {
    found[i] = crashCand[static_cast<std::size_t>(tied[i])];
    if (odd && endedInOrder(w, tied[i]) == *odd) {
      found[i] = 1;
      byEnding = true;
    }
  }
  auto pos = [&](std::int32_t r) -> std::optional<std::size_t> {
    const auto it = std::lower_bound(tied.begin(), tied.end(), r);
    if (it == tied.end() || *it != r) return std::nullopt;
    return static_cast<std::size_t>(it - tied.begin());
  };
  std::vector<std::vector<std::size_t>> joined(k);
  for (const Edge& e : w.edges) {
    const auto a = pos(e.src);
    const auto b = pos(e.dst);
    if (!a || !b || *a == *b) continue;
    joined[*a].push_back(*b);
    joined[*b].push_back(*a);
  }
  for (auto& j : joined) {
    std::sort(j.begin(), j.end());
    j.erase(std::unique(j.begin(), j.end()), j.end());
  }
  std::vector<char> seen(k, 0);
  std::vector<char> picked(k, 0);
  for (std::size_t start = 0; start < k; ++start) {
    if (seen[start]) continue;
    std::vector<std::size_t> cascade{start};
    seen[start] = 1;
    bool explained = byEnding;
    for (std::size_t at = 0; at < cascade.size(); ++at) {
      explained = explained || found[cascade[at]];
      for (std::size_t j : joined[cascade[at]]) {
        if (!seen[j]) {
          seen[j] = 1;
          cascade.push_back(j);
        }
      }
    }
    if (explained) continue;
    std::size_t best = cascade.front();
    for (std::size_t i : cascade) {
      const std::size_t n = joined[i].size();
      const std::size_t nb = joined[best].size();
      const WallTime at = exited.at(tied[i]);
      const WallTime at_best = exited.at(tied[best]);
      if (n > nb || (n == nb && (at < at_best || (at == at_best && tied[i] < tied[best])))) {
        best = i;
      }
    }
    picked[best] = 1;
  }
  std::vector<std::int32_t> culprits;
  for (std::size_t i = 0; i < k; ++i) {
    if (found[i] || picked[i]) culprits.push_back(tied[i]);
  }
  return culprits;
}

class ProcessExitRule final : public Rule {
 public:
  std::string_view name() const override { return "processExit"; }
  void evaluate(const Window& w, Findings& out) override;

 private:
  std::map<std::int32_t, WallTime> exited_;  // per rank: its first exit in this attempt
};

void ProcessExitRule::evaluate(const Window& w, Findings& out) {
  const std::int32_t n = w.size();
  for (std::int32_t r = 0; r < n; ++r) {
    for (const AnomalySample& a : w.rank(r).anomalies) {
      if (a.kind == report::AnomalyKind::kProcessExited) exited_.try_emplace(r, a.time);
    }
    if (endedInOrder(w, r)) out.exited[static_cast<std::size_t>(r)] = 1;
  }
  for (const auto& [r, at] : exited_) {
    if (r >= 0 && r < n) out.exited[static_cast<std::size_t>(r)] = 1;
  }
  std::vector<char>& crashCand = out.crash_candidate;
  std::optional<WallTime> first_exit;
  std::vector<std::int32_t> exits;
  for (const auto& [r, at] : exited_) {
    if (r < 0 || r >= n) continue;
    const auto ur = static_cast<std::size_t>(r);
    if (w.finished[ur] || w.reporting[ur]) continue;
    const auto& progress = w.rank(r).progress;
    const bool working = progress && (progress->state == report::ProgressState::kTraining ||
                                      progress->state == report::ProgressState::kCheckpointing ||
                                      progress->state == report::ProgressState::kEvaluating);
    // A candidate of the crash rule still orders the exits (its victims must not be named).
    if (!crashCand[ur] && w.waiters[ur] == 0 && w.comm_wait[ur].waiters == 0 && !working) {
      continue;
    }
    exits.push_back(r);
    if (!first_exit || at < *first_exit) first_exit = at;
  }
  if (!first_exit) return;
  const std::optional<bool> odd = oddEnding(w, exits);
  const std::vector<std::int32_t> culprits =
      culpritsOf(w, crashCand, exits, exited_, *first_exit, odd);
  const std::size_t others = exits.size() - culprits.size();
  for (std::int32_t r : culprits) {
    const auto ur = static_cast<std::size_t>(r);
    if (crashCand[ur]) continue;
    crashCand[ur] = 1;
    const NodeSnapshot& ns = w.node(w.nodeOf(r));
    const std::int32_t waiting = std::max(w.waiters[ur], w.comm_wait[ur].waiters);
    std::string message = strf(
        "rank %d (pod %s on node %s): its process exited %.1f s ago (seen by the node "
        "plugin) while its pod is %s%s; %d other rank(s) wait for it",
        r, w.rank(r).pod.c_str(), ns.name.c_str(), secs(w.now - exited_.at(r)),
        std::string(podStateName(w.rank(r).pod_state)).c_str(),
        w.rank(r).progress ? ", and it had not said it finished" : "", waiting);
    if (others > 0) message += strf("; %zu other rank(s) exited with or after it", others);
    if (odd && endedInOrder(w, r) == *odd) {
      std::size_t unlike = 0;
      for (std::int32_t o : exits) unlike += endedInOrder(w, o) != *odd ? 1U : 0U;
      message += *odd
                     ? strf(
                           "; it ended its telemetry in order (an exit of its own) while %zu "
                           "of them sent no last report (aborted, as one cause's victims do alike)",
                           unlike)
                     : strf(
                           "; it sent no last report (killed or crashed) while %zu of them "
                           "ended theirs in order",
                           unlike);
    }
    Candidate c = crashOfRank(w, r, std::move(message));
    Verdict& v = c.verdict;
    const double silent = w.silent_for[ur];
    v.evidence.numbers = {{"processExited", 1.0},
                          {"waitingPeers", static_cast<double>(waiting)},
                          {"exitedAfter", static_cast<double>(others)},
                          {"lastReport", endedInOrder(w, r) ? 1.0 : 0.0},
                          {"silentSeconds", silent == kInf ? -1.0 : silent}};
    out.candidates.push_back(std::move(c));
  }
}

}  // namespace

std::unique_ptr<Rule> makeProcessExitRule() {
  return std::make_unique<ProcessExitRule>();
}

}  // namespace c4::c4d
