// Node actions: cordon + taint c4.dev/faulty:NoSchedule with bookkeeping annotations (who, why,
// when, whether the node was already cordoned), the reverse that never uncordons what someone
// else cordoned, Events on the Node, a circuit breaker (maximum fraction of nodes cordoned by us,
// maximum cordons per window) and dry runs that decide but do not act.
//
// Nodes are read from the informer cache and changed by a merge patch that carries the
// resourceVersion it was computed from (a precondition: a concurrent change answers 409 and the
// action is retried from a fresh read). The circuit breaker's state lives in the cluster, in a
// ConfigMap (`state_namespace/state_name`), so its window survives an operator restart or a
// leader failover; checking and recording a cordon there is one optimistic-concurrency update,
// so two workers (or an old and a new leader) can never both take the last slot.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

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
  double max_fraction = 0.1;  // of all nodes, cordoned by us at once (at least 1; 0 = none)
  int max_cordons_per_window = 3;
  Duration window = std::chrono::hours{1};
  bool dry_run = false;  // operator-wide: decide and report, never act
  // The circuit breaker's state (a ConfigMap the operator owns).
  std::string state_namespace = "c4-system";
  std::string state_name = "c4-node-actions";
};

enum class CordonOutcome { kCordoned, kAlreadyOurs, kDryRun, kBreakerOpen };
enum class UncordonOutcome { kUncordoned, kTaintRemovedKeptCordon, kNotOurs, kDryRun };

std::string_view cordonOutcomeName(CordonOutcome o);

class NodeRemediator {
 public:
  // Cache accessors (the shared node informer): one node by name, all nodes.
  using NodeGetter = std::function<std::optional<Json>(const std::string& name)>;
  using NodeLister = std::function<std::vector<Json>()>;

  NodeRemediator(KubeClient& client, Clock& clock, EventRecorder& events, NodeActionConfig config,
                 NodeGetter get_node, NodeLister list_nodes, metrics::Registry* registry);

  // Cordons and taints `node` because of `reason` (an evidence summary). Idempotent. `dry_run`
  // (the job's own) or the operator-wide dry run: Events and outcome only, no change.
  Result<CordonOutcome> cordon(const std::string& node, const std::string& reason,
                               bool dry_run = false);
  // Removes our taint and bookkeeping; uncordons only if the node was not cordoned before us.
  Result<UncordonOutcome> uncordon(const std::string& node);

  // The cordons recorded in the breaker's window (node names), read from the cluster.
  Result<std::vector<std::string>> recentCordons();

 private:
  Result<Json> readNode(const std::string& name, bool fresh);
  // Checks the breaker and records `node` in its state in one conditional update. False (and
  // `why`) when the breaker is open; `record` false only checks.
  Result<bool> takeSlot(const std::string& node, bool record, std::string& why);
  Result<CordonOutcome> patchCordon(const std::string& node_name, const std::string& reason);

  KubeClient& client_;
  Clock& clock_;
  EventRecorder& events_;
  NodeActionConfig config_;
  NodeGetter get_node_;
  NodeLister list_nodes_;
  Logger log_;
  metrics::Family<metrics::Counter>* actions_ = nullptr;
};

}  // namespace c4::op
