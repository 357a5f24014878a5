// TokenReviewer: the cache (positive/negative TTL on simulated time, token expiry, LRU bound),
// the audience check and the error path. The API server's answers come from a scripted
// KubeClient: the thing under test is the cache and the mapping, not the API server (the
// integration test reviews real tokens).
#include "operator/ingest/token_review.h"

#include <gtest/gtest.h>

#include <deque>

#include "c4/common/metrics.h"
#include "kube/client/forwarding_kube_client.h"
#include "testing/fake_kube_client.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

// Answers tokenreviews with a function of the token; records the requests.
class ReviewApi final : public ForwardingKubeClient {
 public:
  explicit ReviewApi(KubeClient& base) : ForwardingKubeClient(base) {}
  std::function<Result<Json>(const std::string& token)> answer;
  std::vector<Json> requests;

  Result<Json> create(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    if (type.resource != "tokenreviews")
      return ForwardingKubeClient::create(type, ns, object, options);
    requests.push_back(object);
    return answer(object["spec"]["token"].get<std::string>());
  }
};

Json allowed(const std::string& user, const std::string& node,
             std::vector<std::string> audiences = {"c4-operator"}) {
  Json extra = Json::object();
  if (!node.empty()) extra[kNodeNameExtra] = Json::array({node});
  return Json{{"status",
               {{"authenticated", true},
                {"user", {{"username", user}, {"uid", "u1"}, {"groups", {"g"}}, {"extra", extra}}},
                {"audiences", audiences}}}};
}

Json denied(const std::string& why) {
  return Json{{"status", {{"authenticated", false}, {"error", why}}}};
}

// A JWT-shaped token whose payload has {"exp": exp}.
std::string jwtWithExpiry(std::int64_t exp) {
  std::string payload = "{\"exp\":" + std::to_string(exp) + "}";
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char ch : payload) {
    auto c = static_cast<unsigned char>(ch);
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kB64[(acc >> bits) & 0x3F]);
    }
  }
  if (bits > 0) out.push_back(kB64[(acc << (6 - bits)) & 0x3F]);
  return "eyJhbGciOiJSUzI1NiJ9." + out + ".c2ln";
}

class TokenReviewTest : public ::testing::Test {
 protected:
  kube::testing::FakeKubeClient base_;
  ReviewApi api_{base_};
  SimulatedClock clock_;
  metrics::Registry registry_;
};

TEST_F(TokenReviewTest, SendsTheAudienceAndMapsTheUser) {
  api_.answer = [](const std::string&) {
    return Result<Json>(allowed("system:serviceaccount:c4-system:c4-node-plugin", "node-a"));
  };
  TokenReviewer reviewer(api_, clock_, {}, &registry_);
  auto user = reviewer.authenticate("tok");
  ASSERT_TRUE(user) << user.error().toString();
  EXPECT_EQ(user->username, "system:serviceaccount:c4-system:c4-node-plugin");
  EXPECT_EQ(user->extraValue(kNodeNameExtra), "node-a");
  ASSERT_EQ(api_.requests.size(), 1u);
  EXPECT_EQ(api_.requests[0]["spec"]["audiences"], Json::array({"c4-operator"}));
  EXPECT_EQ(api_.requests[0]["kind"], "TokenReview");
}

TEST_F(TokenReviewTest, PositiveAnswersAreCachedForTheirTtl) {
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  TokenReviewConfig config;
  config.positive_ttl = std::chrono::seconds{60};
  TokenReviewer reviewer(api_, clock_, config, &registry_);
  ASSERT_TRUE(reviewer.authenticate("tok"));
  clock_.advance(std::chrono::seconds{59});
  ASSERT_TRUE(reviewer.authenticate("tok"));
  EXPECT_EQ(reviewer.reviews(), 1u);
  clock_.advance(std::chrono::seconds{1});
  ASSERT_TRUE(reviewer.authenticate("tok"));
  EXPECT_EQ(reviewer.reviews(), 2u);
  // Another token is another entry.
  ASSERT_TRUE(reviewer.authenticate("tok2"));
  EXPECT_EQ(reviewer.reviews(), 3u);
}

TEST_F(TokenReviewTest, NegativeAnswersAreCachedForTheNegativeTtl) {
  api_.answer = [](const std::string&) { return Result<Json>(denied("token expired")); };
  TokenReviewConfig config;
  config.negative_ttl = std::chrono::seconds{10};
  TokenReviewer reviewer(api_, clock_, config, &registry_);
  auto first = reviewer.authenticate("bad");
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(first.error().message.find("token expired"), std::string::npos);
  clock_.advance(std::chrono::seconds{9});
  auto cached = reviewer.authenticate("bad");
  ASSERT_FALSE(cached);
  EXPECT_EQ(cached.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(reviewer.reviews(), 1u);
  clock_.advance(std::chrono::seconds{1});
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  EXPECT_TRUE(reviewer.authenticate("bad"));  // asked again once the negative entry expired
  EXPECT_EQ(reviewer.reviews(), 2u);
}

TEST_F(TokenReviewTest, ApiErrorsAreUnavailableAndNotCached) {
  int calls = 0;
  api_.answer = [&](const std::string&) -> Result<Json> {
    ++calls;
    return makeError(ErrorCode::kUnavailable, "HTTP 503: etcd is sad");
  };
  TokenReviewer reviewer(api_, clock_, {}, &registry_);
  auto r = reviewer.authenticate("tok");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  api_.answer = [&](const std::string&) -> Result<Json> {
    ++calls;
    return makeError(ErrorCode::kPermissionDenied, "HTTP 403: cannot create tokenreviews");
  };
  auto forbidden = reviewer.authenticate("tok");
  ASSERT_FALSE(forbidden);
  EXPECT_EQ(forbidden.error().code, ErrorCode::kUnavailable);  // our problem, not the caller's
  api_.answer = [&](const std::string&) -> Result<Json> {
    ++calls;
    return allowed("u", "n");
  };
  EXPECT_TRUE(reviewer.authenticate("tok"));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(reviewer.cacheSize(), 1u);
}

TEST_F(TokenReviewTest, AnAnswerWithoutOurAudienceIsUnauthenticated) {
  api_.answer = [](const std::string&) {
    return Result<Json>(allowed("u", "n", {"https://kubernetes.default.svc"}));
  };
  TokenReviewer reviewer(api_, clock_, {}, &registry_);
  auto r = reviewer.authenticate("tok");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(r.error().message.find("audience"), std::string::npos);
}

TEST_F(TokenReviewTest, EmptyTokenIsRefusedWithoutAReview) {
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  TokenReviewer reviewer(api_, clock_, {}, &registry_);
  auto r = reviewer.authenticate("");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(reviewer.reviews(), 0u);
}

TEST_F(TokenReviewTest, PositiveEntriesNeverOutliveTheTokensExpiry) {
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  TokenReviewConfig config;
  config.positive_ttl = std::chrono::seconds{60};
  TokenReviewer reviewer(api_, clock_, config, &registry_);
  std::int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.wallNow().time_since_epoch()).count();
  std::string token = jwtWithExpiry(now_s + 5);
  ASSERT_EQ(jwtExpiry(token), now_s + 5);
  ASSERT_TRUE(reviewer.authenticate(token));
  clock_.advance(std::chrono::seconds{4});
  ASSERT_TRUE(reviewer.authenticate(token));
  EXPECT_EQ(reviewer.reviews(), 1u);
  clock_.advance(std::chrono::seconds{1});  // the token expired: ask again
  api_.answer = [](const std::string&) { return Result<Json>(denied("expired")); };
  EXPECT_FALSE(reviewer.authenticate(token));
  EXPECT_EQ(reviewer.reviews(), 2u);
}

TEST_F(TokenReviewTest, TheCacheIsBoundedAndEvictsTheLeastRecentlyUsed) {
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  TokenReviewConfig config;
  config.cache_size = 2;
  TokenReviewer reviewer(api_, clock_, config, &registry_);
  ASSERT_TRUE(reviewer.authenticate("a"));
  ASSERT_TRUE(reviewer.authenticate("b"));
  ASSERT_TRUE(reviewer.authenticate("a"));  // hit: "a" is now the most recent
  ASSERT_TRUE(reviewer.authenticate("c"));  // evicts "b"
  EXPECT_EQ(reviewer.cacheSize(), 2u);
  EXPECT_EQ(reviewer.reviews(), 3u);
  ASSERT_TRUE(reviewer.authenticate("a"));
  EXPECT_EQ(reviewer.reviews(), 3u);
  ASSERT_TRUE(reviewer.authenticate("b"));
  EXPECT_EQ(reviewer.reviews(), 4u);
}

// A flood of random bad tokens (one TokenReview each, as an attacker gets) fills the negative
// cache only: the node plugin's good token stays cached and is not reviewed again.
TEST_F(TokenReviewTest, AFloodOfBadTokensNeverEvictsAGoodOne) {
  api_.answer = [](const std::string& token) {
    return token == "good" ? Result<Json>(allowed("u", "n")) : Result<Json>(denied("bad"));
  };
  TokenReviewConfig config;
  config.cache_size = 16;
  config.negative_cache_size = 16;
  TokenReviewer reviewer(api_, clock_, config, &registry_);
  ASSERT_TRUE(reviewer.authenticate("good"));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_FALSE(reviewer.authenticate("random-" + std::to_string(i)));
  }
  EXPECT_EQ(reviewer.reviews(), 1001u);
  EXPECT_EQ(reviewer.negativeCacheSize(), 16u);  // bounded
  EXPECT_EQ(reviewer.positiveCacheSize(), 1u);
  ASSERT_TRUE(reviewer.authenticate("good"));
  EXPECT_EQ(reviewer.reviews(), 1001u);  // a cache hit: no second TokenReview
  // A token first refused, then allowed (say the pod came up), moves from one cache to the other.
  clock_.advance(config.negative_ttl);
  api_.answer = [](const std::string&) { return Result<Json>(allowed("u", "n")); };
  ASSERT_TRUE(reviewer.authenticate("random-999"));
  ASSERT_TRUE(reviewer.authenticate("random-999"));
  EXPECT_EQ(reviewer.reviews(), 1002u);
  EXPECT_EQ(reviewer.positiveCacheSize(), 2u);
  EXPECT_EQ(reviewer.negativeCacheSize(), 15u);
}

TEST(TokenReviewHelpers, Sha256AndJwtParsing) {
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(jwtExpiry("not-a-jwt"), std::nullopt);
  EXPECT_EQ(jwtExpiry("a.!!!.c"), std::nullopt);
  EXPECT_EQ(jwtExpiry("a.e30.c"), std::nullopt);  // "{}": no exp
}

// Wrong-typed fields in the API server's answer (issue #27): nothing throws; an answer whose
// `authenticated` is not a boolean authenticates nobody, user fields of another type are empty.
TEST_F(TokenReviewTest, AnAnswerWithFieldsOfAnotherTypeNeverThrows) {
  api_.answer = [](const std::string& token) {
    if (token == "a") return Result<Json>(Json{{"status", {{"authenticated", "true"}}}});
    if (token == "b")
      return Result<Json>(Json{{"status", {{"authenticated", false}, {"error", 5}}}});
    if (token == "c") return Result<Json>(Json{{"status", "x"}});
    if (token == "d") return Result<Json>(Json::array({1}));
    Json odd = allowed("u", "n");
    odd["status"]["user"]["username"] = 5;
    odd["status"]["user"]["uid"] = Json::array();
    odd["status"]["user"]["groups"] = "g";
    odd["status"]["user"]["extra"] = {{kNodeNameExtra, 7}};
    return Result<Json>(odd);
  };
  TokenReviewer reviewer(api_, clock_, {}, &registry_);
  for (const char* token : {"a", "b", "c", "d"}) {
    Result<TokenUser> user = makeError(ErrorCode::kInternal, "not run");
    ASSERT_NO_THROW(user = reviewer.authenticate(token)) << token;
    ASSERT_FALSE(user) << token;
    EXPECT_EQ(user.error().code, ErrorCode::kUnauthenticated) << token;
  }
  Result<TokenUser> user = makeError(ErrorCode::kInternal, "not run");
  ASSERT_NO_THROW(user = reviewer.authenticate("e"));
  ASSERT_TRUE(user) << user.error().toString();
  EXPECT_EQ(user->username, "");
  EXPECT_EQ(user->uid, "");
  EXPECT_TRUE(user->groups.empty());
  EXPECT_EQ(user->extraValue(kNodeNameExtra), "");
}

}  // namespace
}  // namespace c4::op::ingest
