#include "operator/c4d/analyser.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace c4::c4d {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double secs(Duration d) {
  return std::chrono::duration<double>(d).count();
}
Duration toDuration(double seconds) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

std::uint64_t edgeKey(std::int32_t src, std::int32_t dst) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32) |
         static_cast<std::uint32_t>(dst);
}
std::int32_t keySrc(std::uint64_t k) {
  return static_cast<std::int32_t>(k >> 32);
}
std::int32_t keyDst(std::uint64_t k) {
  return static_cast<std::int32_t>(k & 0xffffffffULL);
}

__attribute__((format(printf, 1, 2))) std::string strf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  if (n < 0) return {};
  return std::string(buf, std::min(static_cast<std::size_t>(n), sizeof buf - 1));
}

// The q-quantile (0..1, nearest rank below) of v (reordered); 0 for an empty v.
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

double median(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  const double hi = *mid;
  const double lo = *std::max_element(v.begin(), mid);
  return (lo + hi) / 2.0;
}

// Sorts ranks and drops duplicates.
void sortUnique(std::vector<std::int32_t>& ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
}

// The one node that every (a, b) node pair (the keys of `pairs`) has at an end, when there are
// two or more pairs; none otherwise.
template <typename Pairs>
std::optional<std::size_t> commonNode(const Pairs& pairs) {
  if (pairs.size() < 2) return std::nullopt;
  std::set<std::size_t> shared = {pairs.begin()->first.first, pairs.begin()->first.second};
  for (const auto& [key, p] : pairs) {
    std::set<std::size_t> next;
    for (std::size_t x : shared) {
      if (x == key.first || x == key.second) next.insert(x);
    }
    shared = std::move(next);
  }
  if (shared.size() != 1) return std::nullopt;
  return *shared.begin();
}

std::string rankList(const std::vector<std::int32_t>& ranks) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ",";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > shown) out += strf(",... (%zu ranks)", ranks.size());
  return out;
}

Culprit nodeCulprit(const std::string& node) {
  Culprit c;
  c.kind = CulpritKind::kNode;
  c.node = node;
  return c;
}

Culprit rankCulprit(const std::string& node, std::int32_t rank) {
  Culprit c;
  c.kind = CulpritKind::kRank;
  c.node = node;
  c.rank = rank;
  return c;
}

Culprit linkCulprit(const std::string& a, const std::string& b) {
  Culprit c;
  c.kind = CulpritKind::kLink;
  c.node = std::min(a, b);
  c.peer_node = std::max(a, b);
  return c;
}

// One rank's view of its traffic towards one peer in one direction (all its connections to that
// peer summed), from its newest report, with the bytes moved since its previous report.
struct Side {
  std::uint64_t key = 0;  // src << 32 | dst of the data flow
  bool send = false;
  std::uint32_t conns = 0;
  std::uint64_t bytes = 0;
  std::uint64_t wire = 0;  // socket-level payload bytes (0: not reported)
  std::uint64_t delta = 0;
  bool has_delta = false;   // previous report present with the same connections, no reset
  bool wire_still = false;  // hasDelta and the wire bytes did not move between the two reports
  std::uint32_t inflight = 0;
  std::uint64_t oldest_us = 0;
  std::uint64_t wait_sum_us = 0;
  std::uint64_t wait_max_us = 0;
  std::uint64_t xfer_sum_us = 0;
  double interval_sec = 1.0;
  WallTime time{};
  WallTime prev_time{};
};

struct Agg {
  std::int32_t peer = -1;
  bool send = false;
  std::uint32_t conns = 0;
  std::uint64_t bytes = 0;
  std::uint64_t wire = 0;
  std::uint64_t id_sum = 0;
  std::uint32_t inflight = 0;
  std::uint64_t oldest_us = 0;
  std::uint64_t wait_sum_us = 0;
  std::uint64_t wait_max_us = 0;
  std::uint64_t xfer_sum_us = 0;
};

struct ConnRef {
  std::int32_t peer;
  bool send;
  std::uint32_t index;
};

void aggregate(const ReportSample& r, std::int32_t worldSize, std::int32_t self,
               std::vector<ConnRef>& scratch, std::vector<Agg>& out) {
  scratch.clear();
  out.clear();
  for (std::size_t i = 0; i < r.connections.size(); ++i) {
    const ConnSample& c = r.connections[i];
    if (c.peer_rank < 0 || c.peer_rank >= worldSize || c.peer_rank == self) continue;
    scratch.push_back(
        {c.peer_rank, c.direction == report::Direction::kSend, static_cast<std::uint32_t>(i)});
  }
  std::sort(scratch.begin(), scratch.end(), [](const ConnRef& a, const ConnRef& b) {
    return a.peer != b.peer ? a.peer < b.peer : a.send < b.send;
  });
  for (const ConnRef& ref : scratch) {
    const ConnSample& c = r.connections[ref.index];
    if (out.empty() || out.back().peer != ref.peer || out.back().send != ref.send) {
      out.push_back(Agg{.peer = ref.peer, .send = ref.send});
    }
    Agg& a = out.back();
    ++a.conns;
    a.bytes += c.bytes;
    a.wire += c.wire_bytes;
    a.id_sum += c.id * 0x9e3779b97f4a7c15ULL + 1;
    a.inflight += c.inflight;
    a.oldest_us = std::max(a.oldest_us, c.inflight > 0 ? c.oldest_inflight_us : 0);
    a.wait_sum_us += c.wait.sum_us;
    a.wait_max_us = std::max(a.wait_max_us, c.wait.max_us);
    a.xfer_sum_us += c.transfer.sum_us;
  }
}

// The least noise (wait share) assumed around a rank: in a synchronous ring every rank's
// lateness is near 0 however much the windows jitter, and real jobs on a busy host showed
// lateness of 0.11-0.16 on healthy ranks for a few windows; stragglerFactor x this is the least
// lateness of a straggler (0.15 at the default 3).
constexpr double kStragglerNoiseFloor = 0.05;

// A rank with a connection slower than this fraction of the job's reference rate in the last
// clearWindows ticks is not a straggler (its lateness may be the link's).
constexpr double kStragglerTransferRatio = 0.5;

// A rank one of whose connections spent at least this share of the window transferring data is
// not a straggler: its lateness is that connection's (a healthy job's connections move their
// data in a few percent of the window; a link at a tenth of its rate takes most of it).
constexpr double kStragglerMaxIoShare = 0.3;

// The comm-slow reference is at most the median of the per-window references of this many
// recent windows (see the comm-slow rule).
constexpr double kReferenceMemoryWindows = 30.0;

// A rank that waits at most this fraction of the job's typical own wait may be a straggler
// whose lateness spread along a synchronous ring (see the straggler rule).
constexpr double kStragglerOwnWaitRatio = 0.25;

// Per-window values of one rank->rank edge.
struct Edge {
  std::uint64_t key = 0;
  std::int32_t src = -1;
  std::int32_t dst = -1;
  std::int32_t send = -1;  // index into sides, -1: the sender did not report this edge
  std::int32_t recv = -1;  // index into sides, -1: the receiver did not report this edge
  double wait_age = 0.0;   // receiver waits with no bytes moving this long (0: not waiting)
  bool posted = false;     // the sender has ops in flight or bytes in transit towards dst
  // The receiver waits while payload the sender wrote to its sockets has not been read and the
  // receiver's socket-level bytes have not moved for this long (0: not the case).
  double queued_age = 0.0;
  std::uint64_t queued_bytes = 0;
  bool moved = false;       // the receiver's bytes moved this window (measurable window)
  bool measured = false;    // carried >= minMeasureBytes: rate is meaningful
  bool fast = false;        // carried >= minMeasureBytes too fast to measure (never slow)
  double rate = 0.0;        // bytes per second of transfer time
  double wait_share = 0.0;  // receiver's wait time / window
  // The receiver's longest wait completed this window may have begun before the last pause
  // ended: its wait share measures the pause, not the peer.
  bool wait_spans_pause = false;
  double io_share = 0.0;  // the larger of the two ends' transfer time / window (first byte -> done)
  bool slow = false;
};

// A finding of this tick before confirmation.
struct Candidate {
  Verdict verdict;
  bool relaxed = false;
};

}  // namespace

void JobAnalyser::reset() {
  started_ = false;
  attempt_ = 0;
  ticks_in_attempt_ = 0;
  last_tick_ = WallTime{};
  last_pause_seen_.reset();
  edges_.clear();
  peer_errors_.clear();
  crash_victims_.clear();
  slow_transfer_at_.clear();
  last_slow_link_seen_.reset();
  ref_history_.clear();
  findings_.clear();
  observations_.clear();
}

std::vector<Verdict> JobAnalyser::activeVerdicts() const {
  std::vector<Verdict> out;
  for (const auto& [key, f] : findings_) {
    if (f.confirmed) out.push_back(f.verdict);
  }
  return out;
}

Result<TickResult> JobAnalyser::tick(const JobSnapshot& snap, WallTime now) {
  if (auto st = validate(snap); !st) return std::unexpected(st.error());
  if (started_ && now < last_tick_) {
    return makeError(ErrorCode::kInvalidArgument, "now is earlier than the previous tick");
  }
  const Thresholds& th = snap.thresholds;
  TickResult result;

  if (!started_ || snap.attempt != attempt_) {
    for (const auto& [key, f] : findings_) {
      if (f.confirmed) result.cleared.push_back(key);
    }
    reset();
    started_ = true;
    attempt_ = snap.attempt;
  }
  last_tick_ = now;
  ++ticks_in_attempt_;

  const std::int32_t n = snap.world_size;
  const auto un = static_cast<std::size_t>(n);
  const auto& nodes = snap.nodes;
  auto nodeOf = [&](std::int32_t r) {
    return static_cast<std::size_t>(snap.ranks[static_cast<std::size_t>(r)].node);
  };
  auto rankAt = [&](std::int32_t r) -> const RankSnapshot& {
    return snap.ranks[static_cast<std::size_t>(r)];
  };

  // --- Liveness, repeat offenders, pauses, warm-up -------------------------------------------
  std::vector<char> reporting(un, 0), alive(un, 0), finished(un, 0), gone(un, 0);
  std::vector<double> silentFor(un, kInf);
  for (std::int32_t r = 0; r < n; ++r) {
    const RankSnapshot& rs = rankAt(r);
    const auto ur = static_cast<std::size_t>(r);
    if (!rs.reports.empty()) silentFor[ur] = std::max(0.0, secs(now - rs.reports.back().time));
    reporting[ur] = silentFor[ur] <= th.silence_seconds ? 1 : 0;
    alive[ur] = rs.pod_state == PodState::kRunning ? 1 : 0;
    gone[ur] = rs.pod_state == PodState::kFailed || rs.pod_state == PodState::kGone ? 1 : 0;
    finished[ur] = rs.pod_state == PodState::kSucceeded ||
                           (rs.progress && rs.progress->state == report::ProgressState::kFinished)
                       ? 1
                       : 0;
  }
  std::vector<char> offender(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    offender[i] = nodes[i].repeat_offender_score >= th.repeat_offender_min_score ? 1 : 0;
  }
  const double relax = th.repeat_offender_relax;
  auto relaxedIf = [&](bool off, double v) { return off ? v * relax : v; };
  auto factorIf = [&](bool off, double f) { return off ? 1.0 + (f - 1.0) * relax : f; };
  auto peersIf = [&](bool off) {
    return off ? std::max(1, th.min_peers_evidence - 1) : th.min_peers_evidence;
  };

  bool pausedNow = false;
  for (const RankSnapshot& rs : snap.ranks) {
    if (!rs.progress) continue;
    const auto s = rs.progress->state;
    if ((s == report::ProgressState::kCheckpointing || s == report::ProgressState::kEvaluating) &&
        secs(now - rs.progress->time) <= th.max_pause_seconds) {
      pausedNow = true;
      break;
    }
  }
  if (pausedNow) last_pause_seen_ = now;
  const bool hangRulesOff =
      pausedNow || (last_pause_seen_ && secs(now - *last_pause_seen_) < th.pause_grace_seconds);
  const bool warmup = ticks_in_attempt_ <= th.warmup_windows;

  // --- Sides: every rank's newest report per (peer, direction) -------------------------------
  std::vector<Side> sides;
  {
    std::size_t total = 0;
    for (const RankSnapshot& rs : snap.ranks) {
      if (!rs.reports.empty()) total += rs.reports.back().connections.size();
    }
    sides.reserve(total);
  }
  std::vector<ConnRef> scratch;
  std::vector<Agg> aggNew, aggOld;
  for (std::int32_t r = 0; r < n; ++r) {
    const RankSnapshot& rs = rankAt(r);
    if (rs.reports.empty()) continue;
    const ReportSample& newest = rs.reports.back();
    aggregate(newest, n, r, scratch, aggNew);
    const ReportSample* prev =
        rs.reports.size() >= 2 ? &rs.reports[rs.reports.size() - 2] : nullptr;
    if (prev) {
      aggregate(*prev, n, r, scratch, aggOld);
    } else {
      aggOld.clear();
    }
    std::size_t j = 0;
    for (const Agg& a : aggNew) {
      while (j < aggOld.size() &&
             (aggOld[j].peer < a.peer || (aggOld[j].peer == a.peer && aggOld[j].send < a.send))) {
        ++j;
      }
      Side s;
      s.key = a.send ? edgeKey(r, a.peer) : edgeKey(a.peer, r);
      s.send = a.send;
      s.conns = a.conns;
      s.bytes = a.bytes;
      s.wire = a.wire;
      s.inflight = a.inflight;
      s.oldest_us = a.oldest_us;
      s.wait_sum_us = a.wait_sum_us;
      s.wait_max_us = a.wait_max_us;
      s.xfer_sum_us = a.xfer_sum_us;
      s.interval_sec = std::max(1e-3, static_cast<double>(newest.interval_ms) / 1000.0);
      s.time = newest.time;
      if (j < aggOld.size() && aggOld[j].peer == a.peer && aggOld[j].send == a.send) {
        const Agg& o = aggOld[j];
        s.prev_time = prev->time;
        if (o.conns == a.conns && o.id_sum == a.id_sum && a.bytes >= o.bytes) {
          s.has_delta = true;
          s.delta = a.bytes - o.bytes;
          s.wire_still = a.wire == o.wire;
        }
      }
      sides.push_back(s);
    }
  }
  std::sort(sides.begin(), sides.end(), [](const Side& a, const Side& b) {
    return a.key != b.key ? a.key < b.key : a.send < b.send;
  });

  // --- Edges, joined with their state ---------------------------------------------------------
  std::vector<Edge> edges;
  edges.reserve(sides.size() / 2 + 1);
  for (std::size_t i = 0; i < sides.size(); ++i) {
    if (edges.empty() || edges.back().key != sides[i].key) {
      Edge e;
      e.key = sides[i].key;
      e.src = keySrc(e.key);
      e.dst = keyDst(e.key);
      edges.push_back(e);
    }
    (sides[i].send ? edges.back().send : edges.back().recv) = static_cast<std::int32_t>(i);
  }
  std::vector<EdgeState> newStates;
  newStates.reserve(edges.size());
  std::vector<WallTime> lastProgress(edges.size());
  std::vector<WallTime> lastWireProgress(edges.size());
  {
    std::size_t j = 0;
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      while (j < edges_.size() && edges_[j].key < e.key) ++j;
      const EdgeState* st = j < edges_.size() && edges_[j].key == e.key ? &edges_[j] : nullptr;
      if (e.recv < 0) {
        if (st) {
          newStates.push_back(*st);
          lastProgress[i] = st->last_progress;
          lastWireProgress[i] = st->last_wire_progress;
        } else {
          lastProgress[i] = now;
          lastWireProgress[i] = now;
        }
        continue;
      }
      const Side& rcv = sides[static_cast<std::size_t>(e.recv)];
      EdgeState ns{
          .key = e.key, .recv_bytes = rcv.bytes, .recv_conns = rcv.conns, .recv_wire = rcv.wire};
      if (!st) {
        ns.last_progress = rcv.has_delta && rcv.delta == 0 ? rcv.prev_time : rcv.time;
        ns.last_wire_progress = rcv.wire_still ? rcv.prev_time : rcv.time;
      } else {
        const bool reset = rcv.conns != st->recv_conns;
        ns.last_progress = reset || rcv.bytes != st->recv_bytes ? rcv.time : st->last_progress;
        ns.last_wire_progress =
            reset || rcv.wire != st->recv_wire ? rcv.time : st->last_wire_progress;
      }
      lastProgress[i] = ns.last_progress;
      lastWireProgress[i] = ns.last_wire_progress;
      newStates.push_back(ns);
    }
  }
  edges_ = std::move(newStates);

  const WallTime stallFloor = last_pause_seen_ ? *last_pause_seen_ : WallTime::min();
  // The last pause ended before the first tick that no longer saw it.
  const WallTime pauseEndBound =
      last_pause_seen_ ? *last_pause_seen_ + toDuration(th.window_seconds) : WallTime::min();
  std::vector<std::int32_t> outDegree(un, 0);
  std::vector<double> rates, interRates;
  std::vector<double> bounds,
      interBounds;  // rates of connections too fast to measure: lower bounds
  for (std::size_t i = 0; i < edges.size(); ++i) {
    Edge& e = edges[i];
    const Side* rcv = e.recv >= 0 ? &sides[static_cast<std::size_t>(e.recv)] : nullptr;
    const Side* snd = e.send >= 0 ? &sides[static_cast<std::size_t>(e.send)] : nullptr;
    // A peer counts towards a rank's degree only over a connection in use (bytes moved or ops
    // posted at either end): a job that opens connections to every peer but runs a ring must not
    // need evidence from peers that never talk to the rank.
    const bool in_use = (rcv && (rcv->bytes > 0 || rcv->inflight > 0)) ||
                        (snd && (snd->bytes > 0 || snd->inflight > 0));
    if (in_use) ++outDegree[static_cast<std::size_t>(e.src)];
    if (rcv && reporting[static_cast<std::size_t>(e.dst)]) {
      if (rcv->inflight > 0) {
        const double stall = secs(now - std::max(lastProgress[i], stallFloor));
        const double age = static_cast<double>(rcv->oldest_us) * 1e-6 + secs(now - rcv->time);
        e.wait_age = std::max(0.0, std::min(stall, age));
      }
      if (rcv->has_delta && rcv->delta > 0) {
        e.moved = true;
        e.wait_share = static_cast<double>(rcv->wait_sum_us) * 1e-6 / rcv->interval_sec;
        e.wait_spans_pause =
            last_pause_seen_ && rcv->time - toDuration(rcv->interval_sec) -
                                        std::chrono::microseconds{rcv->wait_max_us} <
                                    pauseEndBound;
        e.io_share = static_cast<double>(rcv->xfer_sum_us) * 1e-6 / rcv->interval_sec;
        if (rcv->delta >= th.min_measure_bytes && rcv->xfer_sum_us > 0 &&
            static_cast<double>(rcv->xfer_sum_us) * 1e-6 >= th.min_measure_transfer_seconds) {
          e.measured = true;
          e.rate = static_cast<double>(rcv->delta) / (static_cast<double>(rcv->xfer_sum_us) * 1e-6);
        }
      }
    }
    // The sender's view of the same link: its ops last from the first byte written to the last,
    // paced by the link once the socket buffers are full. A receiver whose data arrived before
    // its receive was posted completes at once and sees no link at all; the slower view counts.
    if (snd && reporting[static_cast<std::size_t>(e.src)] && snd->has_delta &&
        snd->delta >= th.min_measure_bytes && snd->xfer_sum_us > 0 &&
        static_cast<double>(snd->xfer_sum_us) * 1e-6 >= th.min_measure_transfer_seconds && rcv &&
        reporting[static_cast<std::size_t>(e.dst)] && rcv->has_delta && rcv->delta > 0) {
      const double sendRate =
          static_cast<double>(snd->delta) / (static_cast<double>(snd->xfer_sum_us) * 1e-6);
      e.rate = e.measured ? std::min(e.rate, sendRate) : sendRate;
      e.measured = true;
    }
    if (e.measured) {
      rates.push_back(e.rate);
      if (nodeOf(e.src) != nodeOf(e.dst)) interRates.push_back(e.rate);
    } else if (e.moved && rcv && rcv->delta >= th.min_measure_bytes &&
               static_cast<double>(rcv->xfer_sum_us) * 1e-6 < th.min_measure_transfer_seconds) {
      // Too fast to measure: its data was already in the plugin's buffers when the receive was
      // posted (upstream of a slow link, a ring's fast connections all look like this). It moved
      // this much in under minMeasureTransferSeconds, so its rate is at least delta / that.
      const double atLeast = static_cast<double>(rcv->delta) / th.min_measure_transfer_seconds;
      e.fast = true;
      bounds.push_back(atLeast);
      if (nodeOf(e.src) != nodeOf(e.dst)) interBounds.push_back(atLeast);
    }
    if (snd && reporting[static_cast<std::size_t>(e.src)] && snd->has_delta) {
      e.io_share =
          std::max(e.io_share, static_cast<double>(snd->xfer_sum_us) * 1e-6 / snd->interval_sec);
    }
    if (snd && reporting[static_cast<std::size_t>(e.src)]) {
      e.posted = snd->inflight > 0 || (rcv && snd->conns == rcv->conns && snd->bytes > rcv->bytes);
      // Bytes queued that do not move (a dead link): the sender wrote payload to its sockets that
      // the waiting receiver has not read, and the receiver's sockets have delivered nothing
      // since. Needs the wire counters at both ends and the same connections.
      if (rcv && reporting[static_cast<std::size_t>(e.dst)] && rcv->inflight > 0 &&
          snd->conns == rcv->conns && rcv->wire > 0 && snd->wire > rcv->wire) {
        const double stall = secs(now - std::max(lastWireProgress[i], stallFloor));
        const double age = static_cast<double>(rcv->oldest_us) * 1e-6 + secs(now - rcv->time);
        e.queued_age = std::max(0.0, std::min(stall, age));
        e.queued_bytes = snd->wire - rcv->wire;
      }
    }
  }

  std::vector<Candidate> candidates;
  auto nodeName = [&](std::size_t idx) -> const std::string& { return nodes[idx].name; };

  // --- Crash ----------------------------------------------------------------------------------
  for (std::int32_t r = 0; r < n; ++r) {
    for (const AnomalySample& a : rankAt(r).anomalies) {
      if ((a.kind == report::AnomalyKind::kPeerClosed ||
           a.kind == report::AnomalyKind::kConnectionError) &&
          a.peer_rank >= 0 && a.peer_rank < n && a.peer_rank != r) {
        peer_errors_.push_back({r, a.peer_rank, a.time});
      }
    }
  }
  std::erase_if(peer_errors_,
                [&](const PeerError& e) { return secs(now - e.time) > th.anomaly_memory_seconds; });
  std::vector<WallTime> accusedAt(un, WallTime::max());
  std::vector<std::set<std::int32_t>> accusers(un);
  for (const PeerError& e : peer_errors_) {
    const auto t = static_cast<std::size_t>(e.target);
    accusedAt[t] = std::min(accusedAt[t], e.time);
    accusers[t].insert(e.reporter);
  }
  std::vector<char> crashCand(un, 0);
  for (std::int32_t r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (finished[ur]) continue;
    const bool off = offender[nodeOf(r)] != 0;
    const auto need = static_cast<std::size_t>(
        std::max(1, std::min(peersIf(off), std::max<std::int32_t>(1, outDegree[ur]))));
    const bool podEvidence = gone[ur] && silentFor[ur] > th.window_seconds;
    const bool peerEvidence = !reporting[ur] && accusers[ur].size() >= need;
    const bool peerAndPod = gone[ur] && !accusers[ur].empty();
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
    const std::size_t node = nodeOf(r);
    const NodeSnapshot& ns = nodes[node];
    const bool hw = ns.hasHardwareFault();
    const bool off = offender[node] != 0;
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
    const double silent = silentFor[ur];
    v.evidence.message = strf(
        "rank %d (pod %s on node %s): pod %s, %s; %zu peer(s) reported the connection closed or "
        "failed within %.0f s",
        r, rankAt(r).pod.c_str(), ns.name.c_str(),
        std::string(podStateName(rankAt(r).pod_state)).c_str(),
        silent == kInf ? "never reported" : strf("no report for %.1f s", silent).c_str(),
        accusers[ur].size(), th.anomaly_memory_seconds);
    if (hw) v.evidence.message += "; node health: " + ns.health_detail;
    if (off) v.evidence.message += strf("; repeat offender (score %.0f)", ns.repeat_offender_score);
    if (!hw && !off) v.evidence.message += "; no node-level evidence: restart without cordon";
    v.evidence.numbers = {{"silentSeconds", silent == kInf ? -1.0 : silent},
                          {"peersReportingErrors", static_cast<double>(accusers[ur].size())},
                          {"podGone", gone[ur] ? 1.0 : 0.0}};
    candidates.push_back(std::move(c));
  }

  // --- Wait-for graph: who waits on whom ------------------------------------------------------
  std::vector<std::int32_t> waiters(un, 0);
  std::vector<double> maxWaitOn(un, 0.0);
  std::vector<char> postsToWaiters(un, 0), waitsOnSomeone(un, 0), anyoneWaits(un, 0);
  for (const Edge& e : edges) {
    if (e.wait_age <= 0.0) continue;
    const auto s = static_cast<std::size_t>(e.src);
    const bool off = offender[nodeOf(e.src)] != 0;
    const double need =
        reporting[s] ? relaxedIf(off, th.hang_seconds) : relaxedIf(off, th.silence_seconds);
    if (e.wait_age >= th.silence_seconds) {
      waitsOnSomeone[static_cast<std::size_t>(e.dst)] = 1;
      anyoneWaits[s] = 1;
    }
    if (e.wait_age >= need) {
      ++waiters[s];
      maxWaitOn[s] = std::max(maxWaitOn[s], e.wait_age);
      if (e.posted) postsToWaiters[s] = 1;
    }
  }

  // --- Non-communication hang -----------------------------------------------------------------
  std::vector<char> hangRoot(un, 0);
  if (!hangRulesOff) {
    std::map<std::size_t, std::vector<std::int32_t>> byNode;
    for (std::int32_t r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (waiters[ur] == 0 || crashCand[ur] || finished[ur]) continue;
      const bool off = offender[nodeOf(r)] != 0;
      const std::int32_t need = std::min(peersIf(off), std::max<std::int32_t>(1, outDegree[ur]));
      if (waiters[ur] < need) continue;
      const bool frozen = !reporting[ur] && alive[ur];
      const bool idleRoot = reporting[ur] && !postsToWaiters[ur] && !waitsOnSomeone[ur];
      if (!frozen && !idleRoot) continue;
      hangRoot[ur] = 1;
      byNode[nodeOf(r)].push_back(r);
    }
    for (auto& [node, ranks] : byNode) {
      const NodeSnapshot& ns = nodes[node];
      const bool off = offender[node] != 0;
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
          frozen ? relaxedIf(off, th.silence_seconds) : relaxedIf(off, th.hang_seconds);
      if (frozen) {
        const std::string silence = silentFor[ur] == kInf
                                        ? std::string("has not reported")
                                        : strf("stopped reporting %.1f s ago", silentFor[ur]);
        v.evidence.message = strf(
            "rank %d on node %s %s while its pod runs; %d of %d peers wait on it with no bytes "
            "moving (longest %.1f s, threshold silenceSeconds %.1f s)",
            r, ns.name.c_str(), silence.c_str(), waiters[ur], outDegree[ur], maxWaitOn[ur],
            threshold);
      } else {
        v.evidence.message = strf(
            "rank %d on node %s posts nothing and waits on no one while %d of %d peers wait on "
            "it with no bytes moving (longest %.1f s, threshold hangSeconds %.1f s)",
            r, ns.name.c_str(), waiters[ur], outDegree[ur], maxWaitOn[ur], threshold);
      }
      if (ranks.size() > 1) v.evidence.message += "; ranks " + rankList(ranks);
      if (v.node_evidence) v.evidence.message += "; node health: " + ns.health_detail;
      v.evidence.numbers = {
          {"waitingPeers", static_cast<double>(waiters[ur])},
          {"peers", static_cast<double>(outDegree[ur])},
          {"longestWaitSeconds", maxWaitOn[ur]},
          {"thresholdSeconds", threshold},
          {"silentSeconds", frozen && silentFor[ur] != kInf ? silentFor[ur] : 0.0}};
      candidates.push_back(std::move(c));
    }
  }

  // --- Communication hang ---------------------------------------------------------------------
  if (!hangRulesOff) {
    struct PairInfo {
      std::vector<std::int32_t> ranks;
      std::size_t edges = 0;
      double max_age = 0.0;
      std::int32_t example_src = -1, example_dst = -1;
      std::size_t queued_edges = 0;  // found by the queued-bytes rule (silenceSeconds)
      std::uint64_t queued_bytes = 0;
    };
    std::map<std::pair<std::size_t, std::size_t>, PairInfo> pairs;
    for (const Edge& e : edges) {
      if (!reporting[static_cast<std::size_t>(e.src)] ||
          !reporting[static_cast<std::size_t>(e.dst)]) {
        continue;
      }
      const std::size_t a = nodeOf(e.src), b = nodeOf(e.dst);
      const bool off = offender[a] || offender[b];
      // Ops waiting at both ends with no bytes completing for hangSeconds, or bytes queued at
      // the sender that do not move for silenceSeconds (a dead link needs no long timeout).
      const bool waiting =
          e.wait_age > 0.0 && e.posted && e.wait_age >= relaxedIf(off, th.hang_seconds);
      const bool queued = e.queued_age > 0.0 && e.queued_age >= relaxedIf(off, th.silence_seconds);
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
      const bool off = offender[a] || offender[b];
      const double threshold = relaxedIf(off, nQueued > 0 ? th.silence_seconds : th.hang_seconds);
      v.repeat_offender = off;
      c.relaxed = off;
      std::string where;
      if (kind == CulpritKind::kNode) {
        v.culprit = nodeCulprit(nodeName(a));
        v.action = Action::kCordonAndRestart;
        v.node_evidence = nodes[a].hasHardwareFault();
        where = nPairs > 1
                    ? strf("all %zu stalled links share node %s", nPairs, nodeName(a).c_str())
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
      candidates.push_back(std::move(c));
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

  // --- Communication slow ---------------------------------------------------------------------
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
  std::vector<char> touchesSlow(un, 0);
  const bool interRef = interRates.size() >= 4;
  const std::size_t measuredCount = interRef ? interRates.size() : rates.size();
  std::size_t refCount = 0;  // connections the window's reference is taken over
  if (!warmup && rates.size() >= 4) {
    const double measuredRef = interRef ? quantile(interRates, 0.75) : median(rates);
    ref_history_.push_back({now, measuredRef});
  }
  std::erase_if(ref_history_, [&](const RefSample& r) {
    return secs(now - r.time) > kReferenceMemoryWindows * th.window_seconds;
  });
  if (!warmup && !ref_history_.empty()) {
    std::vector<double> recent;
    recent.reserve(ref_history_.size());
    for (const RefSample& r : ref_history_) recent.push_back(r.rate);
    const double recentRef = median(recent);
    const bool interNow = interRates.size() + interBounds.size() >= 4;
    std::vector<double> window = interNow ? interRates : rates;
    const std::vector<double>& extra = interNow ? interBounds : bounds;
    window.insert(window.end(), extra.begin(), extra.end());
    refCount = window.size();
    if (window.size() >= 4) {
      refRate = std::min(interNow ? quantile(window, 0.75) : median(window), recentRef);
    }
  }
  if (refRate > 0.0) {
    struct Line {
      std::size_t measured = 0, slow = 0;
      std::size_t first_peer = std::numeric_limits<std::size_t>::max();
      bool many_peers = false;
      double min_ratio = kInf;
    };
    std::vector<Line> row(nodes.size()), col(nodes.size());
    auto addLine = [](Line& l, std::size_t peer, bool slow, double ratio) {
      ++l.measured;
      if (slow) {
        ++l.slow;
        l.min_ratio = std::min(l.min_ratio, ratio);
      }
      if (l.first_peer == std::numeric_limits<std::size_t>::max()) {
        l.first_peer = peer;
      } else if (l.first_peer != peer) {
        l.many_peers = true;
      }
    };
    for (Edge& e : edges) {
      if (e.fast && nodeOf(e.src) != nodeOf(e.dst)) {
        // Not slow: a node whose out- or in-connections include one is no slow NIC.
        addLine(row[nodeOf(e.src)], nodeOf(e.dst), false, 1.0);
        addLine(col[nodeOf(e.dst)], nodeOf(e.src), false, 1.0);
      }
      if (!e.measured) continue;
      const std::size_t a = nodeOf(e.src), b = nodeOf(e.dst);
      const double factor = factorIf(offender[a] || offender[b], th.slow_factor);
      e.slow = e.rate * factor < refRate;
      if (e.rate < kStragglerTransferRatio * refRate) {
        slow_transfer_at_[e.src] = now;
        slow_transfer_at_[e.dst] = now;
      }
      if (e.slow) {
        touchesSlow[static_cast<std::size_t>(e.src)] = 1;
        touchesSlow[static_cast<std::size_t>(e.dst)] = 1;
        last_slow_link_seen_ = now;
      }
      if (a != b) {
        const double ratio = e.rate / refRate;
        addLine(row[a], b, e.slow, ratio);
        addLine(col[b], a, e.slow, ratio);
      }
    }
    auto wholeLine = [](const Line& l) {
      return l.measured >= 2 && l.slow == l.measured && l.many_peers;
    };
    // A slow NIC of node x: cordon and restart; the caller writes the evidence.
    auto nicCandidate = [&](std::size_t x, std::vector<std::int32_t> ranks) {
      sortUnique(ranks);
      const bool off = offender[x] != 0;
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
      for (const Edge& e : edges) {
        if (e.slow && (nodeOf(e.src) == x || nodeOf(e.dst) == x)) {
          ranks.push_back(e.src);
          ranks.push_back(e.dst);
        }
      }
      const double factor = factorIf(offender[x] != 0, th.slow_factor);
      Candidate c = nicCandidate(x, std::move(ranks));
      Verdict& v = c.verdict;
      const bool isRow = wholeLine(row[x]);
      const Line& l = isRow ? row[x] : col[x];
      v.evidence.message = strf(
          "all %zu measured connections %s node %s (%s) are slow: down to %.2fx the job's "
          "reference "
          "transfer rate %.1f MB/s (threshold 1/slowFactor = %.2fx): its NIC",
          l.measured, isRow ? "out of" : "into", nodes[x].name.c_str(), isRow ? "row" : "column",
          l.min_ratio, refRate / 1e6, 1.0 / factor);
      if (isRow && wholeLine(col[x])) v.evidence.message += "; its column is slow too";
      v.evidence.numbers = {{"slowConnections", static_cast<double>(l.slow)},
                            {"measuredConnections", static_cast<double>(l.measured)},
                            {"minRatioToMedian", l.min_ratio},
                            {"referenceBytesPerSecond", refRate},
                            {"slowFactor", factor}};
      candidates.push_back(std::move(c));
    }
    struct SlowPair {
      std::vector<std::int32_t> ranks;
      std::size_t edges = 0;
      double min_ratio = kInf;
      double min_rate = 0.0;
      std::int32_t ex_src = -1, ex_dst = -1;
    };
    std::map<std::pair<std::size_t, std::size_t>, SlowPair> slowPairs;
    for (const Edge& e : edges) {
      if (!e.slow) continue;
      const std::size_t a = nodeOf(e.src), b = nodeOf(e.dst);
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
      const double factor = factorIf(offender[x] != 0, th.slow_factor);
      Candidate c = nicCandidate(x, std::move(ranks));
      Verdict& v = c.verdict;
      v.evidence.message = strf(
          "%zu connection(s) slow on %zu links that all share node %s: down to %.2fx the job's "
          "reference rate %.1f MB/s (threshold 1/slowFactor = %.2fx): its NIC",
          nEdges, slowPairs.size(), nodes[x].name.c_str(), minRatio, refRate / 1e6, 1.0 / factor);
      v.evidence.numbers = {{"slowConnections", static_cast<double>(nEdges)},
                            {"slowLinks", static_cast<double>(slowPairs.size())},
                            {"ratioToReference", minRatio},
                            {"referenceBytesPerSecond", refRate},
                            {"slowFactor", factor}};
      candidates.push_back(std::move(c));
      slowPairs.clear();
    }
    for (auto& [key, p] : slowPairs) {
      const auto [a, b] = key;
      const bool off = offender[a] || offender[b];
      const double factor = factorIf(off, th.slow_factor);
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
          "the last 30 windows' median) (threshold 1/slowFactor = %.2fx)",
          p.edges, nodes[a].name.c_str(), nodes[b].name.c_str(), p.ex_src, p.ex_dst,
          p.min_rate / 1e6, p.min_ratio, refRate / 1e6, refCount, 1.0 / factor);
      if (v.node_evidence) {
        v.evidence.message +=
            "; node health: " +
            nodes[static_cast<std::size_t>(v.culprit.node == nodes[a].name ? a : b)].health_detail;
      }
      v.evidence.numbers = {{"slowConnections", static_cast<double>(p.edges)},
                            {"ratioToReference", p.min_ratio},
                            {"bytesPerSecond", p.min_rate},
                            {"referenceBytesPerSecond", refRate},
                            {"slowFactor", factor}};
      candidates.push_back(std::move(c));
    }
  }

  // --- Non-communication slow (straggler) -----------------------------------------------------
  // Judged only while every connection of the job is at a normal rate, and clearWindows ticks
  // after the last slow one: a slow link makes the ring late everywhere downstream of it, and a
  // rank late by the link's doing (its receiver's neighbours, ranks sharing its node) must not be
  // named a straggler. A real straggler during a slow link is named once the link is dealt with.
  const bool linkSlowLately = last_slow_link_seen_ && secs(now - *last_slow_link_seen_) <
                                                          th.clear_windows * th.window_seconds;
  if (!warmup && !hangRulesOff && !linkSlowLately) {
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
        if (outCount[ur] == 0 || inCount[ur] == 0 || touchesSlow[ur] || crashCand[ur] ||
            !reporting[ur] || ioShare[ur] >= kStragglerMaxIoShare) {
          continue;
        }
        if (auto it = slow_transfer_at_.find(r);
            it != slow_transfer_at_.end() &&
            secs(now - it->second) < th.clear_windows * th.window_seconds) {
          continue;
        }
        const bool off = offender[nodeOf(r)] != 0;
        const std::int32_t need = std::min(peersIf(off), std::max<std::int32_t>(1, outDegree[ur]));
        if (outCount[ur] < need) continue;
        const double minShare = relaxedIf(off, th.min_lateness_share);
        const double factor = factorIf(off, th.straggler_factor);
        // Its peers wait on it more than the job typically waits, or (a synchronous job where
        // the lateness spreads along the ring and everyone ends up waiting) it waits much less
        // than the job typically does: under a quarter of it (ranks downstream of a slow link or
        // a straggler wait less than others too, but not that much less).
        const double excessOut = outWait[ur] - typicalWait;
        const double deficitIn = inWait[ur] <= kStragglerOwnWaitRatio * typicalOwnWait
                                     ? typicalOwnWait - inWait[ur]
                                     : 0.0;
        if (std::max(excessOut, deficitIn) < minShare ||
            lateness[ur] < factor * kStragglerNoiseFloor) {
          continue;
        }
        rankNoise[ur] = noiseFor(r);
        if (lateness[ur] >= factor * rankNoise[ur]) byNode[nodeOf(r)].push_back(r);
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
        const bool off = offender[node] != 0;
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
        if (v.slowdown < factorIf(off, th.min_straggler_slowdown)) continue;
        c.relaxed = off;
        v.evidence.message = strf(
            "straggler rank %d on node %s: its %d peers wait on it %.0f%% of the window, the job's "
            "typical wait is %.0f%% and it waits on them %.0f%% (typical %.0f%%): excess %.2f, "
            "deficit %.2f (minLatenessShare %.2f), lateness %.2f vs job noise %.3f "
            "(stragglerFactor %.1fx); transfers normal; busy %.0f%% vs typical %.0f%%; estimated "
            "slowdown %.2fx",
            worst, nodes[node].name.c_str(), outCount[uw], outWait[uw] * 100.0, typicalWait * 100.0,
            inWait[uw] * 100.0, typicalOwnWait * 100.0, excess,
            std::max(typicalOwnWait - inWait[uw], 0.0), relaxedIf(off, th.min_lateness_share),
            lateness[uw], noise, factorIf(off, th.straggler_factor), busySelf * 100.0,
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
        candidates.push_back(std::move(c));
      }
    }
  }

  // --- Missing telemetry (an observation, never a verdict) ------------------------------------
  {
    std::map<std::size_t, std::vector<std::int32_t>> byNode;
    for (std::int32_t r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (reporting[ur] || !alive[ur] || crashCand[ur] || hangRoot[ur] || anyoneWaits[ur]) continue;
      if (rankAt(r).reports.empty() && ticks_in_attempt_ <= th.warmup_windows) continue;
      byNode[nodeOf(r)].push_back(r);
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
      for (const RankSnapshot& rs : snap.ranks) {
        if (static_cast<std::size_t>(rs.node) == node) ++onNode;
      }
      double longest = 0.0;
      for (std::int32_t r : ranks) {
        const double s = silentFor[static_cast<std::size_t>(r)];
        if (s != kInf) longest = std::max(longest, s);
      }
      Observation o;
      o.kind = ObservationKind::kTelemetryMissing;
      o.node = nodes[node].name;
      o.message = strf(
          "%zu of %zu ranks on node %s silent (up to %.1f s, threshold silenceSeconds %.1f s) "
          "while their pods run and no peer waits on them; node telemetry %s: not a fault",
          ranks.size(), onNode, nodes[node].name.c_str(), longest, th.silence_seconds,
          nodes[node].telemetry_arriving ? "arriving" : "missing");
      o.ranks = std::move(ranks);
      o.first_seen = it->second.first_seen;
      o.is_new = it->second.ticks == th.confirmation_windows;
      result.observations.push_back(std::move(o));
    }
    std::erase_if(observations_, [](const auto& kv) { return !kv.second.seen_this_tick; });
  }

  // --- Confirmation and deduplication ---------------------------------------------------------
  for (auto& [key, f] : findings_) f.seen_this_tick = false;
  for (Candidate& c : candidates) {
    const std::string key = c.verdict.key();
    auto it = findings_.find(key);
    if (it == findings_.end()) {
      Finding f;
      f.verdict = std::move(c.verdict);
      f.verdict.first_seen = now;
      it = findings_.emplace(key, std::move(f)).first;
    } else if (it->second.seen_this_tick) {
      continue;  // the same culprit found twice in one tick: keep the first
    } else {
      const WallTime firstSeen = it->second.verdict.first_seen;
      const WallTime confirmedAt = it->second.verdict.confirmed_at;
      it->second.verdict = std::move(c.verdict);
      it->second.verdict.first_seen = firstSeen;
      it->second.verdict.confirmed_at = confirmedAt;
    }
    Finding& f = it->second;
    f.seen_this_tick = true;
    f.missing = 0;
    ++f.consecutive;
    const int required =
        c.relaxed ? std::max(1, th.confirmation_windows - 1) : th.confirmation_windows;
    if (!f.confirmed && f.consecutive >= required) {
      f.confirmed = true;
      f.verdict.confirmed_at = now;
      result.verdicts.push_back(f.verdict);
    }
  }
  std::size_t pending = 0;
  for (auto it = findings_.begin(); it != findings_.end();) {
    Finding& f = it->second;
    if (!f.seen_this_tick) {
      if (!f.confirmed) {
        it = findings_.erase(it);
        continue;
      }
      if (++f.missing >= th.clear_windows) {
        result.cleared.push_back(it->first);
        it = findings_.erase(it);
        continue;
      }
    }
    if (f.confirmed) {
      result.active.push_back(f.verdict);
    } else {
      ++pending;
    }
    ++it;
  }

  std::size_t reportingCount = 0;
  for (char c : reporting) reportingCount += c ? 1 : 0;
  result.stats.reporting_ranks = reportingCount;
  result.stats.silent_ranks = un - reportingCount;
  result.stats.edges = edges.size();
  result.stats.measured_edges = measuredCount;
  result.stats.reference_rate_bytes_per_sec = refRate;
  result.stats.paused = hangRulesOff;
  result.stats.warmup = warmup;
  result.stats.pending_findings = pending;
  return result;
}

}  // namespace c4::c4d
