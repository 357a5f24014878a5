// A small Prometheus metrics registry with text exposition (format 0.0.4).
//
//   Registry reg;
//   auto& reconciles = reg.counter("c4_operator_reconciles_total", "Reconciles run.", {"result"});
//   reconciles.labels({"success"}).inc();
//   std::string body = reg.expose();
//
// Metric and label names are checked at registration (std::invalid_argument: a programming
// error, raised at start-up). Updating a metric is lock-free; looking up a label set takes a
// mutex, so hot paths keep the returned reference. References stay valid for the registry's life.
//
// Values computed from state rather than counted (how long the running work items have been
// running) are refreshed by a collect hook, which expose() runs before it renders:
//
//   auto hook = reg.onCollect([&] { unfinished.set(queue.unfinishedSeconds()); });
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace c4::metrics {

class Counter {
 public:
  // v must be >= 0 (negative increments are ignored: counters never go down).
  void inc(double v = 1.0) noexcept;
  [[nodiscard]] double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0) noexcept { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1.0) noexcept { value_.fetch_sub(v, std::memory_order_relaxed); }
  [[nodiscard]] double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: strictly increasing finite upper bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v) noexcept;
  [[nodiscard]] const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  [[nodiscard]] std::uint64_t bucketCount(std::size_t i) const noexcept;
  [[nodiscard]] std::uint64_t count() const noexcept { return count_.load(); }
  [[nodiscard]] double sum() const noexcept { return sum_.load(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Default buckets for durations in seconds (Prometheus client defaults).
std::vector<double> defaultSecondsBuckets();
// `count` buckets starting at `start`, each `factor` times the last.
std::vector<double> exponentialBuckets(double start, double factor, std::size_t count);

enum class Type { kCounter, kGauge, kHistogram };

class Registry;

// Keeps a collect hook registered; destroying (or reset()) removes it and waits for a running
// call of it to return, so the hook may use whatever its owner destroys next. Movable.
class CollectHook {
 public:
  CollectHook() = default;
  CollectHook(Registry* registry, std::uint64_t id) : registry_(registry), id_(id) {}
  ~CollectHook() { reset(); }
  CollectHook(CollectHook&& other) noexcept;
  CollectHook& operator=(CollectHook&& other) noexcept;
  CollectHook(const CollectHook&) = delete;
  CollectHook& operator=(const CollectHook&) = delete;
  void reset();

 private:
  Registry* registry_ = nullptr;
  std::uint64_t id_ = 0;
};

// All series of one metric name, one per label-value tuple.
template <typename M>
class Family {
 public:
  // Returns the series for these label values (created on first use). The number of values must
  // match the label names; otherwise std::invalid_argument.
  M& labels(const std::vector<std::string>& values);
  // The series without labels (only for families registered with no label names).
  M& get() { return labels({}); }
  // Drops the series of these label values (no-op when absent); returns whether one was
  // dropped. A reference to it obtained earlier dangles: only for series that are re-derived
  // from state (collect hooks), e.g. the per-job gauges of jobs that were deleted.
  bool remove(const std::vector<std::string>& values);

  // Internal: registry construction and exposition.
  Family(std::vector<std::string> label_names, std::vector<double> bounds)
      : label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}
  template <typename F>
  void forEach(F&& f) const {
    std::lock_guard lock(mu_);
    for (const auto& [values, metric] : series_) f(values, *metric);
  }
  [[nodiscard]] const std::vector<std::string>& labelNames() const { return label_names_; }

 private:
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registering the same name twice with the same type and labels returns the same family;
  // a different type or label set throws std::invalid_argument.
  Family<Counter>& counter(std::string_view name, std::string_view help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(std::string_view name, std::string_view help,
                       std::vector<std::string> label_names = {});
  Family<Histogram>& histogram(std::string_view name, std::string_view help,
                               std::vector<std::string> label_names = {},
                               std::vector<double> bounds = defaultSecondsBuckets());

  // Runs `refresh` at the start of every expose(), one hook at a time, in registration order.
  // It must not call expose() or onCollect(). The registry must outlive the returned hook.
  [[nodiscard]] CollectHook onCollect(std::function<void()> refresh);

  // Text exposition of every family, sorted by name (after running the collect hooks).
  [[nodiscard]] std::string expose() const;

 private:
  friend class CollectHook;
  struct Entry;
  void removeHook(std::uint64_t id);

  mutable std::mutex hooks_mu_;  // held while hooks run, so removeHook waits for them
  std::map<std::uint64_t, std::function<void()>> hooks_;
  std::uint64_t next_hook_id_ = 1;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries_;
  Entry& lookupOrCreate(std::string_view name, std::string_view help, Type type,
                        std::vector<std::string> label_names, std::vector<double> bounds);
};

// Exposition helpers (exposed for tests).
bool isValidMetricName(std::string_view name) noexcept;
bool isValidLabelName(std::string_view name) noexcept;
std::string escapeLabelValue(std::string_view v);
std::string escapeHelp(std::string_view v);
std::string formatValue(double v);

}  // namespace c4::metrics
