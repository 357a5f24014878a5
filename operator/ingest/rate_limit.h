// Token buckets on injected time, for the report endpoint's global and per-node limits.
//
// A bucket holds up to `burst` tokens and gains `rate` tokens per second; a request takes one.
// When none is left, take() says how long until one will be (the Retry-After the endpoint
// answers). Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "c4/common/clock.h"
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

// Retry-After in whole seconds for a wait (at least 1).
long retryAfterSeconds(Duration wait);

}  // namespace c4::op::ingest
