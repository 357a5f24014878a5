// The TrainingJob reconcile planner.
#include "operator/trainingjob/planner.h"

#include <algorithm>
#include <charconv>

namespace c4::op {
namespace {

const Json& statusOf(const Json& object) {
  static const Json empty = Json::object();
  auto it = object.find("status");
  return it != object.end() && it->is_object() ? *it : empty;
}

std::string podPhase(const Json& pod) {
  return stringAt(statusOf(pod), "phase").value_or("");
}

bool isDeleting(const Json& pod) {
  const Json& meta = fieldsOf(pod, "metadata");
  return meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
}

bool isPodReady(const Json& pod) {
  const Json& status = statusOf(pod);
  auto conds = status.find("conditions");
  if (conds == status.end() || !conds->is_array()) return false;
  for (const auto& c : *conds) {
    if (stringAt(c, "type") == "Ready") return stringAt(c, "status") == "True";
  }
  return false;
}

std::string nodeNameOf(const Json& pod) {
  return stringAt(fieldsOf(pod, "spec"), "nodeName").value_or("");
}

// The first terminated container (of that name, when given) with a non-zero exit code.
struct Terminated {
  std::string container;
  std::int64_t exit_code = 0;
  std::string reason;  // OOMKilled, Error, ...
};
// Every terminated container (of that name, when given) with a non-zero exit code.
std::vector<Terminated> terminatedContainers(const Json& pod, const std::string& container) {
  std::vector<Terminated> out;
  const Json& status = statusOf(pod);
  auto list = status.find("containerStatuses");
  if (list == status.end() || !list->is_array()) return out;
  for (const auto& cs : *list) {
    if (!cs.is_object()) continue;
    std::string name = stringAt(cs, "name").value_or("");
    if (!container.empty() && name != container) continue;
    auto state = cs.find("state");
    if (state == cs.end() || !state->is_object()) continue;
    auto t = state->find("terminated");
    if (t == state->end() || !t->is_object()) continue;
    auto code = t->find("exitCode");
    if (code == t->end() || !code->is_number_integer() || code->get<std::int64_t>() == 0) continue;
    out.push_back({name, code->get<std::int64_t>(), stringAt(*t, "reason").value_or("")});
  }
  return out;
}
std::optional<Terminated> terminatedExit(const Json& pod, const std::string& container) {
  auto all = terminatedContainers(pod, container);
  if (all.empty()) return std::nullopt;
  return all.front();
}

// The pod's condition of `type` as (status, reason), if present.
std::optional<std::pair<std::string, std::string>> podCondition(const Json& pod,
                                                                const std::string& type) {
  const Json& status = statusOf(pod);
  auto list = status.find("conditions");
  if (list == status.end() || !list->is_array()) return std::nullopt;
  for (const auto& c : *list) {
    if (stringAt(c, "type") == type) {
      return std::pair{stringAt(c, "status").value_or(""), stringAt(c, "reason").value_or("")};
    }
  }
  return std::nullopt;
}

bool ruleMatches(const FailurePolicyRule& rule, const Json& pod) {
  if (rule.on_exit_codes) {
    const ExitCodeRule& e = *rule.on_exit_codes;
    // batch Job semantics: some terminated container's non-zero exit code is (In) or is not
    // (NotIn) in the set.
    bool any = false;
    for (const auto& t : terminatedContainers(pod, e.container_name)) {
      bool listed = std::find(e.values.begin(), e.values.end(), t.exit_code) != e.values.end();
      if (listed == e.in) any = true;
    }
    if (!any) return false;
  }
  for (const auto& pc : rule.on_pod_conditions) {
    auto c = podCondition(pod, pc.type);
    if (!c || c->first != pc.status) return false;
  }
  return true;
}

// Pod status reasons that mean the pod was stopped from outside, not by its own code.
bool isDisruptionReason(const std::string& reason) {
  static constexpr const char* kReasons[] = {"Evicted",
                                             "NodeLost",
                                             "Preempting",
                                             "NodeShutdown",
                                             "Terminated",
                                             "Shutdown",
                                             "UnexpectedAdmissionError"};
  return std::any_of(std::begin(kReasons), std::end(kReasons),
                     [&](const char* r) { return reason == r; });
}

std::string describePod(const Json* pod, std::int64_t index, const std::string& name) {
  std::string text = "pod " + name + " (rank " + std::to_string(index) + ")";
  if (pod != nullptr) {
    std::string node = nodeNameOf(*pod);
    if (!node.empty()) text += " on node " + node;
  }
  return text;
}

std::optional<std::int64_t> lastCheckpointStep(const TrainingJobStatus& status) {
  if (!status.last_checkpoint) return std::nullopt;
  return status.last_checkpoint->step;
}

// Adds the whole seconds since goodput.lastUpdateTime (or phaseSince) to productiveSeconds
// (Running) or lostSeconds (Restarting) and moves lastUpdateTime by exactly that much, so
// frequent updates lose no fractions.
void accrueGoodput(TrainingJobStatus& status, WallTime now) {
  GoodputStatus& goodput = status.goodput ? *status.goodput : status.goodput.emplace();
  auto since = parseRfc3339(goodput.last_update_time.value_or(""));
  if (!since) since = parseRfc3339(status.phase_since.value_or(""));
  if (!since || *since > now) since = now;
  auto whole = std::chrono::duration_cast<std::chrono::seconds>(now - *since);
  const std::string phase = status.phase.value_or("");
  if (phase == phases::kRunning) {
    goodput.productive_seconds = goodput.productive_seconds.value_or(0) + whole.count();
  } else if (phase == phases::kRestarting) {
    goodput.lost_seconds = goodput.lost_seconds.value_or(0) + whole.count();
  }
  if (!goodput.productive_seconds) goodput.productive_seconds = 0;
  if (!goodput.lost_seconds) goodput.lost_seconds = 0;
  goodput.last_update_time = formatRfc3339(*since + whole);
}

void setPhase(TrainingJobStatus& status, const std::string& phase, WallTime now) {
  if (status.phase.value_or("") == phase) return;
  accrueGoodput(status, now);
  status.phase = phase;
  status.phase_since = formatRfc3339(now);
}

void addFault(TrainingJobStatus& status, const FaultRecord& fault) {
  status.faults.push_back(fault);
  while (status.faults.size() > kMaxFaults) status.faults.erase(status.faults.begin());
  status.last_fault = fault.summary.value_or("");
}

// One pod of the current attempt that stopped: failed, being deleted, or gone.
struct StoppedPod {
  std::int64_t index = 0;
  std::string name;
  const Json* pod = nullptr;  // as last seen; null when it vanished unseen
  bool deleted = false;
  FailureVerdict verdict;
  std::string node;
  std::optional<WallTime> stopped_at;     // stopTimeOf; nullopt: unknown
  std::optional<std::int64_t> exit_code;  // failedExitCode
};

std::optional<WallTime> timeAt(const Json& object, const char* key) {
  auto text = stringAt(object, key);
  return text ? parseRfc3339(*text) : std::nullopt;
}

// The containers' terminations (state.terminated, else lastState.terminated, of each container)
// as (finishedAt, exit code), in the order the containers are listed.
std::vector<std::pair<std::optional<WallTime>, std::int64_t>> terminations(const Json& pod) {
  std::vector<std::pair<std::optional<WallTime>, std::int64_t>> out;
  const Json& status = statusOf(pod);
  auto list = status.find("containerStatuses");
  if (list == status.end() || !list->is_array()) return out;
  for (const auto& cs : *list) {
    if (!cs.is_object()) continue;
    for (const char* key : {"state", "lastState"}) {
      auto state = cs.find(key);
      if (state == cs.end() || !state->is_object()) continue;
      auto t = state->find("terminated");
      if (t == state->end() || !t->is_object()) continue;
      auto code = t->find("exitCode");
      out.emplace_back(timeAt(*t, "finishedAt"), code != t->end() && code->is_number_integer()
                                                     ? code->get<std::int64_t>()
                                                     : 0);
      break;  // the current state's termination, when there is one, is the newest
    }
  }
  return out;
}

// The exit code of the pod's failed container: of the one that finished first (by finishedAt;
// one without a time after those with one, then in list order). nullopt when no container
// reports a non-zero exit code.
std::optional<std::int64_t> failedExitCode(const Json& pod) {
  std::optional<std::pair<std::optional<WallTime>, std::int64_t>> best;
  for (const auto& t : terminations(pod)) {
    if (t.second == 0) continue;
    if (!best || (t.first && (!best->first || *t.first < *best->first))) best = t;
  }
  if (!best) return std::nullopt;
  return best->second;
}

// When a stopped pod stopped, for ordering the pods of one fault (the first to fail is the
// culprit; the others are usually its victims). In order of preference:
//  1. the earliest finishedAt of its containers that failed (non-zero exit), else of any
//     terminated container (state.terminated, or lastState.terminated when the container has
//     no current termination);
//  2. without a container termination (a pod evicted, deleted or failed before its containers
//     reported): the DisruptionTarget condition's lastTransitionTime (the moment an eviction,
//     preemption or the taint manager marked it), else the time its deletion was requested
//     (deletionTimestamp - deletionGracePeriodSeconds), else the lastTransitionTime of its Ready
//     condition turned False;
//  3. nullopt (a pod that vanished unseen, or one without any of these): it orders after every
//     pod with a time.
// Kubernetes writes these times in whole seconds, so pods that failed within one second tie
// (the lowest index wins).
std::optional<WallTime> stopTimeOf(const Json* pod) {
  if (pod == nullptr) return std::nullopt;
  std::optional<WallTime> failed, any;
  for (const auto& [at, code] : terminations(*pod)) {
    if (!at) continue;
    if (!any || *at < *any) any = at;
    if (code != 0 && (!failed || *at < *failed)) failed = at;
  }
  if (failed) return failed;
  if (any) return any;
  const Json& status = statusOf(*pod);
  const Json* ready = nullptr;
  const Json* disruption = nullptr;
  if (auto list = status.find("conditions"); list != status.end() && list->is_array()) {
    for (const auto& c : *list) {
      if (stringAt(c, "type") == "DisruptionTarget" && stringAt(c, "status") == "True") {
        disruption = &c;
      }
      if (stringAt(c, "type") == "Ready" && stringAt(c, "status") == "False") ready = &c;
    }
  }
  if (disruption != nullptr) {
    if (auto at = timeAt(*disruption, "lastTransitionTime")) return at;
  }
  const Json& meta = fieldsOf(*pod, "metadata");
  if (auto deletion = timeAt(meta, "deletionTimestamp")) {
    auto grace = intAt(meta, "deletionGracePeriodSeconds").value_or(0);
    return *deletion - std::chrono::seconds{std::max<std::int64_t>(grace, 0)};
  }
  if (ready != nullptr) return timeAt(*ready, "lastTransitionTime");
  return std::nullopt;
}

// The deciding pod of a fault: a FailJob verdict wins (the pod failure policy's decision), then a
// failure counted against maxRestarts, then the rest; within one of these the pod that stopped
// first (stopTimeOf; an unknown time last), then the lowest index.
const StoppedPod& decidingPod(const std::vector<StoppedPod>& stopped) {
  auto precedence = [](const StoppedPod& s) {
    switch (s.verdict.action) {
      case FailureAction::kFailJob:
        return 0;
      case FailureAction::kRestart:
        return 1;
      case FailureAction::kIgnore:
        return 2;
    }
    return 2;
  };
  auto before = [&](const StoppedPod& a, const StoppedPod& b) {
    if (precedence(a) != precedence(b)) return precedence(a) < precedence(b);
    if (a.stopped_at.has_value() != b.stopped_at.has_value()) return a.stopped_at.has_value();
    if (a.stopped_at && *a.stopped_at != *b.stopped_at) return *a.stopped_at < *b.stopped_at;
    return a.index < b.index;
  };
  return *std::min_element(stopped.begin(), stopped.end(), before);
}

// A crash the trainer is charged for: counted against maxRestarts (not a disruption, a C4D
// diagnosis or a requested restart).
bool isCountedCrash(const FaultRecord& f) {
  return f.counted.value_or(false) && f.fault_class.value_or("") == "crash";
}

// Two counted crashes are the same crash when they have the same exit code; when neither knows
// its exit code (a pod failed without a container termination), when they are of the same rank.
bool sameCrash(const FaultRecord& a, const FaultRecord& b) {
  if (a.exit_code || b.exit_code) return a.exit_code == b.exit_code;
  return a.rank && a.rank == b.rank;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// A deterministic crash of the trainer (issue #24): `crash` (a counted crash of this attempt)
// and the limit-1 counted crashes before it in `history` (status.faults, oldest first) are the
// same crash, on at least two nodes. Faults that are not counted crashes (disruptions, C4D
// diagnoses, requested restarts) are skipped: they neither join nor break the run. Returns the
// explanation ("exit code 3 in 3 attempts in a row (attempts 4, 5, 6; rank 1; nodes a, b)"), or
// nullopt. The history is status.faults alone, so the decision survives an operator restart;
// since the list is bounded (kMaxFaults), crashes pushed out of it are not seen.
std::optional<std::string> repeatedIdenticalCrash(const std::vector<FaultRecord>& history,
                                                  const FaultRecord& crash, std::int64_t limit) {
  if (limit < 2 || !isCountedCrash(crash)) return std::nullopt;
  const auto wanted = static_cast<std::size_t>(limit);
  std::vector<const FaultRecord*> run{&crash};
  for (auto it = history.rbegin(); it != history.rend() && run.size() < wanted; ++it) {
    if (!isCountedCrash(*it)) continue;
    if (!sameCrash(*it, crash)) break;
    run.push_back(&*it);
  }
  if (run.size() < wanted) return std::nullopt;
  std::reverse(run.begin(), run.end());
  std::vector<std::string> attempts, ranks, nodes;
  auto addOnce = [](std::vector<std::string>& list, const std::string& item) {
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
  };
  for (const FaultRecord* f : run) {
    attempts.push_back(f->attempt ? std::to_string(*f->attempt) : std::string{"?"});
    if (f->rank) addOnce(ranks, std::to_string(*f->rank));
    if (!f->node.value_or("").empty()) addOnce(nodes, *f->node);
  }
  // The same crash on one node may be that node's fault: maxRestarts decides.
  if (nodes.size() < 2) return std::nullopt;
  std::string identity =
      crash.exit_code ? "exit code " + std::to_string(*crash.exit_code)
                      : "rank " + std::to_string(crash.rank.value_or(-1)) + " (exit code unknown)";
  return identity + " in " + std::to_string(run.size()) + " attempts in a row (attempts " +
         joined(attempts) + "; " + (ranks.size() == 1 ? "rank " : "ranks ") + joined(ranks) +
         "; nodes " + joined(nodes) + ")";
}

}  // namespace

NodeFacts nodeFactsOf(const Json& node) {
  NodeFacts facts;
  facts.exists = true;
  facts.ready = false;
  auto spec = node.find("spec");
  if (spec != node.end() && spec->is_object()) {
    facts.unschedulable = boolAt(*spec, "unschedulable").value_or(false);
    auto taints = spec->find("taints");
    if (taints != spec->end() && taints->is_array()) {
      for (const auto& t : *taints) {
        if (stringAt(t, "key") == kFaultyTaintKey) {
          facts.faulty_taint = true;
        }
      }
    }
  }
  auto status = node.find("status");
  if (status != node.end() && status->is_object()) {
    auto conds = status->find("conditions");
    if (conds != status->end() && conds->is_array()) {
      for (const auto& c : *conds) {
        if (stringAt(c, "type") == "Ready") {
          facts.ready = stringAt(c, "status") == "True";
        }
      }
    }
  }
  return facts;
}

FailureVerdict classifyFailure(const Json* pod, bool deleted, const NodeFacts& node,
                               const std::vector<FailurePolicyRule>& rules) {
  FailureVerdict v;
  if (pod != nullptr && podPhase(*pod) == "Failed") {
    for (std::size_t i = 0; i < rules.size(); ++i) {
      if (!ruleMatches(rules[i], *pod)) continue;
      v.action = rules[i].action;
      v.infrastructure = rules[i].action == FailureAction::kIgnore;
      auto exit = terminatedExit(*pod, "");
      v.why = "podFailurePolicy rule " + std::to_string(i) + " (" +
              std::string(failureActionName(v.action)) + ")" +
              (exit ? " matched exit code " + std::to_string(exit->exit_code) : std::string{});
      return v;
    }
  }
  if (pod != nullptr) {
    if (auto dt = podCondition(*pod, "DisruptionTarget"); dt && dt->first == "True") {
      v.action = FailureAction::kIgnore;
      v.infrastructure = true;
      v.why = "DisruptionTarget: " + (dt->second.empty() ? std::string{"disrupted"} : dt->second);
      return v;
    }
    std::string reason = stringAt(statusOf(*pod), "reason").value_or("");
    if (isDisruptionReason(reason)) {
      v.action = FailureAction::kIgnore;
      v.infrastructure = true;
      v.why = "pod " + reason;
      return v;
    }
  }
  if (!node.exists || !node.ready) {
    v.action = FailureAction::kIgnore;
    v.infrastructure = true;
    v.why = node.exists ? "its node is NotReady" : "its node is gone";
    return v;
  }
  if (pod != nullptr && podPhase(*pod) == "Failed") {
    v.action = FailureAction::kRestart;
    auto exit = terminatedExit(*pod, "");
    std::string reason = stringAt(statusOf(*pod), "reason").value_or("");
    if (exit) {
      v.why = (exit->reason.empty() ? std::string{} : exit->reason + ", ") + "exit code " +
              std::to_string(exit->exit_code);
    } else {
      v.why = reason.empty() ? std::string{"failed"} : reason;
    }
    return v;
  }
  // Deleted by someone, or gone without a trace (force-deleted, PodGC): not the trainer.
  v.action = FailureAction::kIgnore;
  v.infrastructure = true;
  v.why = pod == nullptr ? "vanished" : (deleted ? "deleted" : "stopped");
  return v;
}

JobPlan planReconcile(const Json& job, const std::vector<Json>& all_pods, const NodeLookup& nodes,
                      WallTime now, const PlanContext& context) {
  JobPlan plan;
  auto decoded = parseTrainingJobStatus(job);
  if (!decoded) {
    // Never from the API server (the CRD's schema types every field): nothing is safe to do.
    plan.events.push_back(
        {"Warning", "InvalidStatus",
         "the status cannot be read, the job is left alone: " + decoded.error().message});
    return plan;
  }
  const TrainingJobStatus old_status = *decoded;
  TrainingJobStatus status = old_status;
  const std::int64_t generation = intAt(fieldsOf(job, "metadata"), "generation").value_or(0);
  status.observed_generation = generation;
  if (const auto& cp = context.reported_checkpoint) {
    auto recorded = lastCheckpointStep(status);
    if (!recorded || cp->step > *recorded) {
      status.last_checkpoint =
          CheckpointStatus{.step = cp->step, .path = cp->path, .time = formatRfc3339(cp->time)};
    }
  }
  auto event = [&](const char* type, const char* reason, const std::string& message) {
    plan.events.push_back({type, reason, message});
  };
  auto cond = [&](const char* type, bool value, const char* reason, const std::string& message) {
    setCondition(status, type, value ? "True" : "False", reason, message, generation, now);
  };
  auto condIfPresent = [&](const char* type, bool value, const char* reason,
                           const std::string& message) {
    if (findCondition(status, type) != nullptr) cond(type, value, reason, message);
  };
  // Goodput is brought up to date with any other change, and at least every goodput_period
  // while the job runs or restarts (the reconciler is requeued for it).
  auto finish = [&]() -> JobPlan {
    const std::string phase = status.phase.value_or("");
    if (phase == phases::kRunning || phase == phases::kRestarting) {
      auto last = parseRfc3339(status.goodput ? status.goodput->last_update_time.value_or("") : "");
      if (!last) last = parseRfc3339(status.phase_since.value_or(""));
      WallTime last_update = last.value_or(now);
      if (status != old_status || now - last_update >= context.goodput_period) {
        accrueGoodput(status, now);
        last_update = parseRfc3339(status.goodput->last_update_time.value_or("")).value_or(now);
      }
      Duration due =
          std::max<Duration>(std::chrono::seconds{1}, last_update + context.goodput_period - now);
      if (!plan.requeue_after || due < *plan.requeue_after) plan.requeue_after = due;
    }
    plan.status_changed = status != old_status;
    plan.status = std::move(status);
    return std::move(plan);
  };

  auto spec_result = parseTrainingJobSpec(job);
  if (!spec_result) {
    if (!isConditionTrue(status, conditions::kFailed)) {
      event("Warning", "InvalidSpec", spec_result.error().message);
    }
    cond(conditions::kFailed, true, "InvalidSpec", spec_result.error().message);
    setPhase(status, phases::kFailed, now);
    return finish();
  }
  const TrainingJobSpec& spec = *spec_result;
  const FaultTolerance& ft = spec.fault_tolerance;
  plan.ensure_children = true;

  // Every start of the job's pods is an attempt: restarts and resumes begin a new one, whose pods
  // carry its number (statuses written before `attempt` existed have it in `restarts`).
  std::int64_t attempt = status.attempt ? *status.attempt : status.restarts.value_or(0);
  status.attempt = attempt;
  status.restarts = status.restarts.value_or(0);  // always present: the printer column
  status.restarts_count_towards_max = status.restarts_count_towards_max.value_or(0);
  status.infrastructure_restarts = status.infrastructure_restarts.value_or(0);
  std::vector<const Json*> pods;
  for (const auto& pod : all_pods) {
    if (isControlledBy(pod, job)) pods.push_back(&pod);
  }
  auto factsOf = [&](const std::string& node) { return node.empty() ? NodeFacts{} : nodes(node); };
  auto deletion = [&](const Json& pod, const std::string& why) {
    std::string phase = podPhase(pod);
    std::string node = nodeNameOf(pod);
    NodeFacts facts = factsOf(node);
    bool force = phase == "Failed" || phase == "Succeeded" ||
                 (!node.empty() &&
                  (!facts.exists || !facts.ready || facts.unschedulable || facts.faulty_taint));
    return PodDeletion{objectName(pod), stringAt(fieldsOf(pod, "metadata"), "uid").value_or(""),
                       force, why};
  };
  // Deletes pods not yet being deleted; force-deletes deleting pods stuck on a bad node.
  auto deletePods = [&](auto&& predicate, const std::string& why) {
    for (const Json* pod : pods) {
      if (!predicate(*pod)) continue;
      PodDeletion d = deletion(*pod, why);
      if (isDeleting(*pod) && !d.force) continue;
      plan.pods_to_delete.push_back(std::move(d));
    }
  };
  auto isActive = [](const Json& pod) {
    std::string phase = podPhase(pod);
    return phase != "Failed" && phase != "Succeeded";
  };

  // Degraded: the children cannot be made real (reported by the reconciler).
  if (context.child_problem) {
    cond(conditions::kDegraded, true, context.child_problem->reason.c_str(),
         context.child_problem->message);
  } else if (isConditionTrue(status, conditions::kDegraded)) {
    cond(conditions::kDegraded, false, "ChildrenCreated", "The job's children exist");
  }

  std::string phase = status.phase.value_or("");
  if (phase == phases::kSucceeded || phase == phases::kFailed) {
    deletePods(isActive, "job finished");
    return finish();
  }

  if (spec.suspend) {
    if (!isConditionTrue(status, conditions::kSuspended)) {
      event("Normal", "Suspended", "Job suspended; its pods are deleted and its state is kept");
    }
    cond(conditions::kSuspended, true, "Suspended", "spec.suspend is true");
    condIfPresent(conditions::kRunning, false, "Suspended", "spec.suspend is true");
    setPhase(status, phases::kSuspended, now);
    status.started_indexes = "";  // the attempt's pods go; resuming starts them again
    deletePods([](const Json&) { return true; }, "job suspended");
    return finish();
  }
  if (isConditionTrue(status, conditions::kSuspended)) {
    // A new attempt: the suspended attempt's pods (perhaps still terminating) and everything
    // the informer saw of them belong to the old one.
    ++attempt;
    status.attempt = attempt;
    event("Normal", "Resumed", "Job resumed as attempt " + std::to_string(attempt));
    cond(conditions::kSuspended, false, "Resumed", "spec.suspend is false");
    setPhase(status, phases::kPending, now);
  }

  // The current attempt: its pods by index, and every index known to have been started.
  std::map<std::int64_t, const Json*> current;
  bool old_pods = false;
  for (const Json* pod : pods) {
    auto pod_attempt = intLabelOf(*pod, labels::kRestartAttempt);
    auto index = intLabelOf(*pod, labels::kReplicaIndex);
    if (!pod_attempt || *pod_attempt != attempt || !index || *index < 0 ||
        *index >= spec.replicas) {
      old_pods = true;
      continue;
    }
    current[*index] = pod;
  }
  std::set<std::int64_t> started;
  if (auto recorded = parseIndexSet(status.started_indexes.value_or(""), spec.replicas)) {
    started.insert(recorded->begin(), recorded->end());
  }
  if (context.observed_attempt == attempt) {
    for (auto i : context.observed_indexes) {
      if (i < spec.replicas) started.insert(i);
    }
    for (const auto& [i, pod] : context.gone_pods) {
      if (i < spec.replicas) started.insert(i);
    }
  }
  for (const auto& [i, pod] : current) started.insert(i);
  status.started_indexes = formatIndexSet({started.begin(), started.end()});

  // Pods of this attempt that stopped: failed, being deleted, or gone (a vanished rank is a
  // crash of that rank: its peers wait in a static rendezvous that a new pod cannot join).
  std::vector<StoppedPod> stopped;
  for (std::int64_t i : started) {
    StoppedPod s;
    s.index = i;
    s.name = objectName(job) + "-" + std::to_string(i);
    auto it = current.find(i);
    if (it != current.end()) {
      const Json& pod = *it->second;
      if (podPhase(pod) != "Failed" && !isDeleting(pod)) continue;
      s.pod = &pod;
      s.deleted = isDeleting(pod);
    } else {
      auto gone =
          context.observed_attempt == attempt ? context.gone_pods.find(i) : context.gone_pods.end();
      s.pod = gone != context.gone_pods.end() ? &gone->second : nullptr;
      s.deleted = true;
    }
    if (s.pod != nullptr) s.node = nodeNameOf(*s.pod);
    // A pod that was never bound (or whose last state is unknown) has no node to blame.
    NodeFacts node = s.node.empty() ? NodeFacts{.exists = true} : factsOf(s.node);
    s.verdict = classifyFailure(s.pod, s.deleted, node, ft.pod_failure_policy);
    s.stopped_at = stopTimeOf(s.pod);
    if (s.pod != nullptr) s.exit_code = failedExitCode(*s.pod);
    stopped.push_back(std::move(s));
  }

  // Replica counts of the current attempt.
  std::int64_t running = 0, ready = 0, active = 0, succeeded = 0;
  for (const auto& [index, pod] : current) {
    std::string p = podPhase(*pod);
    if (p == "Running") ++running;
    if (p == "Running" && isPodReady(*pod)) ++ready;
    if (p == "Succeeded") ++succeeded;
    if (p != "Succeeded" && p != "Failed" && !isDeleting(*pod)) ++active;
  }
  status.active = active;
  status.ready = ready;
  status.succeeded = succeeded;
  status.failed = static_cast<std::int64_t>(stopped.size());

  // A fault in this attempt: pods stopped, a restart requested for exactly this attempt, or a
  // C4D verdict for it (dry run: the detector only records what it would do).
  const bool requested = annotationOf(job, annotations::kRestartRequest) == std::to_string(attempt);
  const DiagnosedFault* diagnosis = context.diagnosis && context.diagnosis->attempt == attempt &&
                                            !ft.dry_run &&
                                            status.phase.value_or("") != phases::kRestarting
                                        ? &*context.diagnosis
                                        : nullptr;
  if (!stopped.empty() || requested || diagnosis != nullptr) {
    FaultRecord fault;
    fault.time = formatRfc3339(now);
    fault.attempt = attempt;
    std::string summary;
    FailureAction action = FailureAction::kIgnore;
    bool counted = false;
    if (!stopped.empty()) {
      // The deciding pod: a FailJob verdict, then a counted failure, then the rest; among
      // equals the first to stop (the others are usually its victims), then the lowest index.
      const StoppedPod* decider = &decidingPod(stopped);
      action = decider->verdict.action;
      counted = action == FailureAction::kRestart;
      summary = describePod(decider->pod, decider->index, decider->name) +
                (decider->pod == nullptr ? " vanished"
                 : decider->deleted      ? " was deleted"
                                         : " failed") +
                ": " + decider->verdict.why;
      if (stopped.size() > 1) summary += " (and " + std::to_string(stopped.size() - 1) + " more)";
      fault.fault_class = decider->verdict.infrastructure ? "disruption" : "crash";
      fault.pod = decider->name;
      fault.node = decider->node;
      fault.rank = decider->index;
      fault.exit_code = decider->exit_code;
      // Node-level evidence: a node that went NotReady under the job is cordoned (DESIGN: a
      // crash implicates its node only with node-level evidence).
      for (const auto& s : stopped) {
        if (s.node.empty()) continue;
        NodeFacts facts = factsOf(s.node);
        if (facts.exists && !facts.ready && !facts.faulty_taint && ft.cordon_faulty_nodes &&
            std::none_of(plan.cordons.begin(), plan.cordons.end(),
                         [&](const NodeCordon& c) { return c.node == s.node; })) {
          plan.cordons.push_back({s.node,
                                  "node went NotReady under TrainingJob " + objectKey(job) + " (" +
                                      describePod(s.pod, s.index, s.name) + ")",
                                  ft.dry_run});
        }
      }
    } else if (diagnosis != nullptr) {
      summary = diagnosis->summary;
      fault.fault_class = diagnosis->fault_class;
      if (!diagnosis->nodes.empty()) fault.node = diagnosis->nodes.front();
      if (diagnosis->rank >= 0) fault.rank = diagnosis->rank;
      fault.detection_seconds = diagnosis->detection_seconds;
    } else {
      std::string reason = annotationOf(job, annotations::kRestartReason);
      summary = "restart requested" + (reason.empty() ? std::string{} : ": " + reason);
      fault.fault_class = "requested";
    }
    if (diagnosis != nullptr) {
      // The next attempt avoids the culprits (also where policy does not cordon them).
      std::vector<std::string>& avoid = status.avoid_nodes;
      for (const auto& n : diagnosis->nodes) {
        if (std::find(avoid.begin(), avoid.end(), n) == avoid.end()) avoid.push_back(n);
      }
      while (avoid.size() > kMaxAvoidNodes) avoid.erase(avoid.begin());
      if (ft.cordon_faulty_nodes) {
        for (const auto& n : diagnosis->cordon_nodes) {
          if (std::none_of(plan.cordons.begin(), plan.cordons.end(),
                           [&](const NodeCordon& c) { return c.node == n; })) {
            plan.cordons.push_back({n,
                                    "C4D " + diagnosis->fault_class + " in TrainingJob " +
                                        objectKey(job) + ": " + diagnosis->summary,
                                    false});
          }
        }
      }
    }
    fault.summary = summary;
    fault.counted = counted;

    const std::int64_t counted_restarts = status.restarts_count_towards_max.value_or(0);
    const std::int64_t infra_restarts = status.infrastructure_restarts.value_or(0);
    auto fail = [&](const char* reason, const std::string& message) {
      fault.action = "fail";
      addFault(status, fault);
      event("Warning", reason, message);
      cond(conditions::kFailed, true, reason, message);
      condIfPresent(conditions::kRunning, false, "Failed", message);
      condIfPresent(conditions::kRestarting, false, "Failed", message);
      setPhase(status, phases::kFailed, now);
      deletePods(isActive, "job failed");
      return finish();
    };
    if (action == FailureAction::kFailJob) {
      return fail("PodFailurePolicy", summary + "; the pod failure policy fails the job");
    }
    if (auto repeated = repeatedIdenticalCrash(status.faults, fault, ft.max_identical_crashes)) {
      std::string cordoned = "no node was cordoned";
      if (!plan.cordons.empty()) {
        std::vector<std::string> names;
        for (const auto& c : plan.cordons) names.push_back(c.node);
        cordoned = "no node was cordoned for this crash (" + joined(names) +
                   " went NotReady under the job and " + (plan.cordons.size() == 1 ? "is" : "are") +
                   " cordoned for that)";
      }
      return fail("RepeatedIdenticalCrash",
                  summary + "; the same crash, " + *repeated +
                      ": a deterministic failure of the trainer, not of a node, so the job fails "
                      "instead of spending more of its restart budget (" +
                      std::to_string(counted_restarts) + " of " + std::to_string(ft.max_restarts) +
                      " restarts used, maxIdenticalCrashes " +
                      std::to_string(ft.max_identical_crashes) + "); " + cordoned);
    }
    if (counted && counted_restarts >= ft.max_restarts) {
      return fail("ReachedMaxRestarts",
                  summary + "; restart budget of " + std::to_string(ft.max_restarts) + " is spent");
    }
    if (!counted && infra_restarts >= ft.max_infrastructure_restarts) {
      return fail("ReachedMaxInfrastructureRestarts",
                  summary + "; " + std::to_string(infra_restarts) +
                      " restarts not counted against maxRestarts already (limit " +
                      std::to_string(ft.max_infrastructure_restarts) + ")");
    }

    // Backoff: exponential in consecutive counted failures; an attempt that ran long enough
    // resets it; faults that are not the trainer's restart after the base delay.
    std::int64_t consecutive = status.consecutive_failures.value_or(0);
    if (status.phase.value_or("") == phases::kRunning) {
      auto since = parseRfc3339(status.phase_since.value_or(""));
      if (since && now - *since >= std::chrono::seconds{kBackoffResetSeconds}) consecutive = 0;
    }
    std::int64_t delay = ft.restart_backoff_seconds;
    if (counted) {
      ++consecutive;
      for (std::int64_t i = 1; i < consecutive && delay < ft.max_restart_backoff_seconds; ++i) {
        delay *= 2;
      }
      delay = std::min(delay, ft.max_restart_backoff_seconds);
    }
    status.consecutive_failures = consecutive;

    const std::int64_t next = attempt + 1;
    auto step = lastCheckpointStep(status);
    std::string message = summary + "; restarting as attempt " + std::to_string(next) +
                          (step ? " from checkpoint step " + std::to_string(*step)
                                : std::string{" from the beginning (no checkpoint known)"}) +
                          " in " + std::to_string(delay) + " s" +
                          (counted ? " (" + std::to_string(counted_restarts + 1) + " of " +
                                         std::to_string(ft.max_restarts) + " restarts)"
                                   : std::string{" (not counted against maxRestarts)"});
    fault.action = "restart";
    if (status.last_checkpoint) {
      if (auto t = parseRfc3339(status.last_checkpoint->time.value_or("")); t && *t <= now) {
        fault.recompute_seconds =
            std::chrono::duration_cast<std::chrono::seconds>(now - *t).count();
      }
    }
    // Work since the last checkpoint is done again by the next attempt. It was counted productive
    // while this attempt ran (a hang before the verdict included): it is lost. Bounded by this
    // attempt's running time, since earlier attempts settled their own share at their restart.
    std::int64_t redo = 0;
    if (status.phase.value_or("") == phases::kRunning) {
      if (auto since = parseRfc3339(status.phase_since.value_or("")); since && *since <= now) {
        redo = std::chrono::duration_cast<std::chrono::seconds>(now - *since).count();
        if (fault.recompute_seconds) redo = std::min(redo, *fault.recompute_seconds);
      }
    }
    addFault(status, fault);
    status.attempt = next;
    status.restarts = status.restarts.value_or(0) + 1;
    (counted ? status.restarts_count_towards_max : status.infrastructure_restarts) =
        (counted ? counted_restarts : infra_restarts) + 1;
    status.last_restart_time = formatRfc3339(now);
    status.next_attempt_time = formatRfc3339(now + std::chrono::seconds{delay});
    status.started_indexes = "";
    status.active = 0;
    status.ready = 0;
    status.succeeded = 0;
    status.failed = 0;
    const char* reason = !stopped.empty()
                             ? (fault.fault_class == "crash" ? "PodFailed" : "PodDisrupted")
                         : diagnosis != nullptr ? "FaultDiagnosed"
                                                : "RestartRequested";
    event("Warning", reason, summary);
    event("Normal", "RestartingFromCheckpoint", message);
    cond(conditions::kRestarting, true, reason, message);
    condIfPresent(conditions::kRunning, false, "Restarting", message);
    setPhase(status, phases::kRestarting, now);
    if (redo > 0) {
      GoodputStatus& goodput = status.goodput ? *status.goodput : status.goodput.emplace();
      redo = std::min(redo, goodput.productive_seconds.value_or(0));
      goodput.productive_seconds = goodput.productive_seconds.value_or(0) - redo;
      goodput.lost_seconds = goodput.lost_seconds.value_or(0) + redo;
    }
    deletePods([](const Json&) { return true; }, "restart to attempt " + std::to_string(next));
    plan.restart_started = true;
    plan.requeue_after = std::chrono::seconds{delay};
    return finish();
  }

  // Pods of earlier attempts go first; new ones (same names) wait until they are gone.
  if (old_pods) {
    deletePods(
        [&](const Json& pod) {
          auto a = intLabelOf(pod, labels::kRestartAttempt);
          auto i = intLabelOf(pod, labels::kReplicaIndex);
          return !a || *a != attempt || !i || *i < 0 || *i >= spec.replicas;
        },
        "pod of an earlier attempt");
    plan.requeue_after = std::chrono::seconds{1};
    return finish();
  }
  if (status.phase.value_or("") == phases::kRestarting) {
    auto ready_at = parseRfc3339(status.next_attempt_time.value_or(""));
    if (!ready_at) {  // written by an older operator: base backoff after the restart
      auto restarted = parseRfc3339(status.last_restart_time.value_or(""));
      ready_at = restarted.value_or(now) + std::chrono::seconds{ft.restart_backoff_seconds};
    }
    if (now < *ready_at) {
      plan.requeue_after = std::chrono::duration_cast<Duration>(*ready_at - now);
      return finish();
    }
  }

  if (!context.child_problem || !context.child_problem->blocks_pods) {
    auto resume = lastCheckpointStep(status);
    // The culprits cordoned or tainted faulty are never used again by this job; the others
    // (a link's ends, a policy without cordon) only where the cluster has no room elsewhere,
    // so a job whose avoided nodes leave too few others runs rather than waits for ever.
    NodeAvoidance avoid;
    for (const auto& n : status.avoid_nodes) {
      const NodeFacts facts = nodes(n);
      (facts.unschedulable || facts.faulty_taint ? avoid.required : avoid.preferred).push_back(n);
    }
    for (std::int64_t i = 0; i < spec.replicas; ++i) {
      if (!current.contains(i)) {
        plan.pods_to_create.push_back(
            buildPod(job, spec, i, attempt, resume, context.settings, avoid));
      }
    }
  }

  std::string replicas = std::to_string(spec.replicas);
  std::string now_phase = status.phase.value_or("");
  if (succeeded == spec.replicas) {
    std::string message = "All " + replicas + " replicas succeeded";
    event("Normal", "Succeeded", message);
    cond(conditions::kSucceeded, true, "AllReplicasSucceeded", message);
    condIfPresent(conditions::kRunning, false, "Succeeded", message);
    setPhase(status, phases::kSucceeded, now);
  } else if (running > 0 && running + succeeded == spec.replicas) {
    std::string message =
        "All " + replicas + " replicas running (attempt " + std::to_string(attempt) + ")";
    if (now_phase != phases::kRunning) {
      event("Normal", now_phase == phases::kRestarting ? "Restarted" : "Running", message);
    }
    if (now_phase == phases::kRestarting) {
      // The restart's length goes to the fault that caused it.
      auto restarted = parseRfc3339(status.last_restart_time.value_or(""));
      std::vector<FaultRecord>& faults = status.faults;
      if (restarted && !faults.empty() && !faults.back().restart_seconds) {
        faults.back().restart_seconds =
            std::chrono::duration_cast<std::chrono::seconds>(now - *restarted).count();
      }
    }
    cond(conditions::kRunning, true, "AllReplicasRunning", message);
    if (isConditionTrue(status, conditions::kRestarting)) {
      cond(conditions::kRestarting, false, "RestartCompleted", message);
    }
    setPhase(status, phases::kRunning, now);
  } else {
    std::string message = std::to_string(running) + " of " + replicas + " replicas running";
    if (now_phase != phases::kRestarting) {
      if (now_phase == phases::kRunning || findCondition(status, conditions::kRunning) == nullptr) {
        cond(conditions::kRunning, false, "ReplicasNotRunning", message);
      }
      setPhase(status, phases::kPending, now);
    }
  }
  return finish();
}

}  // namespace c4::op
