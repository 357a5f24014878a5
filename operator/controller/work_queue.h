// Rate-limited work queue with client-go semantics: a key is queued at most once (dirty set);
// a key being processed is not handed to a second worker; re-adding it while it is processed
// queues it once more when done() is called. addAfter() keeps the earliest ready time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "c4/common/clock.h"
#include "operator/controller/rate_limiter.h"

namespace c4::op {

class WorkQueue {
 public:
  WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void add(const std::string& key);
  // Adds after `delay`; if the key is already waiting, the earlier ready time wins.
  void addAfter(const std::string& key, Duration delay);
  // Adds after the rate limiter's delay (counts a failure for the key).
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

 private:
  void addLocked(const std::string& key);
  void promoteDueLocked();

  Clock& clock_;
  std::unique_ptr<RateLimiter> limiter_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;
  std::set<std::string> processing_;
  std::map<std::string, MonoTime> waiting_;
  std::uint64_t generation_ = 0;  // bumped by addAfter: re-evaluate the wake-up time
  bool shutting_down_ = false;
};

}  // namespace c4::op
