// Node cordon/taint bookkeeping, the circuit breaker (state kept in a ConfigMap) and dry-run,
// against an in-memory store; the cache the remediator reads is the store itself unless a test
// makes it stale.
#include "operator/remediation/node_actions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "kube/client/forwarding_kube_client.h"
#include "testing/fake_kube_client.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library
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
  kube::testing::FakeKubeClient api;
  EventRecorder events{api, clock, "c4-operator", "test", nullptr};
  int node_count = 0;
  // What the node cache shows: the store itself, or a stale copy a test sets.
  std::map<std::string, Json> stale;
  explicit Fixture(int nodes) : node_count(nodes) {
    for (int i = 0; i < nodes; ++i) api.put(resources::nodes(), node("node-" + std::to_string(i)));
  }
  std::optional<Json> cached(const std::string& name) {
    if (auto it = stale.find(name); it != stale.end()) return it->second;
    return api.peek(resources::nodes(), "", name);
  }
  std::vector<Json> cachedAll() {
    std::vector<Json> out;
    for (int i = 0; i < node_count; ++i) {
      if (auto n = cached("node-" + std::to_string(i))) out.push_back(*n);
    }
    return out;
  }
  NodeRemediator remediator(NodeActionConfig config, EventRecorder* recorder = nullptr) {
    return NodeRemediator(
        api, clock, recorder != nullptr ? *recorder : events, config,
        [this](const std::string& name) { return cached(name); }, [this] { return cachedAll(); },
        nullptr);
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

// A person returned a node to service with kubectl uncordon + taint removal but left C4's
// bookkeeping annotations: the node takes no breaker slot and a new fault cordons it again.
TEST(NodeActionsTest, ANodeReturnedToServiceByHandIsCordonedAgain) {
  Fixture f(10);
  NodeActionConfig c = permissive();
  c.max_fraction = 0.1;  // 1 of 10
  c.window = minutes(10);
  auto r = f.remediator(c);
  ASSERT_EQ(*r.cordon("node-0", "first fault"), CordonOutcome::kCordoned);
  Json n = f.get("node-0");
  n["spec"]["unschedulable"] = false;   // kubectl uncordon
  n["spec"]["taints"] = Json::array();  // kubectl taint node-0 c4.dev/faulty:NoSchedule-
  f.api.put(resources::nodes(), n);
  ASSERT_EQ(annotationOf(f.get("node-0"), "c4.dev/cordoned-by"), "c4-operator");
  f.clock.advance(minutes(11));  // the first cordon left the rate window
  EXPECT_EQ(*r.cordon("node-3", "another node"), CordonOutcome::kCordoned)
      << "the returned node still took the only slot";
  f.clock.advance(minutes(11));
  Json m = f.get("node-3");
  m["spec"]["unschedulable"] = false;
  m["spec"]["taints"] = Json::array();
  f.api.put(resources::nodes(), m);
  EXPECT_EQ(*r.cordon("node-0", "second fault"), CordonOutcome::kCordoned);
  n = f.get("node-0");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  ASSERT_EQ(n["spec"]["taints"].size(), 1u);
  EXPECT_NE(annotationOf(n, "c4.dev/cordon-reason").find("second fault"), std::string::npos);
  EXPECT_EQ(*r.cordon("node-0", "again"), CordonOutcome::kAlreadyOurs);
}

TEST(NodeActionsTest, ASmallClusterMayStillCordonOneNode) {
  Fixture f(5);
  NodeActionConfig c = permissive();
  c.max_fraction = 0.1;  // 0.5 of 5 nodes: still one
  auto r = f.remediator(c);
  EXPECT_EQ(*r.cordon("node-0", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kBreakerOpen);
  c.max_fraction = 0.0;  // off
  Fixture g(5);
  auto off = g.remediator(c);
  EXPECT_EQ(*off.cordon("node-0", "x"), CordonOutcome::kBreakerOpen);
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
  // Nor a fault history: it would make the node a repeat offender.
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  ASSERT_TRUE(r.recordFault("node-0", {t0, "commHang", "team/a"}));
  EXPECT_TRUE(faultHistoryOf(f.get("node-0")).empty());
  EXPECT_TRUE(f.api.patches().empty()) << "a dry run patched a Node";
}

TEST(NodeActionsTest, MissingNodeIsAnErrorAndChangesNothing) {
  Fixture f(2);
  auto r = f.remediator(permissive());
  auto outcome = r.cordon("ghost", "x");
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(f.eventReasons().empty());
}

TEST(NodeActionsTest, NodesComeFromTheCacheAndAStaleOneCostsOneRetry) {
  Fixture f(4);
  auto r = f.remediator(permissive());
  ASSERT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kCordoned);
  EXPECT_EQ(f.api.gets("nodes"), 0) << "an up-to-date cache needs no read of the node";
  EXPECT_EQ(f.api.patchCount(), 1) << "one conditional patch, not GET + PUT";

  // The kubelet's heartbeat changed node-2 after the cache saw it: the patch carries the cached
  // resourceVersion, the API refuses it (409), a fresh read and a second patch succeed.
  f.stale["node-2"] = f.get("node-2");
  Json heartbeat = f.get("node-2");
  heartbeat["status"] = {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  f.api.put(resources::nodes(), heartbeat);
  auto outcome = r.cordon("node-2", "slow NIC");
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kCordoned);
  Json n = f.get("node-2");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  EXPECT_EQ(n["status"]["conditions"][0]["type"], "Ready") << "the heartbeat is not lost";
  EXPECT_EQ(f.api.gets("nodes"), 1);
  auto recent = r.recentCordons();
  ASSERT_TRUE(recent);
  EXPECT_EQ(*recent, (std::vector<std::string>{"node-1", "node-2"}))
      << "the retry took no second breaker slot";

  // Uncordon from a stale cache entry: same story.
  f.stale["node-2"] = f.get("node-2");
  Json again = f.get("node-2");
  again["status"]["conditions"][0]["status"] = "True";
  again["metadata"]["labels"] = {{"x", "y"}};
  f.api.put(resources::nodes(), again);
  auto un = r.uncordon("node-2");
  ASSERT_TRUE(un) << un.error().toString();
  EXPECT_EQ(*un, UncordonOutcome::kUncordoned);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], false);
  EXPECT_EQ(annotationOf(f.get("node-2"), "c4.dev/cordoned-by"), "");
  // Other errors are not retried.
  f.stale.clear();
  f.api.failNext(Error{ErrorCode::kUnavailable, "connection refused"});
  auto failed = r.cordon("node-3", "x");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(f.get("node-3")["spec"]["unschedulable"], false);
}

TEST(NodeActionsTest, BreakerWindowSurvivesARestartOfTheOperator) {
  Fixture f(100);
  NodeActionConfig c = permissive();
  c.max_cordons_per_window = 2;
  {
    auto first = f.remediator(c);
    EXPECT_EQ(*first.cordon("node-0", "x"), CordonOutcome::kCordoned);
    EXPECT_EQ(*first.cordon("node-1", "x"), CordonOutcome::kCordoned);
  }
  // A new process (or the new leader after a failover) reads the window from the cluster.
  auto second = f.remediator(c);
  EXPECT_EQ(*second.cordon("node-2", "x"), CordonOutcome::kBreakerOpen);
  auto state = f.api.peek(resources::configMaps(), c.state_namespace, c.state_name);
  ASSERT_TRUE(state);
  EXPECT_NE((*state)["data"]["cordons.json"].get<std::string>().find("node-1"), std::string::npos);
  f.clock.advance(minutes{61});
  EXPECT_EQ(*second.cordon("node-2", "x"), CordonOutcome::kCordoned);
}

// Forwards to the fake, but runs `before_update` (once) before the first ConfigMap update: a
// second worker takes a breaker slot between our read and our write.
class RacingClient final : public ForwardingKubeClient {
 public:
  RacingClient(kube::testing::FakeKubeClient& real, std::function<void()> before_update)
      : ForwardingKubeClient(real), before_update_(std::move(before_update)) {}
  Result<Json> create(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    race(t);
    return target().create(t, ns, obj, o);
  }
  Result<Json> update(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    race(t);
    return target().update(t, ns, obj, o);
  }

 private:
  void race(const ResourceType& t) {
    if (t.resource != "configmaps" || !before_update_) return;
    auto run = std::move(before_update_);
    before_update_ = nullptr;
    run();
  }
  std::function<void()> before_update_;
};

TEST(NodeActionsTest, CheckingAndRecordingASlotIsOneAtomicStep) {
  Fixture f(100);
  NodeActionConfig c = permissive();
  c.max_cordons_per_window = 2;
  auto other = f.remediator(c);
  ASSERT_EQ(*other.cordon("node-0", "x"), CordonOutcome::kCordoned);  // one slot left
  RacingClient racing(f.api,
                      [&] { EXPECT_EQ(*other.cordon("node-1", "x"), CordonOutcome::kCordoned); });
  NodeRemediator ours(
      racing, f.clock, f.events, c, [&](const std::string& n) { return f.cached(n); },
      [&] { return f.cachedAll(); }, nullptr);
  // We read the state with one slot free, the other worker takes it, our write conflicts, and
  // the re-check finds the breaker open: never three cordons in a window of two.
  EXPECT_EQ(*ours.cordon("node-2", "x"), CordonOutcome::kBreakerOpen);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], false);
  EXPECT_EQ(f.get("node-1")["spec"]["unschedulable"], true);
}

TEST(NodeActionsTest, AJobsDryRunReportsWithoutActingOrTakingASlot) {
  Fixture f(4);
  auto r = f.remediator(permissive());
  EXPECT_EQ(*r.cordon("node-0", "x", /*dry_run=*/true), CordonOutcome::kDryRun);
  EXPECT_EQ(f.get("node-0")["spec"]["unschedulable"], false);
  auto recent = r.recentCordons();
  ASSERT_TRUE(recent);
  EXPECT_TRUE(recent->empty());
}

// Two verdicts naming one node in one window: the cache still shows the node as it was before
// the first entry was written; the second write conflicts and is appended to a fresh read.
TEST(NodeFaultHistoryTest, TwoEntriesAgainstAStaleCacheAreBothKept) {
  Fixture f(2);
  auto r = f.remediator(permissive());
  f.stale["node-1"] = f.get("node-1");
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  ASSERT_TRUE(r.recordFault("node-1", {t0, "commHang", "team/a"}));
  ASSERT_TRUE(r.recordFault("node-1", {t0 + std::chrono::seconds{1}, "crash", "team/b"}));
  auto history = faultHistoryOf(f.get("node-1"));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].job, "team/a");
  EXPECT_EQ(history[1].job, "team/b");
  EXPECT_EQ(history[1].fault_class, "crash");
  // Every write carried the resourceVersion it was computed from.
  for (const auto& p : f.api.patches()) {
    EXPECT_FALSE(p.body["metadata"].value("resourceVersion", std::string{}).empty());
  }
}

TEST(NodeFaultHistoryTest, BoundedAndAMissingNodeIsAnError) {
  Fixture f(1);
  NodeActionConfig config = permissive();
  config.max_fault_history = 3;
  auto r = f.remediator(config);
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(r.recordFault(
        "node-0", {t0 + std::chrono::seconds{i}, "crash", "ns/job-" + std::to_string(i)}));
  }
  auto history = faultHistoryOf(f.get("node-0"));
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history.front().job, "ns/job-2");
  auto missing = r.recordFault("node-9", {t0, "crash", "ns/job"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

// Reading never throws: fields of another type, a non-string annotation, a non-array value.
TEST(NodeFaultHistoryTest, MalformedValuesAreSkippedNotThrown) {
  Json node = {{"metadata", {{"name", "n"}}}};
  node["metadata"]["annotations"][kFaultHistoryAnnotation] =
      R"([{"time":7},{"time":"2027-01-15T08:00:00Z","class":3,"job":["x"]},)"
      R"({"time":"2027-01-15T08:00:01Z","class":"crash","job":"a/b"},null,"s"])";
  std::vector<NodeFaultRecord> history;
  EXPECT_NO_THROW(history = faultHistoryOf(node));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].fault_class, "");
  EXPECT_EQ(history[0].job, "");
  EXPECT_EQ(history[1].job, "a/b");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = 42;
  EXPECT_NO_THROW(history = faultHistoryOf(node));
  EXPECT_TRUE(history.empty());
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = R"({"time":"x"})";
  EXPECT_TRUE(faultHistoryOf(node).empty());
  node["metadata"]["annotations"] = "not an object";
  EXPECT_NO_THROW(history = faultHistoryOf(node));
  EXPECT_TRUE(history.empty());
}

// Wrong-typed fields (issue #27): the circuit breaker's ConfigMap and the Node are read with
// checked access; what cannot be read is ignored, and the cordon goes on.
TEST(NodeActionsTest, WrongTypedBreakerStateAndNodeFieldsAreIgnored) {
  Fixture f(4);
  NodeActionConfig config = permissive();
  f.api.put(resources::configMaps(),
            {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", config.state_name}, {"namespace", config.state_namespace}}},
             {"data",
              {{"cordons.json", R"([{"node":5,"unixNs":1},{"node":"node-3","unixNs":"x"},7,)"
                                R"({"node":"node-2","unixNs":1.5}])"}}}});
  Json odd = node("node-1");
  odd["spec"] = {{"unschedulable", "no"}, {"taints", Json::array({{{"key", 5}}, "x"})}};
  odd["metadata"]["annotations"] = {{"c4.dev/cordoned-by", 5}};
  f.api.put(resources::nodes(), odd);
  auto r = f.remediator(config);
  Result<std::vector<std::string>> recent = std::vector<std::string>{};
  ASSERT_NO_THROW(recent = r.recentCordons());
  ASSERT_TRUE(recent);
  EXPECT_TRUE(recent->empty()) << "no entry is readable";
  Result<CordonOutcome> outcome = CordonOutcome::kDryRun;
  ASSERT_NO_THROW(outcome = r.cordon("node-1", "hang"));
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kCordoned);
  Json n = f.get("node-1");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  EXPECT_EQ(annotationOf(n, "c4.dev/was-already-cordoned"), "false");
  ASSERT_EQ(n["spec"]["taints"].size(), 3u) << "the others' taints are kept as they are";
  Result<UncordonOutcome> back = UncordonOutcome::kNotOurs;
  ASSERT_NO_THROW(back = r.uncordon("node-1"));
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(*back, UncordonOutcome::kUncordoned);
  EXPECT_EQ(f.get("node-1")["spec"]["taints"].size(), 2u);
}

TEST(NodeFaultHistoryTest, WhatIsMalformedIsReported) {
  Json node = {{"metadata", {{"name", "n"}}}};
  std::string problem = "stale";
  EXPECT_TRUE(faultHistoryOf(node, &problem).empty());
  EXPECT_EQ(problem, "") << "no annotation: nothing wrong";
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = R"([{"time": 5, "class": 7}])";
  EXPECT_TRUE(faultHistoryOf(node, &problem).empty());
  EXPECT_EQ(problem, "entry 0: class is not a string");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] =
      R"([{"time":"2027-01-15T08:00:00Z","class":"crash","job":"a/b"},{"time":5}])";
  EXPECT_EQ(faultHistoryOf(node, &problem).size(), 1u);
  EXPECT_EQ(problem, "entry 1: time is not an RFC 3339 string");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = "{}";
  faultHistoryOf(node, &problem);
  EXPECT_EQ(problem, "the value is not a JSON array");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = 42;
  faultHistoryOf(node, &problem);
  EXPECT_EQ(problem, "the annotation is not a string");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] =
      R"([{"time":"2027-01-15T08:00:00Z","class":"crash","job":"a/b"}])";
  EXPECT_EQ(faultHistoryOf(node, &problem).size(), 1u);
  EXPECT_EQ(problem, "");
}

// Forwards to the fake, but refuses the next `refusals` Node patches with `error` (or, with
// `land`, lets them land and answers `error` anyway: the answer was lost). Counts Node patches.
class RefusingClient final : public ForwardingKubeClient {
 public:
  RefusingClient(kube::testing::FakeKubeClient& real, int refusals, Error error, bool land = false)
      : ForwardingKubeClient(real), refusals_(refusals), error_(std::move(error)), land_(land) {}
  Result<Json> patch(const ResourceType& t, std::string_view ns, std::string_view name,
                     PatchType type, const Json& body, const PatchOptions& o) override {
    if (t.resource != "nodes") return target().patch(t, ns, name, type, body, o);
    ++node_patches;
    if (refusals_ == 0) return target().patch(t, ns, name, type, body, o);
    --refusals_;
    if (land_) (void)target().patch(t, ns, name, type, body, o);
    return std::unexpected(error_);
  }
  int node_patches = 0;

 private:
  int refusals_;
  Error error_;
  bool land_;
};

NodeRemediator remediatorVia(Fixture& f, KubeClient& client, NodeActionConfig config) {
  return NodeRemediator(
      client, f.clock, f.events, std::move(config),
      [&f](const std::string& n) { return f.cached(n); }, [&f] { return f.cachedAll(); }, nullptr);
}

long countOf(const std::vector<std::string>& v, const std::string& s) {
  return std::count(v.begin(), v.end(), s);
}

// Issue #27: a cordon the API server refuses (403) is owed, not forgotten: its breaker record
// stays "owed" and the remediator retries it with backoff until it lands; one Warning Event on
// the node for the failures (rate-bounded), NodeCordoned once when it lands.
TEST(OwedNodeActionsTest, ACordonRefusedOnceIsRetriedUntilItLands) {
  Fixture f(4);
  RefusingClient refusing(f.api, 2, Error{ErrorCode::kPermissionDenied, "nodes is forbidden"});
  NodeActionConfig c = permissive();
  c.retry_initial = std::chrono::seconds{2};
  auto r = remediatorVia(f, refusing, c);
  auto outcome = r.cordon("node-1", "hang of rank 5");
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kOwed);
  EXPECT_EQ(f.get("node-1")["spec"]["unschedulable"], false);
  EXPECT_EQ(*r.owedCordons(), std::vector<std::string>{"node-1"});

  r.completeOwed();  // not due yet: the backoff holds it
  EXPECT_EQ(refusing.node_patches, 1);
  f.clock.advance(std::chrono::seconds{2});
  r.completeOwed();  // refused again; its Event is rate-bounded
  EXPECT_EQ(refusing.node_patches, 2);
  EXPECT_EQ(*r.owedCordons(), std::vector<std::string>{"node-1"});
  f.clock.advance(std::chrono::seconds{3});
  r.completeOwed();  // 2 s doubled: not due yet
  EXPECT_EQ(refusing.node_patches, 2);
  f.clock.advance(std::chrono::seconds{1});
  r.completeOwed();
  EXPECT_EQ(refusing.node_patches, 3);

  Json n = f.get("node-1");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "c4-operator");
  EXPECT_NE(annotationOf(n, "c4.dev/cordon-reason").find("rank 5"), std::string::npos);
  EXPECT_TRUE(r.owedCordons()->empty());
  EXPECT_EQ(*r.recentCordons(), std::vector<std::string>{"node-1"});
  auto reasons = f.eventReasons();
  EXPECT_EQ(countOf(reasons, "CordonFailed"), 1) << "failure Events are rate-bounded";
  EXPECT_EQ(countOf(reasons, "NodeCordoned"), 1);
  f.clock.advance(std::chrono::minutes{10});
  r.completeOwed();
  EXPECT_EQ(refusing.node_patches, 3) << "nothing is owed any more";
}

// Issue #27: the operator dies between the owed record (its breaker slot) and the Node patch
// (the failpoint stops the cordon there). A new process finds the record and completes it:
// exactly one cordon, the slot it held is the one it uses.
TEST(OwedNodeActionsTest, AnOwedCordonSurvivesARestartAndIsCompletedOnce) {
  Fixture f(100);
  NodeActionConfig c = permissive();
  c.max_cordons_per_window = 1;
  {
    NodeActionConfig crashing = c;
    crashing.fault_hook = [](std::string_view point, const std::string&) {
      return point != kFailpointAfterCordonOwed;
    };
    auto first = f.remediator(crashing);
    auto outcome = first.cordon("node-1", "nonCommHang of node node-1");
    ASSERT_FALSE(outcome);
    EXPECT_EQ(outcome.error().code, ErrorCode::kCancelled);
  }
  EXPECT_EQ(f.get("node-1")["spec"]["unschedulable"], false);
  auto second = f.remediator(c);
  EXPECT_EQ(*second.owedCordons(), std::vector<std::string>{"node-1"});
  EXPECT_EQ(*second.cordon("node-2", "x"), CordonOutcome::kBreakerOpen)
      << "the owed cordon holds the window's only slot";
  second.completeOwed();
  Json n = f.get("node-1");
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  EXPECT_NE(annotationOf(n, "c4.dev/cordon-reason").find("nonCommHang"), std::string::npos);
  EXPECT_TRUE(second.owedCordons()->empty());
  EXPECT_EQ(*second.recentCordons(), std::vector<std::string>{"node-1"});
  EXPECT_EQ(countOf(f.eventReasons(), "NodeCordoned"), 1);
  const int patches = f.api.patchCount();
  auto third = f.remediator(c);  // another restart: nothing left to do
  third.completeOwed();
  EXPECT_EQ(f.api.patchCount(), patches);
  EXPECT_EQ(*third.cordon("node-1", "again"), CordonOutcome::kAlreadyOurs);
  EXPECT_EQ(countOf(f.eventReasons(), "NodeCordoned"), 1) << "exactly one cordon";
}

// Issue #27: a failed patch holds the breaker slot only as the owed cordon it is; a node that is
// gone releases it.
TEST(OwedNodeActionsTest, AFailedPatchHoldsItsSlotOnlyWhileTheCordonIsOwed) {
  Fixture f(100);
  RefusingClient refusing(f.api, 100, Error{ErrorCode::kUnavailable, "etcd leader changed"});
  NodeActionConfig c = permissive();
  c.max_cordons_per_window = 1;
  auto r = remediatorVia(f, refusing, c);
  EXPECT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kOwed);
  EXPECT_EQ(*r.cordon("node-2", "y"), CordonOutcome::kBreakerOpen);
  // An owed cordon outlasts the window: it is a cordon not made yet, not one in the past.
  f.clock.advance(std::chrono::hours{2});
  EXPECT_EQ(*r.recentCordons(), std::vector<std::string>{"node-1"});
  EXPECT_EQ(*r.cordon("node-2", "y"), CordonOutcome::kBreakerOpen);
  ASSERT_TRUE(f.api.remove(resources::nodes(), "", "node-1", DeleteOptions{}));
  r.completeOwed();
  EXPECT_TRUE(r.owedCordons()->empty()) << "the node is gone: nothing is owed";
  EXPECT_TRUE(r.recentCordons()->empty()) << "and its slot is released";
  auto fine = f.remediator(c);
  EXPECT_EQ(*fine.cordon("node-2", "y"), CordonOutcome::kCordoned);
}

// Issue #27: a fault-history write refused once is owed in the cluster; a new process writes it,
// once, even when the first write had landed and only its answer was lost.
TEST(OwedNodeActionsTest, AFaultHistoryWriteRefusedIsWrittenExactlyOnceLater) {
  Fixture f(2);
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  {
    RefusingClient refusing(f.api, 1, Error{ErrorCode::kPermissionDenied, "forbidden"});
    auto first = remediatorVia(f, refusing, permissive());
    auto written = first.recordFault("node-0", {t0, "commHang", "team/a"});
    ASSERT_FALSE(written);
    EXPECT_NE(written.error().message.find("owed"), std::string::npos);
    EXPECT_TRUE(faultHistoryOf(f.get("node-0")).empty());
    EXPECT_EQ(*first.owedFaults(), std::vector<std::string>{"node-0 commHang team/a"});
    EXPECT_EQ(countOf(f.eventReasons(), "FaultHistoryNotWritten"), 1);
  }
  auto second = f.remediator(permissive());
  second.completeOwed();
  auto history = faultHistoryOf(f.get("node-0"));
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].job, "team/a");
  EXPECT_TRUE(second.owedFaults()->empty());
  EXPECT_EQ(countOf(f.eventReasons(), "FaultHistoryWritten"), 1);
  second.completeOwed();
  EXPECT_EQ(faultHistoryOf(f.get("node-0")).size(), 1u);

  // The write landed, its answer was lost: owed, and the retry finds it written.
  RefusingClient lost(f.api, 1, Error{ErrorCode::kUnavailable, "timeout"}, /*land=*/true);
  auto third = remediatorVia(f, lost, permissive());
  ASSERT_FALSE(third.recordFault("node-1", {t0, "crash", "team/b"}));
  EXPECT_EQ(faultHistoryOf(f.get("node-1")).size(), 1u);
  f.clock.advance(std::chrono::seconds{2});
  third.completeOwed();
  EXPECT_EQ(faultHistoryOf(f.get("node-1")).size(), 1u) << "not appended twice";
  EXPECT_TRUE(third.owedFaults()->empty());
}

// Issue #27: fault-history entries are bounded per window like cordons: at most
// max_fault_records_per_window per window, all nodes together, counted in the breaker's
// ConfigMap, so a successor process is bound by the same window. One over the budget is not
// written, with a Warning Event and a count. Before, every verdict wrote its entry.
TEST(NodeFaultHistoryTest, EntriesAreBoundedPerWindowLikeCordons) {
  Fixture f(3);
  NodeActionConfig c = permissive();
  c.max_fault_records_per_window = 2;
  metrics::Registry registry;
  NodeRemediator r(
      f.api, f.clock, f.events, c, [&f](const std::string& n) { return f.cached(n); },
      [&f] { return f.cachedAll(); }, &registry);
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  ASSERT_TRUE(r.recordFault("node-0", {t0, "commHang", "team/a"}));
  ASSERT_TRUE(r.recordFault("node-1", {t0, "crash", "team/b"}));
  // The same entry again (a retry) takes no second slot.
  ASSERT_TRUE(r.recordFault("node-0", {t0, "commHang", "team/a"}));
  auto over = r.recordFault("node-2", {t0, "nicDown", "team/c"});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(over.error().message.find("limit 2"), std::string::npos) << over.error().message;
  EXPECT_TRUE(faultHistoryOf(f.get("node-2")).empty());
  EXPECT_EQ(faultHistoryOf(f.get("node-0")).size(), 1u);
  EXPECT_EQ(countOf(f.eventReasons(), "FaultHistorySkipped"), 1);
  EXPECT_EQ(registry.counter("c4_operator_node_actions_total", "", {"action", "outcome"})
                .labels({"fault_history", "budget_spent"})
                .value(),
            1);
  // The window lives in the cluster: a successor (restart, failover) is bound by it too.
  {
    auto successor = f.remediator(c);
    auto refused = successor.recordFault("node-2", {t0 + std::chrono::seconds{1}, "crash", "x/y"});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  }
  EXPECT_TRUE(faultHistoryOf(f.get("node-2")).empty());
  // Once the window has passed, entries are written again.
  f.clock.advance(std::chrono::hours{1});
  ASSERT_TRUE(r.recordFault("node-2", {t0 + std::chrono::hours{1}, "nicDown", "team/c"}));
  EXPECT_EQ(faultHistoryOf(f.get("node-2")).size(), 1u);
  // 0 writes none.
  c.max_fault_records_per_window = 0;
  auto none = f.remediator(c);
  EXPECT_FALSE(none.recordFault("node-1", {t0 + std::chrono::hours{2}, "crash", "team/d"}));
  EXPECT_EQ(faultHistoryOf(f.get("node-1")).size(), 1u);
}

// Issue #27: C4D's restarts are bounded per window like cordons, all jobs together, in the
// breaker's ConfigMap: a successor process is bound by the same window, and the same job attempt
// asked again (a retry, a new leader) takes no second slot. Before, nothing bounded them.
TEST(NodeRestartBudgetTest, RestartsAreBoundedPerWindowAcrossSuccessors) {
  Fixture f(1);
  NodeActionConfig c = permissive();
  c.max_restarts_per_window = 2;
  metrics::Registry registry;
  NodeRemediator r(
      f.api, f.clock, f.events, c, [&f](const std::string& n) { return f.cached(n); },
      [&f] { return f.cachedAll(); }, &registry);
  std::string why;
  ASSERT_EQ(r.takeRestartSlot("team/a", 0, why), true);
  ASSERT_EQ(r.takeRestartSlot("team/a", 0, why), true) << "the same attempt again";
  ASSERT_EQ(r.takeRestartSlot("team/b", 3, why), true);
  auto over = r.takeRestartSlot("team/c", 0, why);
  ASSERT_TRUE(over.has_value()) << over.error().toString();
  EXPECT_FALSE(*over);
  EXPECT_NE(why.find("limit 2"), std::string::npos) << why;
  EXPECT_NE(why.find("2 job attempt(s)"), std::string::npos) << why;
  EXPECT_EQ(r.takeRestartSlot("team/a", 1, why), false) << "a's next attempt is another restart";
  auto counted = [&](const char* outcome) {
    return registry.counter("c4_operator_node_actions_total", "", {"action", "outcome"})
        .labels({"restart", outcome})
        .value();
  };
  EXPECT_EQ(counted("allowed"), 3);
  EXPECT_EQ(counted("budget_spent"), 2);
  {
    auto successor = f.remediator(c);
    EXPECT_EQ(successor.takeRestartSlot("team/c", 0, why), false);
    EXPECT_EQ(successor.takeRestartSlot("team/b", 3, why), true) << "its slot is in the cluster";
  }
  // Once the window has passed there is room again.
  f.clock.advance(std::chrono::hours{1});
  EXPECT_EQ(r.takeRestartSlot("team/c", 0, why), true);
  // 0: C4D restarts nothing.
  c.max_restarts_per_window = 0;
  auto none = f.remediator(c);
  EXPECT_EQ(none.takeRestartSlot("team/d", 0, why), false);
}

// An entry whose budget cannot be read (the API server failing) is owed in memory; the loop
// takes its slot, then writes it, so it counts against the window like any other.
TEST(OwedNodeActionsTest, AFaultEntryWhoseBudgetCannotBeReadIsOwedAndCountedWhenWritten) {
  Fixture f(2);
  NodeActionConfig c = permissive();
  c.max_fault_records_per_window = 1;
  auto r = f.remediator(c);
  const WallTime t0{std::chrono::seconds{1'800'000'000}};
  f.api.failNext(Error{ErrorCode::kUnavailable, "etcd leader changed"});
  auto owed = r.recordFault("node-0", {t0, "commHang", "team/a"});
  ASSERT_FALSE(owed);
  EXPECT_NE(owed.error().message.find("owed"), std::string::npos) << owed.error().message;
  EXPECT_TRUE(faultHistoryOf(f.get("node-0")).empty());
  f.clock.advance(std::chrono::seconds{2});
  r.completeOwed();
  EXPECT_EQ(faultHistoryOf(f.get("node-0")).size(), 1u);
  auto over = r.recordFault("node-1", {t0, "crash", "team/b"});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kResourceExhausted) << "the owed entry took no slot";
}

// The loop runs on its own: started, it completes a predecessor's owed cordon at once and
// retries a refused one when its backoff is due.
TEST(OwedNodeActionsTest, TheLoopCompletesOwedActionsOnItsOwn) {
  Fixture f(4);
  {
    NodeActionConfig crashing = permissive();
    crashing.fault_hook = [](std::string_view, const std::string&) { return false; };
    auto first = f.remediator(crashing);
    ASSERT_FALSE(first.cordon("node-0", "x"));
  }
  RefusingClient refusing(f.api, 1, Error{ErrorCode::kPermissionDenied, "forbidden"});
  auto r = remediatorVia(f, refusing, permissive());
  auto cordoned = [&](const char* n) { return f.get(n)["spec"]["unschedulable"] == true; };
  r.start();
  ASSERT_TRUE(f.clock.awaitWaiters(1));
  // The first pass tried node-0 and was refused; its retry is due in 2 s.
  EXPECT_FALSE(cordoned("node-0"));
  f.clock.advance(std::chrono::seconds{2});
  for (int i = 0; i < 500 && !cordoned("node-0"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  EXPECT_TRUE(cordoned("node-0"));
  r.stop();
}

// c4.dev/release on a repaired node C4 cordoned returns it to service in one step: cordon, taint
// and bookkeeping removed with the annotation, the fault history kept ("true") or removed
// ("forget-history"); an admin's earlier cordon stays; a node C4 did not cordon loses only the
// annotation; another value changes nothing and says which values are allowed.
TEST(NodeReleaseTest, AReleaseAnnotationReturnsANodeC4CordonedToService) {
  Fixture f(10);  // the breaker allows 5 cordons
  f.api.put(resources::nodes(), node("node-2", /*unschedulable=*/true));  // an admin's cordon
  auto r = f.remediator(permissive());
  for (const char* n : {"node-0", "node-1", "node-2"}) ASSERT_TRUE(r.cordon(n, "nic down"));
  ASSERT_TRUE(r.recordFault("node-0", {f.clock.wallNow(), "commSlow", "team/llm"}));
  ASSERT_TRUE(r.recordFault("node-1", {f.clock.wallNow(), "commSlow", "team/llm"}));
  auto annotate = [&](const char* n, const char* value) {
    Json obj = f.get(n);
    obj["metadata"]["annotations"]["c4.dev/release"] = value;
    f.api.put(resources::nodes(), obj);
  };
  annotate("node-0", "true");
  annotate("node-1", "forget-history");
  annotate("node-2", "true");
  annotate("node-3", "true");  // never cordoned by C4
  annotate("node-4", "yes");   // not a value C4 knows

  auto released = r.release("node-0");
  ASSERT_TRUE(released) << released.error().toString();
  EXPECT_EQ(**released, UncordonOutcome::kUncordoned);
  Json n0 = f.get("node-0");
  EXPECT_EQ(n0["spec"]["unschedulable"], false);
  EXPECT_TRUE(n0["spec"]["taints"].empty());
  EXPECT_FALSE(n0["metadata"]["annotations"].contains("c4.dev/release"));
  EXPECT_FALSE(n0["metadata"]["annotations"].contains("c4.dev/cordoned-by"));
  EXPECT_NE(annotationOf(n0, kFaultHistoryAnnotation).find("commSlow"), std::string::npos)
      << "\"true\" keeps the fault history: the node stays a repeat offender";
  EXPECT_EQ(f.eventReasons().back(), "NodeUncordoned");
  EXPECT_FALSE(*r.release("node-0")) << "done: the annotation is gone";

  ASSERT_EQ(**r.release("node-1"), UncordonOutcome::kUncordoned);
  Json n1 = f.get("node-1");
  EXPECT_FALSE(n1["metadata"]["annotations"].contains(kFaultHistoryAnnotation));
  EXPECT_FALSE(n1["metadata"]["annotations"].contains("c4.dev/release"));

  ASSERT_EQ(**r.release("node-2"), UncordonOutcome::kTaintRemovedKeptCordon);
  EXPECT_EQ(f.get("node-2")["spec"]["unschedulable"], true) << "the admin's cordon stays";

  ASSERT_EQ(**r.release("node-3"), UncordonOutcome::kNotOurs);
  Json n3 = f.get("node-3");
  EXPECT_FALSE(n3["metadata"]["annotations"].contains("c4.dev/release"));
  EXPECT_EQ(n3["spec"]["unschedulable"], false);
  EXPECT_EQ(f.eventReasons().back(), "NodeReleaseIgnored");

  const Json before = f.get("node-4");
  auto bad = r.release("node-4");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("\"true\""), std::string::npos) << bad.error().message;
  EXPECT_EQ(f.get("node-4"), before) << "nothing changed";
  EXPECT_EQ(f.eventReasons().back(), "NodeReleaseIgnored");
  EXPECT_EQ(r.release("node-99").error().code, ErrorCode::kNotFound);
}

// The loop releases what the informer asked for, also a node annotated while no operator led
// (the first pass lists the nodes), and retries a refused patch with backoff.
TEST(NodeReleaseTest, TheLoopReleasesRequestedAndListedNodesAndRetriesRefusals) {
  Fixture f(10);
  {
    auto first = f.remediator(permissive());
    ASSERT_TRUE(first.cordon("node-0", "x"));
    ASSERT_TRUE(first.cordon("node-1", "x"));
  }
  for (const char* n : {"node-0", "node-1"}) {
    Json obj = f.get(n);
    obj["metadata"]["annotations"]["c4.dev/release"] = "true";
    f.api.put(resources::nodes(), obj);
  }
  RefusingClient refusing(f.api, 1, Error{ErrorCode::kUnavailable, "etcd leader changed"});
  NodeActionConfig c = permissive();
  c.retry_initial = std::chrono::seconds{2};
  auto r = remediatorVia(f, refusing, c);
  auto cordoned = [&](const char* n) { return f.get(n)["spec"]["unschedulable"] == true; };
  r.completeOwed();  // the first pass lists the nodes: one release refused, the other lands
  EXPECT_EQ(refusing.node_patches, 2);
  EXPECT_NE(cordoned("node-0"), cordoned("node-1"));
  r.completeOwed();
  EXPECT_EQ(refusing.node_patches, 2) << "the refused one waits for its backoff";
  f.clock.advance(std::chrono::seconds{2});
  r.completeOwed();
  EXPECT_FALSE(cordoned("node-0"));
  EXPECT_FALSE(cordoned("node-1"));

  // Asked for by the informer after the first pass: released by the next one.
  ASSERT_TRUE(r.cordon("node-2", "x"));
  Json obj = f.get("node-2");
  obj["metadata"]["annotations"]["c4.dev/release"] = "true";
  f.api.put(resources::nodes(), obj);
  r.completeOwed();
  EXPECT_TRUE(cordoned("node-2")) << "not listed again before the rescan, not requested";
  r.requestRelease("node-2");
  r.completeOwed();
  EXPECT_FALSE(cordoned("node-2"));
}

// A node released through c4.dev/release no longer counts against the fraction of nodes C4 may
// hold cordoned (its record still counts against the cordons per window); one returned to
// service by hand counts until the window passes.
TEST(NodeReleaseTest, AReleasedNodeFreesItsShareOfTheBreakerNotItsCordonPerWindow) {
  Fixture f(4);
  NodeActionConfig c = permissive();  // 2 of 4 nodes, 10 cordons per window
  c.max_cordons_per_window = 3;
  auto r = f.remediator(c);
  ASSERT_EQ(*r.cordon("node-0", "x"), CordonOutcome::kCordoned);
  ASSERT_EQ(*r.cordon("node-1", "x"), CordonOutcome::kCordoned);
  ASSERT_EQ(*r.cordon("node-2", "x"), CordonOutcome::kBreakerOpen) << "2 of 4 held";
  Json n0 = f.get("node-0");
  n0["metadata"]["annotations"]["c4.dev/release"] = "true";
  f.api.put(resources::nodes(), n0);
  ASSERT_EQ(**r.release("node-0"), UncordonOutcome::kUncordoned);
  EXPECT_EQ(*r.cordon("node-2", "x"), CordonOutcome::kCordoned) << "node-0's share is free";
  // By hand (uncordon and untaint, no annotation): node-1 still holds its share.
  Json n1 = f.get("node-1");
  n1["spec"]["unschedulable"] = false;
  n1["spec"]["taints"] = Json::array();
  f.api.put(resources::nodes(), n1);
  EXPECT_EQ(*r.cordon("node-3", "x"), CordonOutcome::kBreakerOpen);
  // The released node cordoned again takes its old record, not a new one.
  EXPECT_EQ(*r.uncordon("node-2"), UncordonOutcome::kUncordoned);
  EXPECT_EQ(*r.cordon("node-0", "again"), CordonOutcome::kCordoned);
  EXPECT_EQ(r.recentCordons()->size(), 3u);
  ASSERT_TRUE(r.uncordon("node-1"));  // its bookkeeping was left: released now
  EXPECT_EQ(*r.cordon("node-3", "x"), CordonOutcome::kBreakerOpen);
  const std::string why = f.api.createdOfKind("Event").back()["message"];
  EXPECT_NE(why.find("3 cordons in the last"), std::string::npos)
      << "the per-window limit holds whatever was released: " << why;
}

// Issue #27: a diagnosis C4D holds is recorded in the breaker's ConfigMap for the next process.
// One per job (a newer one replaces it), at most kMaxRecordedDiagnoses of all jobs (the oldest
// go), none older than kRecordedDiagnosisTtl, none larger than kMaxDiagnosisBytes; removed on
// request; the budgets' state in the same ConfigMap is untouched by any of it.
TEST(RecordedDiagnosisTest, OnePerJobBoundedInCountAgeAndSize) {
  Fixture f(2);
  auto r = f.remediator(permissive());
  std::string why;
  ASSERT_EQ(r.takeRestartSlot("team/other", 3, why), true);
  auto record = [&](const std::string& job, std::int64_t attempt) {
    return RecordedDiagnosis{job, "uid-" + job, attempt, f.clock.wallNow(),
                             Json{{"class", "crash"}, {"attempt", attempt}}};
  };
  ASSERT_TRUE(r.recordDiagnosis(record("team/a", 0)));
  ASSERT_TRUE(r.recordDiagnosis(record("team/a", 1)));  // the same job again: replaced
  auto list = r.recordedDiagnoses();
  ASSERT_TRUE(list) << list.error().toString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].attempt, 1);
  EXPECT_EQ((*list)[0].uid, "uid-team/a");
  EXPECT_EQ((*list)[0].diagnosis["class"], "crash");

  for (std::size_t i = 0; i < NodeRemediator::kMaxRecordedDiagnoses + 5; ++i) {
    ASSERT_TRUE(r.recordDiagnosis(record("team/j" + std::to_string(i), 0)));
  }
  list = r.recordedDiagnoses();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), NodeRemediator::kMaxRecordedDiagnoses);
  EXPECT_EQ(list->front().job, "team/j5") << "the oldest went first";

  Json big = {{"summary", std::string(NodeRemediator::kMaxDiagnosisBytes, 'x')}};
  auto refused = r.recordDiagnosis(RecordedDiagnosis{"team/big", "u", 0, f.clock.wallNow(), big});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(r.recordDiagnosis(RecordedDiagnosis{"", "u", 0, f.clock.wallNow(), Json::object()}));

  ASSERT_TRUE(r.forgetDiagnosis("team/j5"));
  list = r.recordedDiagnoses();
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), NodeRemediator::kMaxRecordedDiagnoses - 1);
  EXPECT_EQ(list->front().job, "team/j6");

  auto cm = f.api.peek(resources::configMaps(), "c4-system", "c4-node-actions");
  ASSERT_TRUE(cm);
  EXPECT_NE((*cm)["data"].value("restarts.json", std::string{}).find("team/other"),
            std::string::npos)
      << "the restart budget's slot is kept";

  f.clock.advance(NodeRemediator::kRecordedDiagnosisTtl);
  list = r.recordedDiagnoses();
  ASSERT_TRUE(list);
  EXPECT_TRUE(list->empty()) << "a day old: not acted on";
}

}  // namespace
}  // namespace c4::op
