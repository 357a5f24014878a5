// The C4P planner: assigns every subflow of every job on the fabric a path (an uplink index of its
// plane) so that the most loaded leaf–spine link carries as little as possible, then a share of
// the connection's bytes per subflow (weight) and a source port the fabric's rule maps to that
// path.
//
// Load. A connection's demand is the host link speed divided by the larger of its source's
// outgoing and its destination's incoming connection count (what the host links alone would give
// it); a subflow carries demand × weight. The load of a link direction is the sum of what its
// subflows carry divided by its usable capacity (Fabric::capacityGbps); a load above 1 means the
// link, not the hosts, limits the collective. A link of capacity 0 must carry nothing.
//
// Paths, two tiers per plane:
//   1. Edge colouring. When all subflows of a plane carry the same demand, all its links are
//      healthy and nothing of the plane is pinned, the cross-leaf subflows form a bipartite
//      multigraph (source leaf → destination leaf) of maximum degree Δ. König: Δ colours suffice
//      (alternating-path colouring); the colours are folded onto the U uplinks one round of U
//      at a time, a bijection per round with a different stride. Every link then carries at
//      most ⌈Δ/U⌉ subflows, which is optimal; with Δ ≤ U no two subflows share a link.
//   2. General (unequal demands or capacities, failed links, pinned subflows of other jobs):
//      largest demand first onto the path with the smallest resulting load, then local search
//      that moves or swaps subflows off the most loaded link while that lowers it.
// Weights: equal within a connection, then rebalanced (subflows on a failed link get 0; for a
// connection with a path loaded above 1, weight moves from its most loaded path to its least
// loaded one; the best state is kept). Ports: the lowest free port of the configured range that the
// fabric maps to the path, distinct per source node across all jobs.
//
// Incremental: planJob keeps the paths of the other jobs and plans the new one around them; it
// also plans everything afresh and takes that only when it lowers the maximum load (then colours
// are renamed to keep as many old paths as possible). rebalance() changes only weights (what live
// connections can apply without reconnecting). Equal inputs give equal plans (no randomness, no
// hash-order iteration). Not thread-safe: one reconciler owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"
#include "operator/c4p/fabric.h"
#include "operator/c4p/flows.h"

namespace c4::op::c4p {

// TrainingJob spec.trafficPlanning.mode.
//   Off:      no plan (the document carries the version only; the plugin spreads by default)
//   Advisory: the plan is computed and published with its path labels, but the plugin is given
//             ephemeral ports and equal weights, so it only reports what the plan would do
//   Enforce:  the plugin binds the planned ports and splits bytes by the planned weights
enum class Mode { kOff, kAdvisory, kEnforce };
Result<Mode> parseMode(std::string_view name);  // "Off" | "Advisory" | "Enforce"
std::string_view modeName(Mode mode);

struct PlannerOptions {
  std::uint16_t port_first = 40000;  // source ports the planner hands out, inclusive
  std::uint16_t port_last = 59999;
  int local_search_moves = 200000;  // upper bound on improving moves per solve
  int weight_rounds = 400;          // rounds of weight rebalancing
};

struct PlannedSubflow {
  std::uint16_t local_port = 0;
  int path = -1;
  double weight = 0;  // share of the connection's bytes; a connection's weights sum to 1
  friend bool operator==(const PlannedSubflow&, const PlannedSubflow&) = default;
};

// The subflows of every connection from local_node to peer_node (cross-leaf pairs only; pairs
// inside one leaf use no uplink and follow the document's default).
struct PlannedPair {
  std::string local_node;
  std::string peer_node;
  int plane = 0;
  std::vector<PlannedSubflow> subflows;
  friend bool operator==(const PlannedPair&, const PlannedPair&) = default;
};

struct JobPlan {
  std::string job;
  int subflows_per_connection = 0;
  std::vector<PlannedPair> pairs;     // sorted by (local_node, peer_node)
  std::map<std::string, int> planes;  // every node of the job -> its plane
  double max_link_load = 0;           // over the links this job's subflows use
  friend bool operator==(const JobPlan&, const JobPlan&) = default;
};

struct LinkLoad {
  LinkRef link;
  Direction direction = Direction::kUp;
  double capacity_gbps = 0;
  double carried_gbps = 0;
  double load = 0;  // carried / capacity; +inf when a dead link carries something
};

struct PlanOutcome {
  double max_link_load = 0;          // after the operation, whole fabric
  std::vector<std::string> changed;  // jobs whose plan changed (write their documents)
  bool moved_other_jobs = false;     // planJob took the fresh plan and moved other jobs' paths
  int tier1_planes = 0;              // planes solved by edge colouring in this operation
};

// The planner's record of one job (internal; exposed for the implementation's helpers).
struct PlannerJobState {
  JobPlacement placement;
  // Cross-leaf pairs, sorted by (src, dst).
  struct Pair {
    Connection conn;
    int plane = 0;
    std::string src_leaf;
    std::string dst_leaf;
    double demand_gbps = 0;  // per connection × count: what the pair carries at full rate
    std::vector<PlannedSubflow> subflows;
  };
  std::vector<Pair> pairs;
  std::map<std::string, int> planes;
  JobPlan plan;
};

class Planner {
 public:
  explicit Planner(Fabric fabric, PlannerOptions options = {});

  // A node's location from its labels (c4.dev/leaf, c4.dev/plane). Refused when the labels are
  // bad; a node that moves while a job uses it keeps its planned paths until the job is planned
  // again.
  Status setNode(const std::string& name, const std::map<std::string, std::string>& labels);
  void removeNode(const std::string& name);

  // A new fabric description. Telemetry states carry over; paths and ports stay, weights are
  // rebalanced. Refused (nothing changes) when a planned node's plane or a path id no longer
  // exists in it.
  Result<PlanOutcome> setFabric(Fabric fabric);
  // Telemetry: one link's capacity fraction; weights are rebalanced (paths and ports stay).
  Result<PlanOutcome> setLinkState(const LinkRef& link, double capacity_fraction,
                                   Direction direction = Direction::kBoth);

  // Plans (or re-plans) one job; see the header comment. Errors (bad placement, unknown node,
  // nodes of different planes connected, no free port) leave every plan as it was.
  Result<PlanOutcome> planJob(const JobPlacement& placement);
  PlanOutcome removeJob(const std::string& job);
  // Weights only, every job: what live connections can apply.
  PlanOutcome rebalance();
  // Paths of every job from scratch (ports change for moved subflows: new connections only).
  Result<PlanOutcome> replanAll();

  [[nodiscard]] const JobPlan* plan(const std::string& job) const;
  [[nodiscard]] std::vector<std::string> jobs() const;
  [[nodiscard]] double maxLinkLoad() const { return max_load_; }
  // Loads of every link direction that carries something, highest first.
  [[nodiscard]] std::vector<LinkLoad> linkLoads() const;
  [[nodiscard]] const Fabric& fabric() const { return fabric_; }
  [[nodiscard]] const PlannerOptions& options() const { return options_; }

  using JobState = PlannerJobState;

 private:
  // Weights, plans and loads after paths changed; reports the jobs whose plan changed.
  PlanOutcome finish(std::map<std::string, JobState>& jobs);

  Fabric fabric_;
  PlannerOptions options_;
  std::map<std::string, NodeLocation> nodes_;
  std::map<std::string, JobState> jobs_;
  double max_load_ = 0;
};

}  // namespace c4::op::c4p
