// Disruptive integration tests, run serially (they restart the API server or hold the shared
// lease): leader election between two operators and recovery from an API server restart.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "harness.h"
#include "kube/client/curl_kube_client.h"
#include "kube/client/forwarding_kube_client.h"
#include "operator/manager/leader_election.h"
#include "operator/manager/manager.h"

namespace c4::op::it {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

class DisruptionIT : public NamespacedTest {
 protected:
  DisruptionIT() : NamespacedTest("op-dis") {}
};

// The lease of these tests: short, so failovers take seconds (4 s lease, 3 s renew deadline).
LeaderElectionConfig testLease(const std::string& ns, const std::string& id) {
  LeaderElectionConfig c;
  c.lease_namespace = ns;
  c.lease_name = "c4-operator";
  c.identity = id;
  c.lease_duration = std::chrono::seconds{4};
  c.renew_deadline = std::chrono::seconds{3};
  c.retry_period = std::chrono::milliseconds{500};
  return c;
}

struct Candidate {
  std::unique_ptr<LeaderElector> elector;
  std::thread thread;
  std::atomic<bool> leading{false};
  Candidate(KubeClient& client, const std::string& ns, const std::string& id, bool release) {
    LeaderElectionConfig c = testLease(ns, id);
    c.release_on_stop = release;
    elector = std::make_unique<LeaderElector>(client, realClock(), c);
    thread = std::thread(
        [this] { elector->run([this] { leading = true; }, [this] { leading = false; }); });
  }
  void stop() {
    elector->stop();
    if (thread.joinable()) thread.join();
  }
  ~Candidate() { stop(); }
};

TEST_F(DisruptionIT, TwoOperatorsOneLeaderAndFailoverWithinTheLeaseTime) {
  auto client_b = makeClient();
  Candidate a(*client_, ns_, "operator-a", /*release=*/false);
  ASSERT_TRUE(waitFor([&] { return a.leading.load(); }, std::chrono::seconds{10}));
  Candidate b(*client_b, ns_, "operator-b", false);
  std::this_thread::sleep_for(std::chrono::seconds{5});  // longer than the lease: a renews
  EXPECT_TRUE(a.leading.load());
  EXPECT_FALSE(b.leading.load()) << "never two leaders";

  // a dies without releasing (a crash): b takes over after the lease duration.
  auto crashed_at = std::chrono::steady_clock::now();
  a.stop();
  ASSERT_TRUE(waitFor([&] { return b.leading.load(); }, std::chrono::seconds{15}));
  auto failover = std::chrono::steady_clock::now() - crashed_at;
  // Lease duration (4 s) + one retry period + slack for a loaded CI machine.
  EXPECT_LE(failover, std::chrono::seconds{7})
      << "failover took " << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
      << " ms";
  auto lease = client_->get(resources::leases(), ns_, "c4-operator");
  ASSERT_TRUE(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "operator-b");
  EXPECT_GE((*lease)["spec"]["leaseTransitions"], 1);
  b.stop();
}

TEST_F(DisruptionIT, ReleasedLeaseIsTakenOverAtOnce) {
  auto client_b = makeClient();
  Candidate a(*client_, ns_, "operator-a", /*release=*/true);
  ASSERT_TRUE(waitFor([&] { return a.leading.load(); }, std::chrono::seconds{10}));
  Candidate b(*client_b, ns_, "operator-b", true);
  auto stopped_at = std::chrono::steady_clock::now();
  a.stop();
  ASSERT_TRUE(waitFor([&] { return b.leading.load(); }, std::chrono::seconds{10}));
  EXPECT_LE(std::chrono::steady_clock::now() - stopped_at, std::chrono::seconds{3});
}

TEST_F(DisruptionIT, OperatorRecoversFromAnApiServerRestart) {
  std::string script = C4_TESTENV_SCRIPT;
  if (const char* s = std::getenv("C4_TESTENV_SH")) script = s;
  if (!std::filesystem::exists(script)) GTEST_SKIP() << "no testenv.sh at " << script;
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "before", 2)));
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "before").size() == 2; }));
  auto lists_before = op.controller().podInformer().stats().lists;

  std::string command = script + " restart-apiserver --dir " + testenvDir() + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  // After the restart the informers re-establish their watches (relisting when the old
  // resourceVersion is gone) and the operator keeps working.
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "after", 2)));
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "after").size() == 2; },
                      std::chrono::seconds{60}));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "after-0", "Failed"));
  ASSERT_TRUE(
      waitFor([&] { return getJob(*client_, ns_, "after")["status"].value("restarts", 0) == 1; },
              std::chrono::seconds{60}));
  auto stats = op.controller().podInformer().stats();
  EXPECT_GE(stats.watches, 2u) << "the watch was re-established";
  std::cout << "pod informer after API server restart: lists " << lists_before << " -> "
            << stats.lists << ", 410s " << stats.gone << ", errors " << stats.errors << "\n";
  op.stop();
}

// Forwards to a real client. partition(): every later call fails at once, as if this client's
// connection to the API server were cut (the lease client of a leader that can still reach the
// API server on its other connections: the asymmetric failure fencing exists for). Successful
// writes are recorded with the time their answer came back (the write has landed by then) and
// the time they were sent.
class Recorder final : public ForwardingKubeClient {
 public:
  explicit Recorder(KubeClient& real) : ForwardingKubeClient(real) {}
  void partition() { cut_ = true; }
  struct Write {
    std::chrono::steady_clock::time_point sent, answered;
    std::string what;
  };
  std::vector<Write> writes() {
    std::lock_guard lock(mu_);
    return writes_;
  }
  Result<Json> get(const ResourceType& t, std::string_view ns, std::string_view name,
                   const GetOptions& o) override {
    if (cut_) return makeError(ErrorCode::kUnavailable, "partitioned");
    return target().get(t, ns, name, o);
  }
  Result<Json> list(const ResourceType& t, std::string_view ns, const ListOptions& o) override {
    if (cut_) return makeError(ErrorCode::kUnavailable, "partitioned");
    return target().list(t, ns, o);
  }
  Result<Json> create(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    return record("create " + t.kind + " " + objectName(obj),
                  [&] { return target().create(t, ns, obj, o); });
  }
  Result<Json> update(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    return record("update " + t.kind + " " + objectName(obj),
                  [&] { return target().update(t, ns, obj, o); });
  }
  Result<Json> patch(const ResourceType& t, std::string_view ns, std::string_view name,
                     PatchType pt, const Json& body, const PatchOptions& o) override {
    return record("patch " + t.kind + " " + std::string(name),
                  [&] { return target().patch(t, ns, name, pt, body, o); });
  }
  Status remove(const ResourceType& t, std::string_view ns, std::string_view name,
                const DeleteOptions& o) override {
    auto result = record("delete " + t.kind + " " + std::string(name), [&]() -> Result<Json> {
      auto removed = target().remove(t, ns, name, o);
      if (!removed) return std::unexpected(removed.error());
      return Json::object();
    });
    if (!result) return std::unexpected(result.error());
    return okStatus();
  }
  Status watch(const ResourceType& t, std::string_view ns, const WatchOptions& o,
               const WatchHandler& h) override {
    if (cut_) return makeError(ErrorCode::kUnavailable, "partitioned");
    return target().watch(t, ns, o, h);
  }

 private:
  template <typename Call>
  Result<Json> record(const std::string& what, Call&& call) {
    if (cut_) return makeError(ErrorCode::kUnavailable, "partitioned");
    auto sent = std::chrono::steady_clock::now();
    Result<Json> result = call();
    if (result) {
      std::lock_guard lock(mu_);
      writes_.push_back({sent, std::chrono::steady_clock::now(), what});
    }
    return result;
  }
  std::atomic<bool> cut_{false};
  std::mutex mu_;
  std::vector<Write> writes_;
};

// One leader-elected operator as the manager wires it: the elector on a client of its own, the
// controller's clients fenced by the lease (fencedConfig).
struct FencedOperator {
  std::unique_ptr<KubeClient> election_real;
  std::unique_ptr<Recorder> election;
  std::unique_ptr<LeaderElector> elector;
  std::unique_ptr<KubeClient> fenced_real;
  std::unique_ptr<Recorder> writes;
  std::unique_ptr<OperatorInstance> op;
  std::thread thread;
  std::thread starter;
  std::atomic<bool> leading{false};
  std::atomic<bool> lost{false};
  std::chrono::steady_clock::time_point lost_at;

  FencedOperator(const KubeConfig& config, const std::string& ns, const std::string& id)
      : election_real(std::move(*createCurlKubeClient(config, realClock(), nullptr))),
        election(std::make_unique<Recorder>(*election_real)) {
    elector = std::make_unique<LeaderElector>(*election, realClock(), testLease(ns, id));
    KubeConfig slow = config;
    slow.qps = 4;  // a long create loop
    slow.burst = 1;
    fenced_real = std::move(
        *createCurlKubeClient(fencedConfig(slow, *elector, realClock()), realClock(), nullptr));
    writes = std::make_unique<Recorder>(*fenced_real);
    op = std::make_unique<OperatorInstance>(*writes, ns, nullptr, [](ControllerConfig& cc) {
      cc.status_batch_period = Duration::zero();
    });
    thread = std::thread([this] {
      elector->run(
          [this] {
            leading = true;
            starter = std::thread([this] { (void)op->start(); });
          },
          [this] {
            leading = false;
            op->stop();
            if (starter.joinable()) starter.join();
          },
          [this] {
            lost_at = std::chrono::steady_clock::now();
            lost = true;
          });
    });
  }
  ~FencedOperator() {
    elector->stop();
    if (thread.joinable()) thread.join();
    op->stop();
    if (starter.joinable()) starter.join();
  }
};

// A leader cut off from its lease in the middle of a long pod-create loop stops writing at the
// lease's renew deadline: no write of the old leader lands after the new leader's first write.
TEST_F(DisruptionIT, ALeaderCutOffFromItsLeaseWritesNothingAfterItsSuccessorStarts) {
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  ASSERT_TRUE(config) << config.error().toString();
  auto a = std::make_unique<FencedOperator>(*config, ns_, "operator-a");
  ASSERT_TRUE(waitFor([&] { return a->leading.load(); }, std::chrono::seconds{10}));
  auto b = std::make_unique<FencedOperator>(*config, ns_, "operator-b");

  auto tj = trainingJob(ns_, "big", 60);
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, tj));
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "big").size() >= 6; },
                      std::chrono::seconds{30}));
  a->election->partition();  // renewals fail; a's other connections still work
  auto cut_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(waitFor([&] { return b->leading.load(); }, std::chrono::seconds{20}));
  ASSERT_TRUE(a->lost.load()) << "the old leader knows it lost before the successor leads";
  EXPECT_LE(a->lost_at - cut_at, std::chrono::milliseconds{3600})
      << "loss declared at the renew deadline (3 s) after the last renewal";
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "big").size() == 60; },
                      std::chrono::seconds{60}));
  ASSERT_TRUE(waitFor([&] { return !b->writes->writes().empty(); }));

  auto old_writes = a->writes->writes();
  auto new_writes = b->writes->writes();
  ASSERT_FALSE(old_writes.empty());
  auto last_old = std::max_element(old_writes.begin(), old_writes.end(),
                                   [](auto& x, auto& y) { return x.answered < y.answered; });
  auto first_new = std::min_element(new_writes.begin(), new_writes.end(),
                                    [](auto& x, auto& y) { return x.sent < y.sent; });
  EXPECT_LT(last_old->answered, first_new->sent)
      << "old leader's last write (" << last_old->what << ") answered "
      << std::chrono::duration_cast<std::chrono::milliseconds>(last_old->answered - first_new->sent)
             .count()
      << " ms after the new leader sent its first (" << first_new->what << ")";
  EXPECT_LT(old_writes.size(), 60u) << "the old leader did not finish the loop";
}

}  // namespace
}  // namespace c4::op::it
