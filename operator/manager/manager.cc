// The manager (see manager.h).
#include "operator/manager/manager.h"

#include <unistd.h>

#include "kube/client/curl_kube_client.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

namespace {
constexpr const char* kLeaderLabel = "c4.dev/leader";
}  // namespace
namespace {

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace

// A C4D diagnosis enqueues the job in the TrainingJob controller, which reads it.
class Manager::QueueDiagnoses final : public DiagnosisListener {
 public:
  explicit QueueDiagnoses(WorkQueue& queue) : queue_(queue) {}
  void diagnosed(const std::string& key) override { queue_.add(key); }

 private:
  WorkQueue& queue_;
};

// C4P as C4D sees it: the traffic-plan controller (which cannot include C4D's headers).
class Manager::TrafficPlanAdapter final : public TrafficPlanPeer {
 public:
  explicit TrafficPlanAdapter(trafficplan::TrafficPlanController& plans) : plans_(plans) {}
  void replan(const std::string& key, const std::string& node,
              const std::string& peer_node) override {
    plans_.onSlowConnection(key, node, peer_node);
  }
  std::optional<std::string> explain(const std::string& key, const std::string& node,
                                     const std::string& peer_node) const override {
    return plans_.explainConnection(key, node, peer_node);
  }

 private:
  trafficplan::TrafficPlanController& plans_;
};

KubeConfig fencedConfig(KubeConfig config, const LeaderElector& elector, Clock& clock) {
  config.before_send = [&elector, &clock](std::string_view method, std::string_view) -> Status {
    if (method == "GET") return okStatus();  // reads and watches change nothing
    if (elector.mayWrite(clock.monoNow())) return okStatus();
    return makeError(ErrorCode::kFailedPrecondition,
                     "not sent: this process no longer holds a valid lease");
  };
  return config;
}

Manager::Manager(const OperatorOptions& options, Clock& clock, ManagerHooks hooks)
    : options_(options), clock_(clock), hooks_(std::move(hooks)), log_("manager") {}

Manager::~Manager() {
  stop();
  if (ingest_) ingest_->stop();
  stopWork();
  server_.stop();
}

Result<std::unique_ptr<Manager>> Manager::create(const OperatorOptions& options, Clock& clock,
                                                 ManagerHooks hooks) {
  auto kube_config = loadDefaultKubeConfig(options.kubeconfig, options.context);
  if (!kube_config) {
    return std::unexpected(kube_config.error().withContext("load the Kubernetes configuration"));
  }
  kube_config->qps = options.kube_api_qps;
  kube_config->burst = options.kube_api_burst;
  std::unique_ptr<Manager> manager(new Manager(options, clock, std::move(hooks)));
  C4_RETURN_IF_ERROR(manager->build(*kube_config));
  return manager;
}

Status Manager::build(const KubeConfig& kube_config) {
  identity_ = options_.identity;
  if (identity_.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    identity_ = std::string(host) + "_" + std::to_string(::getpid());
  }
  // Lease renewals have a client of their own: a throttled burst of pod creations must never
  // delay a renewal past the renew deadline. It is never fenced.
  C4_ASSIGN_OR_RETURN(election_client_, createCurlKubeClient(kube_config, clock_, nullptr));
  LeaderElectionConfig election;
  election.lease_namespace = options_.lease_namespace;
  election.lease_name = options_.lease_name;
  election.identity = identity_;
  election.lease_duration = seconds(options_.lease_duration_seconds);
  election.renew_deadline = seconds(options_.renew_deadline_seconds);
  election.retry_period = seconds(options_.retry_period_seconds);
  elector_ = std::make_unique<LeaderElector>(*election_client_, clock_, election);

  // Everything else writes only while the lease is valid.
  const KubeConfig fenced =
      options_.leader_elect ? fencedConfig(kube_config, *elector_, clock_) : kube_config;
  C4_ASSIGN_OR_RETURN(client_, createCurlKubeClient(fenced, clock_, &registry_));
  // Events have their own client and rate limit, so they never delay pod creation.
  C4_ASSIGN_OR_RETURN(event_client_, createCurlKubeClient(fenced, clock_, nullptr));

  informers_ = std::make_unique<SharedInformers>(*client_, clock_);
  informers_->setWatchTimeoutSeconds(300);
  Informer& nodes = informers_->informerFor(resources::nodes());

  // Node actions read nodes from the shared cache and keep the circuit breaker's state next
  // to the lease. c4.dev/cordoned-by names the operator ("c4-operator"), not this process, so
  // a successor may undo what it did.
  node_events_ =
      std::make_unique<EventRecorder>(*event_client_, clock_, "c4-operator", identity_, &registry_);
  NodeActionConfig node_actions = options_.node_actions;
  node_actions.state_namespace = options_.lease_namespace;
  node_actions.fault_hook = hooks_.fault_hook;
  remediator_ = std::make_unique<NodeRemediator>(
      *client_, clock_, *node_events_, node_actions,
      [&nodes](const std::string& name) { return nodes.store().get(name); },
      [&nodes] { return nodes.store().list(); }, &registry_);
  // A person's c4.dev/release on a repaired node: the remediator's loop (running while this
  // process leads) returns it to service.
  nodes.addHandler([r = remediator_.get()](InformerEvent event, const Json*, const Json& node) {
    if (event != InformerEvent::kDelete && hasReleaseAnnotation(node)) {
      r->requestRelease(objectName(node));
    }
  });

  // Report ingest: its informers are the controller's (shared), its TokenReviews go through a
  // client of their own (a review creates nothing, so it is not fenced).
  C4_ASSIGN_OR_RETURN(auto bind, parseBindAddress(options_.report_bind_address));
  if (bind && options_.tls_cert_file.empty()) {
    log_.warn("Report endpoint disabled: no --tls-cert-file/--tls-key-file given",
              {{"reportBindAddress", options_.report_bind_address}});
    bind.reset();
  }
  if (bind) {
    C4_ASSIGN_OR_RETURN(review_client_, createCurlKubeClient(kube_config, clock_, nullptr));
    ingest::IngestConfig config;
    config.watch_namespace = options_.watch_namespace;
    config.server.address = bind->host;
    config.server.port = bind->port;
    config.server.cert_file = options_.tls_cert_file;
    config.server.key_file = options_.tls_key_file;
    config.server.threads = options_.report_threads;
    config.server.max_queued_connections = options_.report_max_queued_connections;
    config.server.read_timeout = seconds(options_.report_read_timeout_seconds);
    config.handler.service_account = options_.report_service_account;
    config.handler.max_body_bytes =
        static_cast<std::size_t>(options_.report_max_body_mib * 1024 * 1024);
    config.handler.node_limit = {options_.report_node_qps,
                                 static_cast<double>(options_.report_node_burst)};
    config.handler.global_limit = {options_.report_global_qps,
                                   static_cast<double>(options_.report_global_burst)};
    config.handler.max_inflight = static_cast<std::size_t>(options_.report_max_inflight);
    config.handler.max_age = seconds(options_.report_max_age_seconds);
    config.handler.max_clock_skew = seconds(options_.report_max_clock_skew_seconds);
    config.review.audience = options_.report_audience;
    config.review.positive_ttl = seconds(options_.token_review_ttl_seconds);
    config.review.negative_ttl = seconds(options_.token_review_negative_ttl_seconds);
    config.review.cache_size = static_cast<std::size_t>(options_.token_review_cache_size);
    config.review.negative_cache_size =
        static_cast<std::size_t>(options_.token_review_negative_cache_size);
    config.store.history = static_cast<std::size_t>(options_.report_history);
    auto serving = [this] {
      bool leading = !options_.leader_elect || elector_->isLeader();
      return leading && controller_ != nullptr && controller_->ready();
    };
    auto created = ingest::Ingest::create(std::move(config), *review_client_, *informers_, clock_,
                                          registry_, serving);
    if (!created) return std::unexpected(created.error().withContext("report endpoint"));
    ingest_ = std::move(*created);
  }

  ControllerConfig controller;
  controller.watch_namespace = options_.watch_namespace;
  controller.workers = options_.workers;
  controller.pod_settings = options_.pod;
  controller.identity = identity_;
  controller.status_batch_period = seconds(options_.status_batch_seconds);
  controller.event_client = event_client_.get();
  controller.remediator = remediator_.get();
  controller.fault_hook = hooks_.fault_hook;
  if (ingest_) {
    ingest::ReportStore& store = ingest_->store();
    controller.checkpoint_source =
        [&store](const std::string& key) -> std::optional<ReportedCheckpointFact> {
      auto slash = key.find('/');
      auto cp = store.checkpoint(key.substr(0, slash), key.substr(slash + 1));
      if (!cp) return std::nullopt;
      return ReportedCheckpointFact{cp->step, cp->path, cp->time};
    };
    // C4D's diagnoses reach the controller (the detector is built below, once the controller
    // and the traffic planner it tells exist).
    controller.diagnosis_source = [this](const std::string& key) -> std::optional<DiagnosedFault> {
      return detector_ ? detector_->diagnosis(key) : std::nullopt;
    };
  }
  controller_ =
      std::make_unique<TrainingJobController>(*client_, clock_, *informers_, controller, registry_);
  if (options_.traffic_planning) {
    // C4P: plans for running jobs on the cluster's Fabric, re-weighted from the reports'
    // subflow bytes and C4D's slow-connection verdicts; writes through the fenced client.
    trafficplan::TrafficPlanConfig plan_config;
    plan_config.fabric_name = options_.fabric_name;
    plan_config.link_hold = seconds(options_.link_hold_seconds);
    trafficplan_events_ =
        std::make_unique<EventRecorder>(*event_client_, clock_, "c4-operator", identity_, nullptr);
    trafficplan_ = trafficplan::TrafficPlanController::fromInformers(
        *client_, clock_, *trafficplan_events_, *informers_, options_.watch_namespace,
        ingest_ ? &ingest_->store() : nullptr, plan_config, registry_);
  }
  if (ingest_) {
    // C4D: a reconciler of the jobs in the report store; a diagnosis enqueues the job in the
    // controller, slow links go to C4P, which also answers first for hangs and slowness on
    // links it holds failed or suspects.
    const std::string& ns = options_.watch_namespace;
    detector_events_ =
        std::make_unique<EventRecorder>(*event_client_, clock_, "c4-operator", identity_, nullptr);
    diagnoses_ = std::make_unique<QueueDiagnoses>(controller_->queue());
    DetectorPeers peers;
    peers.diagnoses = diagnoses_.get();
    if (trafficplan_) {
      traffic_peer_ = std::make_unique<TrafficPlanAdapter>(*trafficplan_);
      peers.traffic = traffic_peer_.get();
    }
    DetectorConfig detector_config;
    detector_config.fault_hook = hooks_.fault_hook;
    detector_ = std::make_unique<Detector>(
        ingest_->store(), informers_->informerFor(resources::trainingJobs(), ns),
        informers_->informerFor(resources::pods(), ns, labels::kJobName), nodes, *remediator_,
        *detector_events_, clock_, detector_config, registry_, peers);
    ingest_->store().setCheckpointListener(
        [this](const std::string& key) { controller_->queue().add(key); });
  }

  server_.handle("/metrics", [this] {
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", registry_.expose()};
  });
  server_.handle("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  server_.handle("/readyz", [this] {
    bool standby = options_.leader_elect && !elector_->isLeader();
    if (standby || controller_->ready()) return HttpReply{200, "text/plain", "ok\n"};
    return HttpReply{503, "text/plain", "caches not synced\n"};
  });
  server_.handle("/debug/reports", [this](const HttpRequest& request) {
    if (!options_.debug_reports) {
      return HttpReply{404, "text/plain",
                       "/debug/reports is off: start the operator with --debug-reports\n"};
    }
    if (!ingest_) return HttpReply{404, "text/plain", "the report endpoint is disabled\n"};
    Json summary = ingest_->store().summary(request.param("namespace"), request.param("job"),
                                            request.param("connections") == "1");
    return HttpReply{200, "application/json", summary.dump(2) + "\n"};
  });
  return okStatus();
}

void Manager::requestStop(int code) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) exit_code_ = code;
    stopping_ = true;
    cv_.notify_all();
  }
  elector_->stop();
  informers_->requestStop();  // a start-up waiting for the caches wakes at once
}

void Manager::stop() {
  requestStop(0);
}

void Manager::labelLeaderPod(KubeClient& client, bool leader) {
  if (options_.pod_name.empty() || options_.pod_namespace.empty()) return;
  Json patch = {
      {"metadata", {{"labels", {{kLeaderLabel, leader ? Json("true") : Json(nullptr)}}}}}};
  auto done = client.patch(resources::pods(), options_.pod_namespace, options_.pod_name,
                           PatchType::kMerge, patch);
  if (!done) {
    log_.warn("Leader label of this pod not written",
              {{"pod", options_.pod_namespace + "/" + options_.pod_name},
               {"leader", leader},
               {"error", done.error()}});
  }
}

void Manager::startWork() {
  std::lock_guard lock(mu_);
  if (stopping_ || starter_.joinable()) return;
  starter_ = std::thread([this] {
    try {
      startWorkNow();
    } catch (const std::exception& e) {  // no exception leaves the thread
      log_.error("Start-up threw; exiting", {{"error", e.what()}});
      requestStop(1);
    }
  });
}

// The start-up of the leader's work (startWork's thread).
void Manager::startWorkNow() {
  labelLeaderPod(*client_, true);  // the report Service routes to the leader
  informers_->start();
  MonoTime deadline =
      clock_.monoNow() + std::chrono::duration_cast<Duration>(std::chrono::minutes{2});
  if (!informers_->waitForSync(deadline)) {
    std::lock_guard inner(mu_);
    if (stopping_) return;  // stopped while starting: nothing to report
    log_.error("Caches did not sync within 2 minutes; exiting");
    exit_code_ = 1;
    stopping_ = true;
    cv_.notify_all();
    elector_->stop();
    return;
  }
  if (auto started = controller_->start(); !started) {
    log_.info("Controller not started", {{"error", started.error()}});
    return;
  }
  remediator_->start();  // completes the node actions a predecessor owed, retries failed ones
  if (detector_) detector_->start();
  if (trafficplan_) trafficplan_->start();
  log_.info("Caches synced; controller started");
}

void Manager::stopWork() {
  informers_->requestStop();
  if (detector_) detector_->stop();
  if (trafficplan_) trafficplan_->stop();
  controller_->stop();
  remediator_->stop();
  {
    std::unique_lock lock(mu_);
    stopping_ = true;  // no start after this
  }
  if (starter_.joinable()) starter_.join();
  informers_->stop();
}

int Manager::run() {
  auto port = server_.start(options_.metrics_address, options_.metrics_port);
  if (!port) {
    log_.error("Cannot start the metrics server", {{"error", port.error()}});
    return 1;
  }
  metrics_port_ = *port;
  if (ingest_) {
    auto report_port = ingest_->start();
    if (!report_port) {
      log_.error("Cannot start the report endpoint", {{"error", report_port.error()}});
      server_.stop();
      return 1;
    }
    report_port_ = *report_port;
  }
  // A restarted container of an old leader must not keep receiving reports.
  labelLeaderPod(*election_client_, false);
  log_.info("Starting", {{"version", C4_VERSION},
                         {"identity", identity_},
                         {"metricsPort", *port},
                         {"reportPort", report_port_.load()},
                         {"leaderElect", options_.leader_elect}});
  int code = 0;
  if (options_.leader_elect) {
    bool voluntary = elector_->run([this] { startWork(); }, [this] { stopWork(); },
                                   [this] {
                                     log_.error("Lost the lease; stopping at once");
                                     if (hooks_.on_lease_lost) hooks_.on_lease_lost();
                                   });
    std::lock_guard lock(mu_);
    code = voluntary ? exit_code_ : 1;  // lost: exit so a fresh process campaigns again
  } else {
    startWork();
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_; });
      code = exit_code_;
    }
    stopWork();
  }
  if (ingest_) ingest_->stop();
  labelLeaderPod(*election_client_, false);
  server_.stop();
  log_.info("Stopped", {{"exitCode", code}});
  return code;
}

}  // namespace c4::op
