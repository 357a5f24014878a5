// Disruptive integration tests, run serially (they restart the API server or hold the shared
// lease): leader election between two operators and recovery from an API server restart.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "harness.h"
#include "operator/manager/leader_election.h"

namespace c4::op::it {
namespace {

class DisruptionIT : public NamespacedTest {
 protected:
  DisruptionIT() : NamespacedTest("op-dis") {}
};

struct Candidate {
  std::unique_ptr<LeaderElector> elector;
  std::thread thread;
  std::atomic<bool> leading{false};
  Candidate(KubeClient& client, const std::string& ns, const std::string& id, bool release) {
    LeaderElectionConfig c;
    c.lease_namespace = ns;
    c.lease_name = "c4-operator";
    c.identity = id;
    c.lease_duration = std::chrono::seconds{4};
    c.renew_deadline = std::chrono::seconds{3};
    c.retry_period = std::chrono::milliseconds{500};
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

}  // namespace
}  // namespace c4::op::it
