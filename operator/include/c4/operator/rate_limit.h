// Token bucket and the work queue's rate limiters (client-go util/workqueue semantics), all on
// an injected Clock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "c4/common/clock.h"

namespace c4::op {

// Reservation-style token bucket (golang.org/x/time/rate): reserve() always takes a token and
// returns how long the caller must wait before using it. Thread-safe.
class TokenBucket {
 public:
  TokenBucket(Clock& clock, double qps, int burst);
  // Takes one token; returns the delay before it may be used (zero if available now).
  Duration reserve();
  // Takes a token and sleeps (on the clock) until it may be used.
  void wait();
  [[nodiscard]] double qps() const { return qps_; }

 private:
  Clock& clock_;
  double qps_;
  double burst_;
  std::mutex mu_;
  double tokens_;
  MonoTime last_;
};

// Which requests go first when the client is throttled.
enum class RequestPriority {
  kNormal,    // status writes, Services, ConfigMaps, reads
  kCritical,  // the restart path: creating and deleting a job's pods
};

// The Kubernetes client's limiter: a token bucket (qps, burst) whose waiters are served in
// priority order, FIFO within a priority. A normal request that has waited `max_normal_wait`
// goes before any critical one, so a long burst of pod creations delays status writes by at
// most that much and never starves them. Thread-safe; all waiting is on the injected clock.
class PriorityTokenBucket {
 public:
  PriorityTokenBucket(Clock& clock, double qps, int burst,
                      Duration max_normal_wait = std::chrono::seconds{1});
  // Blocks until this request may be sent.
  void wait(RequestPriority priority);
  [[nodiscard]] double qps() const { return qps_; }

 private:
  struct Ticket {
    std::uint64_t id;
    MonoTime since;
  };
  // The ticket served next (0 when nobody waits).
  [[nodiscard]] std::uint64_t headLocked(MonoTime now) const;

  Clock& clock_;
  double qps_;
  double burst_;
  Duration max_normal_wait_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  double tokens_;
  MonoTime last_;
  std::uint64_t next_ticket_ = 1;
  std::deque<Ticket> critical_;
  std::deque<Ticket> normal_;
};

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // How long to wait before the item may be processed again (counts a failure).
  virtual Duration when(const std::string& item) = 0;
  // Clears the failure history of an item.
  virtual void forget(const std::string& item) = 0;
  [[nodiscard]] virtual int numRequeues(const std::string& item) = 0;
};

// base * 2^failures, capped at max_delay (client-go default 5 ms .. 1000 s).
class ExponentialFailureRateLimiter final : public RateLimiter {
 public:
  ExponentialFailureRateLimiter(Duration base, Duration max_delay);
  Duration when(const std::string& item) override;
  void forget(const std::string& item) override;
  int numRequeues(const std::string& item) override;

 private:
  Duration base_;
  Duration max_;
  std::mutex mu_;
  std::map<std::string, int> failures_;
};

// Overall token bucket shared by all items (client-go default 10 qps, burst 100).
class BucketRateLimiter final : public RateLimiter {
 public:
  BucketRateLimiter(Clock& clock, double qps, int burst) : bucket_(clock, qps, burst) {}
  Duration when(const std::string&) override { return bucket_.reserve(); }
  void forget(const std::string&) override {}
  int numRequeues(const std::string&) override { return 0; }

 private:
  TokenBucket bucket_;
};

// The longest delay of its members.
class MaxOfRateLimiter final : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters);
  Duration when(const std::string& item) override;
  void forget(const std::string& item) override;
  int numRequeues(const std::string& item) override;

 private:
  std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// client-go's DefaultControllerRateLimiter: max(exponential 5 ms..1000 s, bucket 10 qps/100).
std::unique_ptr<RateLimiter> defaultControllerRateLimiter(Clock& clock);

}  // namespace c4::op
