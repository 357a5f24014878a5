// Rate-limited work queue with client-go semantics: a key is queued at most once (dirty set);
// a key being processed is not handed to a second worker; re-adding it while it is processed
// queues it once more when done() is called. addAfter() keeps the earliest ready time.
//
// With a metrics registry it exports client-go's workqueue metric families, labelled
// name=<queue name>: c4_operator_workqueue_adds_total, _depth, _queue_duration_seconds (add to
// get), _work_duration_seconds (get to done), _retries_total (addRateLimited),
// _unfinished_work_seconds and _longest_running_processor_seconds. The last two are computed
// from the keys in processing whenever the registry is exposed (a collect hook), so a stuck
// worker shows on the next scrape even though it never calls done().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/controller/rate_limiter.h"

namespace c4::kube {

class WorkQueue {
 public:
  // `registry` may be null (no metrics); otherwise it must outlive the queue, and `name` labels
  // this queue's series.
  WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter,
            metrics::Registry* registry = nullptr, const std::string& name = "");
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void add(const std::string& key);
  // Adds after `delay`; if the key is already waiting, the earlier ready time wins.
  void addAfter(const std::string& key, Duration delay);
  // Adds after the rate limiter's delay (counts a failure for the key, and a retry).
  void addRateLimited(const std::string& key);
  // Clears the failure history of a key (success or requeue-after).
  void forget(const std::string& key);
  [[nodiscard]] int numRequeues(const std::string& key);

  // Blocks until a key is ready or the queue shuts down (nullopt). The caller must call done().
  std::optional<std::string> get();
  void done(const std::string& key);

  // Wakes every get(); queued keys are dropped. Idempotent.
  void shutDown();
  [[nodiscard]] bool shuttingDown() const;
  // Keys ready now (not counting waiting or processing ones).
  [[nodiscard]] std::size_t len() const;
  [[nodiscard]] std::size_t waitingLen() const;

  // Sets the unfinished-work and longest-running-processor gauges from the keys in processing
  // now (and queues the waiting keys that are due, so depth counts them). The registry's collect
  // hook calls it before every exposition; callable any time. No-op without a registry.
  void updateUnfinishedWorkMetrics();

 private:
  struct Metrics {
    metrics::Counter& adds;
    metrics::Gauge& depth;
    metrics::Histogram& queue_duration;
    metrics::Histogram& work_duration;
    metrics::Counter& retries;
    metrics::Gauge& unfinished_work;
    metrics::Gauge& longest_running;
  };
  static Metrics registerMetrics(metrics::Registry& registry, const std::string& name);

  // `since`: when the key became ready (its add, or the due time of a waiting key).
  void addLocked(const std::string& key, MonoTime since);
  void promoteDueLocked();
  void setDepthLocked();

  Clock& clock_;
  std::unique_ptr<RateLimiter> limiter_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::string> queue_;
  std::map<std::string, MonoTime> dirty_;       // queued keys → when they became ready
  std::map<std::string, MonoTime> processing_;  // keys handed out → when get() returned them
  std::map<std::string, MonoTime> waiting_;
  std::uint64_t generation_ = 0;  // bumped by addAfter: re-evaluate the wake-up time
  bool shutting_down_ = false;
  std::optional<Metrics> metrics_;
  metrics::CollectHook collect_hook_;  // last: removed (and waited for) before the state goes
};

}  // namespace c4::kube
