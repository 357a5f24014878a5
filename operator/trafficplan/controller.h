// The traffic-plan controller: C4P in the operator. It owns one c4p::Planner for the cluster's
// Fabric and keeps it in step with the cluster, then writes what changed:
//
//   Fabric   the cluster-scoped c4.dev/v1alpha1 Fabric (the one named by `fabric_name`, or the
//            only one). A description the parser refuses (or one that would drop a plane or path
//            in use) gets a Warning Event `FabricRejected` and status condition Accepted=False;
//            the planner and every running plan stay as they were. An accepted change re-weights
//            the running plans (paths and ports stay). Its /status carries link health and the
//            maximum link load (c4p::renderFabricStatus) and condition Accepted.
//   Nodes    labels c4.dev/leaf and c4.dev/plane place a node; a node without them cannot carry a
//            planned job (the job gets a Warning Event `PlanFailed`).
//   Jobs     every TrainingJob with spec.trafficPlanning.mode Advisory or Enforce, not finished,
//            whose pods of the current attempt (status.attempt) are all scheduled: placement =
//            pod index → spec.nodeName. It is planned when first placed and whenever the
//            placement (or subflow count) changes, re-rendered when only the mode changes, and
//            removed from the planner when it finishes, is deleted or turns Off.
//   Links    telemetry: every period the per-subflow byte counters of the Enforce jobs' receiving
//            ranks (ingest ReportStore, connectionDeltas) go through the LinkMonitor; a confirmed
//            dead link direction becomes c4p setLinkState(…, 0) — new weights only, so the plugin
//            applies them to live connections without reconnecting. C4D kReplan verdicts (a slow
//            connection between two nodes) are hints to the monitor. A telemetry state is lifted
//            after `link_hold` (the weights return; a link still dead is found again).
//
// Output, for every job in a PlanOutcome's `changed`: ConfigMap `<job>-c4-plan` (key plan.json,
// c4p::makePlanDocument in the job's mode; annotations c4.dev/plan-version and
// c4.dev/plan-reason), created with the job's ownerReference and label c4.dev/job-name
// (buildPlanConfigMap) when it does not exist yet; the job's status.plan {version, mode,
// maxLinkLoad, reason, time} through /status (merge patch of that field alone, TrainingJobStatus's
// codec); a Normal Event `PlanUpdated` naming the version and why (new placement, link failed,
// link restored, fabric changed, mode changed). Versions increase by one per written document; a
// document equal to the one in the ConfigMap is not written again.
//
// This controller is the single writer of the plan ConfigMap: the TrainingJob controller only
// names it in its pods' optional volume (trainingjob/children.h, planConfigMapName), and nothing
// else creates or updates it. Without --traffic-planning no plan ConfigMap exists; the pods then
// spread by C4_SUBFLOWS.
//
// Repair (level-triggered, as controller-runtime's owners): every full sync compares each
// written job's ConfigMap, as the cache holds it (`TrafficPlanSources::plan_config_map`, an
// informer on ConfigMaps with label c4.dev/job-name whose events kick the controller), with the
// document last written. When it differs (plan.json edited, missing or garbage, the label
// c4.dev/job-name gone, the object deleted) and a read from the API server confirms it (the cache
// may not show our own last write yet), the job's current plan is written again as the next
// version (above the one found, if any) with reason "repaired (...)", status.plan follows, and
// the job gets a Warning Event `PlanRepaired` saying what was found. A ConfigMap of that name
// that the job does not control is not taken over: Warning Event `PlanConflict`, once per
// object.
//
// Restart: the planner's state is rebuilt from the cluster (jobs in key order). The first time a
// job is planned the ConfigMap is read; when the document it holds equals the new one at its
// version, nothing is written and that version is continued. Telemetry link states are read back
// from the Fabric's status (source telemetry).
//
// Writes go through the client it is given (the manager's fenced client: leader only).
//
// Shape: a reconciler behind a rate-limited WorkQueue, as every controller of the operator, with
// two cluster-wide keys instead of one key per job: kSyncKey runs sync() and is re-queued after
// `period`; kTelemetryKey runs syncTelemetryOnly() and is re-queued after `telemetry_period`.
// kick() (the informers' events, a C4D hint) is add(kSyncKey), deduplicated by the queue. Why
// not a key per job: there is one planner for the cluster's Fabric and the jobs share its links —
// placing, re-weighting or failing a link changes other jobs' plans (the edge colouring and the
// loads are cluster-wide), and a Fabric change re-weights every plan — so a pass is over the
// whole cluster, in key order, as it was planned. One worker: the planner is not thread-safe
// and two passes must not interleave. sync() may also be called directly (tests), never
// concurrently with the worker.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/cache/shared_informers.h"
#include "kube/client/kube_client.h"
#include "kube/controller/events.h"
#include "kube/controller/work_queue.h"
#include "operator/c4p/plan_document.h"
#include "operator/c4p/planner.h"
#include "operator/ingest/report_store.h"
#include "operator/trafficplan/link_monitor.h"
#include "operator/trainingjob/status.h"

namespace c4::op::trafficplan {
using namespace c4::kube;  // the operator is written against the Kubernetes library

inline constexpr const char* kPlanVersionAnnotation = "c4.dev/plan-version";
inline constexpr const char* kPlanReasonAnnotation = "c4.dev/plan-reason";
inline constexpr const char* kAcceptedCondition = "Accepted";

// c4.dev/v1alpha1 fabrics (cluster-scoped).
const ResourceType& fabrics();

// ConfigMap `<job>-c4-plan` holding `doc` (key plan.json), with the version and reason
// annotations, the label c4.dev/job-name and the job's controller ownerReference: what this
// controller creates when the job has none yet.
Json buildPlanConfigMap(const Json& job, const c4p::PlanDocument& doc, const std::string& reason);

struct TrafficPlanConfig {
  std::string fabric_name;  // "" = the only Fabric of the cluster
  Duration period = std::chrono::seconds{1};
  // Between full syncs, the telemetry alone (link evidence from new reports, plan writes, the
  // Fabric's status) runs this often, so a dead link is acted on soon after the report that
  // confirms it arrives. Zero: only with the full sync.
  Duration telemetry_period = std::chrono::milliseconds{250};
  Duration link_hold = std::chrono::minutes{5};  // how long a telemetry link state lasts
  LinkMonitorOptions monitor;
  c4p::PlannerOptions planner;
};

// What the controller reads; the informers' stores in the operator, plain vectors in tests.
struct TrafficPlanSources {
  std::function<std::vector<Json>()> fabrics;
  std::function<std::vector<Json>()> nodes;
  std::function<std::vector<Json>()> jobs;
  // The pods of one job (label c4.dev/job-name), every attempt.
  std::function<std::vector<Json>(const std::string& ns, const std::string& job)> pods;
  // A ConfigMap as the cache holds it (nullopt: not there). Unset: every sync reads each plan
  // ConfigMap from the API server instead.
  std::function<std::optional<Json>(const std::string& ns, const std::string& name)>
      plan_config_map;
};

// The placement of a job's current attempt (status.attempt) from its pods: replica index →
// spec.nodeName. nullopt while a pod of that attempt is missing, unscheduled or terminating.
std::optional<std::vector<std::string>> jobPlacement(const Json& job, std::int64_t replicas,
                                                     const std::vector<Json>& pods);

// The evidence of a job's reports for the link monitor: every receiving connection of a
// cross-leaf pair of `pairs` (the plan document of `plan_version`, as written: the weights the
// plugins run, not the planner's newer ones) with a new report since `seen` (rank, connection id
// → report seq last used). The receiver's per-subflow counters are what arrived (a sender counts
// bytes written into its socket, which a dead path's socket buffer still accepts); subflow i of
// the receiver is the sender's subflow i (the hello's index), so its path and weight are the plan
// pair's subflow i. Windows in which the receiving rank reported another plan version are
// skipped, and so are windows that began before the sending rank's first report of the version
// (when its reports are in the store): a plugin applies a new version on its own, so the sender
// may still have run the old weights; the lag counts from the later of the two.
// A window in which nothing arrived on a connection counts as stalled (ConnectionDelta::stalled)
// when an operation has waited at least this long at its end: a receive posted during a compute
// phase waits too, but its subflows are level, so the lag rule finds nothing there.
inline constexpr std::uint64_t kStalledWaitUs = report::kStalledWaitUs;

std::vector<ConnectionDelta> connectionDeltas(
    const ingest::JobRecord& record, const std::vector<c4p::PlannedPair>& pairs,
    std::int64_t plan_version,
    std::map<std::pair<std::int32_t, std::uint64_t>, std::uint64_t>& seen);

class TrafficPlanController {
 public:
  // `store` may be null (no telemetry). `client` writes (the fenced client), `events` records
  // Events. Everything must outlive the controller.
  TrafficPlanController(KubeClient& client, Clock& clock, EventRecorder& events,
                        TrafficPlanSources sources, ingest::ReportStore* store,
                        TrafficPlanConfig config, metrics::Registry& registry);
  ~TrafficPlanController();
  TrafficPlanController(const TrafficPlanController&) = delete;
  TrafficPlanController& operator=(const TrafficPlanController&) = delete;

  // Sources from the manager's shared informers (Fabrics, Nodes, TrainingJobs, and pods and
  // ConfigMaps with label c4.dev/job-name in `watch_namespace`); their events kick the
  // controller. Call before the informers start.
  static std::unique_ptr<TrafficPlanController> fromInformers(
      KubeClient& client, Clock& clock, EventRecorder& events, SharedInformers& informers,
      const std::string& watch_namespace, ingest::ReportStore* store, TrafficPlanConfig config,
      metrics::Registry& registry);

  // The work queue's keys (see the top of this header).
  static constexpr const char* kSyncKey = "sync";
  static constexpr const char* kTelemetryKey = "telemetry";

  // Queues kSyncKey (and kTelemetryKey after `telemetry_period`) and starts the worker.
  void start();
  void stop();  // idempotent; shuts the queue down (no restart)
  // Asks for a full sync now (thread-safe): add(kSyncKey).
  void kick();
  // One reconcile of a key (the worker calls it): the pass and when to run it again.
  void reconcile(const std::string& key);
  // A C4D kReplan verdict: the connection between `node` and `peer_node` of job `key` is slow
  // (thread-safe; either direction is taken as a hint).
  void onSlowConnection(const std::string& key, const std::string& node,
                        const std::string& peer_node);

  // Why the connections between `node` and `peer_node` (either direction) of job `key` may hang
  // or slow down without a fault at either end, as of the last sync: a link direction on a
  // planned path of the pair (any subflow, whatever its weight: bytes queued before a re-plan
  // still use it) that the planner holds failed or degraded (description or telemetry) or that
  // the link monitor suspects. Only Enforce jobs (their flows follow the plan). Thread-safe: C4D
  // calls it (through the manager's TrafficPlanPeer adapter).
  [[nodiscard]] std::optional<std::string> explainConnection(const std::string& key,
                                                             const std::string& node,
                                                             const std::string& peer_node) const;

  // One pass: fabric, nodes, jobs, telemetry, Fabric status.
  void sync();
  // The telemetry part of sync() alone (new reports, writes, Fabric status), against the fabric,
  // nodes and jobs of the last sync().
  void syncTelemetryOnly();

  // Introspection (not thread-safe against the thread; tests call it between syncs).
  [[nodiscard]] const c4p::Planner* planner() const { return planner_.get(); }
  [[nodiscard]] std::optional<std::int64_t> planVersion(const std::string& key) const;

 private:
  struct JobState {
    std::string uid;
    c4p::JobPlacement placement;
    c4p::Mode mode = c4p::Mode::kAdvisory;
    std::optional<std::int64_t> version;  // last version written or adopted
    std::optional<c4p::PlanDocument> written;
    Json object;  // the TrainingJob, for Events and ownerReferences
    std::map<std::pair<std::int32_t, std::uint64_t>, std::uint64_t> seen;  // telemetry
    std::string conflict_uid;  // the foreign ConfigMap last reported (PlanConflict)
    // What the ranks' reports say they applied (status.plan.appliedVersion, ranksApplied,
    // ranksReporting), as last written, and when.
    struct Applied {
      std::int64_t version = 0;  // the version written when these were counted
      std::optional<std::int64_t> oldest;
      std::int64_t ranks_applied = 0;
      std::int64_t ranks_reporting = 0;
      friend bool operator==(const Applied&, const Applied&) = default;
    };
    std::optional<Applied> applied_written;
    MonoTime applied_at{};
  };
  struct TelemetryLink {
    c4p::LinkRef link;
    c4p::Direction direction;
    MonoTime since;
  };

  void syncFabric();
  void syncNodes();
  void syncJobs();
  void syncTelemetry();
  // status.plan's applied fields and c4_trafficplan_ranks_behind, from the ranks' reports.
  void syncApplied();
  void syncFabricStatus();
  // Recomputes what explainConnection answers.
  void publishExplanations();
  void restoreTelemetry();
  // Writes are collected during a sync (one per job, the reasons joined) and made at its end.
  void queueWrite(const std::string& key, const std::string& reason);
  void flushWrites();
  void rejectFabric(const Json& fabric, const std::string& reason, const std::string& message);
  // Queues the documents of `changed` jobs (see the header comment).
  void writeChanged(const std::vector<std::string>& changed, const std::string& reason);
  // Writes one job's document if it differs from what the ConfigMap holds.
  void writePlan(const std::string& key, JobState& state, const std::string& reason);
  // Puts back every written job's ConfigMap that no longer holds its document (see the top).
  void repairPlans();
  // What is wrong with `cm` (nullopt: the ConfigMap of that name is gone) against the document
  // last written for `state`; "" when nothing is. `found_version`: the version of a valid
  // document found there.
  std::string tampering(const JobState& state, const std::optional<Json>& cm,
                        std::int64_t* found_version) const;
  // Writes `doc` (ConfigMap, status.plan, metric, Event `event_reason`) and records it.
  void commitPlan(const std::string& key, JobState& state, const c4p::JobPlan& plan,
                  const c4p::PlanDocument& doc, const std::string& reason, const char* event_type,
                  const char* event_reason, const std::string& message);
  Status putConfigMap(const JobState& state, const c4p::PlanDocument& doc,
                      const std::string& reason);
  // A merge patch of the job's /status with `plan_only` (status.plan, some of its fields): the
  // rest of the status, and of status.plan, stays.
  Status patchPlanStatus(const JobState& state, const TrainingJobStatus& plan_only);

  KubeClient& client_;
  Clock& clock_;
  EventRecorder& events_;
  TrafficPlanSources sources_;
  ingest::ReportStore* store_;
  TrafficPlanConfig config_;
  Logger log_;

  std::unique_ptr<c4p::Planner> planner_;
  Json fabric_object_;       // the accepted Fabric
  std::string fabric_seen_;  // "<uid>/<generation>" of the last Fabric judged
  Json fabric_status_;       // last status written
  std::map<std::string, c4p::NodeLocation> nodes_;
  std::map<std::string, JobState> jobs_;
  LinkMonitor monitor_;
  std::vector<TelemetryLink> telemetry_links_;
  struct RestoredLink {
    c4p::LinkRef link;
    c4p::Direction direction;
    double fraction;
  };
  std::vector<RestoredLink> restore_links_;  // from the Fabric's status, applied after the jobs
  std::map<std::string, std::string> pending_writes_;  // job -> reasons

  mutable std::mutex explain_mu_;
  // job -> (node, peer) sorted -> why C4P answers for that pair's connections
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::string>> explanations_;

  std::mutex mu_;  // hints_
  std::vector<std::pair<std::string, std::string>> hints_;

  metrics::Family<metrics::Counter>& plans_written_;
  metrics::Family<metrics::Counter>& link_verdicts_;
  metrics::Family<metrics::Counter>& fabric_rejects_;
  metrics::Family<metrics::Gauge>& max_link_load_;
  metrics::Family<metrics::Gauge>& ranks_behind_;
  metrics::Family<metrics::Histogram>& plan_seconds_;

  void worker();
  WorkQueue queue_;  // after the metrics families: it registers with the same registry
  std::mutex lifecycle_mu_;
  bool stopped_ = false;
  std::thread worker_;
};

}  // namespace c4::op::trafficplan
