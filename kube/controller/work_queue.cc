// Rate-limited work queue.
#include "kube/controller/work_queue.h"

#include <algorithm>

namespace c4::kube {

namespace {

double secondsBetween(MonoTime from, MonoTime to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

WorkQueue::Metrics WorkQueue::registerMetrics(metrics::Registry& registry,
                                              const std::string& name) {
  // client-go's buckets: 10 ns .. 10 s, by 10.
  const std::vector<double> buckets = metrics::exponentialBuckets(1e-8, 10, 10);
  return Metrics{
      .adds = registry
                  .counter("c4_operator_workqueue_adds_total",
                           "Total number of adds handled by the work queue.", {"name"})
                  .labels({name}),
      .depth =
          registry
              .gauge("c4_operator_workqueue_depth", "Current depth of the work queue.", {"name"})
              .labels({name}),
      .queue_duration =
          registry
              .histogram("c4_operator_workqueue_queue_duration_seconds",
                         "How long in seconds an item stays in the work queue before being "
                         "requested.",
                         {"name"}, buckets)
              .labels({name}),
      .work_duration = registry
                           .histogram("c4_operator_workqueue_work_duration_seconds",
                                      "How long in seconds processing an item from the work "
                                      "queue takes.",
                                      {"name"}, buckets)
                           .labels({name}),
      .retries =
          registry
              .counter("c4_operator_workqueue_retries_total",
                       "Total number of rate-limited retries handled by the work queue.", {"name"})
              .labels({name}),
      .unfinished_work =
          registry
              .gauge("c4_operator_workqueue_unfinished_work_seconds",
                     "How many seconds of work has been done that is in progress and has not "
                     "been observed by work_duration. Large values indicate stuck threads.",
                     {"name"})
              .labels({name}),
      .longest_running = registry
                             .gauge("c4_operator_workqueue_longest_running_processor_seconds",
                                    "How many seconds the longest running processor of the work "
                                    "queue has been running.",
                                    {"name"})
                             .labels({name}),
  };
}

WorkQueue::WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter,
                     metrics::Registry* registry, const std::string& name)
    : clock_(clock), limiter_(std::move(limiter)) {
  if (registry != nullptr) {
    metrics_.emplace(registerMetrics(*registry, name));
    collect_hook_ = registry->onCollect([this] { updateUnfinishedWorkMetrics(); });
  }
}

WorkQueue::~WorkQueue() {
  shutDown();
  collect_hook_.reset();
}

void WorkQueue::setDepthLocked() {
  if (metrics_) metrics_->depth.set(static_cast<double>(dirty_.size()));
}

void WorkQueue::addLocked(const std::string& key, MonoTime since) {
  if (shutting_down_) return;
  if (dirty_.contains(key)) return;
  dirty_.emplace(key, since);
  if (metrics_) metrics_->adds.inc();
  setDepthLocked();
  if (processing_.contains(key)) return;
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mu_);
  waiting_.erase(key);
  addLocked(key, clock_.monoNow());
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
  Duration delay = limiter_->when(key);
  {
    std::lock_guard lock(mu_);
    if (metrics_ && !shutting_down_) metrics_->retries.inc();
  }
  addAfter(key, delay);
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
      MonoTime due = it->second;
      it = waiting_.erase(it);
      addLocked(key, due);  // it has been ready since it was due, not since we noticed
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
      MonoTime now = clock_.monoNow();
      if (auto dirty = dirty_.find(key); dirty != dirty_.end()) {
        if (metrics_) metrics_->queue_duration.observe(secondsBetween(dirty->second, now));
        dirty_.erase(dirty);
        setDepthLocked();
      }
      processing_.insert_or_assign(key, now);
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
  auto it = processing_.find(key);
  if (it != processing_.end()) {
    if (metrics_) metrics_->work_duration.observe(secondsBetween(it->second, clock_.monoNow()));
    processing_.erase(it);
  }
  if (dirty_.contains(key) && !shutting_down_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::shutDown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  queue_.clear();
  dirty_.clear();
  waiting_.clear();
  setDepthLocked();
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

void WorkQueue::updateUnfinishedWorkMetrics() {
  std::lock_guard lock(mu_);
  if (!metrics_) return;
  promoteDueLocked();
  MonoTime now = clock_.monoNow();
  double total = 0;
  double longest = 0;
  for (const auto& [key, since] : processing_) {
    double age = secondsBetween(since, now);
    total += age;
    longest = std::max(longest, age);
  }
  metrics_->unfinished_work.set(total);
  metrics_->longest_running.set(longest);
}

}  // namespace c4::kube
