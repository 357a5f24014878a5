// ReportTransport over libcurl: one POST per call, TLS verified against the CA file.
#include <curl/curl.h>

#include <charconv>
#include <mutex>

#include "c4/node_plugin/options.h"
#include "c4/node_plugin/shipper.h"

namespace c4::node {
namespace {

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequalsPrefix(std::string_view line, std::string_view name) {
  if (line.size() < name.size() + 1 || line[name.size()] != ':') return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char a = line[i];
    char b = name[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

std::optional<std::uint64_t> parseU64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

size_t onBody(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  const size_t len = size * n;
  if (out->size() < 4096) out->append(data, std::min(len, 4096 - out->size()));
  return len;
}

size_t onHeader(char* data, size_t size, size_t n, void* user) {
  auto* resp = static_cast<HttpResponse*>(user);
  const std::string_view line(data, size * n);
  if (iequalsPrefix(line, "retry-after")) {
    // Seconds only; an HTTP-date is ignored (the backoff delay applies).
    if (auto v = parseU64(trim(line.substr(12)))) {
      resp->retry_after = std::chrono::seconds{std::min<std::uint64_t>(*v, 3600)};
    }
  } else if (iequalsPrefix(line, "c4-last-seq")) {
    if (auto v = parseU64(trim(line.substr(12)))) resp->last_seq = *v;
  } else if (iequalsPrefix(line, "c4-operator-instance")) {
    const std::string_view id = trim(line.substr(21));
    if (!id.empty() && id.size() <= 64) resp->instance = std::string(id);
  } else if (line.starts_with("HTTP/")) {
    resp->retry_after.reset();  // a new response (after 100-continue) starts over
    resp->last_seq.reset();
    resp->instance.clear();
  }
  return size * n;
}

class CurlTransport final : public ReportTransport {
 public:
  explicit CurlTransport(CurlTransportConfig config) : config_(std::move(config)) {}

  // One easy handle for the transport's life: libcurl keeps its connection (when the operator
  // keeps it open) and its TLS session cache, so a reconnect resumes the session instead of a
  // full handshake with certificate verification. post() is called by one thread at a time.
  Result<HttpResponse> post(const std::vector<std::uint8_t>& body, const std::string& token,
                            Duration timeout) override {
    std::lock_guard lock(mu_);
    if (!curl_) curl_.reset(curl_easy_init());
    if (!curl_) return makeError(ErrorCode::kInternal, "curl_easy_init failed");
    curl_easy_reset(curl_.get());  // options of the previous request go; connection and
                                   // session caches stay
    SlistPtr headers;
    auto add = [&](const std::string& h) {
      headers.reset(curl_slist_append(headers.release(), h.c_str()));
    };
    add("Content-Type: application/cbor");
    add("Accept: application/json");
    add("Expect:");
    add("Authorization: Bearer " + token);
    HttpResponse resp;
    char errbuf[CURL_ERROR_SIZE] = {};
    CURL* c = curl_.get();
    curl_easy_setopt(c, CURLOPT_URL, config_.url.c_str());
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, config_.allow_insecure ? "https,http" : "https");
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!config_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, config_.ca_file.c_str());
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           config_.connect_timeout)
                                           .count()));
    curl_easy_setopt(
        c, CURLOPT_TIMEOUT_MS,
        static_cast<long>(std::max<std::int64_t>(
            1, std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count())));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp);
    const CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
      const ErrorCode code =
          rc == CURLE_OPERATION_TIMEDOUT ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable;
      return makeError(code, "POST " + config_.url + ": " +
                                 (errbuf[0] != '\0' ? std::string(errbuf)
                                                    : std::string(curl_easy_strerror(rc))));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);  // `headers` is freed on return
    return resp;
  }

 private:
  CurlTransportConfig config_;
  std::mutex mu_;
  CurlPtr curl_;
};

}  // namespace

Result<std::unique_ptr<ReportTransport>> createCurlTransport(CurlTransportConfig config) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  C4_RETURN_IF_ERROR(checkOperatorUrl(config.url, config.allow_insecure));
  return std::unique_ptr<ReportTransport>(new CurlTransport(std::move(config)));
}

}  // namespace c4::node
