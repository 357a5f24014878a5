#include "operator/c4d/verdict.h"

namespace c4::c4d {

double Evidence::number(std::string_view name, double fallback) const {
  for (const auto& [k, v] : numbers) {
    if (k == name) return v;
  }
  return fallback;
}

std::string Verdict::key() const {
  std::string out(faultClassName(fault_class));
  out += '/';
  out += culpritKindName(culprit.kind);
  out += '/';
  switch (culprit.kind) {
    case CulpritKind::kNode:
      out += culprit.node;
      break;
    case CulpritKind::kLink:
      out += culprit.node + "<->" + culprit.peer_node;
      break;
    case CulpritKind::kRank:
      out += std::to_string(culprit.rank);
      break;
  }
  return out;
}

std::string_view faultClassName(FaultClass c) noexcept {
  switch (c) {
    case FaultClass::kCrash:
      return "crash";
    case FaultClass::kCommHang:
      return "commHang";
    case FaultClass::kNonCommHang:
      return "nonCommHang";
    case FaultClass::kCommSlow:
      return "commSlow";
    case FaultClass::kNonCommSlow:
      return "nonCommSlow";
  }
  return "unknown";
}

std::string_view culpritKindName(CulpritKind k) noexcept {
  switch (k) {
    case CulpritKind::kNode:
      return "node";
    case CulpritKind::kLink:
      return "link";
    case CulpritKind::kRank:
      return "rank";
  }
  return "unknown";
}

std::string_view actionName(Action a) noexcept {
  switch (a) {
    case Action::kCordonAndRestart:
      return "cordonAndRestart";
    case Action::kRestartOnly:
      return "restartOnly";
    case Action::kReplan:
      return "replan";
    case Action::kEventOnly:
      return "eventOnly";
  }
  return "unknown";
}

std::string_view observationKindName(ObservationKind k) noexcept {
  switch (k) {
    case ObservationKind::kTelemetryMissing:
      return "telemetryMissing";
  }
  return "unknown";
}

}  // namespace c4::c4d
