// Builders of batches, pods and jobs for the ingest tests.
#pragma once

#include <string>

#include "c4/common/clock.h"
#include "c4/common/report.h"
#include "kube/client/kube_client.h"
#include "operator/ingest/report_store.h"

namespace c4::op::ingest::testing {

inline report::RankIdentity identity(const std::string& ns, const std::string& job, int rank,
                                     const std::string& node, std::uint32_t attempt = 0,
                                     int nproc = 1) {
  report::RankIdentity id;
  id.ns = ns;
  id.job = job;
  id.pod = job + "-" + std::to_string(rank / nproc);
  id.node = node;
  id.rank = rank;
  id.world_size = 0;
  id.restart_attempt = attempt;
  id.pid = 100 + static_cast<std::uint32_t>(rank);
  return id;
}

inline report::RankReport rankReport(const report::RankIdentity& id, std::uint64_t seq,
                                     std::int64_t time_ns, int connections = 2) {
  report::RankReport r;
  r.id = id;
  r.seq = seq;
  r.time_unix_ns = time_ns;
  r.interval_ms = 1000;
  for (int c = 0; c < connections; ++c) {
    report::ConnectionStats s;
    s.id = static_cast<std::uint64_t>(c + 1);
    s.peer_rank = 0;
    s.bytes = seq * 1000;
    s.ops = seq;
    r.connections.push_back(s);
  }
  return r;
}

inline report::CheckpointNotice checkpointNotice(const report::RankIdentity& id, std::int64_t step,
                                                 std::int64_t time_ns) {
  report::CheckpointNotice n;
  n.id = id;
  n.step = step;
  n.time_unix_ns = time_ns;
  n.path = "/ckpt/step-" + std::to_string(step) + "/rank-" + std::to_string(id.rank);
  return n;
}

inline report::AnomalyNotice anomalyNotice(const report::RankIdentity& id, std::int64_t time_ns,
                                           const std::string& detail) {
  report::AnomalyNotice n;
  n.id = id;
  n.time_unix_ns = time_ns;
  n.detail = detail;
  return n;
}

inline report::NodeReport nodeReport(const std::string& node, std::uint64_t seq,
                                     std::int64_t time_ns) {
  report::NodeReport b;
  b.node = node;
  b.seq = seq;
  b.time_unix_ns = time_ns;
  report::NicHealth nic;
  nic.name = "eth0";
  nic.up = true;
  nic.carrier = true;
  nic.operstate = "up";
  nic.speed_mbps = 100000;
  b.health.nics.push_back(nic);
  return b;
}

inline Json pod(const std::string& ns, const std::string& name, const std::string& job,
                const std::string& node, int index, int attempt) {
  return Json{{"metadata",
               {{"namespace", ns},
                {"name", name},
                {"labels",
                 {{"c4.dev/job-name", job},
                  {"c4.dev/replica-index", std::to_string(index)},
                  {"c4.dev/restart-attempt", std::to_string(attempt)}}}}},
              {"spec", {{"nodeName", node}}}};
}

}  // namespace c4::op::ingest::testing
