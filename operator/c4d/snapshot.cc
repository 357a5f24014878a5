#include "operator/c4d/snapshot.h"

#include <cmath>

namespace c4::c4d {
namespace {

Status invalid(std::string message) {
  return makeError(ErrorCode::kInvalidArgument, std::move(message));
}

bool positive(double v) {
  return std::isfinite(v) && v > 0.0;
}

}  // namespace

namespace {
std::uint64_t wireBytesOf(const report::ConnectionStats& c) {
  std::uint64_t sum = 0;
  for (const auto& sf : c.subflows) sum += sf.bytes;
  return sum;
}
}  // namespace

ConnSample ConnSample::from(const report::ConnectionStats& c) {
  return ConnSample{.id = c.id,
                    .direction = c.direction,
                    .peer_rank = c.peer_rank,
                    .bytes = c.bytes,
                    .ops = c.ops,
                    .wire_bytes = wireBytesOf(c),
                    .inflight = c.inflight,
                    .oldest_inflight_us = c.oldest_inflight_us,
                    .wait = c.wait,
                    .transfer = c.transfer};
}

std::shared_ptr<const ConnSamples::Vector> convertConnections(
    const std::vector<report::ConnectionStats>& connections) {
  auto out = std::make_shared<ConnSamples::Vector>();
  out->reserve(connections.size());
  for (const auto& c : connections) out->push_back(ConnSample::from(c));
  return out;
}

ReportSample ReportSample::from(const report::RankReport& r) {
  ReportSample s;
  s.time = WallTime{
      std::chrono::duration_cast<WallTime::duration>(std::chrono::nanoseconds{r.time_unix_ns})};
  s.interval_ms = r.interval_ms;
  s.connections = ConnSamples(convertConnections(r.connections));
  s.communicators = r.communicators;
  s.last = r.last;
  return s;
}

void applyNodeHealth(const report::NodeHealth& health, NodeSnapshot& out) {
  out.nic_down = false;
  out.rdma_port_down = false;
  out.gpu_fault = false;
  out.health_detail.clear();
  auto add = [&out](const std::string& what) {
    if (!out.health_detail.empty()) out.health_detail += ", ";
    out.health_detail += what;
  };
  // Unavailable classes (empty lists) are never faults.
  for (const auto& nic : health.nics) {
    if (nic.up) continue;
    out.nic_down = true;
    add("NIC " + nic.name + " down" +
        (nic.operstate.empty() ? std::string{} : " (operstate " + nic.operstate + ")"));
  }
  for (const auto& port : health.rdma_ports) {
    if (port.active) continue;
    out.rdma_port_down = true;
    add("RDMA " + port.device + " port " + std::to_string(port.port) + " " + port.state + "/" +
        port.phys_state);
  }
  for (const auto& gpu : health.gpus) {
    const bool fault =
        !gpu.healthy || gpu.ecc_volatile_uncorrected > 0 || gpu.retired_pages_pending;
    if (!fault) continue;
    out.gpu_fault = true;
    std::string why = gpu.detail;
    if (why.empty() && gpu.ecc_volatile_uncorrected > 0) {
      why = std::to_string(gpu.ecc_volatile_uncorrected) + " uncorrected ECC errors";
    }
    if (why.empty() && gpu.retired_pages_pending) why = "retired pages pending";
    add("GPU " + std::to_string(gpu.index) + " unhealthy" + (why.empty() ? "" : " (" + why + ")"));
  }
}

Status validate(const Thresholds& t) {
  if (!positive(t.window_seconds)) return invalid("thresholds.windowSeconds must be > 0");
  if (!positive(t.silence_seconds)) return invalid("thresholds.silenceSeconds must be > 0");
  if (!positive(t.hang_seconds)) return invalid("thresholds.hangSeconds must be > 0");
  if (!std::isfinite(t.min_measure_transfer_seconds) || t.min_measure_transfer_seconds < 0.0) {
    return invalid("thresholds.minMeasureTransferSeconds must be >= 0");
  }
  if (!std::isfinite(t.slow_factor) || t.slow_factor <= 1.0) {
    return invalid("thresholds.slowFactor must be > 1");
  }
  if (!std::isfinite(t.slow_noise_sigmas) || t.slow_noise_sigmas < 0.0) {
    return invalid("thresholds.slowNoiseSigmas must be >= 0");
  }
  if (!std::isfinite(t.straggler_factor) || t.straggler_factor <= 1.0) {
    return invalid("thresholds.stragglerFactor must be > 1");
  }
  if (!positive(t.min_lateness_share)) return invalid("thresholds.minLatenessShare must be > 0");
  if (!std::isfinite(t.min_straggler_slowdown) || t.min_straggler_slowdown < 1.0) {
    return invalid("thresholds.minStragglerSlowdown must be >= 1");
  }
  if (t.confirmation_windows < 1) return invalid("thresholds.confirmationWindows must be >= 1");
  if (t.clear_windows < 1) return invalid("thresholds.clearWindows must be >= 1");
  if (t.warmup_windows < 0) return invalid("thresholds.warmupWindows must be >= 0");
  if (t.min_peers_evidence < 1) return invalid("thresholds.minPeersEvidence must be >= 1");
  if (!std::isfinite(t.pause_grace_seconds) || t.pause_grace_seconds < 0.0) {
    return invalid("thresholds.pauseGraceSeconds must be >= 0");
  }
  if (!positive(t.max_pause_seconds)) return invalid("thresholds.maxPauseSeconds must be > 0");
  if (!positive(t.anomaly_memory_seconds)) {
    return invalid("thresholds.anomalyMemorySeconds must be > 0");
  }
  if (!std::isfinite(t.repeat_offender_min_score) || t.repeat_offender_min_score <= 0.0) {
    return invalid("thresholds.repeatOffenderMinScore must be > 0");
  }
  if (!std::isfinite(t.repeat_offender_relax) || t.repeat_offender_relax <= 0.0 ||
      t.repeat_offender_relax > 1.0) {
    return invalid("thresholds.repeatOffenderRelax must be in (0, 1]");
  }
  return okStatus();
}

Status validate(const JobSnapshot& s) {
  C4_RETURN_IF_ERROR(validate(s.thresholds));
  if (s.world_size <= 0 || s.world_size > report::kMaxRank) {
    return invalid("worldSize " + std::to_string(s.world_size) + " out of range");
  }
  if (s.ranks.size() != static_cast<std::size_t>(s.world_size)) {
    return invalid("ranks has " + std::to_string(s.ranks.size()) + " entries, worldSize is " +
                   std::to_string(s.world_size));
  }
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const RankSnapshot& rs = s.ranks[r];
    if (rs.node < 0 || static_cast<std::size_t>(rs.node) >= s.nodes.size()) {
      return invalid("ranks[" + std::to_string(r) + "].node " + std::to_string(rs.node) +
                     " is not an index into nodes");
    }
    for (std::size_t i = 1; i < rs.reports.size(); ++i) {
      if (rs.reports[i].time < rs.reports[i - 1].time) {
        return invalid("ranks[" + std::to_string(r) + "].reports are not oldest first");
      }
    }
  }
  return okStatus();
}

std::string_view podStateName(PodState s) noexcept {
  switch (s) {
    case PodState::kUnknown:
      return "Unknown";
    case PodState::kPending:
      return "Pending";
    case PodState::kRunning:
      return "Running";
    case PodState::kSucceeded:
      return "Succeeded";
    case PodState::kFailed:
      return "Failed";
    case PodState::kGone:
      return "Gone";
  }
  return "Unknown";
}

}  // namespace c4::c4d
