// The real c4-operator binary against the real kube-apiserver of the test cluster: its /metrics,
// /healthz and /readyz endpoints, graceful shutdown on SIGTERM, leader failover between
// processes (SIGKILL and SIGTERM), and a SIGKILL in the middle of a restart (the
// "after-restart-status" failpoint, then random moments) converging without a second restart.
#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>

#include "harness.h"
#include "operator/trainingjob/planner.h"
#include "tcp_proxy.h"

extern char** environ;

namespace c4::op::it {
namespace {

using namespace std::chrono_literals;

// One c4-operator process; stdout and stderr go to a log file. Killed (SIGKILL) and reaped when
// destroyed if still running.
class OperatorProcess {
 public:
  OperatorProcess(const std::vector<std::string>& args, const std::vector<std::string>& env,
                  std::string log_path)
      : log_path_(std::move(log_path)) {
    std::vector<std::string> argv_s = {C4_OPERATOR_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).starts_with("C4_FAILPOINTS=")) continue;
      env_s.emplace_back(*e);
    }
    env_s.insert(env_s.end(), env.begin(), env.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
      pid_ = -1;
    }
  }
  ~OperatorProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      (void)waitExit(10s);
    }
  }
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;

  [[nodiscard]] bool running() const { return pid_ > 0 && !status_; }
  void signal(int sig) const {
    if (running()) ::kill(pid_, sig);
  }
  // The wait status once the process has ended within `timeout`, else nullopt.
  std::optional<int> waitExit(std::chrono::milliseconds timeout) {
    if (status_ || pid_ <= 0) return status_;
    auto until = std::chrono::steady_clock::now() + timeout;
    do {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        status_ = status;
        return status_;
      }
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < until);
    return std::nullopt;
  }
  [[nodiscard]] std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The metrics port from the "Starting" log line, waiting up to `timeout`.
  int metricsPort(std::chrono::milliseconds timeout = 10s) {
    static const std::regex re("metricsPort=([0-9]+)");
    int port = 0;
    waitFor(
        [&] {
          std::smatch m;
          std::string text = log();
          if (std::regex_search(text, m, re)) port = std::stoi(m[1]);
          return port != 0 || !running() || waitExit(0ms).has_value();
        },
        timeout);
    return port;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct HttpResult {
  long code = 0;  // 0: no connection
  std::string body;
};

HttpResult httpGet(int port, const std::string& path) {
  HttpResult out;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return out;
  std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t n, void* user) {
        static_cast<std::string*>(user)->append(data, size * n);
        return size * n;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &out.body);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.code);
  }
  curl_easy_cleanup(curl);
  return out;
}

// The value of one sample in Prometheus text format ("name{labels} value"), or nullopt.
std::optional<double> metricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

std::string describeStatus(const std::optional<int>& status) {
  if (!status) return "still running";
  if (WIFEXITED(*status)) return "exit code " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return "killed by signal " + std::to_string(WTERMSIG(*status));
  return "status " + std::to_string(*status);
}

class ProcessIT : public NamespacedTest {
 protected:
  ProcessIT() : NamespacedTest("op-proc") {}

  std::unique_ptr<OperatorProcess> startOperator(const std::string& name,
                                                 std::vector<std::string> extra_args = {},
                                                 std::vector<std::string> env = {}) {
    std::vector<std::string> args = {"--kubeconfig=" + testenvDir() + "/kubeconfig",
                                     "--namespace=" + ns_, "--metrics-address=127.0.0.1",
                                     "--metrics-port=0", "--log-level=info"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::string log = ::testing::TempDir() + "/" + ns_ + "-" + name + ".log";
    return std::make_unique<OperatorProcess>(args, env, log);
  }
  std::vector<std::string> leaderArgs(const std::string& identity) {
    return {"--leader-elect=true",    "--lease-namespace=" + ns_, "--lease-name=c4-operator",
            "--identity=" + identity, "--lease-duration=4",       "--renew-deadline=3",
            "--retry-period=0.5"};
  }
  std::string leaseHolder() {
    auto lease = client_->get(resources::leases(), ns_, "c4-operator");
    if (!lease) return "";
    return (*lease)["spec"].value("holderIdentity", std::string{});
  }
  Json job(const std::string& name) { return getJob(*client_, ns_, name); }
  bool createJob(const Json& tj) {
    auto created = client_->create(resources::trainingJobs(), ns_, tj);
    EXPECT_TRUE(created) << created.error().toString();
    return created.has_value();
  }
  bool phaseIs(const std::string& name, const std::string& phase) {
    return job(name)["status"].value("phase", std::string{}) == phase;
  }
};

TEST_F(ProcessIT, ServesMetricsAndHealthAndStopsCleanlyOnSigterm) {
  auto op = startOperator("main", {"--leader-elect=false"});
  int port = op->metricsPort();
  ASSERT_GT(port, 0) << op->log();
  ASSERT_TRUE(waitFor([&] { return httpGet(port, "/readyz").code == 200; })) << op->log();
  auto healthz = httpGet(port, "/healthz");
  EXPECT_EQ(healthz.code, 200);
  EXPECT_EQ(healthz.body, "ok\n");
  EXPECT_EQ(httpGet(port, "/nope").code, 404);

  ASSERT_TRUE(createJob(trainingJob(ns_, "m", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "m", 2, 0, "Running"); }));
  ASSERT_TRUE(waitFor([&] { return phaseIs("m", "Running"); }));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "m-0", "Failed", 137));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "m", 2, 1, "Running"); }))
      << describePods(*client_, ns_, "m") << op->log();

  // The process's own counters, read over HTTP as Prometheus would.
  std::string metrics;
  ASSERT_TRUE(waitFor([&] {
    auto reply = httpGet(port, "/metrics");
    metrics = reply.body;
    return reply.code == 200 &&
           metricValue(metrics, "c4_operator_pods_created_total").value_or(0) == 4;
  })) << metrics;
  EXPECT_EQ(metricValue(metrics, "c4_operator_job_restarts_total"), 1.0);
  // A running job is requeued (goodput, batching), so its reconciles end in requeue_after.
  EXPECT_GE(
      metricValue(metrics, "c4_operator_reconciles_total{result=\"requeue_after\"}").value_or(0),
      1.0);
  EXPECT_TRUE(metricValue(metrics, "c4_operator_reconciles_total{result=\"success\"}"))
      << "every result series exists from the start";
  EXPECT_TRUE(metricValue(metrics, "c4_operator_workqueue_depth{name=\"trainingjob\"}")) << metrics;
  EXPECT_GE(
      metricValue(metrics, "c4_operator_workqueue_adds_total{name=\"trainingjob\"}").value_or(0),
      1.0)
      << metrics;
  EXPECT_GE(metricValue(metrics,
                        "c4_operator_workqueue_work_duration_seconds_count{name=\"trainingjob\"}")
                .value_or(0),
            1.0)
      << metrics;
  EXPECT_TRUE(metricValue(metrics,
                          "c4_operator_workqueue_longest_running_processor_seconds{name="
                          "\"trainingjob\"}"))
      << metrics;
  EXPECT_GE(metricValue(metrics, "c4_operator_api_requests_total{verb=\"POST\",code=\"201\"}")
                .value_or(0),
            4.0)
      << metrics;
  EXPECT_NE(metrics.find("c4_operator_api_request_duration_seconds_bucket"), std::string::npos);
  EXPECT_NE(metrics.find("c4_operator_reconcile_duration_seconds_count"), std::string::npos);
  EXPECT_EQ(metricValue(metrics,
                        "c4_operator_events_total{type=\"Normal\",reason="
                        "\"RestartingFromCheckpoint\",result=\"ok\"}"),
            1.0)
      << metrics;

  auto term_at = std::chrono::steady_clock::now();
  op->signal(SIGTERM);
  auto status = op->waitExit(15s);
  ASSERT_TRUE(status) << "no exit 15 s after SIGTERM\n" << op->log();
  std::cout << "SIGTERM to exit: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - term_at)
                   .count()
            << " ms\n";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(status) << "\n"
                                                               << op->log();
  std::string log = op->log();
  EXPECT_NE(log.find("Signal received"), std::string::npos) << log;
  EXPECT_NE(log.find("msg=Stopped"), std::string::npos) << log;
  EXPECT_EQ(httpGet(port, "/healthz").code, 0) << "the server stopped listening";
  // Nothing of the job was touched by the shutdown.
  EXPECT_TRUE(podsAtAttempt(*client_, ns_, "m", 2, 1, nullptr));
}

TEST_F(ProcessIT, LeaderFailoverOnSigkillWithinTheLeaseAndAtOnceOnSigterm) {
  auto a = startOperator("a", leaderArgs("op-a"));
  ASSERT_TRUE(waitFor([&] { return leaseHolder() == "op-a"; }, 20s)) << a->log();
  auto b = startOperator("b", leaderArgs("op-b"));
  int port_b = b->metricsPort();
  ASSERT_GT(port_b, 0) << b->log();
  // A standby is ready (it serves its endpoints) but does not reconcile.
  ASSERT_TRUE(waitFor([&] { return httpGet(port_b, "/readyz").code == 200; })) << b->log();
  std::this_thread::sleep_for(5s);  // longer than the lease: a keeps renewing it
  EXPECT_EQ(leaseHolder(), "op-a");
  ASSERT_TRUE(createJob(trainingJob(ns_, "lead", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "lead", 2, 0, nullptr); }));

  // SIGKILL: no release; b takes over when the lease expires (4 s) plus a retry period.
  auto killed_at = std::chrono::steady_clock::now();
  a->signal(SIGKILL);
  ASSERT_TRUE(waitFor([&] { return leaseHolder() == "op-b"; }, 20s)) << b->log();
  auto failover = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LE(failover, 8s) << "failover took "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
                          << " ms";
  // The new leader reconciles: a second job gets its pods.
  ASSERT_TRUE(createJob(trainingJob(ns_, "after", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "after", 2, 0, nullptr); }))
      << b->log();

  // SIGTERM: b releases the lease on the way out, so c takes over well before 4 s.
  auto c = startOperator("c", leaderArgs("op-c"));
  ASSERT_GT(c->metricsPort(), 0) << c->log();
  ASSERT_TRUE(waitFor([&] { return httpGet(c->metricsPort(), "/readyz").code == 200; }));
  auto stopped_at = std::chrono::steady_clock::now();
  b->signal(SIGTERM);
  auto status = b->waitExit(15s);
  ASSERT_TRUE(status) << b->log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(status);
  ASSERT_TRUE(waitFor([&] { return leaseHolder() == "op-c"; }, 20s)) << c->log();
  auto handover = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_LT(handover, 3500ms)
      << "handover took " << std::chrono::duration_cast<std::chrono::milliseconds>(handover).count()
      << " ms; a released lease needs no expiry\n--- b:\n"
      << b->log() << "--- c:\n"
      << c->log();
  std::cout << "failover after SIGKILL "
            << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
            << " ms, handover after SIGTERM "
            << std::chrono::duration_cast<std::chrono::milliseconds>(handover).count() << " ms\n";
  c->signal(SIGTERM);
  EXPECT_TRUE(c->waitExit(15s)) << c->log();
}

TEST_F(ProcessIT, SigkillRightAfterTheRestartIntentConvergesWithoutASecondRestart) {
  auto first =
      startOperator("crash", {"--leader-elect=false"}, {"C4_FAILPOINTS=after-restart-status=kill"});
  ASSERT_TRUE(createJob(trainingJob(ns_, "crash", 3, {{"maxRestarts", 5}})));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "crash", 3, 0, "Running"); }))
      << first->log();
  ASSERT_TRUE(waitFor([&] { return phaseIs("crash", "Running"); }));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "crash-2", "Failed", 137));
  auto status = first->waitExit(30s);
  ASSERT_TRUE(status) << "the failpoint did not fire\n" << first->log();
  ASSERT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << describeStatus(status);
  EXPECT_NE(first->log().find("failpoint=after-restart-status"), std::string::npos);

  // The intent is persisted; no attempt-0 pod was deleted yet.
  EXPECT_EQ(job("crash")["status"]["restarts"], 1);
  EXPECT_EQ(job("crash")["status"]["phase"], "Restarting");
  EXPECT_TRUE(podsAtAttempt(*client_, ns_, "crash", 3, 0, nullptr));

  auto second = startOperator("again", {"--leader-elect=false"});
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "crash", 3, 1, "Running"); }))
      << second->log();
  ASSERT_TRUE(waitFor([&] { return phaseIs("crash", "Running"); })) << second->log();
  std::this_thread::sleep_for(2s);  // give a wrong second restart a chance
  Json final_status = job("crash")["status"];
  EXPECT_EQ(final_status["restarts"], 1) << "one fault, one restart";
  EXPECT_EQ(final_status["faults"].size(), 1u);
  EXPECT_TRUE(podsAtAttempt(*client_, ns_, "crash", 3, 1, "Running")) << "no duplicate pods";
  auto reasons = eventReasons(*client_, ns_, "crash");
  EXPECT_LE(std::count(reasons.begin(), reasons.end(), "RestartingFromCheckpoint"), 1);
}

TEST_F(ProcessIT, SigkillAtRandomMomentsOfRestartsNeverRestartsTwiceForOneFault) {
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> delay_ms(0, 600);
  constexpr int kReplicas = 3;
  constexpr int kFaults = 3;
  auto op = startOperator("chaos-0", {"--leader-elect=false"});
  // Every fault is the same exit code on another rank (and node): not a test of
  // maxIdenticalCrashes, which is off here.
  ASSERT_TRUE(createJob(
      trainingJob(ns_, "chaos", kReplicas, {{"maxRestarts", 10}, {"maxIdenticalCrashes", 0}})));
  auto settledAt = [&](int attempt) {
    return podsAtAttempt(*client_, ns_, "chaos", kReplicas, attempt, "Running") &&
           phaseIs("chaos", "Running");
  };
  std::vector<int> delays;
  for (int fault = 0; fault < kFaults; ++fault) {
    ASSERT_TRUE(waitFor([&] { return settledAt(fault); })) << "attempt " << fault << "\n"
                                                           << op->log();
    ASSERT_TRUE(
        setPodPhase(*client_, ns_, "chaos-" + std::to_string(fault % kReplicas), "Failed", 137));
    delays.push_back(delay_ms(rng));
    std::this_thread::sleep_for(std::chrono::milliseconds{delays.back()});
    op->signal(SIGKILL);
    ASSERT_TRUE(op->waitExit(10s));
    op = startOperator("chaos-" + std::to_string(fault + 1), {"--leader-elect=false"});
  }
  std::string seen;
  for (int d : delays) seen += std::to_string(d) + " ms ";
  ASSERT_TRUE(waitFor([&] { return settledAt(kFaults); })) << "kills after " << seen << "\n"
                                                           << op->log();
  std::this_thread::sleep_for(2s);
  Json status = job("chaos")["status"];
  EXPECT_EQ(status["restarts"], kFaults) << "kills after " << seen;
  EXPECT_EQ(status["faults"].size(), static_cast<std::size_t>(kFaults));
  EXPECT_TRUE(podsAtAttempt(*client_, ns_, "chaos", kReplicas, kFaults, "Running"));
}

// The node-action flags reach the binary's remediation path: a job's pod fails on a node that
// went NotReady, and the binary cordons it — or, with --dry-run, only says it would; or, with a
// spent --cordon-max-per-hour, only says the circuit breaker is open. The breaker's state lives
// next to the lease (--lease-namespace).
TEST_F(ProcessIT, NodeActionFlagsDecideWhatTheBinaryDoesToAFaultyNode) {
  struct Case {
    std::string name;
    std::vector<std::string> flags;
    std::string job_event;
    bool cordoned;
  };
  const std::vector<Case> cases = {
      {"dry", {"--dry-run=true"}, "CordonDryRun", false},
      {"capped", {"--cordon-max-per-hour=0"}, "CordonSkipped", false},
      {"acts", {}, "NodeCordoned", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    NotReadyNode sick(*client_, "sick-" + c.name);
    std::vector<std::string> flags = {"--leader-elect=false", "--lease-namespace=" + ns_,
                                      "--cordon-max-fraction=1"};
    flags.insert(flags.end(), c.flags.begin(), c.flags.end());
    auto op = startOperator(c.name, flags);
    Json tj = trainingJob(ns_, "tj-" + c.name, 1);
    tj["spec"]["template"]["spec"]["nodeName"] = sick.name();
    ASSERT_TRUE(createJob(tj));
    ASSERT_TRUE(waitFor([&] { return !listPods(*client_, ns_, "tj-" + c.name).empty(); }))
        << op->log();
    ASSERT_TRUE(setPodPhase(*client_, ns_, "tj-" + c.name + "-0", "Failed", 137));
    ASSERT_TRUE(waitFor([&] {
      auto reasons = eventReasons(*client_, ns_, "tj-" + c.name);
      return std::find(reasons.begin(), reasons.end(), c.job_event) != reasons.end();
    })) << op->log();
    EXPECT_EQ(sick.cordonedByC4(), c.cordoned);
    auto node_reasons = eventReasons(*client_, "default", sick.name());
    EXPECT_NE(std::find(node_reasons.begin(), node_reasons.end(), c.job_event), node_reasons.end())
        << "the Node shows it too";
    op->signal(SIGTERM);
    EXPECT_TRUE(op->waitExit(10s));
  }
}

// Issue #27: SIGKILL between a cordon's owed record (its circuit-breaker slot) and the Node
// patch ("after-cordon-owed"). The node recovers before the next operator starts, so nothing
// plans that cordon again: only the owed record in the cluster says it is due. The new process
// completes it: exactly one cordon (one NodeCordoned Event, the record done) and one restart.
TEST_F(ProcessIT, SigkillBetweenTheOwedRecordAndTheNodePatchCordonsExactlyOnceAfterRestart) {
  NotReadyNode sick(*client_, "owed");
  const std::vector<std::string> flags = {"--leader-elect=false", "--lease-namespace=" + ns_,
                                          "--cordon-max-fraction=1"};
  auto first = startOperator("owed-crash", flags, {"C4_FAILPOINTS=after-cordon-owed=kill"});
  Json tj = trainingJob(ns_, "owed", 1, {{"maxRestarts", 5}});
  tj["spec"]["template"]["spec"]["nodeName"] = sick.name();
  ASSERT_TRUE(createJob(tj));
  ASSERT_TRUE(waitFor([&] { return !listPods(*client_, ns_, "owed").empty(); })) << first->log();
  ASSERT_TRUE(setPodPhase(*client_, ns_, "owed-0", "Failed", 137));
  auto status = first->waitExit(30s);
  ASSERT_TRUE(status) << "the failpoint did not fire\n" << first->log();
  ASSERT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << describeStatus(status);
  EXPECT_NE(first->log().find("failpoint=after-cordon-owed"), std::string::npos);

  auto records = [&] {
    auto cm = client_->get(resources::configMaps(), ns_, "c4-node-actions");
    if (!cm) return Json::array();
    return Json::parse((*cm)["data"].value("cordons.json", std::string("[]")));
  };
  Json owed = records();
  ASSERT_EQ(owed.size(), 1u) << owed.dump();
  EXPECT_EQ(owed[0]["node"], sick.name());
  EXPECT_EQ(owed[0]["state"], "owed") << "the slot is taken by an owed cordon";
  EXPECT_FALSE(sick.cordonedByC4());
  EXPECT_EQ(job("owed")["status"].value("restarts", 0), 0) << "the cordon goes first";

  // The node is Ready again: the next reconcile restarts the job without planning a cordon.
  ASSERT_TRUE(client_->patch(
      resources::nodes(), "", sick.name(), PatchType::kMerge,
      {{"status", {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}},
      statusSubresource()));

  auto second = startOperator("owed-again", flags);
  ASSERT_TRUE(waitFor([&] { return sick.cordonedByC4(); })) << second->log();
  ASSERT_TRUE(waitFor([&] { return job("owed")["status"].value("restarts", 0) == 1; }))
      << second->log();
  std::this_thread::sleep_for(3s);  // give a second cordon or restart a chance
  Json done = records();
  ASSERT_EQ(done.size(), 1u) << done.dump();
  EXPECT_EQ(done[0]["state"], "done");
  auto node_reasons = eventReasons(*client_, "default", sick.name());
  EXPECT_EQ(std::count(node_reasons.begin(), node_reasons.end(), "NodeCordoned"), 1)
      << "exactly one cordon";
  EXPECT_EQ(job("owed")["status"]["restarts"], 1) << "one fault, one restart";
  second->signal(SIGTERM);
  EXPECT_TRUE(second->waitExit(10s)) << second->log();
}

// A copy of the test cluster's kubeconfig whose server is 127.0.0.1:<port> (a proxy); the
// apiserver certificate names 127.0.0.1, so TLS verifies through the proxy.
std::string kubeconfigVia(int port, const std::string& path) {
  std::ifstream in(testenvDir() + "/kubeconfig");
  std::stringstream text;
  text << in.rdbuf();
  std::string out =
      std::regex_replace(text.str(), std::regex("server: https://127\\.0\\.0\\.1:[0-9]+"),
                         "server: https://127.0.0.1:" + std::to_string(port));
  std::ofstream(path) << out;
  return path;
}

int apiServerPort() {
  std::ifstream in(testenvDir() + "/kubeconfig");
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  std::string t = text.str();
  if (!std::regex_search(t, m, std::regex("server: https://127\\.0\\.0\\.1:([0-9]+)"))) return 0;
  return std::stoi(m[1]);
}

// SIGTERM while the API server cannot be reached (its packets swallowed, so every call would
// wait for its timeout): the binary exits within 10 s, with and without leader election.
TEST_F(ProcessIT, SigtermDuringStartUpWithTheApiServerUnreachableExitsPromptly) {
  TcpProxy blackhole(1);  // nothing listens on port 1; the proxy swallows everything anyway
  blackhole.cut();
  std::string kubeconfig =
      kubeconfigVia(blackhole.port(), ::testing::TempDir() + "/" + ns_ + "-blackhole.kubeconfig");
  for (bool elect : {false, true}) {
    SCOPED_TRACE(elect ? "leader election" : "no leader election");
    std::vector<std::string> args = {"--kubeconfig=" + kubeconfig,
                                     "--namespace=" + ns_,
                                     "--metrics-address=127.0.0.1",
                                     "--metrics-port=0",
                                     std::string("--leader-elect=") + (elect ? "true" : "false"),
                                     "--lease-namespace=" + ns_};
    OperatorProcess op(args, {}, ::testing::TempDir() + "/" + ns_ + "-startup.log");
    ASSERT_NE(op.metricsPort(), 0) << op.log();
    std::this_thread::sleep_for(1500ms);  // inside its first list or lease read
    ASSERT_TRUE(op.running()) << op.log();
    auto signalled = std::chrono::steady_clock::now();
    op.signal(SIGTERM);
    auto status = op.waitExit(10s);
    ASSERT_TRUE(status) << "still running 10 s after SIGTERM\n" << op.log();
    std::cerr << "SIGTERM to exit during start-up: "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - signalled)
                     .count()
              << " ms\n";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(status);
  }
}

// A leader whose connection to the API server is cut (a partition) exits non-zero at its renew
// deadline, in the middle of a long pod-create loop, without waiting for anything in flight.
TEST_F(ProcessIT, ALeaderCutOffFromTheApiServerExitsNonZeroAtItsRenewDeadline) {
  int port = apiServerPort();
  ASSERT_NE(port, 0);
  TcpProxy proxy(port);
  std::string kubeconfig =
      kubeconfigVia(proxy.port(), ::testing::TempDir() + "/" + ns_ + "-proxy.kubeconfig");
  std::vector<std::string> args = {
      "--kubeconfig=" + kubeconfig, "--namespace=" + ns_, "--metrics-address=127.0.0.1",
      "--metrics-port=0",           "--kube-api-qps=4",   "--kube-api-burst=1"};
  auto election = leaderArgs("cut-off");
  args.insert(args.end(), election.begin(), election.end());
  OperatorProcess op(args, {}, ::testing::TempDir() + "/" + ns_ + "-cutoff.log");
  ASSERT_TRUE(waitFor([&] { return leaseHolder() == "cut-off"; }, 20s)) << op.log();
  ASSERT_TRUE(createJob(trainingJob(ns_, "long", 60)));
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "long").size() >= 4; }, 30s))
      << op.log();
  proxy.cut();
  auto cut_at = std::chrono::steady_clock::now();
  auto status = op.waitExit(10s);
  ASSERT_TRUE(status) << "still running 10 s after the partition\n" << op.log();
  auto took = std::chrono::steady_clock::now() - cut_at;
  std::cerr << "partition to exit: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << describeStatus(status);
  EXPECT_LE(took, 5s) << "renew deadline 3 s after the last renewal";
  EXPECT_NE(op.log().find("Leader election lost"), std::string::npos) << op.log();
  EXPECT_LT(listPods(*client_, ns_, "long").size(), 60u) << "the create loop was not finished";
}

}  // namespace
}  // namespace c4::op::it

namespace c4::op::it {
namespace {

// The leader labels its own pod c4.dev/leader=true (the chart's report Service selects it); a
// standby does not, and a stopping leader removes the label, so reports never go to a process
// that cannot take them.
TEST_F(ProcessIT, TheLeaderLabelsItsPodAndRemovesTheLabelWhenItStops) {
  auto podJson = [&](const std::string& name) {
    return Json{{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", ns_}}},
                {"spec", {{"containers", {{{"name", "op"}, {"image", "c4/operator"}}}}}}};
  };
  ASSERT_TRUE(client_->create(resources::pods(), ns_, podJson("op-a")));
  ASSERT_TRUE(client_->create(resources::pods(), ns_, podJson("op-b")));
  auto label = [&](const std::string& pod) {
    auto p = client_->get(resources::pods(), ns_, pod);
    return p ? labelOf(*p, "c4.dev/leader") : std::string("<gone>");
  };
  auto a = startOperator("a", leaderArgs("op-a"), {"POD_NAME=op-a", "POD_NAMESPACE=" + ns_});
  ASSERT_TRUE(waitFor([&] { return label("op-a") == "true"; }, 20s)) << a->log();
  auto b = startOperator("b", leaderArgs("op-b"), {"POD_NAME=op-b", "POD_NAMESPACE=" + ns_});
  ASSERT_TRUE(waitFor([&] { return httpGet(b->metricsPort(), "/readyz").code == 200; }))
      << b->log();
  EXPECT_EQ(label("op-b"), "") << "a standby is not labelled";
  a->signal(SIGTERM);
  ASSERT_TRUE(waitFor([&] { return label("op-b") == "true"; }, 20s)) << b->log();
  EXPECT_EQ(label("op-a"), "") << "the old leader removed its label when it stopped\n" << a->log();
}

}  // namespace
}  // namespace c4::op::it
