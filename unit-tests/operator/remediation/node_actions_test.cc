// Node cordon/taint bookkeeping, the circuit breaker and dry-run, against an in-memory store.
#include "operator/remediation/node_actions.h"

#include <gtest/gtest.h>

#include "testing/fake_kube_client.h"

namespace c4::op {
namespace {

using std::chrono::minutes;

Json node(const std::string& name, bool unschedulable = false) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"uid", "uid-" + name}}},
          {"spec", {{"unschedulable", unschedulable}}}};
}

struct Fixture {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  EventRecorder events{api, clock, "c4-operator", "test", nullptr};
  explicit Fixture(int nodes) {
    for (int i = 0; i < nodes; ++i) api.put(resources::nodes(), node("node-" + std::to_string(i)));
  }
  NodeRemediator remediator(NodeActionConfig config) {
    return NodeRemediator(api, clock, events, config, nullptr);
  }
  Json get(const std::string& name) { return *api.peek(resources::nodes(), "", name); }
  std::vector<std::string> eventReasons() {
    std::vector<std::string> out;
    for (const auto& e : api.createdOfKind("Event")) out.push_back(e["reason"]);
    return out;
  }
};

NodeActionConfig permissive() {
  NodeActionConfig c;
  c.max_fraction = 0.5;
  c.max_cordons_per_window = 10;
  return c;
}

TEST(NodeActionsTest, CordonTaintsAndRecordsWhoWhyWhen) {
  Fixture f(4);
  auto r = f.remediator(permissive());
  auto outcome = r.cordon("node-1", "hang: ranks 3,4 wait on rank 5 for 62 s");
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kCordoned);
  Json n = f.get("node-1");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  ASSERT_EQ(n["spec"]["taints"].size(), 1u);
  EXPECT_EQ(n["spec"]["taints"][0]["key"], "c4.dev/faulty");
  EXPECT_EQ(n["spec"]["taints"][0]["effect"], "NoSchedule");
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "c4-operator");
  EXPECT_NE(annotationOf(n, "c4.dev/cordon-reason").find("rank 5"), std::string::npos);
  EXPECT_FALSE(annotationOf(n, "c4.dev/cordon-time").empty());
  EXPECT_EQ(annotationOf(n, "c4.dev/was-already-cordoned"), "false");
  EXPECT_EQ(f.eventReasons(), std::vector<std::string>{"NodeCordoned"});
  auto events = f.api.createdOfKind("Event");
  EXPECT_EQ(events[0]["involvedObject"]["kind"], "Node");
  EXPECT_EQ(events[0]["involvedObject"]["name"], "node-1");
  EXPECT_EQ(events[0]["type"], "Warning");

  EXPECT_EQ(*r.cordon("node-1", "again"), CordonOutcome::kAlreadyOurs) << "idempotent";
  EXPECT_EQ(f.get("node-1")["spec"]["taints"].size(), 1u);

  auto un = r.uncordon("node-1");
  ASSERT_TRUE(un);
  EXPECT_EQ(*un, UncordonOutcome::kUncordoned);
  n = f.get("node-1");
  EXPECT_EQ(n["spec"]["unschedulable"], false);
  EXPECT_TRUE(n["spec"]["taints"].empty());
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "");
}

TEST(NodeActionsTest, NeverUncordonsWhatSomeoneElseCordoned) {
  Fixture f(4);
  f.api.put(resources::nodes(), node("node-2", /*unschedulable=*/true));  // an admin's cordon
  auto r = f.remediator(permissive());
  ASSERT_EQ(*r.cordon("node-2", "nic fault"), CordonOutcome::kCordoned);
  EXPECT_EQ(annotationOf(f.get("node-2"), "c4.dev/was-already-cordoned"), "true");
  EXPECT_EQ(*r.uncordon("node-2"), UncordonOutcome::kTaintRemovedKeptCordon);
  Json n = f.get("node-2");
  EXPECT_EQ(n["spec"]["unschedulable"], true) << "the admin's cordon stays";
  EXPECT_TRUE(n["spec"]["taints"].empty());

  EXPECT_EQ(*r.uncordon("node-3"), UncordonOutcome::kNotOurs) << "not ours: untouched";
}

TEST(NodeActionsTest, BreakerCapsTheFractionOfNodes) {
  Fixture f(10);
  NodeActionConfig c = permissive();
  c.max_fraction = 0.2;  // 2 of 10
  auto r = f.remediator(c);
  EXPECT_EQ(*r.cordon("node-0", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(*r.cordon("node-2", "x"), CordonOutcome::kBreakerOpen);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], false);
  EXPECT_EQ(f.eventReasons().back(), "CordonSkipped");
}

TEST(NodeActionsTest, BreakerCapsTheRateAndRecoversAfterTheWindow) {
  Fixture f(100);
  NodeActionConfig c = permissive();
  c.max_cordons_per_window = 2;
  c.window = minutes{60};
  auto r = f.remediator(c);
  EXPECT_EQ(*r.cordon("node-0", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(*r.cordon("node-2", "x"), CordonOutcome::kBreakerOpen);
  f.clock.advance(minutes{61});
  EXPECT_EQ(*r.cordon("node-2", "x"), CordonOutcome::kCordoned);
}

TEST(NodeActionsTest, DryRunDecidesButDoesNotAct) {
  Fixture f(4);
  NodeActionConfig c = permissive();
  c.dry_run = true;
  auto r = f.remediator(c);
  EXPECT_EQ(*r.cordon("node-0", "x"), CordonOutcome::kDryRun);
  Json n = f.get("node-0");
  EXPECT_EQ(n["spec"]["unschedulable"], false);
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "");
  EXPECT_EQ(f.eventReasons(), std::vector<std::string>{"CordonDryRun"});
}

TEST(NodeActionsTest, MissingNodeIsAnErrorAndChangesNothing) {
  Fixture f(2);
  auto r = f.remediator(permissive());
  auto outcome = r.cordon("ghost", "x");
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(f.eventReasons().empty());
}

TEST(NodeActionsTest, ConflictIsRetriedFromAFreshRead) {
  // Another writer of the Node (the kubelet's heartbeat) wins a race: the API answers 409 and the
  // remediator starts over from a fresh read instead of failing the cordon/uncordon.
  Fixture f(4);
  auto r = f.remediator(permissive());
  f.api.failNext(Error{ErrorCode::kConflict, "the object has been modified"});
  auto outcome = r.cordon("node-2", "slow NIC");
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kCordoned);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], true);
  f.api.failNext(Error{ErrorCode::kConflict, "the object has been modified"});
  auto un = r.uncordon("node-2");
  ASSERT_TRUE(un) << un.error().toString();
  EXPECT_EQ(*un, UncordonOutcome::kUncordoned);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], false);
  // Other errors are not retried.
  f.api.failNext(Error{ErrorCode::kUnavailable, "connection refused"});
  auto failed = r.cordon("node-3", "x");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace c4::op
