// Rate-limited work queue.
#include "operator/controller/work_queue.h"

namespace c4::op {

WorkQueue::WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter)
    : clock_(clock), limiter_(std::move(limiter)) {}

WorkQueue::~WorkQueue() {
  shutDown();
}

void WorkQueue::addLocked(const std::string& key) {
  if (shutting_down_) return;
  if (dirty_.contains(key)) return;
  dirty_.insert(key);
  if (processing_.contains(key)) return;
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mu_);
  waiting_.erase(key);
  addLocked(key);
}

void WorkQueue::addAfter(const std::string& key, Duration delay) {
  if (delay <= Duration::zero()) {
    add(key);
    return;
  }
  std::lock_guard lock(mu_);
  if (shutting_down_) return;
  MonoTime ready = clock_.monoNow() + delay;
  auto it = waiting_.find(key);
  if (it == waiting_.end() || ready < it->second) waiting_[key] = ready;
  ++generation_;
  cv_.notify_all();  // a getter may need an earlier wake-up
}

void WorkQueue::addRateLimited(const std::string& key) {
  addAfter(key, limiter_->when(key));
}

void WorkQueue::forget(const std::string& key) {
  limiter_->forget(key);
}

int WorkQueue::numRequeues(const std::string& key) {
  return limiter_->numRequeues(key);
}

void WorkQueue::promoteDueLocked() {
  MonoTime now = clock_.monoNow();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second <= now) {
      std::string key = it->first;
      it = waiting_.erase(it);
      addLocked(key);
    } else {
      ++it;
    }
  }
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock lock(mu_);
  for (;;) {
    promoteDueLocked();
    if (shutting_down_) return std::nullopt;
    if (!queue_.empty()) {
      std::string key = std::move(queue_.front());
      queue_.pop_front();
      processing_.insert(key);
      dirty_.erase(key);
      return key;
    }
    MonoTime deadline = MonoTime::max();
    for (const auto& [key, ready] : waiting_) deadline = std::min(deadline, ready);
    std::uint64_t generation = generation_;
    auto wake = [&] { return shutting_down_ || !queue_.empty() || generation_ != generation; };
    if (deadline == MonoTime::max()) {
      // Waiting on the clock with a far deadline keeps simulated-time tests deterministic.
      clock_.waitUntil(lock, cv_, clock_.monoNow() + std::chrono::hours{24 * 365}, wake);
    } else {
      clock_.waitUntil(lock, cv_, deadline, wake);
    }
  }
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard lock(mu_);
  processing_.erase(key);
  if (dirty_.contains(key) && !shutting_down_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::shutDown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  queue_.clear();
  waiting_.clear();
  cv_.notify_all();
}

bool WorkQueue::shuttingDown() const {
  std::lock_guard lock(mu_);
  return shutting_down_;
}

std::size_t WorkQueue::len() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

std::size_t WorkQueue::waitingLen() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

}  // namespace c4::op
