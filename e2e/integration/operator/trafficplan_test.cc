// The traffic-plan controller on the real API server, wired as the manager wires it (shared
// informers, fromInformers): what it owns is put back when someone else changes it (issue #27).
#include <gtest/gtest.h>

#include "harness.h"
#include "operator/c4p/plan_document.h"
#include "operator/trafficplan/controller.h"
#include "operator/trainingjob/api.h"
#include "operator/trainingjob/children.h"

namespace c4::op::it {
namespace {

class TrafficPlanIT : public NamespacedTest {
 protected:
  TrafficPlanIT() : NamespacedTest("plan-it") {}
  void SetUp() override {
    NamespacedTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    installCrdFile(*client_, C4_FABRIC_CRD_FILE, "fabrics.c4.dev");
    // A Fabric of this test's own (the controller is told its name: others may exist).
    fabric_ = uniqueName("plan-it");
    Json fabric = {{"apiVersion", "c4.dev/v1alpha1"},
                   {"kind", "Fabric"},
                   {"metadata", {{"name", fabric_}}},
                   {"spec",
                    {{"spines", 2},
                     {"uplinksPerLeaf", 2},
                     {"uplinkSpeedGbps", 100},
                     {"hostLinkSpeedGbps", 100},
                     {"pathSelection", {{"rule", "sourcePortModulo"}}}}}};
    auto created = client_->create(trafficplan::fabrics(), "", fabric);
    ASSERT_TRUE(created) << created.error().toString();
  }
  void TearDown() override {
    if (informers_) informers_->requestStop();
    if (controller_) controller_->stop();
    controller_.reset();
    informers_.reset();
    if (client_ && !fabric_.empty()) {
      (void)client_->remove(trafficplan::fabrics(), "", fabric_, DeleteOptions{});
    }
    NamespacedTest::TearDown();
  }

  // A 4-replica Advisory job with its pods of attempt 0 bound to the test cluster's nodes
  // node-0..node-3 (leaves leaf-0, leaf-1, leaf-0, leaf-1: every ring hop crosses leaves), as
  // the TrainingJob controller would have created and the scheduler placed them.
  Json placedJob(const std::string& name) {
    Json job = trainingJob(ns_, name, 4);
    job["spec"]["trafficPlanning"] = {{"mode", "Advisory"}, {"subflowsPerConnection", 2}};
    auto created = client_->create(resources::trainingJobs(), ns_, job);
    EXPECT_TRUE(created) << created.error().toString();
    if (!created) return job;
    auto spec = parseTrainingJobSpec(*created);
    EXPECT_TRUE(spec) << spec.error().toString();
    if (!spec) return *created;
    for (int i = 0; i < 4; ++i) {
      Json pod = buildPod(*created, *spec, i, 0, std::nullopt, PodSettings{});
      pod["spec"]["nodeName"] = "node-" + std::to_string(i);
      auto p = client_->create(resources::pods(), ns_, pod);
      EXPECT_TRUE(p) << p.error().toString();
    }
    return *created;
  }

  void startController() {
    events_ = std::make_unique<EventRecorder>(*client_, realClock(), "c4-operator",
                                              uniqueName("it-plan"), nullptr);
    informers_ = std::make_unique<SharedInformers>(*client_, realClock());
    trafficplan::TrafficPlanConfig config;
    config.fabric_name = fabric_;
    config.period = std::chrono::seconds{1};
    controller_ = trafficplan::TrafficPlanController::fromInformers(
        *client_, realClock(), *events_, *informers_, ns_, nullptr, config, registry_);
    informers_->start();
    ASSERT_TRUE(informers_->waitForSync(realClock().monoNow() + std::chrono::seconds{30}));
    controller_->start();
  }

  std::optional<Json> planConfigMap(const std::string& job) {
    auto cm = client_->get(resources::configMaps(), ns_, planConfigMapName(job));
    if (!cm) return std::nullopt;
    return *cm;
  }
  // The document the plan ConfigMap of `job` holds, when it holds a readable one.
  std::optional<c4p::PlanDocument> planDocument(const std::string& job) {
    auto cm = planConfigMap(job);
    if (!cm) return std::nullopt;
    auto text = stringAt(fieldsOf(*cm, "data"), c4p::kPlanDocumentKey);
    if (!text) return std::nullopt;
    auto doc = c4p::parsePlanDocument(*text);
    if (!doc) return std::nullopt;
    return *doc;
  }
  int eventCount(const std::string& job, const std::string& reason) {
    int n = 0;
    for (const auto& r : eventReasons(*client_, ns_, job)) n += r == reason ? 1 : 0;
    return n;
  }

  std::string fabric_;
  metrics::Registry registry_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<SharedInformers> informers_;
  std::unique_ptr<trafficplan::TrafficPlanController> controller_;
};

// The plan ConfigMap is the controller's: replaced with garbage it is put back within seconds,
// with a Warning Event PlanRepaired on the job and status.plan following; deleted, it is
// recreated; edited into another valid plan, the controller's plan returns.
TEST_F(TrafficPlanIT, APlanConfigMapChangedBySomeoneElseIsPutBack) {
  const std::string name = "llm";
  const Json job = placedJob(name);
  ASSERT_FALSE(HasFailure());
  startController();
  ASSERT_TRUE(waitFor([&] { return planDocument(name).has_value(); }))
      << "no plan written for the placed job";
  const c4p::PlanDocument first = *planDocument(name);
  ASSERT_EQ(first.version, 1);
  ASSERT_EQ(first.pairs.size(), 4u) << "every ring hop crosses leaves";
  EXPECT_EQ(eventCount(name, "PlanRepaired"), 0);

  // Garbage in plan.json, as `kubectl edit` would leave it.
  Json cm = *planConfigMap(name);
  cm["data"][c4p::kPlanDocumentKey] = "{this is not a plan";
  auto updated = client_->update(resources::configMaps(), ns_, cm);
  ASSERT_TRUE(updated) << updated.error().toString();
  auto repaired_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(waitFor([&] { return planDocument(name).has_value(); }, std::chrono::seconds{10}))
      << "the garbage stayed";
  EXPECT_LT(std::chrono::steady_clock::now() - repaired_at, std::chrono::seconds{5});
  c4p::PlanDocument back = *planDocument(name);
  EXPECT_EQ(back.version, 2) << "the next version";
  c4p::PlanDocument same = back;
  same.version = first.version;
  EXPECT_EQ(same, first) << "the controller's plan, not another";
  EXPECT_TRUE(waitFor([&] { return eventCount(name, "PlanRepaired") == 1; }));
  EXPECT_TRUE(waitFor([&] {
    Json j = getJob(*client_, ns_, name);
    return j["status"].contains("plan") && j["status"]["plan"].value("version", 0) == 2;
  })) << "status.plan follows the repair";

  // Deleted: recreated, controlled by the job.
  auto removed =
      client_->remove(resources::configMaps(), ns_, planConfigMapName(name), DeleteOptions{});
  ASSERT_TRUE(removed) << removed.error().toString();
  ASSERT_TRUE(waitFor(
      [&] {
        auto doc = planDocument(name);
        return doc && doc->version == 3;
      },
      std::chrono::seconds{10}))
      << "not recreated";
  EXPECT_TRUE(isControlledBy(*planConfigMap(name), job));
  EXPECT_EQ(labelOf(*planConfigMap(name), labels::kJobName), name);
  EXPECT_TRUE(waitFor([&] { return eventCount(name, "PlanRepaired") == 2; }));

  // Edited into another valid plan (no pairs, version 99): the controller's plan returns above
  // the version found, since the plugin applies any valid version it reads.
  c4p::PlanDocument other;
  other.version = 99;
  other.default_subflows = 2;
  cm = *planConfigMap(name);
  cm["data"][c4p::kPlanDocumentKey] = c4p::renderPlanDocument(other);
  updated = client_->update(resources::configMaps(), ns_, cm);
  ASSERT_TRUE(updated) << updated.error().toString();
  ASSERT_TRUE(waitFor(
      [&] {
        auto doc = planDocument(name);
        return doc && doc->version == 100;
      },
      std::chrono::seconds{10}))
      << "the edit stayed";
  EXPECT_EQ(planDocument(name)->pairs.size(), 4u);

  // Once repaired, nothing more is written (the repair is no loop).
  const std::string rv = (*planConfigMap(name))["metadata"]["resourceVersion"];
  std::this_thread::sleep_for(std::chrono::seconds{3});
  EXPECT_EQ((*planConfigMap(name))["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(eventCount(name, "PlanRepaired"), 3);
}

}  // namespace
}  // namespace c4::op::it
