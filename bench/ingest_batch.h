// The synthetic node batch of the ingest benchmarks: one node plugin's NodeReport for a node that
// runs `ranks_per_node` ranks of one job, each with `connections` connections of `subflows`
// subflows, counters as a 1 Hz reporter would send them after `tick` seconds of training.
//
// Layout: job `<ns>/<job>` with world size nodes × ranks_per_node; pod i (`<job>-<i>`) runs on
// node i (`<node_prefix><i>`, five digits) and holds ranks [i × ranks_per_node, (i + 1) ×
// ranks_per_node); rank r's connection k goes to rank (r + 2^k) mod world (send for even k, recv
// for odd k), as a ring/tree mix would.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "c4/common/report.h"

namespace c4::bench {

struct BatchShape {
  std::string ns = "bench";
  std::string job = "llm";
  std::string node_prefix = "node-";
  int nodes = 2048;
  int ranks_per_node = 8;
  int connections = 8;
  int subflows = 4;
};

inline std::string nodeName(const BatchShape& s, int node) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05d", node);
  return s.node_prefix + buf;
}

inline std::string podName(const BatchShape& s, int node) {
  return s.job + "-" + std::to_string(node);
}

inline report::NodeReport makeNodeBatch(const BatchShape& s, int node, std::uint64_t seq,
                                        std::int64_t time_unix_ns, std::uint64_t tick) {
  const int world = s.nodes * s.ranks_per_node;
  report::NodeReport batch;
  batch.node = nodeName(s, node);
  batch.seq = seq;
  batch.time_unix_ns = time_unix_ns;
  batch.health.nics_available = true;
  for (int i = 0; i < 2; ++i) {
    report::NicHealth nic;
    nic.name = i == 0 ? "eth0" : "ib0";
    nic.up = true;
    nic.rdma = i == 1;
    nic.speed_mbps = i == 0 ? 25000 : 400000;
    nic.operstate = "up";
    nic.carrier = true;
    nic.carrier_changes = 2;
    batch.health.nics.push_back(nic);
  }
  batch.health.rdma_reason = "no /sys/class/infiniband";
  batch.health.gpus_reason = "libnvidia-ml.so.1 not found";
  for (int local = 0; local < s.ranks_per_node; ++local) {
    const int rank = node * s.ranks_per_node + local;
    report::RankReport r;
    r.id = report::RankIdentity{s.ns,
                                s.job,
                                podName(s, node),
                                batch.node,
                                rank,
                                world,
                                0,
                                static_cast<std::uint32_t>(1000 + local)};
    r.seq = tick;
    r.time_unix_ns = time_unix_ns - 1'000'000 * local;
    r.interval_ms = 1000;
    r.plan_version = 3;
    for (int k = 0; k < s.connections; ++k) {
      report::ConnectionStats c;
      c.id = static_cast<std::uint64_t>(k + 1);
      c.direction = k % 2 == 0 ? report::Direction::kSend : report::Direction::kRecv;
      c.peer_rank = (rank + (1 << (k % 20))) % world;
      const int peer_node = c.peer_rank / s.ranks_per_node;
      c.peer_node = nodeName(s, peer_node);
      c.peer_pod = podName(s, peer_node);
      // ~3 GB/s per connection, 20 ops/s of 150 MB.
      c.bytes = tick * 3'000'000'000ULL + static_cast<std::uint64_t>(k) * 977;
      c.ops = tick * 20;
      c.inflight = 1;
      c.oldest_inflight_us = 1200 + static_cast<std::uint64_t>(k);
      c.wait = {20, 20 * 850, 2400, 800, 2300};
      c.transfer = {20, 20 * 48'000, 61'000, 47'000, 60'000};
      for (int f = 0; f < s.subflows; ++f) {
        c.subflows.push_back({static_cast<std::uint32_t>(f),
                              static_cast<std::uint16_t>(40000 + 8 * k + f), f, 1.0 / s.subflows,
                              c.bytes / static_cast<std::uint64_t>(s.subflows)});
      }
      r.connections.push_back(std::move(c));
    }
    batch.reports.push_back(std::move(r));
  }
  return batch;
}

}  // namespace c4::bench
