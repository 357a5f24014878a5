// Token bucket and work-queue rate limiters.
#include "kube/client/throttle.h"

#include <algorithm>
#include <cmath>

namespace c4::kube {
namespace {

// Adds the tokens earned since `last` (at most `burst` in the bucket) and moves `last` to `now`.
void refill(double& tokens, MonoTime& last, MonoTime now, double qps, double burst) {
  if (now > last) {
    double elapsed = std::chrono::duration<double>(now - last).count();
    tokens = std::min(burst, tokens + elapsed * qps);
    last = now;
  }
}

}  // namespace

TokenBucket::TokenBucket(Clock& clock, double qps, int burst)
    : clock_(clock),
      qps_(qps > 0 ? qps : 1e9),
      burst_(burst > 0 ? static_cast<double>(burst) : 1.0),
      tokens_(burst_),
      last_(clock.monoNow()) {}

Duration TokenBucket::reserve() {
  std::lock_guard lock(mu_);
  refill(tokens_, last_, clock_.monoNow(), qps_, burst_);
  tokens_ -= 1.0;
  if (tokens_ >= 0) return Duration::zero();
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(-tokens_ / qps_));
}

void TokenBucket::wait() {
  Duration d = reserve();
  if (d > Duration::zero()) clock_.sleepFor(d);
}

PriorityTokenBucket::PriorityTokenBucket(Clock& clock, double qps, int burst,
                                         Duration max_normal_wait)
    : clock_(clock),
      qps_(qps > 0 ? qps : 1e9),
      burst_(burst > 0 ? static_cast<double>(burst) : 1.0),
      max_normal_wait_(max_normal_wait),
      tokens_(burst_),
      last_(clock.monoNow()) {}

std::uint64_t PriorityTokenBucket::headLocked(MonoTime now) const {
  if (normal_.empty()) return critical_.empty() ? 0 : critical_.front().id;
  if (critical_.empty() || now - normal_.front().since >= max_normal_wait_) {
    return normal_.front().id;
  }
  return critical_.front().id;
}

void PriorityTokenBucket::wait(RequestPriority priority) {
  std::unique_lock lock(mu_);
  MonoTime now = clock_.monoNow();
  const std::uint64_t id = next_ticket_++;
  auto& queue = priority == RequestPriority::kCritical ? critical_ : normal_;
  queue.push_back({id, now});
  for (;;) {
    now = clock_.monoNow();
    refill(tokens_, last_, now, qps_, burst_);
    if (headLocked(now) == id && tokens_ >= 1.0) {
      tokens_ -= 1.0;
      queue.pop_front();  // the head is always the front of its own queue
      cv_.notify_all();   // the next head re-evaluates
      return;
    }
    // The head wakes when its token is due. The others wake when a token is taken (the queues
    // change) or when the oldest normal request comes of age and may become the head; they do
    // not poll, so many throttled threads cost nothing while they wait.
    MonoTime due = now + std::chrono::hours{1};
    if (headLocked(now) == id) {
      double missing = std::max(0.0, 1.0 - tokens_);
      // Rounded up, so the head never wakes a hair before its token and spins.
      due = now + std::max(Duration{1}, std::chrono::ceil<Duration>(
                                            std::chrono::duration<double>(missing / qps_)));
    }
    if (!normal_.empty() && !critical_.empty()) {
      MonoTime of_age = normal_.front().since + max_normal_wait_;
      if (of_age > now) due = std::min(due, of_age);
    }
    std::uint64_t seen = next_ticket_;
    std::size_t waiting = critical_.size() + normal_.size();
    clock_.waitUntil(lock, cv_, due, [&] {
      return critical_.size() + normal_.size() != waiting || next_ticket_ != seen;
    });
  }
}

}  // namespace c4::kube
