// Informer: list + watch of one resource (optionally narrowed by namespace, label and field
// selectors) into a thread-safe cache with indexes, written as an explicit state machine
// (kube-rs watcher.rs) with client-go's reflector semantics:
//
//   List(rv) -> Watch(rv) -> watch ended normally (events seen, or it lasted >= 1 s):
//                              Watch(rv) again at once
//                         -> watch ended at once with no event ("very short watch"),
//                            or failed with anything but the cases below:
//                              back off, then List(rv) again
//                         -> the server is unreachable or overloaded (kUnavailable,
//                            kResourceExhausted, kDeadlineExceeded): back off, then Watch(rv)
//                         -> 410 Gone: List("") (at once if the watch ran, after a backoff
//                            if it was refused outright)
//
// Which List: the first one asks for resourceVersion "0" and relists for the last synced
// resourceVersion with resourceVersionMatch=NotOlderThan (unpaginated), so the API server's
// watch cache serves them; only after a 410 Gone (or a list that answered 410 or "Too large
// resource version") does it list with resourceVersion "" (a paginated quorum read from etcd).
// Bookmarks and events advance rv. Backoff: exponential from 800 ms to 30 s, each wait
// stretched by up to 100% jitter (client-go's backoff manager), reset once a watch delivered an
// event or lasted 1 s. Cached objects carry no metadata.managedFields (memory).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "kube/client/kube_client.h"
#include "kube/client/random.h"

namespace c4::kube {

// Thread-safe object cache keyed by "<ns>/<name>" with secondary indexes.
class Store {
 public:
  using IndexFunc = std::function<std::vector<std::string>(const Json&)>;

  // Indexes must be added before the first object.
  void addIndex(const std::string& name, IndexFunc fn);
  [[nodiscard]] std::optional<Json> get(const std::string& key) const;
  // Runs `read` with the cached object, in place (no copy), under the store's lock; false when
  // there is none. `read` must be quick and must not call into the store (readers that look at a
  // few fields of many objects: the C4D snapshot reads every pod and Node of a job each second).
  bool read(const std::string& key, const std::function<void(const Json&)>& read) const;
  [[nodiscard]] std::vector<Json> list() const;
  [[nodiscard]] std::vector<Json> byIndex(const std::string& index, const std::string& value) const;
  [[nodiscard]] std::size_t size() const;

  // Mutations (the informer). upsert returns the previous object, if any.
  std::optional<Json> upsert(const Json& object);
  std::optional<Json> erase(const std::string& key);
  // Replaces everything; returns the objects that disappeared.
  std::vector<Json> replace(std::vector<Json> objects);

 private:
  void indexLocked(const std::string& key, const Json& object, bool add);

  mutable std::mutex mu_;
  std::map<std::string, Json> objects_;
  std::map<std::string, IndexFunc> index_funcs_;
  std::map<std::string, std::map<std::string, std::set<std::string>>> indexes_;
};

enum class InformerEvent { kAdd, kUpdate, kDelete };
// Called on the informer's thread; must not block for long. `old_object` is null on add.
using InformerHandler =
    std::function<void(InformerEvent, const Json* old_object, const Json& object)>;

struct InformerStats {
  std::uint64_t lists = 0;           // successful lists (1 + relists)
  std::uint64_t gone = 0;            // 410 answers that forced a quorum relist
  std::uint64_t errors = 0;          // other failed list/watch calls (short watches included)
  std::uint64_t watches = 0;         // watch calls started
  std::uint64_t short_watches = 0;   // watches that ended at once without an event
  std::uint64_t handler_errors = 0;  // handler calls that threw (logged; the object skipped)
};

// Erases metadata.managedFields (what the informer does to every object it caches).
void stripManagedFields(Json& object);

class Informer {
 public:
  // `label_selector` and `field_selector` narrow the list and the watch (e.g. the node plugin's
  // "spec.nodeName=<node>" on pods); "" = everything in `ns` ("" = all namespaces).
  Informer(KubeClient& client, Clock& clock, ResourceType type, std::string ns,
           std::string label_selector = "", std::string field_selector = "");
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  Store& store() { return store_; }
  // Handlers, indexes (store().addIndex) and the setters below: before start().
  void addHandler(InformerHandler handler);
  // Watch calls end after this many seconds and resume from the last resourceVersion.
  void setWatchTimeoutSeconds(int s) { watch_timeout_s_ = s; }
  // The jitter of backoff waits draws from `random` (default: seeded from std::random_device).
  void setRandomSource(RandomSource random) { random_ = std::move(random); }

  void start();
  // Ends the thread (cancels an open list, watch or backoff at once). Idempotent.
  void stop();
  // Asks the thread to end without waiting for it (stop() then joins).
  void requestStop();
  [[nodiscard]] bool hasSynced() const { return synced_.load(); }
  // Blocks until synced, stopped or the deadline; returns hasSynced().
  bool waitForSync(MonoTime deadline);
  [[nodiscard]] InformerStats stats() const;
  [[nodiscard]] const ResourceType& type() const { return type_; }
  [[nodiscard]] const std::string& ns() const { return ns_; }
  [[nodiscard]] const std::string& labelSelector() const { return label_selector_; }
  [[nodiscard]] const std::string& fieldSelector() const { return field_selector_; }

 private:
  enum class ListOutcome { kListed, kRelistFromEtcd, kFailed };
  // What a failed watch leads to.
  enum class AfterWatch { kWatch, kList, kQuorumList };

  void run();
  ListOutcome doList();
  // Applies one watch event to the store and the handlers.
  void apply(WatchEvent& event);
  void notify(InformerEvent event, const Json* old_object, const Json& object);
  void backoff();

  KubeClient& client_;
  Clock& clock_;
  ResourceType type_;
  std::string ns_;
  std::string label_selector_;
  std::string field_selector_;
  Store store_;
  Logger log_;
  std::vector<InformerHandler> handlers_;
  int watch_timeout_s_ = 300;
  RandomSource random_;
  std::string resource_version_;  // the last synced one (list, event or bookmark)
  // A 410 or "too large" answer: the next list reads from etcd (resourceVersion "").
  bool resource_version_unavailable_ = false;
  Duration backoff_;
  CancelToken stop_;  // also cancels the open watch
  std::atomic<bool> synced_{false};
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  InformerStats stats_;
  std::thread thread_;
};

}  // namespace c4::kube
