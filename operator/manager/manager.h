// The manager: everything one c4-operator process runs, wired once (controller-runtime's
// manager). It owns the Kubernetes clients, the shared informer caches, the metrics registry and
// the /metrics /healthz /readyz /debug/reports server, the node remediator, the TrainingJob
// controller, report ingest (the HTTPS endpoint POST /v1/reports and the report store), C4D's
// detector and, with --traffic-planning, C4P's traffic-plan controller, and
// runs them under leader election. The three controllers have one shape, a reconciler behind a
// rate-limited WorkQueue started once the caches synced; they talk through interfaces given at
// construction (the detector's DiagnosisListener and TrafficPlanPeer, adapted in manager.cc)
// and ControllerConfig's sources; the report store's checkpoint listener is still a setter.
//
//   - While not leading it only serves health and metrics (the report endpoint answers 503). On
//   becoming leader it starts the
//     informers, waits for their sync and starts the controller's workers.
//   - Writes are fenced: the clients that reconcile and record Events refuse every request but
//     reads once the lease is no longer valid (leaseValidUntil: the send time of the last
//     successful renewal + the renew deadline), so an old leader cut off from the lease can
//     never write after a successor could have taken over. When the lease is lost the manager
//     calls `on_lease_lost` at once (the binary exits non-zero, as controller-runtime does:
//     nothing in flight is waited for).
//   - stop() (SIGTERM) ends everything promptly, also while the caches are still syncing or the
//     API server is unreachable: lists, watches and lease reads are cancelled, not waited out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/cache/shared_informers.h"
#include "kube/client/kube_client.h"
#include "kube/client/kube_config.h"
#include "kube/controller/events.h"
#include "operator/detection/detector.h"
#include "operator/ingest/ingest.h"
#include "operator/manager/http_server.h"
#include "operator/manager/leader_election.h"
#include "operator/manager/options.h"
#include "operator/remediation/node_actions.h"
#include "operator/trafficplan/controller.h"
#include "operator/trainingjob/reconciler.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// Refuses every request but GETs (reads, watches) while `elector` may not write: the request
// gate (KubeConfig::before_send) of a leader's clients. It runs after the client's throttle,
// right before a request is sent. The elector's own client must not carry it.
KubeConfig fencedConfig(KubeConfig config, const LeaderElector& elector, Clock& clock);

struct ManagerHooks {
  // Called on the elector's thread the moment the lease is lost (its renew deadline passed).
  // The binary exits non-zero here; null: run() returns 1 after stopping.
  std::function<void()> on_lease_lost;
  // Failpoints (see failpoints.h); null in production.
  std::function<bool(std::string_view stage, const std::string& key)> fault_hook;
};

class Manager {
 public:
  // Loads the Kubernetes configuration and builds every component; errors name what failed.
  static Result<std::unique_ptr<Manager>> create(const OperatorOptions& options, Clock& clock,
                                                 ManagerHooks hooks);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Serves /metrics, /healthz and /readyz; blocks until stop() or the loss of the lease.
  // Returns the exit code: 0 after stop(), 1 after a loss or a start-up failure.
  int run();
  // Ends run() promptly; thread-safe, idempotent; may be called before or during run().
  void stop();
  // The bound metrics port once run() started serving (0 before).
  [[nodiscard]] int metricsPort() const { return metrics_port_.load(); }
  // The bound report endpoint port once run() started serving (0 before, or when disabled).
  [[nodiscard]] int reportPort() const { return report_port_.load(); }
  // Report ingest; null when the endpoint is disabled.
  ingest::Ingest* reportIngest() { return ingest_.get(); }

 private:
  Manager(const OperatorOptions& options, Clock& clock, ManagerHooks hooks);
  Status build(const KubeConfig& kube_config);
  // Starts the informers and, once they synced, the controller (on a thread of its own).
  void startWork();
  void startWorkNow();
  // Stops the controller and the informers; waits for startWork's thread.
  void stopWork();
  void requestStop(int code);
  // Sets (true) or removes the c4.dev/leader label of this process's pod, if it knows its pod.
  void labelLeaderPod(KubeClient& client, bool leader);

  OperatorOptions options_;
  Clock& clock_;
  ManagerHooks hooks_;
  Logger log_;
  std::string identity_;
  metrics::Registry registry_;
  std::unique_ptr<KubeClient> election_client_;
  std::unique_ptr<LeaderElector> elector_;
  std::unique_ptr<KubeClient> client_;
  std::unique_ptr<KubeClient> event_client_;
  std::unique_ptr<SharedInformers> informers_;
  std::unique_ptr<EventRecorder> node_events_;
  std::unique_ptr<NodeRemediator> remediator_;
  std::unique_ptr<TrainingJobController> controller_;
  std::unique_ptr<KubeClient> review_client_;
  std::unique_ptr<ingest::Ingest> ingest_;
  std::unique_ptr<EventRecorder> trafficplan_events_;
  std::unique_ptr<trafficplan::TrafficPlanController> trafficplan_;
  // The detector's peers: the controller's queue and C4P (adapters, manager.cc).
  class QueueDiagnoses;
  class TrafficPlanAdapter;
  std::unique_ptr<DiagnosisListener> diagnoses_;
  std::unique_ptr<TrafficPlanPeer> traffic_peer_;
  std::unique_ptr<EventRecorder> detector_events_;
  std::unique_ptr<Detector> detector_;
  HttpServer server_;
  std::atomic<int> metrics_port_{0};
  std::atomic<int> report_port_{0};

  std::mutex mu_;
  std::condition_variable_any cv_;
  bool stopping_ = false;
  int exit_code_ = 0;
  std::thread starter_;
};

}  // namespace c4::op
