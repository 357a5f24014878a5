// The TrainingJob API (DESIGN.md §3.1) and the pure part of its reconciler: from what the cache
// shows (job, its pods, the nodes they run on) and the time, `planReconcile` computes the status
// to write and the child actions to take. No I/O here, so the restart state machine and the
// condition bookkeeping are tested table-driven on simulated time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "operator/client/kube_client.h"

namespace c4::op {

namespace labels {
inline constexpr const char* kJobName = "c4.dev/job-name";
inline constexpr const char* kReplicaIndex = "c4.dev/replica-index";
inline constexpr const char* kRestartAttempt = "c4.dev/restart-attempt";
}  // namespace labels

namespace annotations {
// Set by C4D (or a human) to "<attempt>" to restart that attempt once; ignored for any other
// attempt, so a repeated request can never cause a second restart.
inline constexpr const char* kRestartRequest = "c4.dev/restart-request";
inline constexpr const char* kRestartReason = "c4.dev/restart-reason";
}  // namespace annotations

// Condition types and reasons (UpperCamelCase), in one place.
namespace conditions {
inline constexpr const char* kRunning = "Running";
inline constexpr const char* kRestarting = "Restarting";
inline constexpr const char* kDegraded = "Degraded";
inline constexpr const char* kSucceeded = "Succeeded";
inline constexpr const char* kFailed = "Failed";
inline constexpr const char* kSuspended = "Suspended";
}  // namespace conditions

namespace phases {
inline constexpr const char* kPending = "Pending";
inline constexpr const char* kRunning = "Running";
inline constexpr const char* kRestarting = "Restarting";
inline constexpr const char* kSucceeded = "Succeeded";
inline constexpr const char* kFailed = "Failed";
inline constexpr const char* kSuspended = "Suspended";
}  // namespace phases

inline constexpr const char* kControllerName = "c4.dev/trainingjob-controller";
inline constexpr std::size_t kMaxFaults = 16;

// Node-side paths and ports the operator injects (operator configuration).
struct PodSettings {
  std::string agent_socket_dir = "/var/run/c4";  // hostPath on the node, same path in the pod
  std::string agent_socket_name = "agent.sock";
  std::string plugin_host_dir = "/opt/c4/lib";  // where the DaemonSet installs the plugin
  std::string plugin_mount_dir = "/opt/c4/lib";
  std::string plugin_library = "libnccl-net-c4.so";
  std::string plan_mount_dir = "/etc/c4/plan";
  int master_port = 29500;
};

struct FaultTolerance {
  std::int64_t max_restarts = 3;
  std::int64_t restart_backoff_seconds = 10;
  bool cordon_faulty_nodes = true;
  bool dry_run = false;
  std::int64_t hang_seconds = 60;
  double slow_factor = 3.0;
  std::int64_t window_seconds = 10;
};

struct TrainingJobSpec {
  std::int64_t replicas = 1;
  Json pod_template;  // PodTemplateSpec
  bool suspend = false;
  std::string managed_by;
  std::string checkpoint_dir;
  FaultTolerance fault_tolerance;
  std::string traffic_mode = "Advisory";
  std::int64_t subflows_per_connection = 4;
};

// Parses and checks the spec (the CRD schema checks it too; this is the second line).
Result<TrainingJobSpec> parseTrainingJobSpec(const Json& job);

// metav1.Condition bookkeeping: sets (type, status, reason, message, observedGeneration);
// lastTransitionTime changes only when status changes. Returns true if anything changed.
bool setCondition(Json& status, const std::string& type, const std::string& condition_status,
                  const std::string& reason, const std::string& message,
                  std::int64_t observed_generation, WallTime now);
// The condition of that type, or null.
const Json* findCondition(const Json& status, const std::string& type);
bool isConditionTrue(const Json& status, const std::string& type);

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

struct JobPlan {
  Json status;  // the complete desired status
  bool status_changed = false;
  bool ensure_children = false;  // headless Service and plan ConfigMap
  std::vector<Json> pods_to_create;
  std::vector<PodDeletion> pods_to_delete;
  std::vector<EventSpec> events;
  std::optional<Duration> requeue_after;
  bool restart_started = false;  // this plan starts a restart (status must land before deletes)
};

// Computes what to do. `pods` are the pods labelled with the job's name (the planner ignores
// those another object controls). Deterministic for the same inputs.
JobPlan planReconcile(const Json& job, const std::vector<Json>& pods, const NodeLookup& nodes,
                      WallTime now, const PodSettings& settings);

// Children (exposed for tests).
Json buildPod(const Json& job, const TrainingJobSpec& spec, std::int64_t index,
              std::int64_t attempt, const std::optional<std::int64_t>& resume_step,
              const PodSettings& settings);
Json buildHeadlessService(const Json& job, const PodSettings& settings);
Json buildPlanConfigMap(const Json& job, const TrainingJobSpec& spec);
Json ownerReference(const Json& job);
// True if `child` has a controller ownerReference naming `job`'s uid.
bool isControlledBy(const Json& child, const Json& job);

}  // namespace c4::op
