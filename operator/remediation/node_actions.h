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
//
// A node's fault history (annotation c4.dev/fault-history: the faults C4D named the node in,
// across jobs and operator restarts; the repeat-offender score) is written here too, the same
// way: the entry is appended to the history of the cached copy and patched with that copy's
// resourceVersion, so a concurrent writer (another verdict naming the node in the same window,
// another job) makes the patch fail with 409 and the entry is appended again to a fresh read.
// This room is the only writer of a Node's annotations; C4D asks it (recordFault).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"
#include "kube/controller/events.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

namespace node_annotations {
inline constexpr const char* kCordonedBy = "c4.dev/cordoned-by";
inline constexpr const char* kCordonReason = "c4.dev/cordon-reason";
inline constexpr const char* kCordonTime = "c4.dev/cordon-time";
inline constexpr const char* kWasCordoned = "c4.dev/was-already-cordoned";
}  // namespace node_annotations
inline constexpr const char* kFaultyTaintKey = "c4.dev/faulty";
inline constexpr const char* kFaultHistoryAnnotation = "c4.dev/fault-history";

// One entry of a node's fault history.
struct NodeFaultRecord {
  WallTime time{};
  std::string fault_class;
  std::string job;  // "<ns>/<name>"
};
// The entries of a Node's c4.dev/fault-history annotation, oldest first. Never throws: a value
// that is not a JSON array yields none, malformed entries (not an object, a field missing or of
// another type, a time that is not RFC 3339) are skipped. `problem`, when given, is set to what
// is wrong with the first malformed part ("" when nothing is).
std::vector<NodeFaultRecord> faultHistoryOf(const Json& node, std::string* problem = nullptr);
// The annotation value with `added` appended, the oldest dropped beyond `max_entries`.
std::string appendFaultHistory(const Json& node, const NodeFaultRecord& added,
                               std::size_t max_entries);

struct NodeActionConfig {
  std::string identity = "c4-operator";  // written to c4.dev/cordoned-by
  double max_fraction = 0.1;  // of all nodes, cordoned by us at once (at least 1; 0 = none)
  int max_cordons_per_window = 3;
  Duration window = std::chrono::hours{1};
  bool dry_run = false;  // operator-wide: decide and report, never act
  // The circuit breaker's state (a ConfigMap the operator owns).
  std::string state_namespace = "c4-system";
  std::string state_name = "c4-node-actions";
  std::size_t max_fault_history = 10;  // entries kept in a node's c4.dev/fault-history
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

  // Appends `record` to the node's c4.dev/fault-history (bounded by max_fault_history) with
  // optimistic concurrency (see the top of this header). The history makes a node a repeat
  // offender, so it is an action: nothing is written in an operator-wide dry run (and C4D asks
  // only for verdicts it acts on). kNotFound when the node does not exist.
  Status recordFault(const std::string& node, const NodeFaultRecord& record);

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
