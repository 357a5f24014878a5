// Event recording.
#include "operator/controller/events.h"

#include <cstdio>

namespace c4::op {

EventRecorder::EventRecorder(KubeClient& client, Clock& clock, std::string component,
                             std::string instance, metrics::Registry* registry)
    : client_(client),
      clock_(clock),
      component_(std::move(component)),
      instance_(std::move(instance)),
      log_("events") {
  if (registry != nullptr) {
    events_ = &registry->counter("c4_operator_events_total", "Events recorded.",
                                 {"type", "reason", "result"});
  }
}

Json EventRecorder::buildEvent(const Json& regarding, const std::string& type,
                               const std::string& reason, const std::string& message) {
  std::string ns = objectNamespace(regarding);
  if (ns.empty()) ns = "default";  // cluster-scoped objects (Nodes): kubectl looks in default
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%llx.%llx",
                static_cast<unsigned long long>(toUnixNanos(clock_.wallNow())),
                static_cast<unsigned long long>(sequence_.fetch_add(1)));
  std::string now = formatRfc3339(clock_.wallNow());
  const Json& meta = regarding["metadata"];
  Json involved = {{"apiVersion", regarding.value("apiVersion", std::string{})},
                   {"kind", regarding.value("kind", std::string{})},
                   {"name", meta.value("name", std::string{})},
                   {"uid", meta.value("uid", std::string{})}};
  if (!objectNamespace(regarding).empty()) involved["namespace"] = objectNamespace(regarding);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata",
           {{"name", meta.value("name", std::string{"object"}) + "." + suffix}, {"namespace", ns}}},
          {"involvedObject", involved},
          {"type", type},
          {"reason", reason},
          {"message", message.substr(0, 1024)},
          {"source", {{"component", component_}}},
          {"reportingComponent", component_},
          {"reportingInstance", instance_},
          {"firstTimestamp", now},
          {"lastTimestamp", now},
          {"count", 1}};
}

void EventRecorder::record(const Json& regarding, const std::string& type,
                           const std::string& reason, const std::string& message) {
  Json event = buildEvent(regarding, type, reason, message);
  auto created =
      client_.create(resources::events(), event["metadata"]["namespace"].get<std::string>(), event);
  if (events_ != nullptr) events_->labels({type, reason, created ? "ok" : "error"}).inc();
  if (!created) {
    log_.warn("Event write failed", {{"reason", reason}, {"error", created.error()}});
    return;
  }
  log_.info("Event recorded", {{"object", objectKey(regarding)},
                               {"kind", regarding.value("kind", std::string{})},
                               {"type", type},
                               {"reason", reason},
                               {"message", message}});
}

}  // namespace c4::op
