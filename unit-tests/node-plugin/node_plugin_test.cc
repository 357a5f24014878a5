// The whole node plugin wired from options: a pod from the (in-memory) API, a datagram from this
// process over the real socket, a NodeReport POSTed over real HTTPS, the probes, SIGTERM's flush.
#include "c4/node_plugin/node_plugin.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "c4/common/unix_socket.h"
#include "test_util.h"
#include "testing/fake_kube_client.h"

namespace c4::node {
namespace {

using testing::identityOf;
using testing::jobPod;
using testing::rankReport;
using testing::TempDir;
using testing::writeFile;

constexpr const char* kUid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

class NodePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::makeTestCertificates(dir_.path()));
    server_ = std::make_unique<httplib::SSLServer>((dir_ / "srv.crt").c_str(),
                                                   (dir_ / "srv.key").c_str());
    server_->Post("/v1/reports", [this](const httplib::Request& req, httplib::Response& res) {
      auto nr = report::decodeNodeReportCbor(
          std::span(reinterpret_cast<const std::uint8_t*>(req.body.data()), req.body.size()));
      std::lock_guard lock(mu_);
      if (nr && req.get_header_value("Authorization") == "Bearer tok") received_.push_back(*nr);
      res.set_content("{\"accepted\":1}", "application/json");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 1000 && !server_->is_running(); ++i) ::usleep(2000);
    ASSERT_TRUE(server_->is_running());
    writeFile(dir_ / "token", "tok");
    writeFile(dir_ / "plugin/libnccl-net-c4.so", "ELF");
    writeFile(dir_ / "plugin/libnccl-profiler-c4.so", "ELF-profiler");
    writeFile(dir_ / (std::string("proc/") + std::to_string(::getpid()) + "/cgroup"),
              "0::/kubepods/pod" + std::string(kUid) + "/ctr\n");
    writeFile(dir_ / "sys/class/net/eth0/operstate", "up\n");
    writeFile(dir_ / "sys/class/net/eth0/carrier", "1\n");
    writeFile(dir_ / "sys/class/net/eth0/device/vendor", "0x15b3\n");  // a NIC, not a veth
  }
  void TearDown() override {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  NodePluginOptions options() {
    NodePluginOptions o;
    o.node_name = "node-a";
    o.socket = dir_ / "run/agent.sock";
    o.proc_root = dir_ / "proc";
    o.sysfs_root = dir_ / "sys";
    o.nvml_library = "";
    o.interval_seconds = 0.05;
    o.operator_url = "https://localhost:" + std::to_string(port_) + "/v1/reports";
    o.ca_file = dir_ / "ca.crt";
    o.token_file = dir_ / "token";
    o.plugin_source = dir_ / "plugin/libnccl-net-c4.so";
    o.profiler_plugin_source = dir_ / "plugin/libnccl-profiler-c4.so";
    o.plugin_install_dir = dir_ / "host/lib";
    o.metrics_bind_address = "127.0.0.1:0";
    return o;
  }

  std::vector<report::NodeReport> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

  TempDir dir_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<report::NodeReport> received_;
};

TEST_F(NodePluginTest, DatagramToOperator) {
  auto client = std::make_unique<kube::testing::FakeKubeClient>();
  client->put(kube::resources::pods(), jobPod("team", "job-1", kUid, "node-a", "job", 0, 0));
  auto plugin = NodePlugin::create(options(), realClock(), std::move(client));
  ASSERT_TRUE(plugin.has_value()) << plugin.error().toString();
  ASSERT_TRUE((*plugin)->start().has_value());
  EXPECT_EQ(testing::readFile(dir_ / "host/lib/libnccl-net-c4.so"), "ELF");
  EXPECT_EQ(testing::readFile(dir_ / "host/lib/libnccl-profiler-c4.so"), "ELF-profiler");

  httplib::Client http("127.0.0.1", (*plugin)->httpPort());
  std::string ready = "?";
  for (int i = 0; i < 500 && !ready.empty(); ++i) {
    ready = (*plugin)->readiness();
    if (!ready.empty()) ::usleep(10'000);
  }
  EXPECT_EQ(ready, "");
  auto r = http.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto h = http.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);

  auto sender = UnixDatagramSender::create(dir_ / "run/agent.sock");
  ASSERT_TRUE(sender.has_value());
  const auto good = rankReport(identityOf("team", "job-1", "node-a", "job", 0, 0), 42);
  auto forged = good;
  forged.id.rank = 3;
  ASSERT_EQ(sender->send(*report::encodeCbor(report::Message{forged})), SendOutcome::kSent);
  ASSERT_EQ(sender->send(*report::encodeCbor(report::Message{good})), SendOutcome::kSent);

  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    for (const auto& nr : received()) {
      for (const auto& rr : nr.reports) seen = seen || rr == good;
    }
    if (!seen) ::usleep(10'000);
  }
  ASSERT_TRUE(seen);
  for (const auto& nr : received()) {
    EXPECT_EQ(nr.node, "node-a");
    EXPECT_TRUE(nr.health.nics_available);
    EXPECT_FALSE(nr.health.gpus_available);
    for (const auto& rr : nr.reports) EXPECT_NE(rr.id.rank, 3);  // the forged one never left
  }
  // The operator's answer reaches the shipper after the server recorded the batch: poll.
  std::string metrics;
  for (int i = 0; i < 500; ++i) {
    auto m = http.Get("/metrics");
    ASSERT_TRUE(m);
    metrics = m->body;
    if (metrics.find("c4_node_plugin_batches_total{outcome=\"accepted\"}") != std::string::npos) {
      break;
    }
    ::usleep(10'000);
  }
  EXPECT_NE(metrics.find("c4_node_plugin_batches_total{outcome=\"accepted\"}"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("c4_node_plugin_messages_dropped_total{reason=\"rank_out_of_range\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("c4_node_plugin_attributions_total{path=\"cgroup\"} 1"),
            std::string::npos);

  // SIGTERM's path: what arrives before stop() is flushed.
  const auto last = rankReport(identityOf("team", "job-1", "node-a", "job", 0, 0), 43);
  ASSERT_EQ(sender->send(*report::encodeCbor(report::Message{last})), SendOutcome::kSent);
  for (int i = 0; i < 200; ++i) {
    ::usleep(5'000);
    bool got = false;
    for (const auto& nr : received()) {
      for (const auto& rr : nr.reports) got = got || rr == last;
    }
    if (got) break;
  }
  (*plugin)->stop();
  bool flushed = false;
  for (const auto& nr : received()) {
    for (const auto& rr : nr.reports) flushed = flushed || rr == last;
  }
  EXPECT_TRUE(flushed);
}

// A rank process that spoke and then died (its pod still up) reaches the operator as a
// processExited anomaly for that rank: the only sign of a crash that profiler telemetry gives.
TEST_F(NodePluginTest, ARankProcessThatExitsIsReportedAsAnAnomaly) {
  auto client = std::make_unique<kube::testing::FakeKubeClient>();
  client->put(kube::resources::pods(), jobPod("team", "job-1", kUid, "node-a", "job", 0, 0));
  auto plugin = NodePlugin::create(options(), realClock(), std::move(client));
  ASSERT_TRUE(plugin.has_value()) << plugin.error().toString();
  ASSERT_TRUE((*plugin)->start().has_value());
  for (int i = 0; i < 500 && !(*plugin)->readiness().empty(); ++i) ::usleep(10'000);

  // The rank: a child process in the pod's cgroup (as the fake /proc says) that sends one report
  // when told to and then waits to be killed.
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const auto id = identityOf("team", "job-1", "node-a", "job", 0, 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    auto sender = UnixDatagramSender::create(dir_ / "run/agent.sock");
    if (!sender || sender->send(*report::encodeCbor(report::Message{rankReport(id, 1)})) !=
                       SendOutcome::kSent) {
      ::_exit(2);
    }
    for (;;) ::pause();
  }
  writeFile(dir_ / (std::string("proc/") + std::to_string(child) + "/cgroup"),
            "0::/kubepods/pod" + std::string(kUid) + "/ctr\n");
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  auto seen = [&](auto pred) {
    for (int i = 0; i < 500; ++i) {
      for (const auto& nr : received()) {
        if (pred(nr)) return true;
      }
      ::usleep(10'000);
    }
    return false;
  };
  ASSERT_TRUE(seen([&](const report::NodeReport& nr) { return !nr.reports.empty(); }));
  auto exited = [&](const report::NodeReport& nr) {
    for (const auto& n : nr.notices) {
      const auto* a = std::get_if<report::AnomalyNotice>(&n);
      if (a != nullptr && a->kind == report::AnomalyKind::kProcessExited) {
        EXPECT_EQ(a->id, id);
        return true;
      }
    }
    return false;
  };
  for (const auto& nr : received()) EXPECT_FALSE(exited(nr)) << "reported while the process runs";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(seen(exited));
  (*plugin)->stop();
  ::close(go[0]);
  ::close(go[1]);
}

// --namespace: the pod informer lists only that namespace (what a Role there allows), so a pod of
// another namespace is unknown and its datagrams are dropped.
TEST_F(NodePluginTest, NamespaceLimitsThePodsItAttributes) {
  auto client = std::make_unique<kube::testing::FakeKubeClient>();
  client->put(kube::resources::pods(), jobPod("team", "job-1", kUid, "node-a", "job", 0, 0));
  auto o = options();
  o.pod_namespace = "other";
  auto plugin = NodePlugin::create(o, realClock(), std::move(client));
  ASSERT_TRUE(plugin.has_value()) << plugin.error().toString();
  ASSERT_TRUE((*plugin)->start().has_value());
  std::string ready = "?";
  for (int i = 0; i < 500 && !ready.empty(); ++i) {
    ready = (*plugin)->readiness();
    if (!ready.empty()) ::usleep(10'000);
  }
  ASSERT_EQ(ready, "");
  auto sender = UnixDatagramSender::create(dir_ / "run/agent.sock");
  ASSERT_TRUE(sender.has_value());
  const auto good = rankReport(identityOf("team", "job-1", "node-a", "job", 0, 0), 42);
  ASSERT_EQ(sender->send(*report::encodeCbor(report::Message{good})), SendOutcome::kSent);
  httplib::Client http("127.0.0.1", (*plugin)->httpPort());
  const std::string dropped = "c4_node_plugin_messages_dropped_total{reason=\"pod_unknown\"} 1";
  std::string metrics;
  for (int i = 0; i < 500 && metrics.find(dropped) == std::string::npos; ++i) {
    if (i > 0) ::usleep(10'000);
    auto m = http.Get("/metrics");
    ASSERT_TRUE(m);
    metrics = m->body;
  }
  EXPECT_NE(metrics.find(dropped), std::string::npos) << metrics;
  (*plugin)->stop();
  for (const auto& nr : received()) EXPECT_TRUE(nr.reports.empty());
}

TEST_F(NodePluginTest, BadPluginSourceFailsStart) {
  auto o = options();
  o.plugin_source = dir_ / "missing.so";
  auto plugin =
      NodePlugin::create(o, realClock(), std::make_unique<kube::testing::FakeKubeClient>());
  ASSERT_TRUE(plugin.has_value());
  auto s = (*plugin)->start();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("missing.so"), std::string::npos);
  EXPECT_EQ((*plugin)->readiness(), "plugin not installed");
}

TEST_F(NodePluginTest, BadProfilerPluginSourceFailsStart) {
  auto o = options();
  o.profiler_plugin_source = dir_ / "missing-profiler.so";
  auto plugin =
      NodePlugin::create(o, realClock(), std::make_unique<kube::testing::FakeKubeClient>());
  ASSERT_TRUE(plugin.has_value());
  auto s = (*plugin)->start();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("missing-profiler.so"), std::string::npos);
  EXPECT_NE(s.error().message.find("profiler plugin"), std::string::npos);
  EXPECT_EQ((*plugin)->readiness(), "plugin not installed");
}

}  // namespace
}  // namespace c4::node
