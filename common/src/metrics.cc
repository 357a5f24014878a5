#include "c4/common/metrics.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

namespace c4::metrics {

void Counter::inc(double v) noexcept {
  if (!(v >= 0.0)) return;  // also rejects NaN
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("histogram bounds must be finite and strictly increasing");
    }
  }
  buckets_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
}

void Histogram::observe(double v) noexcept {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::uint64_t Histogram::bucketCount(std::size_t i) const noexcept {
  return i <= bounds_.size() ? buckets_[i].load(std::memory_order_relaxed) : 0;
}

std::vector<double> defaultSecondsBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> exponentialBuckets(double start, double factor, std::size_t count) {
  if (!(start > 0) || !(factor > 1)) {
    throw std::invalid_argument("exponentialBuckets needs start > 0 and factor > 1");
  }
  std::vector<double> out;
  out.reserve(count);
  double v = start;
  for (std::size_t i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

template <typename M>
M& Family<M>::labels(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    throw std::invalid_argument("metric family expects " + std::to_string(label_names_.size()) +
                                " label values, got " + std::to_string(values.size()));
  }
  std::lock_guard lock(mu_);
  auto it = series_.find(values);
  if (it != series_.end()) return *it->second;
  std::unique_ptr<M> m;
  if constexpr (std::is_same_v<M, Histogram>) {
    m = std::make_unique<Histogram>(bounds_);
  } else {
    m = std::make_unique<M>();
  }
  auto& ref = *m;
  series_.emplace(values, std::move(m));
  return ref;
}

template <typename M>
bool Family<M>::remove(const std::vector<std::string>& values) {
  std::lock_guard lock(mu_);
  return series_.erase(values) > 0;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct Registry::Entry {
  std::string name;
  std::string help;
  Type type;
  std::vector<std::string> label_names;
  std::vector<double> bounds;
  std::unique_ptr<Family<Counter>> counter;
  std::unique_ptr<Family<Gauge>> gauge;
  std::unique_ptr<Family<Histogram>> histogram;
};

Registry::Registry() = default;
Registry::~Registry() = default;

CollectHook::CollectHook(CollectHook&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)), id_(other.id_) {}

CollectHook& CollectHook::operator=(CollectHook&& other) noexcept {
  if (this != &other) {
    reset();
    registry_ = std::exchange(other.registry_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

void CollectHook::reset() {
  if (registry_ != nullptr) std::exchange(registry_, nullptr)->removeHook(id_);
}

CollectHook Registry::onCollect(std::function<void()> refresh) {
  std::lock_guard lock(hooks_mu_);
  std::uint64_t id = next_hook_id_++;
  hooks_.emplace(id, std::move(refresh));
  return CollectHook(this, id);
}

void Registry::removeHook(std::uint64_t id) {
  std::lock_guard lock(hooks_mu_);
  hooks_.erase(id);
}

bool isValidMetricName(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool isValidLabelName(std::string_view name) noexcept {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string formatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Registry::Entry& Registry::lookupOrCreate(std::string_view name, std::string_view help, Type type,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  if (!isValidMetricName(name)) {
    throw std::invalid_argument("invalid metric name \"" + std::string(name) + "\"");
  }
  for (const auto& l : label_names) {
    if (!isValidLabelName(l) || (type == Type::kHistogram && l == "le")) {
      throw std::invalid_argument("invalid label name \"" + l + "\" for metric " +
                                  std::string(name));
    }
  }
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    Entry& e = *it->second;
    if (e.type != type || e.label_names != label_names || e.bounds != bounds) {
      throw std::invalid_argument("metric \"" + std::string(name) +
                                  "\" is already registered with a different type or labels");
    }
    return e;
  }
  auto e = std::make_unique<Entry>();
  e->name = std::string(name);
  e->help = std::string(help);
  e->type = type;
  e->label_names = label_names;
  e->bounds = bounds;
  switch (type) {
    case Type::kCounter:
      e->counter = std::make_unique<Family<Counter>>(std::move(label_names), std::vector<double>{});
      break;
    case Type::kGauge:
      e->gauge = std::make_unique<Family<Gauge>>(std::move(label_names), std::vector<double>{});
      break;
    case Type::kHistogram:
      Histogram check(bounds);  // validates the bounds now, at registration
      e->histogram = std::make_unique<Family<Histogram>>(std::move(label_names), std::move(bounds));
      break;
  }
  auto& ref = *e;
  entries_.emplace(ref.name, std::move(e));
  return ref;
}

Family<Counter>& Registry::counter(std::string_view name, std::string_view help,
                                   std::vector<std::string> label_names) {
  return *lookupOrCreate(name, help, Type::kCounter, std::move(label_names), {}).counter;
}

Family<Gauge>& Registry::gauge(std::string_view name, std::string_view help,
                               std::vector<std::string> label_names) {
  return *lookupOrCreate(name, help, Type::kGauge, std::move(label_names), {}).gauge;
}

Family<Histogram>& Registry::histogram(std::string_view name, std::string_view help,
                                       std::vector<std::string> label_names,
                                       std::vector<double> bounds) {
  return *lookupOrCreate(name, help, Type::kHistogram, std::move(label_names), std::move(bounds))
              .histogram;
}

namespace {

std::string labelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    out += escapeLabelValue(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

std::string Registry::expose() const {
  {
    std::lock_guard hooks_lock(hooks_mu_);
    for (const auto& [id, refresh] : hooks_) refresh();
  }
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, e] : entries_) {
    out += "# HELP " + name + " " + escapeHelp(e->help) + "\n";
    switch (e->type) {
      case Type::kCounter:
        out += "# TYPE " + name + " counter\n";
        e->counter->forEach([&](const std::vector<std::string>& values, const Counter& c) {
          out += name + labelSet(e->label_names, values) + " " + formatValue(c.value()) + "\n";
        });
        break;
      case Type::kGauge:
        out += "# TYPE " + name + " gauge\n";
        e->gauge->forEach([&](const std::vector<std::string>& values, const Gauge& g) {
          out += name + labelSet(e->label_names, values) + " " + formatValue(g.value()) + "\n";
        });
        break;
      case Type::kHistogram:
        out += "# TYPE " + name + " histogram\n";
        e->histogram->forEach([&](const std::vector<std::string>& values, const Histogram& h) {
          std::uint64_t cumulative = 0;
          for (std::size_t i = 0; i <= h.bounds().size(); ++i) {
            cumulative += h.bucketCount(i);
            const std::string le =
                i < h.bounds().size() ? formatValue(h.bounds()[i]) : std::string("+Inf");
            out += name + "_bucket" + labelSet(e->label_names, values, "le", le) + " " +
                   std::to_string(cumulative) + "\n";
          }
          out +=
              name + "_sum" + labelSet(e->label_names, values) + " " + formatValue(h.sum()) + "\n";
          out += name + "_count" + labelSet(e->label_names, values) + " " +
                 std::to_string(h.count()) + "\n";
        });
        break;
    }
  }
  return out;
}

}  // namespace c4::metrics
