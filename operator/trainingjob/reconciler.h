// The TrainingJob controller: its informers from the manager's shared caches (TrainingJobs,
// Pods by job, Nodes, Services), the rate-limited queue, workers that the manager
// starts once the caches synced, and the
// reconciler that applies planReconcile()'s plan in an order that is safe to crash in at any
// point: children (the headless Service), node cordons, one status write through /status
// (always, even when a child could not be created), Events, pod deletions, pod creations. The
// plan ConfigMap the pods mount is the traffic-plan controller's alone (trafficplan/).
#pragma once

#include <atomic>
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
#include "kube/cache/informer.h"
#include "kube/cache/shared_informers.h"
#include "kube/client/kube_client.h"
#include "kube/controller/events.h"
#include "kube/controller/expectations.h"
#include "kube/controller/work_queue.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/job_metrics.h"
#include "operator/trainingjob/planner.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// The failpoints a reconcile passes (ControllerConfig::fault_hook; the manager arms them from
// C4_FAILPOINTS, manager/failpoints.h): right after any status write lands, and right after the
// status write that starts a restart, before any pod is deleted.
inline constexpr std::string_view kFailpointAfterStatus = "after-status";
inline constexpr std::string_view kFailpointAfterRestartStatus = "after-restart-status";

struct ReconcileResult {
  std::optional<Duration> requeue_after;
};

struct ControllerConfig {
  std::string watch_namespace;  // "" = all namespaces
  int workers = 4;
  PodSettings pod_settings;
  std::string identity = "c4-operator";
  // A status change that gates nothing (job Pending or Running, no restart starting) is
  // written this long after it was first seen, so quick successive changes cost one write
  // (kube-controller-manager's Job controller batches its syncs by 1 s). Zero: write at once.
  Duration status_batch_period = std::chrono::seconds{1};
  // Goodput is written into status at least this often while a job runs or restarts.
  Duration goodput_period = std::chrono::seconds{60};
  // Concurrent pod creations within one reconcile (bounded by the client's QPS anyway).
  std::size_t create_parallelism = 16;
  // Client for Events (its own rate limit, like kube-controller-manager's event broadcaster);
  // null = the main client. Not owned.
  KubeClient* event_client = nullptr;
  // Cordons nodes with node-level evidence of a fault (circuit breaker, dry run). Null: node
  // actions are reported in Events only. Not owned.
  NodeRemediator* remediator = nullptr;
  // Test hook: called at the named failpoints of a reconcile (kFailpointAfterStatus,
  // kFailpointAfterRestartStatus); returning false aborts the reconcile there, as a crash would.
  // The binary sets it only when C4_FAILPOINTS is set. Null in production.
  std::function<bool(std::string_view stage, const std::string& key)> fault_hook;
  // The checkpoint the job's ranks reported ("<ns>/<name>" -> the report store's newest
  // complete checkpoint), written into status.lastCheckpoint; null = no report pipeline. Whoever
  // provides it enqueues the job (queue().add) when it advances.
  std::function<std::optional<ReportedCheckpointFact>(const std::string& job_key)>
      checkpoint_source;
  // The C4D diagnosis of the job's current attempt ("<ns>/<name>" -> a confirmed verdict that
  // calls for a restart; operator/detection); null = no detection.
  std::function<std::optional<DiagnosedFault>(const std::string& key)> diagnosis_source;
};

class TrainingJobController {
 public:
  // Asks `informers` for the informers it reads and adds its handlers and indexes to them:
  // construct every controller before the manager starts the informers.
  TrainingJobController(KubeClient& client, Clock& clock, SharedInformers& informers,
                        ControllerConfig config, metrics::Registry& registry);
  ~TrainingJobController();
  TrainingJobController(const TrainingJobController&) = delete;
  TrainingJobController& operator=(const TrainingJobController&) = delete;

  // Starts the workers; the manager calls it once the shared caches have synced. kCancelled
  // after stop().
  Status start();
  // Stops and joins the workers (the manager stops the informers). Idempotent.
  void stop();
  [[nodiscard]] bool ready() const { return ready_.load(); }

  // One reconcile of "<ns>/<name>" (exposed for tests; workers call it).
  Result<ReconcileResult> reconcile(const std::string& key);

  Informer& jobInformer() { return *jobs_; }
  Informer& podInformer() { return *pods_; }
  Informer& nodeInformer() { return *nodes_; }
  Informer& serviceInformer() { return *services_; }
  WorkQueue& queue() { return queue_; }

 private:
  // What the pod informer has shown of one job's current attempt.
  struct PodTrack {
    std::int64_t attempt = -1;
    std::set<std::int64_t> indexes;
    std::map<std::int64_t, Json> gone;
  };
  struct ChildOutcome {
    std::optional<ChildProblem> problem;
    std::optional<Error> retry;  // a transient error: requeue with backoff
  };

  void worker();
  void enqueueJobOf(const Json& object);
  void trackPod(InformerEvent event, const Json& pod);
  NodeFacts nodeFacts(const std::string& name);
  // Creates the child unless it exists, and puts back what someone else changed of it
  // (repairChild); a same-named object this job does not control is a NameConflict (never
  // adopted), a terminal API error a FailedCreate problem.
  ChildOutcome ensureChild(const ResourceType& type, Informer& cache, const Json& desired,
                           const Json& job);
  // After AlreadyExists: is the object ours (the cache lags) or someone else's?
  ChildOutcome classifyExisting(const ResourceType& type, const Json& desired, const Json& job);
  // Our child `existing` (cached or read) against `desired`: a headless Service someone else
  // changed (serviceDrift, confirmed by a read when `existing` came from the cache) is put back
  // with a Warning Event ServiceRepaired. A failed write is a retry.
  ChildOutcome repairChild(const ResourceType& type, const Json& existing, const Json& desired,
                           const Json& job, bool from_cache);
  void runCordons(const Json& job, const std::vector<NodeCordon>& cordons, const Logger& log);

  KubeClient& client_;
  Clock& clock_;
  ControllerConfig config_;
  Logger log_;
  EventRecorder events_;
  // Owned by the manager's SharedInformers.
  Informer* jobs_;
  Informer* pods_;
  Informer* nodes_;
  Informer* services_;
  WorkQueue queue_;
  std::mutex lifecycle_mu_;  // start() vs stop()
  std::vector<std::thread> workers_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> reconcile_seq_{0};
  // Status resourceVersion each job must reach in the cache before it is planned again (guards
  // against planning from a cache that has not seen our own last status write).
  std::mutex written_mu_;
  std::map<std::string, std::uint64_t> written_rv_;
  // When a job's deferred (batched) status change is due to be written.
  std::map<std::string, MonoTime> status_due_;
  // Pod creation problems of the last reconcile, reported in the next status.
  std::map<std::string, ChildProblem> pod_problems_;
  // Children created but not yet seen by their informer (no duplicate creates, no 409s).
  CreationExpectations expectations_;
  std::mutex tracks_mu_;
  std::map<std::string, PodTrack> tracks_;  // "<ns>/<job>/<job uid>"

  metrics::Family<metrics::Counter>& reconciles_;
  metrics::Family<metrics::Histogram>& reconcile_seconds_;
  metrics::Family<metrics::Counter>& restarts_;
  metrics::Family<metrics::Counter>& pods_created_;
  metrics::Family<metrics::Counter>& child_errors_;
  // Per-job gauges from the job cache (last: its collect hook goes before anything else).
  std::unique_ptr<JobMetrics> job_metrics_;
};

}  // namespace c4::op
