// The traffic-plan controller against an in-memory API (the fake client plays the API server: the
// controller reads its objects through the sources and writes back into it), with the real
// planner, the real report store and the plugin's own plan parser.
#include "operator/trafficplan/controller.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <tuple>

#include "c4/common/plan.h"
#include "operator/trainingjob/api.h"
#include "operator/trainingjob/children.h"
#include "testing/fake_kube_client.h"

namespace c4::op::trafficplan {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

using c4::op::testing::FakeKubeClient;

Json fabricObject(std::int64_t generation, Json spec_patch = Json::object()) {
  Json spec = {{"spines", 2},
               {"uplinksPerLeaf", 2},
               {"uplinkSpeedGbps", 100},
               {"hostLinkSpeedGbps", 100},
               {"pathSelection", {{"rule", "sourcePortModulo"}}}};
  spec.merge_patch(spec_patch);
  return {{"apiVersion", "c4.dev/v1alpha1"},
          {"kind", "Fabric"},
          {"metadata", {{"name", "default"}, {"uid", "fabric-uid"}, {"generation", generation}}},
          {"spec", spec}};
}

Json nodeObject(const std::string& name, const std::string& leaf) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"c4.dev/leaf", leaf}}}}}};
}

Json jobObject(const std::string& mode, std::int64_t attempt = 0, int subflows = 2) {
  return {{"apiVersion", "c4.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}}},
          {"spec",
           {{"replicas", 4},
            {"trafficPlanning", {{"mode", mode}, {"subflowsPerConnection", subflows}}},
            {"template",
             {{"spec",
               {{"containers", Json::array({{{"name", "trainer"}, {"image", "trainer:1"}}})}}}}}}},
          {"status", {{"phase", "Running"}, {"attempt", attempt}}}};
}

Json podObject(const Json& job, int index, std::int64_t attempt, const std::string& node) {
  Json pod = buildPod(job, *parseTrainingJobSpec(job), index, attempt, std::nullopt, PodSettings{});
  pod["metadata"]["uid"] = "pod-" + std::to_string(index) + "-" + std::to_string(attempt);
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

const ResourceType& events() {
  return resources::events();
}

class TrafficPlanTest : public ::testing::Test {
 protected:
  TrafficPlanTest() {
    api_.put(fabrics(), fabricObject(1));
    api_.put(resources::nodes(), nodeObject("n0", "leaf-a"));
    api_.put(resources::nodes(), nodeObject("n1", "leaf-a"));
    api_.put(resources::nodes(), nodeObject("n2", "leaf-b"));
    api_.put(resources::nodes(), nodeObject("n3", "leaf-b"));
    api_.put(resources::nodes(), nodeObject("n4", "leaf-a"));
    api_.put(resources::nodes(), nodeObject("n5", "leaf-b"));
  }

  TrafficPlanSources sources() {
    TrafficPlanSources s;
    s.fabrics = [this] { return api_.stored(fabrics()); };
    s.nodes = [this] { return api_.stored(resources::nodes()); };
    s.jobs = [this] { return api_.stored(resources::trainingJobs()); };
    s.pods = [this](const std::string& ns, const std::string& job) {
      std::vector<Json> out;
      for (auto& p : api_.stored(resources::pods())) {
        if (objectNamespace(p) == ns && labelOf(p, labels::kJobName) == job) out.push_back(p);
      }
      return out;
    };
    return s;
  }

  std::unique_ptr<TrafficPlanController> makeController(TrafficPlanConfig config = {}) {
    return std::make_unique<TrafficPlanController>(api_, clock_, recorder_, sources(), &store_,
                                                   config, registry_);
  }

  void placeJob(const std::string& mode, std::int64_t attempt,
                const std::vector<std::string>& nodes, const Json& traffic = Json::object()) {
    Json job = jobObject(mode, attempt);
    job["spec"]["trafficPlanning"].update(traffic);
    if (auto old = api_.peek(resources::trainingJobs(), "team", "llm")) {
      job["status"] = (*old)["status"];
      job["status"]["attempt"] = attempt;
    }
    api_.put(resources::trainingJobs(), job);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      api_.put(resources::pods(), podObject(job, static_cast<int>(i), attempt, nodes[i]));
    }
  }

  // n0, n1 on leaf-a in pod-x; n2, n3 on leaf-b in pod-y.
  void putNodesInPods() {
    for (const auto& [node, leaf, pod] :
         {std::tuple{"n0", "leaf-a", "pod-x"}, std::tuple{"n1", "leaf-a", "pod-x"},
          std::tuple{"n2", "leaf-b", "pod-y"}, std::tuple{"n3", "leaf-b", "pod-y"}}) {
      Json n = nodeObject(node, leaf);
      n["metadata"]["labels"]["c4.dev/pod"] = pod;
      api_.put(resources::nodes(), n);
    }
  }

  std::optional<Json> configMap() {
    return api_.peek(resources::configMaps(), "team", "llm-c4-plan");
  }

  c4p::PlanDocument planDocument() {
    auto cm = configMap();
    EXPECT_TRUE(cm);
    if (!cm) return {};
    auto doc = c4p::parsePlanDocument((*cm)["data"]["plan.json"].get<std::string>());
    EXPECT_TRUE(doc) << doc.error().toString();
    return doc ? *doc : c4p::PlanDocument{};
  }

  std::vector<Json> eventsWithReason(const std::string& reason) {
    std::vector<Json> out;
    for (auto& e : api_.stored(events())) {
      if (e.value("reason", std::string{}) == reason) out.push_back(e);
    }
    return out;
  }

  FakeKubeClient api_;
  SimulatedClock clock_;
  metrics::Registry registry_;
  EventRecorder recorder_{api_, clock_, "c4-operator", "test", nullptr};
  ingest::ReportStore store_;
};

// Waits (real time, bounded) until `done` holds; for the tests that run the worker.
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 10000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return done();
}

// Started, the controller's worker runs a full sync at once, on a kick (add of the sync key),
// and again `period` after the last (requeue-after on the injected clock); until stop().
TEST_F(TrafficPlanTest, TheWorkerSyncsAtStartOnAKickAndEveryPeriod) {
  TrafficPlanConfig config;
  config.period = std::chrono::seconds{10};
  config.telemetry_period = Duration::zero();
  auto controller = makeController(config);
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->start();
  ASSERT_TRUE(eventually([&] { return configMap().has_value(); })) << "the first sync";
  ASSERT_TRUE(clock_.awaitWaiters(1));  // parked until the next period
  // A job placed now is planned on the kick, before the period ends.
  Json other = jobObject("Enforce", 0);
  other["metadata"]["name"] = "other";
  other["metadata"]["uid"] = "uid-other";
  other["spec"]["replicas"] = 2;
  api_.put(resources::trainingJobs(), other);
  for (int i = 0; i < 2; ++i) {
    api_.put(resources::pods(), podObject(other, i, 0, i == 0 ? "n4" : "n5"));
  }
  controller->kick();
  ASSERT_TRUE(eventually(
      [&] { return api_.peek(resources::configMaps(), "team", "other-c4-plan").has_value(); }));
  // Passes so far (the queue's work-duration observations); the next comes after the period.
  auto passes = [&] {
    const std::string text = registry_.expose();
    const std::string name =
        "c4_operator_workqueue_work_duration_seconds_count{name=\"trafficplan\"} ";
    auto at = text.find(name);
    return at == std::string::npos ? -1 : std::stoi(text.substr(at + name.size()));
  };
  ASSERT_TRUE(clock_.awaitWaiters(1));
  EXPECT_EQ(passes(), 2);
  clock_.advance(config.period - std::chrono::seconds{1});
  ASSERT_TRUE(clock_.awaitWaiters(1));
  EXPECT_EQ(passes(), 2);
  clock_.advance(std::chrono::seconds{1});
  ASSERT_TRUE(eventually([&] { return passes() == 3; }));
  controller->stop();
}

TEST_F(TrafficPlanTest, PlacedJobGetsAPlanConfigMapThePluginAccepts) {
  auto controller = makeController();
  // Pod 3 not scheduled yet: no plan.
  placeJob("Enforce", 0, {"n0", "n1", "n2", ""});
  controller->sync();
  EXPECT_FALSE(configMap());
  EXPECT_TRUE(controller->planner()->jobs().empty());

  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  auto cm = configMap();
  ASSERT_TRUE(cm);
  EXPECT_TRUE(isControlledBy(*cm, jobObject("Enforce")));
  EXPECT_EQ(labelOf(*cm, labels::kJobName), "llm");
  EXPECT_EQ(annotationOf(*cm, kPlanVersionAnnotation), "1");
  // It is the ConfigMap the job's pods mount.
  const Json pod = podObject(jobObject("Enforce"), 0, 0, "n0");
  int plan_volumes = 0;
  for (const auto& v : pod["spec"]["volumes"]) {
    if (v["name"] == "c4-plan") {
      ++plan_volumes;
      EXPECT_EQ(v["configMap"]["name"], objectName(*cm));
    }
  }
  EXPECT_EQ(plan_volumes, 1);
  c4p::PlanDocument doc = planDocument();
  EXPECT_EQ(doc.version, 1);
  EXPECT_EQ(doc.default_subflows, 2);
  // The ring n0 -> n1 -> n2 -> n3 -> n0 crosses leaves at n1 -> n2 and n3 -> n0.
  ASSERT_EQ(doc.pairs.size(), 2u);
  EXPECT_EQ(doc.pairs[0].local_node, "n1");
  EXPECT_EQ(doc.pairs[0].peer_node, "n2");
  EXPECT_EQ(doc.pairs[1].local_node, "n3");
  EXPECT_EQ(doc.pairs[1].peer_node, "n0");
  for (const auto& pair : doc.pairs) {
    ASSERT_EQ(pair.subflows.size(), 2u);
    std::set<int> paths;
    double weights = 0;
    for (const auto& s : pair.subflows) {
      EXPECT_EQ(s.local_port % 2, s.path) << "sourcePortModulo: the port selects the path";
      paths.insert(s.path);
      weights += s.weight;
    }
    EXPECT_EQ(paths, (std::set<int>{0, 1})) << "two subflows, two uplinks: no collision";
    EXPECT_NEAR(weights, 1.0, 1e-9);
  }
  // The plugin's own parser reads the same document.
  auto parsed = c4::parsePlan((*cm)["data"]["plan.json"].get<std::string>());
  ASSERT_TRUE(parsed) << parsed.error().toString();
  EXPECT_EQ(parsed->version, 1);
  EXPECT_EQ(parsed->pairs.size(), 2u);

  auto job = api_.peek(resources::trainingJobs(), "team", "llm");
  ASSERT_TRUE(job);
  EXPECT_EQ((*job)["status"]["plan"]["version"], 1);
  EXPECT_EQ((*job)["status"]["plan"]["mode"], "Enforce");
  EXPECT_EQ((*job)["status"]["plan"]["maxLinkLoad"], "0.500");
  EXPECT_EQ((*job)["status"]["phase"], "Running") << "the rest of the status is untouched";
  ASSERT_EQ(eventsWithReason("PlanUpdated").size(), 1u);
  EXPECT_NE(eventsWithReason("PlanUpdated")[0]["message"].get<std::string>().find(
                "version 1 (Enforce): new placement"),
            std::string::npos);
  auto fabric = api_.peek(fabrics(), "", "default");
  ASSERT_TRUE(fabric);
  EXPECT_EQ((*fabric)["status"]["maxLinkLoad"], "0.500");
  EXPECT_EQ((*fabric)["status"]["degradedLinks"], 0);
  EXPECT_EQ((*fabric)["status"]["conditions"][0]["type"], "Accepted");
  EXPECT_EQ((*fabric)["status"]["conditions"][0]["status"], "True");
}

// spec.trafficPlanning.spareSubflows reaches the plugin: each planned connection lists its spare
// after its primary, on the other uplink, idle (weight 0) with a port of its path. Changing the
// count is a new placement: the plan follows.
TEST_F(TrafficPlanTest, SpareSubflowsOfTheSpecReachThePlanDocument) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"},
           {{"subflowsPerConnection", 1}, {"spareSubflows", 1}});
  controller->sync();
  c4p::PlanDocument doc = planDocument();
  EXPECT_EQ(doc.default_subflows, 1);
  ASSERT_EQ(doc.pairs.size(), 2u);
  for (const auto& pair : doc.pairs) {
    ASSERT_EQ(pair.subflows.size(), 2u);
    EXPECT_EQ(pair.subflows[0].weight, 1.0);
    EXPECT_EQ(pair.subflows[1].weight, 0.0);
    EXPECT_NE(pair.subflows[0].path, pair.subflows[1].path);
    for (const auto& s : pair.subflows) EXPECT_EQ(s.local_port % 2, s.path);
  }
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"},
           {{"subflowsPerConnection", 1}, {"spareSubflows", 0}});
  controller->sync();
  doc = planDocument();
  EXPECT_EQ(doc.version, 2);
  for (const auto& pair : doc.pairs) EXPECT_EQ(pair.subflows.size(), 1u);
}

TEST_F(TrafficPlanTest, VersionsIncreaseOnlyWhenTheDocumentChanges) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(controller->planVersion("team/llm"), 1);
  const std::string rv = (*configMap())["metadata"]["resourceVersion"];

  controller->sync();  // nothing changed
  EXPECT_EQ((*configMap())["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(controller->planVersion("team/llm"), 1);

  // A new attempt on other nodes: re-planned.
  placeJob("Enforce", 1, {"n4", "n1", "n2", "n5"});
  controller->sync();
  EXPECT_EQ(planDocument().version, 2);
  EXPECT_EQ(planDocument().pairs[0].local_node, "n1");
  EXPECT_EQ(planDocument().pairs[1].local_node, "n5");
  auto job = api_.peek(resources::trainingJobs(), "team", "llm");
  EXPECT_EQ((*job)["status"]["plan"]["version"], 2);
  EXPECT_NE((*job)["status"]["plan"]["reason"].get<std::string>().find("attempt 1"),
            std::string::npos);

  // The same nodes in a new attempt: the plan is the same, nothing is written.
  placeJob("Enforce", 2, {"n4", "n1", "n2", "n5"});
  controller->sync();
  EXPECT_EQ(planDocument().version, 2);

  // Mode Advisory: the same paths, ephemeral ports, weight 1.
  placeJob("Advisory", 2, {"n4", "n1", "n2", "n5"});
  controller->sync();
  c4p::PlanDocument doc = planDocument();
  EXPECT_EQ(doc.version, 3);
  for (const auto& pair : doc.pairs) {
    for (const auto& s : pair.subflows) {
      EXPECT_EQ(s.local_port, 0);
      EXPECT_EQ(s.weight, 1.0);
      EXPECT_GE(s.path, 0);
    }
  }
  EXPECT_EQ(eventsWithReason("PlanUpdated").size(), 3u);
}

TEST_F(TrafficPlanTest, FinishedOrOffJobsLeaveThePlanner) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(controller->planner()->jobs().size(), 1u);
  Json job = *api_.peek(resources::trainingJobs(), "team", "llm");
  job["status"]["phase"] = "Succeeded";
  api_.put(resources::trainingJobs(), job);
  controller->sync();
  EXPECT_TRUE(controller->planner()->jobs().empty());
  EXPECT_EQ(controller->planner()->maxLinkLoad(), 0);
  EXPECT_EQ((*api_.peek(fabrics(), "", "default"))["status"]["maxLinkLoad"], "0.000");

  // Off: never planned.
  placeJob("Off", 1, {"n0", "n1", "n2", "n3"});
  controller->sync();
  EXPECT_TRUE(controller->planner()->jobs().empty());
}

TEST_F(TrafficPlanTest, ARestartedControllerContinuesTheVersionWithoutRewriting) {
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  {
    auto first = makeController();
    first->sync();
    placeJob("Enforce", 1, {"n4", "n1", "n2", "n5"});
    first->sync();
    ASSERT_EQ(planDocument().version, 2);
  }
  const std::string rv = (*configMap())["metadata"]["resourceVersion"];
  const std::size_t events_before = eventsWithReason("PlanUpdated").size();
  auto second = makeController();
  second->sync();
  EXPECT_EQ(second->planVersion("team/llm"), 2) << "adopted from the ConfigMap";
  EXPECT_EQ((*configMap())["metadata"]["resourceVersion"], rv) << "not rewritten";
  EXPECT_EQ(eventsWithReason("PlanUpdated").size(), events_before);

  // The next change continues from the adopted version.
  placeJob("Enforce", 2, {"n0", "n1", "n2", "n3"});
  second->sync();
  EXPECT_EQ(planDocument().version, 3);
}

TEST_F(TrafficPlanTest, AStaleConfigMapIsReplacedWithTheNextVersion) {
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  // A ConfigMap an earlier controller left at version 7 with a document of no use now.
  Json job = *api_.peek(resources::trainingJobs(), "team", "llm");
  c4p::PlanDocument stale;
  stale.version = 7;
  stale.default_subflows = 2;
  Json cm = buildPlanConfigMap(job, stale, "an earlier placement");
  ASSERT_EQ(c4p::parsePlanDocument(cm["data"]["plan.json"].get<std::string>()), stale);
  api_.put(resources::configMaps(), cm);
  auto controller = makeController();
  controller->sync();
  EXPECT_EQ(planDocument().version, 8);
  EXPECT_EQ(planDocument().pairs.size(), 2u);
}

// Repair is level-triggered on what the API server holds, not on what the cache shows: a cache
// that has not seen the controller's own write yet costs a read, never a write; a label taken off
// is put back; a ConfigMap of the plan's name the job does not control is never taken over (one
// Warning Event PlanConflict per object). (The API server test of garbage, deletion and edits:
// e2e/integration/operator/trafficplan_test.cc.)
TEST_F(TrafficPlanTest, RepairTrustsTheApiServerAndNeverTakesOverAForeignConfigMap) {
  std::optional<Json> cached;  // what the "informer" shows
  TrafficPlanSources s = sources();
  s.plan_config_map = [&](const std::string&, const std::string&) { return cached; };
  auto controller = std::make_unique<TrafficPlanController>(api_, clock_, recorder_, s, &store_,
                                                            TrafficPlanConfig{}, registry_);
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(planDocument().version, 1);
  // The cache lags: it has not seen the ConfigMap yet. The API server has it right: no write.
  const std::string rv = (*configMap())["metadata"]["resourceVersion"];
  controller->sync();
  EXPECT_EQ((*configMap())["metadata"]["resourceVersion"], rv);
  EXPECT_TRUE(eventsWithReason("PlanRepaired").empty());

  // The label taken off (the informer then reports a delete): put back, with the plan.
  Json cm = *configMap();
  cm["metadata"]["labels"] = Json::object();
  api_.put(resources::configMaps(), cm);
  cached = std::nullopt;
  controller->sync();
  EXPECT_EQ(labelOf(*configMap(), labels::kJobName), "llm");
  EXPECT_EQ(planDocument().version, 2);
  ASSERT_EQ(eventsWithReason("PlanRepaired").size(), 1u);
  EXPECT_NE(eventsWithReason("PlanRepaired")[0]["message"].get<std::string>().find(
                "label c4.dev/job-name changed"),
            std::string::npos);
  cached = configMap();
  controller->sync();
  EXPECT_EQ(planDocument().version, 2) << "in step: nothing more";

  // Someone else's ConfigMap with garbage under the plan's name: not taken over, said once.
  Json foreign = {{"apiVersion", "v1"},
                  {"kind", "ConfigMap"},
                  {"metadata", {{"name", "llm-c4-plan"}, {"namespace", "team"}, {"uid", "other"}}},
                  {"data", {{"plan.json", "garbage"}}}};
  ASSERT_TRUE(api_.remove(resources::configMaps(), "team", "llm-c4-plan", DeleteOptions{}));
  api_.put(resources::configMaps(), foreign);
  cached = std::nullopt;
  controller->sync();
  controller->sync();
  EXPECT_EQ((*configMap())["data"]["plan.json"], "garbage");
  EXPECT_FALSE(isControlledBy(*configMap(), jobObject("Enforce")));
  ASSERT_EQ(eventsWithReason("PlanConflict").size(), 1u);
  EXPECT_EQ(eventsWithReason("PlanRepaired").size(), 1u);
}

TEST_F(TrafficPlanTest, ABadFabricIsRefusedAndRunningPlansStay) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  const Json before = *configMap();

  // uplinksPerLeaf must be a multiple of spines.
  api_.put(fabrics(), fabricObject(2, {{"uplinksPerLeaf", 3}}));
  controller->sync();
  EXPECT_EQ(*configMap(), before);
  ASSERT_EQ(eventsWithReason("FabricRejected").size(), 1u);
  EXPECT_NE(eventsWithReason("FabricRejected")[0]["message"].get<std::string>().find(
                "spec.uplinksPerLeaf"),
            std::string::npos);
  Json fabric = *api_.peek(fabrics(), "", "default");
  EXPECT_EQ(fabric["status"]["conditions"][0]["status"], "False");
  EXPECT_EQ(controller->planner()->fabric().uplinksPerLeaf(), 2);

  // A description that drops a path in use (1 uplink) is refused by the planner.
  api_.put(fabrics(), fabricObject(3, {{"spines", 1}, {"uplinksPerLeaf", 1}}));
  controller->sync();
  EXPECT_EQ(*configMap(), before);
  EXPECT_EQ(eventsWithReason("FabricRejected").size(), 2u);

  // A valid change (a failed link in the description): weights move, a new version.
  api_.put(fabrics(), fabricObject(4, {{"links", Json::array({{{"leaf", "leaf-a"},
                                                               {"uplink", 0},
                                                               {"capacityFraction", 0},
                                                               {"reason", "optic"}}})}}));
  controller->sync();
  c4p::PlanDocument doc = planDocument();
  EXPECT_EQ(doc.version, 2);
  for (const auto& pair : doc.pairs) {
    for (const auto& s : pair.subflows) {
      EXPECT_EQ(s.weight, s.path == 0 ? 0.0 : 1.0) << pair.local_node << " path " << s.path;
    }
  }
  fabric = *api_.peek(fabrics(), "", "default");
  EXPECT_EQ(fabric["status"]["conditions"][0]["status"], "True");
  EXPECT_EQ(fabric["status"]["degradedLinks"], 1);
  EXPECT_NE((*api_.peek(resources::trainingJobs(), "team", "llm"))["status"]["plan"]["reason"]
                .get<std::string>()
                .find("fabric changed"),
            std::string::npos);
}

TEST_F(TrafficPlanTest, NoPlannerFromABadFirstFabricOrFromSeveralFabrics) {
  api_.put(fabrics(), fabricObject(1, {{"pathSelection", {{"rule", "crc"}}}}));
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  auto controller = makeController();
  controller->sync();
  EXPECT_EQ(controller->planner(), nullptr);
  EXPECT_FALSE(configMap());
  EXPECT_EQ(eventsWithReason("FabricRejected").size(), 1u);

  Json other = fabricObject(1);
  other["metadata"]["name"] = "other";
  other["metadata"]["uid"] = "other-uid";
  api_.put(fabrics(), other);
  api_.put(fabrics(), fabricObject(2));
  controller->sync();
  EXPECT_EQ(controller->planner(), nullptr);
  EXPECT_EQ(eventsWithReason("FabricAmbiguous").size(), 2u);

  // Naming one resolves it.
  TrafficPlanConfig config;
  config.fabric_name = "other";
  auto named = makeController(config);
  named->sync();
  ASSERT_NE(named->planner(), nullptr);
  EXPECT_EQ(planDocument().version, 1);
}

TEST_F(TrafficPlanTest, ANodeWithoutLeafLabelGetsAPlanFailedEvent) {
  api_.put(resources::nodes(), Json{{"metadata", {{"name", "n3"}}}});
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  EXPECT_FALSE(configMap());
  ASSERT_EQ(eventsWithReason("PlanFailed").size(), 1u);
  EXPECT_NE(eventsWithReason("PlanFailed")[0]["message"].get<std::string>().find("n3"),
            std::string::npos);
}

TEST_F(TrafficPlanTest, TheThreadSyncsEveryPeriodAndWhenKicked) {
  TrafficPlanConfig config;
  config.period = std::chrono::seconds{10};
  auto controller = makeController(config);
  controller->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));  // the first sync ran (no job yet) and it waits
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->kick();
  for (int i = 0; i < 500 && !configMap(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{2});  // real time: the thread runs
  }
  ASSERT_TRUE(configMap()) << "a kick syncs at once";
  ASSERT_TRUE(clock_.awaitWaiters(1));
  // Without a kick, the next sync comes with the period.
  api_.put(fabrics(),
           fabricObject(
               2, {{"links",
                    Json::array({{{"leaf", "leaf-a"}, {"uplink", 0}, {"capacityFraction", 0}}})}}));
  clock_.advance(std::chrono::seconds{10});
  for (int i = 0; i < 500 && planDocument().version < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  EXPECT_EQ(planDocument().version, 2);
  controller->stop();
  controller->stop();  // idempotent
}

// Telemetry: rank 2 on n2 reports what arrived on each subflow of its connection from rank 1 on
// n1 every second (as a receiver reports: the listener's port, no path id, weight 1; subflow i is
// the sender's subflow i). The subflow on path 0 stops while path 1 moves: the link is failed,
// weights move to path 1 (same ports), the plugin's next message uses them. After the hold the
// weights return.
class TelemetryTest : public TrafficPlanTest {
 protected:
  void report(std::uint64_t seq, std::uint64_t bytes_path0, std::uint64_t bytes_path1,
              bool waiting = false, std::optional<std::int64_t> version = std::nullopt) {
    const c4p::PlanDocument doc = planDocument();
    report::ConnectionStats conn;
    conn.id = 1;
    conn.direction = report::Direction::kRecv;
    conn.peer_rank = 1;
    conn.peer_node = "n1";
    conn.peer_pod = "llm-1";
    conn.inflight = waiting ? 1 : 0;
    conn.oldest_inflight_us = waiting ? 1'500'000 : 0;
    for (const auto& s : doc.pairs[0].subflows) {
      std::uint64_t bytes = s.path == 0 ? bytes_path0 : bytes_path1;
      conn.subflows.push_back(
          {static_cast<std::uint32_t>(conn.subflows.size()), 29500, -1, 1.0, bytes});
      conn.bytes += bytes;
    }
    apply("n2", seq, {"team", "llm", "llm-2", "n2", 2, 4, 0, 100}, version ? *version : doc.version,
          std::move(conn));
    clock_.advance(std::chrono::seconds{1});
  }
  // The sending rank's (rank 1 on n1) report of the plan version its plugin runs.
  void senderReport(std::uint64_t seq, std::int64_t version) {
    apply("n1", seq, {"team", "llm", "llm-1", "n1", 1, 4, 0, 101}, version);
  }
  // One node plugin batch of `node` carrying one rank's report, applied to the store now.
  void apply(const std::string& node, std::uint64_t seq, report::RankIdentity id,
             std::int64_t version, std::optional<report::ConnectionStats> conn = std::nullopt) {
    report::NodeReport batch;
    batch.node = node;
    batch.seq = seq;
    batch.time_unix_ns = toUnixNanos(clock_.wallNow());
    report::RankReport r;
    r.id = std::move(id);
    r.seq = seq;
    r.time_unix_ns = batch.time_unix_ns;
    r.plan_version = version;
    if (conn) r.connections.push_back(std::move(*conn));
    batch.reports.push_back(std::move(r));
    store_.apply(batch, {{"team/llm", ingest::JobFacts{"job-uid", 0, 4}}}, clock_.wallNow(), 0);
  }
  // A controller with a 30 s link hold and an Enforce job whose n1 -> n2 path 0 telemetry has
  // failed (as AStalledPathFailsItsLinkAndWeightsMove does): plan version 2, path 0 without
  // weight. `p0`, `p1` carry the counters on; `failed` is the LinkFailed Events so far.
  std::unique_ptr<TrafficPlanController> withPath0Failed(std::uint64_t& p0, std::uint64_t& p1,
                                                         std::size_t& failed) {
    TrafficPlanConfig config;
    config.link_hold = std::chrono::seconds{30};
    auto controller = makeController(config);
    placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
    controller->sync();
    for (std::uint64_t seq = 1; seq <= 3; ++seq) {
      report(seq, p0 += 10'000'000, p1 += 10'000'000);
      controller->sync();
    }
    report(4, p0, p1 += 10'000'000);
    controller->sync();
    report(5, p0, p1, true);
    controller->sync();
    EXPECT_EQ(planDocument().version, 2);
    failed = eventsWithReason("LinkFailed").size();
    return controller;
  }
};

// When the hold ends, the weights return in the planner before the new version is written, and
// the window the receiver sent under the old version (path 0 without weight, so it moved nothing)
// must be judged by the old version's weights. Judged by the returned ones, the healed path was
// "stalled, 30 MB behind its siblings" and failed again at once (e2e.c4p_fabric: "Link failed"
// 2 s after "LinkRestored").
TEST_F(TelemetryTest, AWindowOfTheOldVersionIsJudgedByItsOwnWeightsWhenTheHoldEnds) {
  std::uint64_t p0 = 0, p1 = 0;
  std::size_t failed = 0;
  auto controller = withPath0Failed(p0, p1, failed);
  // Under version 2 path 0 carries nothing, as planned.
  for (std::uint64_t seq = 6; seq <= 8; ++seq) {
    report(seq, p0, p1 += 10'000'000);
    controller->sync();
  }
  clock_.advance(std::chrono::seconds{30});
  report(9, p0, p1, true);  // a wait between messages, still under version 2
  controller->sync();
  EXPECT_EQ(planDocument().version, 3) << "the weights returned";
  EXPECT_FALSE(eventsWithReason("LinkRestored").empty());
  EXPECT_EQ(eventsWithReason("LinkFailed").size(), failed)
      << eventsWithReason("LinkFailed").back()["message"].get<std::string>();
}

// A plan version reaches the ranks one by one: while the receiver runs version 3 and the sender
// still runs 2 (path 0 without weight), path 0 moves nothing and is no evidence. Once the sender
// reports version 3 too, a path 0 that still moves nothing is (the control: the same windows).
TEST_F(TelemetryTest, APairIsJudgedOnlyOnceItsSenderRunsThePlanVersionToo) {
  std::uint64_t p0 = 0, p1 = 0;
  std::size_t failed = 0;
  auto controller = withPath0Failed(p0, p1, failed);
  clock_.advance(std::chrono::seconds{30});
  report(6, p0, p1 += 10'000'000);
  controller->sync();
  ASSERT_EQ(planDocument().version, 3);
  std::uint64_t seq = 7;
  for (; seq <= 10; ++seq) {  // the receiver on 3, the sender still on 2
    senderReport(seq, 2);
    report(seq, p0, p1 += 10'000'000);
    controller->sync();
  }
  EXPECT_EQ(eventsWithReason("LinkFailed").size(), failed) << "judged the sender by a version it "
                                                              "does not run";
  for (; seq <= 14; ++seq) {  // both on 3, and path 0 still moves nothing: a stall
    senderReport(seq, 3);
    report(seq, p0, p1 += 10'000'000);
    controller->sync();
  }
  EXPECT_GT(eventsWithReason("LinkFailed").size(), failed) << "the control found no stall";
}

TEST_F(TelemetryTest, AStalledPathFailsItsLinkAndWeightsMove) {
  TrafficPlanConfig config;
  config.link_hold = std::chrono::seconds{30};
  auto controller = makeController(config);
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(planDocument().version, 1);
  const auto ports_before = planDocument().pairs;

  // Healthy: 10 MB per second on each path.
  std::uint64_t p0 = 0, p1 = 0;
  for (std::uint64_t seq = 1; seq <= 3; ++seq) {
    report(seq, p0 += 10'000'000, p1 += 10'000'000);
    controller->sync();
  }
  EXPECT_EQ(planDocument().version, 1);

  // Path 0 stops; path 1 keeps moving. One window is not enough.
  report(4, p0, p1 += 10'000'000);
  controller->sync();
  EXPECT_EQ(planDocument().version, 1);
  // The next window nothing arrives and an operation waits: the dead subflow is 10 MB behind its
  // sibling. Confirmed.
  report(5, p0, p1, true);
  controller->sync();
  c4p::PlanDocument doc = planDocument();
  ASSERT_EQ(doc.version, 2);
  for (std::size_t i = 0; i < doc.pairs.size(); ++i) {
    for (std::size_t j = 0; j < doc.pairs[i].subflows.size(); ++j) {
      const auto& s = doc.pairs[i].subflows[j];
      EXPECT_EQ(s.local_port, ports_before[i].subflows[j].local_port) << "ports stay";
      EXPECT_EQ(s.path, ports_before[i].subflows[j].path) << "paths stay";
      // n1 -> n2 crosses leaf-a's uplink 0 up and leaf-b's down, the failed directions;
      // n3 -> n0 uses the other directions, which carry healthy traffic.
      if (doc.pairs[i].local_node == "n1") {
        EXPECT_EQ(s.weight, s.path == 0 ? 0.0 : 1.0);
      } else {
        EXPECT_EQ(s.weight, 0.5);
      }
    }
  }
  ASSERT_GE(eventsWithReason("LinkFailed").size(), 1u);
  EXPECT_NE(eventsWithReason("LinkFailed")[0]["message"].get<std::string>().find("n1 -> n2 path 0"),
            std::string::npos);
  Json fabric = *api_.peek(fabrics(), "", "default");
  ASSERT_GE(fabric["status"]["links"].size(), 1u);
  EXPECT_EQ(fabric["status"]["links"][0]["source"], "telemetry");
  EXPECT_EQ(fabric["status"]["links"][0]["capacityFraction"], 0.0);

  // A restarted controller takes the telemetry states back from the Fabric's status and keeps
  // the version.
  {
    auto restarted = makeController(config);
    restarted->sync();
    EXPECT_EQ(restarted->planVersion("team/llm"), 2);
    EXPECT_EQ(planDocument().version, 2);
  }

  // After the hold the state is lifted: equal weights again.
  clock_.advance(std::chrono::seconds{30});
  controller->sync();
  doc = planDocument();
  EXPECT_EQ(doc.version, 3);
  for (const auto& pair : doc.pairs) {
    for (const auto& s : pair.subflows) EXPECT_EQ(s.weight, 0.5);
  }
  EXPECT_GE(eventsWithReason("LinkRestored").size(), 1u);
}

// The same stall as above while a second Enforce job (llm2 on n4 and n5, leaves a and b) has
// weight on both failed directions: llm's reports alone do not fail the link for llm2. The link
// stays a suspect, which explains llm's stalled connection to C4D; no plan changes, no LinkFailed.
// (The test above is the control: llm alone on the link, confirmed.)
TEST_F(TelemetryTest, OneJobsStallDoesNotFailALinkAnotherEnforceJobUses) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  Json other = jobObject("Enforce");
  other["metadata"]["name"] = "llm2";
  other["metadata"]["uid"] = "job2-uid";
  other["spec"]["replicas"] = 2;
  api_.put(resources::trainingJobs(), other);
  api_.put(resources::pods(), podObject(other, 0, 0, "n4"));
  api_.put(resources::pods(), podObject(other, 1, 0, "n5"));
  controller->sync();
  ASSERT_EQ(controller->planner()->jobs().size(), 2u);
  const std::int64_t version = planDocument().version;
  std::uint64_t p0 = 0, p1 = 0;
  for (std::uint64_t seq = 1; seq <= 3; ++seq) {
    report(seq, p0 += 10'000'000, p1 += 10'000'000);
    controller->sync();
  }
  report(4, p0, p1 += 10'000'000);
  controller->sync();
  for (std::uint64_t seq = 5; seq <= 8; ++seq) {
    report(seq, p0, p1, true);
    controller->sync();
  }
  EXPECT_EQ(planDocument().version, version);
  EXPECT_TRUE(eventsWithReason("LinkFailed").empty());
  const auto why = controller->explainConnection("team/llm", "n1", "n2");
  ASSERT_TRUE(why) << "the suspect explains the stalled connection";
  EXPECT_NE(why->find("suspect"), std::string::npos) << *why;
}

TEST_F(TelemetryTest, IdleWindowsAndOtherPlanVersionsAreNoEvidence) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  std::uint64_t p0 = 0, p1 = 0;
  report(1, p0 += 10'000'000, p1 += 10'000'000);
  // Waiting with balanced subflows (compute elsewhere): no lag, no evidence.
  for (std::uint64_t seq = 2; seq < 6; ++seq) {
    report(seq, p0, p1, true);
    controller->sync();
  }
  EXPECT_EQ(planDocument().version, 1);
  // A receiver that still runs another plan version gives no evidence.
  for (std::uint64_t seq = 6; seq < 9; ++seq) {
    report(seq, p0, p1 += 10'000'000, false, 0);
    controller->sync();
  }
  EXPECT_EQ(planDocument().version, 1);
  EXPECT_TRUE(eventsWithReason("LinkFailed").empty());
}

TEST_F(TelemetryTest, ABriefDipIsNotAFailure) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  std::uint64_t p0 = 0, p1 = 0;
  report(1, p0 += 10'000'000, p1 += 10'000'000);
  report(2, p0 += 200'000, p1 += 10'000'000);  // path 0 barely moved this window
  controller->sync();
  report(3, p0 += 10'000'000, p1 += 10'000'000);  // and recovered
  controller->sync();
  report(4, p0 += 10'000'000, p1 += 10'000'000);
  controller->sync();
  EXPECT_EQ(planDocument().version, 1);
  EXPECT_TRUE(eventsWithReason("LinkFailed").empty());
}

TEST_F(TelemetryTest, ASlowConnectionVerdictLowersTheBar) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  std::uint64_t p0 = 0, p1 = 0;
  report(1, p0 += 10'000'000, p1 += 10'000'000);
  // Path 0 carries 30% of its share: not stalled by the default bar (10%)...
  report(2, p0 += 3'000'000, p1 += 10'000'000);
  controller->sync();
  report(3, p0 += 3'000'000, p1 += 10'000'000);
  controller->sync();
  EXPECT_EQ(planDocument().version, 1);
  // ... but C4D found the connection slow: below 50% counts.
  controller->onSlowConnection("team/llm", "n1", "n2");
  report(4, p0 += 3'000'000, p1 += 10'000'000);
  controller->sync();
  controller->onSlowConnection("team/llm", "n1", "n2");
  report(5, p0 += 3'000'000, p1 += 10'000'000);
  controller->sync();
  EXPECT_EQ(planDocument().version, 2);
}

// What C4D asks before it acts on a hang or slowness between two nodes: a suspect, then failed,
// link direction on the pair's planned paths; either direction of the pair; nothing for
// connections whose paths avoid it or that stay inside a leaf.
TEST_F(TelemetryTest, ConnectionsOnSuspectAndFailedLinksAreExplainedToC4D) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  std::uint64_t p0 = 0, p1 = 0;
  for (std::uint64_t seq = 1; seq <= 2; ++seq) {
    report(seq, p0 += 10'000'000, p1 += 10'000'000);
    controller->sync();
  }
  EXPECT_FALSE(controller->explainConnection("team/llm", "n1", "n2"));
  report(3, p0, p1 += 10'000'000);  // path 0 stops: a suspect
  controller->sync();
  auto why = controller->explainConnection("team/llm", "n2", "n1");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("C4P suspects link plane0/leaf-a/uplink0 Up (n1 -> n2 path 0"),
            std::string::npos)
      << *why;
  EXPECT_EQ(controller->explainConnection("team/llm", "n1", "n2"), why);
  why = controller->explainConnection("team/llm", "n3", "n0");
  ASSERT_TRUE(why) << "n3 -> n0 sends on leaf-b up and leaf-a down, but its acknowledgements may "
                      "come back on leaf-a up, which drops what it carries";
  EXPECT_NE(why->find("C4P suspects link plane0/leaf-a/uplink0 Up"), std::string::npos) << *why;
  EXPECT_NE(why->find("on a path back of n3 -> n0 (path 0 of n0 -> n3, which its "
                      "acknowledgements may take)"),
            std::string::npos)
      << *why;
  EXPECT_FALSE(controller->explainConnection("team/llm", "n0", "n1")) << "inside a leaf";
  EXPECT_FALSE(controller->explainConnection("team/other", "n1", "n2"));
  report(4, p0, p1, true);  // confirmed: failed
  controller->sync();
  ASSERT_EQ(planDocument().version, 2);
  why = controller->explainConnection("team/llm", "n1", "n2");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("C4P holds link plane0/leaf-a/uplink0 Up failed on the path of n1 -> n2 "
                      "(path 0)"),
            std::string::npos)
      << *why;
}

// A hang on a connection whose data paths are healthy but whose acknowledgements cross a failed
// link direction (the gray failure of e2e.c4p_fabric: the monitor confirmed the direction the
// stalled subflow sent on; the connections the other way stalled for want of acknowledgements,
// and C4D restarted the job at once instead of leaving it to C4P). A degraded return direction
// explains nothing: acknowledgements need little of it.
TEST_F(TrafficPlanTest, AFailedLinkOnAReturnPathExplainsTheHangsOfThePairsItAcknowledges) {
  api_.put(
      fabrics(),
      fabricObject(
          2,
          {{"links",
            {{{"leaf", "leaf-a"}, {"uplink", 0}, {"direction", "Down"}, {"capacityFraction", 0.0}},
             {{"leaf", "leaf-b"},
              {"uplink", 1},
              {"direction", "Up"},
              {"capacityFraction", 0.5}}}}}));
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_TRUE(configMap());
  // The ring sends n1 -> n2 on leaf-a up and leaf-b down; n2 -> n1 comes back on leaf-b up and
  // leaf-a down, whose path 0 is dead.
  auto why = controller->explainConnection("team/llm", "n1", "n2");
  ASSERT_TRUE(why);
  EXPECT_EQ(*why,
            "C4P holds link plane0/leaf-a/uplink0 Down failed on a path back of n1 -> n2 (path 0 "
            "of n2 -> n1, which its acknowledgements may take)");
  // n3 -> n0 sends on leaf-a down: its own path explains it first.
  why = controller->explainConnection("team/llm", "n0", "n3");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("on the path of n3 -> n0"), std::string::npos) << *why;

  // Only the degraded direction left: n1 -> n2's acknowledgements (leaf-b up) are not explained.
  api_.put(fabrics(), fabricObject(3, {{"links",
                                        {{{"leaf", "leaf-b"},
                                          {"uplink", 1},
                                          {"direction", "Up"},
                                          {"capacityFraction", 0.5}}}}}));
  controller->sync();
  EXPECT_FALSE(controller->explainConnection("team/llm", "n1", "n2"));
  EXPECT_TRUE(controller->explainConnection("team/llm", "n0", "n3"));
}

TEST_F(TrafficPlanTest, ADegradedLinkInTheDescriptionExplainsOnlyEnforceJobs) {
  api_.put(fabrics(), fabricObject(2, {{"links",
                                        {{{"leaf", "leaf-b"},
                                          {"uplink", 1},
                                          {"direction", "Up"},
                                          {"capacityFraction", 0.5}}}}}));
  auto controller = makeController();
  placeJob("Advisory", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_TRUE(configMap());
  EXPECT_FALSE(controller->explainConnection("team/llm", "n3", "n0"))
      << "an Advisory job's flows do not follow the plan";
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  auto why = controller->explainConnection("team/llm", "n0", "n3");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("C4P holds link plane0/leaf-b/uplink1 Up degraded to 50 % of its capacity"),
            std::string::npos)
      << *why;
  EXPECT_FALSE(controller->explainConnection("team/llm", "n1", "n2")) << "leaf-a up, leaf-b down";
}

// Three tiers: a degraded spine–core link explains the pairs across pods whose planned paths use
// it, in its direction only. Pods x (leaf-a: n0, n1) and y (leaf-b: n2, n3); the ring n0 n2 n1 n3
// sends x -> y on n0 -> n2 and n1 -> n3, y -> x on n2 -> n1 and n3 -> n0.
TEST_F(TrafficPlanTest, ADegradedSpineCoreLinkExplainsThePairsAcrossPodsThatUseIt) {
  api_.put(fabrics(), fabricObject(2, {{"coreUplinksPerSpine", 1},
                                       {"coreUplinkSpeedGbps", 100},
                                       {"links",
                                        {{{"pod", "pod-y"},
                                          {"spine", 0},
                                          {"coreUplink", 0},
                                          {"direction", "Down"},
                                          {"capacityFraction", 0.9}}}}}));
  putNodesInPods();
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n2", "n1", "n3"});
  controller->sync();
  ASSERT_TRUE(configMap());
  // Path 0 (leaf uplink 0, spine 0, core uplink 0) carries one subflow of every connection.
  for (const auto& pair : planDocument().pairs) {
    ASSERT_EQ(pair.subflows.size(), 2u);
    EXPECT_NE(pair.subflows[0].path, pair.subflows[1].path) << pair.local_node;
  }
  for (const auto& [a, b] : {std::pair{"n0", "n2"}, std::pair{"n3", "n1"}}) {
    auto why = controller->explainConnection("team/llm", a, b);
    ASSERT_TRUE(why) << a << "<->" << b;
    EXPECT_NE(
        why->find("C4P holds link plane0/pod-y/spine0/core0 Down degraded to 90 % of its capacity"),
        std::string::npos)
        << *why;
  }
  EXPECT_FALSE(controller->explainConnection("team/llm", "n2", "n1"))
      << "y -> x: core up, not down";
  EXPECT_FALSE(controller->explainConnection("team/llm", "n3", "n0"))
      << "y -> x: core up, not down";
}

// A spine–core link failed by telemetry is in the Fabric's status; a restarted controller takes
// it back from there (as it does leaf links) and C4D's explanations name it.
TEST_F(TrafficPlanTest, ARestartedControllerKeepsATelemetryStateOfASpineCoreLink) {
  Json fabric = fabricObject(2, {{"coreUplinksPerSpine", 1}, {"coreUplinkSpeedGbps", 100}});
  fabric["status"] = {{"links",
                       {{{"plane", 0},
                         {"pod", "pod-x"},
                         {"spine", 1},
                         {"coreUplink", 0},
                         {"direction", "Up"},
                         {"capacityFraction", 0},
                         {"source", "telemetry"}}}}};
  api_.put(fabrics(), fabric);
  putNodesInPods();
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n2", "n1", "n3"});
  controller->sync();
  Json status = (*api_.peek(fabrics(), "", "default"))["status"];
  ASSERT_EQ(status["links"].size(), 1u) << status.dump();
  EXPECT_EQ(status["links"][0]["spine"], 1);
  EXPECT_EQ(status["links"][0]["source"], "telemetry");
  // Path 1 (leaf uplink 1, spine 1, core uplink 0) of x -> y carries no weight; y -> x is not
  // explained by a link going up from pod-x.
  for (const auto& pair : planDocument().pairs) {
    if (pair.local_node != "n0" && pair.local_node != "n1") continue;
    for (const auto& sf : pair.subflows) EXPECT_EQ(sf.weight, sf.path == 1 ? 0.0 : 1.0);
  }
  auto why = controller->explainConnection("team/llm", "n0", "n2");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("C4P holds link plane0/pod-x/spine1/core0 Up failed"), std::string::npos)
      << *why;
  // y -> x sends on pod-x's core down, healthy; its acknowledgements may come back up it.
  why = controller->explainConnection("team/llm", "n2", "n1");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("C4P holds link plane0/pod-x/spine1/core0 Up failed on a path back of "
                      "n2 -> n1"),
            std::string::npos)
      << *why;
}

// Between full syncs (period) the thread runs the telemetry pass alone every telemetry_period:
// new reports are judged and plans written, against the fabric, nodes and jobs of the last sync.
TEST_F(TelemetryTest, ATelemetryPassJudgesNewReportsWithoutAFullSync) {
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(planDocument().version, 1);
  std::uint64_t p0 = 0, p1 = 0;
  report(1, p0 += 10'000'000, p1 += 10'000'000);
  controller->syncTelemetryOnly();
  report(2, p0 += 10'000'000, p1 += 10'000'000);
  controller->syncTelemetryOnly();
  // A description change waits for the full sync.
  api_.put(fabrics(), fabricObject(2, {{"links", Json::array({{{"leaf", "leaf-b"},
                                                               {"uplink", 1},
                                                               {"direction", "Up"},
                                                               {"capacityFraction", 0}}})}}));
  report(3, p0, p1 += 10'000'000);
  controller->syncTelemetryOnly();
  controller->syncTelemetryOnly();  // no new report: no observation
  EXPECT_EQ(planDocument().version, 1);
  report(4, p0, p1, true);
  controller->syncTelemetryOnly();
  c4p::PlanDocument doc = planDocument();
  EXPECT_EQ(doc.version, 2) << "the dead path, found by telemetry passes alone";
  EXPECT_NE((*configMap())["metadata"]["annotations"]["c4.dev/plan-reason"].get<std::string>().find(
                "telemetry"),
            std::string::npos);
  EXPECT_EQ(api_.peek(fabrics(), "", "default")->at("status").value("degradedLinks", 0), 2)
      << "telemetry states only: the new description is not read yet";
  controller->sync();
  EXPECT_EQ(planDocument().version, 3) << "the full sync takes the description";
  EXPECT_EQ(api_.peek(fabrics(), "", "default")->at("status").value("degradedLinks", 0), 3);
}

// The plan version each rank's plugin applied (its reports' planVersion) reaches status.plan:
// the oldest among the ranks' latest reports, how many carry the version written, how many
// report; and the metric counts the ranks behind. A rank whose telemetry ended is not counted.
TEST_F(TelemetryTest, TheVersionTheRanksAppliedIsInStatusAndTheMetric) {
  auto controller = makeController();
  placeJob("Advisory", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(planDocument().version, 1);
  auto rankReport = [&](std::int32_t rank, const std::string& node, std::uint64_t seq,
                        std::int64_t version, bool last = false) {
    report::NodeReport batch;
    batch.node = node;
    batch.seq = seq;
    batch.time_unix_ns = toUnixNanos(clock_.wallNow());
    report::RankReport r;
    r.id = {"team", "llm", "llm-" + std::to_string(rank),         node, rank,
            4,      0,     static_cast<std::uint32_t>(100 + rank)};
    r.seq = seq;
    r.time_unix_ns = batch.time_unix_ns;
    r.plan_version = version;
    r.last = last;
    batch.reports.push_back(r);
    store_.apply(batch, {{"team/llm", ingest::JobFacts{"job-uid", 0, 4}}}, clock_.wallNow(), 0);
  };
  auto plan = [&] {
    return (*api_.peek(resources::trainingJobs(), "team", "llm"))["status"]["plan"];
  };
  auto behind = [&] {
    const std::string text = registry_.expose();
    const auto at = text.find("\nc4_trafficplan_ranks_behind ");
    return at == std::string::npos ? std::string("missing")
                                   : text.substr(at + 29, text.find('\n', at + 1) - at - 29);
  };
  controller->syncTelemetryOnly();
  EXPECT_FALSE(plan().contains("appliedVersion")) << "nothing reports yet: nothing written";

  rankReport(0, "n0", 1, 1);
  rankReport(1, "n1", 1, -1);  // started before the plan was mounted
  controller->syncTelemetryOnly();
  EXPECT_EQ(plan()["appliedVersion"], -1);
  EXPECT_EQ(plan()["ranksApplied"], 1);
  EXPECT_EQ(plan()["ranksReporting"], 2);
  EXPECT_EQ(plan()["version"], 1) << "the merge patch leaves the written fields";
  EXPECT_EQ(behind(), "1");

  rankReport(1, "n1", 2, 1);
  controller->syncTelemetryOnly();
  EXPECT_EQ(plan()["appliedVersion"], 1);
  EXPECT_EQ(plan()["ranksApplied"], 2);
  EXPECT_EQ(behind(), "0");

  // A new version: the ranks are behind until their reports carry it.
  api_.put(
      fabrics(),
      fabricObject(
          2, {{"links",
               Json::array({{{"leaf", "leaf-a"}, {"uplink", 0}, {"capacityFraction", 0.5}}})}}));
  placeJob("Enforce", 0, {"n0", "n1", "n2", "n3"});
  controller->sync();
  ASSERT_EQ(planDocument().version, 2);
  EXPECT_EQ(plan()["ranksApplied"], 0);
  EXPECT_EQ(plan()["appliedVersion"], 1);
  EXPECT_EQ(behind(), "2");
  rankReport(0, "n0", 2, 2);
  rankReport(1, "n1", 3, 1, /*last=*/true);  // rank 1's telemetry ends: not counted
  clock_.advance(std::chrono::seconds{1});
  controller->syncTelemetryOnly();
  EXPECT_EQ(plan()["appliedVersion"], 2);
  EXPECT_EQ(plan()["ranksApplied"], 1);
  EXPECT_EQ(plan()["ranksReporting"], 1);
  EXPECT_EQ(behind(), "0");
}

// Wrong-typed fields (issue #27): a Fabric whose spec has a field of another type is refused
// with an Event; a telemetry link state in its status with one is not restored (the rest is);
// a Pod whose nodeName is not a string leaves its job unplaced. Nothing throws.
TEST_F(TrafficPlanTest, WrongTypedFabricPodAndJobFieldsAreIgnoredOrRefused) {
  Json fabric = fabricObject(2, {{"coreUplinksPerSpine", 1}, {"coreUplinkSpeedGbps", 100}});
  fabric["metadata"]["generation"] = "2";
  fabric["status"] = {{"links",
                       {{{"plane", "0"},
                         {"pod", "pod-x"},
                         {"spine", 1},
                         {"coreUplink", 0},
                         {"source", "telemetry"}},
                        {{"plane", 0},
                         {"leaf", 5},
                         {"uplink", 0},
                         {"capacityFraction", "0"},
                         {"source", "telemetry"}},
                        {{"plane", 0},
                         {"pod", "pod-x"},
                         {"spine", 1},
                         {"coreUplink", 0},
                         {"direction", "Up"},
                         {"capacityFraction", 0},
                         {"source", "telemetry"}},
                        7}},
                      {"conditions", "x"}};
  api_.put(fabrics(), fabric);
  putNodesInPods();
  auto controller = makeController();
  placeJob("Enforce", 0, {"n0", "n2", "n1", "n3"});
  Json odd_job = *api_.peek(resources::trainingJobs(), "team", "llm");
  odd_job["metadata"]["labels"] = "x";
  api_.put(resources::trainingJobs(), odd_job);
  ASSERT_NO_THROW(controller->sync());
  ASSERT_NE(controller->planner(), nullptr) << "the description itself is fine";
  Json status = (*api_.peek(fabrics(), "", "default"))["status"];
  ASSERT_EQ(status["links"].size(), 1u) << "only the well-typed state came back: " << status.dump();
  EXPECT_EQ(status["links"][0]["direction"], "Up");
  EXPECT_EQ(planDocument().version, 1);

  // A pod whose nodeName is a number: the job is not placed (no new plan), nothing throws.
  Json pod = *api_.peek(resources::pods(), "team", "llm-1");
  pod["spec"]["nodeName"] = 5;
  api_.put(resources::pods(), pod);
  ASSERT_NO_THROW(controller->sync());

  // A description with a field of another type: refused with an Event, the planner stays.
  api_.put(fabrics(), fabricObject(3, {{"spines", "2"}}));
  ASSERT_NO_THROW(controller->sync());
  ASSERT_EQ(eventsWithReason("FabricRejected").size(), 1u);
  EXPECT_NE(eventsWithReason("FabricRejected")[0]["message"].get<std::string>().find("spines"),
            std::string::npos);
  EXPECT_EQ(controller->planner()->fabric().uplinksPerLeaf(), 2);
}

}  // namespace
}  // namespace c4::op::trafficplan
