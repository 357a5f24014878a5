// The TrainingJob API (c4.dev/v1alpha1): names of labels, annotations, conditions, phases and
// reasons in one place; the parsed spec and its parser (the second line of validation behind the
// CRD's schema and CEL rules in crds/trainingjob.yaml); metav1.Condition bookkeeping; the failure
// policy's matching rules. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "kube/client/kube_client.h"
#include "operator/c4p/mode.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

namespace labels {
inline constexpr const char* kJobName = "c4.dev/job-name";
inline constexpr const char* kReplicaIndex = "c4.dev/replica-index";
inline constexpr const char* kRestartAttempt = "c4.dev/restart-attempt";
}  // namespace labels

namespace annotations {
// Set to "<attempt>" to restart that attempt once; ignored for any other attempt, so a repeated
// request can never cause a second restart. Such a restart does not consume maxRestarts.
inline constexpr const char* kRestartRequest = "c4.dev/restart-request";
inline constexpr const char* kRestartReason = "c4.dev/restart-reason";
}  // namespace annotations

// Condition types (metav1.Condition), in one place.
namespace conditions {
inline constexpr const char* kRunning = "Running";
inline constexpr const char* kRestarting = "Restarting";
// The operator cannot make the job's children real: a terminal API error creating one (invalid,
// forbidden, over quota) or a name taken by an object this job does not control.
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

// Values of spec.managedBy this operator knows: itself (the default) and Kueue's MultiKueue,
// which mirrors jobs to worker clusters and leaves them alone in the manager cluster.
inline constexpr const char* kControllerName = "c4.dev/trainingjob-controller";
inline constexpr const char* kMultiKueueManager = "kueue.x-k8s.io/multikueue";
inline constexpr std::size_t kMaxFaults = 16;
inline constexpr std::size_t kMaxAvoidNodes = 16;  // status.avoidNodes
// An attempt that ran this long before it failed resets the exponential restart backoff
// (the kubelet resets CrashLoopBackOff after the same time).
inline constexpr std::int64_t kBackoffResetSeconds = 600;

// What the failure policy does with a failed pod.
enum class FailureAction {
  kFailJob,  // fail the whole job at once
  kIgnore,   // restart, not counted against maxRestarts (counted against the infrastructure cap)
  kRestart,  // restart, counted against maxRestarts
};
std::string_view failureActionName(FailureAction a);

// One rule of spec.faultTolerance.podFailurePolicy (batch Job's podFailurePolicy, with the
// actions of a whole-job restart). A rule matches when every criterion it names matches.
struct ExitCodeRule {
  std::string container_name;  // "" = any container
  bool in = true;              // operator In (true) or NotIn
  std::vector<std::int64_t> values;
};
struct PodConditionRule {
  std::string type;
  std::string status = "True";
};
struct FailurePolicyRule {
  FailureAction action = FailureAction::kRestart;
  std::optional<ExitCodeRule> on_exit_codes;
  std::vector<PodConditionRule> on_pod_conditions;
};

struct FaultTolerance {
  std::int64_t max_restarts = 3;                  // restarts counted against the user's budget
  std::int64_t max_infrastructure_restarts = 10;  // restarts not counted: the loop breaker
  std::int64_t restart_backoff_seconds = 10;      // first delay; doubles per consecutive failure
  std::int64_t max_restart_backoff_seconds = 300;
  // A counted crash identical to the previous N-1 counted crashes, on at least two nodes, fails
  // the job (RepeatedIdenticalCrash) instead of spending more of maxRestarts. 0: off; otherwise
  // 2..kMaxFaults (the history is status.faults).
  std::int64_t max_identical_crashes = 3;
  bool cordon_faulty_nodes = true;
  bool dry_run = false;
  // C4D thresholds (docs/c4d.md): ops waiting this long with no byte moving are a hang; a
  // connection slower than the job's median / slow_factor is slow; a finding must persist for
  // window_seconds analysis windows (1 s each) before C4 acts.
  std::int64_t hang_seconds = 10;
  double slow_factor = 4.0;
  // ... and, in a job whose rates are quieter, one below the reference times 1 - this many
  // standard deviations of the job's own noise (at most 0.6x); 0: slow_factor alone.
  double slow_noise_sigmas = 4.0;
  std::int64_t window_seconds = 2;
  std::vector<FailurePolicyRule> pod_failure_policy;
};

// spec.numProcPerNode: a number, or "auto" (the trainer container's nvidia.com/gpu limit).
struct ProcsPerNode {
  bool automatic = false;
  std::int64_t count = 1;
};

// spec.telemetry.source: where C4D's per-rank telemetry comes from. Profiler (the default) is
// C4's NCCL profiler plugin, which sees every transport NCCL runs (InfiniBand/RoCE, NVLink,
// sockets) without touching the data path; NetPlugin is C4's net plugin, whose TCP transport then
// carries the job's traffic.
enum class TelemetrySource { kProfiler, kNetPlugin };
std::string_view telemetrySourceName(TelemetrySource source);

struct TrainingJobSpec {
  std::int64_t replicas = 1;
  ProcsPerNode num_proc_per_node;
  Json pod_template;  // PodTemplateSpec
  bool suspend = false;
  std::string managed_by;
  std::string checkpoint_dir;
  FaultTolerance fault_tolerance;
  c4p::Mode traffic_mode = c4p::Mode::kAdvisory;  // spec.trafficPlanning.mode
  std::int64_t subflows_per_connection = 4;
  std::int64_t spare_subflows = 0;  // spec.trafficPlanning.spareSubflows
  TelemetrySource telemetry_source = TelemetrySource::kProfiler;  // spec.telemetry.source
};

// Whether the operator points the job's NCCL at C4's net plugin (NCCL_NET_PLUGIN): with telemetry
// source NetPlugin, or with traffic planning Enforce (only C4's transport can steer paths).
// Otherwise NCCL keeps its own transports, or the net plugin the user's template names.
bool usesC4NetPlugin(const TrainingJobSpec& spec);
// Whether the operator loads C4's profiler plugin (NCCL_PROFILER_PLUGIN): telemetry source
// Profiler, except under Enforce, where C4's net plugin carries the traffic and reports it (one
// reporter per rank: two would report the same transfers twice).
bool usesC4Profiler(const TrainingJobSpec& spec);

// Parses and checks the job (spec, and the name's length against the replica count). Errors are
// kInvalidArgument naming the field, e.g. "spec.faultTolerance.slowFactor must be a number".
Result<TrainingJobSpec> parseTrainingJobSpec(const Json& job);

// Processes (ranks) per pod: the number, or for "auto" the nvidia.com/gpu limit of the first
// container that has one (1 when none has).
std::int64_t procsPerPod(const TrainingJobSpec& spec);

// The C4_* variables the operator sets in trainer containers (identity, paths, the checkpoint
// contract, the plan's subflow count and wait). Any other C4_* name (the plugins' tuning, e.g.
// C4_SOCKET_IFNAME, C4_TCP_USER_TIMEOUT_MS, C4_REPORT_INTERVAL_MS) is the user's to set. The CRD's
// env rule lists the same names (crds/trainingjob.yaml).
inline constexpr std::string_view kOperatorC4Env[] = {
    "C4_AGENT_SOCKET", "C4_CHECKPOINT_DIR",  "C4_JOB",         "C4_NAMESPACE",    "C4_NODE_NAME",
    "C4_NODE_RANK",    "C4_NPROC_PER_NODE",  "C4_PLAN_FILE",   "C4_PLAN_WAIT_MS", "C4_POD_NAME",
    "C4_RANK",         "C4_RESTART_ATTEMPT", "C4_RESUME_STEP", "C4_SUBFLOWS"};

// Environment names the operator sets in trainer containers of this job (users may not set them):
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, every PET_* name, the kOperatorC4Env names,
// NCCL_NET_PLUGIN when usesC4NetPlugin and NCCL_PROFILER_PLUGIN when usesC4Profiler.
bool isReservedEnvName(std::string_view name, const TrainingJobSpec& spec);
// The longest job name whose pods `<job>-<replicas-1>` are still valid hostnames (63).
std::size_t maxJobNameLength(std::int64_t replicas);

// metav1.Condition bookkeeping: sets (type, status, reason, message, observedGeneration);
// lastTransitionTime changes only when status changes. Returns true if anything changed.
bool setCondition(Json& status, const std::string& type, const std::string& condition_status,
                  const std::string& reason, const std::string& message,
                  std::int64_t observed_generation, WallTime now);
// The condition of that type, or null.
const Json* findCondition(const Json& status, const std::string& type);
bool isConditionTrue(const Json& status, const std::string& type);

// An integer label (c4.dev/replica-index, c4.dev/restart-attempt); nullopt when absent or not
// an integer.
std::optional<std::int64_t> intLabelOf(const Json& object, const char* key);

// parseRfc3339 is c4/common/clock.h's.

// Index sets in batch Job's completedIndexes format: "0-3,5,7-9" (ascending, merged ranges).
std::string formatIndexSet(const std::vector<std::int64_t>& sorted_unique);
// nullopt when malformed or out of [0, limit).
std::optional<std::vector<std::int64_t>> parseIndexSet(const std::string& text, std::int64_t limit);

}  // namespace c4::op
