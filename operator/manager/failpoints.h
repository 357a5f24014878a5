// Failpoints: named points in the operator where a test can make the real binary crash, the way
// etcd's gofail does. Set through the environment, never by a flag, so a production manifest
// cannot enable one by accident:
//
//   C4_FAILPOINTS="after-restart-status=kill"        SIGKILL the process at that point
//   C4_FAILPOINTS="after-status=kill;other=off"       several, separated by ';'
//
// Points (trainingjob/reconciler.h, remediation/node_actions.h and detection/detector.h, where
// they are hit): "after-status" (after any TrainingJob status write), "after-restart-status"
// (after the status write that starts a restart, before any pod is deleted), "after-cordon-owed"
// (after a cordon's owed record took its circuit-breaker slot, before the Node is patched) and
// "after-finding-pending" (a C4D window that found a fault it has not confirmed yet). An unknown
// point or action is an error, so a typo cannot silently test nothing.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "c4/common/error.h"
#include "operator/detection/detector.h"  // the failpoint names: where they are hit
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/reconciler.h"

namespace c4::op {

enum class FailpointAction { kOff, kKill };

class Failpoints {
 public:
  // Parses the C4_FAILPOINTS syntax; kInvalidArgument naming the bad entry.
  static Result<Failpoints> parse(std::string_view spec);

  [[nodiscard]] bool empty() const { return actions_.empty(); }
  [[nodiscard]] FailpointAction action(std::string_view point) const;
  // "name=action;..." in name order (for the start-up log line).
  [[nodiscard]] std::string describe() const;

 private:
  std::map<std::string, FailpointAction, std::less<>> actions_;
};

}  // namespace c4::op
