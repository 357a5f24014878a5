// The TrainingJob status (c4.dev/v1alpha1, crds/trainingjob.yaml) as one typed struct with one
// codec. Every room that reads or writes a job's status goes through it: the planner computes
// it, the reconciler writes it (/status, the whole object), the traffic-plan controller patches
// status.plan, the detector and the job metrics read it.
//
// Fields keep JSON presence: an optional field that is absent stays absent when the status is
// written back (statuses written by older operators lack some), and the members of an object the
// operator does not know (a newer CRD's fields) are kept in `unknown` and written back as they
// came. Times are RFC 3339 strings as they came (parseRfc3339 reads them), so an unchanged status
// encodes to the same JSON.
//
// Decoding is strict on types and never throws: a field of the wrong type (or an unknown
// status.plan.mode) is kInvalidArgument naming the field, e.g.
// "status.faults[2].rank must be an integer". A null field counts as absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "kube/client/kube_client.h"
#include "operator/c4p/mode.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// metav1.Condition.
struct Condition {
  std::string type;
  std::string status;  // True | False | Unknown
  std::optional<std::int64_t> observed_generation;
  std::string last_transition_time;
  std::string reason;
  std::string message;
  Json unknown = Json::object();
  friend bool operator==(const Condition&, const Condition&) = default;
};

// status.lastCheckpoint: the newest checkpoint every rank of one attempt reported.
struct CheckpointStatus {
  std::optional<std::int64_t> step;
  std::optional<std::string> path;
  std::optional<std::string> time;
  Json unknown = Json::object();
  friend bool operator==(const CheckpointStatus&, const CheckpointStatus&) = default;
};

// One entry of status.faults.
struct FaultRecord {
  std::optional<std::string> time;
  std::optional<std::string> fault_class;  // "class": crash | disruption | requested | C4D's
  std::optional<std::int64_t> attempt;
  std::optional<std::string> pod;
  std::optional<std::string> node;
  std::optional<std::int64_t> rank;
  std::optional<std::int64_t> exit_code;  // "exitCode": of the deciding pod's failed container
  std::optional<std::string> link;
  std::optional<std::string> summary;
  std::optional<std::string> action;  // restart | fail
  std::optional<bool> counted;
  std::optional<double> detection_seconds;
  std::optional<std::int64_t> recompute_seconds;
  std::optional<std::int64_t> restart_seconds;
  Json unknown = Json::object();
  friend bool operator==(const FaultRecord&, const FaultRecord&) = default;
};

// status.goodput.
struct GoodputStatus {
  std::optional<std::int64_t> productive_seconds;
  std::optional<std::int64_t> lost_seconds;
  std::optional<std::string> last_update_time;
  Json unknown = Json::object();
  friend bool operator==(const GoodputStatus&, const GoodputStatus&) = default;
};

// status.plan: the traffic plan C4P wrote last (the traffic-plan controller's).
struct PlanStatus {
  std::optional<std::int64_t> version;
  std::optional<c4p::Mode> mode;
  std::optional<std::string> max_link_load;  // three decimals
  std::optional<std::string> reason;
  std::optional<std::string> time;
  // From the ranks' reports (the plan version each rank's plugin applied, in its latest report):
  // the oldest version among them, how many carry the version written, how many report.
  std::optional<std::int64_t> applied_version;
  std::optional<std::int64_t> ranks_applied;
  std::optional<std::int64_t> ranks_reporting;
  Json unknown = Json::object();
  friend bool operator==(const PlanStatus&, const PlanStatus&) = default;
};

struct TrainingJobStatus {
  std::optional<std::string> phase;  // phases::
  std::optional<std::string> phase_since;
  std::optional<std::int64_t> observed_generation;
  std::optional<std::int64_t> restarts;
  std::optional<std::int64_t> attempt;
  std::optional<std::int64_t> restarts_count_towards_max;
  std::optional<std::int64_t> infrastructure_restarts;
  std::optional<std::int64_t> consecutive_failures;
  std::optional<std::string> next_attempt_time;
  std::optional<std::string> started_indexes;  // formatIndexSet
  std::optional<std::int64_t> active;
  std::optional<std::int64_t> ready;
  std::optional<std::int64_t> succeeded;
  std::optional<std::int64_t> failed;
  std::optional<std::string> last_restart_time;
  std::optional<std::string> last_fault;
  std::optional<CheckpointStatus> last_checkpoint;
  std::optional<PlanStatus> plan;
  std::vector<std::string> avoid_nodes;  // written only when not empty
  std::vector<FaultRecord> faults;       // written only when not empty
  std::optional<GoodputStatus> goodput;
  std::vector<Condition> conditions;  // written only when not empty
  Json unknown = Json::object();      // members of status this struct does not know
  friend bool operator==(const TrainingJobStatus&, const TrainingJobStatus&) = default;
};

// The status object itself (null counts as an empty status).
Result<TrainingJobStatus> decodeTrainingJobStatus(const Json& status);
// The status of a TrainingJob object (absent: an empty status).
Result<TrainingJobStatus> parseTrainingJobStatus(const Json& job);
// The status object; absent optionals and empty lists are left out, unknown members kept.
Json trainingJobStatusJson(const TrainingJobStatus& status);

// metav1.Condition bookkeeping on status.conditions: sets (type, status, reason, message,
// observedGeneration); lastTransitionTime changes only when status changes; the message is cut
// to 32768 bytes. Returns true if anything changed.
bool setCondition(TrainingJobStatus& status, const std::string& type,
                  const std::string& condition_status, const std::string& reason,
                  const std::string& message, std::int64_t observed_generation, WallTime now);
// The condition of that type, or null.
const Condition* findCondition(const TrainingJobStatus& status, const std::string& type);
bool isConditionTrue(const TrainingJobStatus& status, const std::string& type);

}  // namespace c4::op
