// An in-memory object store behind the KubeClient interface, for unit tests of components that
// *use* the API (leader election, node actions, informers). It keeps resourceVersions and
// enforces optimistic concurrency on update like the API server; it is not used to test the
// client itself (that runs against a real kube-apiserver in the integration tier).
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kube/client/kube_client.h"

namespace c4::kube::testing {

class FakeKubeClient final : public KubeClient {
 public:
  Result<Json> get(const ResourceType& type, std::string_view ns, std::string_view name,
                   const GetOptions& options) override {
    std::lock_guard lock(mu_);
    ++calls_;
    ++gets_[type.resource];
    timeouts_.push_back(options.timeout);
    if (fail_next_ || fail_always_) return takeFailure();
    auto it = objects_.find(key(type, ns, name));
    if (it == objects_.end()) return makeError(ErrorCode::kNotFound, "not found");
    return it->second;
  }
  Result<Json> list(const ResourceType& type, std::string_view ns,
                    const ListOptions& options) override {
    std::lock_guard lock(mu_);
    ++calls_;
    list_options_.push_back(options);
    if (fail_next_ || fail_always_) return takeFailure();
    Json items = Json::array();
    std::string prefix = type.resource + "|" + std::string(type.namespaced ? ns : "") + "|";
    for (const auto& [k, v] : objects_) {
      if (k.rfind(type.resource + "|", 0) == 0 && (ns.empty() || k.rfind(prefix, 0) == 0)) {
        items.push_back(v);
      }
    }
    return Json{{"items", items}, {"metadata", {{"resourceVersion", std::to_string(rv_)}}}};
  }
  Result<Json> create(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    std::lock_guard lock(mu_);
    ++calls_;
    timeouts_.push_back(options.timeout);
    if (fail_next_ || fail_always_) return takeFailure();
    std::string k = key(type, ns, objectName(object));
    if (objects_.contains(k)) return makeError(ErrorCode::kAlreadyExists, "exists");
    Json stored = object;
    stored["metadata"]["resourceVersion"] = std::to_string(++rv_);
    stored["metadata"]["uid"] = "uid-" + std::to_string(rv_);
    objects_[k] = stored;
    created_.push_back(stored);
    return stored;
  }
  Result<Json> update(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    std::lock_guard lock(mu_);
    ++calls_;
    timeouts_.push_back(options.timeout);
    if (fail_next_ || fail_always_) return takeFailure();
    std::string k = key(type, ns, objectName(object));
    auto it = objects_.find(k);
    if (it == objects_.end()) return makeError(ErrorCode::kNotFound, "not found");
    if (rvOf(object) != rvOf(it->second)) {
      return makeError(ErrorCode::kConflict, "the object has been modified");
    }
    Json stored = object;
    stored["metadata"]["resourceVersion"] = std::to_string(++rv_);
    it->second = stored;
    return stored;
  }
  // Every patch type is applied as a JSON merge patch (the same for the scalar fields tests
  // patch); each call is recorded, failed ones too.
  Result<Json> patch(const ResourceType& type, std::string_view ns, std::string_view name,
                     PatchType patch_type, const Json& body, const PatchOptions& options) override {
    std::lock_guard lock(mu_);
    ++calls_;
    patches_.push_back(PatchCall{type.resource, std::string(ns), std::string(name), patch_type,
                                 body, options.subresource});
    if (fail_next_) return takeFailure();
    auto it = objects_.find(key(type, ns, name));
    if (it == objects_.end()) return makeError(ErrorCode::kNotFound, "not found");
    // A resourceVersion in the patch is a precondition, as on the API server.
    if (!rvOf(body).empty() && rvOf(body) != rvOf(it->second)) {
      return makeError(ErrorCode::kConflict, "the object has been modified");
    }
    it->second.merge_patch(body);
    it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    return it->second;
  }
  Status remove(const ResourceType& type, std::string_view ns, std::string_view name,
                const DeleteOptions&) override {
    std::lock_guard lock(mu_);
    ++calls_;
    if (objects_.erase(key(type, ns, name)) == 0) return makeError(ErrorCode::kNotFound, "gone");
    return okStatus();
  }
  // Returns the scripted results in order; when none is left, kUnavailable (the informer backs
  // off on the clock, where a test can hold it).
  Status watch(const ResourceType&, std::string_view, const WatchOptions& options,
               const WatchHandler& handler) override {
    std::deque<Json> events;
    std::optional<Error> result;
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      watch_rvs_.push_back(options.resource_version);
      watch_options_.push_back(options);
      hook = watch_hook_;
      if (!watch_script_.empty()) {
        auto [evts, res] = std::move(watch_script_.front());
        watch_script_.pop_front();
        events = std::move(evts);
        result = std::move(res);
      } else {
        result = Error{ErrorCode::kUnavailable, "no scripted watch"};
      }
    }
    if (hook) hook();
    for (auto& e : events) {
      WatchEvent event;
      std::string t = e["type"];
      event.type = t == "ADDED"      ? WatchEventType::kAdded
                   : t == "DELETED"  ? WatchEventType::kDeleted
                   : t == "BOOKMARK" ? WatchEventType::kBookmark
                                     : WatchEventType::kModified;
      event.object = e["object"];
      if (!handler(std::move(event))) return okStatus();
    }
    if (result) return std::unexpected(*result);
    return okStatus();
  }

  // Test helpers.
  void put(const ResourceType& type, const Json& object) {
    std::lock_guard lock(mu_);
    Json stored = object;
    stored["metadata"]["resourceVersion"] = std::to_string(++rv_);
    objects_[key(type, objectNamespace(object), objectName(object))] = stored;
  }
  std::optional<Json> peek(const ResourceType& type, std::string_view ns, std::string_view name) {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key(type, ns, name));
    if (it == objects_.end()) return std::nullopt;
    return it->second;
  }
  // Next watch call delivers `events` then ends with `error` (nullopt = clean end).
  void scriptWatch(std::deque<Json> events, std::optional<Error> error) {
    std::lock_guard lock(mu_);
    watch_script_.emplace_back(std::move(events), std::move(error));
  }
  // The next get/list/create/update fails with `e`.
  void failNext(Error e) {
    std::lock_guard lock(mu_);
    fail_next_ = std::move(e);
  }
  // Every get/list/create/update fails with `e` until failAlways(nullopt).
  void failAlways(std::optional<Error> e) {
    std::lock_guard lock(mu_);
    fail_always_ = std::move(e);
  }
  // Runs at the start of every watch call, on the watching thread (e.g. to move a simulated
  // clock as if the watch had lasted a while).
  void setWatchHook(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    watch_hook_ = std::move(hook);
  }
  std::vector<ListOptions> listOptions() {
    std::lock_guard lock(mu_);
    return list_options_;
  }
  std::vector<WatchOptions> watchOptions() {
    std::lock_guard lock(mu_);
    return watch_options_;
  }
  // The timeout of every get/create/update, in call order.
  std::vector<Duration> timeouts() {
    std::lock_guard lock(mu_);
    return timeouts_;
  }
  std::vector<Json> createdOfKind(const std::string& kind) {
    std::lock_guard lock(mu_);
    std::vector<Json> out;
    for (const auto& o : created_) {
      if (o.value("kind", std::string{}) == kind) out.push_back(o);
    }
    return out;
  }
  struct PatchCall {
    std::string resource;
    std::string ns;
    std::string name;
    PatchType type;
    Json body;
    std::string subresource;
  };
  std::vector<PatchCall> patches() {
    std::lock_guard lock(mu_);
    return patches_;
  }
  // The stored objects of one resource (all namespaces), in key order.
  std::vector<Json> stored(const ResourceType& type) {
    std::lock_guard lock(mu_);
    std::vector<Json> out;
    for (const auto& [k, v] : objects_) {
      if (k.rfind(type.resource + "|", 0) == 0) out.push_back(v);
    }
    return out;
  }
  std::vector<std::string> watchResourceVersions() {
    std::lock_guard lock(mu_);
    return watch_rvs_;
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int gets(const std::string& resource) {
    std::lock_guard lock(mu_);
    return gets_[resource];
  }
  int patchCount() {
    std::lock_guard lock(mu_);
    return static_cast<int>(patches_.size());
  }

 private:
  static std::string rvOf(const Json& object) {
    auto meta = object.find("metadata");
    if (meta == object.end() || !meta->is_object()) return {};
    auto rv = meta->find("resourceVersion");
    return rv != meta->end() && rv->is_string() ? rv->get<std::string>() : std::string{};
  }
  static std::string key(const ResourceType& type, std::string_view ns, std::string_view name) {
    return type.resource + "|" + std::string(type.namespaced ? ns : "") + "|" + std::string(name);
  }
  std::unexpected<Error> takeFailure() {
    if (fail_always_) return std::unexpected(*fail_always_);
    Error e = *fail_next_;
    fail_next_.reset();
    return std::unexpected(e);
  }

  std::mutex mu_;
  std::map<std::string, Json> objects_;
  std::vector<Json> created_;
  std::vector<PatchCall> patches_;
  std::uint64_t rv_ = 100;
  int calls_ = 0;
  std::map<std::string, int> gets_;
  std::optional<Error> fail_next_;
  std::optional<Error> fail_always_;
  std::function<void()> watch_hook_;
  std::vector<ListOptions> list_options_;
  std::vector<WatchOptions> watch_options_;
  std::vector<Duration> timeouts_;
  std::deque<std::pair<std::deque<Json>, std::optional<Error>>> watch_script_;
  std::vector<std::string> watch_rvs_;
};

}  // namespace c4::kube::testing
