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
                    .peerRank = c.peerRank,
                    .bytes = c.bytes,
                    .ops = c.ops,
                    .wireBytes = wireBytesOf(c),
                    .inflight = c.inflight,
                    .oldestInflightUs = c.oldestInflightUs,
                    .wait = c.wait,
                    .transfer = c.transfer};
}

ReportSample ReportSample::from(const report::RankReport& r) {
  ReportSample s;
  s.time = WallTime{
      std::chrono::duration_cast<WallTime::duration>(std::chrono::nanoseconds{r.timeUnixNs})};
  s.intervalMs = r.intervalMs;
  s.connections.reserve(r.connections.size());
  for (const auto& c : r.connections) s.connections.push_back(ConnSample::from(c));
  return s;
}

void applyNodeHealth(const report::NodeHealth& health, NodeSnapshot& out) {
  out.nicDown = false;
  out.rdmaPortDown = false;
  out.gpuFault = false;
  out.healthDetail.clear();
  auto add = [&out](const std::string& what) {
    if (!out.healthDetail.empty()) out.healthDetail += ", ";
    out.healthDetail += what;
  };
  // Unavailable classes (empty lists) are never faults.
  for (const auto& nic : health.nics) {
    if (nic.up) continue;
    out.nicDown = true;
    add("NIC " + nic.name + " down" +
        (nic.operstate.empty() ? std::string{} : " (operstate " + nic.operstate + ")"));
  }
  for (const auto& port : health.rdmaPorts) {
    if (port.active) continue;
    out.rdmaPortDown = true;
    add("RDMA " + port.device + " port " + std::to_string(port.port) + " " + port.state + "/" +
        port.physState);
  }
  for (const auto& gpu : health.gpus) {
    const bool fault = !gpu.healthy || gpu.eccVolatileUncorrected > 0 || gpu.retiredPagesPending;
    if (!fault) continue;
    out.gpuFault = true;
    std::string why = gpu.detail;
    if (why.empty() && gpu.eccVolatileUncorrected > 0) {
      why = std::to_string(gpu.eccVolatileUncorrected) + " uncorrected ECC errors";
    }
    if (why.empty() && gpu.retiredPagesPending) why = "retired pages pending";
    add("GPU " + std::to_string(gpu.index) + " unhealthy" + (why.empty() ? "" : " (" + why + ")"));
  }
}

Status validate(const Thresholds& t) {
  if (!positive(t.windowSeconds)) return invalid("thresholds.windowSeconds must be > 0");
  if (!positive(t.silenceSeconds)) return invalid("thresholds.silenceSeconds must be > 0");
  if (!positive(t.hangSeconds)) return invalid("thresholds.hangSeconds must be > 0");
  if (!std::isfinite(t.minMeasureTransferSeconds) || t.minMeasureTransferSeconds < 0.0) {
    return invalid("thresholds.minMeasureTransferSeconds must be >= 0");
  }
  if (!std::isfinite(t.slowFactor) || t.slowFactor <= 1.0) {
    return invalid("thresholds.slowFactor must be > 1");
  }
  if (!std::isfinite(t.stragglerFactor) || t.stragglerFactor <= 1.0) {
    return invalid("thresholds.stragglerFactor must be > 1");
  }
  if (!positive(t.minLatenessShare)) return invalid("thresholds.minLatenessShare must be > 0");
  if (!std::isfinite(t.minStragglerSlowdown) || t.minStragglerSlowdown < 1.0) {
    return invalid("thresholds.minStragglerSlowdown must be >= 1");
  }
  if (t.confirmationWindows < 1) return invalid("thresholds.confirmationWindows must be >= 1");
  if (t.clearWindows < 1) return invalid("thresholds.clearWindows must be >= 1");
  if (t.warmupWindows < 0) return invalid("thresholds.warmupWindows must be >= 0");
  if (t.minPeersEvidence < 1) return invalid("thresholds.minPeersEvidence must be >= 1");
  if (!std::isfinite(t.pauseGraceSeconds) || t.pauseGraceSeconds < 0.0) {
    return invalid("thresholds.pauseGraceSeconds must be >= 0");
  }
  if (!positive(t.maxPauseSeconds)) return invalid("thresholds.maxPauseSeconds must be > 0");
  if (!positive(t.anomalyMemorySeconds)) {
    return invalid("thresholds.anomalyMemorySeconds must be > 0");
  }
  if (!std::isfinite(t.repeatOffenderMinScore) || t.repeatOffenderMinScore <= 0.0) {
    return invalid("thresholds.repeatOffenderMinScore must be > 0");
  }
  if (!std::isfinite(t.repeatOffenderRelax) || t.repeatOffenderRelax <= 0.0 ||
      t.repeatOffenderRelax > 1.0) {
    return invalid("thresholds.repeatOffenderRelax must be in (0, 1]");
  }
  return okStatus();
}

Status validate(const JobSnapshot& s) {
  C4_RETURN_IF_ERROR(validate(s.thresholds));
  if (s.worldSize <= 0 || s.worldSize > report::kMaxRank) {
    return invalid("worldSize " + std::to_string(s.worldSize) + " out of range");
  }
  if (s.ranks.size() != static_cast<std::size_t>(s.worldSize)) {
    return invalid("ranks has " + std::to_string(s.ranks.size()) + " entries, worldSize is " +
                   std::to_string(s.worldSize));
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
