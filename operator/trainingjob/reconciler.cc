// TrainingJob controller.
#include "operator/trainingjob/reconciler.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <thread>

namespace c4::op {
namespace {

// Runs fn(i) for every i in [0, count) on up to `parallelism` threads, the caller's included.
// fn must not throw: an exception escaping a helper thread would terminate the process, so one
// is caught and reported through `on_exception(i, what)`.
template <typename Fn, typename OnException>
void forEachConcurrently(std::size_t count, std::size_t parallelism, Fn&& fn,
                         OnException&& on_exception) {
  std::atomic<std::size_t> next{0};
  auto work = [&]() noexcept {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (const std::exception& e) {
        on_exception(i, e.what());
      }
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < std::min(count, parallelism); ++t) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
}
const char* kPodsByJob = "trainingjob.byJob";
// How soon a job whose children have a problem someone must fix is looked at again.
constexpr Duration kProblemRecheck = std::chrono::seconds{10};
const char* kPodsByNode = "trainingjob.byNode";

// Identity and generation of a child for creation expectations.
std::string childId(const Json& object) {
  return stringAt(object, "kind").value_or("") + "/" + objectKey(object);
}
std::string childVersion(const Json& object) {
  return stringAt(object, "kind") == "Pod" ? labelOf(object, labels::kRestartAttempt)
                                           : std::string{};
}

// The uid of the TrainingJob that controls `object`, or "".
std::string controllerUid(const Json& object) {
  const Json* refs = arrayAt(fieldsOf(object, "metadata"), "ownerReferences");
  if (refs == nullptr) return {};
  for (const auto& ref : *refs) {
    if (boolAt(ref, "controller").value_or(false) && stringAt(ref, "kind") == "TrainingJob") {
      return stringAt(ref, "uid").value_or("");
    }
  }
  return {};
}

std::string trackKey(const std::string& job_key, const std::string& uid) {
  return job_key + "/" + uid;
}

// Errors that retrying the same request cannot fix: the user (or an admin) must act.
bool isTerminal(ErrorCode code) {
  return code == ErrorCode::kInvalidArgument || code == ErrorCode::kPermissionDenied ||
         code == ErrorCode::kUnauthenticated || code == ErrorCode::kNotFound ||
         code == ErrorCode::kFailedPrecondition;
}

}  // namespace

TrainingJobController::TrainingJobController(KubeClient& client, Clock& clock,
                                             SharedInformers& informers, ControllerConfig config,
                                             metrics::Registry& registry)
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
      pods_created_(registry.counter("c4_operator_pods_created_total", "Pods created.")),
      child_errors_(registry.counter("c4_operator_child_errors_total",
                                     "Children the operator could not create, by kind and reason.",
                                     {"kind", "reason"})) {
  for (const char* result : {"success", "error", "requeue_after"}) {
    reconciles_.labels({result});
  }
  restarts_.get();
  pods_created_.get();
  const std::string& ns = config_.watch_namespace;
  jobs_ = &informers.informerFor(resources::trainingJobs(), ns);
  pods_ = &informers.informerFor(resources::pods(), ns, labels::kJobName);
  nodes_ = &informers.informerFor(resources::nodes());
  services_ = &informers.informerFor(resources::services(), ns, labels::kJobName);
  pods_->store().addIndex(kPodsByJob, [](const Json& pod) {
    std::string job = labelOf(pod, labels::kJobName);
    if (job.empty()) return std::vector<std::string>{};
    return std::vector<std::string>{objectKey(objectNamespace(pod), job)};
  });
  pods_->store().addIndex(kPodsByNode, [](const Json& pod) {
    std::string node = stringAt(fieldsOf(pod, "spec"), "nodeName").value_or("");
    if (node.empty()) return std::vector<std::string>{};
    return std::vector<std::string>{node};
  });
  jobs_->addHandler([this](InformerEvent event, const Json*, const Json& job) {
    std::string key = objectKey(job);
    {
      // A cache that has caught up with our last status write releases the guard.
      std::lock_guard lock(written_mu_);
      auto it = written_rv_.find(key);
      auto rv = resourceVersionNumber(job);
      if (it != written_rv_.end() && rv && *rv >= it->second) written_rv_.erase(it);
    }
    if (event == InformerEvent::kDelete) {
      std::lock_guard lock(tracks_mu_);
      tracks_.erase(trackKey(key, stringAt(fieldsOf(job, "metadata"), "uid").value_or("")));
    }
    queue_.add(key);
  });
  auto child = [this](InformerEvent, const Json*, const Json& object) {
    expectations_.observed(childId(object), childVersion(object));
    enqueueJobOf(object);
  };
  pods_->addHandler([this, child](InformerEvent event, const Json* old_object, const Json& pod) {
    trackPod(event, pod);
    child(event, old_object, pod);
  });
  services_->addHandler(child);
  nodes_->addHandler([this](InformerEvent, const Json* old_node, const Json& node) {
    // Only readiness, cordon and our taint matter (force deletion); heartbeats do not.
    if (old_node != nullptr && nodeFactsOf(*old_node) == nodeFactsOf(node)) return;
    for (const auto& pod : pods_->store().byIndex(kPodsByNode, objectName(node))) {
      enqueueJobOf(pod);
    }
  });
  job_metrics_ =
      std::make_unique<JobMetrics>([this] { return jobs_->store().list(); }, clock, registry);
}

TrainingJobController::~TrainingJobController() {
  stop();
}

void TrainingJobController::enqueueJobOf(const Json& object) {
  std::string job = labelOf(object, labels::kJobName);
  if (!job.empty()) queue_.add(objectKey(objectNamespace(object), job));
}

void TrainingJobController::trackPod(InformerEvent event, const Json& pod) {
  std::string job = labelOf(pod, labels::kJobName);
  std::string uid = controllerUid(pod);
  auto attempt = intLabelOf(pod, labels::kRestartAttempt);
  auto index = intLabelOf(pod, labels::kReplicaIndex);
  if (job.empty() || uid.empty() || !attempt || !index) return;
  std::lock_guard lock(tracks_mu_);
  PodTrack& track = tracks_[trackKey(objectKey(objectNamespace(pod), job), uid)];
  if (*attempt < track.attempt) return;  // an earlier attempt's pod going away
  if (*attempt > track.attempt) track = PodTrack{*attempt, {}, {}};
  track.indexes.insert(*index);
  if (event == InformerEvent::kDelete) {
    // The deletion event carries the last state the watch saw (a Failed phase, its exit code).
    track.gone[*index] = pod;
  } else {
    track.gone.erase(*index);
  }
}

Status TrainingJobController::start() {
  std::lock_guard lock(lifecycle_mu_);
  if (stopped_) return makeError(ErrorCode::kCancelled, "controller stopped before it started");
  if (!workers_.empty()) return okStatus();
  log_.info("Starting workers", {{"workers", config_.workers}});
  for (int i = 0; i < config_.workers; ++i) workers_.emplace_back([this] { worker(); });
  ready_ = true;
  return okStatus();
}

void TrainingJobController::stop() {
  {
    std::lock_guard lock(lifecycle_mu_);
    if (stopped_.exchange(true)) return;
    ready_ = false;
    queue_.shutDown();
  }
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void TrainingJobController::worker() {
  for (;;) {
    auto key = queue_.get();
    if (!key) return;
    MonoTime start = clock_.monoNow();
    Result<ReconcileResult> result = makeError(ErrorCode::kInternal, "not run");
    try {
      result = reconcile(*key);
    } catch (const Json::exception& e) {
      // A field of another type that no check caught: retrying reads the same object again, so
      // it is left alone (with an Event) until it changes; the other jobs go on.
      log_.warn("Job cannot be read, left alone until it changes",
                {{"job", *key}, {"error", e.what()}});
      if (auto job = jobs_->store().get(*key)) {
        events_.record(*job, "Warning", "InvalidObject",
                       std::string("the object cannot be read, it is left alone until it "
                                   "changes: ") +
                           e.what());
      }
      result = ReconcileResult{};
    } catch (const std::exception& e) {  // controller-runtime's panic recovery
      result = makeError(ErrorCode::kInternal, std::string("reconcile threw: ") + e.what());
    }
    reconcile_seconds_.get().observe(
        std::chrono::duration<double>(clock_.monoNow() - start).count());
    if (!result) {
      reconciles_.labels({"error"}).inc();
      log_.info("Reconcile failed, will retry", {{"job", *key}, {"error", result.error()}});
      queue_.addRateLimited(*key);
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

TrainingJobController::ChildOutcome TrainingJobController::classifyExisting(
    const ResourceType& type, const Json& desired, const Json& job) {
  auto existing = client_.get(type, objectNamespace(desired), objectName(desired));
  if (!existing) {
    // Gone again in between (NotFound) or the read failed: try again later.
    return {std::nullopt, existing.error().withContext("read " + type.kind + " " +
                                                       objectName(desired) + " after a conflict")};
  }
  // Ours: the cache has not shown it yet, or no longer does (its label was taken off).
  if (isControlledBy(*existing, job)) return repairChild(type, *existing, desired, job, false);
  std::string owner = controllerUid(*existing);
  return {
      ChildProblem{"NameConflict",
                   type.kind + " " + objectName(desired) +
                       " already exists and is not controlled by this TrainingJob" +
                       (owner.empty() ? std::string{} : " (its controller is uid " + owner + ")") +
                       "; rename the job or delete that object",
                   true},
      std::nullopt};
}

TrainingJobController::ChildOutcome TrainingJobController::ensureChild(const ResourceType& type,
                                                                       Informer& cache,
                                                                       const Json& desired,
                                                                       const Json& job) {
  if (auto cached = cache.store().get(objectKey(desired))) {
    if (isControlledBy(*cached, job)) return repairChild(type, *cached, desired, job, true);
    return classifyExisting(type, desired, job);
  }
  const std::string id = childId(desired);
  if (expectations_.pending(id, "", clock_.monoNow())) return {};  // cache lags
  // Raised before the create (client-go): the informer may report the object before create()
  // returns, and must then find the expectation to lower.
  expectations_.expect(id, "", clock_.monoNow());
  auto created = client_.create(type, objectNamespace(desired), desired);
  if (created) return {};
  expectations_.lower(id, "");
  const Error& e = created.error();
  if (e.code == ErrorCode::kAlreadyExists) return classifyExisting(type, desired, job);
  Error context = e.withContext("create " + type.kind + " " + objectName(desired));
  if (isTerminal(e.code)) {
    child_errors_.labels({type.kind, std::string(errorCodeName(e.code))}).inc();
    return {ChildProblem{"FailedCreate", context.message, type.kind == "Service"}, std::nullopt};
  }
  return {std::nullopt, context};
}

TrainingJobController::ChildOutcome TrainingJobController::repairChild(const ResourceType& type,
                                                                       const Json& existing,
                                                                       const Json& desired,
                                                                       const Json& job,
                                                                       bool from_cache) {
  if (type.resource != resources::services().resource) return {};
  if (serviceDrift(existing, desired).empty()) return {};
  const std::string what = type.kind + " " + objectName(desired);
  Json current = existing;
  if (from_cache) {
    // The cache may not show our own last write yet: the API server decides.
    auto read = client_.get(type, objectNamespace(desired), objectName(desired));
    if (!read) {
      if (read.error().code == ErrorCode::kNotFound) return {};  // its delete event follows
      return {std::nullopt, read.error().withContext("read " + what)};
    }
    if (!isControlledBy(*read, job)) return {};  // replaced: the next reconcile classifies it
    current = std::move(*read);
  }
  const std::string drift = serviceDrift(current, desired);
  if (drift.empty()) return {};
  auto updated =
      client_.update(type, objectNamespace(desired), restoreService(std::move(current), desired));
  if (!updated) return {std::nullopt, updated.error().withContext("put back " + what)};
  log_.warn("Child changed by someone else; put back",
            {{"job", objectKey(job)}, {"child", what}, {"fields", drift}});
  events_.record(job, "Warning", "ServiceRepaired",
                 what + " was changed by someone else (" + drift + "); put back");
  return {};
}

void TrainingJobController::runCordons(const Json& job, const std::vector<NodeCordon>& cordons,
                                       const Logger& log) {
  for (const auto& c : cordons) {
    if (config_.remediator == nullptr) {
      events_.record(job, "Warning", "NodeFaultSuspected",
                     "Node " + c.node + " has node-level evidence of a fault (" + c.reason +
                         "); node actions are not configured");
      continue;
    }
    auto outcome = config_.remediator->cordon(c.node, c.reason, c.dry_run);
    if (!outcome) {
      // The restart must not wait for a node write: report it and go on. Unless the node is
      // gone, the remediator owes the cordon and retries it until it lands.
      log.warn("Cordon failed", {{"node", c.node}, {"error", outcome.error()}});
      events_.record(job, "Warning", "CordonFailed",
                     "Could not cordon node " + c.node + ": " + outcome.error().message +
                         (outcome.error().code == ErrorCode::kNotFound || c.dry_run
                              ? std::string{}
                              : "; the cordon is owed and retried until it lands"));
      continue;
    }
    switch (*outcome) {
      case CordonOutcome::kCordoned:
        events_.record(
            job, "Warning", "NodeCordoned",
            "Cordoned and tainted node " + c.node + " c4.dev/faulty:NoSchedule: " + c.reason);
        break;
      case CordonOutcome::kDryRun:
        events_.record(job, "Normal", "CordonDryRun",
                       "Would cordon and taint node " + c.node + ": " + c.reason);
        break;
      case CordonOutcome::kBreakerOpen:
        events_.record(job, "Warning", "CordonSkipped",
                       "Node " + c.node + " was not cordoned: the circuit breaker is open");
        break;
      case CordonOutcome::kOwed:
        events_.record(job, "Warning", "CordonFailed",
                       "Could not cordon node " + c.node +
                           " yet (see the node's Events); the cordon is owed, its circuit "
                           "breaker slot held, and retried until it lands");
        break;
      case CordonOutcome::kAlreadyOurs:
        break;
    }
  }
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
    pod_problems_.erase(key);
    return ReconcileResult{};
  }
  const Json& job = *cached;
  if (fieldsOf(job, "metadata").contains("deletionTimestamp")) return ReconcileResult{};
  std::string managed_by = stringAt(fieldsOf(job, "spec"), "managedBy").value_or("");
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

  PlanContext context;
  context.settings = config_.pod_settings;
  context.goodput_period = config_.goodput_period;
  {
    std::lock_guard lock(tracks_mu_);
    auto it = tracks_.find(trackKey(key, stringAt(fieldsOf(job, "metadata"), "uid").value_or("")));
    if (it != tracks_.end()) {
      context.observed_attempt = it->second.attempt;
      context.observed_indexes = it->second.indexes;
      context.gone_pods = it->second.gone;
    }
  }

  // Children first: their problems are part of the status written below. The plan ConfigMap
  // is not one of them: the traffic-plan controller is its single writer (the pods mount it
  // optional).
  std::optional<Error> retry;
  if (parseTrainingJobSpec(job)) {
    ChildOutcome outcome = ensureChild(resources::services(), *services_,
                                       buildHeadlessService(job, config_.pod_settings), job);
    if (outcome.problem) context.child_problem = outcome.problem;
    if (outcome.retry) retry = outcome.retry;
    if (outcome.problem) {
      events_.record(job, "Warning", outcome.problem->reason.c_str(), outcome.problem->message);
    }
  }
  {
    std::lock_guard lock(written_mu_);
    auto it = pod_problems_.find(key);
    if (!context.child_problem && it != pod_problems_.end()) context.child_problem = it->second;
  }

  if (config_.checkpoint_source) context.reported_checkpoint = config_.checkpoint_source(key);
  if (config_.diagnosis_source) context.diagnosis = config_.diagnosis_source(key);
  std::vector<Json> pods = pods_->store().byIndex(kPodsByJob, key);
  JobPlan plan = planReconcile(
      job, pods, [this](const std::string& n) { return nodeFacts(n); }, clock_.wallNow(), context);

  // Cordons go before the status write: they are idempotent, so a crash in between repeats them
  // harmlessly from the same observed failure, which is still there until the pods are deleted.
  if (!plan.cordons.empty()) runCordons(job, plan.cordons, log);

  // Status batching (the Job controller's syncJobBatchPeriod): a change that gates nothing
  // (the job is Pending or Running, no restart starts) is written once the batch period since
  // it was first seen has passed, so a job whose pods start within the period gets one status
  // write instead of two. Its events are recorded with that write (the plan recomputes them).
  // Everything else (restart intent, Failed, Succeeded, Suspended, Degraded...) is written at
  // once.
  std::optional<Duration> deferred;
  {
    const std::string phase = plan.status.phase.value_or("");
    auto observed = parseTrainingJobStatus(job);
    bool urgent = plan.restart_started ||
                  (phase != phases::kPending && phase != phases::kRunning) ||
                  isConditionTrue(plan.status, conditions::kDegraded) !=
                      (observed && isConditionTrue(*observed, conditions::kDegraded));
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
    updated["status"] = trainingJobStatusJson(plan.status);
    auto written = client_.update(resources::trainingJobs(), objectNamespace(job), updated,
                                  WriteOptions{.subresource = "status", .field_manager = ""});
    if (!written) return std::unexpected(written.error().withContext("status update"));
    if (auto rv = resourceVersionNumber(*written)) {
      std::lock_guard lock(written_mu_);
      written_rv_[key] = *rv;
    }
    log.info("Status updated", {{"phase", plan.status.phase.value_or("")},
                                {"restarts", plan.status.restarts.value_or(0)}});
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

  // Pods are deleted concurrently, like they are created below: a restart of a 1,024-pod job
  // is otherwise bound by 1,024 round trips in a row. The client's token bucket still bounds the
  // rate; the first error is returned once every delete has been tried.
  {
    const std::size_t count = plan.pods_to_delete.size();
    std::vector<Status> removed(count);
    forEachConcurrently(
        count, config_.create_parallelism,
        [&](std::size_t i) {
          const auto& d = plan.pods_to_delete[i];
          DeleteOptions options;
          options.precondition_uid = d.uid;
          options.priority = RequestPriority::kCritical;  // the restart path goes first
          if (d.force) options.grace_period_seconds = 0;
          removed[i] = client_.remove(resources::pods(), objectNamespace(job), d.name, options);
        },
        [&](std::size_t i, const char* what) {
          removed[i] = makeError(ErrorCode::kInternal, std::string("delete pod: ") + what);
        });
    std::optional<Error> first_error;
    for (std::size_t i = 0; i < count; ++i) {
      const auto& d = plan.pods_to_delete[i];
      if (!removed[i] && removed[i].error().code != ErrorCode::kNotFound &&
          removed[i].error().code != ErrorCode::kConflict) {
        if (!first_error) first_error = removed[i].error().withContext("delete pod " + d.name);
        continue;
      }
      log.info("Pod deleted", {{"pod", d.name}, {"force", d.force}, {"why", d.why}});
    }
    if (first_error) return std::unexpected(*first_error);
  }
  // Pods are created concurrently (as the Job controller does in batches); the client's token
  // bucket still bounds the request rate, and serves these critical requests before status
  // writes and other jobs' Services (see PriorityTokenBucket). Each thread returns its result:
  // nothing throws across. Pods created by an earlier reconcile that the cache has not shown
  // yet are not created again; an expectation is raised before each create and lowered when
  // the create fails.
  std::erase_if(plan.pods_to_create, [&](const Json& pod) {
    return expectations_.pending(childId(pod), childVersion(pod), clock_.monoNow());
  });
  const std::size_t count = plan.pods_to_create.size();
  for (const auto& pod : plan.pods_to_create) {
    expectations_.expect(childId(pod), childVersion(pod), clock_.monoNow());
  }
  std::vector<Result<Json>> results(count, Json::object());
  WriteOptions critical;
  critical.priority = RequestPriority::kCritical;
  forEachConcurrently(
      count, config_.create_parallelism,
      [&](std::size_t i) {
        results[i] = client_.create(resources::pods(), objectNamespace(job), plan.pods_to_create[i],
                                    critical);
      },
      [&](std::size_t i, const char* what) {
        results[i] = makeError(ErrorCode::kInternal, std::string("create pod: ") + what);
      });
  std::size_t created_count = 0;
  std::optional<ChildProblem> pod_problem;
  for (std::size_t i = 0; i < count; ++i) {
    const Json& pod = plan.pods_to_create[i];
    if (results[i]) {
      pods_created_.get().inc();
      ++created_count;
      continue;
    }
    expectations_.lower(childId(pod), childVersion(pod));
    const Error& e = results[i].error();
    ChildOutcome outcome;
    if (e.code == ErrorCode::kAlreadyExists) {
      outcome = classifyExisting(resources::pods(), pod, job);
    } else {
      Error context_error = e.withContext("create Pod " + objectName(pod));
      if (isTerminal(e.code)) {
        child_errors_.labels({"Pod", std::string(errorCodeName(e.code))}).inc();
        outcome.problem = ChildProblem{"FailedCreate", context_error.message, false};
      } else {
        outcome.retry = context_error;
      }
    }
    if (outcome.retry && !retry) retry = outcome.retry;
    if (outcome.problem && !pod_problem) pod_problem = outcome.problem;
  }
  if (created_count > 0) log.info("Pods created", {{"count", created_count}});
  {
    std::lock_guard lock(written_mu_);
    if (pod_problem) {
      pod_problems_[key] = *pod_problem;
    } else {
      pod_problems_.erase(key);  // no create failed this time
    }
  }
  if (pod_problem) {
    events_.record(job, "Warning",
                   pod_problem->reason == "NameConflict" ? "NameConflict" : "FailedCreatePod",
                   pod_problem->message);
  }
  // A transient error retries with the queue's exponential backoff; a problem someone must fix
  // (a foreign object, an invalid or forbidden child) is looked at again every
  // kProblemRecheck, so the job recovers soon after the fix without a tight loop (its Events
  // are aggregated meanwhile). The next reconcile writes a pod problem's Degraded condition.
  if (retry) return std::unexpected(*retry);
  std::optional<Duration> requeue = plan.requeue_after;
  if (deferred && (!requeue || *deferred < *requeue)) requeue = deferred;
  if ((pod_problem || context.child_problem) && (!requeue || *requeue > kProblemRecheck)) {
    // A new pod problem is not in the status yet: soon, to write it; then every recheck.
    requeue = context.child_problem ? kProblemRecheck : Duration{std::chrono::seconds{1}};
  }
  return ReconcileResult{requeue};
}

}  // namespace c4::op
