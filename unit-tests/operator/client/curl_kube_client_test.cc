// The libcurl client's own mechanics against a loopback HTTP server: cancellation and timeouts
// of calls to a server that never answers. What the API server says is tested
// against a real one (e2e/integration/operator).
#include "operator/client/curl_kube_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "testing/loopback_http_server.h"

namespace c4::op {
namespace {

using std::chrono::milliseconds;
using testing::LoopbackHttpServer;

std::unique_ptr<KubeClient> clientFor(const std::string& url, Clock& clock) {
  KubeConfig config;
  config.server = url;
  auto client = createCurlKubeClient(config, clock, nullptr);
  EXPECT_TRUE(client) << client.error().toString();
  return client ? std::move(*client) : nullptr;
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

}  // namespace
}  // namespace c4::op
