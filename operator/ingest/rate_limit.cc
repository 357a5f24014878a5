// Token buckets (see rate_limit.h).
#include "operator/ingest/rate_limit.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace c4::op::ingest {

void TokenBucket::refill(MonoTime now) {
  if (now > last_) {
    double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(config_.burst, tokens_ + elapsed * config_.rate);
    last_ = now;
  }
}

bool TokenBucket::available(MonoTime now) {
  if (config_.rate <= 0) return true;
  refill(now);
  return tokens_ >= 1.0;
}

std::optional<Duration> TokenBucket::take(MonoTime now) {
  if (config_.rate <= 0) return std::nullopt;
  refill(now);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return std::nullopt;
  }
  double wait_s = (1.0 - tokens_) / config_.rate;
  return std::max(Duration{1},
                  std::chrono::duration_cast<Duration>(std::chrono::duration<double>(wait_s)));
}

std::optional<Duration> KeyedBuckets::take(const std::string& key, MonoTime now) {
  TokenBucket* bucket = buckets_.get(key);
  if (bucket == nullptr) bucket = &buckets_.put(key, TokenBucket(config_, now));
  return bucket->take(now);
}

void KeyedBuckets::giveBack(const std::string& key) {
  if (TokenBucket* bucket = buckets_.get(key); bucket != nullptr) bucket->giveBack();
}

LogLimiter::Decision LogLimiter::take(MonoTime now) {
  if (!started_ || now - start_ >= interval_) {
    started_ = true;
    start_ = now;
    used_ = 0;
  }
  Decision d;
  if (used_ >= lines_) {
    ++suppressed_;
    return d;
  }
  ++used_;
  d.log = true;
  d.suppressed = std::exchange(suppressed_, 0);
  return d;
}

std::optional<MonoTime> LogLimiter::summaryDue() const {
  if (suppressed_ == 0) return std::nullopt;
  return start_ + interval_;
}

std::uint64_t LogLimiter::takeSummary(MonoTime now) {
  if (suppressed_ == 0 || now - start_ < interval_) return 0;
  return std::exchange(suppressed_, 0);
}

RateLimitedLog::RateLimitedLog(Clock& clock, Logger log, std::string summary, std::size_t lines,
                               Duration interval)
    : clock_(clock),
      log_(std::move(log)),
      summary_(std::move(summary)),
      lines_(lines),
      interval_(interval),
      limiter_(lines, interval) {}

RateLimitedLog::~RateLimitedLog() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
}

void RateLimitedLog::writeSummary(std::uint64_t suppressed) {
  log_.warn(summary_, {{"suppressed", suppressed},
                       {"maxPerInterval", lines_},
                       {"intervalSeconds", std::chrono::duration<double>(interval_).count()}});
}

void RateLimitedLog::warn(std::string_view message, std::initializer_list<LogField> fields) {
  std::lock_guard lock(mu_);
  const bool pending = limiter_.summaryDue().has_value();
  LogLimiter::Decision d = limiter_.take(clock_.monoNow());
  if (d.suppressed > 0) writeSummary(d.suppressed);
  if (d.log) {
    log_.warn(message, fields);
    return;
  }
  if (pending) return;  // the flusher already waits for this interval's end
  if (!flusher_.joinable()) {
    flusher_ = std::thread([this] { flushLoop(); });
  } else {
    wake_ = true;
    cv_.notify_all();
  }
}

void RateLimitedLog::flushLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto due = limiter_.summaryDue();
    // Nothing pending: sleep until warn() suppresses a line (it wakes this thread).
    MonoTime deadline = due ? *due : clock_.monoNow() + std::chrono::hours{1};
    wake_ = false;
    clock_.waitUntil(lock, cv_, deadline, [this] { return stopping_ || wake_; });
    if (stopping_) break;
    if (std::uint64_t n = limiter_.takeSummary(clock_.monoNow()); n > 0) {
      try {
        writeSummary(n);
      } catch (...) {  // a log line lost (out of memory); the thread goes on
      }
    }
  }
}

long retryAfterSeconds(Duration wait) {
  double s = std::chrono::duration<double>(wait).count();
  return std::max(1L, static_cast<long>(std::ceil(s)));
}

}  // namespace c4::op::ingest
