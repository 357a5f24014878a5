// Shared informer.
#include "operator/cache/informer.h"

namespace c4::op {

void Store::addIndex(const std::string& name, IndexFunc fn) {
  std::lock_guard lock(mu_);
  index_funcs_[name] = std::move(fn);
  indexes_[name];
}

std::optional<Json> Store::get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Store::list() const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::vector<Json> Store::byIndex(const std::string& index, const std::string& value) const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end()) return out;
  for (const auto& key : keys->second) {
    auto it = objects_.find(key);
    if (it != objects_.end()) out.push_back(it->second);
  }
  return out;
}

std::size_t Store::size() const {
  std::lock_guard lock(mu_);
  return objects_.size();
}

void Store::indexLocked(const std::string& key, const Json& object, bool add) {
  for (const auto& [name, fn] : index_funcs_) {
    auto& index = indexes_[name];
    for (const auto& value : fn(object)) {
      if (add) {
        index[value].insert(key);
      } else {
        auto it = index.find(value);
        if (it != index.end()) {
          it->second.erase(key);
          if (it->second.empty()) index.erase(it);
        }
      }
    }
  }
}

std::optional<Json> Store::upsert(const Json& object) {
  std::string key = objectKey(object);
  std::lock_guard lock(mu_);
  std::optional<Json> previous;
  auto it = objects_.find(key);
  if (it != objects_.end()) {
    previous = std::move(it->second);
    indexLocked(key, *previous, false);
  }
  objects_[key] = object;
  indexLocked(key, object, true);
  return previous;
}

std::optional<Json> Store::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  Json previous = std::move(it->second);
  objects_.erase(it);
  indexLocked(key, previous, false);
  return previous;
}

std::vector<Json> Store::replace(std::vector<Json> objects) {
  std::lock_guard lock(mu_);
  std::map<std::string, Json> fresh;
  for (auto& object : objects) {
    std::string key = objectKey(object);
    fresh.emplace(std::move(key), std::move(object));
  }
  std::vector<Json> removed;
  for (auto& [key, object] : objects_) {
    if (!fresh.contains(key)) removed.push_back(object);
  }
  objects_ = std::move(fresh);
  for (auto& [name, index] : indexes_) index.clear();
  for (const auto& [key, object] : objects_) indexLocked(key, object, true);
  return removed;
}

void stripManagedFields(Json& object) {
  if (!object.is_object()) return;
  auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object()) metadata->erase("managedFields");
}

Informer::Informer(KubeClient& client, Clock& clock, ResourceType type, std::string ns,
                   std::string label_selector, std::string field_selector)
    : client_(client),
      clock_(clock),
      type_(std::move(type)),
      ns_(std::move(ns)),
      label_selector_(std::move(label_selector)),
      field_selector_(std::move(field_selector)),
      log_(Logger("informer").with({{"resource", type_.resource}})) {}

Informer::~Informer() {
  stop();
}

void Informer::addHandler(InformerHandler handler) {
  handlers_.push_back(std::move(handler));
}

void Informer::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Informer::requestStop() {
  std::lock_guard lock(mu_);
  stop_.cancel();  // an open watch returns at once
  cv_.notify_all();
}

void Informer::stop() {
  requestStop();
  if (thread_.joinable()) thread_.join();
}

bool Informer::waitForSync(MonoTime deadline) {
  std::unique_lock lock(mu_);
  clock_.waitUntil(lock, cv_, deadline, [this] { return synced_.load() || stop_.cancelled(); });
  return synced_.load();
}

InformerStats Informer::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Informer::notify(InformerEvent event, const Json* old_object, const Json& object) {
  for (const auto& handler : handlers_) handler(event, old_object, object);
}

void Informer::backoff() {
  std::unique_lock lock(mu_);
  clock_.waitUntil(lock, cv_, clock_.monoNow() + backoff_, [this] { return stop_.cancelled(); });
  backoff_ = std::min<Duration>(backoff_ * 2, std::chrono::seconds{30});
}

bool Informer::doList() {
  ListOptions options;
  options.label_selector = label_selector_;
  options.field_selector = field_selector_;
  options.cancel = &stop_;  // stop() interrupts a list the server does not answer
  auto list = client_.list(type_, ns_, options);
  if (!list) {
    if (stop_.cancelled()) return false;
    log_.warn("List failed", {{"error", list.error()}});
    std::lock_guard lock(mu_);
    ++stats_.errors;
    return false;
  }
  std::vector<Json> items;
  for (auto& item : (*list)["items"]) {
    stripManagedFields(item);
    items.push_back(std::move(item));
  }
  // Compute adds/updates before replacing so handlers see old objects.
  std::vector<std::pair<std::optional<Json>, Json>> changes;
  for (const auto& item : items) {
    auto previous = store_.get(objectKey(item));
    if (!previous || (*previous)["metadata"].value("resourceVersion", std::string{}) !=
                         item["metadata"].value("resourceVersion", std::string{})) {
      changes.emplace_back(std::move(previous), item);
    }
  }
  std::vector<Json> removed = store_.replace(std::move(items));
  resource_version_ = (*list)["metadata"].value("resourceVersion", std::string{});
  for (const auto& [previous, object] : changes) {
    notify(previous ? InformerEvent::kUpdate : InformerEvent::kAdd, previous ? &*previous : nullptr,
           object);
  }
  for (const auto& object : removed) notify(InformerEvent::kDelete, &object, object);
  {
    std::lock_guard lock(mu_);
    ++stats_.lists;
    synced_ = true;
    cv_.notify_all();
  }
  log_.debug("Listed", {{"resourceVersion", resource_version_}});
  return true;
}

void Informer::run() {
  bool need_list = true;
  while (!stop_.cancelled()) {
    if (need_list) {
      if (!doList()) {
        backoff();
        continue;
      }
      need_list = false;
      backoff_ = std::chrono::milliseconds{800};
    }
    WatchOptions options;
    options.label_selector = label_selector_;
    options.field_selector = field_selector_;
    options.resource_version = resource_version_;
    options.allow_bookmarks = true;
    options.timeout_seconds = watch_timeout_s_;
    options.cancel = &stop_;
    {
      std::lock_guard lock(mu_);
      ++stats_.watches;
    }
    bool got_event = false;
    Status status = client_.watch(type_, ns_, options, [&](WatchEvent&& event) {
      got_event = true;
      stripManagedFields(event.object);
      std::string rv = event.object["metadata"].value("resourceVersion", std::string{});
      switch (event.type) {
        case WatchEventType::kBookmark:
          break;
        case WatchEventType::kAdded:
        case WatchEventType::kModified: {
          auto previous = store_.upsert(event.object);
          notify(previous ? InformerEvent::kUpdate : InformerEvent::kAdd,
                 previous ? &*previous : nullptr, event.object);
          break;
        }
        case WatchEventType::kDeleted: {
          auto previous = store_.erase(objectKey(event.object));
          notify(InformerEvent::kDelete, previous ? &*previous : nullptr, event.object);
          break;
        }
      }
      if (!rv.empty()) resource_version_ = rv;
      return !stop_.cancelled();
    });
    if (stop_.cancelled()) break;
    if (status) {
      if (got_event) backoff_ = std::chrono::milliseconds{800};
      continue;
    }
    if (status.error().code == ErrorCode::kGone) {
      log_.info("Watch expired, relisting", {{"resourceVersion", resource_version_}});
      std::lock_guard lock(mu_);
      ++stats_.gone;
      need_list = true;
      continue;
    }
    log_.warn("Watch failed", {{"error", status.error()}});
    {
      std::lock_guard lock(mu_);
      ++stats_.errors;
    }
    backoff();
  }
}

}  // namespace c4::op
