// Failpoints (see failpoints.h).
#include "operator/manager/failpoints.h"

#include <array>

namespace c4::op {
namespace {

constexpr std::array<std::string_view, 4> kKnownPoints = {
    kFailpointAfterStatus, kFailpointAfterRestartStatus, kFailpointAfterCordonOwed,
    kFailpointAfterFindingPending};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<Failpoints> Failpoints::parse(std::string_view spec) {
  Failpoints out;
  while (!spec.empty()) {
    std::size_t end = spec.find(';');
    std::string_view entry = trim(spec.substr(0, end));
    spec = end == std::string_view::npos ? std::string_view{} : spec.substr(end + 1);
    if (entry.empty()) continue;
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      return makeError(ErrorCode::kInvalidArgument,
                       "C4_FAILPOINTS: entry \"" + std::string(entry) + "\" is not name=action");
    }
    std::string_view name = trim(entry.substr(0, eq));
    std::string_view action = trim(entry.substr(eq + 1));
    bool known = false;
    for (auto p : kKnownPoints) known = known || p == name;
    if (!known) {
      std::string list;
      for (auto p : kKnownPoints) list += (list.empty() ? "" : ", ") + std::string(p);
      return makeError(
          ErrorCode::kInvalidArgument,
          "C4_FAILPOINTS: unknown failpoint \"" + std::string(name) + "\" (known: " + list + ")");
    }
    FailpointAction parsed;
    if (action == "kill") {
      parsed = FailpointAction::kKill;
    } else if (action == "off") {
      parsed = FailpointAction::kOff;
    } else {
      return makeError(ErrorCode::kInvalidArgument,
                       "C4_FAILPOINTS: failpoint \"" + std::string(name) + "\" has action \"" +
                           std::string(action) + "\"; expected kill or off");
    }
    out.actions_[std::string(name)] = parsed;
  }
  return out;
}

FailpointAction Failpoints::action(std::string_view point) const {
  auto it = actions_.find(point);
  return it == actions_.end() ? FailpointAction::kOff : it->second;
}

std::string Failpoints::describe() const {
  std::string out;
  for (const auto& [name, action] : actions_) {
    if (!out.empty()) out += ';';
    out += name + (action == FailpointAction::kKill ? "=kill" : "=off");
  }
  return out;
}

}  // namespace c4::op
