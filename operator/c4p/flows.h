// The inter-node connections of a job's collectives, the flows C4P plans.
//
// A job runs `procs_per_node` ranks on each of its nodes; rank r sits on nodes[r / procs_per_node]
// (torchrun's contiguous assignment, replica index = position in `nodes`) and the ring visits the
// ranks in rank order. Each rank connects to the next (NCCL's ring: the sender connects, the
// receiver accepts), so data flows from node(r) to node(r + 1). A connection between two ranks of
// one node stays inside the node. Connections between the same ordered node pair share one entry
// with a count: the plugin's plan names a (local node, peer node) pair, and every connection of
// that pair uses the pair's subflows. `both_directions` adds the reverse ring (r → r − 1).
// `tree` adds NCCL's double binary tree over the nodes (both trees, both directions: reduce up,
// broadcast down).
#pragma once

#include <string>
#include <vector>

#include "c4/common/error.h"

namespace c4::op::c4p {

inline constexpr int kMaxSubflowsPerConnection = 64;  // the plugin's limit

struct JobPlacement {
  std::string job;                 // a unique key, e.g. "<namespace>/<name>"
  std::vector<std::string> nodes;  // by replica index; a node appears once
  int procs_per_node = 1;
  int subflows_per_connection = 4;
  bool both_directions = false;
  bool tree = false;
  // Spare subflows per cross-leaf connection: planned (path, port) and connected by the plugin,
  // but weighted 0 until a primary subflow's path dies, when one takes its place. They let a
  // connection (one of a single subflow above all) leave a dead path without a reconnect.
  int spare_subflows = 0;
};

// One ordered node pair with `count` connections from `src` (the connecting side) to `dst`.
struct Connection {
  std::string src;
  std::string dst;
  int count = 0;
  friend bool operator==(const Connection&, const Connection&) = default;
};

// Checks a placement: non-empty job key and node names, no node twice, procs_per_node >= 1,
// subflows in [1, 64], spare subflows >= 0 with subflows + spares <= 64. Errors name the field.
Status validatePlacement(const JobPlacement& placement);

// The connections of the job's collectives, sorted by (src, dst); empty for a single-node job.
Result<std::vector<Connection>> jobConnections(const JobPlacement& placement);

}  // namespace c4::op::c4p
