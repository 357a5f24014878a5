// The pure part of the TrainingJob reconciler: from what the caches show (the job, its pods, the
// nodes they run on), what the reconciler remembers (pods its informer saw come and go, a problem
// with the job's children) and the time, `planReconcile` computes the status to write and the
// actions to take. No I/O, so the restart state machine, the failure policy and the condition
// bookkeeping are tested table-driven on simulated time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/api.h"
#include "operator/trainingjob/children.h"
#include "operator/trainingjob/status.h"

namespace c4::op {

// Node facts the planner needs (from the node cache).
struct NodeFacts {
  bool exists = false;
  bool ready = true;
  bool unschedulable = false;
  bool faulty_taint = false;
  friend bool operator==(const NodeFacts&, const NodeFacts&) = default;
};
// Facts of a Node object (Ready condition, spec.unschedulable, the c4.dev/faulty taint).
NodeFacts nodeFactsOf(const Json& node);
using NodeLookup = std::function<NodeFacts(const std::string& node_name)>;

struct PodDeletion {
  std::string name;
  std::string uid;
  bool force = false;  // grace period 0: pod on a NotReady/cordoned/faulty node or already dead
  std::string why;
};

struct EventSpec {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

// A node with node-level evidence of a fault (it went NotReady under the job): cordon and taint
// it through the circuit breaker. dry_run: the job asked to report only.
struct NodeCordon {
  std::string node;
  std::string reason;
  bool dry_run = false;
};

// A problem making the job's children real, found by the reconciler.
struct ChildProblem {
  std::string reason;        // FailedCreate | NameConflict
  std::string message;       // names the object and the API server's message
  bool blocks_pods = false;  // no pod may be created (e.g. the Service is someone else's)
};

// A checkpoint the job's ranks reported (the report store: the newest step every rank of an
// attempt wrote).
struct ReportedCheckpointFact {
  std::int64_t step = 0;
  std::string path;
  WallTime time{};
};

// A fault the C4D analyser confirmed in the job's current attempt (operator/detection): the
// planner restarts the job from its checkpoint, away from the culprit nodes, and cordons those
// the evidence names. Not counted against maxRestarts (C4 diagnosed it); counted against
// maxInfrastructureRestarts, the loop breaker. Verdicts confirmed together (compound faults)
// join one diagnosis: the first gives class, key and rank; every culprit's nodes are avoided.
struct DiagnosedFault {
  std::int64_t attempt = 0;
  std::string fault_class;         // crash | commHang | nonCommHang | commSlow | nonCommSlow
  std::string key;                 // the first verdict's identity ("commHang/link/node-1<->node-2")
  std::vector<std::string> keys;   // every joined verdict's identity, the first first
  std::string summary;             // one line with the evidence (Events, status.faults)
  std::vector<std::string> nodes;  // culprit nodes: the next attempt avoids them
  // Of `nodes`, those the evidence names: cordoned and tainted (if the job allows it).
  std::vector<std::string> cordon_nodes;
  std::int64_t rank = -1;
  double detection_seconds = 0;  // first seen -> confirmed
  friend bool operator==(const DiagnosedFault&, const DiagnosedFault&) = default;
};

// What the reconciler knows that the job's objects do not (yet) show.
struct PlanContext {
  PodSettings settings;
  // Goodput is accumulated into status at least this often while the job runs or restarts.
  Duration goodput_period = std::chrono::seconds{60};
  // Replica indexes of the current attempt whose pods the informer has reported (so a pod that
  // is gone before the status recorded it is still known to have started).
  std::int64_t observed_attempt = -1;
  std::set<std::int64_t> observed_indexes;
  // Pods of `observed_attempt` the informer saw deleted: index -> the pod as last seen.
  std::map<std::int64_t, Json> gone_pods;
  std::optional<ChildProblem> child_problem;
  // Written into status.lastCheckpoint when its step is above the recorded one (the recorded
  // checkpoint never moves back; a user who clears it lets the next report set it).
  std::optional<ReportedCheckpointFact> reported_checkpoint;
  // A confirmed C4D verdict that calls for a restart (ignored unless it is for the current
  // attempt, and when the job's faultTolerance.dryRun is set).
  std::optional<DiagnosedFault> diagnosis;
};

struct JobPlan {
  TrainingJobStatus status;  // the complete desired status
  bool status_changed = false;
  bool ensure_children = false;  // the headless Service
  std::vector<Json> pods_to_create;
  std::vector<PodDeletion> pods_to_delete;
  std::vector<EventSpec> events;
  std::vector<NodeCordon> cordons;  // before the status write: idempotent, so crash-safe
  std::optional<Duration> requeue_after;
  bool restart_started = false;  // this plan starts a restart (status must land before deletes)
};

// Computes what to do. `pods` are the pods labelled with the job's name (the planner ignores
// those another object controls). Deterministic for the same inputs. A status that does not
// decode (parseTrainingJobStatus) gets a Warning Event `InvalidStatus` and nothing else: no
// status write, no pod touched.
JobPlan planReconcile(const Json& job, const std::vector<Json>& pods, const NodeLookup& nodes,
                      WallTime now, const PlanContext& context);

// How a failed, deleted or vanished pod of the current attempt is treated (exposed for tests).
struct FailureVerdict {
  FailureAction action = FailureAction::kRestart;
  bool infrastructure = false;  // a disruption, not the trainer's fault
  std::string why;              // "exit code 137", "DisruptionTarget: EvictionByEvictionAPI", ...
};
// `pod` is the pod as last seen (null when it vanished unseen); `deleted`: it is being deleted or
// is gone; `node`: facts of the node it ran on.
FailureVerdict classifyFailure(const Json* pod, bool deleted, const NodeFacts& node,
                               const std::vector<FailurePolicyRule>& rules);

}  // namespace c4::op
