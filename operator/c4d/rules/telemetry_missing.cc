// Telemetry missing (an observation, never a verdict): ranks silent while their pods run, not
// crash candidates, not hang roots, not exited (their process gone, or their telemetry ended in
// order), and no peer waits on them — e.g. a node plugin down. One observation per node, reported
// from its confirmationWindows-th consecutive tick on. Reads Findings::crash_candidate, hang_root
// and exited.
#include <map>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

class TelemetryMissingRule final : public Rule {
 public:
  std::string_view name() const override { return "telemetryMissing"; }
  void evaluate(const Window& w, Findings& out) override;

 private:
  struct ObservationState {
    WallTime first_seen{};
    int ticks = 0;  // consecutive ticks seen; reported from confirmationWindows on
    bool seen_this_tick = false;
  };
  std::map<std::string, ObservationState> observations_;
};

void TelemetryMissingRule::evaluate(const Window& w, Findings& out) {
  const Thresholds& th = w.th;
  const WallTime now = w.now;
  const std::int32_t n = w.size();
  const auto& nodes = w.snap.nodes;
  std::map<std::size_t, std::vector<std::int32_t>> byNode;
  for (std::int32_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (w.reporting[ur] || !w.alive[ur] || out.crash_candidate[ur] || out.hang_root[ur] ||
        out.exited[ur] || w.anyone_waits[ur]) {
      continue;
    }
    if (w.rank(r).reports.empty() && w.ticks_in_attempt <= th.warmup_windows) continue;
    byNode[w.nodeOf(r)].push_back(r);
  }
  for (auto& state : observations_) state.second.seen_this_tick = false;
  for (auto& [node, ranks] : byNode) {
    const std::string key = "telemetryMissing/" + nodes[node].name;
    auto it = observations_.try_emplace(key, ObservationState{.first_seen = now}).first;
    it->second.seen_this_tick = true;
    // Confirmed like a verdict: a silence seen for one tick is often the first tick of a hang
    // (the rank's silence passes silenceSeconds a moment before its peers' waits do) or a node
    // plugin restarting.
    if (++it->second.ticks < th.confirmation_windows) continue;
    std::size_t onNode = 0;
    for (const RankSnapshot& rs : w.snap.ranks) {
      if (static_cast<std::size_t>(rs.node) == node) ++onNode;
    }
    double longest = 0.0;
    for (std::int32_t r : ranks) {
      const double s = w.silent_for[static_cast<std::size_t>(r)];
      if (s != kInf) longest = std::max(longest, s);
    }
    Observation o;
    o.kind = ObservationKind::kTelemetryMissing;
    o.node = nodes[node].name;
    o.message = strf(
        "%zu of %zu ranks on node %s silent (up to %.1f s, threshold silenceSeconds %.1f s) "
        "while their pods run and no peer waits on them; %s",
        ranks.size(), onNode, nodes[node].name.c_str(), longest, th.silence_seconds,
        nodes[node].telemetry_arriving
            ? "the node plugin's batches arrive without their reports: not a fault"
            : strf("no batch from the node plugin on %s either: C4 cannot see these ranks, and "
                   "their silence is no evidence against the node",
                   nodes[node].name.c_str())
                  .c_str());
    o.ranks = std::move(ranks);
    o.first_seen = it->second.first_seen;
    o.is_new = it->second.ticks == th.confirmation_windows;
    out.observations.push_back(std::move(o));
  }
  std::erase_if(observations_, [](const auto& kv) { return !kv.second.seen_this_tick; });
}

}  // namespace

std::unique_ptr<Rule> makeTelemetryMissingRule() {
  return std::make_unique<TelemetryMissingRule>();
}

}  // namespace c4::c4d
