// The telemetry core both NCCL plugins share (the net plugin's transport and the profiler plugin;
// docs/design.md §3.3): who the rank is and where its reports go (RankEnv, read from the
// environment the operator injects into every training container), the latency histogram the
// reports summarise, and the split of a report into datagrams. Neither transport nor profiler
// events are known here.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c4/common/error.h"
#include "c4/common/report.h"

namespace c4::telemetry {

// Lower-cases and replaces characters a Kubernetes name may not contain; "" if nothing valid is
// left. Used for node/pod names taken from the host name or the environment.
std::string sanitizeName(std::string_view name);

// Reads settings through `getenv` (injected for tests). Each read appends "NAME=value (source)"
// to `sources`, source one of env, default, default(invalid env); an invalid value keeps the
// field's default and appends a warning. Never fails.
class EnvLoader {
 public:
  using Getenv = std::function<std::optional<std::string>(const char*)>;
  EnvLoader(Getenv getenv, std::vector<std::string>& sources, std::vector<std::string>& warnings)
      : getenv_(std::move(getenv)), sources_(sources), warnings_(warnings) {}

  [[nodiscard]] bool has(const char* name) const { return getenv_(name).has_value(); }

  // An integer in [lo, hi].
  template <typename T>
  void integer(const char* name, T& field, T lo, T hi) {
    auto v = getenv_(name);
    if (!v) {
      sources_.push_back(std::string(name) + "=" + std::to_string(field) + " (default)");
      return;
    }
    T parsed{};
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), parsed);
    if (ec != std::errc{} || end != v->data() + v->size() || parsed < lo || parsed > hi) {
      warnings_.push_back(std::string(name) + "=\"" + *v + "\" is not an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]; using " +
                          std::to_string(field));
      sources_.push_back(std::string(name) + "=" + std::to_string(field) +
                         " (default(invalid env))");
      return;
    }
    field = parsed;
    sources_.push_back(std::string(name) + "=" + std::to_string(field) + " (env)");
  }
  // Any text.
  void text(const char* name, std::string& field);
  // A Kubernetes name (sanitizeName; a changed value is warned about).
  void name(const char* name, std::string& field);
  // Appends a warning of the caller's.
  void warn(std::string warning) { warnings_.push_back(std::move(warning)); }

  // The process environment (std::getenv).
  static Getenv processEnvironment();

 private:
  Getenv getenv_;
  std::vector<std::string>& sources_;
  std::vector<std::string>& warnings_;
};

// Who this rank is and where its reports go: the settings both plugins read, with the same names.
struct RankEnv {
  std::int32_t rank = -1;             // C4_RANK (falls back to RANK); -1 unknown
  std::string pod;                    // C4_POD_NAME
  std::string node;                   // C4_NODE_NAME (falls back to the host name)
  std::string job;                    // C4_JOB
  std::string ns;                     // C4_NAMESPACE
  std::int32_t world_size = 0;        // WORLD_SIZE; 0 unknown (or not above the rank)
  std::uint32_t restart_attempt = 0;  // C4_RESTART_ATTEMPT
  std::string agent_socket;           // C4_AGENT_SOCKET: the node plugin's; empty = no reports
  std::uint32_t report_interval_ms = 1000;  // C4_REPORT_INTERVAL_MS (>= 10)

  std::vector<std::string> sources;   // "NAME=value (env|default|default(invalid env))"
  std::vector<std::string> warnings;  // invalid values replaced by defaults
};

// Reads RankEnv's settings into `env` through `loader` (whose sources and warnings should be
// env's own).
void loadRankEnv(EnvLoader& loader, RankEnv& env);

// Log2 histogram of microsecond durations: bucket b holds values v with bit_width(v) == b.
// Single writer (a connection's I/O owner, a communicator's proxy thread); the reporter reads with
// relaxed atomics, so the writer never waits.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 40;

  void record(std::uint64_t us) noexcept {
    int b = static_cast<int>(std::bit_width(us));
    if (b >= kBuckets) b = kBuckets - 1;
    bump(buckets_[static_cast<std::size_t>(b)], 1);
    bump(count_, 1);
    bump(sum_, us);
    // Single writer: no read-modify-write. A value recorded while the reporter resets the max
    // may be missed by that interval's max (counts and sums are exact).
    if (us > interval_max_.load(std::memory_order_relaxed)) {
      interval_max_.store(us, std::memory_order_relaxed);
    }
  }

  struct Snapshot {
    std::array<std::uint64_t, kBuckets> buckets{};
    std::uint64_t count = 0;
    std::uint64_t sum = 0;
  };
  [[nodiscard]] Snapshot snapshot() const noexcept;
  // Interval max since the last call (reader side).
  std::uint64_t takeIntervalMax() noexcept {
    return interval_max_.exchange(0, std::memory_order_relaxed);
  }
  // Summary of what was recorded between `before` and `now`. Percentiles are the upper bound of
  // the log2 bucket that holds them (an over-estimate by at most 2x), capped by the interval max.
  static report::LatencySummary summarize(const Snapshot& before, const Snapshot& now,
                                          std::uint64_t interval_max) noexcept;

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t d) noexcept {
    a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);  // single writer
  }
  std::array<std::atomic<std::uint64_t>, kBuckets> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> interval_max_{0};
};

// Encodes a report as one or more CBOR datagrams of at most `limit` bytes each: connections are
// spread over parts (same seq, part/parts set) until every part fits; the communicators go in
// part 0.
Result<std::vector<std::vector<std::uint8_t>>> encodeReportParts(const report::RankReport& r,
                                                                 std::size_t limit);

}  // namespace c4::telemetry
