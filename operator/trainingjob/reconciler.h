// The TrainingJob controller: informers (TrainingJobs, Pods by job, Nodes, Services,
// ConfigMaps), the rate-limited queue, workers that start after the caches synced, and the
// reconciler that applies planReconcile()'s plan: children, one status write through /status,
// Events, pod deletions, pod creations — in that order, so a restart's intent is persisted
// before any pod is deleted.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "operator/cache/informer.h"
#include "operator/client/kube_client.h"
#include "operator/controller/events.h"
#include "operator/controller/expectations.h"
#include "operator/controller/work_queue.h"
#include "operator/trainingjob/planner.h"

namespace c4::op {

struct ReconcileResult {
  std::optional<Duration> requeue_after;
};

struct ControllerConfig {
  std::string watch_namespace;  // "" = all namespaces
  int workers = 4;
  PodSettings pod_settings;
  std::string identity = "c4-operator";
  Duration cache_sync_timeout = std::chrono::minutes{2};
  int watch_timeout_seconds = 300;
  // A status change that gates nothing (job Pending or Running, no restart starting) is
  // written this long after it was first seen, so quick successive changes cost one write
  // (kube-controller-manager's Job controller batches its syncs by 1 s). Zero: write at once.
  Duration status_batch_period = std::chrono::seconds{1};
  // Concurrent pod creations within one reconcile (bounded by the client's QPS anyway).
  std::size_t create_parallelism = 16;
  // Client for Events (its own rate limit, like kube-controller-manager's event broadcaster);
  // null = the main client. Not owned.
  KubeClient* event_client = nullptr;
  // Test hook: called at the named failpoints of a reconcile (failpoints.h: "after-status",
  // "after-restart-status"); returning false aborts the reconcile there, as a crash would. The
  // binary sets it only when C4_FAILPOINTS is set. Null in production.
  std::function<bool(std::string_view stage, const std::string& key)> fault_hook;
};

class TrainingJobController {
 public:
  TrainingJobController(KubeClient& client, Clock& clock, ControllerConfig config,
                        metrics::Registry& registry);
  ~TrainingJobController();
  TrainingJobController(const TrainingJobController&) = delete;
  TrainingJobController& operator=(const TrainingJobController&) = delete;

  // Starts the informers, waits for their sync (kDeadlineExceeded after cache_sync_timeout),
  // then starts the workers.
  Status start();
  // Stops workers and informers. Idempotent.
  void stop();
  [[nodiscard]] bool ready() const { return ready_.load(); }

  // One reconcile of "<ns>/<name>" (exposed for tests; workers call it).
  Result<ReconcileResult> reconcile(const std::string& key);

  Informer& jobInformer() { return *jobs_; }
  Informer& podInformer() { return *pods_; }
  WorkQueue& queue() { return queue_; }

 private:
  void worker();
  void enqueueJobOf(const Json& object);
  NodeFacts nodeFacts(const std::string& name);
  Status ensureChild(const ResourceType& type, Informer& cache, const Json& desired);

  KubeClient& client_;
  Clock& clock_;
  ControllerConfig config_;
  Logger log_;
  EventRecorder events_;
  std::unique_ptr<Informer> jobs_;
  std::unique_ptr<Informer> pods_;
  std::unique_ptr<Informer> nodes_;
  std::unique_ptr<Informer> services_;
  std::unique_ptr<Informer> config_maps_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> reconcile_seq_{0};
  // Status resourceVersion each job must reach in the cache before it is planned again (guards
  // against planning from a cache that has not seen our own last status write).
  std::mutex written_mu_;
  std::map<std::string, std::uint64_t> written_rv_;
  // Children created but not yet seen by their informer (no duplicate creates, no 409s).
  CreationExpectations expectations_;
  // When a job's deferred (batched) status change is due to be written.
  std::map<std::string, MonoTime> status_due_;

  metrics::Family<metrics::Counter>& reconciles_;
  metrics::Family<metrics::Histogram>& reconcile_seconds_;
  metrics::Family<metrics::Counter>& restarts_;
  metrics::Family<metrics::Counter>& pods_created_;
};

}  // namespace c4::op
