// ReportServer over real TLS on loopback: the handler's answers and headers reach the client,
// the library's own refusals are counted, unknown paths are 404, bad certificate files are
// start-up errors, and a rotated certificate is served to new connections.
#include "operator/ingest/report_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

class ReportServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("c4-report-server-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ASSERT_TRUE(makeCert(dir_, "one")) << "openssl CLI needed";
    ASSERT_TRUE(makeCert(dir_, "two"));
    fs::copy_file(dir_ / "one.crt", dir_ / "tls.crt", fs::copy_options::overwrite_existing);
    fs::copy_file(dir_ / "one.key", dir_ / "tls.key", fs::copy_options::overwrite_existing);
    ClusterView view;
    view.serving = [] { return true; };
    ReportHandlerConfig config;
    config.max_body_bytes = 4096;
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
    c.threads = 2;
    return c;
  }
  int start() {
    auto server = ReportServer::create(serverConfig(), *handler_, clock_);
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
};

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

  auto replay =
      c->Post("/v1/reports", {{"Authorization", "Bearer good"}}, batch(1), "application/cbor");
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 409);
  EXPECT_EQ(replay->get_header_value("C4-Last-Seq"), "1");

  auto unauth = c->Post("/v1/reports", batch(2), "application/cbor");
  ASSERT_TRUE(unauth);
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
