// TrainingJob spec parsing, condition bookkeeping, children, and the reconcile planner.
#include "operator/trainingjob/planner.h"

#include <algorithm>
#include <map>

namespace c4::op {
namespace {

Result<std::int64_t> intField(const Json& object, const char* key, std::int64_t fallback,
                              std::int64_t min_value, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be an integer");
  }
  std::int64_t v = it->get<std::int64_t>();
  if (v < min_value) {
    return makeError(ErrorCode::kInvalidArgument,
                     path + "." + key + " must be >= " + std::to_string(min_value));
  }
  return v;
}

Result<bool> boolField(const Json& object, const char* key, bool fallback,
                       const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be a boolean");
  }
  return it->get<bool>();
}

Result<std::string> stringField(const Json& object, const char* key, const std::string& fallback,
                                const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be a string");
  }
  return it->get<std::string>();
}

std::string podPhase(const Json& pod) {
  const Json& status = pod.contains("status") ? pod["status"] : Json::object();
  return status.is_object() ? status.value("phase", std::string{}) : std::string{};
}

bool isDeleting(const Json& pod) {
  return pod["metadata"].contains("deletionTimestamp") &&
         !pod["metadata"]["deletionTimestamp"].is_null();
}

std::optional<std::int64_t> intLabel(const Json& object, const char* key) {
  std::string v = labelOf(object, key);
  if (v.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    long long parsed = std::stoll(v, &used);
    if (used != v.size()) return std::nullopt;
    return parsed;
  } catch (...) {
    return std::nullopt;
  }
}

std::string nodeNameOf(const Json& pod) {
  if (!pod.contains("spec") || !pod["spec"].is_object()) return {};
  return pod["spec"].value("nodeName", std::string{});
}

// "pod a-1 (rank 1) on node n failed: Error, exit code 137"
std::string describePodFailure(const Json& pod) {
  std::string text = "pod " + objectName(pod);
  std::string rank = labelOf(pod, labels::kReplicaIndex);
  if (!rank.empty()) text += " (rank " + rank + ")";
  std::string node = nodeNameOf(pod);
  if (!node.empty()) text += " on node " + node;
  text += " failed";
  const Json& status = pod.contains("status") ? pod["status"] : Json::object();
  std::string detail;
  if (status.is_object()) {
    if (status.contains("containerStatuses") && status["containerStatuses"].is_array()) {
      for (const auto& cs : status["containerStatuses"]) {
        if (!cs.is_object() || !cs.contains("state")) continue;
        const Json& state = cs["state"];
        if (state.is_object() && state.contains("terminated") && state["terminated"].is_object()) {
          const Json& t = state["terminated"];
          if (t.value("exitCode", 0) != 0) {
            detail = t.value("reason", std::string{"Error"}) + ", exit code " +
                     std::to_string(t.value("exitCode", 0));
            break;
          }
        }
      }
    }
    if (detail.empty()) detail = status.value("reason", std::string{});
    if (detail.empty()) detail = status.value("message", std::string{});
  }
  if (!detail.empty()) text += ": " + detail;
  return text;
}

std::optional<std::int64_t> lastCheckpointStep(const Json& status) {
  if (!status.contains("lastCheckpoint") || !status["lastCheckpoint"].is_object()) {
    return std::nullopt;
  }
  const Json& cp = status["lastCheckpoint"];
  if (!cp.contains("step") || !cp["step"].is_number_integer()) return std::nullopt;
  return cp["step"].get<std::int64_t>();
}

WallTime parseTime(const std::string& text, WallTime fallback) {
  // RFC 3339 "YYYY-MM-DDTHH:MM:SSZ" (fractional seconds ignored).
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s) != 6) {
    return fallback;
  }
  std::chrono::year_month_day ymd{std::chrono::year{y},
                                  std::chrono::month{static_cast<unsigned>(mo)},
                                  std::chrono::day{static_cast<unsigned>(d)}};
  if (!ymd.ok()) return fallback;
  auto days = std::chrono::sys_days{ymd};
  return WallTime{std::chrono::duration_cast<WallTime::duration>(
      days.time_since_epoch() + std::chrono::hours{h} + std::chrono::minutes{mi} +
      std::chrono::seconds{s})};
}

void addGoodput(Json& status, const std::string& old_phase, WallTime now) {
  WallTime since = parseTime(status.value("phaseSince", std::string{}), now);
  double seconds = std::max(0.0, std::chrono::duration<double>(now - since).count());
  Json& goodput = status["goodput"];
  if (!goodput.is_object()) goodput = Json::object();
  auto whole = static_cast<std::int64_t>(seconds);
  if (old_phase == phases::kRunning) {
    goodput["productiveSeconds"] = goodput.value("productiveSeconds", std::int64_t{0}) + whole;
  } else if (old_phase == phases::kRestarting) {
    goodput["lostSeconds"] = goodput.value("lostSeconds", std::int64_t{0}) + whole;
  }
}

void setPhase(Json& status, const std::string& phase, WallTime now) {
  std::string old = status.value("phase", std::string{});
  if (old == phase) return;
  addGoodput(status, old, now);
  status["phase"] = phase;
  status["phaseSince"] = formatRfc3339(now);
}

void addFault(Json& status, const Json& fault) {
  Json& faults = status["faults"];
  if (!faults.is_array()) faults = Json::array();
  faults.push_back(fault);
  while (faults.size() > kMaxFaults) faults.erase(faults.begin());
  status["lastFault"] = fault.value("summary", std::string{});
}

void setEnv(Json& container, const std::string& name, const Json& value_or_source) {
  Json& env = container["env"];
  if (!env.is_array()) env = Json::array();
  Json entry = {{"name", name}};
  if (value_or_source.is_string()) {
    entry["value"] = value_or_source;
  } else {
    entry["valueFrom"] = value_or_source;
  }
  for (auto& e : env) {
    if (e.is_object() && e.value("name", std::string{}) == name) {
      e = entry;
      return;
    }
  }
  env.push_back(entry);
}

void addVolumeMount(Json& container, const std::string& name, const std::string& path,
                    bool read_only) {
  Json& mounts = container["volumeMounts"];
  if (!mounts.is_array()) mounts = Json::array();
  for (const auto& m : mounts) {
    if (m.is_object() && m.value("name", std::string{}) == name) return;
  }
  mounts.push_back({{"name", name}, {"mountPath", path}, {"readOnly", read_only}});
}

void addVolume(Json& spec, const Json& volume) {
  Json& volumes = spec["volumes"];
  if (!volumes.is_array()) volumes = Json::array();
  for (const auto& v : volumes) {
    if (v.is_object() && v.value("name", std::string{}) == volume["name"].get<std::string>()) {
      return;
    }
  }
  volumes.push_back(volume);
}

}  // namespace

Result<TrainingJobSpec> parseTrainingJobSpec(const Json& job) {
  if (!job.is_object() || !job.contains("spec") || !job["spec"].is_object()) {
    return makeError(ErrorCode::kInvalidArgument, "spec is missing");
  }
  const Json& spec = job["spec"];
  TrainingJobSpec out;
  C4_ASSIGN_OR_RETURN(out.replicas, intField(spec, "replicas", 1, 1, "spec"));
  if (!spec.contains("template") || !spec["template"].is_object()) {
    return makeError(ErrorCode::kInvalidArgument, "spec.template is missing");
  }
  out.pod_template = spec["template"];
  if (!out.pod_template.contains("spec") || !out.pod_template["spec"].is_object() ||
      !out.pod_template["spec"].contains("containers") ||
      !out.pod_template["spec"]["containers"].is_array() ||
      out.pod_template["spec"]["containers"].empty()) {
    return makeError(ErrorCode::kInvalidArgument, "spec.template.spec.containers is empty");
  }
  C4_ASSIGN_OR_RETURN(out.suspend, boolField(spec, "suspend", false, "spec"));
  C4_ASSIGN_OR_RETURN(out.managed_by, stringField(spec, "managedBy", "", "spec"));
  if (spec.contains("checkpoint") && spec["checkpoint"].is_object()) {
    C4_ASSIGN_OR_RETURN(out.checkpoint_dir,
                        stringField(spec["checkpoint"], "dir", "", "spec.checkpoint"));
  }
  if (spec.contains("faultTolerance") && spec["faultTolerance"].is_object()) {
    const Json& ft = spec["faultTolerance"];
    const std::string p = "spec.faultTolerance";
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.max_restarts, intField(ft, "maxRestarts", 3, 0, p));
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.restart_backoff_seconds,
                        intField(ft, "restartBackoffSeconds", 10, 0, p));
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.cordon_faulty_nodes,
                        boolField(ft, "cordonFaultyNodes", true, p));
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.dry_run, boolField(ft, "dryRun", false, p));
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.hang_seconds, intField(ft, "hangSeconds", 60, 1, p));
    C4_ASSIGN_OR_RETURN(out.fault_tolerance.window_seconds,
                        intField(ft, "windowSeconds", 10, 1, p));
    if (ft.contains("slowFactor") && ft["slowFactor"].is_number()) {
      out.fault_tolerance.slow_factor = ft["slowFactor"].get<double>();
    }
  }
  if (spec.contains("trafficPlanning") && spec["trafficPlanning"].is_object()) {
    const Json& tp = spec["trafficPlanning"];
    C4_ASSIGN_OR_RETURN(out.traffic_mode,
                        stringField(tp, "mode", "Advisory", "spec.trafficPlanning"));
    if (out.traffic_mode != "Off" && out.traffic_mode != "Advisory" &&
        out.traffic_mode != "Enforce") {
      return makeError(ErrorCode::kInvalidArgument,
                       "spec.trafficPlanning.mode must be Off, Advisory or Enforce");
    }
    C4_ASSIGN_OR_RETURN(out.subflows_per_connection,
                        intField(tp, "subflowsPerConnection", 4, 1, "spec.trafficPlanning"));
  }
  return out;
}

const Json* findCondition(const Json& status, const std::string& type) {
  if (!status.is_object() || !status.contains("conditions") || !status["conditions"].is_array()) {
    return nullptr;
  }
  for (const auto& c : status["conditions"]) {
    if (c.is_object() && c.value("type", std::string{}) == type) return &c;
  }
  return nullptr;
}

bool isConditionTrue(const Json& status, const std::string& type) {
  const Json* c = findCondition(status, type);
  return c != nullptr && c->value("status", std::string{}) == "True";
}

bool setCondition(Json& status, const std::string& type, const std::string& condition_status,
                  const std::string& reason, const std::string& message,
                  std::int64_t observed_generation, WallTime now) {
  if (!status.is_object()) status = Json::object();
  Json& list = status["conditions"];
  if (!list.is_array()) list = Json::array();
  for (auto& c : list) {
    if (!c.is_object() || c.value("type", std::string{}) != type) continue;
    Json before = c;
    if (c.value("status", std::string{}) != condition_status) {
      c["status"] = condition_status;
      c["lastTransitionTime"] = formatRfc3339(now);
    }
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = observed_generation;
    return c != before;
  }
  list.push_back({{"type", type},
                  {"status", condition_status},
                  {"reason", reason},
                  {"message", message},
                  {"observedGeneration", observed_generation},
                  {"lastTransitionTime", formatRfc3339(now)}});
  return true;
}

Json ownerReference(const Json& job) {
  return {{"apiVersion", resources::trainingJobs().apiVersion()},
          {"kind", "TrainingJob"},
          {"name", objectName(job)},
          {"uid", job["metadata"].value("uid", std::string{})},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

bool isControlledBy(const Json& child, const Json& job) {
  const Json& meta = child["metadata"];
  if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array()) return false;
  std::string uid = job["metadata"].value("uid", std::string{});
  for (const auto& ref : meta["ownerReferences"]) {
    if (ref.is_object() && ref.value("controller", false) &&
        ref.value("uid", std::string{}) == uid) {
      return true;
    }
  }
  return false;
}

Json buildHeadlessService(const Json& job, const PodSettings& settings) {
  std::string name = objectName(job);
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", name},
            {"namespace", objectNamespace(job)},
            {"labels", {{labels::kJobName, name}}},
            {"ownerReferences", Json::array({ownerReference(job)})}}},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{labels::kJobName, name}}},
            {"ports", Json::array({{{"name", "master"},
                                    {"port", settings.master_port},
                                    {"targetPort", settings.master_port}}})}}}};
}

Json buildPlanConfigMap(const Json& job, const TrainingJobSpec& spec) {
  std::string name = objectName(job);
  Json plan = {{"version", 0},
               {"mode", spec.traffic_mode},
               {"subflowsPerConnection", spec.subflows_per_connection},
               {"pairs", Json::array()}};
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata",
           {{"name", name + "-c4-plan"},
            {"namespace", objectNamespace(job)},
            {"labels", {{labels::kJobName, name}}},
            {"ownerReferences", Json::array({ownerReference(job)})}}},
          {"data", {{"plan.json", plan.dump()}}}};
}

Json buildPod(const Json& job, const TrainingJobSpec& spec, std::int64_t index,
              std::int64_t attempt, const std::optional<std::int64_t>& resume_step,
              const PodSettings& settings) {
  std::string job_name = objectName(job);
  std::string ns = objectNamespace(job);
  Json tmpl = spec.pod_template;
  Json meta =
      tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : Json::object();
  meta.erase("name");
  meta.erase("generateName");
  meta["name"] = job_name + "-" + std::to_string(index);
  meta["namespace"] = ns;
  if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = Json::object();
  meta["labels"][labels::kJobName] = job_name;
  meta["labels"][labels::kReplicaIndex] = std::to_string(index);
  meta["labels"][labels::kRestartAttempt] = std::to_string(attempt);
  meta["ownerReferences"] = Json::array({ownerReference(job)});

  Json pod_spec = tmpl["spec"];
  pod_spec["hostname"] = meta["name"];
  pod_spec["subdomain"] = job_name;
  pod_spec["restartPolicy"] = "Never";  // a failed rank restarts the whole job, not itself

  const std::string master = job_name + "-0." + job_name;
  const std::string port = std::to_string(settings.master_port);
  const std::string replicas = std::to_string(spec.replicas);
  const std::string rank = std::to_string(index);
  auto fieldRef = [](const char* path) { return Json{{"fieldRef", {{"fieldPath", path}}}}; };
  for (auto& container : pod_spec["containers"]) {
    if (!container.is_object()) continue;
    setEnv(container, "MASTER_ADDR", master);
    setEnv(container, "MASTER_PORT", port);
    setEnv(container, "WORLD_SIZE", replicas);
    setEnv(container, "RANK", rank);
    setEnv(container, "PET_MASTER_ADDR", master);
    setEnv(container, "PET_MASTER_PORT", port);
    setEnv(container, "PET_NNODES", replicas);
    setEnv(container, "PET_NODE_RANK", rank);
    setEnv(container, "NCCL_NET_PLUGIN", settings.plugin_mount_dir + "/" + settings.plugin_library);
    setEnv(container, "C4_AGENT_SOCKET",
           settings.agent_socket_dir + "/" + settings.agent_socket_name);
    setEnv(container, "C4_PLAN_FILE", settings.plan_mount_dir + "/plan.json");
    setEnv(container, "C4_JOB", job_name);
    setEnv(container, "C4_NAMESPACE", ns);
    setEnv(container, "C4_POD_NAME", fieldRef("metadata.name"));
    setEnv(container, "C4_NODE_NAME", fieldRef("spec.nodeName"));
    setEnv(container, "C4_RANK", rank);
    setEnv(container, "C4_RESTART_ATTEMPT", std::to_string(attempt));
    if (!spec.checkpoint_dir.empty()) setEnv(container, "C4_CHECKPOINT_DIR", spec.checkpoint_dir);
    if (resume_step) setEnv(container, "C4_RESUME_STEP", std::to_string(*resume_step));
    addVolumeMount(container, "c4-agent", settings.agent_socket_dir, false);
    addVolumeMount(container, "c4-plugin", settings.plugin_mount_dir, true);
    addVolumeMount(container, "c4-plan", settings.plan_mount_dir, true);
  }
  addVolume(pod_spec,
            {{"name", "c4-agent"},
             {"hostPath", {{"path", settings.agent_socket_dir}, {"type", "DirectoryOrCreate"}}}});
  addVolume(pod_spec,
            {{"name", "c4-plugin"},
             {"hostPath", {{"path", settings.plugin_host_dir}, {"type", "DirectoryOrCreate"}}}});
  addVolume(pod_spec, {{"name", "c4-plan"},
                       {"configMap", {{"name", job_name + "-c4-plan"}, {"optional", true}}}});
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

JobPlan planReconcile(const Json& job, const std::vector<Json>& all_pods, const NodeLookup& nodes,
                      WallTime now, const PodSettings& settings) {
  JobPlan plan;
  const Json empty_status = Json::object();
  const Json& old_status =
      job.contains("status") && job["status"].is_object() ? job["status"] : empty_status;
  Json status = old_status;
  const std::int64_t generation = job["metadata"].value("generation", std::int64_t{0});
  status["observedGeneration"] = generation;
  auto finish = [&]() -> JobPlan {
    plan.status_changed = status != old_status;
    plan.status = std::move(status);
    return std::move(plan);
  };
  auto event = [&](const char* type, const char* reason, const std::string& message) {
    plan.events.push_back({type, reason, message});
  };
  auto cond = [&](const char* type, bool value, const char* reason, const std::string& message) {
    setCondition(status, type, value ? "True" : "False", reason, message, generation, now);
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
  plan.ensure_children = true;

  // Pods this job controls, split by attempt.
  std::int64_t attempt = status.value("restarts", std::int64_t{0});
  status["restarts"] = attempt;  // always present, so the printer column shows 0
  std::vector<const Json*> pods;
  for (const auto& pod : all_pods) {
    if (isControlledBy(pod, job)) pods.push_back(&pod);
  }
  auto deletion = [&](const Json& pod, const std::string& why) {
    std::string phase = podPhase(pod);
    NodeFacts facts;
    std::string node = nodeNameOf(pod);
    if (!node.empty()) facts = nodes(node);
    bool force = phase == "Failed" || phase == "Succeeded" ||
                 (!node.empty() &&
                  (!facts.exists || !facts.ready || facts.unschedulable || facts.faulty_taint));
    return PodDeletion{objectName(pod), pod["metadata"].value("uid", std::string{}), force, why};
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

  std::string phase = status.value("phase", std::string{});
  if (phase == phases::kSucceeded || phase == phases::kFailed) {
    deletePods(isActive, "job finished");
    return finish();
  }

  if (spec.suspend) {
    if (!isConditionTrue(status, conditions::kSuspended)) {
      event("Normal", "Suspended", "Job suspended; its pods are deleted and its state is kept");
    }
    cond(conditions::kSuspended, true, "Suspended", "spec.suspend is true");
    if (findCondition(status, conditions::kRunning) != nullptr) {
      cond(conditions::kRunning, false, "Suspended", "spec.suspend is true");
    }
    setPhase(status, phases::kSuspended, now);
    deletePods([](const Json&) { return true; }, "job suspended");
    return finish();
  }
  if (isConditionTrue(status, conditions::kSuspended)) {
    event("Normal", "Resumed", "Job resumed");
    cond(conditions::kSuspended, false, "Resumed", "spec.suspend is false");
    setPhase(status, phases::kPending, now);
  }

  std::map<std::int64_t, const Json*> current;  // replica index -> pod of this attempt
  std::vector<const Json*> failed;
  bool old_pods = false;
  for (const Json* pod : pods) {
    auto pod_attempt = intLabel(*pod, labels::kRestartAttempt);
    auto index = intLabel(*pod, labels::kReplicaIndex);
    if (!pod_attempt || *pod_attempt != attempt || !index) {
      old_pods = true;
      continue;
    }
    current[*index] = pod;
    if (podPhase(*pod) == "Failed" || isDeleting(*pod)) failed.push_back(pod);
  }

  // A fault in this attempt: pod failure, or a restart requested for exactly this attempt.
  bool requested = annotationOf(job, annotations::kRestartRequest) == std::to_string(attempt);
  if (!failed.empty() || requested) {
    std::string summary;
    Json fault = {{"time", formatRfc3339(now)}, {"attempt", attempt}};
    if (!failed.empty()) {
      const Json& first = *failed.front();
      summary = isDeleting(first) && podPhase(first) != "Failed"
                    ? "pod " + objectName(first) + " was deleted"
                    : describePodFailure(first);
      if (failed.size() > 1) summary += " (and " + std::to_string(failed.size() - 1) + " more)";
      fault["class"] = "crash";
      fault["pod"] = objectName(first);
      fault["node"] = nodeNameOf(first);
      fault["rank"] = intLabel(first, labels::kReplicaIndex).value_or(-1);
    } else {
      std::string reason = annotationOf(job, annotations::kRestartReason);
      summary = "restart requested" + (reason.empty() ? std::string{} : ": " + reason);
      fault["class"] = "requested";
    }
    fault["summary"] = summary;
    std::int64_t restarts = status.value("restarts", std::int64_t{0});
    if (restarts >= spec.fault_tolerance.max_restarts) {
      fault["action"] = "fail";
      addFault(status, fault);
      std::string message = summary + "; restart budget of " +
                            std::to_string(spec.fault_tolerance.max_restarts) + " is spent";
      event("Warning", "ReachedMaxRestarts", message);
      cond(conditions::kFailed, true, "ReachedMaxRestarts", message);
      if (findCondition(status, conditions::kRunning) != nullptr) {
        cond(conditions::kRunning, false, "Failed", message);
      }
      if (findCondition(status, conditions::kRestarting) != nullptr) {
        cond(conditions::kRestarting, false, "Failed", message);
      }
      setPhase(status, phases::kFailed, now);
      deletePods(isActive, "job failed");
      return finish();
    }
    std::int64_t next = restarts + 1;
    auto step = lastCheckpointStep(status);
    std::string message = summary + "; restarting as attempt " + std::to_string(next) +
                          (step ? " from checkpoint step " + std::to_string(*step)
                                : std::string{" from the beginning (no checkpoint known)"});
    fault["action"] = "restart";
    addFault(status, fault);
    status["restarts"] = next;
    status["lastRestartTime"] = formatRfc3339(now);
    const char* reason = failed.empty() ? "RestartRequested" : "PodFailed";
    event("Warning", reason, summary);
    event("Normal", "RestartingFromCheckpoint", message);
    cond(conditions::kRestarting, true, reason, message);
    if (findCondition(status, conditions::kRunning) != nullptr) {
      cond(conditions::kRunning, false, "Restarting", message);
    }
    setPhase(status, phases::kRestarting, now);
    deletePods([](const Json&) { return true; }, "restart to attempt " + std::to_string(next));
    plan.restart_started = true;
    plan.requeue_after = std::chrono::seconds{spec.fault_tolerance.restart_backoff_seconds};
    return finish();
  }

  // Pods of earlier attempts go first; new ones (same names) wait until they are gone.
  if (old_pods) {
    deletePods(
        [&](const Json& pod) {
          auto a = intLabel(pod, labels::kRestartAttempt);
          return !a || *a != attempt || !intLabel(pod, labels::kReplicaIndex);
        },
        "pod of an earlier attempt");
    plan.requeue_after = std::chrono::seconds{1};
    return finish();
  }
  if (status.value("phase", std::string{}) == phases::kRestarting) {
    WallTime restarted = parseTime(status.value("lastRestartTime", std::string{}), now);
    WallTime ready = restarted + std::chrono::seconds{spec.fault_tolerance.restart_backoff_seconds};
    if (now < ready) {
      plan.requeue_after = std::chrono::duration_cast<Duration>(ready - now);
      return finish();
    }
  }

  auto resume = lastCheckpointStep(status);
  for (std::int64_t i = 0; i < spec.replicas; ++i) {
    if (!current.contains(i)) {
      plan.pods_to_create.push_back(buildPod(job, spec, i, attempt, resume, settings));
    }
  }

  std::int64_t running = 0;
  std::int64_t succeeded = 0;
  for (const auto& [index, pod] : current) {
    if (index >= spec.replicas) continue;
    std::string p = podPhase(*pod);
    if (p == "Running") ++running;
    if (p == "Succeeded") ++succeeded;
  }
  std::string replicas = std::to_string(spec.replicas);
  std::string now_phase = status.value("phase", std::string{});
  if (succeeded == spec.replicas) {
    std::string message = "All " + replicas + " replicas succeeded";
    event("Normal", "Succeeded", message);
    cond(conditions::kSucceeded, true, "AllReplicasSucceeded", message);
    if (findCondition(status, conditions::kRunning) != nullptr) {
      cond(conditions::kRunning, false, "Succeeded", message);
    }
    setPhase(status, phases::kSucceeded, now);
  } else if (running > 0 && running + succeeded == spec.replicas) {
    std::string message =
        "All " + replicas + " replicas running (attempt " + std::to_string(attempt) + ")";
    if (now_phase != phases::kRunning) {
      event("Normal", now_phase == phases::kRestarting ? "Restarted" : "Running", message);
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
