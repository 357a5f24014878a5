// Node cordon/taint with bookkeeping and a circuit breaker kept in the cluster.
#include "operator/remediation/node_actions.h"

#include <cmath>
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

// One recorded cordon in the breaker's state.
struct CordonRecord {
  std::string node;
  WallTime time;
};

std::vector<CordonRecord> parseRecords(const Json& config_map) {
  std::vector<CordonRecord> out;
  auto data = config_map.find("data");
  if (data == config_map.end() || !data->is_object()) return out;
  auto text = data->find(kStateKey);
  if (text == data->end() || !text->is_string()) return out;
  Json list = Json::parse(text->get<std::string>(), nullptr, false);
  if (!list.is_array()) return out;  // unreadable state: start afresh (logged by the caller)
  for (const auto& r : list) {
    if (!r.is_object() || !r.contains("node") || !r["node"].is_string() || !r.contains("unixNs") ||
        !r["unixNs"].is_number_integer()) {
      continue;
    }
    out.push_back({r["node"].get<std::string>(), fromUnixNanos(r["unixNs"].get<std::int64_t>())});
  }
  return out;
}

std::string encodeRecords(const std::vector<CordonRecord>& records) {
  Json list = Json::array();
  for (const auto& r : records) {
    list.push_back(
        {{"node", r.node}, {"unixNs", toUnixNanos(r.time)}, {"time", formatRfc3339(r.time)}});
  }
  return list.dump();
}

// A string field of an object, or "" (checked access: never throws on another type).
std::string stringField(const Json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

// The resourceVersion of an object, or "" when it has none (or not a string).
std::string resourceVersionOf(const Json& object) {
  auto meta = object.find("metadata");
  return meta != object.end() && meta->is_object() ? stringField(*meta, "resourceVersion")
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
    auto t = parseRfc3339(stringField(e, "time"));
    if (!t) {
      report(entry + ": time is not an RFC 3339 string");
      continue;
    }
    out.push_back({*t, stringField(e, "class"), stringField(e, "job")});
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
  }
  return "unknown";
}

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
    actions_ =
        &registry->counter("c4_operator_node_actions_total",
                           "Node cordon/uncordon decisions by outcome.", {"action", "outcome"});
    // Every series from the start at 0, so increase() in alerts sees the first cordon.
    for (auto o : {CordonOutcome::kCordoned, CordonOutcome::kAlreadyOurs, CordonOutcome::kDryRun,
                   CordonOutcome::kBreakerOpen}) {
      actions_->labels({"cordon", std::string(cordonOutcomeName(o))});
    }
    for (const char* o : {"uncordoned", "taint_removed", "not_ours", "dry_run"}) {
      actions_->labels({"uncordon", o});
    }
  }
}

Result<Json> NodeRemediator::readNode(const std::string& name, bool fresh) {
  if (!fresh && get_node_) {
    if (auto cached = get_node_(name)) return *cached;
  }
  // Not in the cache (yet), or a write lost a race with it: read the API server.
  return client_.get(resources::nodes(), "", name);
}

Status NodeRemediator::recordFault(const std::string& node_name, const NodeFaultRecord& record) {
  if (config_.dry_run) return okStatus();  // operator-wide dry run: decide and report only
  return retryOnConflict([&](int attempt) -> Status {
    C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, attempt > 1));
    // Without a resourceVersion the patch would be unconditional: read one from the server.
    if (resourceVersionOf(node).empty()) {
      C4_ASSIGN_OR_RETURN(node, readNode(node_name, true));
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

Result<std::vector<std::string>> NodeRemediator::recentCordons() {
  auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
  if (!state) {
    if (state.error().code == ErrorCode::kNotFound) return std::vector<std::string>{};
    return std::unexpected(state.error());
  }
  std::vector<std::string> out;
  WallTime now = clock_.wallNow();
  for (const auto& r : parseRecords(*state)) {
    if (now - r.time < config_.window) out.push_back(r.node);
  }
  return out;
}

Result<bool> NodeRemediator::takeSlot(const std::string& node, bool record, std::string& why) {
  return retryOnConflict([&](int) -> Result<bool> {
    auto state = client_.get(resources::configMaps(), config_.state_namespace, config_.state_name);
    bool exists = true;
    if (!state) {
      if (state.error().code != ErrorCode::kNotFound) {
        return std::unexpected(state.error().withContext("read circuit breaker state"));
      }
      exists = false;
      state = Json{{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata",
                    {{"name", config_.state_name},
                     {"namespace", config_.state_namespace},
                     {"labels", {{"app.kubernetes.io/part-of", "c4"}}}}},
                   {"data", Json::object()}};
    }
    const WallTime now = clock_.wallNow();
    std::vector<CordonRecord> records;
    for (auto& r : parseRecords(*state)) {
      if (now - r.time < config_.window) records.push_back(std::move(r));
    }
    // Fraction: nodes our annotation marks (the cache) plus recorded cordons it may not show yet.
    std::size_t total = 0;
    std::set<std::string> ours;
    for (const auto& n : list_nodes_ ? list_nodes_() : std::vector<Json>{}) {
      ++total;
      if (cordonedByUs(n)) ours.insert(objectName(n));
    }
    for (const auto& r : records) ours.insert(r.node);
    // A node already recorded in the window (a retry after a lost race) takes no second slot.
    for (const auto& r : records) {
      if (r.node == node) return true;
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
    if (static_cast<int>(records.size()) >= config_.max_cordons_per_window) {
      why =
          "circuit breaker: " + std::to_string(records.size()) + " cordons in the last " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(config_.window).count()) +
          " s (limit " + std::to_string(config_.max_cordons_per_window) + ")";
      return false;
    }
    if (!record) return true;
    records.push_back({node, now});
    (*state)["data"][kStateKey] = encodeRecords(records);
    // The update carries the resourceVersion read above: a concurrent taker gets 409 and
    // re-checks against the state that includes this record.
    auto written = exists
                       ? client_.update(resources::configMaps(), config_.state_namespace, *state)
                       : client_.create(resources::configMaps(), config_.state_namespace, *state);
    if (!written) {
      if (written.error().code == ErrorCode::kAlreadyExists) {
        return makeError(ErrorCode::kConflict, "circuit breaker state created concurrently");
      }
      return std::unexpected(written.error().withContext("record cordon in circuit breaker"));
    }
    return true;
  });
}

Result<CordonOutcome> NodeRemediator::cordon(const std::string& node_name,
                                             const std::string& reason, bool dry_run) {
  auto count = [&](CordonOutcome o) {
    if (actions_ != nullptr) actions_->labels({"cordon", std::string(cordonOutcomeName(o))}).inc();
    return o;
  };
  C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, false));
  if (cordonedByUs(node)) {
    return count(CordonOutcome::kAlreadyOurs);
  }
  const bool report_only = dry_run || config_.dry_run;
  std::string why;
  C4_ASSIGN_OR_RETURN(bool allowed, takeSlot(node_name, !report_only, why));
  if (!allowed) {
    events_.record(node, "Warning", "CordonSkipped", why + "; wanted to cordon: " + reason);
    log_.warn("Cordon skipped", {{"node", node_name}, {"why", why}});
    return count(CordonOutcome::kBreakerOpen);
  }
  if (report_only) {
    events_.record(node, "Normal", "CordonDryRun", "Would cordon and taint: " + reason);
    return count(CordonOutcome::kDryRun);
  }
  C4_ASSIGN_OR_RETURN(CordonOutcome outcome, patchCordon(node_name, reason));
  return count(outcome);
}

Result<CordonOutcome> NodeRemediator::patchCordon(const std::string& node_name,
                                                  const std::string& reason) {
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
                   "Cordoned and tainted c4.dev/faulty:NoSchedule: " + reason);
    log_.info("Node cordoned",
              {{"node", node_name}, {"reason", reason}, {"wasCordoned", was_cordoned}});
    return CordonOutcome::kCordoned;
  });
}

Result<UncordonOutcome> NodeRemediator::uncordon(const std::string& node_name) {
  auto count = [&](UncordonOutcome o, const char* name) {
    if (actions_ != nullptr) actions_->labels({"uncordon", name}).inc();
    return o;
  };
  return retryOnConflict([&](int attempt) -> Result<UncordonOutcome> {
    C4_ASSIGN_OR_RETURN(Json node, readNode(node_name, attempt > 1));
    if (annotationOf(node, node_annotations::kCordonedBy) != config_.identity) {
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
    Json patch = {
        {"metadata", {{"resourceVersion", resourceVersionOf(node)}, {"annotations", annotations}}},
        {"spec", {{"taints", kept}}}};
    if (!keep_cordon) patch["spec"]["unschedulable"] = false;
    C4_ASSIGN_OR_RETURN(Json updated,
                        client_.patch(resources::nodes(), "", node_name, PatchType::kMerge, patch));
    events_.record(updated, "Normal", "NodeUncordoned",
                   keep_cordon ? "Removed the c4 taint; the node stays cordoned (it was cordoned "
                                 "before c4 acted)"
                               : "Removed the c4 cordon and taint");
    return keep_cordon ? count(UncordonOutcome::kTaintRemovedKeptCordon, "taint_removed")
                       : count(UncordonOutcome::kUncordoned, "uncordoned");
  });
}

}  // namespace c4::op
