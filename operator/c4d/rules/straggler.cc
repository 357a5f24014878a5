// Non-communication slow (straggler): a rank its peers wait on more than the job typically
// waits (or that waits far less than the job typically does), beyond the job's noise around it,
// while every transfer is normal. Off during warm-up, while hang rules are paused, and within
// clearWindows of a slow link anywhere in the job. Reads Findings::crash_candidate,
// touches_slow, slow_transfer and slow_link.
#include <map>
#include <optional>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

// The least noise (wait share) assumed around a rank: in a synchronous ring every rank's
// lateness is near 0 however much the windows jitter, and real jobs on a busy host showed
// lateness of 0.11-0.16 on healthy ranks for a few windows; stragglerFactor x this is the least
// lateness of a straggler (0.15 at the default 3).
constexpr double kStragglerNoiseFloor = 0.05;

// A rank one of whose connections spent at least this share of the window transferring data is
// not a straggler: its lateness is that connection's (a healthy job's connections move their
// data in a few percent of the window; a link at a tenth of its rate takes most of it).
constexpr double kStragglerMaxIoShare = 0.3;

// A rank that waits at most this fraction of the job's typical own wait may be a straggler
// whose lateness spread along a synchronous ring (see below).
constexpr double kStragglerOwnWaitRatio = 0.25;

class StragglerRule final : public Rule {
 public:
  std::string_view name() const override { return "straggler"; }
  void evaluate(const Window& w, Findings& out) override;

 private:
  // Per rank: the last tick it had a measured connection slower than half the job's reference rate
  // (a rank on a slow link is not a straggler, even in a window where the link measured normal).
  std::map<std::int32_t, WallTime> slow_transfer_at_;
  // The last tick with a slow connection (comm-slow rule) anywhere in the job.
  std::optional<WallTime> last_slow_link_seen_;
};

void StragglerRule::evaluate(const Window& w, Findings& out) {
  const Thresholds& th = w.th;
  const WallTime now = w.now;
  const std::int32_t n = w.size();
  const auto un = static_cast<std::size_t>(n);
  const auto& nodes = w.snap.nodes;
  const auto& edges = w.edges;
  for (std::int32_t r = 0; r < n; ++r) {
    if (out.slow_transfer[static_cast<std::size_t>(r)]) slow_transfer_at_[r] = now;
  }
  if (out.slow_link) last_slow_link_seen_ = now;
  // Judged only while every connection of the job is at a normal rate, and clearWindows ticks
  // after the last slow one: a slow link makes the ring late everywhere downstream of it, and a
  // rank late by the link's doing (its receiver's neighbours, ranks sharing its node) must not be
  // named a straggler. A real straggler during a slow link is named once the link is dealt with.
  const bool linkSlowLately = last_slow_link_seen_ && secs(now - *last_slow_link_seen_) <
                                                          th.clear_windows * th.window_seconds;
  if (w.warmup || w.hang_rules_off || linkSlowLately) return;
  // Per rank: median wait share of its peers on it (out-edges) and of it on its peers
  // (in-edges), over edges whose bytes moved this window.
  std::vector<std::pair<std::int32_t, double>> outs, ins;
  // Per rank: the largest share of the window one of its connections spent moving data. A
  // straggler is late because it computes; a rank whose connection spends much of the window
  // transferring (the two ends of a slow link, before its rate is measured) is late because of
  // that connection.
  std::vector<double> ioShare(un, 0.0);
  for (const Edge& e : edges) {
    ioShare[static_cast<std::size_t>(e.src)] =
        std::max(ioShare[static_cast<std::size_t>(e.src)], e.io_share);
    ioShare[static_cast<std::size_t>(e.dst)] =
        std::max(ioShare[static_cast<std::size_t>(e.dst)], e.io_share);
    // A wait that may have begun during an announced pause measures the pause: the peers of
    // a rank that checkpointed for 20 s report 20 s waits when the step completes, in a report
    // that may reach the operator after pauseGraceSeconds.
    if (!e.moved || e.wait_spans_pause) continue;
    outs.emplace_back(e.src, e.wait_share);
    ins.emplace_back(e.dst, e.wait_share);
  }
  auto perRankMedian = [&](std::vector<std::pair<std::int32_t, double>>& v,
                           std::vector<double>& med, std::vector<std::int32_t>& count) {
    std::sort(v.begin(), v.end());
    std::vector<double> tmp;
    for (std::size_t i = 0; i < v.size();) {
      std::size_t j = i;
      tmp.clear();
      while (j < v.size() && v[j].first == v[i].first) tmp.push_back(v[j++].second);
      const auto r = static_cast<std::size_t>(v[i].first);
      count[r] = static_cast<std::int32_t>(tmp.size());
      med[r] = median(tmp);
      i = j;
    }
  };
  std::vector<double> outWait(un, 0.0), inWait(un, 0.0);
  std::vector<std::int32_t> outCount(un, 0), inCount(un, 0);
  perRankMedian(outs, outWait, outCount);
  perRankMedian(ins, inWait, inCount);
  std::vector<double> lateness(un, 0.0), absLate, outs1, ins1;
  absLate.reserve(un);
  for (std::size_t r = 0; r < un; ++r) {
    if (outCount[r] == 0 || inCount[r] == 0) continue;
    lateness[r] = outWait[r] - inWait[r];
    absLate.push_back(std::abs(lateness[r]));
    outs1.push_back(outWait[r]);
    ins1.push_back(inWait[r]);
  }
  if (absLate.size() >= 4) {
    const double typicalWait = median(outs1);
    const double typicalOwnWait = median(ins1);
    // The job's noise around rank r: median |lateness| of the ranks that are neither r nor its
    // peers (a straggler skews its peers' lateness too; in small jobs they are most ranks).
    std::vector<double> rankNoise(un, kStragglerNoiseFloor);
    std::vector<char> near(un, 0);
    std::vector<double> tmp;
    auto noiseFor = [&](std::int32_t r) {
      std::fill(near.begin(), near.end(), 0);
      near[static_cast<std::size_t>(r)] = 1;
      for (const Edge& e : edges) {
        if (e.src == r) near[static_cast<std::size_t>(e.dst)] = 1;
        if (e.dst == r) near[static_cast<std::size_t>(e.src)] = 1;
      }
      tmp.clear();
      for (std::size_t x = 0; x < un; ++x) {
        if (!near[x] && outCount[x] > 0 && inCount[x] > 0) tmp.push_back(std::abs(lateness[x]));
      }
      return tmp.size() >= 2 ? std::max(kStragglerNoiseFloor, median(tmp)) : kStragglerNoiseFloor;
    };
    std::map<std::size_t, std::vector<std::int32_t>> byNode;
    for (std::int32_t r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (outCount[ur] == 0 || inCount[ur] == 0 || out.touches_slow[ur] ||
          out.crash_candidate[ur] || !w.reporting[ur] || ioShare[ur] >= kStragglerMaxIoShare) {
        continue;
      }
      if (auto it = slow_transfer_at_.find(r);
          it != slow_transfer_at_.end() &&
          secs(now - it->second) < th.clear_windows * th.window_seconds) {
        continue;
      }
      const bool off = w.offends(w.nodeOf(r));
      const std::int32_t need =
          std::min(w.peersIf(off), std::max<std::int32_t>(1, w.out_degree[ur]));
      if (outCount[ur] < need) continue;
      const double minShare = w.relaxedIf(off, th.min_lateness_share);
      const double factor = w.factorIf(off, th.straggler_factor);
      // Its peers wait on it more than the job typically waits, or (a synchronous job where
      // the lateness spreads along the ring and everyone ends up waiting) it waits much less
      // than the job typically does: under a quarter of it (ranks downstream of a slow link or
      // a straggler wait less than others too, but not that much less).
      const double excessOut = outWait[ur] - typicalWait;
      const double deficitIn =
          inWait[ur] <= kStragglerOwnWaitRatio * typicalOwnWait ? typicalOwnWait - inWait[ur] : 0.0;
      if (std::max(excessOut, deficitIn) < minShare ||
          lateness[ur] < factor * kStragglerNoiseFloor) {
        continue;
      }
      rankNoise[ur] = noiseFor(r);
      if (lateness[ur] >= factor * rankNoise[ur]) byNode[w.nodeOf(r)].push_back(r);
    }
    // A straggler's lateness echoes downstream (its receivers forward late): ranks on other
    // nodes whose lateness is under half the worst candidate's are its echoes, not stragglers.
    double worstLateness = 0.0;
    for (const auto& [node, ranks] : byNode) {
      for (std::int32_t r : ranks) {
        worstLateness = std::max(worstLateness, lateness[static_cast<std::size_t>(r)]);
      }
    }
    for (auto it = byNode.begin(); it != byNode.end();) {
      std::erase_if(it->second, [&](std::int32_t r) {
        return lateness[static_cast<std::size_t>(r)] < 0.5 * worstLateness;
      });
      it = it->second.empty() ? byNode.erase(it) : std::next(it);
    }
    // Comparable lateness on two or more nodes at once is no straggler: one slow rank's
    // echoes fade downstream, and independent stragglers appearing in the same window are far
    // less likely than something job-wide (contention for the hosts' CPUs or links). The e2e
    // freeze's attempt 1 on a loaded 2-core host once read ranks on two nodes as 2.0x and
    // 2.08x stragglers in the same window, while each was as busy as a typical rank.
    if (byNode.size() >= 2) byNode.clear();
    for (auto& [node, ranks] : byNode) {
      const bool off = w.offends(node);
      std::int32_t worst = ranks.front();
      for (std::int32_t r : ranks) {
        if (lateness[static_cast<std::size_t>(r)] > lateness[static_cast<std::size_t>(worst)]) {
          worst = r;
        }
      }
      const auto uw = static_cast<std::size_t>(worst);
      const double excess = std::max(outWait[uw] - typicalWait, 0.0);
      const double noise = rankNoise[uw];
      const double share = std::clamp(excess, 0.0, 0.95);
      Candidate c;
      Verdict& v = c.verdict;
      v.fault_class = FaultClass::kNonCommSlow;
      v.culprit = nodeCulprit(nodes[node].name);
      v.ranks = ranks;
      v.action = Action::kEventOnly;
      v.node_evidence = nodes[node].hasHardwareFault();
      v.repeat_offender = off;
      // Two estimates of how much slower the job runs, the larger wins: the peers' wait beyond
      // the job's typical wait (jobs where only the straggler's peers wait), and, in
      // synchronous jobs where every rank ends up waiting for the straggler (the typical wait
      // is then mostly the straggler's doing), the straggler's busy share over a typical
      // rank's: each step lasts the straggler's work, where it used to last a typical rank's.
      const double busySelf = 1.0 - std::clamp(inWait[uw], 0.0, 1.0);
      const double busyTypical = std::max(0.05, 1.0 - std::clamp(typicalWait, 0.0, 1.0));
      const double busyRatio = std::clamp(busySelf / busyTypical, 1.0, 20.0);
      v.slowdown = std::max(1.0 / (1.0 - share), busyRatio);
      if (v.slowdown < w.factorIf(off, th.min_straggler_slowdown)) continue;
      c.relaxed = off;
      v.evidence.message = strf(
          "straggler rank %d on node %s: its %d peers wait on it %.0f%% of the window, the job's "
          "typical wait is %.0f%% and it waits on them %.0f%% (typical %.0f%%): excess %.2f, "
          "deficit %.2f (minLatenessShare %.2f), lateness %.2f vs job noise %.3f "
          "(stragglerFactor %.1fx); transfers normal; busy %.0f%% vs typical %.0f%%; estimated "
          "slowdown %.2fx",
          worst, nodes[node].name.c_str(), outCount[uw], outWait[uw] * 100.0, typicalWait * 100.0,
          inWait[uw] * 100.0, typicalOwnWait * 100.0, excess,
          std::max(typicalOwnWait - inWait[uw], 0.0), w.relaxedIf(off, th.min_lateness_share),
          lateness[uw], noise, w.factorIf(off, th.straggler_factor), busySelf * 100.0,
          busyTypical * 100.0, v.slowdown);
      if (ranks.size() > 1) v.evidence.message += "; ranks " + rankList(ranks);
      v.evidence.numbers = {{"excessWaitShare", excess},
                            {"lateness", lateness[uw]},
                            {"typicalWaitShare", typicalWait},
                            {"peersWaitShare", outWait[uw]},
                            {"ownWaitShare", inWait[uw]},
                            {"jobNoise", noise},
                            {"typicalOwnWaitShare", typicalOwnWait},
                            {"slowdown", v.slowdown}};
      out.candidates.push_back(std::move(c));
    }
  }
}

}  // namespace

std::unique_ptr<Rule> makeStragglerRule() {
  return std::make_unique<StragglerRule>();
}

}  // namespace c4::c4d
