// Node cordon/taint with bookkeeping and a circuit breaker.
#include "operator/remediation/node_actions.h"

#include <cmath>

namespace c4::op {

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
                               NodeActionConfig config, metrics::Registry* registry)
    : client_(client),
      clock_(clock),
      events_(events),
      config_(std::move(config)),
      log_("node-actions") {
  if (registry != nullptr) {
    actions_ =
        &registry->counter("c4_operator_node_actions_total",
                           "Node cordon/uncordon decisions by outcome.", {"action", "outcome"});
  }
}

Result<bool> NodeRemediator::breakerAllows(std::string& why) {
  C4_ASSIGN_OR_RETURN(Json nodes, client_.list(resources::nodes(), ""));
  std::size_t total = nodes["items"].size();
  std::size_t ours = 0;
  for (const auto& n : nodes["items"]) {
    if (!annotationOf(n, node_annotations::kCordonedBy).empty()) ++ours;
  }
  auto limit =
      static_cast<std::size_t>(std::floor(config_.max_fraction * static_cast<double>(total)));
  if (ours + 1 > limit) {
    why = "circuit breaker: " + std::to_string(ours) + " of " + std::to_string(total) +
          " nodes already cordoned by c4 (limit " + std::to_string(limit) + ")";
    return false;
  }
  std::lock_guard lock(mu_);
  MonoTime now = clock_.monoNow();
  while (!recent_.empty() && recent_.front() + config_.window <= now) recent_.pop_front();
  if (static_cast<int>(recent_.size()) >= config_.max_cordons_per_window) {
    why = "circuit breaker: " + std::to_string(recent_.size()) + " cordons in the last " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(config_.window).count()) +
          " s (limit " + std::to_string(config_.max_cordons_per_window) + ")";
    return false;
  }
  return true;
}

namespace {

// Read-modify-write against a Node that others write too: retry a lost optimistic-concurrency
// race (HTTP 409) from a fresh read, like client-go's RetryOnConflict.
template <typename Attempt>
auto retryOnConflict(Attempt&& attempt) -> decltype(attempt()) {
  constexpr int kAttempts = 5;
  for (int i = 1;; ++i) {
    auto result = attempt();
    if (result || result.error().code != ErrorCode::kConflict || i == kAttempts) return result;
  }
}

}  // namespace

Result<CordonOutcome> NodeRemediator::cordon(const std::string& node_name,
                                             const std::string& reason) {
  return retryOnConflict([&] { return cordonOnce(node_name, reason); });
}

Result<UncordonOutcome> NodeRemediator::uncordon(const std::string& node_name) {
  return retryOnConflict([&] { return uncordonOnce(node_name); });
}

Result<CordonOutcome> NodeRemediator::cordonOnce(const std::string& node_name,
                                                 const std::string& reason) {
  C4_ASSIGN_OR_RETURN(Json node, client_.get(resources::nodes(), "", node_name));
  auto count = [&](CordonOutcome o) {
    if (actions_ != nullptr) actions_->labels({"cordon", std::string(cordonOutcomeName(o))}).inc();
    return o;
  };
  if (!annotationOf(node, node_annotations::kCordonedBy).empty()) {
    return count(CordonOutcome::kAlreadyOurs);
  }
  std::string why;
  C4_ASSIGN_OR_RETURN(bool allowed, breakerAllows(why));
  if (!allowed) {
    events_.record(node, "Warning", "CordonSkipped", why + "; wanted to cordon: " + reason);
    log_.warn("Cordon skipped", {{"node", node_name}, {"why", why}});
    return count(CordonOutcome::kBreakerOpen);
  }
  if (config_.dry_run) {
    events_.record(node, "Normal", "CordonDryRun", "Would cordon and taint: " + reason);
    return count(CordonOutcome::kDryRun);
  }
  bool was_cordoned = node["spec"].value("unschedulable", false);
  Json& annotations = node["metadata"]["annotations"];
  if (!annotations.is_object()) annotations = Json::object();
  annotations[node_annotations::kCordonedBy] = config_.identity;
  annotations[node_annotations::kCordonReason] = reason.substr(0, 512);
  annotations[node_annotations::kCordonTime] = formatRfc3339(clock_.wallNow());
  annotations[node_annotations::kWasCordoned] = was_cordoned ? "true" : "false";
  node["spec"]["unschedulable"] = true;
  Json& taints = node["spec"]["taints"];
  if (!taints.is_array()) taints = Json::array();
  bool has_taint = false;
  for (const auto& t : taints) {
    if (t.value("key", std::string{}) == kFaultyTaintKey) has_taint = true;
  }
  if (!has_taint) {
    taints.push_back({{"key", kFaultyTaintKey},
                      {"value", "true"},
                      {"effect", "NoSchedule"},
                      {"timeAdded", formatRfc3339(clock_.wallNow())}});
  }
  C4_ASSIGN_OR_RETURN(Json updated, client_.update(resources::nodes(), "", node));
  {
    std::lock_guard lock(mu_);
    recent_.push_back(clock_.monoNow());
  }
  events_.record(updated, "Warning", "NodeCordoned",
                 "Cordoned and tainted c4.dev/faulty:NoSchedule: " + reason);
  log_.info("Node cordoned",
            {{"node", node_name}, {"reason", reason}, {"wasCordoned", was_cordoned}});
  return count(CordonOutcome::kCordoned);
}

Result<UncordonOutcome> NodeRemediator::uncordonOnce(const std::string& node_name) {
  C4_ASSIGN_OR_RETURN(Json node, client_.get(resources::nodes(), "", node_name));
  auto count = [&](UncordonOutcome o, const char* name) {
    if (actions_ != nullptr) actions_->labels({"uncordon", name}).inc();
    return o;
  };
  if (annotationOf(node, node_annotations::kCordonedBy) != config_.identity) {
    return count(UncordonOutcome::kNotOurs, "not_ours");
  }
  if (config_.dry_run) {
    events_.record(node, "Normal", "UncordonDryRun", "Would remove the c4 cordon and taint");
    return count(UncordonOutcome::kDryRun, "dry_run");
  }
  bool keep_cordon = annotationOf(node, node_annotations::kWasCordoned) == "true";
  Json& annotations = node["metadata"]["annotations"];
  for (const char* key : {node_annotations::kCordonedBy, node_annotations::kCordonReason,
                          node_annotations::kCordonTime, node_annotations::kWasCordoned}) {
    annotations.erase(key);
  }
  if (!keep_cordon) node["spec"]["unschedulable"] = false;
  if (node["spec"].contains("taints") && node["spec"]["taints"].is_array()) {
    Json kept = Json::array();
    for (const auto& t : node["spec"]["taints"]) {
      if (t.value("key", std::string{}) != kFaultyTaintKey) kept.push_back(t);
    }
    node["spec"]["taints"] = kept;
  }
  C4_ASSIGN_OR_RETURN(Json updated, client_.update(resources::nodes(), "", node));
  events_.record(updated, "Normal", "NodeUncordoned",
                 keep_cordon ? "Removed the c4 taint; the node stays cordoned (it was cordoned "
                               "before c4 acted)"
                             : "Removed the c4 cordon and taint");
  return keep_cordon ? count(UncordonOutcome::kTaintRemovedKeptCordon, "taint_removed")
                     : count(UncordonOutcome::kUncordoned, "uncordoned");
}

}  // namespace c4::op
