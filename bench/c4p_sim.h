// A flow-level model of a two-tier leaf–spine fabric for C4P's benchmarks.
//
// Rates are max-min fair (progressive filling: every flow's rate rises together until a link is
// full; its flows freeze; repeat). A transfer is fluid: each flow has bytes to send, rates are
// re-shared whenever a flow finishes. No congestion control, queues or packet effects: this is
// the bandwidth a perfectly fair transport would get, the usual flow-level model.
//
// Fabric: leaf l holds nodes [l·H, (l+1)·H); each node has one host link (up and down) of
// host_gbps; each leaf has U uplinks of uplink_gbps; path u goes up on (source leaf, u) and down
// on (destination leaf, u), as the operator's fabric model says. A failed uplink has capacity 0
// in both directions.
//
// Ring allreduce's bus bandwidth equals the bandwidth of one of its steps (every connection sends
// one chunk). Two models of it: one step with all subflows starting at once (ringStepBusbw), and
// the steady state of a pipelined ring (ringPipelinedBusbw).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace c4::bench::c4psim {

// Max-min fair rates; paths[f] lists the links flow f crosses. A flow over a link of capacity 0
// gets rate 0.
std::vector<double> maxMinRates(const std::vector<double>& capacity,
                                const std::vector<std::vector<int>>& paths);

// Fluid completion time of every flow (bytes[f] at its max-min rate, re-shared at each
// completion). Flows with 0 bytes finish at 0; a flow that can never finish gets +inf.
std::vector<double> completionTimes(const std::vector<double>& capacity,
                                    const std::vector<std::vector<int>>& paths,
                                    const std::vector<double>& bytes);

struct LeafSpine {
  int leaves = 2;
  int nodes_per_leaf = 1;
  int uplinks = 1;
  double host_gbps = 400;
  double uplink_gbps = 400;
  std::vector<std::pair<int, int>> failed;  // (leaf, uplink)

  [[nodiscard]] int nodes() const { return leaves * nodes_per_leaf; }
  [[nodiscard]] int leafOf(int node) const { return node / nodes_per_leaf; }
  [[nodiscard]] bool alive(int leaf, int uplink) const;
};

struct SimJob {
  std::vector<std::pair<int, int>> connections;  // (source node, destination node)
  int subflows = 1;
};
// A ring in the given node order: node[i] -> node[i + 1].
SimJob ringJob(const std::vector<int>& nodes, int subflows);

struct Route {
  int path = -1;  // uplink; ignored inside a leaf
  double weight = 0;
};
// routes[job][connection][subflow]
using Routes = std::vector<std::vector<std::vector<Route>>>;

// ECMP: every subflow of a cross-leaf connection takes a path drawn uniformly from the uplinks
// alive at both ends (a hash of a random source port), equal weights.
Routes ecmpRoutes(const LeafSpine& fabric, const std::vector<SimJob>& jobs, std::uint64_t seed);

// busbw (Gbps) of each job for one concurrent ring step, every subflow starting at once (no
// pipelining: a subflow that finishes its share early idles until the step ends).
std::vector<double> ringStepBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs,
                                  const Routes& routes);

// busbw (Gbps) of each job in steady state, as a pipelined ring runs: NCCL keeps several steps in
// flight per peer and the plugin splits every message by weight, so subflow j of a job moving at
// pace P carries w_j·P, and a subflow that runs ahead waits for data (it is demand-limited, TCP
// gives the rest of its link to others). The paces are the weighted max-min fair allocation over
// jobs: all paces rise together; a job stops when a link it uses is full (Σ_jobs P·Σw on the link
// = capacity). With equal weights on one job this equals the one-step model (pace = host link
// share of the busiest link); with unequal weights it is what the weights were planned for.
std::vector<double> ringPipelinedBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs,
                                       const Routes& routes);

// What the links allow a job (Gbps): the host link speed, lowered where a leaf's cross-leaf
// demand exceeds its live uplink capacity (fluid optimum with perfect splitting).
double idealBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs, std::size_t job);

// Exact E[max bin load] of n balls thrown uniformly into k bins:
// P(max <= m) = n!/k^n · [x^n] (sum_{i<=m} x^i/i!)^k, E[max] = sum_{m>=0} (1 − P(max <= m)).
double expectedMaxLoad(int balls, int bins);

}  // namespace c4::bench::c4psim
