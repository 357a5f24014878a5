// The C4P planner: assigns every subflow of every job on the fabric a path (an uplink index of its
// plane inside a pod; an (uplink, core uplink) pair across pods, Fabric::pathLinks) so that the
// most loaded link direction carries as little as possible, then a share of the connection's bytes
// per subflow (weight) and a source port the fabric's rule maps to that path for the pair.
//
// Load. A connection's demand is the host link speed divided by the larger of its source's
// outgoing and its destination's incoming connection count (what the host links alone would give
// it); a subflow carries demand × weight on every link direction of its path: 2 inside a pod (leaf
// up, leaf down), 4 across pods (leaf up, spine → core, core → spine, leaf down). The load of a
// link direction is the sum of what its subflows carry divided by its usable capacity
// (Fabric::capacityGbps; spine–core links have their own speed); a load above 1 means the link,
// not the hosts, limits the collective. A link of capacity 0 must carry nothing.
//
// Paths, per plane:
//   1. Edge colouring. When the free subflows of a plane all carry the same demand, their leaf
//      links all have one positive capacity and nothing of the plane is pinned, the
//      cross-leaf subflows form a bipartite multigraph (source leaf → destination leaf) of maximum
//      degree Δ. König: Δ colours suffice (alternating-path colouring); the colours are folded onto
//      the U uplinks one round of U at a time, a bijection per round with a different stride.
//      Every link then carries at most ⌈Δ/U⌉ subflows, which is optimal; with Δ ≤ U no two
//      subflows share a link. With pairs across pods (and every spine–core link of the pods
//      involved of one positive capacity), two levels as a Clos is routed: the leaf uplinks so,
//      then per spine index s the subflows across pods through spine s coloured over the bipartite
//      multigraph source pod → destination pod and folded onto its C core uplinks (optimal on a
//      rearrangeably non-blocking Clos); the searches of step 2 then run on that start.
//   2. General (unequal demands or capacities, failed links, pinned subflows of other jobs):
//      largest demand first onto the path with the smallest resulting load over its link directions
//      (ties: the path sharing fewer link directions with subflows of the same connection, then the
//      smaller load sum, in an order that starts at a different path per connection), then local
//      search that moves a subflow off the most loaded link direction or swaps it with one of the
//      same path id while that lowers it. When the plane has pairs across pods, a plateau search
//      follows: a subflow leaves the most loaded link direction for a path that does not raise the
//      maximum, moved subflows rest a few steps, and the best state seen is kept (a bounded number
//      of steps).
// Weights: equal within a connection, then rebalanced (subflows on a path with a failed link
// direction get 0; for a connection with a path loaded above 1, weight moves from its most loaded
// path to its least loaded one; the best state is kept). Ports: the lowest free port of the
// configured range that the fabric maps to the path for the pair (Fabric::freePortForPathFor),
// distinct per source node across all jobs.
//
// Spare subflows (JobPlacement::spare_subflows): the paths above are for the primary subflows
// only. A pair's spares then take, one by one, the path sharing the fewest link directions with
// the pair's other subflows, alive, and shared with the fewest spares already placed. A spare
// carries no weight (and no load) while the pair's primaries live; for each primary whose path
// dies, one live spare (in index order) takes its share, so a connection of one subflow leaves a
// dead path by weights alone. The weights are rebalanced over the active subflows (live
// primaries and the spares standing in for dead ones).
//
// Incremental: planJob plans one job around the others, whose paths and ports never move (their
// live connections stay bound to their ports and apply new weights by subflow index); removeJob,
// setLinkState, setFabric and rebalance() change only weights (what live connections can apply
// without reconnecting); setLinkState and removeJob re-weight only the pairs near the change (the
// pairs on the changed link, or that shared a hot link with the job that left, the pairs on hot
// links of their paths or leaning or hot on links that cooled, then the pairs on any hot link, at
// most PlannerOptions::reweight_max_pairs); planJob re-weights the new job and such neighbours with
// no bound (past half of the pairs, every pair); setFabric and rebalance() re-weight every pair.
// replanAll() alone moves running jobs' paths. Equal inputs give equal plans (no randomness, no
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
#include "operator/c4p/mode.h"

namespace c4::op::c4p {

struct PlannerOptions {
  std::uint16_t port_first = 40000;  // source ports the planner hands out, inclusive
  std::uint16_t port_last = 59999;
  int local_search_moves = 200000;  // upper bound on improving moves per solve
  int weight_rounds = 400;          // rounds of weight rebalancing
  // A live change (a link's state, a job leaving) re-weights the pairs it touches and, nearest
  // first, the pairs sharing a hot link with them or leaning off a link that cooled: at most this
  // many pairs (0: no bound). An arrival has no bound: planning has a second, not 100 ms.
  std::size_t reweight_max_pairs = 1024;
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
  int spare_subflows = 0;             // each pair's last spare_subflows subflows are spares
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
  int tier1_planes = 0;              // planes solved by edge colouring in this operation
  std::size_t pairs_reweighted = 0;  // pairs whose weights this operation recomputed
};

// The planner's record of one job (internal; exposed for the implementation's helpers).
struct PlannerJobState {
  JobPlacement placement;
  // Cross-leaf pairs, sorted by (src, dst).
  struct Pair {
    Connection conn;
    int plane = 0;
    NodeLocation src;  // where conn.src and conn.dst were when the job was planned
    NodeLocation dst;
    double demand_gbps = 0;  // per connection × count: what the pair carries at full rate
    std::vector<PlannedSubflow> subflows;
    std::size_t spares = 0;  // the last `spares` subflows are spares (JobPlacement::spare_subflows)
  };
  std::vector<Pair> pairs;
  std::map<std::string, int> planes;
  JobPlan plan;
};

class Planner {
 public:
  explicit Planner(Fabric fabric, PlannerOptions options = {});

  // A node's location from its labels (c4.dev/leaf, c4.dev/plane, c4.dev/pod). Refused when the
  // labels are bad; a node that moves while a job uses it keeps its planned paths until the job is
  // planned again.
  Status setNode(const std::string& name, const std::map<std::string, std::string>& labels);
  void removeNode(const std::string& name);

  // A new fabric description. Telemetry states carry over; paths and ports stay, weights are
  // rebalanced. Refused (nothing changes) when a planned node's plane no longer exists in it, a
  // planned path id is not below the new pathCount of its pair, or it no longer connects the pods
  // of a planned pair.
  Result<PlanOutcome> setFabric(Fabric fabric);
  // Telemetry: one link's capacity fraction (a leaf uplink or a spine–core link; the fabric
  // validates it); weights are rebalanced (paths and ports stay).
  Result<PlanOutcome> setLinkState(const LinkRef& link, double capacity_fraction,
                                   Direction direction = Direction::kBoth);

  // Plans (or re-plans) one job; see the header comment. Errors (bad placement, unknown node,
  // nodes of different planes connected, nodes of pods the fabric does not connect (no core
  // uplinks) connected, a leaf whose nodes name two pods, no free port) leave every plan as it
  // was.
  Result<PlanOutcome> planJob(const JobPlacement& placement);
  PlanOutcome removeJob(const std::string& job);
  // Weights only, every job: what live connections can apply.
  PlanOutcome rebalance();
  // Paths of every job from scratch (ports change for moved subflows: new connections only).
  Result<PlanOutcome> replanAll();

  [[nodiscard]] const JobPlan* plan(const std::string& job) const;
  [[nodiscard]] std::vector<std::string> jobs() const;
  [[nodiscard]] double maxLinkLoad() const { return max_load_; }
  // Loads of every link direction that carries something (leaf and spine–core links), highest
  // first.
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
