// Resource paths, the HTTP -> ErrorCode edge mapping, and object accessors.
#include "kube/client/kube_client.h"

#include <charconv>
#include <cstdint>
#include <utility>

namespace c4::kube {

std::string ResourceType::apiVersion() const {
  return group.empty() ? version : group + "/" + version;
}

std::string ResourceType::basePath() const {
  return group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
}

std::string ResourceType::collectionPath(std::string_view ns) const {
  std::string path = basePath();
  if (namespaced && !ns.empty()) {
    path += "/namespaces/";
    path += ns;
  }
  path += "/" + resource;
  return path;
}

std::string ResourceType::objectPath(std::string_view ns, std::string_view name,
                                     std::string_view subresource) const {
  std::string path = collectionPath(ns);
  path += "/";
  path += name;
  if (!subresource.empty()) {
    path += "/";
    path += subresource;
  }
  return path;
}

namespace resources {
const ResourceType& pods() {
  static const ResourceType t{"", "v1", "pods", "Pod", true};
  return t;
}
const ResourceType& services() {
  static const ResourceType t{"", "v1", "services", "Service", true};
  return t;
}
const ResourceType& configMaps() {
  static const ResourceType t{"", "v1", "configmaps", "ConfigMap", true};
  return t;
}
const ResourceType& nodes() {
  static const ResourceType t{"", "v1", "nodes", "Node", false};
  return t;
}
const ResourceType& events() {
  static const ResourceType t{"", "v1", "events", "Event", true};
  return t;
}
const ResourceType& leases() {
  static const ResourceType t{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return t;
}
const ResourceType& namespaces() {
  static const ResourceType t{"", "v1", "namespaces", "Namespace", false};
  return t;
}
const ResourceType& trainingJobs() {
  static const ResourceType t{"c4.dev", "v1alpha1", "trainingjobs", "TrainingJob", true};
  return t;
}
const ResourceType& customResourceDefinitions() {
  static const ResourceType t{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                              "CustomResourceDefinition", false};
  return t;
}
}  // namespace resources

namespace {

ErrorCode codeForHttp(long http_status, std::string_view verb) {
  switch (http_status) {
    case 400:
    case 405:
    case 406:
    case 413:
    case 415:
    case 422:
      return ErrorCode::kInvalidArgument;
    case 401:
      return ErrorCode::kUnauthenticated;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 409:
      return verb == "POST" ? ErrorCode::kAlreadyExists : ErrorCode::kConflict;
    case 410:
      return ErrorCode::kGone;
    case 429:
      return ErrorCode::kResourceExhausted;
    case 504:
      return ErrorCode::kDeadlineExceeded;
    default:
      break;
  }
  if (http_status >= 500) return ErrorCode::kUnavailable;
  return ErrorCode::kInternal;
}

// metav1.StatusReason -> ErrorCode; nullopt for "", "Unknown" and reasons this client does not
// know (the HTTP status decides then).
std::optional<ErrorCode> codeForReason(std::string_view reason) {
  static constexpr std::pair<std::string_view, ErrorCode> kReasons[] = {
      {"Unauthorized", ErrorCode::kUnauthenticated},
      {"Forbidden", ErrorCode::kPermissionDenied},
      {"NotFound", ErrorCode::kNotFound},
      {"AlreadyExists", ErrorCode::kAlreadyExists},
      {"Conflict", ErrorCode::kConflict},
      {"Gone", ErrorCode::kGone},
      {"Expired", ErrorCode::kGone},
      {"Invalid", ErrorCode::kInvalidArgument},
      {"BadRequest", ErrorCode::kInvalidArgument},
      {"MethodNotAllowed", ErrorCode::kInvalidArgument},
      {"NotAcceptable", ErrorCode::kInvalidArgument},
      {"UnsupportedMediaType", ErrorCode::kInvalidArgument},
      {"RequestEntityTooLarge", ErrorCode::kInvalidArgument},
      {"TooManyRequests", ErrorCode::kResourceExhausted},
      {"Timeout", ErrorCode::kDeadlineExceeded},
      {"ServerTimeout", ErrorCode::kUnavailable},
      {"InternalError", ErrorCode::kUnavailable},
      {"ServiceUnavailable", ErrorCode::kUnavailable},
  };
  for (const auto& [name, code] : kReasons) {
    if (name == reason) return code;
  }
  return std::nullopt;
}

Error errorFor(long http_status, std::string_view reason, std::string_view verb,
               std::string message) {
  ErrorCode code = codeForReason(reason).value_or(codeForHttp(http_status, verb));
  std::string text = "HTTP " + std::to_string(http_status);
  if (!reason.empty() && reason != "Unknown") {
    text += " ";
    text += reason;
  }
  if (!message.empty()) text += ": " + message;
  return Error{code, std::move(text)};
}

std::string stringOr(const Json& object, const char* key, std::string fallback = {}) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

Error statusObjectToError(const Json& status, std::string_view verb) {
  if (!status.is_object()) return errorFor(500, "", verb, "malformed Status object");
  long code = 500;
  if (status.contains("code") && status["code"].is_number_integer()) {
    code = status["code"].get<long>();
  }
  std::string reason = stringOr(status, "reason");
  std::string message = stringOr(status, "message");
  if (message.empty() && reason.empty()) message = "unknown error";
  return errorFor(code, reason, verb, std::move(message));
}

Error mapApiError(long http_status, std::string_view verb, std::string_view body) {
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && stringOr(parsed, "kind") == "Status") {
    // The HTTP status is authoritative; the body's code only fills in for watch events.
    std::string reason = stringOr(parsed, "reason");
    std::string message = stringOr(parsed, "message");
    return errorFor(http_status, reason, verb, std::move(message));
  }
  return errorFor(http_status, "", verb, std::string{body.substr(0, 200)});
}

namespace {
// The field `key` of `object`, or nullptr (object not an object, or no such field).
const Json* fieldAt(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it != object.end() ? &*it : nullptr;
}
}  // namespace

std::optional<std::string> stringAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}
std::optional<std::int64_t> intAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  // An unsigned beyond int64 is not an int64.
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    return std::nullopt;
  }
  return v->get<std::int64_t>();
}
std::optional<double> numberAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}
std::optional<bool> boolAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}
const Json* objectAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  return v != nullptr && v->is_object() ? v : nullptr;
}
const Json* arrayAt(const Json& object, const char* key) {
  const Json* v = fieldAt(object, key);
  return v != nullptr && v->is_array() ? v : nullptr;
}
const Json& fieldsOf(const Json& object, const char* key) {
  static const Json empty = Json::object();
  const Json* v = objectAt(object, key);
  return v != nullptr ? *v : empty;
}
bool hasWrongType(const Json& object, const char* key, Json::value_t type) {
  const Json* v = fieldAt(object, key);
  if (v == nullptr || v->is_null()) return false;
  if (type == Json::value_t::number_float) return !v->is_number();
  if (type == Json::value_t::number_integer || type == Json::value_t::number_unsigned) {
    return !v->is_number_integer();
  }
  return v->type() != type;
}

namespace {
const Json& metadataOf(const Json& object) {
  static const Json empty = Json::object();
  if (!object.is_object()) return empty;
  auto it = object.find("metadata");
  return it != object.end() && it->is_object() ? *it : empty;
}
std::string stringField(const Json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string{};
}
std::string mapField(const Json& o, const char* map, const std::string& key) {
  auto it = o.find(map);
  if (it == o.end() || !it->is_object()) return {};
  auto v = it->find(key);
  return v != it->end() && v->is_string() ? v->get<std::string>() : std::string{};
}
}  // namespace

std::string objectName(const Json& object) {
  return stringField(metadataOf(object), "name");
}
std::string objectNamespace(const Json& object) {
  return stringField(metadataOf(object), "namespace");
}
std::string objectKey(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string{name};
  std::string key{ns};
  key += "/";
  key += name;
  return key;
}
std::string objectKey(const Json& object) {
  return objectKey(objectNamespace(object), objectName(object));
}
std::string labelOf(const Json& object, const std::string& key) {
  return mapField(metadataOf(object), "labels", key);
}
std::string annotationOf(const Json& object, const std::string& key) {
  return mapField(metadataOf(object), "annotations", key);
}
std::optional<std::uint64_t> resourceVersionNumber(const Json& object) {
  std::string rv = stringField(metadataOf(object), "resourceVersion");
  if (rv.empty()) return std::nullopt;
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), value);
  if (ec != std::errc{} || ptr != rv.data() + rv.size()) return std::nullopt;
  return value;
}

void CancelToken::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (waker_) waker_();
}

void CancelToken::setWaker(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  waker_ = std::move(wake);
}

void CancelToken::clearWaker() {
  std::lock_guard lock(mu_);
  waker_ = nullptr;
}

}  // namespace c4::kube
