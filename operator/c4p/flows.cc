#include "operator/c4p/flows.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace c4::op::c4p {
namespace {

Error invalid(const std::string& job, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "placement " + job + ": " + what);
}

// NCCL's double binary tree over n nodes (ncclGetBtree/ncclGetDtree): tree 0 is the in-order
// binary tree where node i's parent is found from its lowest set bit; tree 1 shifts it by one for
// odd n and mirrors it for even n, so that no node is an interior node of both trees.
void btree(int n, int rank, int* parent, int* child0, int* child1) {
  int bit = 1;
  while (bit < n) bit <<= 1;
  if (rank == 0) {
    *parent = -1;
    *child0 = -1;
    *child1 = n > 1 ? bit >> 1 : -1;
    return;
  }
  bit = 1;
  while ((rank & bit) == 0) bit <<= 1;
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  *parent = up;
  int low = bit >> 1;
  *child0 = low == 0 ? -1 : rank - low;
  int high = low;
  while (high != 0 && rank + high >= n) high >>= 1;
  *child1 = high == 0 ? -1 : rank + high;
}

}  // namespace

Status validatePlacement(const JobPlacement& p) {
  if (p.job.empty()) return makeError(ErrorCode::kInvalidArgument, "placement: job is empty");
  if (p.nodes.empty()) return std::unexpected(invalid(p.job, "nodes is empty"));
  std::set<std::string> seen;
  for (std::size_t i = 0; i < p.nodes.size(); ++i) {
    if (p.nodes[i].empty()) {
      return std::unexpected(invalid(p.job, "nodes[" + std::to_string(i) + "] is empty"));
    }
    if (!seen.insert(p.nodes[i]).second) {
      return std::unexpected(invalid(
          p.job, "nodes[" + std::to_string(i) + "]: node " + p.nodes[i] + " appears twice"));
    }
  }
  if (p.procs_per_node < 1) return std::unexpected(invalid(p.job, "procsPerNode must be >= 1"));
  if (p.subflows_per_connection < 1 || p.subflows_per_connection > kMaxSubflowsPerConnection) {
    return std::unexpected(invalid(p.job, "subflowsPerConnection must be in [1, 64]"));
  }
  if (p.spare_subflows < 0 ||
      p.spare_subflows > kMaxSubflowsPerConnection - p.subflows_per_connection) {
    return std::unexpected(
        invalid(p.job, "spareSubflows must be in [0, 64 - subflowsPerConnection] (got " +
                           std::to_string(p.spare_subflows) + " with subflowsPerConnection " +
                           std::to_string(p.subflows_per_connection) + ")"));
  }
  return {};
}

Result<std::vector<Connection>> jobConnections(const JobPlacement& p) {
  C4_RETURN_IF_ERROR(validatePlacement(p));
  std::map<std::pair<std::string, std::string>, int> pairs;
  const int n = static_cast<int>(p.nodes.size());
  if (n > 1) {
    // Rank order with contiguous nodes: the ring leaves node i once, towards node i + 1.
    for (int i = 0; i < n; ++i) {
      int next = (i + 1) % n;
      ++pairs[{p.nodes[static_cast<std::size_t>(i)], p.nodes[static_cast<std::size_t>(next)]}];
      if (p.both_directions) {
        ++pairs[{p.nodes[static_cast<std::size_t>(next)], p.nodes[static_cast<std::size_t>(i)]}];
      }
    }
    if (p.tree) {
      for (int t = 0; t < 2; ++t) {
        for (int i = 0; i < n; ++i) {
          // Tree 1: shifted by one (odd n) or mirrored (even n), as NCCL builds it.
          int r = t == 0 ? i : (n % 2 == 1 ? (i + n - 1) % n : n - 1 - i);
          int parent = 0, c0 = 0, c1 = 0;
          btree(n, r, &parent, &c0, &c1);
          if (parent < 0) continue;
          int node_parent = t == 0 ? parent : (n % 2 == 1 ? (parent + 1) % n : n - 1 - parent);
          const auto& a = p.nodes[static_cast<std::size_t>(i)];
          const auto& b = p.nodes[static_cast<std::size_t>(node_parent)];
          ++pairs[{a, b}];  // reduce: child -> parent
          ++pairs[{b, a}];  // broadcast: parent -> child
        }
      }
    }
  }
  std::vector<Connection> out;
  out.reserve(pairs.size());
  for (const auto& [k, count] : pairs) out.push_back({k.first, k.second, count});
  return out;
}

}  // namespace c4::op::c4p
