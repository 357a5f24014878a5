// TokenReview authentication with a bounded cache (see token_review.h).
#include "operator/ingest/token_review.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>

namespace c4::op::ingest {
namespace {

// Base64url (RFC 4648 §5, padding optional) to bytes; nullopt on a bad character.
std::optional<std::string> base64UrlDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = 0;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '-' || c == '+') {
      v = 62;
    } else if (c == '_' || c == '/') {
      v = 63;
    } else if (c == '=') {
      break;
    } else {
      return std::nullopt;
    }
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::vector<std::string> stringList(const Json& value) {
  std::vector<std::string> out;
  if (!value.is_array()) return out;
  for (const auto& v : value) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

const ResourceType& tokenReviews() {
  static const ResourceType type{"authentication.k8s.io", "v1", "tokenreviews", "TokenReview",
                                 false};
  return type;
}

std::string TokenUser::extraValue(const std::string& key) const {
  auto it = extra.find(key);
  if (it == extra.end() || it->second.size() != 1) return "";
  return it->second.front();
}

std::string sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xF]);
  }
  return out;
}

std::optional<std::int64_t> jwtExpiry(std::string_view token) {
  auto first = token.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  auto second = token.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  auto payload = base64UrlDecode(token.substr(first + 1, second - first - 1));
  if (!payload) return std::nullopt;
  Json claims = Json::parse(*payload, nullptr, /*allow_exceptions=*/false);
  if (!claims.is_object()) return std::nullopt;
  auto exp = claims.find("exp");
  if (exp == claims.end() || !exp->is_number()) return std::nullopt;
  return exp->is_number_integer() ? exp->get<std::int64_t>()
                                  : static_cast<std::int64_t>(exp->get<double>());
}

TokenReviewer::TokenReviewer(KubeClient& client, Clock& clock, TokenReviewConfig config,
                             metrics::Registry* registry)
    : client_(client),
      clock_(clock),
      config_(std::move(config)),
      positive_(config_.cache_size),
      negative_(config_.negative_cache_size) {
  if (registry != nullptr) {
    lookups_ = &registry->counter("c4_ingest_token_reviews_total",
                                  "Token authentications by result (cache hits and TokenReviews).",
                                  {"result"});
    for (const char* r : {"hit_allowed", "hit_denied", "allowed", "denied", "error"}) {
      lookups_->labels({r});
    }
  }
}

std::size_t TokenReviewer::cacheSize() const {
  std::lock_guard lock(mu_);
  return positive_.size() + negative_.size();
}

std::size_t TokenReviewer::positiveCacheSize() const {
  std::lock_guard lock(mu_);
  return positive_.size();
}

std::size_t TokenReviewer::negativeCacheSize() const {
  std::lock_guard lock(mu_);
  return negative_.size();
}

std::uint64_t TokenReviewer::reviews() const {
  std::lock_guard lock(mu_);
  return reviews_;
}

Result<TokenUser> TokenReviewer::authenticate(std::string_view token) {
  if (token.empty()) return makeError(ErrorCode::kUnauthenticated, "no bearer token");
  std::string key = sha256Hex(token);
  {
    std::lock_guard lock(mu_);
    MonoTime now = clock_.monoNow();
    if (Entry* hit = positive_.get(key); hit != nullptr && now < hit->expires) {
      if (lookups_ != nullptr) lookups_->labels({"hit_allowed"}).inc();
      return hit->user;
    }
    if (Entry* hit = negative_.get(key); hit != nullptr && now < hit->expires) {
      if (lookups_ != nullptr) lookups_->labels({"hit_denied"}).inc();
      return makeError(ErrorCode::kUnauthenticated, hit->reason);
    }
  }
  return review(token, key);
}

Result<TokenUser> TokenReviewer::review(std::string_view token, const std::string& key) {
  Json body = {{"apiVersion", "authentication.k8s.io/v1"},
               {"kind", "TokenReview"},
               {"spec", {{"token", std::string(token)}, {"audiences", {config_.audience}}}}};
  WriteOptions options;
  options.timeout = config_.request_timeout;
  MonoTime started = clock_.monoNow();
  auto answer = client_.create(tokenReviews(), "", body, options);
  {
    std::lock_guard lock(mu_);
    ++reviews_;
  }
  if (!answer) {
    if (lookups_ != nullptr) lookups_->labels({"error"}).inc();
    return makeError(ErrorCode::kUnavailable, "TokenReview failed: " + answer.error().message);
  }
  const Json& status = fieldsOf(*answer, "status");
  Entry entry;
  entry.authenticated = boolAt(status, "authenticated").value_or(false);
  if (entry.authenticated) {
    const Json& user = fieldsOf(status, "user");
    entry.user.username = stringAt(user, "username").value_or("");
    entry.user.uid = stringAt(user, "uid").value_or("");
    if (user.contains("groups")) entry.user.groups = stringList(user["groups"]);
    if (user.contains("extra") && user["extra"].is_object()) {
      for (const auto& [k, v] : user["extra"].items()) entry.user.extra[k] = stringList(v);
    }
    if (status.contains("audiences")) entry.user.audiences = stringList(status["audiences"]);
    const auto& auds = entry.user.audiences;
    if (std::find(auds.begin(), auds.end(), config_.audience) == auds.end()) {
      entry.authenticated = false;
      entry.reason = "token is not valid for audience " + config_.audience;
    }
  } else {
    entry.reason = stringAt(status, "error").value_or("");
    if (entry.reason.empty()) entry.reason = "token not authenticated";
  }
  MonoTime expires = started + (entry.authenticated ? config_.positive_ttl : config_.negative_ttl);
  if (entry.authenticated) {
    if (auto exp = jwtExpiry(token)) {
      // Never trust a cached answer past the token's own expiry.
      Duration left = std::chrono::seconds{*exp} - clock_.wallNow().time_since_epoch();
      expires = std::min(expires, clock_.monoNow() + std::max(left, Duration::zero()));
    }
  }
  entry.expires = expires;
  if (lookups_ != nullptr) lookups_->labels({entry.authenticated ? "allowed" : "denied"}).inc();
  Result<TokenUser> result =
      entry.authenticated ? Result<TokenUser>(entry.user)
                          : Result<TokenUser>(makeError(ErrorCode::kUnauthenticated, entry.reason));
  std::lock_guard lock(mu_);
  if (entry.authenticated) {
    negative_.erase(key);
    positive_.put(key, std::move(entry));
  } else {
    positive_.erase(key);
    negative_.put(key, std::move(entry));
  }
  return result;
}

}  // namespace c4::op::ingest
