// The libcurl client's own mechanics against a scripted loopback HTTP server, on simulated time:
// Retry-After retries (bounded, counted, cancellable), the request gate after the throttle, and
// cancellation and timeouts of calls to a server that never answers. What the API server says is
// tested against a real one (e2e/integration/operator).
#include "kube/client/curl_kube_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "testing/loopback_http_server.h"

namespace c4::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::LoopbackHttpServer;

std::unique_ptr<KubeClient> clientFor(const std::string& url, Clock& clock,
                                      metrics::Registry* registry = nullptr,
                                      RequestGate gate = nullptr, double qps = 1000,
                                      int burst = 1000) {
  KubeConfig config;
  config.server = url;
  config.qps = qps;
  config.burst = burst;
  config.before_send = std::move(gate);
  auto client = createCurlKubeClient(config, clock, registry);
  EXPECT_TRUE(client) << client.error().toString();
  return client ? std::move(*client) : nullptr;
}

std::string tooManyRequests() {
  return R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"too many requests",)"
         R"("reason":"TooManyRequests","code":429})";
}

TEST(CurlKubeClientTest, RetryAfterOn429IsWaitedOnTheClockThenRetried) {
  SimulatedClock clock;
  LoopbackHttpServer server;
  server.script({429, {"Retry-After: 2"}, tooManyRequests()});
  server.script({200, {}, R"({"kind":"ConfigMap","metadata":{"name":"a"}})"});
  metrics::Registry registry;
  auto client = clientFor(server.url(), clock, &registry);
  ASSERT_TRUE(client);
  std::optional<Result<Json>> result;
  std::thread caller([&] { result = client->get(resources::configMaps(), "ns", "a"); });
  ASSERT_TRUE(clock.awaitWaiters(1)) << "the client waits on the injected clock";
  EXPECT_EQ(server.requests().size(), 1u);
  clock.advance(milliseconds{1999});
  std::this_thread::sleep_for(milliseconds{50});
  EXPECT_EQ(server.requests().size(), 1u) << "no retry before Retry-After has passed";
  clock.advance(milliseconds{1});
  caller.join();
  ASSERT_TRUE(result && *result) << (result ? result->error().toString() : "no result");
  EXPECT_EQ((**result)["metadata"]["name"], "a");
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_NE(registry.expose().find(R"(c4_operator_api_retries_total{verb="GET",code="429"} 1)"),
            std::string::npos)
      << registry.expose();
}

TEST(CurlKubeClientTest, Only429And5xxWithRetryAfterAreRetried) {
  SimulatedClock clock;
  LoopbackHttpServer server;
  auto client = clientFor(server.url(), clock);
  ASSERT_TRUE(client);
  // 503 with Retry-After: retried (Retry-After: 0 needs no time to pass).
  server.script({503, {"retry-after: 0"}, "{}"});
  server.script({200, {}, R"({"kind":"ConfigMap"})"});
  EXPECT_TRUE(client->get(resources::configMaps(), "ns", "a"));
  EXPECT_EQ(server.requests().size(), 2u);
  // 500 without Retry-After: the error at once.
  server.script({500, {}, "{}"});
  auto plain = client->get(resources::configMaps(), "ns", "a");
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(server.requests().size(), 3u);
  // 404 with Retry-After: not a status the header means anything for.
  server.script({404, {"Retry-After: 0"}, "{}"});
  EXPECT_EQ(client->get(resources::configMaps(), "ns", "a").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(server.requests().size(), 4u);
  // An HTTP-date Retry-After is not honoured (client-go reads seconds only).
  server.script({429, {"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT"}, tooManyRequests()});
  EXPECT_EQ(client->get(resources::configMaps(), "ns", "a").error().code,
            ErrorCode::kResourceExhausted);
  EXPECT_EQ(server.requests().size(), 5u);
  // Writes are retried too: a 429 means the server did not process the request.
  server.script({429, {"Retry-After: 0"}, tooManyRequests()});
  server.script({201, {}, R"({"kind":"ConfigMap"})"});
  EXPECT_TRUE(client->create(resources::configMaps(), "ns", {{"metadata", {{"name", "b"}}}}));
  EXPECT_EQ(server.requests().size(), 7u);
}

TEST(CurlKubeClientTest, GivesUpAfterTenRetriesLikeClientGo) {
  SimulatedClock clock;
  LoopbackHttpServer server;
  for (int i = 0; i < 12; ++i) server.script({429, {"Retry-After: 0"}, tooManyRequests()});
  metrics::Registry registry;
  auto client = clientFor(server.url(), clock, &registry);
  ASSERT_TRUE(client);
  auto result = client->list(resources::configMaps(), "ns");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(result.error().message.find("too many requests"), std::string::npos);
  EXPECT_EQ(server.requests().size(), 11u) << "one request and ten retries";
  EXPECT_NE(registry.expose().find(R"(c4_operator_api_retries_total{verb="GET",code="429"} 10)"),
            std::string::npos)
      << registry.expose();
}

TEST(CurlKubeClientTest, RetryWaitEndsWithTheCallsTimeoutOrItsCancelToken) {
  SimulatedClock clock;
  LoopbackHttpServer server;
  auto client = clientFor(server.url(), clock);
  ASSERT_TRUE(client);
  // A Retry-After past the call's timeout: the answer is final, no wait.
  server.script({429, {"Retry-After: 5"}, tooManyRequests()});
  GetOptions bounded;
  bounded.timeout = seconds{1};
  EXPECT_EQ(client->get(resources::configMaps(), "ns", "a", bounded).error().code,
            ErrorCode::kResourceExhausted);
  EXPECT_EQ(server.requests().size(), 1u);
  // Cancelled while waiting to retry: kCancelled at once, nothing sent again.
  server.script({429, {"Retry-After: 60"}, tooManyRequests()});
  CancelToken token;
  GetOptions cancellable;
  cancellable.cancel = &token;
  std::optional<Result<Json>> result;
  std::thread caller(
      [&] { result = client->get(resources::configMaps(), "ns", "a", cancellable); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  token.cancel();
  caller.join();
  ASSERT_TRUE(result && !*result);
  EXPECT_EQ(result->error().code, ErrorCode::kCancelled);
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(CurlKubeClientTest, TheGateRunsAfterTheThrottleAndARefusedRequestIsNeverSent) {
  SimulatedClock clock;
  LoopbackHttpServer server;
  struct GateCall {
    std::string method;
    std::string path;
    MonoTime at;
  };
  std::mutex mu;
  std::vector<GateCall> calls;
  std::atomic<bool> refuse_writes{false};
  auto gate = [&](std::string_view method, std::string_view path) -> Status {
    std::lock_guard lock(mu);
    calls.push_back({std::string(method), std::string(path), clock.monoNow()});
    if (refuse_writes && method != "GET") {
      return makeError(ErrorCode::kFailedPrecondition, "not the leader");
    }
    return okStatus();
  };
  auto gateCalls = [&] {
    std::lock_guard lock(mu);
    return calls;
  };
  // 1 qps, burst 1: the second request waits a second for its token.
  auto client = clientFor(server.url(), clock, nullptr, gate, 1.0, 1);
  ASSERT_TRUE(client);
  MonoTime start = clock.monoNow();
  ASSERT_TRUE(client->get(resources::configMaps(), "ns", "a"));
  std::optional<Result<Json>> second;
  std::thread caller([&] { second = client->get(resources::configMaps(), "ns", "b"); });
  ASSERT_TRUE(clock.awaitWaiters(1));  // throttled
  EXPECT_EQ(gateCalls().size(), 1u) << "the gate is not asked before the throttle wait";
  clock.advance(seconds{1});
  caller.join();
  ASSERT_TRUE(second && *second);
  auto seen = gateCalls();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].at, start);
  EXPECT_EQ(seen[1].at, start + seconds{1}) << "asked right before sending, after the wait";
  EXPECT_EQ(seen[1].method, "GET");
  EXPECT_EQ(seen[1].path, "/api/v1/namespaces/ns/configmaps/b");

  // A refused write returns the gate's error and never reaches the server.
  refuse_writes = true;
  std::size_t before = server.requests().size();
  std::optional<Result<Json>> created;
  std::thread writer([&] {
    created = client->create(resources::configMaps(), "ns", {{"metadata", {{"name", "c"}}}});
  });
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(seconds{1});
  writer.join();
  ASSERT_TRUE(created && !*created);
  EXPECT_EQ(created->error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(created->error().message, "not the leader");
  EXPECT_EQ(server.requests().size(), before);
  EXPECT_EQ(gateCalls().back().method, "POST");
}

TEST(CurlKubeClientTest, CancelEndsAListOrGetThatTheServerNeverAnswers) {
  LoopbackHttpServer blackhole(LoopbackHttpServer::Mode::kBlackhole);
  auto client = clientFor(blackhole.url(), realClock());
  ASSERT_TRUE(client);
  for (bool use_list : {true, false}) {
    CancelToken token;
    std::optional<ErrorCode> code;
    std::thread caller([&] {
      if (use_list) {
        ListOptions options;
        options.cancel = &token;
        code = client->list(resources::pods(), "ns", options).error().code;
      } else {
        GetOptions options;
        options.cancel = &token;
        code = client->get(resources::pods(), "ns", "p", options).error().code;
      }
    });
    std::this_thread::sleep_for(milliseconds{300});  // connected, waiting for an answer
    EXPECT_FALSE(code.has_value()) << "the request is blocked";
    auto cancelled_at = std::chrono::steady_clock::now();
    token.cancel();
    caller.join();
    auto took = std::chrono::steady_clock::now() - cancelled_at;
    EXPECT_EQ(code, ErrorCode::kCancelled);
    EXPECT_LT(took, milliseconds{500})
        << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
  }
}

TEST(CurlKubeClientTest, ACancelledTokenSendsNothing) {
  LoopbackHttpServer server;
  auto client = clientFor(server.url(), realClock());
  ASSERT_TRUE(client);
  CancelToken token;
  token.cancel();
  GetOptions get;
  get.cancel = &token;
  EXPECT_EQ(client->get(resources::configMaps(), "ns", "a", get).error().code,
            ErrorCode::kCancelled);
  ListOptions list;
  list.cancel = &token;
  EXPECT_EQ(client->list(resources::configMaps(), "ns", list).error().code, ErrorCode::kCancelled);
  EXPECT_TRUE(server.requests().empty());
  EXPECT_TRUE(client->get(resources::configMaps(), "ns", "a")) << "the client still works";
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(CurlKubeClientTest, ABoundedCallToASilentServerEndsAtItsTimeout) {
  LoopbackHttpServer blackhole(LoopbackHttpServer::Mode::kBlackhole);
  auto client = clientFor(blackhole.url(), realClock());
  ASSERT_TRUE(client);
  WriteOptions options;
  options.timeout = milliseconds{300};
  auto started = std::chrono::steady_clock::now();
  auto result =
      client->update(resources::configMaps(), "ns", {{"metadata", {{"name", "a"}}}}, options);
  auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kDeadlineExceeded) << result.error().toString();
  EXPECT_LT(took, milliseconds{2000});
}

TEST(CurlKubeClientTest, BadTlsServerNameIsRejectedAtCreation) {
  KubeConfig config;
  config.server = "https://127.0.0.1:6443";
  config.tls_server_name = "bad name/with slash";
  auto client = createCurlKubeClient(config, realClock(), nullptr);
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(client.error().message.find("tls-server-name"), std::string::npos);
  config.tls_server_name = "kubernetes.default.svc";
  EXPECT_TRUE(createCurlKubeClient(config, realClock(), nullptr));
}

}  // namespace
}  // namespace c4::kube
