// Work-queue rate limiters.
#include "kube/controller/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace c4::kube {

ExponentialFailureRateLimiter::ExponentialFailureRateLimiter(Duration base, Duration max_delay)
    : base_(base), max_(max_delay) {}

Duration ExponentialFailureRateLimiter::when(const std::string& item) {
  std::lock_guard lock(mu_);
  int exp = failures_[item]++;
  double delay = static_cast<double>(base_.count()) * std::pow(2.0, std::min(exp, 62));
  if (delay >= static_cast<double>(max_.count())) return max_;
  return Duration{static_cast<Duration::rep>(delay)};
}

void ExponentialFailureRateLimiter::forget(const std::string& item) {
  std::lock_guard lock(mu_);
  failures_.erase(item);
}

int ExponentialFailureRateLimiter::numRequeues(const std::string& item) {
  std::lock_guard lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

MaxOfRateLimiter::MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
    : limiters_(std::move(limiters)) {}

Duration MaxOfRateLimiter::when(const std::string& item) {
  Duration longest = Duration::zero();
  for (auto& l : limiters_) longest = std::max(longest, l->when(item));
  return longest;
}

void MaxOfRateLimiter::forget(const std::string& item) {
  for (auto& l : limiters_) l->forget(item);
}

int MaxOfRateLimiter::numRequeues(const std::string& item) {
  int most = 0;
  for (auto& l : limiters_) most = std::max(most, l->numRequeues(item));
  return most;
}

std::unique_ptr<RateLimiter> defaultControllerRateLimiter(Clock& clock) {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(std::make_unique<ExponentialFailureRateLimiter>(std::chrono::milliseconds{5},
                                                                     std::chrono::seconds{1000}));
  limiters.push_back(std::make_unique<BucketRateLimiter>(clock, 10.0, 100));
  return std::make_unique<MaxOfRateLimiter>(std::move(limiters));
}

}  // namespace c4::kube
