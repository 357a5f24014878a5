#include "operator/c4d/window.h"

#include <algorithm>
#include <map>
#include <utility>

#include "operator/c4d/util.h"

namespace c4::c4d {
namespace {

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
  // hasDelta and the two reports are one interval apart: the bytes between them and the newest
  // report's transfer time cover the same interval. After a lost or coalesced report the bytes
  // span more than the time does, and a rate of the two would be inflated: not rated.
  bool rateable = false;
  std::uint32_t inflight = 0;
  std::uint64_t oldest_us = 0;
  std::uint64_t wait_sum_us = 0;
  std::uint64_t wait_max_us = 0;
  std::uint64_t xfer_sum_us = 0;
  double interval_sec = 1.0;
  WallTime time{};
  WallTime prev_time{};
};

using Agg = WindowBuilder::Agg;

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

// Every rank's newest report per (peer, direction), sorted by (key, send). `memo` (by rank): the
// aggregates of each rank's newest report, which the next window's older report reuses when it
// is the same report (the caller shares its connections between windows: ConnSamples).
std::vector<Side> buildSides(const JobSnapshot& snap, std::vector<WindowBuilder::AggMemo>& memo) {
  const std::int32_t n = snap.world_size;
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
  memo.resize(static_cast<std::size_t>(std::max(0, n)));
  for (std::int32_t r = 0; r < n; ++r) {
    const RankSnapshot& rs = snap.ranks[static_cast<std::size_t>(r)];
    if (rs.reports.empty()) continue;
    WindowBuilder::AggMemo& m = memo[static_cast<std::size_t>(r)];
    const ReportSample& newest = rs.reports.back();
    const ReportSample* prev =
        rs.reports.size() >= 2 ? &rs.reports[rs.reports.size() - 2] : nullptr;
    if (prev == nullptr) {
      aggOld.clear();
    } else if (m.source != nullptr && m.source == prev->connections.shared() && m.world_size == n) {
      aggOld.swap(m.aggs);  // aggregated as the newest report in an earlier window
    } else {
      aggregate(*prev, n, r, scratch, aggOld);
    }
    aggregate(newest, n, r, scratch, aggNew);
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
          s.rateable = secs(newest.time - prev->time) <= 1.5 * s.interval_sec;
        }
      }
      sides.push_back(s);
    }
    m.source = newest.connections.shared();
    m.world_size = n;
    m.aggs.assign(aggNew.begin(), aggNew.end());
  }
  std::sort(sides.begin(), sides.end(), [](const Side& a, const Side& b) {
    return a.key != b.key ? a.key < b.key : a.send < b.send;
  });
  return sides;
}

// Who waits on whom over connections (Window::waiters ...).
void buildWaitGraph(Window& w) {
  const auto un = static_cast<std::size_t>(w.size());
  const Thresholds& th = w.th;
  w.waiters.assign(un, 0);
  w.max_wait_on.assign(un, 0.0);
  w.posts_to_waiters.assign(un, 0);
  w.waits_on_someone.assign(un, 0);
  w.anyone_waits.assign(un, 0);
  for (const Edge& e : w.edges) {
    if (e.wait_age <= 0.0) continue;
    const auto s = static_cast<std::size_t>(e.src);
    const bool off = w.offends(w.nodeOf(e.src));
    // A silent sender is waited on for silenceSeconds only when its silence is its own: with its
    // node's telemetry missing the usual hangSeconds apply.
    const double need = w.reporting[s] || w.telemetry_gap[s] ? w.relaxedIf(off, th.hang_seconds)
                                                             : w.relaxedIf(off, th.silence_seconds);
    if (e.wait_age >= th.silence_seconds) {
      w.waits_on_someone[static_cast<std::size_t>(e.dst)] = 1;
      w.anyone_waits[s] = 1;
    }
    if (e.wait_age >= need) {
      ++w.waiters[s];
      w.max_wait_on[s] = std::max(w.max_wait_on[s], e.wait_age);
      if (e.posted) w.posts_to_waiters[s] = 1;
    }
  }
}

// Collective progress: who has not arrived. Profiler telemetry: each rank's communicators (its
// newest report). Every member of a communicator calls its collectives in the same order, so
// members that entered collective #E and wait in it (an unfinished operation) wait on each member
// that has not entered it — and on a frozen member wherever it stopped. Over any transport:
// NVLink and SHM have no connections.
void buildCollectiveProgress(Window& w) {
  const std::int32_t n = w.size();
  const auto un = static_cast<std::size_t>(n);
  const Thresholds& th = w.th;
  w.comm_wait.assign(un, CommWait{});
  w.in_collective.assign(un, 0);
  struct Member {
    std::int32_t rank;
    const report::CommunicatorProgress* progress;
  };
  std::map<std::uint64_t, std::vector<Member>> comms;
  for (std::int32_t r = 0; r < n; ++r) {
    const RankSnapshot& rs = w.rank(r);
    if (rs.reports.empty() || w.finished[static_cast<std::size_t>(r)]) continue;
    for (const auto& c : rs.reports.back().communicators) {
      if (c.oldest_unfinished_us > 0) w.in_collective[static_cast<std::size_t>(r)] = 1;
      if (c.comm_hash == 0 || c.nranks < 2) continue;
      auto& members = comms[c.comm_hash];
      if (std::none_of(members.begin(), members.end(),
                       [&](const Member& m) { return m.rank == r; })) {
        members.push_back({r, &c});
      }
    }
  }
  for (const auto& [hash, members] : comms) {
    std::uint64_t newest = 0;
    for (const Member& m : members) newest = std::max(newest, m.progress->coll_entered);
    if (newest == 0) continue;
    for (const Member& m : members) {
      const auto um = static_cast<std::size_t>(m.rank);
      const bool frozen = !w.reporting[um] && w.alive[um] && !w.telemetry_gap[um];
      if (m.progress->coll_entered >= newest && !frozen) continue;
      const bool off = w.offends(w.nodeOf(m.rank));
      const double need = w.reporting[um] || w.telemetry_gap[um]
                              ? w.relaxedIf(off, th.hang_seconds)
                              : w.relaxedIf(off, th.silence_seconds);
      CommWait cw{
          hash, newest, m.progress->coll_entered, 0, static_cast<std::int32_t>(members.size() - 1),
          0.0};
      for (const Member& o : members) {
        const auto uo = static_cast<std::size_t>(o.rank);
        if (o.rank == m.rank || !w.reporting[uo]) continue;
        const auto& p = *o.progress;
        if (p.coll_entered != newest || p.coll_finished >= p.coll_entered) continue;
        const double age = static_cast<double>(p.oldest_unfinished_us) / 1e6;
        if (age < need) continue;
        ++cw.waiters;
        cw.max_wait = std::max(cw.max_wait, age);
      }
      CommWait& best = w.comm_wait[um];
      if (cw.waiters > best.waiters ||
          (cw.waiters == best.waiters && cw.max_wait > best.max_wait)) {
        best = cw;
      }
    }
  }
}

}  // namespace

void WindowBuilder::reset() {
  last_pause_seen_.reset();
  edges_.clear();
  memo_.clear();
}

Window WindowBuilder::build(const JobSnapshot& snap, WallTime now, std::int64_t ticksInAttempt) {
  Window w(snap, now);
  w.ticks_in_attempt = ticksInAttempt;
  const Thresholds& th = snap.thresholds;
  const std::int32_t n = snap.world_size;
  const auto un = static_cast<std::size_t>(n);
  const auto& nodes = snap.nodes;

  // --- Liveness, repeat offenders, pauses, warm-up -------------------------------------------
  w.reporting.assign(un, 0);
  w.alive.assign(un, 0);
  w.finished.assign(un, 0);
  w.gone.assign(un, 0);
  w.silent_for.assign(un, kInf);
  w.telemetry_gap.assign(un, 0);
  for (std::int32_t r = 0; r < n; ++r) {
    const RankSnapshot& rs = w.rank(r);
    const auto ur = static_cast<std::size_t>(r);
    if (!rs.reports.empty()) w.silent_for[ur] = std::max(0.0, secs(now - rs.reports.back().time));
    w.reporting[ur] = w.silent_for[ur] <= th.silence_seconds ? 1 : 0;
    w.telemetry_gap[ur] = !w.reporting[ur] && rs.node >= 0 &&
                                  static_cast<std::size_t>(rs.node) < nodes.size() &&
                                  !nodes[static_cast<std::size_t>(rs.node)].telemetry_arriving
                              ? 1
                              : 0;
    w.alive[ur] = rs.pod_state == PodState::kRunning ? 1 : 0;
    w.gone[ur] = rs.pod_state == PodState::kFailed || rs.pod_state == PodState::kGone ? 1 : 0;
    w.finished[ur] = rs.pod_state == PodState::kSucceeded ||
                             (rs.progress && rs.progress->state == report::ProgressState::kFinished)
                         ? 1
                         : 0;
  }
  w.offender.assign(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    w.offender[i] = nodes[i].repeat_offender_score >= th.repeat_offender_min_score ? 1 : 0;
  }

  // A pause lasts what its rank announced (expectedSeconds), else maxPauseSeconds, never more:
  // a rank that froze during its checkpoint is found hangSeconds after the announced end.
  bool pausedNow = false;
  for (const RankSnapshot& rs : snap.ranks) {
    if (!rs.progress) continue;
    const auto s = rs.progress->state;
    const double announced = rs.progress->expected_seconds;
    const double limit =
        announced > 0.0 ? std::min(announced, th.max_pause_seconds) : th.max_pause_seconds;
    if ((s == report::ProgressState::kCheckpointing || s == report::ProgressState::kEvaluating ||
         s == report::ProgressState::kIdle) &&
        secs(now - rs.progress->time) <= limit) {
      pausedNow = true;
      break;
    }
  }
  if (pausedNow) last_pause_seen_ = now;
  w.hang_rules_off =
      pausedNow || (last_pause_seen_ && secs(now - *last_pause_seen_) < th.pause_grace_seconds);
  w.warmup = ticksInAttempt <= th.warmup_windows;

  // --- Sides: every rank's newest report per (peer, direction) -------------------------------
  const std::vector<Side> sides = buildSides(snap, memo_);

  // --- Edges, joined with their state ---------------------------------------------------------
  std::vector<Edge>& edges = w.edges;
  struct Ends {
    std::int32_t send = -1;  // index into sides, -1: the sender did not report this edge
    std::int32_t recv = -1;  // index into sides, -1: the receiver did not report this edge
  };
  std::vector<Ends> ends;
  edges.reserve(sides.size() / 2 + 1);
  ends.reserve(sides.size() / 2 + 1);
  for (std::size_t i = 0; i < sides.size(); ++i) {
    if (edges.empty() || edges.back().key != sides[i].key) {
      Edge e;
      e.key = sides[i].key;
      e.src = keySrc(e.key);
      e.dst = keyDst(e.key);
      edges.push_back(e);
      ends.push_back({});
    }
    (sides[i].send ? ends.back().send : ends.back().recv) = static_cast<std::int32_t>(i);
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
      if (ends[i].recv < 0) {
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
      const Side& rcv = sides[static_cast<std::size_t>(ends[i].recv)];
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
  const auto& reporting = w.reporting;
  w.out_degree.assign(un, 0);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    Edge& e = edges[i];
    const Side* rcv = ends[i].recv >= 0 ? &sides[static_cast<std::size_t>(ends[i].recv)] : nullptr;
    const Side* snd = ends[i].send >= 0 ? &sides[static_cast<std::size_t>(ends[i].send)] : nullptr;
    // A peer counts towards a rank's degree only over a connection in use (bytes moved or ops
    // posted at either end): a job that opens connections to every peer but runs a ring must not
    // need evidence from peers that never talk to the rank.
    const bool in_use = (rcv && (rcv->bytes > 0 || rcv->inflight > 0)) ||
                        (snd && (snd->bytes > 0 || snd->inflight > 0));
    if (in_use) ++w.out_degree[static_cast<std::size_t>(e.src)];
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
        if (rcv->rateable && rcv->delta >= th.min_measure_bytes && rcv->xfer_sum_us > 0 &&
            static_cast<double>(rcv->xfer_sum_us) * 1e-6 >= th.min_measure_transfer_seconds) {
          e.measured = true;
          e.rate = static_cast<double>(rcv->delta) / (static_cast<double>(rcv->xfer_sum_us) * 1e-6);
        }
      }
    }
    // The sender's view of the same link: its ops last from the first byte written to the last,
    // paced by the link once the socket buffers are full. A receiver whose data arrived before
    // its receive was posted completes at once and sees no link at all; the slower view counts.
    if (snd && reporting[static_cast<std::size_t>(e.src)] && snd->rateable &&
        snd->delta >= th.min_measure_bytes && snd->xfer_sum_us > 0 &&
        static_cast<double>(snd->xfer_sum_us) * 1e-6 >= th.min_measure_transfer_seconds && rcv &&
        reporting[static_cast<std::size_t>(e.dst)] && rcv->has_delta && rcv->delta > 0) {
      const double sendRate =
          static_cast<double>(snd->delta) / (static_cast<double>(snd->xfer_sum_us) * 1e-6);
      e.rate = e.measured ? std::min(e.rate, sendRate) : sendRate;
      e.measured = true;
    }
    if (e.measured) {
      w.rates.push_back(e.rate);
      if (w.nodeOf(e.src) != w.nodeOf(e.dst)) w.inter_rates.push_back(e.rate);
    } else if (e.moved && rcv && rcv->rateable && rcv->delta >= th.min_measure_bytes &&
               static_cast<double>(rcv->xfer_sum_us) * 1e-6 < th.min_measure_transfer_seconds) {
      // Too fast to measure: its data was already in the plugin's buffers when the receive was
      // posted (upstream of a slow link, a ring's fast connections all look like this). It moved
      // this much in under minMeasureTransferSeconds, so its rate is at least delta / that.
      const double atLeast = static_cast<double>(rcv->delta) / th.min_measure_transfer_seconds;
      e.fast = true;
      w.bounds.push_back(atLeast);
      if (w.nodeOf(e.src) != w.nodeOf(e.dst)) w.inter_bounds.push_back(atLeast);
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

  buildWaitGraph(w);
  buildCollectiveProgress(w);
  return w;
}

}  // namespace c4::c4d
