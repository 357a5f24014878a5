// Communication slow: connections slower than a fraction of the job's reference rate —
// 1/slowFactor, or, where the job's rates are quieter than that allows for, a fraction set by the
// job's own noise (below). A node whose whole row or column of inter-node connections is slow, or
// that every slow link shares, has a slow NIC; the other slow connections are grouped by node pair
// into links. Off during warm-up. Publishes Findings::touches_slow, slow_transfer, slow_link and
// reference_rate.
#include <algorithm>
#include <limits>
#include <map>

#include "operator/c4d/rules/rule.h"
#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

// The comm-slow reference is at most the median of the per-window references of this many
// recent windows (see below).
constexpr double kReferenceMemoryWindows = 30.0;

// A rank with a connection slower than this fraction of the job's reference rate in the last
// clearWindows ticks is not a straggler (its lateness may be the link's): published as
// Findings::slow_transfer.
constexpr double kStragglerTransferRatio = 0.5;

// The noise-relative threshold. Each window's noise is the relative spread of its measured
// inter-node rates, sigma = 1.4826 x MAD / median (the standard deviation, for normal noise,
// estimated without the outliers a slow link or NIC adds: fewer than half the connections); the
// job's noise is the median of the last kReferenceMemoryWindows windows' (at least
// kMinNoiseWindows of them, each over at least kMinNoiseConnections connections). A connection is
// slow below the reference times max(1/slowFactor, min(kMaxSlowRatio, 1 - slowNoiseSigmas x
// noise)): a jittery job keeps 1/slowFactor, a quiet one names a link or NIC at half its
// peers' rate, and no connection above kMaxSlowRatio of the reference is ever slow.
// slowNoiseSigmas 0 turns it off. A connection slow only by the noise-relative threshold (not
// below 1/slowFactor) is slow once it has been so in kMildWindows measured windows in a row: a
// mild slowness is told from a transient dip (a TCP loss recovery, a burst of delay) by lasting,
// where the jitter a job shows across its connections says nothing of how long a dip lasts.
constexpr double kMaxSlowRatio = 0.6;
constexpr int kMildWindows = 5;
constexpr std::size_t kMinNoiseConnections = 8;
constexpr std::size_t kMinNoiseWindows = 3;

class CommSlowRule final : public Rule {
 public:
  std::string_view name() const override { return "commSlow"; }
  void evaluate(const Window& w, Findings& out) override;

 private:
  // The reference of the recent windows (measured connections only), oldest first.
  struct RefSample {
    WallTime time{};
    double rate = 0.0;
  };
  std::vector<RefSample> ref_history_;
  std::vector<RefSample> noise_history_;  // rate: the window's relative spread (sigma)
  // Edge key -> measured windows in a row it was below the threshold (slow by the
  // noise-relative threshold once kMildWindows).
  std::map<std::uint64_t, int> mild_streak_;
};

void CommSlowRule::evaluate(const Window& w, Findings& out) {
  const Thresholds& th = w.th;
  const WallTime now = w.now;
  const auto& nodes = w.snap.nodes;
  // The rate a connection is compared with: the 75th percentile of the measured connections
  // between nodes (links join nodes; connections within a node run at memory speed and say
  // nothing about them), so a slow NIC that carries half of a small job's connections still
  // stands out; the median of all measured connections when fewer than 4 cross nodes.
  //
  // Where a slow link paces a ring, the other connections' data is buffered before their receives
  // are posted: they are too fast to measure, and the slow connections may be the only measured
  // ones. So the window's reference also counts those connections at their lower-bound rates, and
  // is never above the recent past's: the median of the per-window references (measured
  // connections only) of the last kReferenceMemoryWindows windows. A job-wide slowdown lowers the
  // window's reference with it; a burst of unmeasurably fast connections cannot raise it.
  double refRate = 0.0;
  const bool interRef = w.inter_rates.size() >= 4;
  std::size_t refCount = 0;  // connections the window's reference is taken over
  if (!w.warmup && w.rates.size() >= 4) {
    std::vector<double> measured = interRef ? w.inter_rates : w.rates;
    const double measuredRef = interRef ? quantile(measured, 0.75) : median(measured);
    ref_history_.push_back({now, measuredRef});
  }
  if (!w.warmup && w.inter_rates.size() >= kMinNoiseConnections) {
    std::vector<double> rates = w.inter_rates;
    const double mid = median(rates);
    if (mid > 0.0) {
      for (double& r : rates) r = std::abs(r - mid);
      noise_history_.push_back({now, 1.4826 * median(rates) / mid});
    }
  }
  auto old = [&](const RefSample& r) {
    return secs(now - r.time) > kReferenceMemoryWindows * th.window_seconds;
  };
  std::erase_if(ref_history_, old);
  std::erase_if(noise_history_, old);
  double noise = -1.0;  // the job's noise; < 0: not known yet
  if (noise_history_.size() >= kMinNoiseWindows) {
    std::vector<double> sigmas;
    sigmas.reserve(noise_history_.size());
    for (const RefSample& r : noise_history_) sigmas.push_back(r.rate);
    noise = median(sigmas);
  }
  const double noiseRatio = noise < 0.0 || th.slow_noise_sigmas <= 0.0
                                ? 0.0
                                : std::min(kMaxSlowRatio, 1.0 - th.slow_noise_sigmas * noise);
  // The fraction of the reference below which a connection is slow, for a slowFactor (relaxed for
  // repeat offenders by the caller).
  auto slowRatio = [&](double factor) { return std::max(1.0 / factor, noiseRatio); };
  auto thresholdText = [&](double factor) {
    return noiseRatio > 1.0 / factor
               ? strf("threshold %.2fx: 1 - %g x the job's noise %.3f (slowNoiseSigmas)",
                      slowRatio(factor), th.slow_noise_sigmas, noise)
               : strf("threshold 1/slowFactor = %.2fx", 1.0 / factor);
  };
  if (!w.warmup && !ref_history_.empty()) {
    std::vector<double> recent;
    recent.reserve(ref_history_.size());
    for (const RefSample& r : ref_history_) recent.push_back(r.rate);
    const double recentRef = median(recent);
    const bool interNow = w.inter_rates.size() + w.inter_bounds.size() >= 4;
    std::vector<double> window = interNow ? w.inter_rates : w.rates;
    const std::vector<double>& extra = interNow ? w.inter_bounds : w.bounds;
    window.insert(window.end(), extra.begin(), extra.end());
    refCount = window.size();
    if (window.size() >= 4) {
      refRate = std::min(interNow ? quantile(window, 0.75) : median(window), recentRef);
    }
  }
  out.reference_rate = refRate;
  if (refRate <= 0.0) {
    mild_streak_.clear();
    return;
  }

  const std::vector<Edge>& edges = w.edges;
  // The streaks go on through windows in which an edge is not measured (no evidence either way)
  // and end with a measured window in which it is above the threshold, or with the edge.
  std::map<std::uint64_t, int> streaks;
  std::vector<char> slow(edges.size(), 0);  // per edge
  struct Line {
    std::size_t measured = 0, slow = 0;
    std::size_t first_peer = std::numeric_limits<std::size_t>::max();
    bool many_peers = false;
    double min_ratio = kInf;
  };
  std::vector<Line> row(nodes.size()), col(nodes.size());
  auto addLine = [](Line& l, std::size_t peer, bool isSlow, double ratio) {
    ++l.measured;
    if (isSlow) {
      ++l.slow;
      l.min_ratio = std::min(l.min_ratio, ratio);
    }
    if (l.first_peer == std::numeric_limits<std::size_t>::max()) {
      l.first_peer = peer;
    } else if (l.first_peer != peer) {
      l.many_peers = true;
    }
  };
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (e.fast && w.nodeOf(e.src) != w.nodeOf(e.dst)) {
      // Not slow: a node whose out- or in-connections include one is no slow NIC.
      addLine(row[w.nodeOf(e.src)], w.nodeOf(e.dst), false, 1.0);
      addLine(col[w.nodeOf(e.dst)], w.nodeOf(e.src), false, 1.0);
    }
    if (!e.measured) {
      if (auto prev = mild_streak_.find(e.key); prev != mild_streak_.end()) {
        streaks[e.key] = prev->second;
      }
      continue;
    }
    const std::size_t a = w.nodeOf(e.src), b = w.nodeOf(e.dst);
    const double factor = w.factorIf(w.offends(a) || w.offends(b), th.slow_factor);
    const bool severe = e.rate * factor < refRate;
    int streak = 0;  // windows in a row below the threshold, severe ones included
    if (severe || e.rate < refRate * slowRatio(factor)) {
      auto prev = mild_streak_.find(e.key);
      streak = (prev == mild_streak_.end() ? 0 : prev->second) + 1;
      streaks[e.key] = streak;
    }
    slow[i] = severe || streak >= kMildWindows ? 1 : 0;
    if (e.rate < kStragglerTransferRatio * refRate) {
      out.slow_transfer[static_cast<std::size_t>(e.src)] = 1;
      out.slow_transfer[static_cast<std::size_t>(e.dst)] = 1;
    }
    if (slow[i]) {
      out.touches_slow[static_cast<std::size_t>(e.src)] = 1;
      out.touches_slow[static_cast<std::size_t>(e.dst)] = 1;
      out.slow_link = true;
    }
    if (a != b) {
      const double ratio = e.rate / refRate;
      addLine(row[a], b, slow[i] != 0, ratio);
      addLine(col[b], a, slow[i] != 0, ratio);
    }
  }
  mild_streak_ = std::move(streaks);
  auto wholeLine = [](const Line& l) {
    return l.measured >= 2 && l.slow == l.measured && l.many_peers;
  };
  // A slow NIC of node x: cordon and restart; the caller writes the evidence.
  auto nicCandidate = [&](std::size_t x, std::vector<std::int32_t> ranks) {
    sortUnique(ranks);
    const bool off = w.offends(x);
    Candidate c;
    Verdict& v = c.verdict;
    v.fault_class = FaultClass::kCommSlow;
    v.culprit = nodeCulprit(nodes[x].name);
    v.ranks = std::move(ranks);
    v.action = Action::kCordonAndRestart;
    v.node_evidence = nodes[x].hasHardwareFault();
    v.repeat_offender = off;
    c.relaxed = off;
    return c;
  };
  std::vector<char> nicSlow(nodes.size(), 0);
  for (std::size_t x = 0; x < nodes.size(); ++x) {
    if (!wholeLine(row[x]) && !wholeLine(col[x])) continue;
    nicSlow[x] = 1;
    std::vector<std::int32_t> ranks;
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (slow[i] && (w.nodeOf(e.src) == x || w.nodeOf(e.dst) == x)) {
        ranks.push_back(e.src);
        ranks.push_back(e.dst);
      }
    }
    const double factor = w.factorIf(w.offends(x), th.slow_factor);
    Candidate c = nicCandidate(x, std::move(ranks));
    Verdict& v = c.verdict;
    const bool isRow = wholeLine(row[x]);
    const Line& l = isRow ? row[x] : col[x];
    v.evidence.message = strf(
        "all %zu measured connections %s node %s (%s) are slow: down to %.2fx the job's "
        "reference transfer rate %.1f MB/s (%s): its NIC",
        l.measured, isRow ? "out of" : "into", nodes[x].name.c_str(), isRow ? "row" : "column",
        l.min_ratio, refRate / 1e6, thresholdText(factor).c_str());
    if (isRow && wholeLine(col[x])) v.evidence.message += "; its column is slow too";
    v.evidence.numbers = {{"slowConnections", static_cast<double>(l.slow)},
                          {"measuredConnections", static_cast<double>(l.measured)},
                          {"minRatioToMedian", l.min_ratio},
                          {"referenceBytesPerSecond", refRate},
                          {"slowFactor", factor},
                          {"slowRatio", slowRatio(factor)}};
    if (noise >= 0.0) v.evidence.numbers.emplace_back("noise", noise);
    out.candidates.push_back(std::move(c));
  }
  struct SlowPair {
    std::vector<std::int32_t> ranks;
    std::size_t edges = 0;
    double min_ratio = kInf;
    double min_rate = 0.0;
    std::int32_t ex_src = -1, ex_dst = -1;
  };
  std::map<std::pair<std::size_t, std::size_t>, SlowPair> slowPairs;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (!slow[i]) continue;
    const std::size_t a = w.nodeOf(e.src), b = w.nodeOf(e.dst);
    if (nicSlow[a] || nicSlow[b]) continue;
    SlowPair& p = slowPairs[{std::min(a, b), std::max(a, b)}];
    p.ranks.push_back(e.src);
    p.ranks.push_back(e.dst);
    ++p.edges;
    const double ratio = e.rate / refRate;
    if (ratio < p.min_ratio) {
      p.min_ratio = ratio;
      p.min_rate = e.rate;
      p.ex_src = e.src;
      p.ex_dst = e.dst;
    }
  }
  // Slow links of two or more node pairs that all share one node: that node's NIC (its row or
  // column may hold a single connection each, too few for the whole-line rule).
  if (const std::optional<std::size_t> slowCommon = commonNode(slowPairs)) {
    const std::size_t x = *slowCommon;
    std::vector<std::int32_t> ranks;
    std::size_t nEdges = 0;
    double minRatio = kInf;
    for (const auto& [key, p] : slowPairs) {
      ranks.insert(ranks.end(), p.ranks.begin(), p.ranks.end());
      nEdges += p.edges;
      minRatio = std::min(minRatio, p.min_ratio);
    }
    const double factor = w.factorIf(w.offends(x), th.slow_factor);
    Candidate c = nicCandidate(x, std::move(ranks));
    Verdict& v = c.verdict;
    v.evidence.message = strf(
        "%zu connection(s) slow on %zu links that all share node %s: down to %.2fx the job's "
        "reference rate %.1f MB/s (%s): its NIC",
        nEdges, slowPairs.size(), nodes[x].name.c_str(), minRatio, refRate / 1e6,
        thresholdText(factor).c_str());
    v.evidence.numbers = {{"slowConnections", static_cast<double>(nEdges)},
                          {"slowLinks", static_cast<double>(slowPairs.size())},
                          {"ratioToReference", minRatio},
                          {"referenceBytesPerSecond", refRate},
                          {"slowFactor", factor},
                          {"slowRatio", slowRatio(factor)}};
    if (noise >= 0.0) v.evidence.numbers.emplace_back("noise", noise);
    out.candidates.push_back(std::move(c));
    slowPairs.clear();
  }
  for (auto& [key, p] : slowPairs) {
    const auto [a, b] = key;
    const bool off = w.offends(a) || w.offends(b);
    const double factor = w.factorIf(off, th.slow_factor);
    Candidate c;
    Verdict& v = c.verdict;
    v.fault_class = FaultClass::kCommSlow;
    sortUnique(p.ranks);
    v.ranks = std::move(p.ranks);
    v.repeat_offender = off;
    c.relaxed = off;
    const bool nicA = nodes[a].hasHardwareFault();
    const bool nicB = nodes[b].hasHardwareFault();
    if (a == b || nicA != nicB) {
      const std::size_t x = a == b ? a : (nicA ? a : b);
      v.culprit = nodeCulprit(nodes[x].name);
      v.action = Action::kCordonAndRestart;
      v.node_evidence = nodes[x].hasHardwareFault();
    } else {
      v.culprit = linkCulprit(nodes[a].name, nodes[b].name);
      v.action = Action::kReplan;
    }
    v.evidence.message = strf(
        "%zu connection(s) between %s and %s slow: rank %d -> rank %d transfers at %.1f MB/s, "
        "%.2fx the job's reference rate %.1f MB/s (75th percentile of %zu connections, at most "
        "the last 30 windows' median) (%s)",
        p.edges, nodes[a].name.c_str(), nodes[b].name.c_str(), p.ex_src, p.ex_dst, p.min_rate / 1e6,
        p.min_ratio, refRate / 1e6, refCount, thresholdText(factor).c_str());
    if (v.node_evidence) {
      v.evidence.message +=
          "; node health: " +
          nodes[static_cast<std::size_t>(v.culprit.node == nodes[a].name ? a : b)].health_detail;
    }
    v.evidence.numbers = {{"slowConnections", static_cast<double>(p.edges)},
                          {"ratioToReference", p.min_ratio},
                          {"bytesPerSecond", p.min_rate},
                          {"referenceBytesPerSecond", refRate},
                          {"slowFactor", factor},
                          {"slowRatio", slowRatio(factor)}};
    if (noise >= 0.0) v.evidence.numbers.emplace_back("noise", noise);
    out.candidates.push_back(std::move(c));
  }
}

}  // namespace

std::unique_ptr<Rule> makeCommSlowRule() {
  return std::make_unique<CommSlowRule>();
}

}  // namespace c4::c4d
