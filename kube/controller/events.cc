// Event recording, correlated as client-go's EventCorrelator does.
#include "kube/controller/events.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <initializer_list>
#include <string_view>

namespace c4::kube {

namespace {

constexpr std::size_t kMaxMessageBytes = 1024;
constexpr std::string_view kCombinedPrefix = "(combined from similar events): ";

// At most `max` bytes, cut at a UTF-8 character boundary (the API server rejects broken UTF-8).
std::string truncateUtf8(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

// Event names end in "<wall nanoseconds>.<sequence>"; the sequence is process-wide so that two
// recorders never pick the same name for the same object at the same instant.
std::uint64_t nextEventSequence() {
  static std::atomic<std::uint64_t> sequence{0};
  return sequence.fetch_add(1);
}

std::string field(const Json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::string joinKey(std::initializer_list<std::string> parts) {
  std::string key;
  for (const auto& p : parts) {
    key += p;
    key += '\x1f';  // unit separator: no two field lists join to the same key
  }
  return key;
}

// The involved object and source: what the spam filter counts per (getSpamKey).
std::string spamKey(const Json& event) {
  const Json& source = event["source"];
  const Json& object = event["involvedObject"];
  return joinKey({field(source, "component"), field(source, "host"), field(object, "kind"),
                  field(object, "namespace"), field(object, "name"), field(object, "uid"),
                  field(object, "apiVersion")});
}

// Everything but the message: similar Events (EventAggregatorByReasonFunc).
std::string aggregateKey(const Json& event) {
  return joinKey({spamKey(event), field(event, "type"), field(event, "reason"),
                  field(event, "reportingComponent"), field(event, "reportingInstance")});
}

// Everything that makes two Events identical (getEventKey).
std::string eventKey(const Json& event) {
  return joinKey({spamKey(event), field(event["involvedObject"], "fieldPath"), field(event, "type"),
                  field(event, "reason"), field(event, "message")});
}

}  // namespace

EventRecorder::EventRecorder(KubeClient& client, Clock& clock, std::string component,
                             std::string instance, metrics::Registry* registry,
                             EventCorrelatorOptions options)
    : client_(client),
      clock_(clock),
      component_(std::move(component)),
      instance_(std::move(instance)),
      options_(options),
      log_("events"),
      aggregates_(options.cache_entries),
      observations_(options.cache_entries),
      spam_(options.cache_entries) {
  if (registry != nullptr) {
    events_ = &registry->counter("c4_operator_events_total",
                                 "Events recorded, by result: ok (created or counted), error "
                                 "(the write failed), dropped (spam filter).",
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
                static_cast<unsigned long long>(nextEventSequence()));
  std::string now = formatRfc3339(clock_.wallNow());
  const Json& meta = fieldsOf(regarding, "metadata");
  Json involved = {{"apiVersion", stringAt(regarding, "apiVersion").value_or("")},
                   {"kind", stringAt(regarding, "kind").value_or("")},
                   {"name", stringAt(meta, "name").value_or("")},
                   {"uid", stringAt(meta, "uid").value_or("")}};
  if (!objectNamespace(regarding).empty()) involved["namespace"] = objectNamespace(regarding);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata",
           {{"name", stringAt(meta, "name").value_or("object") + "." + suffix}, {"namespace", ns}}},
          {"involvedObject", involved},
          {"type", type},
          {"reason", reason},
          {"message", truncateUtf8(message, kMaxMessageBytes)},
          {"source", {{"component", component_}}},
          {"reportingComponent", component_},
          {"reportingInstance", instance_},
          {"firstTimestamp", now},
          {"lastTimestamp", now},
          {"count", 1}};
}

std::string EventRecorder::aggregateLocked(Json& event, MonoTime now) {
  const std::string key = aggregateKey(event);
  Aggregate* similar = aggregates_.get(key);
  if (similar == nullptr || now - similar->last > options_.aggregate_interval) {
    similar = &aggregates_.put(key, Aggregate{{}, now});
  }
  similar->messages.insert(std::hash<std::string>{}(field(event, "message")));
  similar->last = now;
  if (similar->messages.size() < options_.aggregate_max_events) return eventKey(event);
  // One too many: count it as the combined Event, and keep the set below the limit (client-go
  // drops an arbitrary member, so each further new message is combined too).
  similar->messages.erase(similar->messages.begin());
  event["message"] =
      truncateUtf8(std::string(kCombinedPrefix) + field(event, "message"), kMaxMessageBytes);
  return key;
}

EventRecorder::Write EventRecorder::observeLocked(Json& event, const std::string& key,
                                                  MonoTime now) {
  Write write = Write::kCreate;
  Observation* seen = observations_.get(key);
  if (seen != nullptr && now - seen->last <= options_.dedup_window) {
    event["metadata"]["name"] = seen->name;
    event["firstTimestamp"] = seen->first_timestamp;
    event["count"] = seen->count + 1;
    write = Write::kPatch;
  }
  // Counted even when dropped below: the next Event written carries the true count.
  observations_.put(
      key, Observation{event["metadata"]["name"].get<std::string>(),
                       event["count"].get<std::int64_t>(), field(event, "firstTimestamp"), now});
  return spamAcceptLocked(event, now) ? write : Write::kDrop;
}

bool EventRecorder::spamAcceptLocked(const Json& event, MonoTime now) {
  const std::string key = spamKey(event);
  const double burst = options_.spam_burst;
  SpamBucket* bucket = spam_.get(key);
  if (bucket == nullptr) {
    bucket = &spam_.put(key, SpamBucket{burst, now});
  }
  const double refilled = std::chrono::duration<double>(now - bucket->last) /
                          std::chrono::duration<double>(options_.spam_refill);
  bucket->tokens = std::min(burst, bucket->tokens + refilled);
  bucket->last = now;
  if (bucket->tokens < 1) return false;
  bucket->tokens -= 1;
  return true;
}

void EventRecorder::record(const Json& regarding, const std::string& type,
                           const std::string& reason, const std::string& message) {
  try {
    Json event = buildEvent(regarding, type, reason, message);
    std::string key;
    {
      std::lock_guard lock(mu_);
      key = aggregateLocked(event, clock_.monoNow());
    }
    recordCorrelated(std::move(event), key);
  } catch (const std::exception& e) {  // e.g. a message that is not UTF-8 fails to serialize
    if (events_ != nullptr) events_->labels({type, reason, "error"}).inc();
    log_.warn("Event not recorded", {{"reason", reason}, {"error", e.what()}});
  }
}

void EventRecorder::recordCorrelated(Json event, const std::string& key) {
  const std::string type = field(event, "type");
  const std::string reason = field(event, "reason");
  const std::string ns = event["metadata"]["namespace"].get<std::string>();
  std::lock_guard write_lock(write_stripes_[std::hash<std::string>{}(key) % write_stripes_.size()]);
  Write write;
  {
    std::lock_guard lock(mu_);
    write = observeLocked(event, key, clock_.monoNow());
  }
  if (write == Write::kDrop) {
    if (events_ != nullptr) events_->labels({type, reason, "dropped"}).inc();
    log_.debug("Event dropped by the spam filter",
               {{"object", field(event["involvedObject"], "name")}, {"reason", reason}});
    return;
  }
  const std::string name = event["metadata"]["name"].get<std::string>();
  Result<Json> written = makeError(ErrorCode::kInternal, "not written");
  if (write == Write::kPatch) {
    Json patch = {{"count", event["count"]},
                  {"lastTimestamp", event["lastTimestamp"]},
                  {"message", event["message"]}};
    written = client_.patch(resources::events(), ns, name, PatchType::kStrategicMerge, patch);
  }
  if (write == Write::kCreate || (!written && written.error().code == ErrorCode::kNotFound)) {
    written = client_.create(resources::events(), ns, event);  // new, or expired since
  }
  if (events_ != nullptr) events_->labels({type, reason, written ? "ok" : "error"}).inc();
  if (!written) {
    log_.warn("Event write failed", {{"reason", reason}, {"error", written.error()}});
    return;
  }
  const Json& involved = event["involvedObject"];
  log_.info("Event recorded",
            {{"object", objectKey(field(involved, "namespace"), field(involved, "name"))},
             {"kind", field(involved, "kind")},
             {"type", type},
             {"reason", reason},
             {"message", field(event, "message")},
             {"count", event["count"].get<std::int64_t>()}});
}

}  // namespace c4::kube
