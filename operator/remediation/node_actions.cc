// Node cordon/taint with bookkeeping and a circuit breaker kept in the cluster.
#include "operator/remediation/node_actions.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace c4::op {
namespace {

constexpr int kAttempts = 5;  // optimistic-concurrency retries (client-go's RetryOnConflict)
constexpr const char* kStateKey = "cordons.json";

// Read-modify-write against objects that others write too: retry a lost race (HTTP 409).
template <typename Attempt>
auto retryOnConflict(Attempt&& attempt) -> decltype(attempt(1)) {
  for (int i = 1;; ++i) {
    auto result = attempt(i);
    if (result || result.error().code != ErrorCode::kConflict || i == kAttempts) return result;
  }
}

// Whether the node is cordoned by us now: our annotation, and still unschedulable or tainted. A
// node someone returned to service (uncordoned, taint removed) but whose bookkeeping annotations
// were left behind is not ours any more: it takes no breaker slot, and a new fault cordons it.
bool cordonedByUs(const Json& node) {
  if (annotationOf(node, node_annotations::kCordonedBy).empty()) return false;
  auto spec = node.find("spec");
  if (spec == node.end() || !spec->is_object()) return false;
  if (boolAt(*spec, "unschedulable").value_or(false)) return true;
  auto taints = spec->find("taints");
  if (taints == spec->end() || !taints->is_array()) return false;
  for (const auto& t : *taints) {
    if (stringAt(t, "key") == kFaultyTaintKey) return true;
  }
  return false;
}

constexpr const char* kFaultsKey = "faults.json";

// The JSON array under data[key] of a ConfigMap, or an empty one (checked access).
Json arrayIn(const Json& config_map, const char* key) {
  auto data = config_map.find("data");
  if (data == config_map.end() || !data->is_object()) return Json::array();
  auto text = data->find(key);
  if (text == data->end() || !text->is_string()) return Json::array();
  Json list = Json::parse(text->get<std::string>(), nullptr, false);
  return list.is_array() ? list : Json::array();  // unreadable state: start afresh
}

// One recorded cordon in the breaker's state: done (the node was patched) or owed (its slot is
// taken, the patch has not landed yet). Records written before owed ones existed are done. A
// released one (c4.dev/release returned the node to service) still counts against the cordons
// per window, no longer against the fraction of nodes cordoned.
struct CordonRecord {
  std::string node;
  WallTime time;
  bool owed = false;
  std::string reason;  // an owed cordon's reason (the Node's c4.dev/cordon-reason once done)
  bool released = false;
};

// A fault-history entry owed to a node.
struct OwedFault {
  std::string node;
  NodeFaultRecord record;
};

// A string field of an object, or "" (checked access: never throws on another type).
std::string stringOf(const Json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::vector<CordonRecord> parseRecords(const Json& config_map) {
  std::vector<CordonRecord> out;
  for (const auto& r : arrayIn(config_map, kStateKey)) {
    if (!r.is_object() || !r.contains("node") || !r["node"].is_string() || !r.contains("unixNs") ||
        !r["unixNs"].is_number_integer()) {
      continue;
    }
    const std::string state = stringOf(r, "state");
    out.push_back({r["node"].get<std::string>(), fromUnixNanos(r["unixNs"].get<std::int64_t>()),
                   state == "owed", stringOf(r, "reason"), state == "released"});
  }
  return out;
}

std::string encodeRecords(const std::vector<CordonRecord>& records) {
  Json list = Json::array();
  for (const auto& r : records) {
    Json entry = {{"node", r.node},
                  {"unixNs", toUnixNanos(r.time)},
                  {"time", formatRfc3339(r.time)},
                  {"state", r.owed ? "owed" : (r.released ? "released" : "done")}};
    if (r.owed) entry["reason"] = r.reason;
    list.push_back(std::move(entry));
  }
  return list.dump();
}

std::vector<OwedFault> parseFaults(const Json& config_map) {
  std::vector<OwedFault> out;
  for (const auto& f : arrayIn(config_map, kFaultsKey)) {
    if (!f.is_object()) continue;
    auto time = parseRfc3339(stringOf(f, "time"));
    std::string node = stringOf(f, "node");
    if (!time || node.empty()) continue;
    out.push_back({node, {*time, stringOf(f, "class"), stringOf(f, "job")}});
  }
  return out;
}

std::string encodeFaults(const std::vector<OwedFault>& faults) {
  Json list = Json::array();
  for (const auto& f : faults) {
    list.push_back({{"node", f.node},
                    {"time", formatRfc3339(f.record.time)},
                    {"class", f.record.fault_class},
                    {"job", f.record.job}});
  }
  return list.dump();
}

// A fault-history entry appended (or owed) within the budget's window: what it was, and when
// its slot was taken (the window counts from then).
struct FaultSlot {
  std::string node;
  NodeFaultRecord record;
  WallTime taken;
};

constexpr const char* kFaultSlotsKey = "faultHistoryWrites.json";

std::vector<FaultSlot> parseFaultSlots(const Json& config_map) {
  std::vector<FaultSlot> out;
  for (const auto& f : arrayIn(config_map, kFaultSlotsKey)) {
    if (!f.is_object()) continue;
    auto time = parseRfc3339(stringOf(f, "time"));
    std::string node = stringOf(f, "node");
    auto taken = f.find("takenUnixNs");
    if (!time || node.empty() || taken == f.end() || !taken->is_number_integer()) continue;
    out.push_back({node,
                   {*time, stringOf(f, "class"), stringOf(f, "job")},
                   fromUnixNanos(taken->get<std::int64_t>())});
  }
  return out;
}

std::string encodeFaultSlots(const std::vector<FaultSlot>& slots) {
  Json list = Json::array();
  for (const auto& f : slots) {
    list.push_back({{"node", f.node},
                    {"time", formatRfc3339(f.record.time)},
                    {"class", f.record.fault_class},
                    {"job", f.record.job},
                    {"takenUnixNs", toUnixNanos(f.taken)}});
  }
  return list.dump();
}

// A C4D restart taken within the restart budget's window: which job's which attempt it ends, and
// when (the window counts from then).
struct RestartSlot {
  std::string job;  // "<ns>/<name>"
  std::int64_t attempt = 0;
  WallTime taken;
};

constexpr const char* kRestartSlotsKey = "restarts.json";

std::vector<RestartSlot> parseRestartSlots(const Json& config_map) {
  std::vector<RestartSlot> out;
  for (const auto& r : arrayIn(config_map, kRestartSlotsKey)) {
    if (!r.is_object()) continue;
    std::string job = stringOf(r, "job");
    auto attempt = r.find("attempt");
    auto taken = r.find("takenUnixNs");
    if (job.empty() || attempt == r.end() || !attempt->is_number_integer() || taken == r.end() ||
        !taken->is_number_integer()) {
      continue;
    }
    out.push_back({job, attempt->get<std::int64_t>(), fromUnixNanos(taken->get<std::int64_t>())});
  }
  return out;
}

std::string encodeRestartSlots(const std::vector<RestartSlot>& slots) {
  Json list = Json::array();
  for (const auto& r : slots) {
    list.push_back({{"job", r.job}, {"attempt", r.attempt}, {"takenUnixNs", toUnixNanos(r.taken)}});
  }
  return list.dump();
}

constexpr const char* kDiagnosesKey = "diagnoses.json";

// Recorded diagnoses, checked: an entry of another shape is left out (and counted).
std::vector<RecordedDiagnosis> parseDiagnoses(const Json& config_map, std::size_t* malformed) {
  std::vector<RecordedDiagnosis> out;
  std::size_t bad = 0;
  for (const auto& r : arrayIn(config_map, kDiagnosesKey)) {
    const auto attempt = intAt(r, "attempt");
    const auto recorded = intAt(r, "recordedUnixNs");
    const Json* diagnosis = objectAt(r, "diagnosis");
    if (stringOf(r, "job").empty() || !attempt || !recorded || diagnosis == nullptr) {
      ++bad;
      continue;
    }
    out.push_back(
        {stringOf(r, "job"), stringOf(r, "uid"), *attempt, fromUnixNanos(*recorded), *diagnosis});
  }
  if (malformed != nullptr) *malformed = bad;
  return out;
}

std::string encodeDiagnoses(const std::vector<RecordedDiagnosis>& list) {
  Json out = Json::array();
  for (const auto& d : list) {
    out.push_back({{"job", d.job},
                   {"uid", d.uid},
                   {"attempt", d.attempt},
                   {"recordedUnixNs", toUnixNanos(d.recorded)},
                   {"diagnosis", d.diagnosis}});
  }
  return out.dump();
}

// A slot of a budget kept in the breaker's ConfigMap (`slots`, the window's): the one `same`
// finds (a retry takes no second slot), or `mine` appended while fewer than `limit` are held.
// False when the window's budget is spent; `taken` says whether `slots` changed.
template <typename Slot, typename Same>
bool budgetSlot(std::vector<Slot>& slots, const Same& same, Slot mine, int limit, bool& taken) {
  taken = false;
  if (std::any_of(slots.begin(), slots.end(), same)) return true;
  if (static_cast<int>(slots.size()) >= limit) return false;
  slots.push_back(std::move(mine));
  taken = true;
  return true;
}

// A budget's window as its messages say it: "3600 s".
std::string windowText(Duration window) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(window).count()) + " s";
}

// The ConfigMap key `key` holds `encoded` unless the list is empty (then the key goes).
void putOrErase(Json& data, const char* key, bool empty,
                const std::function<std::string()>& encoded) {
  if (empty) {
    data.erase(key);
  } else {
    data[key] = encoded();
  }
}

// The same entry (the history keeps whole seconds).
bool sameFault(const NodeFaultRecord& a, const NodeFaultRecord& b) {
  return formatRfc3339(a.time) == formatRfc3339(b.time) && a.fault_class == b.fault_class &&
         a.job == b.job;
}

std::string cordonKey(const std::string& node) {
  return "cordon/" + node;
}
std::string faultKey(const std::string& node, const NodeFaultRecord& r) {
  return "fault/" + node + "/" + formatRfc3339(r.time) + "/" + r.fault_class + "/" + r.job;
}

// The resourceVersion of an object, or "" when it has none (or not a string).
std::string resourceVersionOf(const Json& object) {
  auto meta = object.find("metadata");
  return meta != object.end() && meta->is_object() ? stringOf(*meta, "resourceVersion")
                                                   : std::string{};
}

}  // namespace

std::vector<NodeFaultRecord> faultHistoryOf(const Json& node, std::string* problem) {
  std::vector<NodeFaultRecord> out;
  auto report = [&](std::string what) {
    if (problem != nullptr && problem->empty()) *problem = std::move(what);
  };
  if (problem != nullptr) problem->clear();
  const Json& annotations = fieldsOf(fieldsOf(node, "metadata"), "annotations");
  if (hasWrongType(annotations, kFaultHistoryAnnotation, Json::value_t::string)) {
    report("the annotation is not a string");
  }
  const std::string text = annotationOf(node, kFaultHistoryAnnotation);
  if (text.empty()) return out;
  Json parsed = Json::parse(text, nullptr, false);
  if (!parsed.is_array()) {
    report("the value is not a JSON array");
    return out;
  }
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    const Json& e = parsed[i];
    const std::string entry = "entry " + std::to_string(i);
    if (!e.is_object()) {
      report(entry + " is not an object");
      continue;
    }
    for (const char* key : {"class", "job"}) {
      if (hasWrongType(e, key, Json::value_t::string)) {
        report(entry + ": " + key + " is not a string");
      }
    }
    auto t = parseRfc3339(stringOf(e, "time"));
    if (!t) {
      report(entry + ": time is not an RFC 3339 string");
      continue;
    }
    out.push_back({*t, stringOf(e, "class"), stringOf(e, "job")});
  }
  return out;
}

std::string appendFaultHistory(const Json& node, const NodeFaultRecord& added,
                               std::size_t max_entries) {
  auto history = faultHistoryOf(node);
  history.push_back(added);
  if (history.size() > max_entries) {
    history.erase(history.begin(),
                  history.begin() + static_cast<std::ptrdiff_t>(history.size() - max_entries));
  }
  Json out = Json::array();
  for (const auto& r : history) {
    out.push_back({{"time", formatRfc3339(r.time)}, {"class", r.fault_class}, {"job", r.job}});
  }
  return out.dump();
}

std::string_view cordonOutcomeName(CordonOutcome o) {
  switch (o) {
    case CordonOutcome::kCordoned:
      return "cordoned";
    case CordonOutcome::kAlreadyOurs:
      return "already_cordoned";
    case CordonOutcome::kDryRun:
      return "dry_run";
    case CordonOutcome::kBreakerOpen:
      return "breaker_open";
    case CordonOutcome::kOwed:
      return "owed";
  }
  return "unknown";
}

// The breaker's ConfigMap, parsed.
struct NodeRemediator::State {
  std::vector<CordonRecord> cordons;
  std::vector<OwedFault> faults;
  std::vector<FaultSlot> fault_slots;        // the fault-history budget's window
  std::vector<RestartSlot> restart_slots;    // the restart budget's window
  std::vector<RecordedDiagnosis> diagnoses;  // oldest first
};

NodeRemediator::NodeRemediator(KubeClient& client, Clock& clock, EventRecorder& events,
                               NodeActionConfig config, NodeGetter get_node, NodeLister list_nodes,
                               metrics::Registry* registry)
    : client_(client),
      clock_(clock),
      events_(events),
      config_(std::move(config)),
      get_node_(std::move(get_node)),
      list_nodes_(std::move(list_nodes)),
      log_("node-actions") {
  if (registry != nullptr) {
    actions_ = &registry->counter("c4_operator_node_actions_total",
                                  "C4's node actions (cordon, uncordon, fault history) and C4D "
                                  "restarts by outcome.",
                                  {"action", "outcome"});
    // Every series from the start at 0, so increase() in alerts sees the first cordon.
    for (auto o : {CordonOutcome::kCordoned, CordonOutcome::kAlreadyOurs, CordonOutcome::kDryRun,
                   CordonOutcome::kBreakerOpen, CordonOutcome::kOwed}) {
      actions_->labels({"cordon", std::string(cordonOutcomeName(o))});
    }
    for (const char* o : {"uncordoned", "taint_removed", "not_ours", "dry_run"}) {
      actions_->labels({"uncordon", o});
    }
    actions_->labels({"fault_history", "budget_spent"});
    actions_->labels({"restart", "allowed"});
    actions_->labels({"restart", "budget_spent"});
  }
}

NodeRemediator::~NodeRemediator() {
  stop();
}

Result<Json> NodeRemediator::readNode(const std::string& name, bool fresh) {
  if (!fresh && get_node_) {
    if (auto cached = get_node_(name)) return *cached;
  }
  // Not in the cache (yet), or a write lost a race with it: read the API server.
  return client_.get(resources::nodes(), "", name);
}

Status NodeRemediator::writeFault(const std::string& node_name, const NodeFaultRecord& record) {
  return retryOnConflict([&](int attempt) -> Status {
    C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, attempt > 1));
    // Without a resourceVersion the patch would be unconditional: read one from the server.
    if (resourceVersionOf(node).empty()) {
      C4_ASSIGN_OR_RETURN(node, readNode(node_name, true));
    }
    // Written already (an owed entry whose first write landed but whose answer was lost).
    for (const auto& r : faultHistoryOf(node)) {
      if (sameFault(r, record)) return okStatus();
    }
    Json patch = {{"metadata",
                   {{"resourceVersion", resourceVersionOf(node)},
                    {"annotations",
                     {{kFaultHistoryAnnotation,
                       appendFaultHistory(node, record, config_.max_fault_history)}}}}}};
    auto written = client_.patch(resources::nodes(), "", node_name, PatchType::kMerge, patch);
    if (!written) return std::unexpected(written.error());
    return okStatus();
  });
}

Status NodeRemediator::recordFault(const std::string& node_name, const NodeFaultRecord& record) {
  if (config_.dry_run) return okStatus();  // operator-wide dry run: decide and report only
  // No such node, or the entry is there already: nothing to spend the budget on.
  auto cached = readNode(node_name, false);
  if (!cached && cached.error().code == ErrorCode::kNotFound)
    return std::unexpected(cached.error());
  if (cached) {
    for (const auto& r : faultHistoryOf(*cached)) {
      if (sameFault(r, record)) return okStatus();
    }
  }
  const std::string key = faultKey(node_name, record);
  std::string why;
  auto slot = takeFaultSlot(node_name, record, why);
  if (slot && !*slot) {
    faultSkipped(node_name, record, why);
    return makeError(ErrorCode::kResourceExhausted, why);
  }
  if (!slot) {
    // The budget cannot be read: owed in memory; the loop takes the slot, then writes.
    failed(key, Retry(node_name, {}, record, false));
    log_.warn("Fault history entry owed", {{"node", node_name},
                                           {"class", record.fault_class},
                                           {"persisted", false},
                                           {"error", slot.error()}});
    return makeError(slot.error().code,
                     slot.error().message + " (the entry is owed and written later)");
  }
  auto written = writeFault(node_name, record);
  if (written) return written;
  if (written.error().code == ErrorCode::kNotFound) {
    (void)releaseFaultSlot(node_name, record);  // the node went; a stale slot only expires
    return written;
  }
  // Owed: kept in the cluster (or, if that fails too, in memory) and written by the loop.
  const bool persisted = static_cast<bool>(persistFault(node_name, record));
  const bool event = failed(key, Retry(node_name, {}, record, persisted));
  if (event) {
    if (auto node = readNode(node_name, false)) {
      events_.record(*node, "Warning", "FaultHistoryNotWritten",
                     "Could not append " + record.fault_class + " (" + record.job +
                         ") to the fault history: " + written.error().message +
                         "; the entry is owed and written later");
    }
  }
  log_.warn("Fault history entry owed", {{"node", node_name},
                                         {"class", record.fault_class},
                                         {"persisted", persisted},
                                         {"error", written.error()}});
  return makeError(written.error().code,
                   written.error().message + " (the entry is owed and written later)");
}

Status NodeRemediator::editState(const std::function<bool(State&)>& edit) {
  return retryOnConflict([&](int) -> Status {
    auto read = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
    bool exists = true;
    if (!read) {
      if (read.error().code != ErrorCode::kNotFound) {
        return std::unexpected(read.error().withContext("read circuit breaker state"));
      }
      exists = false;
      read = Json{{"apiVersion", "v1"},
                  {"kind", "ConfigMap"},
                  {"metadata",
                   {{"name", config_.state_name},
                    {"namespace", config_.state_namespace},
                    {"labels", {{"app.kubernetes.io/part-of", "c4"}}}}},
                  {"data", Json::object()}};
    }
    Json& config_map = *read;
    State state{parseRecords(config_map), parseFaults(config_map), parseFaultSlots(config_map),
                parseRestartSlots(config_map), parseDiagnoses(config_map, nullptr)};
    // Done cordons leave with the window; owed ones stay until they are done. So do the slots of
    // the fault-history budget.
    const WallTime now = clock_.wallNow();
    std::erase_if(state.cordons,
                  [&](const CordonRecord& r) { return !r.owed && now - r.time >= config_.window; });
    std::erase_if(state.fault_slots,
                  [&](const FaultSlot& f) { return now - f.taken >= config_.window; });
    std::erase_if(state.restart_slots,
                  [&](const RestartSlot& r) { return now - r.taken >= config_.window; });
    std::erase_if(state.diagnoses, [&](const RecordedDiagnosis& d) {
      return now - d.recorded >= kRecordedDiagnosisTtl;
    });
    if (!edit(state)) return okStatus();
    if (!config_map["data"].is_object()) config_map["data"] = Json::object();
    Json& data = config_map["data"];
    data[kStateKey] = encodeRecords(state.cordons);
    putOrErase(data, kFaultsKey, state.faults.empty(), [&] { return encodeFaults(state.faults); });
    putOrErase(data, kFaultSlotsKey, state.fault_slots.empty(),
               [&] { return encodeFaultSlots(state.fault_slots); });
    putOrErase(data, kRestartSlotsKey, state.restart_slots.empty(),
               [&] { return encodeRestartSlots(state.restart_slots); });
    putOrErase(data, kDiagnosesKey, state.diagnoses.empty(),
               [&] { return encodeDiagnoses(state.diagnoses); });
    // The update carries the resourceVersion read above: a concurrent writer gets 409 and
    // applies its change again to the state that includes this one.
    auto written =
        exists ? client_.update(resources::configMaps(), config_.state_namespace, config_map)
               : client_.create(resources::configMaps(), config_.state_namespace, config_map);
    if (!written) {
      if (written.error().code == ErrorCode::kAlreadyExists) {
        return makeError(ErrorCode::kConflict, "circuit breaker state created concurrently");
      }
      return std::unexpected(written.error().withContext("write circuit breaker state"));
    }
    return okStatus();
  });
}

Status NodeRemediator::markCordonDone(const std::string& node) {
  return editState([&](State& state) {
    bool changed = false;
    for (auto& r : state.cordons) {
      if (r.node != node || !r.owed) continue;
      r.owed = false;
      r.reason.clear();
      r.time = clock_.wallNow();  // the cordon took effect now: its window starts here
      changed = true;
    }
    return changed;
  });
}

Status NodeRemediator::dropCordon(const std::string& node) {
  return editState([&](State& state) {
    return std::erase_if(state.cordons,
                         [&](const CordonRecord& r) { return r.node == node && r.owed; }) > 0;
  });
}

Status NodeRemediator::persistFault(const std::string& node, const NodeFaultRecord& record) {
  return editState([&](State& state) {
    for (const auto& f : state.faults) {
      if (f.node == node && sameFault(f.record, record)) return false;
    }
    state.faults.push_back({node, record});
    return true;
  });
}

Status NodeRemediator::dropFault(const std::string& node, const NodeFaultRecord& record) {
  return editState([&](State& state) {
    return std::erase_if(state.faults, [&](const OwedFault& f) {
             return f.node == node && sameFault(f.record, record);
           }) > 0;
  });
}

Result<bool> NodeRemediator::takeFaultSlot(const std::string& node, const NodeFaultRecord& record,
                                           std::string& why) {
  bool allowed = false;
  std::size_t held = 0;
  auto written = editState([&](State& state) {
    // An entry that has its slot (a retry, an owed entry being completed) takes no second one.
    bool taken = false;
    allowed = budgetSlot(
        state.fault_slots,
        [&](const FaultSlot& f) { return f.node == node && sameFault(f.record, record); },
        FaultSlot{node, record, clock_.wallNow()}, config_.max_fault_records_per_window, taken);
    held = state.fault_slots.size();
    return taken;
  });
  if (!written) return std::unexpected(written.error().withContext("record fault-history slot"));
  why = allowed ? std::string{}
                : "fault-history budget: " + std::to_string(held) +
                      " entries written in the last " + windowText(config_.window) + " (limit " +
                      std::to_string(config_.max_fault_records_per_window) + ")";
  return allowed;
}

Result<bool> NodeRemediator::takeRestartSlot(const std::string& job, std::int64_t attempt,
                                             std::string& why) {
  bool allowed = false;
  std::size_t held = 0;
  auto written = editState([&](State& state) {
    // The same restart asked again (a retry, a new leader deciding the same attempt's restart)
    // takes no second slot.
    bool taken = false;
    allowed = budgetSlot(
        state.restart_slots,
        [&](const RestartSlot& r) { return r.job == job && r.attempt == attempt; },
        RestartSlot{job, attempt, clock_.wallNow()}, config_.max_restarts_per_window, taken);
    held = state.restart_slots.size();
    return taken;
  });
  if (!written) return std::unexpected(written.error().withContext("record restart slot"));
  why = allowed ? std::string{}
                : "restart budget: C4D restarted " + std::to_string(held) +
                      " job attempt(s) in the last " + windowText(config_.window) + " (limit " +
                      std::to_string(config_.max_restarts_per_window) + ")";
  if (actions_ != nullptr) {
    actions_->labels({"restart", allowed ? "allowed" : "budget_spent"}).inc();
  }
  return allowed;
}

Status NodeRemediator::recordDiagnosis(const RecordedDiagnosis& d) {
  if (d.job.empty() || !d.diagnosis.is_object()) {
    return makeError(ErrorCode::kInvalidArgument, "a recorded diagnosis needs a job and an object");
  }
  if (const std::size_t size = d.diagnosis.dump().size(); size > kMaxDiagnosisBytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     "diagnosis of " + d.job + " is " + std::to_string(size) +
                         " bytes encoded (limit " + std::to_string(kMaxDiagnosisBytes) + ")");
  }
  auto written = editState([&](State& state) {
    std::erase_if(state.diagnoses, [&](const RecordedDiagnosis& r) { return r.job == d.job; });
    state.diagnoses.push_back(d);
    if (state.diagnoses.size() > kMaxRecordedDiagnoses) {
      state.diagnoses.erase(
          state.diagnoses.begin(),
          state.diagnoses.end() - static_cast<std::ptrdiff_t>(kMaxRecordedDiagnoses));
    }
    return true;
  });
  if (!written) return std::unexpected(written.error().withContext("record diagnosis"));
  return okStatus();
}

Result<std::vector<RecordedDiagnosis>> NodeRemediator::recordedDiagnoses(std::size_t* malformed) {
  auto read = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
  if (!read) {
    if (read.error().code == ErrorCode::kNotFound) {
      if (malformed != nullptr) *malformed = 0;
      return std::vector<RecordedDiagnosis>{};
    }
    return std::unexpected(read.error().withContext("read recorded diagnoses"));
  }
  auto list = parseDiagnoses(*read, malformed);
  const WallTime now = clock_.wallNow();
  std::erase_if(
      list, [&](const RecordedDiagnosis& d) { return now - d.recorded >= kRecordedDiagnosisTtl; });
  return list;
}

Status NodeRemediator::forgetDiagnosis(const std::string& job) {
  auto written = editState([&](State& state) {
    return std::erase_if(state.diagnoses,
                         [&](const RecordedDiagnosis& r) { return r.job == job; }) > 0;
  });
  if (!written) return std::unexpected(written.error().withContext("forget diagnosis"));
  return okStatus();
}

Status NodeRemediator::releaseFaultSlot(const std::string& node, const NodeFaultRecord& record) {
  return editState([&](State& state) {
    return std::erase_if(state.fault_slots, [&](const FaultSlot& f) {
             return f.node == node && sameFault(f.record, record);
           }) > 0;
  });
}

void NodeRemediator::faultSkipped(const std::string& node_name, const NodeFaultRecord& record,
                                  const std::string& why) {
  if (actions_ != nullptr) actions_->labels({"fault_history", "budget_spent"}).inc();
  log_.warn(
      "Fault history entry not written",
      {{"node", node_name}, {"class", record.fault_class}, {"job", record.job}, {"why", why}});
  if (auto node = readNode(node_name, false)) {
    events_.record(*node, "Warning", "FaultHistorySkipped",
                   "Did not append " + record.fault_class + " (" + record.job +
                       ") to the fault history: " + why);
  }
}

Result<std::vector<std::string>> NodeRemediator::recentCordons() {
  auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
  if (!state) {
    if (state.error().code == ErrorCode::kNotFound) return std::vector<std::string>{};
    return std::unexpected(state.error());
  }
  std::vector<std::string> out;
  WallTime now = clock_.wallNow();
  for (const auto& r : parseRecords(*state)) {
    if (r.owed || now - r.time < config_.window) out.push_back(r.node);
  }
  return out;
}

Result<std::vector<std::string>> NodeRemediator::owedCordons() {
  auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
  if (!state) {
    if (state.error().code == ErrorCode::kNotFound) return std::vector<std::string>{};
    return std::unexpected(state.error());
  }
  std::vector<std::string> out;
  for (const auto& r : parseRecords(*state)) {
    if (r.owed) out.push_back(r.node);
  }
  return out;
}

Result<std::vector<std::string>> NodeRemediator::owedFaults() {
  auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
  if (!state) {
    if (state.error().code == ErrorCode::kNotFound) return std::vector<std::string>{};
    return std::unexpected(state.error());
  }
  std::vector<std::string> out;
  for (const auto& f : parseFaults(*state)) {
    out.push_back(f.node + " " + f.record.fault_class + " " + f.record.job);
  }
  return out;
}

Result<bool> NodeRemediator::takeSlot(const std::string& node, bool record,
                                      const std::string& reason, std::string& why) {
  bool allowed = false;
  auto written = editState([&](State& state) {
    allowed = false;
    why.clear();
    // Fraction: nodes our annotation marks (the cache) plus recorded cordons it may not show yet.
    std::size_t total = 0;
    std::set<std::string> ours;
    for (const auto& n : list_nodes_ ? list_nodes_() : std::vector<Json>{}) {
      ++total;
      if (cordonedByUs(n)) ours.insert(objectName(n));
    }
    for (const auto& r : state.cordons) {
      if (!r.released) ours.insert(r.node);
    }
    // A node already recorded (a retry after a lost race or a failed patch, an owed cordon being
    // completed) takes no second slot; a done record is owed again until this patch lands.
    for (auto& r : state.cordons) {
      if (r.node != node) continue;
      allowed = true;
      if (!record || r.owed) return false;
      r.owed = true;
      r.released = false;
      r.reason = reason;
      return true;
    }
    // At least one node when cordoning is allowed at all: a small cluster must be able to take
    // its one faulty node out (0 disables cordons).
    auto limit =
        static_cast<std::size_t>(std::floor(config_.max_fraction * static_cast<double>(total)));
    if (config_.max_fraction > 0.0 && limit == 0) limit = 1;
    if (ours.size() + 1 > limit) {
      why = "circuit breaker: " + std::to_string(ours.size()) + " of " + std::to_string(total) +
            " nodes already cordoned by c4 (limit " + std::to_string(limit) + ")";
      return false;
    }
    if (static_cast<int>(state.cordons.size()) >= config_.max_cordons_per_window) {
      why = "circuit breaker: " + std::to_string(state.cordons.size()) + " cordons in the last " +
            windowText(config_.window) + " (limit " +
            std::to_string(config_.max_cordons_per_window) + ")";
      return false;
    }
    allowed = true;
    if (!record) return false;
    state.cordons.push_back({node, clock_.wallNow(), true, reason});
    return true;
  });
  if (!written) return std::unexpected(written.error().withContext("record cordon"));
  return allowed;
}

bool NodeRemediator::failed(const std::string& key, Retry retry) {
  const MonoTime now = clock_.monoNow();
  std::lock_guard lock(mu_);
  auto [it, added] = retries_.try_emplace(key, std::move(retry));
  Retry& r = it->second;
  if (!added) {
    r.persisted = r.persisted || retry.persisted;
    if (!retry.reason.empty()) r.reason = retry.reason;
  }
  ++r.failures;
  Duration delay = config_.retry_initial;
  for (int i = 1; i < r.failures && delay < config_.retry_max; ++i) delay *= 2;
  r.next = now + std::min(delay, config_.retry_max);
  const bool event = !r.last_event || now - *r.last_event >= config_.failure_event_interval;
  if (event) r.last_event = now;
  cv_.notify_all();
  return event;
}

int NodeRemediator::succeeded(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = retries_.find(key);
  if (it == retries_.end()) return 0;
  const int failures = it->second.failures;
  retries_.erase(it);
  return failures;
}

Result<CordonOutcome> NodeRemediator::cordon(const std::string& node_name,
                                             const std::string& reason, bool dry_run) {
  return cordonImpl(node_name, reason, dry_run, "");
}

Result<CordonOutcome> NodeRemediator::cordonImpl(const std::string& node_name,
                                                 const std::string& reason, bool dry_run,
                                                 const std::string& note) {
  auto count = [&](CordonOutcome o) {
    if (actions_ != nullptr) actions_->labels({"cordon", std::string(cordonOutcomeName(o))}).inc();
    return o;
  };
  const bool report_only = dry_run || config_.dry_run;
  const std::string key = cordonKey(node_name);
  // A failure that leaves the cordon owed: retried by the loop, an Event on the node now and
  // then (`node` when it could be read).
  auto owe = [&](const Error& error, bool persisted, const Json* node) {
    const bool event = failed(key, Retry(node_name, reason, std::nullopt, persisted));
    log_.warn("Cordon owed", {{"node", node_name}, {"persisted", persisted}, {"error", error}});
    if (event && node != nullptr) {
      events_.record(*node, "Warning", "CordonFailed",
                     "Could not cordon and taint: " + error.message +
                         "; the cordon is owed and retried until it lands (" + reason + ")");
    }
  };
  auto node = readNode(node_name, false);
  if (!node) {
    if (node.error().code != ErrorCode::kNotFound && !report_only)
      owe(node.error(), false, nullptr);
    return std::unexpected(node.error());
  }
  if (cordonedByUs(*node)) {
    return count(CordonOutcome::kAlreadyOurs);
  }
  std::string why;
  auto allowed = takeSlot(node_name, !report_only, reason, why);
  if (!allowed) {
    if (!report_only) owe(allowed.error(), false, &*node);
    return std::unexpected(allowed.error());
  }
  if (!*allowed) {
    events_.record(*node, "Warning", "CordonSkipped", why + "; wanted to cordon: " + reason);
    log_.warn("Cordon skipped", {{"node", node_name}, {"why", why}});
    succeeded(key);  // nothing is owed past the breaker
    return count(CordonOutcome::kBreakerOpen);
  }
  if (report_only) {
    events_.record(*node, "Normal", "CordonDryRun", "Would cordon and taint: " + reason);
    return count(CordonOutcome::kDryRun);
  }
  // The slot is recorded owed: from here a crash or a refused patch leaves the cordon owed.
  if (config_.fault_hook && !config_.fault_hook(kFailpointAfterCordonOwed, node_name)) {
    return makeError(ErrorCode::kCancelled, "fault hook stopped the cordon after its owed record");
  }
  auto patched = patchCordon(node_name, reason, note);
  if (!patched) {
    if (patched.error().code == ErrorCode::kNotFound) {
      // The node is gone: nothing to cordon, the slot is released.
      if (auto dropped = dropCordon(node_name); !dropped) {
        log_.warn("Owed cordon of a deleted node not dropped",
                  {{"node", node_name}, {"error", dropped.error()}});
      }
      succeeded(key);
      return std::unexpected(patched.error());
    }
    owe(patched.error(), true, &*node);
    return count(CordonOutcome::kOwed);
  }
  if (auto done = markCordonDone(node_name); !done) {
    // The node is cordoned; the loop finds the record owed, the node ours, and marks it done.
    log_.warn("Cordon not marked done", {{"node", node_name}, {"error", done.error()}});
    std::lock_guard lock(mu_);
    rescan_ = true;
    cv_.notify_all();
  }
  succeeded(key);
  return count(*patched);
}

Result<CordonOutcome> NodeRemediator::patchCordon(const std::string& node_name,
                                                  const std::string& reason,
                                                  const std::string& note) {
  return retryOnConflict([&](int attempt) -> Result<CordonOutcome> {
    C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, attempt > 1));
    if (cordonedByUs(node)) {
      return CordonOutcome::kAlreadyOurs;
    }
    const bool was_cordoned = boolAt(fieldsOf(node, "spec"), "unschedulable").value_or(false);
    const Json* listed = arrayAt(fieldsOf(node, "spec"), "taints");
    Json taints = listed != nullptr ? *listed : Json::array();
    bool has_taint = false;
    for (const auto& t : taints) {
      if (stringAt(t, "key") == kFaultyTaintKey) has_taint = true;
    }
    const std::string now = formatRfc3339(clock_.wallNow());
    if (!has_taint) {
      taints.push_back({{"key", kFaultyTaintKey},
                        {"value", "true"},
                        {"effect", "NoSchedule"},
                        {"timeAdded", now}});
    }
    Json patch = {{"metadata",
                   {{"resourceVersion", resourceVersionOf(node)},
                    {"annotations",
                     {{node_annotations::kCordonedBy, config_.identity},
                      {node_annotations::kCordonReason, reason.substr(0, 512)},
                      {node_annotations::kCordonTime, now},
                      {node_annotations::kWasCordoned, was_cordoned ? "true" : "false"}}}}},
                  {"spec", {{"unschedulable", true}, {"taints", taints}}}};
    C4_ASSIGN_OR_RETURN(Json updated,
                        client_.patch(resources::nodes(), "", node_name, PatchType::kMerge, patch));
    events_.record(updated, "Warning", "NodeCordoned",
                   "Cordoned and tainted c4.dev/faulty:NoSchedule: " + reason + note);
    log_.info("Node cordoned",
              {{"node", node_name}, {"reason", reason}, {"wasCordoned", was_cordoned}});
    return CordonOutcome::kCordoned;
  });
}

Result<UncordonOutcome> NodeRemediator::uncordon(const std::string& node_name) {
  return uncordonImpl(node_name, false, false);
}

Result<UncordonOutcome> NodeRemediator::uncordonImpl(const std::string& node_name, bool release,
                                                     bool forget_history) {
  auto count = [&](UncordonOutcome o, const char* name) {
    if (actions_ != nullptr) actions_->labels({"uncordon", name}).inc();
    return o;
  };
  return retryOnConflict([&](int attempt) -> Result<UncordonOutcome> {
    C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, attempt > 1));
    if (annotationOf(node, node_annotations::kCordonedBy) != config_.identity) {
      if (release && !config_.dry_run) {
        Json patch = {{"metadata",
                       {{"resourceVersion", resourceVersionOf(node)},
                        {"annotations", {{node_annotations::kRelease, nullptr}}}}}};
        C4_ASSIGN_OR_RETURN(Json updated, client_.patch(resources::nodes(), "", node_name,
                                                        PatchType::kMerge, patch));
        events_.record(updated, "Warning", "NodeReleaseIgnored",
                       "c4.dev/release: C4 did not cordon this node (it carries no "
                       "c4.dev/cordoned-by of C4's); only the annotation was removed");
      }
      return count(UncordonOutcome::kNotOurs, "not_ours");
    }
    if (config_.dry_run) {
      events_.record(node, "Normal", "UncordonDryRun", "Would remove the c4 cordon and taint");
      return count(UncordonOutcome::kDryRun, "dry_run");
    }
    const bool keep_cordon = annotationOf(node, node_annotations::kWasCordoned) == "true";
    Json kept = Json::array();
    if (const Json* taints = arrayAt(fieldsOf(node, "spec"), "taints")) {
      for (const auto& t : *taints) {
        if (stringAt(t, "key") != kFaultyTaintKey) kept.push_back(t);
      }
    }
    Json annotations = Json::object();
    for (const char* key : {node_annotations::kCordonedBy, node_annotations::kCordonReason,
                            node_annotations::kCordonTime, node_annotations::kWasCordoned}) {
      annotations[key] = nullptr;  // merge patch: remove
    }
    if (release) annotations[node_annotations::kRelease] = nullptr;
    if (forget_history) annotations[kFaultHistoryAnnotation] = nullptr;
    Json patch = {
        {"metadata", {{"resourceVersion", resourceVersionOf(node)}, {"annotations", annotations}}},
        {"spec", {{"taints", kept}}}};
    if (!keep_cordon) patch["spec"]["unschedulable"] = false;
    C4_ASSIGN_OR_RETURN(Json updated,
                        client_.patch(resources::nodes(), "", node_name, PatchType::kMerge, patch));
    std::string message = keep_cordon ? "Removed the c4 taint; the node stays cordoned (it was "
                                        "cordoned before c4 acted)"
                                      : "Removed the c4 cordon and taint";
    if (release) {
      message += forget_history ? " (released: c4.dev/release=forget-history; its fault history "
                                  "removed)"
                                : " (released: c4.dev/release; its fault history kept)";
    }
    events_.record(updated, "Normal", "NodeUncordoned", message);
    // Its breaker record no longer counts against the fraction of nodes cordoned (it still
    // counts against the cordons per window); without it that frees itself with the window.
    if (auto marked = editState([&](State& state) {
          bool changed = false;
          for (auto& r : state.cordons) {
            if (r.node != node_name || r.owed || r.released) continue;
            r.released = true;
            changed = true;
          }
          return changed;
        });
        !marked) {
      log_.warn("Released cordon not marked in the breaker's state",
                {{"node", node_name}, {"error", marked.error()}});
    }
    return keep_cordon ? count(UncordonOutcome::kTaintRemovedKeptCordon, "taint_removed")
                       : count(UncordonOutcome::kUncordoned, "uncordoned");
  });
}

bool hasReleaseAnnotation(const Json& node) {
  const Json& annotations = fieldsOf(fieldsOf(node, "metadata"), "annotations");
  return annotations.is_object() && annotations.contains(node_annotations::kRelease);
}

void NodeRemediator::requestRelease(const std::string& node) {
  std::lock_guard lock(mu_);
  releases_.try_emplace(node, Release{clock_.monoNow(), 0});
  cv_.notify_all();
}

Result<std::optional<UncordonOutcome>> NodeRemediator::release(const std::string& node_name) {
  C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, false));
  if (!hasReleaseAnnotation(node)) return std::optional<UncordonOutcome>{};
  const std::string value = annotationOf(node, node_annotations::kRelease);
  if (value != kReleaseTrue && value != kReleaseForgetHistory) {
    const std::string message =
        std::string("c4.dev/release=\"") + value +
        "\": the value must be \"true\" (return the node to service) or "
        "\"forget-history\" (and remove its fault history); nothing changed";
    events_.record(node, "Warning", "NodeReleaseIgnored", message);
    return makeError(ErrorCode::kInvalidArgument, message);
  }
  C4_ASSIGN_OR_RETURN(UncordonOutcome outcome,
                      uncordonImpl(node_name, true, value == kReleaseForgetHistory));
  log_.info("Node released", {{"node", node_name}, {"value", value}});
  return std::optional<UncordonOutcome>{outcome};
}

void NodeRemediator::completeReleases(bool rescan) {
  const MonoTime now = clock_.monoNow();
  if (rescan) {
    for (const auto& node : list_nodes_()) {
      if (!hasReleaseAnnotation(node)) continue;
      std::lock_guard lock(mu_);
      releases_.try_emplace(objectName(node), Release{now, 0});
    }
  }
  std::vector<std::string> due;
  {
    std::lock_guard lock(mu_);
    for (const auto& [node, r] : releases_) {
      if (r.next <= now) due.push_back(node);
    }
  }
  for (const auto& node : due) {
    auto released = release(node);
    std::lock_guard lock(mu_);
    auto it = releases_.find(node);
    if (it == releases_.end()) continue;
    if (released || released.error().code == ErrorCode::kNotFound ||
        released.error().code == ErrorCode::kInvalidArgument) {
      releases_.erase(it);
      continue;
    }
    // Retried with the owed actions' backoff until it lands or the annotation is gone.
    Duration wait = config_.retry_initial;
    for (int i = 0; i < it->second.failures && wait < config_.retry_max; ++i) wait *= 2;
    it->second = Release{now + std::min(wait, config_.retry_max), it->second.failures + 1};
    log_.warn("Node release failed; retried",
              {{"node", node}, {"error", released.error()}, {"failures", it->second.failures}});
  }
}

void NodeRemediator::completeCordon(const std::string& node_name, const std::string& reason) {
  const std::string key = cordonKey(node_name);
  auto node = readNode(node_name, false);
  if (!node && node.error().code == ErrorCode::kNotFound) {
    if (auto dropped = dropCordon(node_name); !dropped) {
      failed(key, Retry(node_name, reason, std::nullopt, true));
      return;
    }
    succeeded(key);
    log_.info("Owed cordon dropped: the node is gone", {{"node", node_name}});
    return;
  }
  if (node && cordonedByUs(*node)) {
    // Patched by an earlier try (or a predecessor killed before it marked the record done).
    if (auto done = markCordonDone(node_name); !done) {
      failed(key, Retry(node_name, reason, std::nullopt, true));
      return;
    }
    succeeded(key);
    log_.info("Owed cordon found done", {{"node", node_name}});
    return;
  }
  int failures = 0;
  {
    std::lock_guard lock(mu_);
    if (auto it = retries_.find(key); it != retries_.end()) failures = it->second.failures;
  }
  const std::string note =
      failures > 0 ? " (owed; done after " + std::to_string(failures) + " failed attempt(s))"
                   : std::string(" (owed by an earlier operator process)");
  auto outcome = cordonImpl(node_name, reason, false, note);
  if (outcome &&
      (*outcome == CordonOutcome::kCordoned || *outcome == CordonOutcome::kAlreadyOurs)) {
    log_.info("Owed cordon done", {{"node", node_name}, {"failedAttempts", failures}});
  }
}

void NodeRemediator::completeFault(const std::string& node_name, const NodeFaultRecord& record,
                                   bool persisted) {
  const std::string key = faultKey(node_name, record);
  if (!persisted) {
    // Owed in memory only: its slot may not be taken yet (a persisted entry has one).
    std::string why;
    auto slot = takeFaultSlot(node_name, record, why);
    if (!slot) {
      failed(key, Retry(node_name, {}, record, false));
      log_.warn("Owed fault history entry not written yet",
                {{"node", node_name}, {"error", slot.error()}});
      return;
    }
    if (!*slot) {
      succeeded(key);  // forgotten: over the budget
      faultSkipped(node_name, record, why);
      return;
    }
  }
  auto written = writeFault(node_name, record);
  if (written || written.error().code == ErrorCode::kNotFound) {
    if (persisted) {
      if (auto dropped = dropFault(node_name, record); !dropped) {
        // Written; the next try finds the entry in the history and only drops the record.
        failed(key, Retry(node_name, {}, record, true));
        return;
      }
    }
    const int failures = succeeded(key);
    if (!written) {
      log_.info("Owed fault history entry dropped: the node is gone", {{"node", node_name}});
      return;
    }
    log_.info("Owed fault history entry written",
              {{"node", node_name}, {"class", record.fault_class}, {"failedAttempts", failures}});
    if (auto node = readNode(node_name, false)) {
      events_.record(*node, "Normal", "FaultHistoryWritten",
                     "Appended the owed " + record.fault_class + " (" + record.job + ", " +
                         formatRfc3339(record.time) + ") to the fault history");
    }
    return;
  }
  if (!persisted) persisted = static_cast<bool>(persistFault(node_name, record));
  if (failed(key, Retry(node_name, {}, record, persisted))) {
    if (auto node = readNode(node_name, false)) {
      events_.record(*node, "Warning", "FaultHistoryNotWritten",
                     "Could not append the owed " + record.fault_class + " (" + record.job +
                         ") to the fault history: " + written.error().message +
                         "; retried until it is written");
    }
  }
  log_.warn("Owed fault history entry not written yet",
            {{"node", node_name}, {"error", written.error()}});
}

void NodeRemediator::completeOwed() {
  try {
    completeOwedPass();
  } catch (const std::exception& e) {  // no exception leaves the loop
    log_.warn("Completing owed node actions threw", {{"error", e.what()}});
  }
}

void NodeRemediator::completeOwedPass() {
  const MonoTime now = clock_.monoNow();
  bool rescan = false;
  std::vector<Retry> due;
  {
    std::lock_guard lock(mu_);
    rescan = rescan_ || now >= next_rescan_;
    if (rescan) {
      rescan_ = false;
      next_rescan_ = now + config_.rescan_interval;
    }
    for (auto& [key, r] : retries_) {
      if (r.next > now) continue;
      due.push_back(r);
      // Until this try reports back (a failure schedules the next one, a success forgets it);
      // a try that ends neither way is not taken again at once.
      r.next = now + config_.retry_initial;
    }
  }
  // Releases a person asked for (in a dry run: their UncordonDryRun Events).
  completeReleases(rescan);
  if (config_.dry_run) return;  // an operator-wide dry run acts on nothing, owed or not
  // What this process knows of is retried on its own schedule (above); the ConfigMap is read
  // for what it does not know: a predecessor's owed actions, or ones whose retry state is lost.
  if (rescan) {
    auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
    if (!state && state.error().code != ErrorCode::kNotFound) {
      log_.warn("Owed node actions not read", {{"error", state.error()}});
      std::lock_guard lock(mu_);
      next_rescan_ = now + config_.retry_initial;
    } else if (state) {
      auto known = [&](const std::string& key) {
        std::lock_guard lock(mu_);
        return retries_.contains(key);
      };
      for (const auto& r : parseRecords(*state)) {
        if (r.owed && !known(cordonKey(r.node))) {
          due.push_back(Retry(r.node, r.reason, std::nullopt, true));
        }
      }
      for (const auto& f : parseFaults(*state)) {
        if (!known(faultKey(f.node, f.record))) {
          due.push_back(Retry(f.node, {}, f.record, true));
        }
      }
    }
  }
  for (const auto& r : due) {
    if (r.fault) {
      completeFault(r.node, *r.fault, r.persisted);
    } else {
      completeCordon(r.node, r.reason);
    }
  }
}

void NodeRemediator::start() {
  std::lock_guard lock(mu_);
  if (stopping_ || loop_.joinable()) return;
  rescan_ = true;  // a new process (or a new leader) completes what its predecessor owed
  loop_ = std::thread([this] { loop(); });
}

void NodeRemediator::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
}

void NodeRemediator::loop() {
  for (;;) {
    completeOwed();
    std::unique_lock lock(mu_);
    if (stopping_) return;
    auto next = [&] {
      MonoTime at = rescan_ ? clock_.monoNow() : next_rescan_;
      for (const auto& [key, r] : retries_) at = std::min(at, r.next);
      for (const auto& [node, r] : releases_) at = std::min(at, r.next);
      return at;
    };
    const MonoTime deadline = next();
    // Woken early when a failure schedules a sooner retry, or by stop().
    clock_.waitUntil(lock, cv_, deadline, [&] { return stopping_ || next() < deadline; });
    if (stopping_) return;
  }
}

}  // namespace c4::op
