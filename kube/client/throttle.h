// Client-side request throttling on an injected Clock: a reservation token bucket
// (golang.org/x/time/rate) and the Kubernetes client's priority token bucket.
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

namespace c4::kube {

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

}  // namespace c4::kube
