// Node actions C4D drives: cordon + taint c4.dev/faulty:NoSchedule with bookkeeping annotations
// (who, why, when, whether the node was already cordoned), the reverse that never uncordons what
// someone else cordoned, Events on the Node, a circuit breaker (maximum fraction of nodes
// cordoned by us, maximum cordons per window) and a dry-run mode that decides but does not act.
// Writes are conditional on the node's resourceVersion (a concurrent change -> kConflict).
#pragma once

#include <deque>
#include <mutex>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "operator/client/kube_client.h"
#include "operator/controller/events.h"

namespace c4::op {

namespace node_annotations {
inline constexpr const char* kCordonedBy = "c4.dev/cordoned-by";
inline constexpr const char* kCordonReason = "c4.dev/cordon-reason";
inline constexpr const char* kCordonTime = "c4.dev/cordon-time";
inline constexpr const char* kWasCordoned = "c4.dev/was-already-cordoned";
}  // namespace node_annotations
inline constexpr const char* kFaultyTaintKey = "c4.dev/faulty";

struct NodeActionConfig {
  std::string identity = "c4-operator";  // written to c4.dev/cordoned-by
  double max_fraction = 0.1;             // of all nodes, cordoned by us at once
  int max_cordons_per_window = 3;
  Duration window = std::chrono::hours{1};
  bool dry_run = false;
};

enum class CordonOutcome { kCordoned, kAlreadyOurs, kDryRun, kBreakerOpen };
enum class UncordonOutcome { kUncordoned, kTaintRemovedKeptCordon, kNotOurs, kDryRun };

std::string_view cordonOutcomeName(CordonOutcome o);

class NodeRemediator {
 public:
  NodeRemediator(KubeClient& client, Clock& clock, EventRecorder& events, NodeActionConfig config,
                 metrics::Registry* registry);

  // Cordons and taints `node` because of `reason` (an evidence summary). Idempotent. A write
  // that loses a race with another writer of the Node (the kubelet's status, another
  // controller) is retried from a fresh read, a few times.
  Result<CordonOutcome> cordon(const std::string& node, const std::string& reason);
  // Removes our taint and bookkeeping; uncordons only if the node was not cordoned before us.
  // Conflicts are retried as for cordon().
  Result<UncordonOutcome> uncordon(const std::string& node);

 private:
  Result<CordonOutcome> cordonOnce(const std::string& node, const std::string& reason);
  Result<UncordonOutcome> uncordonOnce(const std::string& node);
  Result<bool> breakerAllows(std::string& why);

  KubeClient& client_;
  Clock& clock_;
  EventRecorder& events_;
  NodeActionConfig config_;
  Logger log_;
  std::mutex mu_;
  std::deque<MonoTime> recent_;  // cordon times inside the window
  metrics::Family<metrics::Counter>* actions_ = nullptr;
};

}  // namespace c4::op
