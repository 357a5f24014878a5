// TrainingJob spec parsing, condition bookkeeping, index sets.
#include "operator/trainingjob/api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace c4::op {
namespace {

Result<std::int64_t> intField(const Json& object, const char* key, std::int64_t fallback,
                              std::int64_t min_value, std::int64_t max_value,
                              const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be an integer");
  }
  std::int64_t v = it->get<std::int64_t>();
  if (v < min_value || v > max_value) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be in [" +
                                                      std::to_string(min_value) + ", " +
                                                      std::to_string(max_value) + "]");
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

Result<const Json*> objectField(const Json& object, const char* key, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  if (!it->is_object()) {
    return makeError(ErrorCode::kInvalidArgument, path + "." + key + " must be an object");
  }
  return &*it;
}

bool isDns1035Label(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  if (name.front() < 'a' || name.front() > 'z') return false;
  if (name.back() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

Result<ProcsPerNode> parseProcsPerNode(const Json& spec) {
  ProcsPerNode out;
  auto it = spec.find("numProcPerNode");
  if (it == spec.end() || it->is_null()) return out;
  if (it->is_string() && it->get<std::string>() == "auto") {
    out.automatic = true;
    return out;
  }
  if (it->is_number_integer() && it->get<std::int64_t>() >= 1 && it->get<std::int64_t>() <= 1024) {
    out.count = it->get<std::int64_t>();
    return out;
  }
  return makeError(ErrorCode::kInvalidArgument,
                   "spec.numProcPerNode must be an integer in [1, 1024] or \"auto\"");
}

Result<FailurePolicyRule> parseRule(const Json& rule, const std::string& path) {
  if (!rule.is_object()) return makeError(ErrorCode::kInvalidArgument, path + " must be an object");
  FailurePolicyRule out;
  C4_ASSIGN_OR_RETURN(std::string action, stringField(rule, "action", "", path));
  if (action == "FailJob") {
    out.action = FailureAction::kFailJob;
  } else if (action == "Ignore") {
    out.action = FailureAction::kIgnore;
  } else if (action == "Restart") {
    out.action = FailureAction::kRestart;
  } else {
    return makeError(ErrorCode::kInvalidArgument,
                     path + ".action must be FailJob, Ignore or Restart");
  }
  C4_ASSIGN_OR_RETURN(const Json* codes, objectField(rule, "onExitCodes", path));
  if (codes != nullptr) {
    const std::string p = path + ".onExitCodes";
    ExitCodeRule e;
    C4_ASSIGN_OR_RETURN(e.container_name, stringField(*codes, "containerName", "", p));
    C4_ASSIGN_OR_RETURN(std::string op, stringField(*codes, "operator", "", p));
    if (op != "In" && op != "NotIn") {
      return makeError(ErrorCode::kInvalidArgument, p + ".operator must be In or NotIn");
    }
    e.in = op == "In";
    auto values = codes->find("values");
    if (values == codes->end() || !values->is_array() || values->empty()) {
      return makeError(ErrorCode::kInvalidArgument, p + ".values must be a non-empty list");
    }
    for (const auto& v : *values) {
      if (!v.is_number_integer()) {
        return makeError(ErrorCode::kInvalidArgument, p + ".values must be integers");
      }
      e.values.push_back(v.get<std::int64_t>());
    }
    out.on_exit_codes = std::move(e);
  }
  if (auto conds = rule.find("onPodConditions"); conds != rule.end() && !conds->is_null()) {
    const std::string p = path + ".onPodConditions";
    if (!conds->is_array()) return makeError(ErrorCode::kInvalidArgument, p + " must be a list");
    for (const auto& c : *conds) {
      if (!c.is_object()) return makeError(ErrorCode::kInvalidArgument, p + "[] must be objects");
      PodConditionRule pc;
      C4_ASSIGN_OR_RETURN(pc.type, stringField(c, "type", "", p));
      C4_ASSIGN_OR_RETURN(pc.status, stringField(c, "status", "True", p));
      if (pc.type.empty()) return makeError(ErrorCode::kInvalidArgument, p + "[].type is empty");
      out.on_pod_conditions.push_back(std::move(pc));
    }
  }
  if (!out.on_exit_codes && out.on_pod_conditions.empty()) {
    return makeError(ErrorCode::kInvalidArgument, path + " needs onExitCodes or onPodConditions");
  }
  return out;
}

Status parseFaultTolerance(const Json& spec, FaultTolerance& ft) {
  C4_ASSIGN_OR_RETURN(const Json* obj, objectField(spec, "faultTolerance", "spec"));
  if (obj == nullptr) return okStatus();
  const Json& j = *obj;
  const std::string p = "spec.faultTolerance";
  constexpr std::int64_t kMax32 = 2147483647;
  C4_ASSIGN_OR_RETURN(ft.max_restarts, intField(j, "maxRestarts", 3, 0, kMax32, p));
  C4_ASSIGN_OR_RETURN(ft.max_infrastructure_restarts,
                      intField(j, "maxInfrastructureRestarts", 10, 0, kMax32, p));
  C4_ASSIGN_OR_RETURN(ft.restart_backoff_seconds,
                      intField(j, "restartBackoffSeconds", 10, 0, 3600, p));
  C4_ASSIGN_OR_RETURN(ft.max_restart_backoff_seconds,
                      intField(j, "maxRestartBackoffSeconds", 300, 0, 86400, p));
  if (ft.max_restart_backoff_seconds < ft.restart_backoff_seconds) {
    return makeError(ErrorCode::kInvalidArgument,
                     p + ".maxRestartBackoffSeconds must be >= restartBackoffSeconds");
  }
  C4_ASSIGN_OR_RETURN(
      ft.max_identical_crashes,
      intField(j, "maxIdenticalCrashes", 3, std::numeric_limits<std::int64_t>::min(),
               std::numeric_limits<std::int64_t>::max(), p));
  // 1 could never fire (one crash is on one node); above kMaxFaults status.faults cannot hold
  // the history.
  if (ft.max_identical_crashes != 0 &&
      (ft.max_identical_crashes < 2 ||
       ft.max_identical_crashes > static_cast<std::int64_t>(kMaxFaults))) {
    return makeError(
        ErrorCode::kInvalidArgument,
        p + ".maxIdenticalCrashes must be 0 (off) or in [2, " + std::to_string(kMaxFaults) + "]");
  }
  C4_ASSIGN_OR_RETURN(ft.cordon_faulty_nodes, boolField(j, "cordonFaultyNodes", true, p));
  C4_ASSIGN_OR_RETURN(ft.dry_run, boolField(j, "dryRun", false, p));
  C4_ASSIGN_OR_RETURN(ft.hang_seconds, intField(j, "hangSeconds", 10, 1, 86400, p));
  C4_ASSIGN_OR_RETURN(ft.window_seconds, intField(j, "windowSeconds", 2, 1, 600, p));
  if (auto it = j.find("slowFactor"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) {
      return makeError(ErrorCode::kInvalidArgument, p + ".slowFactor must be a number");
    }
    double v = it->get<double>();
    if (!std::isfinite(v) || v <= 1.0 || v > 1000.0) {
      return makeError(ErrorCode::kInvalidArgument, p + ".slowFactor must be in (1, 1000]");
    }
    ft.slow_factor = v;
  }
  if (auto it = j.find("slowNoiseSigmas"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) {
      return makeError(ErrorCode::kInvalidArgument, p + ".slowNoiseSigmas must be a number");
    }
    double v = it->get<double>();
    if (!std::isfinite(v) || v < 0.0 || v > 100.0) {
      return makeError(ErrorCode::kInvalidArgument,
                       p + ".slowNoiseSigmas must be in [0, 100] (0: slowFactor alone)");
    }
    ft.slow_noise_sigmas = v;
  }
  C4_ASSIGN_OR_RETURN(const Json* policy, objectField(j, "podFailurePolicy", p));
  if (policy != nullptr) {
    auto rules = policy->find("rules");
    if (rules != policy->end() && !rules->is_null()) {
      const std::string rp = p + ".podFailurePolicy.rules";
      if (!rules->is_array() || rules->size() > 20) {
        return makeError(ErrorCode::kInvalidArgument, rp + " must be a list of at most 20");
      }
      for (std::size_t i = 0; i < rules->size(); ++i) {
        C4_ASSIGN_OR_RETURN(FailurePolicyRule r,
                            parseRule((*rules)[i], rp + "[" + std::to_string(i) + "]"));
        ft.pod_failure_policy.push_back(std::move(r));
      }
    }
  }
  return okStatus();
}

// Reserved names set by the user in a container's env -> error naming the first one.
Status checkReservedEnv(const Json& containers, const TrainingJobSpec& spec) {
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const Json& c = containers[i];
    if (!c.is_object()) {
      return makeError(ErrorCode::kInvalidArgument,
                       "spec.template.spec.containers[" + std::to_string(i) + "] is not an object");
    }
    auto env = c.find("env");
    if (env == c.end() || !env->is_array()) continue;
    for (std::size_t j = 0; j < env->size(); ++j) {
      const Json& e = (*env)[j];
      if (hasWrongType(e, "name", Json::value_t::string)) {
        return makeError(ErrorCode::kInvalidArgument,
                         "spec.template.spec.containers[" + std::to_string(i) + "].env[" +
                             std::to_string(j) + "].name must be a string");
      }
      std::string name = stringAt(e, "name").value_or("");
      if (isReservedEnvName(name, spec)) {
        std::string why;
        if (name == "NCCL_NET_PLUGIN") {
          why = spec.traffic_mode == c4p::Mode::kEnforce
                    ? " (trafficPlanning.mode Enforce runs C4's net plugin)"
                    : " (telemetry.source NetPlugin runs C4's net plugin)";
        } else if (name == "NCCL_PROFILER_PLUGIN") {
          why = " (telemetry.source Profiler without Enforce runs C4's profiler plugin)";
        }
        return makeError(ErrorCode::kInvalidArgument, "spec.template.spec.containers[" +
                                                          std::to_string(i) + "].env: " + name +
                                                          " is set by the operator" + why +
                                                          " and may not be set in the template");
      }
    }
  }
  return okStatus();
}

std::int64_t gpuLimit(const Json& container) {
  const Json* limits = nullptr;
  if (auto r = container.find("resources"); r != container.end() && r->is_object()) {
    if (auto l = r->find("limits"); l != r->end() && l->is_object()) limits = &*l;
  }
  if (limits == nullptr) return 0;
  auto g = limits->find("nvidia.com/gpu");
  if (g == limits->end()) return 0;
  if (g->is_number_integer()) return std::max<std::int64_t>(0, g->get<std::int64_t>());
  if (g->is_string()) {  // quantities are strings: "8"
    const std::string& s = g->get_ref<const std::string&>();
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc{} && ptr == s.data() + s.size() && v > 0) return v;
  }
  return 0;
}

}  // namespace

std::string_view failureActionName(FailureAction a) {
  switch (a) {
    case FailureAction::kFailJob:
      return "FailJob";
    case FailureAction::kIgnore:
      return "Ignore";
    case FailureAction::kRestart:
      return "Restart";
  }
  return "Restart";
}

std::string_view telemetrySourceName(TelemetrySource source) {
  return source == TelemetrySource::kNetPlugin ? "NetPlugin" : "Profiler";
}

bool usesC4NetPlugin(const TrainingJobSpec& spec) {
  return spec.telemetry_source == TelemetrySource::kNetPlugin ||
         spec.traffic_mode == c4p::Mode::kEnforce;
}

bool usesC4Profiler(const TrainingJobSpec& spec) {
  return spec.telemetry_source == TelemetrySource::kProfiler &&
         spec.traffic_mode != c4p::Mode::kEnforce;
}

bool isReservedEnvName(std::string_view name, const TrainingJobSpec& spec) {
  static constexpr std::string_view kExact[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"};
  for (auto e : kExact) {
    if (name == e) return true;
  }
  if (name == "NCCL_NET_PLUGIN") return usesC4NetPlugin(spec);
  if (name == "NCCL_PROFILER_PLUGIN") return usesC4Profiler(spec);
  return name.starts_with("PET_") || std::find(std::begin(kOperatorC4Env), std::end(kOperatorC4Env),
                                               name) != std::end(kOperatorC4Env);
}

std::size_t maxJobNameLength(std::int64_t replicas) {
  std::size_t digits = std::to_string(std::max<std::int64_t>(0, replicas - 1)).size();
  return 63 - 1 - digits;
}

Result<TrainingJobSpec> parseTrainingJobSpec(const Json& job) {
  if (!job.is_object() || !job.contains("spec") || !job["spec"].is_object()) {
    return makeError(ErrorCode::kInvalidArgument, "spec is missing");
  }
  const Json& spec = job["spec"];
  TrainingJobSpec out;
  C4_ASSIGN_OR_RETURN(out.replicas, intField(spec, "replicas", 1, 1, 16384, "spec"));
  const std::string name = objectName(job);
  if (!isDns1035Label(name)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "metadata.name '" + name +
                         "' must be a DNS-1035 label (lower-case letters, digits and '-', "
                         "starting with a letter)");
  }
  if (name.size() > maxJobNameLength(out.replicas)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "metadata.name is too long: with " + std::to_string(out.replicas) +
                         " replicas at most " + std::to_string(maxJobNameLength(out.replicas)) +
                         " characters, so that pod hostnames <name>-<index> fit 63");
  }
  C4_ASSIGN_OR_RETURN(out.num_proc_per_node, parseProcsPerNode(spec));
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
  if (!out.managed_by.empty() && out.managed_by != kControllerName &&
      out.managed_by != kMultiKueueManager) {
    return makeError(
        ErrorCode::kInvalidArgument,
        "spec.managedBy must be " + std::string(kControllerName) + " or " + kMultiKueueManager);
  }
  C4_ASSIGN_OR_RETURN(const Json* checkpoint, objectField(spec, "checkpoint", "spec"));
  if (checkpoint != nullptr) {
    C4_ASSIGN_OR_RETURN(out.checkpoint_dir, stringField(*checkpoint, "dir", "", "spec.checkpoint"));
  }
  C4_RETURN_IF_ERROR(parseFaultTolerance(spec, out.fault_tolerance));
  C4_ASSIGN_OR_RETURN(const Json* tp, objectField(spec, "trafficPlanning", "spec"));
  if (tp != nullptr) {
    C4_ASSIGN_OR_RETURN(std::string mode,
                        stringField(*tp, "mode", "Advisory", "spec.trafficPlanning"));
    auto parsed = c4p::parseMode(mode);
    if (!parsed) {
      return makeError(ErrorCode::kInvalidArgument,
                       "spec.trafficPlanning.mode must be Off, Advisory or Enforce");
    }
    out.traffic_mode = *parsed;
    C4_ASSIGN_OR_RETURN(out.subflows_per_connection,
                        intField(*tp, "subflowsPerConnection", 4, 1, 64, "spec.trafficPlanning"));
    C4_ASSIGN_OR_RETURN(out.spare_subflows,
                        intField(*tp, "spareSubflows", 0, 0, 63, "spec.trafficPlanning"));
    if (out.subflows_per_connection + out.spare_subflows > 64) {
      return makeError(ErrorCode::kInvalidArgument,
                       "spec.trafficPlanning: subflowsPerConnection + spareSubflows must be at "
                       "most 64 (the plugin's limit per connection), got " +
                           std::to_string(out.subflows_per_connection) + " + " +
                           std::to_string(out.spare_subflows));
    }
  }
  C4_ASSIGN_OR_RETURN(const Json* telemetry, objectField(spec, "telemetry", "spec"));
  if (telemetry != nullptr) {
    C4_ASSIGN_OR_RETURN(std::string source,
                        stringField(*telemetry, "source", "Profiler", "spec.telemetry"));
    if (source == "Profiler") {
      out.telemetry_source = TelemetrySource::kProfiler;
    } else if (source == "NetPlugin") {
      out.telemetry_source = TelemetrySource::kNetPlugin;
    } else {
      return makeError(ErrorCode::kInvalidArgument,
                       "spec.telemetry.source must be Profiler or NetPlugin");
    }
  }
  // After trafficPlanning and telemetry: which NCCL_* names are reserved depends on both.
  C4_RETURN_IF_ERROR(checkReservedEnv(out.pod_template["spec"]["containers"], out));
  return out;
}

std::int64_t procsPerPod(const TrainingJobSpec& spec) {
  if (!spec.num_proc_per_node.automatic) return spec.num_proc_per_node.count;
  const Json& containers = spec.pod_template["spec"]["containers"];
  for (const auto& c : containers) {
    if (!c.is_object()) continue;
    if (std::int64_t gpus = gpuLimit(c); gpus > 0) return gpus;
  }
  return 1;
}

const Json* findCondition(const Json& status, const std::string& type) {
  if (!status.is_object() || !status.contains("conditions") || !status["conditions"].is_array()) {
    return nullptr;
  }
  for (const auto& c : status["conditions"]) {
    if (stringAt(c, "type") == type) return &c;
  }
  return nullptr;
}

bool isConditionTrue(const Json& status, const std::string& type) {
  const Json* c = findCondition(status, type);
  return c != nullptr && stringAt(*c, "status") == "True";
}

bool setCondition(Json& status, const std::string& type, const std::string& condition_status,
                  const std::string& reason, const std::string& message,
                  std::int64_t observed_generation, WallTime now) {
  if (!status.is_object()) status = Json::object();
  Json& list = status["conditions"];
  if (!list.is_array()) list = Json::array();
  const std::string bounded = message.substr(0, 32768);
  for (auto& c : list) {
    if (stringAt(c, "type") != type) continue;
    Json before = c;
    if (stringAt(c, "status") != condition_status) {
      c["status"] = condition_status;
      c["lastTransitionTime"] = formatRfc3339(now);
    }
    c["reason"] = reason;
    c["message"] = bounded;
    c["observedGeneration"] = observed_generation;
    return c != before;
  }
  list.push_back({{"type", type},
                  {"status", condition_status},
                  {"reason", reason},
                  {"message", bounded},
                  {"observedGeneration", observed_generation},
                  {"lastTransitionTime", formatRfc3339(now)}});
  return true;
}

std::optional<std::int64_t> intLabelOf(const Json& object, const char* key) {
  std::string v = labelOf(object, key);
  std::int64_t parsed = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
  if (v.empty() || ec != std::errc{} || ptr != v.data() + v.size()) return std::nullopt;
  return parsed;
}

std::string formatIndexSet(const std::vector<std::int64_t>& sorted_unique) {
  std::string out;
  for (std::size_t i = 0; i < sorted_unique.size();) {
    std::size_t j = i;
    while (j + 1 < sorted_unique.size() && sorted_unique[j + 1] == sorted_unique[j] + 1) ++j;
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(sorted_unique[i]));
    if (j > i) {
      out.push_back('-');
      out.append(std::to_string(sorted_unique[j]));
    }
    i = j + 1;
  }
  return out;
}

std::optional<std::vector<std::int64_t>> parseIndexSet(const std::string& text,
                                                       std::int64_t limit) {
  std::vector<std::int64_t> out;
  if (text.empty()) return out;
  auto number = [&](std::string_view s) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || ptr != s.data() + s.size() || v < 0 || v >= limit) {
      return std::nullopt;
    }
    return v;
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return std::nullopt;  // trailing ','
    std::size_t dash = part.find('-');
    auto first = number(part.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : number(part.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    if (!out.empty() && *first <= out.back()) return std::nullopt;  // ascending, disjoint
    for (std::int64_t v = *first; v <= *last; ++v) out.push_back(v);
  }
  return out;
}

}  // namespace c4::op
