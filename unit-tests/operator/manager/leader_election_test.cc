// Leader election against an in-memory Lease store, on simulated time.
#include "operator/manager/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/fake_kube_client.h"

namespace c4::op {
namespace {

using std::chrono::seconds;

LeaderElectionConfig configFor(const std::string& id) {
  LeaderElectionConfig c;
  c.lease_namespace = "c4-system";
  c.lease_name = "c4-operator";
  c.identity = id;
  c.lease_duration = seconds{15};
  c.renew_deadline = seconds{10};
  c.retry_period = seconds{2};
  return c;
}

TEST(LeaderElectionTest, FirstCandidateCreatesTheLease) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  EXPECT_TRUE(a.tryAcquireOrRenew());
  auto lease = api.peek(resources::leases(), "c4-system", "c4-operator");
  ASSERT_TRUE(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "a");
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 15);
  EXPECT_TRUE((*lease)["spec"].contains("renewTime"));
}

TEST(LeaderElectionTest, SecondCandidateWaitsUntilTheLeaseExpires) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  LeaderElector b(api, clock, configFor("b"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_FALSE(b.tryAcquireOrRenew());
  clock.advance(seconds{14});
  EXPECT_FALSE(b.tryAcquireOrRenew()) << "b observed the record 14 s ago: not expired";
  clock.advance(seconds{1});
  EXPECT_TRUE(b.tryAcquireOrRenew()) << "15 s without renewal: takeover";
  auto lease = api.peek(resources::leases(), "c4-system", "c4-operator");
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  EXPECT_FALSE(a.tryAcquireOrRenew()) << "the old leader sees b's fresh record";
}

TEST(LeaderElectionTest, RenewalsKeepOthersOut) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  LeaderElector b(api, clock, configFor("b"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  for (int i = 0; i < 20; ++i) {
    clock.advance(seconds{2});
    ASSERT_TRUE(a.tryAcquireOrRenew());
    ASSERT_FALSE(b.tryAcquireOrRenew()) << "iteration " << i;
  }
}

TEST(LeaderElectionTest, ReleaseLetsASuccessorTakeOverAtOnce) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  LeaderElector b(api, clock, configFor("b"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  ASSERT_FALSE(b.tryAcquireOrRenew());
  ASSERT_TRUE(a.release());
  EXPECT_TRUE(b.tryAcquireOrRenew());
}

TEST(LeaderElectionTest, ConcurrentUpdateLosesOnConflict) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  clock.advance(seconds{20});
  // b and c both see an expired lease; the first write wins, the second conflicts.
  LeaderElector b(api, clock, configFor("b"));
  LeaderElector c(api, clock, configFor("c"));
  ASSERT_FALSE(b.tryAcquireOrRenew());  // first observation starts b's expiry timer
  ASSERT_FALSE(c.tryAcquireOrRenew());
  clock.advance(seconds{15});
  EXPECT_TRUE(b.tryAcquireOrRenew());
  EXPECT_FALSE(c.tryAcquireOrRenew());
}

TEST(LeaderElectionTest, RunLeadsThenReleasesOnStop) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};
  std::string holder_while_stopping;
  bool voluntary = false;
  std::thread runner([&] {
    voluntary = a.run([&] { started = true; },
                      [&] {
                        // The guarded work stops while the lease is still ours: no successor
                        // can start before it has.
                        auto lease = api.peek(resources::leases(), "c4-system", "c4-operator");
                        holder_while_stopping = (*lease)["spec"]["holderIdentity"];
                        stopped = true;
                      });
  });
  ASSERT_TRUE(clock.awaitWaiters(1));  // leading, waiting for the next renewal
  EXPECT_TRUE(started.load());
  EXPECT_TRUE(a.isLeader());
  clock.advance(seconds{2});
  ASSERT_TRUE(clock.awaitWaiters(1));
  a.stop();
  runner.join();
  EXPECT_TRUE(voluntary);
  EXPECT_TRUE(stopped.load());
  EXPECT_EQ(holder_while_stopping, "a");
  auto lease = api.peek(resources::leases(), "c4-system", "c4-operator");
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "");
}

TEST(LeaderElectionTest, RunGivesUpWhenRenewalsFailPastTheDeadline) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  std::atomic<bool> stopped{false};
  bool voluntary = true;
  std::thread runner([&] { voluntary = a.run([] {}, [&] { stopped = true; }); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  // Someone else takes the lease over (e.g. after a partition): our renewals now fail.
  auto lease = *api.peek(resources::leases(), "c4-system", "c4-operator");
  lease["spec"]["holderIdentity"] = "intruder";
  ASSERT_TRUE(api.update(resources::leases(), "c4-system", lease, {}));
  // Each step: advance to the next renewal, wait (really) until the elector made its API call,
  // then until it parks on the clock again.
  for (int i = 0; i < 10 && !stopped.load(); ++i) {
    int before = api.calls();
    clock.advance(seconds{2});
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    while (api.calls() == before && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    if (!stopped.load()) clock.awaitWaiters(1, std::chrono::milliseconds{200});
  }
  runner.join();
  EXPECT_FALSE(voluntary);
  EXPECT_TRUE(stopped.load());
  EXPECT_FALSE(a.isLeader());
}

Json leaseSpec(testing::FakeKubeClient& api) {
  return (*api.peek(resources::leases(), "c4-system", "c4-operator"))["spec"];
}

TEST(LeaderElectionTest, LeaseTransitionsCountEveryNewHolderAndSurviveRenewAndRelease) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  LeaderElector b(api, clock, configFor("b"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 0) << "the first term";
  clock.advance(seconds{2});
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 0) << "a renewal is no transition";
  ASSERT_TRUE(a.release());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 0) << "a release keeps the count";
  EXPECT_EQ(leaseSpec(api)["holderIdentity"], "");
  ASSERT_TRUE(b.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 1) << "taken from nobody (released): counted";
  ASSERT_TRUE(b.release());
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 2) << "a again, after b";
  std::string acquired = leaseSpec(api)["acquireTime"];
  clock.advance(seconds{2});
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 2);
  EXPECT_EQ(leaseSpec(api)["acquireTime"], acquired) << "the term's start is kept on renew";
  // A takeover after expiry counts too.
  ASSERT_FALSE(b.tryAcquireOrRenew());
  clock.advance(seconds{15});
  ASSERT_TRUE(b.tryAcquireOrRenew());
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 3);
}

}  // namespace
}  // namespace c4::op
