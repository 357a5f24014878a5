// The report endpoint against the REAL API server of the test cluster: the whole c4-operator
// manager (report endpoint over TLS, TokenReview, informers, TrainingJob controller) runs in
// this process; the tokens are real ServiceAccount tokens from TokenRequest, reviewed by the
// real kube-apiserver. Covers the authentication/authorisation matrix of the wire contract (a
// refusal leaves the store and the replay state unchanged) and the checkpoint path from
// checkpoint notices to TrainingJob status.lastCheckpoint.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "c4/common/report.h"
#include "harness.h"
#include "operator/manager/manager.h"

namespace c4::op::it {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPluginSa = "c4-node-plugin";

class IngestIntegrationTest : public NamespacedTest {
 protected:
  IngestIntegrationTest() : NamespacedTest("c4-ingest") {}

  void SetUp() override {
    NamespacedTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    dir_ = fs::temp_directory_path() / uniqueName("c4-ingest-it");
    fs::create_directories(dir_);
    ASSERT_TRUE(makeServingCertificate(dir_.string())) << "openssl CLI needed";
    for (const char* sa : {kPluginSa, "other-sa"}) {
      Json object = {{"apiVersion", "v1"},
                     {"kind", "ServiceAccount"},
                     {"metadata", {{"name", sa}, {"namespace", ns_}}}};
      auto created = client_->create(serviceAccounts(), ns_, object);
      ASSERT_TRUE(created) << created.error().toString();
    }
    std::vector<std::string> args = {"--kubeconfig=" + testenvDir() + "/kubeconfig",
                                     "--namespace=" + ns_,
                                     "--leader-elect=false",
                                     "--metrics-address=127.0.0.1",
                                     "--metrics-port=0",
                                     "--report-bind-address=127.0.0.1:0",
                                     "--tls-cert-file=" + (dir_ / "tls.crt").string(),
                                     "--tls-key-file=" + (dir_ / "tls.key").string(),
                                     "--report-serviceaccount=" + ns_ + "/" + kPluginSa,
                                     "--status-batch-period=0",
                                     "--log-level=warn"};
    if (debug_reports_) args.emplace_back("--debug-reports");
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    auto options = parseOperatorOptions(args);
    ASSERT_TRUE(options) << options.error().toString();
    auto manager = Manager::create(*options, realClock(), ManagerHooks{});
    ASSERT_TRUE(manager) << manager.error().toString();
    manager_ = std::move(*manager);
    runner_ = std::thread([this] { manager_->run(); });
    ASSERT_TRUE(waitFor([&] { return manager_->reportPort() > 0; }));
    // Serving once the caches synced: a request without a token is then 401, not 503.
    ASSERT_TRUE(waitFor([&] {
      auto r = post("", report::NodeReport{});
      return r.status == 401;
    })) << "the report endpoint never left standby";
  }

  void TearDown() override {
    if (manager_) manager_->stop();
    if (runner_.joinable()) runner_.join();
    manager_.reset();
    for (const auto& node : nodes_) {
      (void)client_->remove(resources::nodes(), "", node, DeleteOptions{});
    }
    if (!dir_.empty()) fs::remove_all(dir_);
    NamespacedTest::TearDown();
  }

  struct Answer {
    int status = 0;
    std::string reason;
    std::string last_seq;
  };

  Answer postBody(const std::string& token, const std::string& body) {
    httplib::SSLClient cli("127.0.0.1", manager_->reportPort());
    cli.set_ca_cert_path((dir_ / "ca.crt").string().c_str());
    cli.enable_server_certificate_verification(true);
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(10, 0);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto res = cli.Post("/v1/reports", headers, body, "application/cbor");
    if (!res) {
      ADD_FAILURE() << "POST failed: " << httplib::to_string(res.error());
      return {};
    }
    Answer a;
    a.status = res->status;
    Json j = Json::parse(res->body, nullptr, false);
    if (j.is_object() && j.contains("reason")) a.reason = j["reason"].get<std::string>();
    a.last_seq = res->get_header_value("C4-Last-Seq");
    return a;
  }

  Answer post(const std::string& token, const report::NodeReport& batch) {
    if (batch.node.empty()) return postBody(token, "x");  // a probe: refused before decoding
    auto bytes = report::encodeCbor(batch);
    EXPECT_TRUE(bytes) << bytes.error().toString();
    return postBody(token, std::string(bytes->begin(), bytes->end()));
  }

  report::NodeReport batch(const std::string& node) {
    report::NodeReport b;
    b.node = node;
    b.seq = ++seq_;
    b.time_unix_ns = toUnixNanos(realClock().wallNow());
    report::NicHealth nic;
    nic.name = "eth0";
    nic.up = true;
    nic.carrier = true;
    nic.operstate = "up";
    nic.speed_mbps = 100000;
    b.health.nics.push_back(nic);
    return b;
  }

  std::string makeNode(const std::string& prefix) {
    std::string name = uniqueName(prefix);
    Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
    auto created = client_->create(resources::nodes(), "", node);
    EXPECT_TRUE(created) << created.error().toString();
    nodes_.push_back(name);
    return name;
  }

  // A pod of `sa` on `node` (the node plugin's DaemonSet pod, as far as the API is concerned).
  void makePod(const std::string& name, const std::string& node, const std::string& sa) {
    Json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", ns_}}},
        {"spec",
         {{"nodeName", node},
          {"serviceAccountName", sa},
          {"automountServiceAccountToken", false},
          {"tolerations", Json::array({{{"operator", "Exists"}}})},
          {"containers", Json::array({{{"name", "agent"}, {"image", "c4-node-plugin:it"}}})}}}};
    auto created = client_->create(resources::pods(), ns_, pod);
    ASSERT_TRUE(created) << created.error().toString();
  }

  ingest::ReportStore& store() { return manager_->reportIngest()->store(); }
  std::string state() { return store().summary("", "").dump(); }

  bool debug_reports_ = false;           // set before SetUp: --debug-reports
  std::vector<std::string> extra_args_;  // set before SetUp: more flags
  fs::path dir_;
  std::unique_ptr<Manager> manager_;
  std::thread runner_;
  std::vector<std::string> nodes_;
  std::uint64_t seq_ = static_cast<std::uint64_t>(toUnixNanos(realClock().wallNow()) / 1000);
};

TEST_F(IngestIntegrationTest, OnlyTheNodePluginOfTheBatchesNodeMayReport) {
  const std::string node_a = makeNode("ingest-a");
  const std::string node_b = makeNode("ingest-b");
  makePod("plugin-a", node_a, kPluginSa);
  makePod("plugin-gone", node_a, kPluginSa);
  makePod("other-a", node_a, "other-sa");
  const std::vector<std::string> ours = {"c4-operator"};
  std::string token_a = requestToken(*client_, ns_, kPluginSa, "plugin-a", ours);
  std::string wrong_audience = requestToken(*client_, ns_, kPluginSa, "plugin-a", {"not-c4"});
  std::string other_sa = requestToken(*client_, ns_, "other-sa", "other-a", ours);
  std::string unbound = requestToken(*client_, ns_, kPluginSa, "", ours);
  std::string gone = requestToken(*client_, ns_, kPluginSa, "plugin-gone", ours);
  ASSERT_FALSE(token_a.empty() || wrong_audience.empty() || other_sa.empty() || unbound.empty() ||
               gone.empty());

  // Does this API server name the node of a pod-bound token (ServiceAccountTokenPodNodeInfo)?
  Json review = {{"apiVersion", "authentication.k8s.io/v1"},
                 {"kind", "TokenReview"},
                 {"spec", {{"token", token_a}, {"audiences", ours}}}};
  auto reviewed = client_->create(ingest::tokenReviews(), "", review);
  ASSERT_TRUE(reviewed) << reviewed.error().toString();
  const Json& extra = (*reviewed)["status"]["user"]["extra"];
  ASSERT_TRUE(extra.contains(ingest::kNodeNameExtra))
      << "the API server does not put " << ingest::kNodeNameExtra
      << " into the TokenReview's user.extra: " << (*reviewed)["status"].dump();
  EXPECT_EQ(extra[ingest::kNodeNameExtra], Json::array({node_a}));

  // The token bound to a deleted pod: TokenReview rejects it (the stand-in for an expired one).
  DeleteOptions force;
  force.grace_period_seconds = 0;
  ASSERT_TRUE(client_->remove(resources::pods(), ns_, "plugin-gone", force));
  ASSERT_TRUE(waitFor([&] { return !client_->get(resources::pods(), ns_, "plugin-gone"); }));

  // Node A's plugin reports about node A: accepted.
  auto accepted = post(token_a, batch(node_a));
  ASSERT_EQ(accepted.status, 200) << accepted.reason;
  ASSERT_TRUE(store().node(node_a));
  const std::uint64_t last = seq_;
  const std::string before = state();
  ASSERT_EQ(manager_->reportIngest()->handler().lastSeq(node_a), last);

  struct Case {
    const char* what;
    std::string token;
    std::string node;
    int status;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"node A's token, node B's batch", token_a, node_b, 403, "node_mismatch"},
      {"no token", "", node_a, 401, "no_token"},
      {"garbage token", "garbage.garbage.garbage", node_a, 401, "invalid_token"},
      {"wrong audience", wrong_audience, node_a, 401, "invalid_token"},
      {"token of a deleted pod", gone, node_a, 401, "invalid_token"},
      {"another ServiceAccount", other_sa, node_a, 403, "wrong_serviceaccount"},
      {"not pod-bound", unbound, node_a, 403, "no_node_binding"},
  };
  for (const auto& c : cases) {
    auto a = post(c.token, batch(c.node));
    EXPECT_EQ(a.status, c.status) << c.what;
    EXPECT_EQ(a.reason, c.reason) << c.what;
    EXPECT_EQ(state(), before) << c.what << ": the store changed";
    EXPECT_EQ(manager_->reportIngest()->handler().lastSeq(node_a), last) << c.what;
    EXPECT_FALSE(manager_->reportIngest()->handler().lastSeq(node_b)) << c.what;
    EXPECT_FALSE(store().node(node_b)) << c.what;
  }

  // A replay of the accepted seq: 409 with the last seq.
  auto again = batch(node_a);
  again.seq = last;
  auto replay = post(token_a, again);
  EXPECT_EQ(replay.status, 409);
  EXPECT_EQ(replay.reason, "replay");
  EXPECT_EQ(replay.last_seq, std::to_string(last));
  EXPECT_EQ(state(), before);
}

// The store says which jobs run where: without --debug-reports the unauthenticated metrics port
// does not serve it (and says how to turn it on).
TEST_F(IngestIntegrationTest, TheReportStoreIsNotServedUnlessAskedFor) {
  httplib::Client metrics("127.0.0.1", manager_->metricsPort());
  auto debug = metrics.Get(("/debug/reports?namespace=" + ns_).c_str());
  ASSERT_TRUE(debug);
  EXPECT_EQ(debug->status, 404);
  EXPECT_NE(debug->body.find("--debug-reports"), std::string::npos) << debug->body;
  auto health = metrics.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

class IngestDebugIntegrationTest : public IngestIntegrationTest {
 protected:
  IngestDebugIntegrationTest() { debug_reports_ = true; }
};

TEST_F(IngestDebugIntegrationTest, CheckpointsOfEveryRankLandInLastCheckpoint) {
  const std::string job = "ckpt";
  auto created = client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, job, 2));
  ASSERT_TRUE(created) << created.error().toString();
  // The operator creates the pods, the scheduler places them on the test cluster's nodes.
  std::map<int, std::string> node_of;
  ASSERT_TRUE(waitFor(
      [&] {
        node_of.clear();
        for (const auto& pod : listPods(*client_, ns_, job)) {
          std::string node = pod["spec"].value("nodeName", std::string{});
          auto index = intLabelOf(pod, labels::kReplicaIndex);
          if (!node.empty() && index) node_of[static_cast<int>(*index)] = node;
        }
        return node_of.size() == 2;
      },
      std::chrono::seconds{60}))
      << "the job's pods were not scheduled";

  // One node plugin (pod + token) per node that runs a rank.
  std::map<std::string, std::string> token_of;
  for (const auto& [rank, node] : node_of) {
    if (token_of.contains(node)) continue;
    std::string pod = "plugin-" + std::to_string(token_of.size());
    makePod(pod, node, kPluginSa);
    token_of[node] = requestToken(*client_, ns_, kPluginSa, pod, {"c4-operator"});
    ASSERT_FALSE(token_of[node].empty());
  }
  auto send = [&](std::int64_t step, const std::vector<int>& ranks) {
    std::map<std::string, report::NodeReport> batches;
    for (int rank : ranks) {
      const std::string& node = node_of[rank];
      if (!batches.contains(node)) batches.emplace(node, batch(node));
      report::RankIdentity id;
      id.ns = ns_;
      id.job = job;
      id.pod = job + "-" + std::to_string(rank);
      id.node = node;
      id.rank = rank;
      id.restart_attempt = 0;
      id.pid = 10;
      report::CheckpointNotice n;
      n.id = id;
      n.step = step;
      n.time_unix_ns = toUnixNanos(realClock().wallNow());
      n.path = "/ckpt/step-" + std::to_string(step) + (rank == 0 ? "" : "-r1");
      batches[node].notices.push_back(n);
      report::RankReport r;
      r.id = id;
      r.seq = static_cast<std::uint64_t>(step);
      r.time_unix_ns = n.time_unix_ns;
      batches[node].reports.push_back(r);
    }
    for (auto& [node, b] : batches) {
      auto a = post(token_of[node], b);
      ASSERT_EQ(a.status, 200) << a.reason;
    }
  };

  // Rank 0 only: no checkpoint yet.
  send(100, {0});
  std::this_thread::sleep_for(std::chrono::seconds{1});
  EXPECT_FALSE(getJob(*client_, ns_, job)["status"].contains("lastCheckpoint"));
  // Rank 1 too: step 100 is the job's checkpoint, with rank 0's path.
  send(100, {1});
  ASSERT_TRUE(waitFor([&] {
    Json status = getJob(*client_, ns_, job)["status"];
    return status.contains("lastCheckpoint") && status["lastCheckpoint"]["step"] == 100;
  })) << getJob(*client_, ns_, job)["status"].dump();
  Json cp = getJob(*client_, ns_, job)["status"]["lastCheckpoint"];
  EXPECT_EQ(cp["path"], "/ckpt/step-100");
  EXPECT_TRUE(cp.contains("time"));

  // A newer step from both ranks moves it forward.
  send(200, {0, 1});
  ASSERT_TRUE(waitFor(
      [&] { return getJob(*client_, ns_, job)["status"]["lastCheckpoint"]["step"] == 200; }));

  // The debug endpoint on the metrics server shows both ranks reporting.
  httplib::Client metrics("127.0.0.1", manager_->metricsPort());
  auto debug = metrics.Get(("/debug/reports?namespace=" + ns_ + "&job=" + job).c_str());
  ASSERT_TRUE(debug);
  ASSERT_EQ(debug->status, 200);
  Json summary = Json::parse(debug->body);
  ASSERT_EQ(summary["jobs"].size(), 1u) << debug->body;
  EXPECT_EQ(summary["jobs"][0]["ranksReporting"], 2);
  EXPECT_EQ(summary["jobs"][0]["checkpoint"]["step"], 200);

  // Deleting the TrainingJob drops its data from the store.
  ASSERT_TRUE(client_->remove(resources::trainingJobs(), ns_, job, DeleteOptions{}));
  EXPECT_TRUE(waitFor([&] { return !store().checkpoint(ns_, job); }));
}

}  // namespace
}  // namespace c4::op::it

namespace c4::op::it {
namespace {

// A TLS connection to the report endpoint that sends the start of a request line and then
// nothing: it holds a report worker until the read deadline.
class StalledReportClient {
 public:
  explicit StalledReportClient(int port) : ctx_(SSL_CTX_new(TLS_client_method())) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    constexpr std::string_view kStart = "POST /v1/reports HTTP/1.1\r\nHost: x\r\n";
    stalled_ =
        SSL_connect(ssl_) == 1 && SSL_write(ssl_, kStart.data(), static_cast<int>(kStart.size())) ==
                                      static_cast<int>(kStart.size());
  }
  ~StalledReportClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  StalledReportClient(const StalledReportClient&) = delete;
  StalledReportClient& operator=(const StalledReportClient&) = delete;
  [[nodiscard]] bool stalled() const { return stalled_; }

 private:
  SSL_CTX* ctx_;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool stalled_ = false;
};

class IngestStarvationIntegrationTest : public IngestIntegrationTest {
 protected:
  IngestStarvationIntegrationTest() {
    extra_args_ = {"--report-threads=2", "--report-read-timeout=60"};
  }
};

// The health server is never starved by report workers (issue #27): with every report worker
// held by a slow client (and further report connections queued behind them), /healthz and
// /readyz still answer at once: they are served by the metrics server's own pool. The manager
// runs whole, as in production.
TEST_F(IngestStarvationIntegrationTest, HealthAnswersWhileEveryReportWorkerIsHeld) {
  const int report_port = manager_->reportPort();
  StalledReportClient first(report_port);
  StalledReportClient second(report_port);
  ASSERT_TRUE(first.stalled() && second.stalled());
  // The report server is saturated: a third request gets no answer.
  httplib::SSLClient report("127.0.0.1", report_port);
  report.enable_server_certificate_verification(false);
  report.set_connection_timeout(2, 0);
  report.set_read_timeout(2, 0);
  report.set_write_timeout(2, 0);
  EXPECT_FALSE(report.Post("/v1/reports", "x", "application/cbor"))
      << "a report worker was free: the test holds nothing";
  httplib::Client health("127.0.0.1", manager_->metricsPort());
  health.set_connection_timeout(2, 0);
  health.set_read_timeout(2, 0);
  for (const char* path : {"/healthz", "/readyz"}) {
    auto started = std::chrono::steady_clock::now();
    auto res = health.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds{1}) << path;
  }
}

// A plain TCP connection to the report endpoint that sends nothing: accepted, it waits in the
// report server's queue for a worker.
class IdleConnection {
 public:
  explicit IdleConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~IdleConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  IdleConnection(const IdleConnection&) = delete;
  IdleConnection& operator=(const IdleConnection&) = delete;
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

int openFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

class IngestQueueBoundIntegrationTest : public IngestIntegrationTest {
 protected:
  IngestQueueBoundIntegrationTest() {
    extra_args_ = {"--report-threads=2", "--report-read-timeout=60",
                   "--report-max-queued-connections=" + std::to_string(kQueued)};
  }
  static constexpr int kQueued = 4;
};

// The accept queue is bounded (issue #27): with every report worker held, connections queue for
// a worker only up to --report-max-queued-connections; each one beyond is closed at once and
// counted, so a flood of connections cannot exhaust the operator's file descriptors. The queued
// ones stay open and the health server still answers. Before, every accepted connection queued,
// holding a descriptor until a worker came free (here: never, within the test).
TEST_F(IngestQueueBoundIntegrationTest, ConnectionsBeyondTheQueueBoundAreClosedAtOnce) {
  const int report_port = manager_->reportPort();
  StalledReportClient first(report_port);
  StalledReportClient second(report_port);
  ASSERT_TRUE(first.stalled() && second.stalled());
  const int fds_before = openFds();
  std::vector<std::unique_ptr<IdleConnection>> queued;
  for (int i = 0; i < kQueued; ++i) {
    queued.push_back(std::make_unique<IdleConnection>(report_port));
    ASSERT_TRUE(queued.back()->connected());
  }
  constexpr int kExtra = 40;
  std::vector<std::unique_ptr<IdleConnection>> extra;
  auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kExtra; ++i) {
    extra.push_back(std::make_unique<IdleConnection>(report_port));
    ASSERT_TRUE(extra.back()->connected());
  }
  int closed = 0;
  const auto deadline = started + std::chrono::seconds{2};
  for (const auto& c : extra) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    closed += c->closedWithin(std::max(left, std::chrono::milliseconds{0})) ? 1 : 0;
  }
  EXPECT_EQ(closed, kExtra) << "connections beyond the queue bound were kept";
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds{3});
  for (const auto& c : queued) {
    EXPECT_FALSE(c->closedWithin(std::chrono::milliseconds{100})) << "a queued connection closed";
  }
  // This process holds the operator and the clients: what the operator holds beyond the
  // clients' own descriptors is the queue (and no more; a little slack for the API client's
  // connections). Without the bound it held one per connection, 44.
  const int client_fds = kQueued + kExtra;
  EXPECT_LE(openFds() - fds_before - client_fds, kQueued + 6)
      << "the operator holds a descriptor per waiting connection";
  httplib::Client health("127.0.0.1", manager_->metricsPort());
  health.set_connection_timeout(2, 0);
  health.set_read_timeout(2, 0);
  auto res = health.Get("/healthz");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  auto metrics = health.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_NE(metrics->body.find("c4_ingest_connections_rejected_total " + std::to_string(kExtra)),
            std::string::npos)
      << metrics->body;
}

}  // namespace
}  // namespace c4::op::it
