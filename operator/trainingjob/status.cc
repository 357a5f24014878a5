// The TrainingJob status codec (see status.h).
#include "operator/trainingjob/status.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <utility>

namespace c4::op {
namespace {

// Reads the members of one JSON object at `path` ("status.goodput"); absent or null members
// leave their field as it is.
class Reader {
 public:
  Reader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  Status integer(const char* key, std::optional<std::int64_t>& out) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() &&
         v->get<std::uint64_t>() >
             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
      return wrong(key, "an integer");
    }
    out = v->get<std::int64_t>();
    return okStatus();
  }
  Status number(const char* key, std::optional<double>& out) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_number()) return wrong(key, "a number");
    out = v->get<double>();
    return okStatus();
  }
  Status boolean(const char* key, std::optional<bool>& out) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_boolean()) return wrong(key, "a boolean");
    out = v->get<bool>();
    return okStatus();
  }
  Status string(const char* key, std::optional<std::string>& out) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_string()) return wrong(key, "a string");
    out = v->get<std::string>();
    return okStatus();
  }
  Status string(const char* key, std::string& out) const {
    std::optional<std::string> value;
    C4_RETURN_IF_ERROR(string(key, value));
    if (value) out = std::move(*value);
    return okStatus();
  }
  Status mode(const char* key, std::optional<c4p::Mode>& out) const {
    std::optional<std::string> text;
    C4_RETURN_IF_ERROR(string(key, text));
    if (!text) return okStatus();
    auto parsed = c4p::parseMode(*text);
    if (!parsed) {
      return makeError(ErrorCode::kInvalidArgument,
                       field(key) + " must be Off, Advisory or Enforce, not \"" + *text + "\"");
    }
    out = *parsed;
    return okStatus();
  }
  Status strings(const char* key, std::vector<std::string>& out) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_array()) return wrong(key, "a list");
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return makeError(ErrorCode::kInvalidArgument,
                         field(key) + "[" + std::to_string(i) + "] must be a string");
      }
      out.push_back((*v)[i].get<std::string>());
    }
    return okStatus();
  }
  // Decodes every element of the list `key` with decode(element, "<path>.<key>[i]").
  template <typename T, typename Decode>
  Status list(const char* key, std::vector<T>& out, Decode&& decode) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    if (!v->is_array()) return wrong(key, "a list");
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i) {
      C4_ASSIGN_OR_RETURN(T item, decode((*v)[i], field(key) + "[" + std::to_string(i) + "]"));
      out.push_back(std::move(item));
    }
    return okStatus();
  }
  template <typename T, typename Decode>
  Status object(const char* key, std::optional<T>& out, Decode&& decode) const {
    const Json* v = find(key);
    if (v == nullptr) return okStatus();
    C4_ASSIGN_OR_RETURN(T item, decode(*v, field(key)));
    out = std::move(item);
    return okStatus();
  }
  // The members not in `known`.
  Json unknown(std::initializer_list<std::string_view> known) const {
    Json out = Json::object();
    for (const auto& [k, v] : object_.items()) {
      if (std::find(known.begin(), known.end(), k) == known.end()) out[k] = v;
    }
    return out;
  }

 private:
  const Json* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string field(const char* key) const { return path_ + "." + key; }
  std::unexpected<Error> wrong(const char* key, const char* what) const {
    return makeError(ErrorCode::kInvalidArgument, field(key) + " must be " + what);
  }

  const Json& object_;
  std::string path_;
};

Status mustBeObject(const Json& j, const std::string& path) {
  if (j.is_object()) return okStatus();
  return makeError(ErrorCode::kInvalidArgument, path + " must be an object");
}

Result<Condition> decodeCondition(const Json& j, const std::string& path) {
  C4_RETURN_IF_ERROR(mustBeObject(j, path));
  Reader r(j, path);
  Condition c;
  C4_RETURN_IF_ERROR(r.string("type", c.type));
  C4_RETURN_IF_ERROR(r.string("status", c.status));
  C4_RETURN_IF_ERROR(r.integer("observedGeneration", c.observed_generation));
  C4_RETURN_IF_ERROR(r.string("lastTransitionTime", c.last_transition_time));
  C4_RETURN_IF_ERROR(r.string("reason", c.reason));
  C4_RETURN_IF_ERROR(r.string("message", c.message));
  c.unknown = r.unknown(
      {"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"});
  return c;
}

Result<CheckpointStatus> decodeCheckpoint(const Json& j, const std::string& path) {
  C4_RETURN_IF_ERROR(mustBeObject(j, path));
  Reader r(j, path);
  CheckpointStatus c;
  C4_RETURN_IF_ERROR(r.integer("step", c.step));
  C4_RETURN_IF_ERROR(r.string("path", c.path));
  C4_RETURN_IF_ERROR(r.string("time", c.time));
  c.unknown = r.unknown({"step", "path", "time"});
  return c;
}

Result<FaultRecord> decodeFault(const Json& j, const std::string& path) {
  C4_RETURN_IF_ERROR(mustBeObject(j, path));
  Reader r(j, path);
  FaultRecord f;
  C4_RETURN_IF_ERROR(r.string("time", f.time));
  C4_RETURN_IF_ERROR(r.string("class", f.fault_class));
  C4_RETURN_IF_ERROR(r.integer("attempt", f.attempt));
  C4_RETURN_IF_ERROR(r.string("pod", f.pod));
  C4_RETURN_IF_ERROR(r.string("node", f.node));
  C4_RETURN_IF_ERROR(r.integer("rank", f.rank));
  C4_RETURN_IF_ERROR(r.integer("exitCode", f.exit_code));
  C4_RETURN_IF_ERROR(r.string("link", f.link));
  C4_RETURN_IF_ERROR(r.string("summary", f.summary));
  C4_RETURN_IF_ERROR(r.string("action", f.action));
  C4_RETURN_IF_ERROR(r.boolean("counted", f.counted));
  C4_RETURN_IF_ERROR(r.number("detectionSeconds", f.detection_seconds));
  C4_RETURN_IF_ERROR(r.integer("recomputeSeconds", f.recompute_seconds));
  C4_RETURN_IF_ERROR(r.integer("restartSeconds", f.restart_seconds));
  f.unknown =
      r.unknown({"time", "class", "attempt", "pod", "node", "rank", "exitCode", "link", "summary",
                 "action", "counted", "detectionSeconds", "recomputeSeconds", "restartSeconds"});
  return f;
}

Result<GoodputStatus> decodeGoodput(const Json& j, const std::string& path) {
  C4_RETURN_IF_ERROR(mustBeObject(j, path));
  Reader r(j, path);
  GoodputStatus g;
  C4_RETURN_IF_ERROR(r.integer("productiveSeconds", g.productive_seconds));
  C4_RETURN_IF_ERROR(r.integer("lostSeconds", g.lost_seconds));
  C4_RETURN_IF_ERROR(r.string("lastUpdateTime", g.last_update_time));
  g.unknown = r.unknown({"productiveSeconds", "lostSeconds", "lastUpdateTime"});
  return g;
}

Result<PlanStatus> decodePlan(const Json& j, const std::string& path) {
  C4_RETURN_IF_ERROR(mustBeObject(j, path));
  Reader r(j, path);
  PlanStatus p;
  C4_RETURN_IF_ERROR(r.integer("version", p.version));
  C4_RETURN_IF_ERROR(r.mode("mode", p.mode));
  C4_RETURN_IF_ERROR(r.string("maxLinkLoad", p.max_link_load));
  C4_RETURN_IF_ERROR(r.string("reason", p.reason));
  C4_RETURN_IF_ERROR(r.string("time", p.time));
  C4_RETURN_IF_ERROR(r.integer("appliedVersion", p.applied_version));
  C4_RETURN_IF_ERROR(r.integer("ranksApplied", p.ranks_applied));
  C4_RETURN_IF_ERROR(r.integer("ranksReporting", p.ranks_reporting));
  p.unknown = r.unknown({"version", "mode", "maxLinkLoad", "reason", "time", "appliedVersion",
                         "ranksApplied", "ranksReporting"});
  return p;
}

// Encoding: the unknown members first, then the known fields over them.
template <typename T>
void put(Json& out, const char* key, const std::optional<T>& value) {
  if (value) out[key] = *value;
}

Json encodeCondition(const Condition& c) {
  Json out = c.unknown.is_object() ? c.unknown : Json::object();
  out["type"] = c.type;
  out["status"] = c.status;
  put(out, "observedGeneration", c.observed_generation);
  out["lastTransitionTime"] = c.last_transition_time;
  out["reason"] = c.reason;
  out["message"] = c.message;
  return out;
}

Json encodeCheckpoint(const CheckpointStatus& c) {
  Json out = c.unknown.is_object() ? c.unknown : Json::object();
  put(out, "step", c.step);
  put(out, "path", c.path);
  put(out, "time", c.time);
  return out;
}

Json encodeFault(const FaultRecord& f) {
  Json out = f.unknown.is_object() ? f.unknown : Json::object();
  put(out, "time", f.time);
  put(out, "class", f.fault_class);
  put(out, "attempt", f.attempt);
  put(out, "pod", f.pod);
  put(out, "node", f.node);
  put(out, "rank", f.rank);
  put(out, "exitCode", f.exit_code);
  put(out, "link", f.link);
  put(out, "summary", f.summary);
  put(out, "action", f.action);
  put(out, "counted", f.counted);
  put(out, "detectionSeconds", f.detection_seconds);
  put(out, "recomputeSeconds", f.recompute_seconds);
  put(out, "restartSeconds", f.restart_seconds);
  return out;
}

Json encodeGoodput(const GoodputStatus& g) {
  Json out = g.unknown.is_object() ? g.unknown : Json::object();
  put(out, "productiveSeconds", g.productive_seconds);
  put(out, "lostSeconds", g.lost_seconds);
  put(out, "lastUpdateTime", g.last_update_time);
  return out;
}

Json encodePlan(const PlanStatus& p) {
  Json out = p.unknown.is_object() ? p.unknown : Json::object();
  put(out, "version", p.version);
  if (p.mode) out["mode"] = std::string(c4p::modeName(*p.mode));
  put(out, "maxLinkLoad", p.max_link_load);
  put(out, "reason", p.reason);
  put(out, "time", p.time);
  put(out, "appliedVersion", p.applied_version);
  put(out, "ranksApplied", p.ranks_applied);
  put(out, "ranksReporting", p.ranks_reporting);
  return out;
}

}  // namespace

Result<TrainingJobStatus> decodeTrainingJobStatus(const Json& status) {
  TrainingJobStatus s;
  if (status.is_null()) return s;
  const std::string path = "status";
  C4_RETURN_IF_ERROR(mustBeObject(status, path));
  Reader r(status, path);
  C4_RETURN_IF_ERROR(r.string("phase", s.phase));
  C4_RETURN_IF_ERROR(r.string("phaseSince", s.phase_since));
  C4_RETURN_IF_ERROR(r.integer("observedGeneration", s.observed_generation));
  C4_RETURN_IF_ERROR(r.integer("restarts", s.restarts));
  C4_RETURN_IF_ERROR(r.integer("attempt", s.attempt));
  C4_RETURN_IF_ERROR(r.integer("restartsCountTowardsMax", s.restarts_count_towards_max));
  C4_RETURN_IF_ERROR(r.integer("infrastructureRestarts", s.infrastructure_restarts));
  C4_RETURN_IF_ERROR(r.integer("consecutiveFailures", s.consecutive_failures));
  C4_RETURN_IF_ERROR(r.string("nextAttemptTime", s.next_attempt_time));
  C4_RETURN_IF_ERROR(r.string("startedIndexes", s.started_indexes));
  C4_RETURN_IF_ERROR(r.integer("active", s.active));
  C4_RETURN_IF_ERROR(r.integer("ready", s.ready));
  C4_RETURN_IF_ERROR(r.integer("succeeded", s.succeeded));
  C4_RETURN_IF_ERROR(r.integer("failed", s.failed));
  C4_RETURN_IF_ERROR(r.string("lastRestartTime", s.last_restart_time));
  C4_RETURN_IF_ERROR(r.string("lastFault", s.last_fault));
  C4_RETURN_IF_ERROR(r.object("lastCheckpoint", s.last_checkpoint, decodeCheckpoint));
  C4_RETURN_IF_ERROR(r.object("plan", s.plan, decodePlan));
  C4_RETURN_IF_ERROR(r.strings("avoidNodes", s.avoid_nodes));
  C4_RETURN_IF_ERROR(r.list("faults", s.faults, decodeFault));
  C4_RETURN_IF_ERROR(r.object("goodput", s.goodput, decodeGoodput));
  C4_RETURN_IF_ERROR(r.list("conditions", s.conditions, decodeCondition));
  s.unknown = r.unknown({"phase",
                         "phaseSince",
                         "observedGeneration",
                         "restarts",
                         "attempt",
                         "restartsCountTowardsMax",
                         "infrastructureRestarts",
                         "consecutiveFailures",
                         "nextAttemptTime",
                         "startedIndexes",
                         "active",
                         "ready",
                         "succeeded",
                         "failed",
                         "lastRestartTime",
                         "lastFault",
                         "lastCheckpoint",
                         "plan",
                         "avoidNodes",
                         "faults",
                         "goodput",
                         "conditions"});
  return s;
}

Result<TrainingJobStatus> parseTrainingJobStatus(const Json& job) {
  if (!job.is_object()) return makeError(ErrorCode::kInvalidArgument, "the job is not an object");
  auto it = job.find("status");
  if (it == job.end()) return TrainingJobStatus{};
  return decodeTrainingJobStatus(*it);
}

Json trainingJobStatusJson(const TrainingJobStatus& s) {
  Json out = s.unknown.is_object() ? s.unknown : Json::object();
  put(out, "phase", s.phase);
  put(out, "phaseSince", s.phase_since);
  put(out, "observedGeneration", s.observed_generation);
  put(out, "restarts", s.restarts);
  put(out, "attempt", s.attempt);
  put(out, "restartsCountTowardsMax", s.restarts_count_towards_max);
  put(out, "infrastructureRestarts", s.infrastructure_restarts);
  put(out, "consecutiveFailures", s.consecutive_failures);
  put(out, "nextAttemptTime", s.next_attempt_time);
  put(out, "startedIndexes", s.started_indexes);
  put(out, "active", s.active);
  put(out, "ready", s.ready);
  put(out, "succeeded", s.succeeded);
  put(out, "failed", s.failed);
  put(out, "lastRestartTime", s.last_restart_time);
  put(out, "lastFault", s.last_fault);
  if (s.last_checkpoint) out["lastCheckpoint"] = encodeCheckpoint(*s.last_checkpoint);
  if (s.plan) out["plan"] = encodePlan(*s.plan);
  if (!s.avoid_nodes.empty()) out["avoidNodes"] = s.avoid_nodes;
  if (!s.faults.empty()) {
    Json faults = Json::array();
    for (const auto& f : s.faults) faults.push_back(encodeFault(f));
    out["faults"] = std::move(faults);
  }
  if (s.goodput) out["goodput"] = encodeGoodput(*s.goodput);
  if (!s.conditions.empty()) {
    Json conditions = Json::array();
    for (const auto& c : s.conditions) conditions.push_back(encodeCondition(c));
    out["conditions"] = std::move(conditions);
  }
  return out;
}

const Condition* findCondition(const TrainingJobStatus& status, const std::string& type) {
  for (const auto& c : status.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool isConditionTrue(const TrainingJobStatus& status, const std::string& type) {
  const Condition* c = findCondition(status, type);
  return c != nullptr && c->status == "True";
}

bool setCondition(TrainingJobStatus& status, const std::string& type,
                  const std::string& condition_status, const std::string& reason,
                  const std::string& message, std::int64_t observed_generation, WallTime now) {
  std::string bounded = message.substr(0, 32768);
  for (auto& c : status.conditions) {
    if (c.type != type) continue;
    const Condition before = c;
    if (c.status != condition_status) {
      c.status = condition_status;
      c.last_transition_time = formatRfc3339(now);
    }
    c.reason = reason;
    c.message = std::move(bounded);
    c.observed_generation = observed_generation;
    return c != before;
  }
  Condition c;
  c.type = type;
  c.status = condition_status;
  c.reason = reason;
  c.message = std::move(bounded);
  c.observed_generation = observed_generation;
  c.last_transition_time = formatRfc3339(now);
  status.conditions.push_back(std::move(c));
  return true;
}

}  // namespace c4::op
