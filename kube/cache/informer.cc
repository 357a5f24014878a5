// Shared informer.
#include "kube/cache/informer.h"

namespace c4::kube {

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

bool Store::read(const std::string& key, const std::function<void(const Json&)>& read) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return false;
  read(it->second);
  return true;
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

namespace {

constexpr Duration kInitialBackoff = std::chrono::milliseconds{800};
constexpr Duration kMaxBackoff = std::chrono::seconds{30};
constexpr double kBackoffJitter = 1.0;  // client-go's reflector backoff managers
// A watch that ends sooner than this without an event is an error (client-go: "very short
// watch"): resuming it at once would spin against a server that closes every watch.
constexpr Duration kMinWatchDuration = std::chrono::seconds{1};

const char* eventName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "?";
}

}  // namespace

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
      log_(Logger("informer").with({{"resource", type_.resource}})),
      random_(defaultRandomSource()),
      backoff_(kInitialBackoff) {}

Informer::~Informer() {
  stop();
}

void Informer::addHandler(InformerHandler handler) {
  handlers_.push_back(std::move(handler));
}

void Informer::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    // No exception leaves the thread: one that escapes the loop is logged, and the informer
    // starts again from a list after a backoff.
    while (!stop_.cancelled()) {
      try {
        run();
      } catch (const std::exception& e) {
        log_.error("Informer loop threw, relisting", {{"error", e.what()}});
        backoff();
      }
    }
  });
}

void Informer::requestStop() {
  std::lock_guard lock(mu_);
  stop_.cancel();  // an open list or watch returns at once
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
  for (const auto& handler : handlers_) {
    // No exception leaves the informer's thread (it would end the process): a handler that
    // throws on one object is logged, and the other handlers and objects go on.
    try {
      handler(event, old_object, object);
    } catch (const std::exception& e) {
      log_.error("Event handler threw, object skipped",
                 {{"object", objectKey(object)}, {"error", e.what()}});
      std::lock_guard lock(mu_);
      ++stats_.handler_errors;
    }
  }
}

void Informer::backoff() {
  Duration wait = jitter(backoff_, kBackoffJitter, random_);
  std::unique_lock lock(mu_);
  clock_.waitUntil(lock, cv_, clock_.monoNow() + wait, [this] { return stop_.cancelled(); });
  backoff_ = std::min<Duration>(backoff_ * 2, kMaxBackoff);
}

Informer::ListOutcome Informer::doList() {
  ListOptions options;
  options.label_selector = label_selector_;
  options.field_selector = field_selector_;
  options.cancel = &stop_;
  // "" after a 410: a quorum read, paginated. "0" at first: whatever the watch cache has. Else
  // at least as fresh as what we have seen, from the watch cache: unpaginated, since the cache
  // serves such a list only without a limit.
  static const std::string kAny = "0";
  static const std::string kNotOlderThan = "NotOlderThan";
  if (!resource_version_unavailable_) {
    options.resource_version = resource_version_.empty() ? kAny : resource_version_;
  }
  if (!resource_version_unavailable_ && !resource_version_.empty()) {
    options.resource_version_match = kNotOlderThan;
    options.limit = 0;
  }
  auto list = client_.list(type_, ns_, options);
  if (!list) {
    if (stop_.cancelled()) return ListOutcome::kFailed;
    const Error& error = list.error();
    bool unavailable = error.code == ErrorCode::kGone ||
                       error.message.find("Too large resource version") != std::string::npos;
    if (unavailable && !options.resource_version.empty()) {
      log_.info("Resource version unavailable, listing from etcd",
                {{"resourceVersion", options.resource_version}, {"error", error}});
      resource_version_unavailable_ = true;
      return ListOutcome::kRelistFromEtcd;
    }
    log_.warn("List failed", {{"error", error}, {"resourceVersion", options.resource_version}});
    std::lock_guard lock(mu_);
    ++stats_.errors;
    return ListOutcome::kFailed;
  }
  resource_version_unavailable_ = false;
  std::vector<Json> items;
  Json* list_items = list->is_object() && (*list)["items"].is_array() ? &(*list)["items"] : nullptr;
  for (auto& item : list_items != nullptr ? *list_items : Json::array()) {
    if (!item.is_object()) continue;  // not an object: nothing to key it by
    stripManagedFields(item);
    items.push_back(std::move(item));
  }
  // Compute adds/updates before replacing so handlers see old objects.
  std::vector<std::pair<std::optional<Json>, Json>> changes;
  for (const auto& item : items) {
    auto previous = store_.get(objectKey(item));
    if (!previous || stringAt(fieldsOf(*previous, "metadata"), "resourceVersion") !=
                         stringAt(fieldsOf(item, "metadata"), "resourceVersion")) {
      changes.emplace_back(std::move(previous), item);
    }
  }
  std::vector<Json> removed = store_.replace(std::move(items));
  resource_version_ = stringAt(fieldsOf(*list, "metadata"), "resourceVersion").value_or("");
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
  log_.debug("Listed", {{"resourceVersion", resource_version_},
                        {"requestedResourceVersion", options.resource_version}});
  return ListOutcome::kListed;
}

void Informer::apply(WatchEvent& event) {
  stripManagedFields(event.object);
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
  std::string rv =
      stringAt(fieldsOf(event.object, "metadata"), "resourceVersion").value_or(std::string{});
  if (!rv.empty()) resource_version_ = rv;
  log_.trace("Watch event", {{"type", eventName(event.type)}, {"resourceVersion", rv}});
}

void Informer::run() {
  bool need_list = true;
  while (!stop_.cancelled()) {
    if (need_list) {
      switch (doList()) {
        case ListOutcome::kListed:
          need_list = false;
          break;
        case ListOutcome::kRelistFromEtcd:
          continue;  // at once, as client-go does
        case ListOutcome::kFailed:
          backoff();
          continue;
      }
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
    std::uint64_t events = 0;
    MonoTime started = clock_.monoNow();
    Status status = client_.watch(type_, ns_, options, [&](WatchEvent&& event) {
      ++events;
      apply(event);
      return !stop_.cancelled();
    });
    if (stop_.cancelled()) break;
    bool healthy = events > 0 || clock_.monoNow() - started >= kMinWatchDuration;
    if (healthy) backoff_ = kInitialBackoff;  // the server serves this watch
    if (status && healthy) continue;          // a normal end (timeout): resume at once

    AfterWatch next = AfterWatch::kList;
    if (status) {
      log_.warn("Watch ended at once without events, backing off",
                {{"resourceVersion", resource_version_}});
      std::lock_guard lock(mu_);
      ++stats_.errors;
      ++stats_.short_watches;
    } else if (status.error().code == ErrorCode::kGone) {
      log_.info("Watch expired, relisting", {{"resourceVersion", resource_version_}});
      std::lock_guard lock(mu_);
      ++stats_.gone;
      next = AfterWatch::kQuorumList;
    } else {
      ErrorCode code = status.error().code;
      if (code == ErrorCode::kUnavailable || code == ErrorCode::kResourceExhausted ||
          code == ErrorCode::kDeadlineExceeded) {
        next = AfterWatch::kWatch;  // the server is away or busy: resume where we were
      }
      log_.warn("Watch failed", {{"error", status.error()}});
      std::lock_guard lock(mu_);
      ++stats_.errors;
    }
    switch (next) {
      case AfterWatch::kQuorumList:
        resource_version_unavailable_ = true;
        need_list = true;
        // At once after a watch that ran; a watch refused outright with 410 backs off first,
        // so a server that keeps answering 410 never meets a loop of quorum lists.
        if (!healthy) backoff();
        break;
      case AfterWatch::kList:
        need_list = true;
        backoff();
        break;
      case AfterWatch::kWatch:
        backoff();
        break;
    }
  }
}

}  // namespace c4::kube
