// Leader election against an in-memory Lease store, on simulated time.
#include "operator/manager/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kube/client/forwarding_kube_client.h"
#include "testing/fake_kube_client.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library
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
  kube::testing::FakeKubeClient api;
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
  kube::testing::FakeKubeClient api;
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
  kube::testing::FakeKubeClient api;
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
  kube::testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  LeaderElector b(api, clock, configFor("b"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  ASSERT_FALSE(b.tryAcquireOrRenew());
  ASSERT_TRUE(a.release());
  EXPECT_TRUE(b.tryAcquireOrRenew());
}

TEST(LeaderElectionTest, ConcurrentUpdateLosesOnConflict) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
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
  kube::testing::FakeKubeClient api;
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
  kube::testing::FakeKubeClient api;
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

Json leaseSpec(kube::testing::FakeKubeClient& api) {
  return (*api.peek(resources::leases(), "c4-system", "c4-operator"))["spec"];
}

TEST(LeaderElectionTest, LeaseTransitionsCountEveryNewHolderAndSurviveRenewAndRelease) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
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

TEST(LeaderElectionTest, AcquireRetriesAreJittered) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  LeaderElector holder(api, clock, configFor("holder"));
  ASSERT_TRUE(holder.tryAcquireOrRenew());
  LeaderElectionConfig config = configFor("a");
  config.random = [] { return 0.5; };  // 2 s * (1 + 1.2 * 0.5) = 3.2 s
  LeaderElector a(api, clock, config);
  std::thread runner([&] { a.run([] {}, [] {}); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  int after_first = api.calls();
  clock.advance(std::chrono::milliseconds{3199});
  std::this_thread::sleep_for(std::chrono::milliseconds{30});
  EXPECT_EQ(api.calls(), after_first) << "not before retryPeriod * (1 + 1.2 * 0.5)";
  clock.advance(std::chrono::milliseconds{1});
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
  while (api.calls() == after_first && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  EXPECT_GT(api.calls(), after_first);
  a.stop();
  runner.join();
  EXPECT_FALSE(a.isLeader());
}

// Forwards to the fake and lets `lag` of simulated time pass while each lease write is in
// flight, so a write's send time and its answer differ.
class LaggingClient final : public ForwardingKubeClient {
 public:
  LaggingClient(kube::testing::FakeKubeClient& real, SimulatedClock& clock, Duration lag)
      : ForwardingKubeClient(real), clock_(clock), lag_(lag) {}
  Result<Json> create(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    clock_.advance(lag_);
    return target().create(t, ns, obj, o);
  }
  Result<Json> update(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    clock_.advance(lag_);
    return target().update(t, ns, obj, o);
  }

 private:
  SimulatedClock& clock_;
  Duration lag_;
};

TEST(LeaderElectionTest, TheLeaseIsCountedFromWhenTheWriteWasSent) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  LaggingClient slow(api, clock, seconds{3});
  LeaderElector a(slow, clock, configFor("a"));
  EXPECT_EQ(a.leaseValidUntil(), MonoTime{}) << "nothing held yet";
  EXPECT_FALSE(a.mayWrite(clock.monoNow()));
  MonoTime sent = clock.monoNow();
  ASSERT_TRUE(a.tryAcquireOrRenew());  // the create is answered 3 s after it was sent
  EXPECT_EQ(clock.monoNow(), sent + seconds{3});
  EXPECT_EQ(a.leaseValidUntil(), sent + seconds{10}) << "send time + renewDeadline";
  EXPECT_TRUE(a.mayWrite(sent + seconds{10} - std::chrono::nanoseconds{1}));
  EXPECT_FALSE(a.mayWrite(sent + seconds{10}));
  clock.advance(seconds{2});
  MonoTime renew_sent = clock.monoNow();
  ASSERT_TRUE(a.tryAcquireOrRenew());
  EXPECT_EQ(a.leaseValidUntil(), renew_sent + seconds{10});
  ASSERT_TRUE(a.release());
  EXPECT_EQ(a.leaseValidUntil(), MonoTime{});
  EXPECT_FALSE(a.mayWrite(clock.monoNow()));
}

TEST(LeaderElectionTest, ACandidateWhoseTermLapsedCanAcquireAgain) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  ASSERT_TRUE(a.tryAcquireOrRenew());
  clock.advance(seconds{11});  // past renewDeadline without a renewal
  EXPECT_FALSE(a.mayWrite(clock.monoNow()));
  ASSERT_TRUE(a.tryAcquireOrRenew()) << "nobody else took it: a new term";
  EXPECT_EQ(a.leaseValidUntil(), clock.monoNow() + seconds{10});
  EXPECT_EQ(leaseSpec(api)["leaseTransitions"], 0) << "still the same holder";
}

TEST(LeaderElectionTest, LossIsDeclaredExactlyAtTheRenewDeadlineAndCallsAreBoundedByIt) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  LeaderElectionConfig config = configFor("a");
  config.retry_period = seconds{3};  // renewals at +3, +6, +9; the deadline at +10
  LeaderElector a(api, clock, config);
  std::atomic<bool> lost{false};
  std::atomic<bool> stopped{false};
  MonoTime lost_at{};
  bool lost_may_write = true;
  bool voluntary = true;
  MonoTime acquired = clock.monoNow();
  std::thread runner([&] {
    voluntary = a.run([] {}, [&] { stopped = true; },
                      [&] {
                        lost_at = clock.monoNow();
                        lost_may_write = a.mayWrite(clock.monoNow());
                        lost = true;
                      });
  });
  ASSERT_TRUE(clock.awaitWaiters(1));  // leading, waiting for the first renewal
  EXPECT_TRUE(a.isLeader());
  EXPECT_EQ(a.leaseValidUntil(), acquired + seconds{10});
  api.failAlways(Error{ErrorCode::kUnavailable, "API server unreachable"});
  for (int i = 1; i <= 3; ++i) {
    int before = api.calls();
    clock.advance(seconds{3});
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    while (api.calls() == before && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(clock.awaitWaiters(1));
    EXPECT_FALSE(lost.load()) << "renewal " << i << " failed, but the deadline has not passed";
    EXPECT_TRUE(a.mayWrite(clock.monoNow()));
  }
  // Each failed renewal's read was bounded by what was left of the lease: 7, 4 and 1 s.
  auto timeouts = api.timeouts();
  ASSERT_GE(timeouts.size(), 4u);
  EXPECT_EQ(timeouts[timeouts.size() - 3], seconds{7});
  EXPECT_EQ(timeouts[timeouts.size() - 2], seconds{4});
  EXPECT_EQ(timeouts[timeouts.size() - 1], seconds{1});
  // +10 s: the elector wakes at the deadline itself (its next renewal would be at +12).
  EXPECT_FALSE(a.mayWrite(acquired + seconds{10}));
  clock.advance(seconds{1});
  runner.join();
  EXPECT_TRUE(lost.load());
  EXPECT_EQ(lost_at, acquired + seconds{10}) << "loss declared at send time + renewDeadline";
  EXPECT_FALSE(lost_may_write);
  EXPECT_TRUE(stopped.load());
  EXPECT_FALSE(voluntary);
  EXPECT_EQ(a.leaseValidUntil(), MonoTime{});
  EXPECT_FALSE(a.isLeader());
}

TEST(LeaderElectionTest, ARenewalThatFindsAnotherHolderLosesAtOnce) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  LeaderElector a(api, clock, configFor("a"));
  std::atomic<bool> lost{false};
  bool voluntary = true;
  std::thread runner([&] { voluntary = a.run([] {}, [] {}, [&] { lost = true; }); });
  ASSERT_TRUE(clock.awaitWaiters(1));
  MonoTime deadline = a.leaseValidUntil();
  auto lease = *api.peek(resources::leases(), "c4-system", "c4-operator");
  lease["spec"]["holderIdentity"] = "intruder";
  ASSERT_TRUE(api.update(resources::leases(), "c4-system", lease, {}));
  clock.advance(seconds{2});  // the next renewal sees the intruder
  runner.join();
  EXPECT_TRUE(lost.load());
  EXPECT_FALSE(voluntary);
  EXPECT_LT(clock.monoNow(), deadline) << "no waiting for the deadline";
  EXPECT_FALSE(a.mayWrite(clock.monoNow()));
}

// A Lease whose fields have other types (issue #27): never throws; an unreadable holder is no
// holder, so a candidate takes the lease over and writes a well-formed record.
TEST(LeaderElectionTest, ALeaseWithFieldsOfAnotherTypeIsTakenOver) {
  SimulatedClock clock;
  kube::testing::FakeKubeClient api;
  api.put(resources::leases(), {{"apiVersion", "coordination.k8s.io/v1"},
                                {"kind", "Lease"},
                                {"metadata", {{"name", "c4-operator"}, {"namespace", "c4-system"}}},
                                {"spec",
                                 {{"holderIdentity", 5},
                                  {"renewTime", 7},
                                  {"leaseDurationSeconds", "15"},
                                  {"leaseTransitions", "x"}}}});
  LeaderElector a(api, clock, configFor("a"));
  bool held = false;
  ASSERT_NO_THROW(held = a.tryAcquireOrRenew());
  EXPECT_TRUE(held);
  auto lease = api.peek(resources::leases(), "c4-system", "c4-operator");
  ASSERT_TRUE(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "a");
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  ASSERT_NO_THROW(held = a.tryAcquireOrRenew());
  EXPECT_TRUE(held);
  Status released = okStatus();
  ASSERT_NO_THROW(released = a.release());
  EXPECT_TRUE(released);
}

}  // namespace
}  // namespace c4::op
