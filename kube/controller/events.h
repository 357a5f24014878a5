// Kubernetes Events (core/v1, so `kubectl describe` shows them) for TrainingJobs and Nodes,
// correlated as client-go's EventCorrelator does (k8s.io/client-go/tools/record/events_cache.go):
//
//  - identical Events (same source, involved object, type, reason and message) seen again within
//    `dedup_window` of the last one are one Event: its count and lastTimestamp (and message) are
//    PATCHed (a strategic merge patch, as client-go sends). If the patch answers NotFound (the
//    Event expired), the Event is created again under its name, count and firstTimestamp;
//  - similar Events (the same but the message): once `aggregate_max_events` different messages
//    were seen within `aggregate_interval` of each other, they are recorded as one Event whose
//    message is "(combined from similar events): <latest message>", itself counted as above;
//  - spam filter: per (source, involved object) a token bucket of `spam_burst` Events refilled
//    one per `spam_refill`; Events beyond it are dropped and counted (result="dropped");
//  - every cache is an LRU of `cache_entries` entries.
//
// Recording never fails the caller: a failed write is logged and counted. Time comes from the
// injected Clock. Thread-safe: writes of the same Event (or combined Event) are serialized so
// their counts reach the API server in order; different Events are written concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"
#include "kube/controller/lru_cache.h"

namespace c4::kube {

// client-go's defaults (NewEventCorrelator), and the window within which an identical Event is
// counted instead of created anew.
struct EventCorrelatorOptions {
  std::size_t cache_entries = 4096;
  int spam_burst = 25;
  Duration spam_refill = std::chrono::minutes{5};
  std::size_t aggregate_max_events = 10;
  Duration aggregate_interval = std::chrono::minutes{10};
  // client-go keeps counting an identical Event for as long as its cache entry lives;
  // Duration::max() does the same here.
  Duration dedup_window = std::chrono::minutes{10};
};

class EventRecorder {
 public:
  EventRecorder(KubeClient& client, Clock& clock, std::string component, std::string instance,
                metrics::Registry* registry, EventCorrelatorOptions options = {});

  // `regarding` is the object (needs apiVersion/kind/metadata). type: Normal | Warning.
  void record(const Json& regarding, const std::string& type, const std::string& reason,
              const std::string& message);
  // A new Event object for one occurrence (count 1), before correlation (exposed for tests).
  Json buildEvent(const Json& regarding, const std::string& type, const std::string& reason,
                  const std::string& message);

 private:
  struct Aggregate {  // similar Events: hashes of their messages, and the last one's time
    std::set<std::size_t> messages;
    MonoTime last;
  };
  struct Observation {  // an Event written (or about to be) to the API server
    std::string name;
    std::int64_t count = 0;
    std::string first_timestamp;
    MonoTime last;
  };
  struct SpamBucket {
    double tokens = 0;
    MonoTime last;
  };
  enum class Write { kCreate, kPatch, kDrop };

  // Turns `event` into the combined Event when it is one too many similar ones; returns the key
  // under which it is counted.
  std::string aggregateLocked(Json& event, MonoTime now);
  // Counts `event` under `key`: kPatch (with the name, count and firstTimestamp of the Event
  // already written) or kCreate; kDrop when the spam filter says so.
  Write observeLocked(Json& event, const std::string& key, MonoTime now);
  bool spamAcceptLocked(const Json& event, MonoTime now);
  void recordCorrelated(Json event, const std::string& key);

  KubeClient& client_;
  Clock& clock_;
  std::string component_;
  std::string instance_;
  EventCorrelatorOptions options_;
  Logger log_;
  metrics::Family<metrics::Counter>* events_ = nullptr;

  std::mutex mu_;  // the caches
  LruCache<Aggregate> aggregates_;
  LruCache<Observation> observations_;
  LruCache<SpamBucket> spam_;
  // Held (by key hash) from counting an Event to storing what the API server answered, so two
  // occurrences of one Event never race (a patch overtaking the create). Taken before mu_.
  std::array<std::mutex, 32> write_stripes_;
};

}  // namespace c4::kube
