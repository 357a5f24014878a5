// Per-connection telemetry (telemetry.h): the latency histogram's reader side.
#include "c4/plugin/telemetry.h"

#include <algorithm>
#include <cmath>

namespace c4::plugin {

LatencyHistogram::Snapshot LatencyHistogram::snapshot() const noexcept {
  Snapshot s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

report::LatencySummary LatencyHistogram::summarize(const Snapshot& before, const Snapshot& now,
                                                   std::uint64_t intervalMax) {
  report::LatencySummary out;
  out.count = now.count - before.count;
  out.sum_us = now.sum - before.sum;
  out.max_us = out.count > 0 ? intervalMax : 0;
  if (out.count == 0) return out;
  auto pct = [&](double q) -> std::uint64_t {
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(out.count)));
    if (rank == 0) rank = 1;
    std::uint64_t acc = 0;
    for (int b = 0; b < kBuckets; ++b) {
      auto i = static_cast<std::size_t>(b);
      acc += now.buckets[i] - before.buckets[i];
      if (acc >= rank) {
        std::uint64_t upper = b == 0 ? 0 : (std::uint64_t{1} << b) - 1;
        return std::min(upper, out.max_us);
      }
    }
    return out.max_us;
  };
  out.p50_us = pct(0.5);
  out.p99_us = pct(0.99);
  return out;
}

}  // namespace c4::plugin
