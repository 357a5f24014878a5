// One tick's view of a job, the rules' input: built from a JobSnapshot by WindowBuilder, which
// keeps what the view needs from earlier ticks (each connection's last progress, the last pause).
//
// The view holds
//   - per rank: liveness (reporting, alive, finished, gone, silence) and out-degree;
//   - per node: repeat offender or not;
//   - per rank->rank edge (sparse, existing edges only): wait age, posted, queued bytes that do not
//     move, rate (measured or a lower bound), wait share, transfer share;
//   - the measured rates the comm-slow reference is taken over;
//   - the wait-for graph (who waits on whom over connections) and collective progress (who has not
//     arrived in a communicator's collective that others wait in);
//   - the pause and warm-up state.
// The formulas are in docs/c4d.md ("One tick").
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "c4/common/clock.h"
#include "operator/c4d/snapshot.h"

namespace c4::c4d {

// Per-window values of one rank->rank edge.
struct Edge {
  std::uint64_t key = 0;  // src << 32 | dst
  std::int32_t src = -1;
  std::int32_t dst = -1;
  double wait_age = 0.0;  // receiver waits with no bytes moving this long (0: not waiting)
  bool posted = false;    // the sender has ops in flight or bytes in transit towards dst
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
};

// Collective progress around one rank: the communicator in which the most members wait on it.
struct CommWait {
  std::uint64_t comm_hash = 0;
  std::uint64_t collective = 0;  // the one the others wait in (1-based count)
  std::uint64_t entered = 0;     // what this rank entered
  std::int32_t waiters = 0;      // members waiting in it long enough
  std::int32_t peers = 0;        // the other members
  double max_wait = 0.0;
};

struct Window {
  Window(const JobSnapshot& s, WallTime t) : snap(s), th(s.thresholds), now(t) {}

  const JobSnapshot& snap;
  const Thresholds& th;
  WallTime now;
  std::int64_t ticks_in_attempt = 0;  // this tick included
  bool hang_rules_off = false;        // a pause now or within pauseGraceSeconds
  bool warmup = false;                // the attempt's first warmupWindows ticks

  // Per rank.
  std::vector<char> reporting;  // a report within silenceSeconds
  std::vector<char> alive;      // pod Running
  std::vector<char> finished;   // pod Succeeded or progress kFinished
  std::vector<char> gone;       // pod Failed or Gone
  // Silent while its node's telemetry is missing (a node plugin restarting, OOM-killed, cut
  // off): the silence says nothing of the rank. It lowers no threshold and names no culprit.
  std::vector<char> telemetry_gap;
  std::vector<double> silent_for;        // seconds since the newest report (kInf: never reported)
  std::vector<std::int32_t> out_degree;  // peers it sends to over connections in use
  // Per node: a repeat offender (score >= repeatOffenderMinScore).
  std::vector<char> offender;

  std::vector<Edge> edges;  // sorted by key
  // Rates of the measured edges (all; between nodes), and lower bounds of the edges too fast to
  // measure (all; between nodes).
  std::vector<double> rates, inter_rates, bounds, inter_bounds;

  // Wait-for graph, per rank s: receivers waiting on s long enough to count (hangSeconds, or
  // silenceSeconds when s is silent; relaxed for repeat offenders), the longest such wait, and
  // whether s has posted towards one of them; whether s waits on someone (>= silenceSeconds), and
  // whether anyone waits on s that long.
  std::vector<std::int32_t> waiters;
  std::vector<double> max_wait_on;
  std::vector<char> posts_to_waiters, waits_on_someone, anyone_waits;

  // Collective progress (profiler telemetry), per rank.
  std::vector<CommWait> comm_wait;
  std::vector<char> in_collective;  // an unfinished operation in some communicator

  std::int32_t size() const { return snap.world_size; }
  const RankSnapshot& rank(std::int32_t r) const { return snap.ranks[static_cast<std::size_t>(r)]; }
  std::size_t nodeOf(std::int32_t r) const { return static_cast<std::size_t>(rank(r).node); }
  const NodeSnapshot& node(std::size_t i) const { return snap.nodes[i]; }
  bool offends(std::size_t node) const { return offender[node] != 0; }

  // Repeat-offender relaxation (docs/c4d.md "Repeat offenders"): a threshold, a factor above 1,
  // the peers needed as evidence.
  double relaxedIf(bool off, double v) const { return off ? v * th.repeat_offender_relax : v; }
  double factorIf(bool off, double f) const {
    return off ? 1.0 + (f - 1.0) * th.repeat_offender_relax : f;
  }
  std::int32_t peersIf(bool off) const {
    return off ? std::max(1, th.min_peers_evidence - 1) : th.min_peers_evidence;
  }
  // The measured edges the comm-slow reference is taken over: between nodes when 4 or more.
  std::size_t measuredEdges() const {
    return inter_rates.size() >= 4 ? inter_rates.size() : rates.size();
  }
};

class WindowBuilder {
 public:
  // The view of `snap` at `now`, the attempt's `ticksInAttempt`-th tick. Updates the memory.
  Window build(const JobSnapshot& snap, WallTime now, std::int64_t ticksInAttempt);

  // Forgets everything (a new attempt).
  void reset();

  // One rank's traffic towards one peer in one direction, summed over its connections of one
  // report (window.cc).
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
  // A rank's newest report's aggregates, by the connections they were made of: the next window
  // reads the same report as its older one.
  struct AggMemo {
    std::shared_ptr<const ConnSamples::Vector> source;
    std::int32_t world_size = 0;  // peers at or above it were left out
    std::vector<Agg> aggs;
  };

 private:
  // Per rank->rank edge, kept between ticks.
  struct EdgeState {
    std::uint64_t key = 0;  // src << 32 | dst
    std::uint64_t recv_bytes = 0;
    std::uint32_t recv_conns = 0;
    WallTime last_progress{};  // the last time the receiver's bytes moved (or the edge appeared)
    std::uint64_t recv_wire = 0;
    WallTime last_wire_progress{};  // the same for the receiver's socket-level (wire) bytes
  };

  std::optional<WallTime> last_pause_seen_;
  std::vector<EdgeState> edges_;  // sorted by key
  std::vector<AggMemo> memo_;     // by rank
};

}  // namespace c4::c4d
