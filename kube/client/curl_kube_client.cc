// libcurl KubeClient.
#include "kube/client/curl_kube_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "c4/common/log.h"
#include "kube/client/throttle.h"

namespace c4::kube {
namespace {

struct CurlDeleter {
  void operator()(CURL* handle) const noexcept { curl_easy_cleanup(handle); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;

struct MultiDeleter {
  void operator()(CURLM* handle) const noexcept { curl_multi_cleanup(handle); }
};
using MultiPtr = std::unique_ptr<CURLM, MultiDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

struct UrlDeleter {
  void operator()(CURLU* url) const noexcept { curl_url_cleanup(url); }
};
using UrlPtr = std::unique_ptr<CURLU, UrlDeleter>;

struct CurlStringDeleter {
  void operator()(char* s) const noexcept { curl_free(s); }
};
using CurlString = std::unique_ptr<char, CurlStringDeleter>;

// client-go's maxRetries: how often one request is retried on answers that carry Retry-After.
constexpr int kMaxRetries = 10;

void globalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool http2Available() {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  return info != nullptr && (info->features & CURL_VERSION_HTTP2) != 0;
}

std::string protocolName(long version) {
  switch (version) {
    case CURL_HTTP_VERSION_1_0:
      return "HTTP/1.0";
    case CURL_HTTP_VERSION_1_1:
      return "HTTP/1.1";
    case CURL_HTTP_VERSION_2_0:
      return "HTTP/2";
    case CURL_HTTP_VERSION_3:
      return "HTTP/3";
    default:
      return "unknown";
  }
}

std::size_t appendToString(char* data, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// What the client reads from response headers: Retry-After in seconds (the HTTP-date form is
// not honoured, as in client-go).
struct ResponseHeaders {
  std::optional<long> retry_after_seconds;
};

std::size_t onHeader(char* data, std::size_t size, std::size_t n, void* user) {
  auto* headers = static_cast<ResponseHeaders*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    headers->retry_after_seconds.reset();  // a new response (after 100 Continue or a redirect)
    return size * n;
  }
  constexpr std::string_view kName = "retry-after:";
  if (line.size() <= kName.size()) return size * n;
  for (std::size_t i = 0; i < kName.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) return size * n;
  }
  std::string_view value = line.substr(kName.size());
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  long seconds = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec == std::errc{} && ptr == value.data() + value.size() && seconds >= 0) {
    headers->retry_after_seconds = seconds;
  }
  return size * n;
}

Error transportError(CURLcode code, const char* errbuf, std::string_view what) {
  std::string message =
      std::string(what) + ": " + (errbuf[0] != '\0' ? errbuf : curl_easy_strerror(code));
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return Error{ErrorCode::kDeadlineExceeded, message};
    case CURLE_ABORTED_BY_CALLBACK:
      return Error{ErrorCode::kCancelled, message};
    default:
      return Error{ErrorCode::kUnavailable, message};
  }
}

long timeoutMillis(Duration d) {
  return std::max<long>(1,
                        static_cast<long>(std::chrono::ceil<std::chrono::milliseconds>(d).count()));
}

// Where requests go: the server URL, or with tls-server-name set (https), the same URL with that
// name as its host, so that libcurl sends it as SNI and verifies the certificate against it,
// plus a CURLOPT_CONNECT_TO entry that still connects to the server's real host and port.
struct Endpoint {
  std::string base_url;
  std::string connect_to;  // "" = connect where base_url says
};

Result<Endpoint> endpointFor(const KubeConfig& config) {
  Endpoint endpoint{config.server, ""};
  if (config.tls_server_name.empty() || config.server.rfind("https://", 0) != 0) return endpoint;
  UrlPtr url(curl_url());
  if (!url) return makeError(ErrorCode::kInternal, "curl_url failed");
  if (curl_url_set(url.get(), CURLUPART_URL, config.server.c_str(), 0) != CURLUE_OK) {
    return makeError(ErrorCode::kInvalidArgument,
                     "API server URL is not a valid URL: '" + config.server + "'");
  }
  char* raw = nullptr;
  if (curl_url_get(url.get(), CURLUPART_HOST, &raw, 0) != CURLUE_OK) {
    return makeError(ErrorCode::kInvalidArgument,
                     "API server URL has no host: '" + config.server + "'");
  }
  CurlString host(raw);
  raw = nullptr;
  if (curl_url_get(url.get(), CURLUPART_PORT, &raw, CURLU_DEFAULT_PORT) != CURLUE_OK) {
    return makeError(ErrorCode::kInvalidArgument,
                     "API server URL has no port: '" + config.server + "'");
  }
  CurlString port(raw);
  raw = nullptr;
  if (config.tls_server_name.find_first_of(":/[]@ ") != std::string::npos ||
      curl_url_set(url.get(), CURLUPART_HOST, config.tls_server_name.c_str(), 0) != CURLUE_OK) {
    return makeError(ErrorCode::kInvalidArgument,
                     "tls-server-name is not a host name: '" + config.tls_server_name + "'");
  }
  if (curl_url_get(url.get(), CURLUPART_URL, &raw, 0) != CURLUE_OK) {
    return makeError(ErrorCode::kInternal, "cannot rebuild the API server URL");
  }
  CurlString rewritten(raw);
  endpoint.base_url = rewritten.get();
  while (!endpoint.base_url.empty() && endpoint.base_url.back() == '/') {
    endpoint.base_url.pop_back();
  }
  endpoint.connect_to =
      config.tls_server_name + ":" + port.get() + ":" + host.get() + ":" + port.get();
  return endpoint;
}

struct HttpResponse {
  long status = 0;
  std::string body;
  std::optional<long> retry_after_seconds;
};

// One request as the client sends it (and retries it).
struct Request {
  std::string method;
  std::string path;  // with the query
  std::string body;
  std::string content_type;
  RequestPriority priority = RequestPriority::kNormal;
  CancelToken* cancel = nullptr;
  Duration timeout{};  // zero = config.request_timeout per attempt
};

// An easy handle with a multi handle of its own: the multi handle owns the connection cache
// (so pooled handles keep their connections alive between requests) and lets a CancelToken
// interrupt a transfer at once (curl_multi_wakeup).
struct Connection {
  CurlPtr easy;
  MultiPtr multi;
};
using ConnectionPtr = std::unique_ptr<Connection>;

class CurlKubeClient final : public KubeClient {
 public:
  CurlKubeClient(KubeConfig config, Endpoint endpoint, Clock& clock, metrics::Registry* registry)
      : config_(std::move(config)),
        endpoint_(std::move(endpoint)),
        clock_(clock),
        bucket_(clock, config_.qps, config_.burst),
        http2_(http2Available()),
        token_(config_.token),
        token_read_(clock.monoNow()) {
    if (!endpoint_.connect_to.empty()) {
      connect_to_.reset(curl_slist_append(nullptr, endpoint_.connect_to.c_str()));
    }
    if (registry != nullptr) {
      latency_ = &registry->histogram("c4_operator_api_request_duration_seconds",
                                      "Latency of Kubernetes API requests.", {"verb"});
      requests_ =
          &registry->counter("c4_operator_api_requests_total",
                             "Kubernetes API requests by verb and HTTP status.", {"verb", "code"});
      retries_ = &registry->counter(
          "c4_operator_api_retries_total",
          "Kubernetes API requests retried after a 429/5xx answer with Retry-After.",
          {"verb", "code"});
      protocols_ =
          &registry->counter("c4_operator_api_responses_by_protocol_total",
                             "Kubernetes API responses by HTTP protocol version.", {"protocol"});
    }
  }

  // Interface
  Result<Json> get(const ResourceType& type, std::string_view ns, std::string_view name,
                   const GetOptions& options) override {
    Request request;
    request.method = "GET";
    request.path = type.objectPath(ns, name, options.subresource);
    request.cancel = options.cancel;
    request.timeout = options.timeout;
    return jsonCall(request);
  }

  Result<Json> list(const ResourceType& type, std::string_view ns,
                    const ListOptions& options) override {
    Json result;
    std::string continue_token;
    Json items = Json::array();
    for (;;) {
      std::vector<std::pair<std::string, std::string>> query;
      if (!options.label_selector.empty())
        query.emplace_back("labelSelector", options.label_selector);
      if (!options.field_selector.empty())
        query.emplace_back("fieldSelector", options.field_selector);
      if (options.limit > 0) query.emplace_back("limit", std::to_string(options.limit));
      if (!continue_token.empty()) {
        query.emplace_back("continue", continue_token);
      } else if (!options.resource_version.empty()) {
        query.emplace_back("resourceVersion", options.resource_version);
        if (!options.resource_version_match.empty()) {
          query.emplace_back("resourceVersionMatch", options.resource_version_match);
        }
      }
      Request request;
      request.method = "GET";
      request.path = type.collectionPath(ns) + encodeQuery(query);
      request.cancel = options.cancel;
      C4_ASSIGN_OR_RETURN(Json page, jsonCall(request));
      if (!page.is_object()) {
        return makeError(ErrorCode::kUnavailable, "list " + request.path + ": not an object");
      }
      if (page.contains("items") && page["items"].is_array()) {
        for (auto& item : page["items"]) {
          // Lists omit kind/apiVersion on items; restore them so objects look like gets.
          if (!item.is_object()) continue;  // not an object: not an item
          if (!item.contains("kind")) item["kind"] = type.kind;
          if (!item.contains("apiVersion")) item["apiVersion"] = type.apiVersion();
          items.push_back(std::move(item));
        }
      }
      continue_token = stringAt(fieldsOf(page, "metadata"), "continue").value_or("");
      result = std::move(page);
      if (continue_token.empty()) break;
    }
    result["items"] = std::move(items);
    return result;
  }

  Result<Json> create(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    std::string path = type.collectionPath(ns);
    if (!options.subresource.empty())
      path = type.objectPath(ns, objectName(object), options.subresource);
    return jsonCall(
        writeRequest("POST", path + managerQuery(options.field_manager), object.dump(), options));
  }

  Result<Json> update(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    std::string name = objectName(object);
    if (name.empty()) return makeError(ErrorCode::kInvalidArgument, "update: object has no name");
    return jsonCall(writeRequest(
        "PUT", type.objectPath(ns, name, options.subresource) + managerQuery(options.field_manager),
        object.dump(), options));
  }

  Result<Json> patch(const ResourceType& type, std::string_view ns, std::string_view name,
                     PatchType patch_type, const Json& body, const PatchOptions& options) override {
    const char* content_type = "application/merge-patch+json";
    std::vector<std::pair<std::string, std::string>> query;
    switch (patch_type) {
      case PatchType::kMerge:
        break;
      case PatchType::kJson:
        content_type = "application/json-patch+json";
        break;
      case PatchType::kStrategicMerge:
        content_type = "application/strategic-merge-patch+json";
        break;
      case PatchType::kApply:
        content_type = "application/apply-patch+yaml";  // JSON is valid YAML
        if (options.field_manager.empty()) {
          return makeError(ErrorCode::kInvalidArgument, "server-side apply needs a field manager");
        }
        if (options.force) query.emplace_back("force", "true");
        break;
    }
    if (!options.field_manager.empty()) query.emplace_back("fieldManager", options.field_manager);
    Request request;
    request.method = "PATCH";
    request.path = type.objectPath(ns, name, options.subresource) + encodeQuery(query);
    request.body = body.dump();
    request.content_type = content_type;
    return jsonCall(request);
  }

  Status remove(const ResourceType& type, std::string_view ns, std::string_view name,
                const DeleteOptions& options) override {
    Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
    if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
    if (!options.precondition_uid.empty()) body["preconditions"]["uid"] = options.precondition_uid;
    if (!options.precondition_resource_version.empty()) {
      body["preconditions"]["resourceVersion"] = options.precondition_resource_version;
    }
    Request request;
    request.method = "DELETE";
    request.path = type.objectPath(ns, name);
    request.body = body.dump();
    request.content_type = "application/json";
    request.priority = options.priority;
    auto result = jsonCall(request);
    if (!result) return std::unexpected(result.error());
    return okStatus();
  }

  Status watch(const ResourceType& type, std::string_view ns, const WatchOptions& options,
               const WatchHandler& handler) override {
    std::vector<std::pair<std::string, std::string>> query{{"watch", "true"}};
    if (!options.label_selector.empty())
      query.emplace_back("labelSelector", options.label_selector);
    if (!options.field_selector.empty())
      query.emplace_back("fieldSelector", options.field_selector);
    if (!options.resource_version.empty()) {
      query.emplace_back("resourceVersion", options.resource_version);
    }
    if (options.allow_bookmarks) query.emplace_back("allowWatchBookmarks", "true");
    query.emplace_back("timeoutSeconds", std::to_string(options.timeout_seconds));
    std::string path = type.collectionPath(ns) + encodeQuery(query);
    if (options.cancel != nullptr && options.cancel->cancelled()) {
      return makeError(ErrorCode::kCancelled, "watch " + type.resource + ": cancelled");
    }
    if (config_.before_send) C4_RETURN_IF_ERROR(config_.before_send("GET", path));
    WatchState state;
    CurlPtr curl(curl_easy_init());
    MultiPtr multi(curl_multi_init());
    if (!curl || !multi) return makeError(ErrorCode::kInternal, "curl_easy_init failed");
    state.handler = &handler;
    state.curl = curl.get();
    SlistPtr headers = prepare(curl.get(), "GET", path, "", "");
    curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS,
                     static_cast<long>(options.timeout_seconds + 30) * 1000L);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &CurlKubeClient::onWatchData);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &state);
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = performCancellable(multi.get(), curl.get(), options.cancel);
    countProtocol(curl.get());
    if (state.error) return std::unexpected(*state.error);
    if (state.stopped_by_handler) return okStatus();
    if (options.cancel != nullptr && options.cancel->cancelled()) {
      return makeError(ErrorCode::kCancelled, "watch " + type.resource + ": cancelled");
    }
    if (rc != CURLE_OK)
      return std::unexpected(transportError(rc, errbuf, "watch " + type.resource));
    long status = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) return std::unexpected(mapApiError(status, "WATCH", state.error_body));
    return okStatus();
  }

 private:
  // Runs one transfer of `curl` on `multi`, so that `cancel` can interrupt its wait at once
  // (curl_multi_wakeup) instead of at libcurl's next progress callback (about 1 s). A token
  // cancelled before the call aborts it before anything is sent.
  static CURLcode performCancellable(CURLM* multi, CURL* curl, CancelToken* cancel) {
    if (cancel != nullptr && cancel->cancelled()) return CURLE_ABORTED_BY_CALLBACK;
    if (curl_multi_add_handle(multi, curl) != CURLM_OK) return CURLE_FAILED_INIT;
    if (cancel != nullptr) cancel->setWaker([multi] { curl_multi_wakeup(multi); });
    CURLcode rc = CURLE_OK;
    int running = 1;
    while (running > 0) {
      if (curl_multi_perform(multi, &running) != CURLM_OK) {
        rc = CURLE_RECV_ERROR;
        break;
      }
      if (running == 0) break;
      if (cancel != nullptr && cancel->cancelled()) {
        rc = CURLE_ABORTED_BY_CALLBACK;
        break;
      }
      // Returns early when libcurl's own timers (timeouts) are due, or on wakeup.
      if (curl_multi_poll(multi, nullptr, 0, 1000, nullptr) != CURLM_OK) {
        rc = CURLE_RECV_ERROR;
        break;
      }
    }
    if (cancel != nullptr) cancel->clearWaker();  // before the handle it wakes is gone
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == curl) rc = msg->data.result;
    }
    curl_multi_remove_handle(multi, curl);
    return rc;
  }

  struct WatchState {
    const WatchHandler* handler = nullptr;
    CURL* curl = nullptr;
    std::string buffer;
    std::string error_body;
    bool checked_status = false;
    bool ok_status = true;
    bool stopped_by_handler = false;
    std::optional<Error> error;
  };

  static std::size_t onWatchData(char* data, std::size_t size, std::size_t n, void* user) {
    auto* state = static_cast<WatchState*>(user);
    std::size_t total = size * n;
    try {
      if (!state->checked_status) {
        long status = 0;
        curl_easy_getinfo(state->curl, CURLINFO_RESPONSE_CODE, &status);
        state->ok_status = status == 200;
        state->checked_status = true;
      }
      if (!state->ok_status) {
        state->error_body.append(data, total);
        return total;
      }
      state->buffer.append(data, total);
      std::size_t start = 0;
      for (;;) {
        std::size_t nl = state->buffer.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view line(state->buffer.data() + start, nl - start);
        start = nl + 1;
        if (line.empty()) continue;
        Json event = Json::parse(line, nullptr, false);
        if (!event.is_object()) {
          state->error = Error{ErrorCode::kUnavailable, "watch: malformed event line"};
          return 0;
        }
        std::string type = stringAt(event, "type").value_or("");
        WatchEvent out;
        if (type == "ADDED") {
          out.type = WatchEventType::kAdded;
        } else if (type == "MODIFIED") {
          out.type = WatchEventType::kModified;
        } else if (type == "DELETED") {
          out.type = WatchEventType::kDeleted;
        } else if (type == "BOOKMARK") {
          out.type = WatchEventType::kBookmark;
        } else if (type == "ERROR") {
          state->error = statusObjectToError(event["object"], "WATCH");
          return 0;
        } else {
          continue;  // unknown event types are ignored, as client-go does
        }
        out.object = std::move(event["object"]);
        if (!(*state->handler)(std::move(out))) {
          state->stopped_by_handler = true;
          return 0;
        }
      }
      state->buffer.erase(0, start);
      return total;
    } catch (const std::exception& e) {
      state->error = Error{ErrorCode::kInternal, std::string("watch handler: ") + e.what()};
      return 0;
    }
  }

  static std::string escape(const std::string& s) {
    char* escaped = curl_easy_escape(nullptr, s.c_str(), static_cast<int>(s.size()));
    std::string out = escaped != nullptr ? escaped : "";
    curl_free(escaped);
    return out;
  }

  static std::string encodeQuery(const std::vector<std::pair<std::string, std::string>>& query) {
    std::string out;
    for (const auto& [k, v] : query) {
      out += out.empty() ? "?" : "&";
      out += k + "=" + escape(v);
    }
    return out;
  }

  static std::string managerQuery(const std::string& manager) {
    return manager.empty() ? std::string{} : "?fieldManager=" + escape(manager);
  }

  static Request writeRequest(std::string method, std::string path, std::string body,
                              const WriteOptions& options) {
    Request request;
    request.method = std::move(method);
    request.path = std::move(path);
    request.body = std::move(body);
    request.content_type = "application/json";
    request.priority = options.priority;
    request.timeout = options.timeout;
    return request;
  }

  std::string currentToken() {
    if (config_.token_file.empty()) return config_.token;
    std::lock_guard lock(token_mu_);
    MonoTime now = clock_.monoNow();
    if (token_.empty() || now - token_read_ > std::chrono::minutes{1}) {
      auto fresh = readFileToString(config_.token_file);
      if (fresh) {
        std::string t = *fresh;
        while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
        token_ = t;
        token_read_ = now;
      }
    }
    return token_;
  }

  void countProtocol(CURL* curl) {
    if (protocols_ == nullptr) return;
    long version = 0;
    if (curl_easy_getinfo(curl, CURLINFO_HTTP_VERSION, &version) != CURLE_OK || version == 0) {
      return;  // no response
    }
    protocols_->labels({protocolName(version)}).inc();
  }

  // Sets URL, protocol, TLS, auth and headers on a handle. Returns the header list to keep
  // alive for the transfer.
  SlistPtr prepare(CURL* curl, const std::string& method, const std::string& path,
                   const std::string& body, const std::string& content_type) {
    std::string url = endpoint_.base_url + path;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    if (connect_to_) curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to_.get());
    // HTTP/2 over TLS where the server agrees (ALPN), HTTP/1.1 otherwise.
    if (http2_) curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(config_.connect_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    if (method == "GET") {
      curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    if (!config_.ca_pem.empty()) {
      curl_blob blob{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(),
                     CURL_BLOB_COPY};
      curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (!config_.client_cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()),
                     config_.client_cert_pem.size(), CURL_BLOB_COPY};
      curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                    CURL_BLOB_COPY};
      curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
      curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
    }
    if (config_.insecure_skip_tls_verify) {
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "User-Agent: c4-operator/" C4_VERSION);
    if (!content_type.empty()) {
      headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
    }
    std::string token = currentToken();
    if (!token.empty()) {
      headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    return SlistPtr(headers);
  }

  ConnectionPtr acquireConnection() {
    {
      std::lock_guard lock(pool_mu_);
      if (!pool_.empty()) {
        ConnectionPtr c = std::move(pool_.back());
        pool_.pop_back();
        curl_easy_reset(c->easy.get());
        return c;
      }
    }
    auto c = std::make_unique<Connection>();
    c->easy.reset(curl_easy_init());
    c->multi.reset(curl_multi_init());
    if (!c->easy || !c->multi) return nullptr;
    return c;
  }

  void releaseConnection(ConnectionPtr connection) {
    std::lock_guard lock(pool_mu_);
    if (pool_.size() < 64) pool_.push_back(std::move(connection));
  }

  // Waits on the clock until `until`; kCancelled as soon as `cancel` fires.
  Status waitCancellable(MonoTime until, CancelToken* cancel, const std::string& what) {
    std::mutex mu;
    std::condition_variable_any cv;
    if (cancel != nullptr) {
      cancel->setWaker([&] {
        std::lock_guard lock(mu);
        cv.notify_all();
      });
    }
    {
      std::unique_lock lock(mu);
      clock_.waitUntil(lock, cv, until, [&] { return cancel != nullptr && cancel->cancelled(); });
    }
    if (cancel != nullptr) cancel->clearWaker();
    if (cancel != nullptr && cancel->cancelled()) {
      return makeError(ErrorCode::kCancelled, what + ": cancelled while waiting to retry");
    }
    return okStatus();
  }

  // One attempt: the gate, then the transfer (bounded by `deadline` when set).
  Result<HttpResponse> send(const Request& request, std::optional<MonoTime> deadline) {
    std::string what = request.method + " " + request.path;
    if (request.cancel != nullptr && request.cancel->cancelled()) {
      return makeError(ErrorCode::kCancelled, what + ": cancelled");
    }
    Duration limit = config_.request_timeout;
    if (deadline) {
      Duration left = *deadline - clock_.monoNow();
      if (left <= Duration::zero()) {
        return makeError(ErrorCode::kDeadlineExceeded, what + ": timed out before it was sent");
      }
      limit = std::min(limit, left);
    }
    if (config_.before_send) C4_RETURN_IF_ERROR(config_.before_send(request.method, request.path));
    ConnectionPtr connection = acquireConnection();
    if (!connection) return makeError(ErrorCode::kInternal, "curl_easy_init failed");
    CURL* curl = connection->easy.get();
    SlistPtr headers =
        prepare(curl, request.method, request.path, request.body, request.content_type);
    HttpResponse response;
    ResponseHeaders response_headers;
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeoutMillis(limit));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     timeoutMillis(std::min<Duration>(config_.connect_timeout, limit)));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &appendToString);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &onHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response_headers);
    MonoTime start = clock_.monoNow();
    CURLcode rc = performCancellable(connection->multi.get(), curl, request.cancel);
    double seconds = std::chrono::duration<double>(clock_.monoNow() - start).count();
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
    if (latency_ != nullptr) {
      latency_->labels({request.method}).observe(seconds);
      requests_
          ->labels({request.method, rc == CURLE_OK ? std::to_string(response.status) : "error"})
          .inc();
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      return makeError(ErrorCode::kCancelled, what + ": cancelled");
    }
    if (rc != CURLE_OK) return std::unexpected(transportError(rc, errbuf, what));
    countProtocol(curl);
    response.retry_after_seconds = response_headers.retry_after_seconds;
    releaseConnection(std::move(connection));
    return response;
  }

  // Sends `request`; on 429 and 5xx answers that carry Retry-After (seconds), waits that long on
  // the clock and sends it again, up to kMaxRetries times (client-go), then returns the answer.
  Result<HttpResponse> perform(const Request& request) {
    std::optional<MonoTime> deadline;
    if (request.timeout > Duration::zero()) deadline = clock_.monoNow() + request.timeout;
    for (int retries = 0;; ++retries) {
      bucket_.wait(request.priority);
      C4_ASSIGN_OR_RETURN(HttpResponse response, send(request, deadline));
      bool retryable_status =
          response.status == 429 || (response.status >= 500 && response.status <= 599);
      if (!retryable_status || !response.retry_after_seconds || retries >= kMaxRetries) {
        return response;
      }
      MonoTime resume = clock_.monoNow() + std::chrono::seconds{*response.retry_after_seconds};
      if (deadline && resume >= *deadline) return response;  // the answer is final in time
      if (retries_ != nullptr) {
        retries_->labels({request.method, std::to_string(response.status)}).inc();
      }
      log_.debug("Retrying after the server asked to",
                 {{"verb", request.method},
                  {"path", request.path},
                  {"code", response.status},
                  {"retryAfterSeconds", *response.retry_after_seconds},
                  {"retry", retries + 1}});
      C4_RETURN_IF_ERROR(
          waitCancellable(resume, request.cancel, request.method + " " + request.path));
    }
  }

  Result<Json> jsonCall(const Request& request) {
    C4_ASSIGN_OR_RETURN(HttpResponse response, perform(request));
    if (response.status < 200 || response.status >= 300) {
      return std::unexpected(mapApiError(response.status, request.method, response.body));
    }
    if (response.body.empty()) return Json::object();
    Json parsed = Json::parse(response.body, nullptr, false);
    if (parsed.is_discarded()) {
      return makeError(ErrorCode::kUnavailable,
                       request.method + " " + request.path + ": response is not JSON");
    }
    return parsed;
  }

  KubeConfig config_;
  Endpoint endpoint_;
  Clock& clock_;
  Logger log_{"kube-client"};
  PriorityTokenBucket bucket_;
  bool http2_;
  SlistPtr connect_to_;
  std::mutex token_mu_;
  std::string token_;
  MonoTime token_read_;
  std::mutex pool_mu_;
  std::vector<ConnectionPtr> pool_;
  metrics::Family<metrics::Histogram>* latency_ = nullptr;
  metrics::Family<metrics::Counter>* requests_ = nullptr;
  metrics::Family<metrics::Counter>* retries_ = nullptr;
  metrics::Family<metrics::Counter>* protocols_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<KubeClient>> createCurlKubeClient(KubeConfig config, Clock& clock,
                                                         metrics::Registry* registry) {
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "API server URL must start with https:// or http://: '" + config.server + "'");
  }
  globalInit();
  C4_ASSIGN_OR_RETURN(Endpoint endpoint, endpointFor(config));
  return std::unique_ptr<KubeClient>(
      new CurlKubeClient(std::move(config), std::move(endpoint), clock, registry));
}

}  // namespace c4::kube
