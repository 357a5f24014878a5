// ReportServer over real TLS on loopback: the handler's answers and headers reach the client,
// the library's own refusals are counted, unknown paths are 404, bad certificate files are
// start-up errors, and a rotated certificate is served to new connections.
#include "operator/ingest/report_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ingest_testing.h"

namespace c4::op::ingest {
namespace {

namespace fs = std::filesystem;

class AllowNodeA final : public TokenAuthenticator {
 public:
  Result<TokenUser> authenticate(std::string_view token) override {
    if (token != "good") return makeError(ErrorCode::kUnauthenticated, "bad token");
    TokenUser u;
    u.username = "system:serviceaccount:c4-system:c4-node-plugin";
    u.extra[kNodeNameExtra] = {"node-a"};
    return u;
  }
};

// A self-signed certificate for 127.0.0.1 (its own CA) made with the openssl CLI.
bool makeCert(const fs::path& dir, const std::string& name) {
  std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-days 1 -subj /CN=" +
      name + " -addext subjectAltName=IP:127.0.0.1 -keyout " + (dir / (name + ".key")).string() +
      " -out " + (dir / (name + ".crt")).string() + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A TLS client that writes exactly what it is told, when it is told (a raw socket under OpenSSL):
// the slow and lying clients the server must survive.
class RawTlsClient {
 public:
  RawTlsClient() : ctx_(SSL_CTX_new(TLS_client_method())) {}
  ~RawTlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  RawTlsClient(const RawTlsClient&) = delete;
  RawTlsClient& operator=(const RawTlsClient&) = delete;

  // Connects and completes the handshake.
  bool connect(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return false;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    return SSL_connect(ssl_) == 1;
  }
  bool send(const std::string& bytes) {
    return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) ==
           static_cast<int>(bytes.size());
  }
  // What arrives until the server closes the connection or `timeout` passes without a byte.
  std::string readUntilClosed(std::chrono::milliseconds timeout, bool* closed = nullptr) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string out;
    char buf[4096];
    for (;;) {
      int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) {
        out.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      int err = SSL_get_error(ssl_, n);
      bool timed_out = err == SSL_ERROR_WANT_READ ||
                       (err == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK));
      if (closed != nullptr) *closed = !timed_out;
      return out;
    }
  }

 private:
  SSL_CTX* ctx_;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
};

class ReportServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("c4-report-server-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ASSERT_TRUE(makeCert(dir_, "one")) << "openssl CLI needed";
    ASSERT_TRUE(makeCert(dir_, "two"));
    fs::copy_file(dir_ / "one.crt", dir_ / "tls.crt", fs::copy_options::overwrite_existing);
    fs::copy_file(dir_ / "one.key", dir_ / "tls.key", fs::copy_options::overwrite_existing);
    makeHandler(4096);
  }
  void makeHandler(std::size_t max_body_bytes) {
    ClusterView view;
    view.serving = [] { return true; };
    ReportHandlerConfig config;
    config.max_body_bytes = max_body_bytes;
    handler_ = std::make_unique<ReportHandler>(config, clock_, auth_, store_, view, &registry_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  ReportServerConfig serverConfig() const {
    ReportServerConfig c;
    c.address = "127.0.0.1";
    c.port = 0;
    c.cert_file = (dir_ / "tls.crt").string();
    c.key_file = (dir_ / "tls.key").string();
    c.threads = threads_;
    c.max_queued_connections = max_queued_;
    return c;
  }
  int start() {
    auto server = ReportServer::create(serverConfig(), *handler_, clock_, &registry_);
    EXPECT_TRUE(server) << server.error().toString();
    if (!server) return -1;
    server_ = std::move(*server);
    auto port = server_->start();
    EXPECT_TRUE(port) << port.error().toString();
    return port ? *port : -1;
  }
  std::unique_ptr<httplib::SSLClient> client(int port, const std::string& ca) {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    c->set_ca_cert_path((dir_ / (ca + ".crt")).string().c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5, 0);
    c->set_read_timeout(5, 0);
    return c;
  }
  std::string batch(std::uint64_t seq) {
    auto b = testing::nodeReport("node-a", seq, toUnixNanos(clock_.wallNow()));
    auto bytes = report::encodeCbor(b);
    return std::string(bytes->begin(), bytes->end());
  }

  fs::path dir_;
  SimulatedClock clock_;
  metrics::Registry registry_;
  AllowNodeA auth_;
  ReportStore store_;
  std::unique_ptr<ReportHandler> handler_;
  std::unique_ptr<ReportServer> server_;
  int threads_ = 2;
  int max_queued_ = 1024;
};

// A TCP connection that sends nothing (no TLS): accepted, it waits for a worker.
class SilentConnection {
 public:
  explicit SilentConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~SilentConnection() { ::close(fd_); }
  SilentConnection(const SilentConnection&) = delete;
  SilentConnection& operator=(const SilentConnection&) = delete;
  [[nodiscard]] bool connected() const { return connected_; }
  // Whether the server ended the connection (end-of-file or reset) within `wait`.
  [[nodiscard]] bool closedWithin(std::chrono::milliseconds wait) const {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    char c = 0;
    return ::recv(fd_, &c, 1, MSG_DONTWAIT) <= 0;
  }

 private:
  int fd_;
  bool connected_ = false;
};

std::string postHead(const std::string& authorization, std::size_t content_length) {
  std::string head = "POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!authorization.empty()) head += "Authorization: " + authorization + "\r\n";
  return head +
         "Content-Type: application/cbor\r\nContent-Length: " + std::to_string(content_length) +
         "\r\n\r\n";
}

// Authentication comes before the body (issue #27): a client that declares a large body (within
// the limit) and sends only a little of it gets its 401 at once, the server reads none of the
// body, and the connection is closed. Before, the server read (and waited for) the whole body
// first, then answered.
TEST_F(ReportServerTest, AnUnauthenticatedClientIsAnsweredBeforeItsBodyIsRead) {
  makeHandler(8 << 20);
  int port = start();
  ASSERT_GT(port, 0);
  for (const std::string authorization : {"", "Bearer forged"}) {
    RawTlsClient client;
    ASSERT_TRUE(client.connect(port));
    ASSERT_TRUE(client.send(postHead(authorization, 8 << 20) + std::string(1000, 'x')));
    auto started = std::chrono::steady_clock::now();
    bool closed = false;
    std::string reply = client.readUntilClosed(std::chrono::seconds{3}, &closed);
    auto took = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(reply.rfind("HTTP/1.1 401", 0), 0u) << authorization << ": " << reply;
    EXPECT_NE(reply.find(authorization.empty() ? "no_token" : "invalid_token"), std::string::npos);
    EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
    EXPECT_TRUE(closed) << "the server kept the connection open";
    EXPECT_LT(took, std::chrono::seconds{2});
  }
  std::string metrics = registry_.expose();
  EXPECT_NE(metrics.find("c4_ingest_request_bytes_total 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("c4_ingest_requests_total{code=\"401\",reason=\"no_token\"} 1"),
            std::string::npos);
  // A client that sent its whole (small) body gets its 401 too, not a reset connection.
  auto c = client(port, "one");
  auto refused =
      c->Post("/v1/reports", {{"Authorization", "Bearer forged"}}, batch(1), "application/cbor");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 401);
  // And an admitted request still has its body read.
  auto ok =
      c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// Per-connection read deadline (issue #27): a client that trickles its headers, or its body,
// byte by byte (each read well within cpp-httplib's per-read timeout) is cut off once
// read_timeout has passed since its handshake, and the worker it held serves the next client.
// Before, such a client held its worker for as long as it kept trickling.
TEST_F(ReportServerTest, ATricklingClientIsCutOffAtTheReadTimeout) {
  threads_ = 1;  // the slow client holds the only worker
  int port = start();
  ASSERT_GT(port, 0);
  const std::string headers_then_body = postHead("Bearer good", 200);
  for (bool in_body : {false, true}) {
    RawTlsClient slow;
    ASSERT_TRUE(slow.connect(port));  // the handshake armed the deadline
    std::string prefix = in_body ? headers_then_body : "POST /v1/reports HTTP/1.1\r\n";
    ASSERT_TRUE(slow.send(prefix));
    std::atomic<bool> stop{false};
    std::atomic<bool> cut{false};
    std::thread trickle([&] {
      // One byte every 50 ms (a header line or body bytes), for up to 10 s of real time.
      for (int i = 0; i < 200 && !stop; ++i) {
        if (!slow.send(in_body ? "x" : (i % 2 == 0 ? "X" : "\r\n"))) {
          cut = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds{300});  // the worker reads the trickle
    clock_.advance(std::chrono::seconds{11});                     // past read_timeout (10 s)
    // The next client is served by the freed worker.
    auto c = client(port, "one");
    c->set_read_timeout(3, 0);
    auto next = c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(in_body ? 2 : 1),
                        "application/cbor");
    stop = true;
    trickle.join();
    ASSERT_TRUE(next) << (in_body ? "body" : "headers") << ": " << httplib::to_string(next.error());
    EXPECT_EQ(next->status, 200) << next->body;
    bool closed = false;
    slow.readUntilClosed(std::chrono::seconds{2}, &closed);
    EXPECT_TRUE(closed || cut) << "the slow client is still connected";
  }
  EXPECT_EQ(server_->connectionsTimedOut(), 2);
  std::string metrics = registry_.expose();
  EXPECT_NE(metrics.find("c4_ingest_connections_timed_out_total 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("c4_ingest_requests_total{code=\"400\",reason=\"incomplete_body\"} 1"),
            std::string::npos)
      << metrics;
}

// The accept queue is bounded (issue #27): with the only worker held and max_queued_connections
// waiting for it, each further connection is closed at once and counted, while the queued one
// stays; once the worker is free the server serves again. Before, every connection queued.
TEST_F(ReportServerTest, ConnectionsBeyondTheQueueBoundAreClosedAtOnceAndCounted) {
  threads_ = 1;
  max_queued_ = 1;
  int port = start();
  ASSERT_GT(port, 0);
  RawTlsClient holder;  // the handshake took the worker; the request never ends
  ASSERT_TRUE(holder.connect(port));
  ASSERT_TRUE(holder.send("POST /v1/reports HTTP/1.1\r\n"));
  auto queued = std::make_unique<SilentConnection>(port);
  ASSERT_TRUE(queued->connected());
  std::vector<std::unique_ptr<SilentConnection>> extra;
  for (int i = 0; i < 5; ++i) {
    extra.push_back(std::make_unique<SilentConnection>(port));
    ASSERT_TRUE(extra.back()->connected());
  }
  for (const auto& c : extra) EXPECT_TRUE(c->closedWithin(std::chrono::seconds{2}));
  EXPECT_FALSE(queued->closedWithin(std::chrono::milliseconds{100}));
  EXPECT_EQ(server_->connectionsRejected(), 5);
  EXPECT_NE(registry_.expose().find("c4_ingest_connections_rejected_total 5"), std::string::npos);
  // The holder is cut off at its deadline, the queued connection goes: the server serves again
  // (a client that comes while the queue still holds the one that went is closed, and retries).
  clock_.advance(std::chrono::seconds{11});
  bool closed = false;
  holder.readUntilClosed(std::chrono::seconds{2}, &closed);
  EXPECT_TRUE(closed);
  queued.reset();
  auto c = client(port, "one");
  auto ok =
      c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  for (int i = 0; i < 100 && !ok; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    ok = c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  }
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(ReportServerTest, AnswersOverTls) {
  int port = start();
  ASSERT_GT(port, 0);
  auto c = client(port, "one");
  auto ok =
      c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(Json::parse(ok->body)["accepted"], 0);
  EXPECT_TRUE(store_.node("node-a"));
  // The operator process that took the batch (a node plugin resends its exited ranks' last
  // words when this changes).
  EXPECT_EQ(ok->get_header_value("C4-Operator-Instance"), handler_->instance());

  auto replay =
      c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 409);
  EXPECT_EQ(replay->get_header_value("C4-Last-Seq"), "1");
  EXPECT_FALSE(replay->has_header("C4-Operator-Instance")) << "only an accepted batch names it";

  auto unauth = c->Post("/v1/reports", batch(2), "application/cbor");
  ASSERT_TRUE(unauth) << httplib::to_string(unauth.error());
  EXPECT_EQ(unauth->status, 401);
  EXPECT_EQ(Json::parse(unauth->body)["reason"], "no_token");

  auto big = c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, std::string(10000, 'x'),
                     "application/cbor");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  auto c2 = client(port, "one");
  auto missing = c2->Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  std::string metrics = registry_.expose();
  EXPECT_NE(metrics.find("c4_ingest_requests_total{code=\"413\",reason=\"too_large\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("c4_ingest_requests_total{code=\"200\",reason=\"accepted\"} 1"),
            std::string::npos);
}

TEST_F(ReportServerTest, MissingOrMismatchedCertificateFilesAreStartupErrors) {
  auto config = serverConfig();
  config.cert_file = (dir_ / "absent.crt").string();
  auto missing = ReportServer::create(config, *handler_, clock_);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("absent.crt"), std::string::npos);
  config = serverConfig();
  config.key_file = (dir_ / "two.key").string();  // not the key of tls.crt
  auto mismatched = ReportServer::create(config, *handler_, clock_);
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message.find("does not match"), std::string::npos);
  config = serverConfig();
  config.cert_file.clear();
  EXPECT_FALSE(ReportServer::create(config, *handler_, clock_));
}

TEST_F(ReportServerTest, ServesARotatedCertificateToNewConnections) {
  int port = start();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(client(port, "one")->Get("/v1/reports"));
  EXPECT_FALSE(client(port, "two")->Get("/v1/reports"));  // not trusted yet
  // Rotate (as the kubelet updates a mounted Secret: new files), then let the check period pass.
  fs::copy_file(dir_ / "two.crt", dir_ / "tls.crt.new");
  fs::copy_file(dir_ / "two.key", dir_ / "tls.key.new");
  fs::rename(dir_ / "tls.crt.new", dir_ / "tls.crt");
  fs::rename(dir_ / "tls.key.new", dir_ / "tls.key");
  clock_.advance(std::chrono::seconds{11});
  auto rotated = client(port, "two")->Get("/v1/reports");
  ASSERT_TRUE(rotated) << httplib::to_string(rotated.error());
  EXPECT_EQ(rotated->status, 404);  // no GET route
  EXPECT_FALSE(client(port, "one")->Get("/v1/reports"));
  EXPECT_EQ(server_->certificateLoads(), 2);
}

}  // namespace
}  // namespace c4::op::ingest
