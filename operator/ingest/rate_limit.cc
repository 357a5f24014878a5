// Token buckets (see rate_limit.h).
#include "operator/ingest/rate_limit.h"

#include <algorithm>
#include <cmath>

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

long retryAfterSeconds(Duration wait) {
  double s = std::chrono::duration<double>(wait).count();
  return std::max(1L, static_cast<long>(std::ceil(s)));
}

}  // namespace c4::op::ingest
