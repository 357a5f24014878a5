// Authentication of report senders: the bearer token is reviewed by the API server
// (TokenReview, authentication.k8s.io/v1, with the operator's audience) and the answer cached.
//
//   - Two caches keyed by the SHA-256 of the token (tokens are never kept), each bounded (LRU):
//     one of positive answers (`cache_size`), one of negative answers (`negative_cache_size`).
//     Apart, so a flood of random tokens only evicts other negative answers and never the
//     node plugins' positive ones.
//   - A positive answer is kept for `positive_ttl`, never beyond the token's own `exp` claim
//     (read from the JWT payload when it has one; the signature is the API server's business).
//   - A negative answer (not authenticated, or the audience is not ours) is kept for
//     `negative_ttl`.
//   - An API error (the API server unreachable, throttled, refusing the review) is returned as
//     kUnavailable and not cached: the caller answers 503 and the sender retries.
//
// Thread-safe. Concurrent reviews of one token may each call the API server (no coalescing).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"
#include "kube/controller/lru_cache.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// tokenreviews.authentication.k8s.io/v1 (cluster-scoped, create only).
const ResourceType& tokenReviews();

// Who a token belongs to, as the API server said.
struct TokenUser {
  std::string username;  // "system:serviceaccount:<ns>:<name>" for ServiceAccount tokens
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
  std::vector<std::string> audiences;  // status.audiences

  // The single value of extra[key]; "" when absent or not exactly one value.
  [[nodiscard]] std::string extraValue(const std::string& key) const;
};

// The extra the API server sets for pod-bound ServiceAccount tokens
// (ServiceAccountTokenPodNodeInfo): the node the bound pod runs on.
inline constexpr const char* kNodeNameExtra = "authentication.kubernetes.io/node-name";

// What the endpoint asks of an authenticator (a seam for tests of the endpoint).
class TokenAuthenticator {
 public:
  virtual ~TokenAuthenticator() = default;
  // kUnauthenticated: the token is not valid for our audience (401). kUnavailable: the answer
  // could not be obtained (503). Otherwise the user.
  virtual Result<TokenUser> authenticate(std::string_view token) = 0;
};

struct TokenReviewConfig {
  std::string audience = "c4-operator";
  Duration positive_ttl = std::chrono::seconds{60};
  Duration negative_ttl = std::chrono::seconds{10};
  std::size_t cache_size = 4096;           // positive answers
  std::size_t negative_cache_size = 4096;  // negative answers
  // Bounds one TokenReview call.
  Duration request_timeout = std::chrono::seconds{5};
};

class TokenReviewer final : public TokenAuthenticator {
 public:
  // `client` (unfenced: a review creates nothing), `clock` and `registry` (may be null) must
  // outlive this object.
  TokenReviewer(KubeClient& client, Clock& clock, TokenReviewConfig config,
                metrics::Registry* registry);

  Result<TokenUser> authenticate(std::string_view token) override;

  // Cached answers, positive and negative together.
  [[nodiscard]] std::size_t cacheSize() const;
  [[nodiscard]] std::size_t positiveCacheSize() const;
  [[nodiscard]] std::size_t negativeCacheSize() const;
  // TokenReview calls made (tests, metrics).
  [[nodiscard]] std::uint64_t reviews() const;

 private:
  struct Entry {
    bool authenticated = false;
    TokenUser user;
    std::string reason;  // why not authenticated
    MonoTime expires;
  };
  Result<TokenUser> review(std::string_view token, const std::string& key);

  KubeClient& client_;
  Clock& clock_;
  TokenReviewConfig config_;
  mutable std::mutex mu_;
  LruCache<Entry> positive_;
  LruCache<Entry> negative_;
  std::uint64_t reviews_ = 0;
  metrics::Family<metrics::Counter>* lookups_ = nullptr;
};

// Hex SHA-256 of `data`.
std::string sha256Hex(std::string_view data);
// The `exp` claim (Unix seconds) of a JWT's payload, read without verifying the signature;
// nullopt when `token` is not a JWT or has no numeric exp.
std::optional<std::int64_t> jwtExpiry(std::string_view token);

}  // namespace c4::op::ingest
