// The work queue's rate limiters (client-go util/workqueue semantics), on an injected Clock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "kube/client/throttle.h"

namespace c4::kube {

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

}  // namespace c4::kube
