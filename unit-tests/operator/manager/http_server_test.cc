// The metrics/health HTTP server on a loopback port.
#include "operator/manager/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>

namespace c4::op {
namespace {

std::string httpGet(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  ::send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[1024];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

TEST(HttpServerTest, ServesHandlersAndRejectsTheRest) {
  HttpServer server;
  std::atomic<bool> ready{false};
  server.handle("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  server.handle("/readyz", [&] {
    return ready ? HttpReply{200, "text/plain", "ok\n"} : HttpReply{503, "text/plain", "no\n"};
  });
  auto port = server.start("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error().toString();
  std::string healthz = httpGet(*port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(healthz.rfind("HTTP/1.1 200 OK", 0), 0u) << healthz;
  EXPECT_NE(healthz.find("\r\n\r\nok\n"), std::string::npos);
  EXPECT_EQ(httpGet(*port, "GET /readyz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 503", 0), 0u);
  ready = true;
  EXPECT_EQ(httpGet(*port, "GET /readyz?verbose HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(httpGet(*port, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(httpGet(*port, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                .rfind("HTTP/1.1 405", 0),
            0u);
  EXPECT_EQ(httpGet(*port, "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  server.stop();
}

TEST(HttpServerTest, HandlersSeeQueryParameters) {
  HttpServer server;
  server.handle("/debug/reports", [](const HttpRequest& req) {
    return HttpReply{200, "application/json", req.param("namespace") + "|" + req.param("job")};
  });
  auto port = server.start("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error().toString();
  std::string reply =
      httpGet(*port, "GET /debug/reports?namespace=ns%2D1&job=j HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(reply.find("\r\n\r\nns-1|j"), std::string::npos) << reply;
}

TEST(HttpServerTest, OneStalledClientDoesNotBlockTheProbes) {
  HttpServer server(2);
  server.handle("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = server.start("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error().toString();
  // A client that connects and sends half a request, then nothing.
  int stalled = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(*port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(stalled, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string half = "GET /healthz HTTP/1.1\r\nHo";
  ::send(stalled, half.data(), half.size(), 0);
  std::string healthz = httpGet(*port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(healthz.rfind("HTTP/1.1 200 OK", 0), 0u) << healthz;
  ::close(stalled);
  server.stop();
}

TEST(HttpServerTest, BadAddressIsAnError) {
  HttpServer server;
  auto port = server.start("not-an-ip", 0);
  ASSERT_FALSE(port);
  EXPECT_EQ(port.error().code, ErrorCode::kInvalidArgument);
}

// No exception leaves a server thread: a handler that throws (e.g. on a malformed object it
// renders) answers 500 and the server goes on serving.
TEST(HttpServerTest, AHandlerThatThrowsAnswers500AndTheServerGoesOn) {
  HttpServer server;
  server.handle("/throws", []() -> HttpReply {
    return HttpReply{200, "text/plain", nlohmann::json{{"n", 5}}.value("n", std::string{})};
  });
  server.handle("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = server.start("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error().toString();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(httpGet(*port, "GET /throws HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 500", 0), 0u);
  }
  EXPECT_EQ(httpGet(*port, "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  server.stop();
}

}  // namespace
}  // namespace c4::op
