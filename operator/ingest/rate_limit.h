// Token buckets on injected time, for the report endpoint's global and per-node limits, and
// rate-limited warnings.
//
// A bucket holds up to `burst` tokens and gains `rate` tokens per second; a request takes one.
// When none is left, take() says how long until one will be (the Retry-After the endpoint
// answers). Not thread-safe: the owner locks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "kube/controller/lru_cache.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library

struct BucketConfig {
  double rate = 10;  // tokens per second; <= 0: unlimited
  double burst = 20;
};

class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(BucketConfig config, MonoTime now)
      : config_(config), tokens_(config.burst), last_(now) {}

  // Takes a token: nullopt when one was there, otherwise the wait until one will be (> 0).
  std::optional<Duration> take(MonoTime now);
  // Would take() succeed now? (Refills; takes nothing.)
  [[nodiscard]] bool available(MonoTime now);
  // Gives back a token taken by a request that was then refused for another reason.
  void giveBack() { tokens_ = std::min(tokens_ + 1.0, config_.burst); }

 private:
  void refill(MonoTime now);

  BucketConfig config_;
  double tokens_ = 0;
  MonoTime last_{};
};

// One bucket per key (a node name), at most `max_keys` of them: the least recently used goes
// first (a node whose bucket was evicted starts again with a full burst).
class KeyedBuckets {
 public:
  KeyedBuckets(BucketConfig config, std::size_t max_keys) : config_(config), buckets_(max_keys) {}

  std::optional<Duration> take(const std::string& key, MonoTime now);
  void giveBack(const std::string& key);
  [[nodiscard]] std::size_t size() const { return buckets_.size(); }

 private:
  BucketConfig config_;
  LruCache<TokenBucket> buckets_;
};

// A budget of log lines: at most `lines` per `interval` (on injected time), so that a flood of
// bad requests cannot flood the log. Not thread-safe: the owner locks.
class LogLimiter {
 public:
  LogLimiter(std::size_t lines, Duration interval) : lines_(lines), interval_(interval) {}

  struct Decision {
    bool log = false;              // write this line
    std::uint64_t suppressed = 0;  // lines suppressed in earlier intervals, to report first
  };
  // One line wants to be written at `now`.
  Decision take(MonoTime now);
  // When the lines suppressed so far are due to be summarised: the end of the interval they
  // were suppressed in; nullopt when none are pending.
  [[nodiscard]] std::optional<MonoTime> summaryDue() const;
  // The lines suppressed in an interval that has ended by `now`, handed over once (take() will
  // not report them again); 0 when none are pending or their interval still runs.
  std::uint64_t takeSummary(MonoTime now);

 private:
  std::size_t lines_;
  Duration interval_;
  MonoTime start_{};
  bool started_ = false;
  std::size_t used_ = 0;
  std::uint64_t suppressed_ = 0;
};

// A warning that can come in floods (refused requests, cut-off clients), logged at most `lines`
// times per `interval` of injected time. What the budget suppressed is counted and summarised
// in one warning (`summary`, suppressed=n, maxPerInterval, intervalSeconds) once its interval
// ends, whether or not another warning comes: a thread of its own (started at the first
// suppression, joined by the destructor) waits on the clock for the interval's end. A warning
// of a later interval that comes before the summary was written writes it first. Thread-safe.
class RateLimitedLog {
 public:
  RateLimitedLog(Clock& clock, Logger log, std::string summary, std::size_t lines,
                 Duration interval);
  ~RateLimitedLog();
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;

  // Writes `message` at warn unless this interval's budget is spent, then counts it.
  void warn(std::string_view message, std::initializer_list<LogField> fields);

 private:
  void writeSummary(std::uint64_t suppressed);  // under mu_
  void flushLoop();

  Clock& clock_;
  Logger log_;
  std::string summary_;
  std::size_t lines_;
  Duration interval_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  LogLimiter limiter_;
  bool wake_ = false;
  bool stopping_ = false;
  std::thread flusher_;
};

// Retry-After in whole seconds for a wait (at least 1).
long retryAfterSeconds(Duration wait);

}  // namespace c4::op::ingest
