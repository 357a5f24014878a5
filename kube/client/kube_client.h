// The Kubernetes API as the operator sees it: typed resource paths, JSON objects, and one
// interface (`KubeClient`) whose only production implementation is the libcurl client
// (curl_kube_client.h). HTTP statuses are mapped to c4::ErrorCode exactly once, in
// `mapApiError`, keeping the message of the API server's metav1.Status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "kube/client/throttle.h"

namespace c4::kube {

using Json = nlohmann::json;

// One API resource (group/version/plural). Paths are built here and nowhere else.
struct ResourceType {
  std::string group;  // "" for the core group
  std::string version;
  std::string resource;  // plural, lower case
  std::string kind;
  bool namespaced = true;

  [[nodiscard]] std::string apiVersion() const;  // "v1" or "<group>/<version>"
  [[nodiscard]] std::string basePath() const;    // "/api/v1" or "/apis/<group>/<version>"
  // Collection path; `ns` empty = all namespaces (or a cluster-scoped resource).
  [[nodiscard]] std::string collectionPath(std::string_view ns) const;
  [[nodiscard]] std::string objectPath(std::string_view ns, std::string_view name,
                                       std::string_view subresource = "") const;
};

namespace resources {
const ResourceType& pods();
const ResourceType& services();
const ResourceType& configMaps();
const ResourceType& nodes();
const ResourceType& events();
const ResourceType& leases();
const ResourceType& namespaces();
const ResourceType& trainingJobs();
const ResourceType& customResourceDefinitions();
}  // namespace resources

// Cancels a blocking call from another thread, promptly: cancel() sets the flag and wakes the
// call through the waker its implementation registered. A call given a cancelled token returns
// kCancelled without sending anything. Thread-safe; one call at a time may use a token.
class CancelToken {
 public:
  void cancel();
  [[nodiscard]] bool cancelled() const { return cancelled_.load(); }
  // For KubeClient implementations, around a blocking call: cancel() calls `wake` while it is
  // set; clearWaker() returns only when no call of it is running.
  void setWaker(std::function<void()> wake);
  void clearWaker();

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::function<void()> waker_;
};

struct GetOptions {
  std::string subresource;  // e.g. "status"; "" = the object
  // When set and cancelled (before or during the call), get returns kCancelled at once.
  CancelToken* cancel = nullptr;
  // Bounds the whole call, Retry-After waits included; zero = the client's request timeout
  // per attempt. A call past it returns kDeadlineExceeded.
  Duration timeout{};
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  // "" = most recent (quorum read from etcd); "0" = any (the API server's watch cache);
  // other values with resource_version_match NotOlderThan: at least that fresh (watch cache).
  std::string resource_version;
  std::string resource_version_match;  // "" | NotOlderThan | Exact
  // Page size; list() follows `continue` until the end. 0 = no limit. The API server ignores
  // it for resource_version "0" when its watch cache serves the list.
  std::int64_t limit = 500;
  // When set and cancelled (before or during the call), list returns kCancelled at once.
  CancelToken* cancel = nullptr;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // server-side timeout of one watch call
  // When set and cancelled (before or during the call), watch returns kCancelled at once.
  CancelToken* cancel = nullptr;
};

enum class PatchType { kMerge, kJson, kStrategicMerge, kApply };

struct PatchOptions {
  std::string subresource;    // e.g. "status"
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take ownership of conflicting fields
};

struct WriteOptions {
  std::string subresource;
  std::string field_manager;
  RequestPriority priority = RequestPriority::kNormal;  // order when the client is throttled
  // Bounds the whole call, Retry-After waits included; zero = the client's request timeout
  // per attempt. A call past it returns kDeadlineExceeded (the write may or may not have been
  // applied).
  Duration timeout{};
};

struct DeleteOptions {
  std::optional<std::int64_t> grace_period_seconds;  // 0 = force delete
  std::string propagation_policy;                    // Foreground | Background | Orphan
  std::string precondition_uid;
  std::string precondition_resource_version;
  RequestPriority priority = RequestPriority::kNormal;  // order when the client is throttled
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  Json object;
};

// Returns false to end the watch (watch() then returns ok).
using WatchHandler = std::function<bool(WatchEvent&&)>;

// Thread-safe; every call blocks until the API server answered (or the client timeout).
// Errors (see mapApiError): kNotFound (404), kAlreadyExists (409 AlreadyExists), kConflict
// (409 Conflict), kGone (410), kInvalidArgument (400/422), kUnauthenticated (401),
// kPermissionDenied (403), kResourceExhausted (429), kUnavailable (5xx, connection errors),
// kDeadlineExceeded (timeouts), kCancelled (a CancelToken fired).
class KubeClient {
 public:
  virtual ~KubeClient() = default;

  virtual Result<Json> get(const ResourceType& type, std::string_view ns, std::string_view name,
                           const GetOptions& options = {}) = 0;
  // Returns a List object whose `items` hold every page and whose metadata.resourceVersion is
  // the list's resourceVersion (to start a watch from).
  virtual Result<Json> list(const ResourceType& type, std::string_view ns,
                            const ListOptions& options = {}) = 0;
  virtual Result<Json> create(const ResourceType& type, std::string_view ns, const Json& object,
                              const WriteOptions& options = {}) = 0;
  // PUT; the object's metadata.name names it, metadata.resourceVersion makes it conditional.
  virtual Result<Json> update(const ResourceType& type, std::string_view ns, const Json& object,
                              const WriteOptions& options = {}) = 0;
  virtual Result<Json> patch(const ResourceType& type, std::string_view ns, std::string_view name,
                             PatchType patch_type, const Json& body,
                             const PatchOptions& options = {}) = 0;
  virtual Status remove(const ResourceType& type, std::string_view ns, std::string_view name,
                        const DeleteOptions& options = {}) = 0;
  // Streams events to `handler` until the handler returns false or the server ends the stream
  // (both: ok), or an error: kGone when the resourceVersion is too old (relist), kCancelled when
  // options.cancel was set, anything else as for the other calls. ERROR events become errors.
  virtual Status watch(const ResourceType& type, std::string_view ns, const WatchOptions& options,
                       const WatchHandler& handler) = 0;
};

// Maps one HTTP answer to an Error (the edge mapping). When the body is a metav1.Status whose
// `reason` this client knows (AlreadyExists, Conflict, NotFound, Gone, Expired, Invalid,
// BadRequest, MethodNotAllowed, Forbidden, Unauthorized, TooManyRequests, Timeout,
// ServerTimeout, ...), the reason decides the code; otherwise the HTTP status does, and `verb`
// decides a bare 409 (POST -> kAlreadyExists, anything else -> kConflict). The message is
// "HTTP <status> [<reason>]: <the Status message>", or the first 200 bytes of a non-Status body.
Error mapApiError(long http_status, std::string_view verb, std::string_view body);
// Same mapping for a metav1.Status object (watch ERROR events); its `code` is the HTTP status.
Error statusObjectToError(const Json& status, std::string_view verb);

// Checked field access for every object read from outside (API server objects, annotations,
// ConfigMap data): never throws. The field `key` of `object` when `object` is a JSON object and
// the field has the asked type; nullopt otherwise (absent, null, another type). nlohmann's own
// value(), at(), get<T>() and operator[] throw on another type (type_error.302/306).
std::optional<std::string> stringAt(const Json& object, const char* key);
std::optional<std::int64_t> intAt(const Json& object, const char* key);  // integers only
std::optional<double> numberAt(const Json& object, const char* key);     // any number
std::optional<bool> boolAt(const Json& object, const char* key);
// The object (array) at `key`, or nullptr when absent or of another type.
const Json* objectAt(const Json& object, const char* key);
const Json* arrayAt(const Json& object, const char* key);
// The object at `key`, or an empty object when absent or of another type (to chain reads:
// stringAt(fieldsOf(pod, "spec"), "nodeName")).
const Json& fieldsOf(const Json& object, const char* key);
// Whether `key` is present with a type other than `type` (what makes a field "wrong-typed").
bool hasWrongType(const Json& object, const char* key, Json::value_t type);

// Convenience accessors on objects.
std::string objectName(const Json& object);
std::string objectNamespace(const Json& object);
// "<namespace>/<name>", or "<name>" for cluster-scoped objects.
std::string objectKey(const Json& object);
std::string objectKey(std::string_view ns, std::string_view name);
std::string labelOf(const Json& object, const std::string& key);
std::string annotationOf(const Json& object, const std::string& key);
// metadata.resourceVersion parsed as an integer (etcd revision); nullopt when not numeric.
std::optional<std::uint64_t> resourceVersionNumber(const Json& object);

}  // namespace c4::kube
