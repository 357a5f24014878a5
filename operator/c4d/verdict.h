// The analyser's output: verdicts (a confirmed fault with its culprit, evidence and recommended
// action) and observations (facts worth an Event and a metric that are not faults, such as
// missing telemetry).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c4/common/clock.h"

namespace c4::c4d {

// The five classes of docs/design.md §4.
enum class FaultClass { kCrash, kCommHang, kNonCommHang, kCommSlow, kNonCommSlow };

enum class CulpritKind { kNode, kLink, kRank };

struct Culprit {
  CulpritKind kind = CulpritKind::kNode;
  std::string node;        // kNode: the node; kLink: one end; kRank: the rank's node
  std::string peer_node;   // kLink: the other end (node < peerNode); else ""
  std::int32_t rank = -1;  // kRank: the rank; else -1

  friend bool operator==(const Culprit&, const Culprit&) = default;
};

enum class Action {
  kCordonAndRestart,  // cordon + taint the culprit node, restart from checkpoint away from it
  kRestartOnly,       // restart from checkpoint, cordon nothing
  kReplan,            // hand the link to the traffic planner (C4P)
  kEventOnly,         // an Event; the caller weighs acting (stragglers: see slowdown)
};

struct Evidence {
  // One line for a Kubernetes Event: what was seen, the numbers and what they are relative to.
  std::string message;
  // The same numbers, structured (name, value), in a fixed order per class.
  std::vector<std::pair<std::string, double>> numbers;

  double number(std::string_view name, double fallback = 0.0) const;
};

struct Verdict {
  FaultClass fault_class = FaultClass::kCrash;
  Culprit culprit;
  std::vector<std::int32_t> ranks;  // ranks involved, ascending
  Evidence evidence;
  WallTime first_seen{};    // the first window the finding was seen
  WallTime confirmed_at{};  // the window it had persisted for the confirmation windows
  Action action = Action::kEventOnly;
  bool node_evidence = false;    // node health data (NIC/RDMA/GPU) supports the culprit
  bool repeat_offender = false;  // relaxed thresholds applied (a repeat offender is involved)
  // kNonCommSlow: estimated job slowdown caused by the straggler (step time / normal step
  // time, >= 1); 1 for the other classes.
  double slowdown = 1.0;

  // Stable identity for deduplication: "<class>/<kind>/<culprit>".
  std::string key() const;
};

enum class ObservationKind {
  kTelemetryMissing,  // ranks silent while their pods run and no peer waits on them
};

struct Observation {
  ObservationKind kind = ObservationKind::kTelemetryMissing;
  std::string node;
  std::vector<std::int32_t> ranks;
  std::string message;
  WallTime first_seen{};
  bool is_new = false;  // first tick it is reported (raise the Event then)
};

// Per-window measurements, for metrics and the benchmark.
struct WindowStats {
  std::size_t reporting_ranks = 0;
  std::size_t silent_ranks = 0;
  std::size_t edges = 0;           // rank->rank connections seen (aggregated per direction)
  std::size_t measured_edges = 0;  // edges that carried enough bytes to rate
  double reference_rate_bytes_per_sec = 0.0;  // 75th percentile rate of measured inter-node edges
  bool paused = false;                        // hang and straggler rules suspended this window
  bool warmup = false;                        // rate rules off (attempt just started)
  std::size_t pending_findings = 0;           // seen, not yet confirmed
};

struct TickResult {
  std::vector<Verdict> verdicts;     // newly confirmed this tick (each fault once)
  std::vector<Verdict> active;       // every confirmed verdict that has not cleared (incl. new)
  std::vector<std::string> cleared;  // keys of verdicts that cleared this tick
  std::vector<Observation> observations;
  WindowStats stats;
};

std::string_view faultClassName(FaultClass c) noexcept;    // "crash", "commHang", ...
std::string_view culpritKindName(CulpritKind k) noexcept;  // "node", "link", "rank"
std::string_view actionName(Action a) noexcept;            // "cordonAndRestart", ...
std::string_view observationKindName(ObservationKind k) noexcept;

}  // namespace c4::c4d
