// TrainingJob controller.
#include "operator/trainingjob/reconciler.h"

#include <algorithm>
#include <cstdio>

#include "operator/controller/expectations.h"
#include "operator/manager/failpoints.h"
#include "operator/remediation/node_actions.h"

namespace c4::op {
namespace {
const char* kPodsByJob = "job";
const char* kPodsByNode = "node";

// Identity and generation of a child for creation expectations.
std::string childId(const Json& object) {
  return object.value("kind", std::string{}) + "/" + objectKey(object);
}
std::string childVersion(const Json& object) {
  return object.value("kind", std::string{}) == "Pod" ? labelOf(object, labels::kRestartAttempt)
                                                      : std::string{};
}
}  // namespace

NodeFacts nodeFactsOf(const Json& node) {
  NodeFacts facts;
  facts.exists = true;
  facts.ready = false;
  auto spec = node.find("spec");
  if (spec != node.end() && spec->is_object()) {
    facts.unschedulable = spec->value("unschedulable", false);
    auto taints = spec->find("taints");
    if (taints != spec->end() && taints->is_array()) {
      for (const auto& t : *taints) {
        if (t.is_object() && t.value("key", std::string{}) == kFaultyTaintKey) {
          facts.faulty_taint = true;
        }
      }
    }
  }
  auto status = node.find("status");
  if (status != node.end() && status->is_object()) {
    auto conditions = status->find("conditions");
    if (conditions != status->end() && conditions->is_array()) {
      for (const auto& c : *conditions) {
        if (c.is_object() && c.value("type", std::string{}) == "Ready") {
          facts.ready = c.value("status", std::string{}) == "True";
        }
      }
    }
  }
  return facts;
}

TrainingJobController::TrainingJobController(KubeClient& client, Clock& clock,
                                             ControllerConfig config, metrics::Registry& registry)
    : client_(client),
      clock_(clock),
      config_(std::move(config)),
      log_("controller"),
      events_(config_.event_client != nullptr ? *config_.event_client : client, clock,
              "c4-operator", config_.identity, &registry),
      queue_(clock, defaultControllerRateLimiter(clock), &registry, "trainingjob"),
      reconciles_(
          registry.counter("c4_operator_reconciles_total", "Reconciles by result.", {"result"})),
      reconcile_seconds_(registry.histogram("c4_operator_reconcile_duration_seconds",
                                            "Time spent in one reconcile.", {},
                                            metrics::exponentialBuckets(0.001, 2.0, 20))),
      restarts_(registry.counter("c4_operator_job_restarts_total", "Whole-job restarts started.")),
      pods_created_(registry.counter("c4_operator_pods_created_total", "Pods created.")) {
  for (const char* result : {"success", "error", "requeue_after", "terminal"}) {
    reconciles_.labels({result});
  }
  restarts_.get();
  pods_created_.get();
  const std::string& ns = config_.watch_namespace;
  jobs_ = std::make_unique<Informer>(client, clock, resources::trainingJobs(), ns);
  pods_ = std::make_unique<Informer>(client, clock, resources::pods(), ns, labels::kJobName);
  nodes_ = std::make_unique<Informer>(client, clock, resources::nodes(), "");
  services_ =
      std::make_unique<Informer>(client, clock, resources::services(), ns, labels::kJobName);
  config_maps_ =
      std::make_unique<Informer>(client, clock, resources::configMaps(), ns, labels::kJobName);
  for (Informer* informer :
       {jobs_.get(), pods_.get(), nodes_.get(), services_.get(), config_maps_.get()}) {
    informer->setWatchTimeoutSeconds(config_.watch_timeout_seconds);
  }
  pods_->store().addIndex(kPodsByJob, [](const Json& pod) {
    std::string job = labelOf(pod, labels::kJobName);
    if (job.empty()) return std::vector<std::string>{};
    return std::vector<std::string>{objectKey(objectNamespace(pod), job)};
  });
  pods_->store().addIndex(kPodsByNode, [](const Json& pod) {
    std::string node = pod.contains("spec") ? pod["spec"].value("nodeName", std::string{}) : "";
    if (node.empty()) return std::vector<std::string>{};
    return std::vector<std::string>{node};
  });
  jobs_->addHandler([this](InformerEvent, const Json*, const Json& job) {
    std::string key = objectKey(job);
    {
      // A cache that has caught up with our last status write releases the guard.
      std::lock_guard lock(written_mu_);
      auto it = written_rv_.find(key);
      auto rv = resourceVersionNumber(job);
      if (it != written_rv_.end() && rv && *rv >= it->second) written_rv_.erase(it);
    }
    queue_.add(key);
  });
  auto child = [this](InformerEvent, const Json*, const Json& object) {
    expectations_.observed(childId(object), childVersion(object));
    enqueueJobOf(object);
  };
  pods_->addHandler(child);
  services_->addHandler(child);
  config_maps_->addHandler(child);
  nodes_->addHandler([this](InformerEvent, const Json* old_node, const Json& node) {
    // Only readiness, cordon and our taint matter (force deletion); heartbeats do not.
    if (old_node != nullptr && nodeFactsOf(*old_node) == nodeFactsOf(node)) return;
    for (const auto& pod : pods_->store().byIndex(kPodsByNode, objectName(node))) {
      enqueueJobOf(pod);
    }
  });
}

TrainingJobController::~TrainingJobController() {
  stop();
}

void TrainingJobController::enqueueJobOf(const Json& object) {
  std::string job = labelOf(object, labels::kJobName);
  if (!job.empty()) queue_.add(objectKey(objectNamespace(object), job));
}

Status TrainingJobController::start() {
  std::vector<Informer*> informers = {jobs_.get(), pods_.get(), nodes_.get(), services_.get(),
                                      config_maps_.get()};
  for (Informer* informer : informers) informer->start();
  MonoTime deadline = clock_.monoNow() + config_.cache_sync_timeout;
  for (Informer* informer : informers) {
    if (!informer->waitForSync(deadline)) {
      return makeError(ErrorCode::kDeadlineExceeded,
                       "cache of " + informer->type().resource + " did not sync in time");
    }
  }
  log_.info("Caches synced; starting workers", {{"workers", config_.workers}});
  for (int i = 0; i < config_.workers; ++i) workers_.emplace_back([this] { worker(); });
  ready_ = true;
  return okStatus();
}

void TrainingJobController::stop() {
  if (stopped_.exchange(true)) return;
  ready_ = false;
  queue_.shutDown();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  // All watches are cancelled at once, then joined: shutdown takes one cancellation, not five.
  const std::vector<Informer*> informers = {jobs_.get(), pods_.get(), nodes_.get(), services_.get(),
                                            config_maps_.get()};
  for (Informer* informer : informers) informer->requestStop();
  for (Informer* informer : informers) informer->stop();
}

void TrainingJobController::worker() {
  for (;;) {
    auto key = queue_.get();
    if (!key) return;
    MonoTime start = clock_.monoNow();
    Result<ReconcileResult> result = makeError(ErrorCode::kInternal, "not run");
    try {
      result = reconcile(*key);
    } catch (const std::exception& e) {  // controller-runtime's panic recovery
      result = makeError(ErrorCode::kInternal, std::string("reconcile threw: ") + e.what());
    }
    reconcile_seconds_.get().observe(
        std::chrono::duration<double>(clock_.monoNow() - start).count());
    if (!result) {
      ErrorCode code = result.error().code;
      if (code == ErrorCode::kInvalidArgument || code == ErrorCode::kFailedPrecondition) {
        reconciles_.labels({"terminal"}).inc();
        queue_.forget(*key);
      } else {
        reconciles_.labels({"error"}).inc();
        log_.info("Reconcile failed, will retry", {{"job", *key}, {"error", result.error()}});
        queue_.addRateLimited(*key);
      }
    } else if (result->requeue_after) {
      reconciles_.labels({"requeue_after"}).inc();
      queue_.forget(*key);
      queue_.addAfter(*key, *result->requeue_after);
    } else {
      reconciles_.labels({"success"}).inc();
      queue_.forget(*key);
    }
    queue_.done(*key);
  }
}

NodeFacts TrainingJobController::nodeFacts(const std::string& name) {
  auto node = nodes_->store().get(name);
  if (!node) return NodeFacts{};
  return nodeFactsOf(*node);
}

Status TrainingJobController::ensureChild(const ResourceType& type, Informer& cache,
                                          const Json& desired) {
  if (cache.store().get(objectKey(desired))) return okStatus();
  const std::string id = childId(desired);
  if (expectations_.pending(id, "", clock_.monoNow())) return okStatus();  // cache lags
  auto created = client_.create(type, objectNamespace(desired), desired);
  if (!created && created.error().code != ErrorCode::kAlreadyExists) {
    return std::unexpected(
        created.error().withContext("create " + type.kind + " " + objectName(desired)));
  }
  if (created) expectations_.expect(id, "", clock_.monoNow());
  return okStatus();
}

Result<ReconcileResult> TrainingJobController::reconcile(const std::string& key) {
  char id[24];
  std::snprintf(id, sizeof(id), "%llu",
                static_cast<unsigned long long>(reconcile_seq_.fetch_add(1) + 1));
  Logger log = log_.with({{"job", key}, {"reconcileID", id}});
  auto cached = jobs_->store().get(key);
  if (!cached) {
    // Deleted: children go through ownerReferences; forget our bookkeeping of the job.
    std::lock_guard lock(written_mu_);
    written_rv_.erase(key);
    status_due_.erase(key);
    return ReconcileResult{};
  }
  const Json& job = *cached;
  if (job["metadata"].contains("deletionTimestamp")) return ReconcileResult{};
  std::string managed_by = job.contains("spec") && job["spec"].is_object()
                               ? job["spec"].value("managedBy", std::string{})
                               : std::string{};
  if (!managed_by.empty() && managed_by != kControllerName) return ReconcileResult{};
  {
    std::lock_guard lock(written_mu_);
    auto it = written_rv_.find(key);
    auto rv = resourceVersionNumber(job);
    if (it != written_rv_.end() && rv && *rv < it->second) {
      // The cache has not seen our last status write yet; its watch event will requeue us.
      return ReconcileResult{std::chrono::seconds{1}};
    }
  }

  std::vector<Json> pods = pods_->store().byIndex(kPodsByJob, key);
  JobPlan plan = planReconcile(
      job, pods, [this](const std::string& n) { return nodeFacts(n); }, clock_.wallNow(),
      config_.pod_settings);

  if (plan.ensure_children) {
    auto spec = parseTrainingJobSpec(job);
    if (spec) {
      C4_RETURN_IF_ERROR(ensureChild(resources::services(), *services_,
                                     buildHeadlessService(job, config_.pod_settings)));
      C4_RETURN_IF_ERROR(
          ensureChild(resources::configMaps(), *config_maps_, buildPlanConfigMap(job, *spec)));
    }
  }

  // Status batching (the Job controller's syncJobBatchPeriod): a change that gates nothing
  // (the job is Pending or Running, no restart starts) is written once the batch period since
  // it was first seen has passed, so a job whose pods start within the period gets one status
  // write instead of two. Its events are recorded with that write (the plan recomputes them).
  // Everything else (restart intent, Failed, Succeeded, Suspended, ...) is written at once.
  std::optional<Duration> deferred;
  {
    const std::string phase = plan.status.value("phase", std::string{});
    bool urgent = plan.restart_started || (phase != phases::kPending && phase != phases::kRunning);
    MonoTime now = clock_.monoNow();
    std::lock_guard lock(written_mu_);
    if (plan.status_changed && !urgent && config_.status_batch_period > Duration::zero()) {
      auto [it, inserted] = status_due_.try_emplace(key, now + config_.status_batch_period);
      if (now < it->second) deferred = it->second - now;
    }
    if (!deferred) status_due_.erase(key);
  }

  if (plan.status_changed && !deferred) {
    Json updated = job;
    updated["status"] = plan.status;
    auto written = client_.update(resources::trainingJobs(), objectNamespace(job), updated,
                                  WriteOptions{.subresource = "status", .field_manager = ""});
    if (!written) return std::unexpected(written.error().withContext("status update"));
    if (auto rv = resourceVersionNumber(*written)) {
      std::lock_guard lock(written_mu_);
      written_rv_[key] = *rv;
    }
    log.info("Status updated", {{"phase", plan.status.value("phase", std::string{})},
                                {"restarts", plan.status.value("restarts", std::int64_t{0})}});
    if (plan.restart_started) restarts_.get().inc();
  }
  if (!deferred) {
    for (const auto& e : plan.events) events_.record(job, e.type, e.reason, e.message);
  }
  if (config_.fault_hook && plan.status_changed && !deferred) {
    // Failpoints: right after the status write lands, before any pod is touched.
    bool go_on = config_.fault_hook(kFailpointAfterStatus, key);
    if (go_on && plan.restart_started)
      go_on = config_.fault_hook(kFailpointAfterRestartStatus, key);
    if (!go_on) {
      return makeError(ErrorCode::kCancelled, "fault hook stopped the reconcile after status");
    }
  }

  for (const auto& d : plan.pods_to_delete) {
    DeleteOptions options;
    options.precondition_uid = d.uid;
    options.priority = RequestPriority::kCritical;  // the restart path goes first
    if (d.force) options.grace_period_seconds = 0;
    auto removed = client_.remove(resources::pods(), objectNamespace(job), d.name, options);
    if (!removed && removed.error().code != ErrorCode::kNotFound &&
        removed.error().code != ErrorCode::kConflict) {
      return std::unexpected(removed.error().withContext("delete pod " + d.name));
    }
    log.info("Pod deleted", {{"pod", d.name}, {"force", d.force}, {"why", d.why}});
  }
  // Pods are created concurrently (as the Job controller does in batches); the client's token
  // bucket still bounds the request rate, and serves these critical requests before status
  // writes and other jobs' Services (see PriorityTokenBucket). Each thread returns its result:
  // nothing throws across.
  // Pods created by an earlier reconcile that the cache has not shown yet are not created again.
  std::erase_if(plan.pods_to_create, [&](const Json& pod) {
    return expectations_.pending(childId(pod), childVersion(pod), clock_.monoNow());
  });
  const std::size_t count = plan.pods_to_create.size();
  std::vector<Result<Json>> results(count, Json::object());
  std::atomic<std::size_t> next{0};
  WriteOptions critical;
  critical.priority = RequestPriority::kCritical;
  auto createSome = [&]() noexcept {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        results[i] = client_.create(resources::pods(), objectNamespace(job), plan.pods_to_create[i],
                                    critical);
      } catch (const std::exception& e) {
        results[i] = makeError(ErrorCode::kInternal, std::string("create pod: ") + e.what());
      }
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < std::min<std::size_t>(count, config_.create_parallelism); ++t) {
    helpers.emplace_back(createSome);
  }
  createSome();
  for (auto& h : helpers) h.join();
  std::size_t created_count = 0;
  std::optional<Error> first_error;
  for (std::size_t i = 0; i < count; ++i) {
    if (results[i]) {
      expectations_.expect(childId(plan.pods_to_create[i]), childVersion(plan.pods_to_create[i]),
                           clock_.monoNow());
      pods_created_.get().inc();
      ++created_count;
    } else if (results[i].error().code != ErrorCode::kAlreadyExists && !first_error) {
      first_error =
          results[i].error().withContext("create pod " + objectName(plan.pods_to_create[i]));
    }
  }
  if (created_count > 0) log.info("Pods created", {{"count", created_count}});
  if (first_error) {
    events_.record(job, "Warning", "FailedCreatePod", first_error->message);
    return std::unexpected(*first_error);
  }
  std::optional<Duration> requeue = plan.requeue_after;
  if (deferred && (!requeue || *deferred < *requeue)) requeue = deferred;
  return ReconcileResult{requeue};
}

}  // namespace c4::op
