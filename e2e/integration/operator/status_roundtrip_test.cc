// Every status field the operator writes survives the real API server. A CRD that declares a
// property twice (YAML keeps the last) or not at all makes the API server prune what the operator
// writes, silently: these tests write the operator's own encodings through the status subresource
// and read them back unchanged, and check that the test's status covers every property the CRD's
// status schema declares (so a field added to the CRD is added here too).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>

#include "harness.h"
#include "operator/c4p/fabric.h"
#include "operator/trafficplan/controller.h"
#include "operator/trainingjob/api.h"
#include "operator/trainingjob/status.h"
#include "unit-tests/support/trainingjob_status_fixture.h"

namespace c4::op::it {
namespace {

// The property paths a structural schema declares under `schema` ("a.b", "list[].c"): leaves
// and objects alike, so a declared object nobody fills shows up too.
void schemaPaths(const Json& schema, const std::string& prefix, std::set<std::string>& out) {
  if (schema.contains("properties")) {
    for (const auto& [key, sub] : schema["properties"].items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      out.insert(path);
      schemaPaths(sub, path, out);
    }
  }
  if (schema.contains("items")) schemaPaths(schema["items"], prefix + "[]", out);
}

// The same paths for a value: the union over the items of every list.
void valuePaths(const Json& value, const std::string& prefix, std::set<std::string>& out) {
  if (value.is_object()) {
    for (const auto& [key, sub] : value.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      out.insert(path);
      valuePaths(sub, path, out);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) valuePaths(item, prefix + "[]", out);
  }
}

// The status schema of the served version of the CRD in `file`.
Json statusSchema(const char* file) {
  Json crd = yamlToJson(YAML::LoadFile(file));
  for (const auto& version : crd["spec"]["versions"]) {
    if (version.value("storage", false)) {
      return version["schema"]["openAPIV3Schema"]["properties"]["status"];
    }
  }
  ADD_FAILURE() << file << ": no storage version";
  return Json::object();
}

std::string missingText(const std::set<std::string>& want, const std::set<std::string>& have) {
  std::string out;
  for (const auto& p : want) {
    if (!have.contains(p)) out += (out.empty() ? "" : ", ") + p;
  }
  return out;
}

class StatusRoundTripIT : public NamespacedTest {
 protected:
  StatusRoundTripIT() : NamespacedTest("c4-status") {}
};

TEST_F(StatusRoundTripIT, EveryTrainingJobStatusFieldTheOperatorWritesComesBackUnchanged) {
  // The operator's encoding of a status with every field set (the codec's own round trip is the
  // unit test's; here the API server's schema is the judge).
  auto decoded = decodeTrainingJobStatus(fixtures::fullStatus());
  ASSERT_TRUE(decoded) << decoded.error().toString();
  const Json written = trainingJobStatusJson(*decoded);

  std::set<std::string> declared;
  std::set<std::string> filled;
  schemaPaths(statusSchema(C4_CRD_FILE), "", declared);
  valuePaths(written, "", filled);
  ASSERT_FALSE(declared.empty());
  EXPECT_EQ(missingText(declared, filled), "")
      << "status properties the CRD declares that the test's status leaves out: add them to "
         "unit-tests/support/trainingjob_status_fixture.h (and to the codec)";
  EXPECT_EQ(missingText(filled, declared), "")
      << "status fields the operator writes that the CRD does not declare: the API server "
         "prunes them";

  auto created = client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "llm", 2));
  ASSERT_TRUE(created) << created.error().toString();
  auto put = client_->patch(resources::trainingJobs(), ns_, "llm", PatchType::kMerge,
                            {{"status", written}}, statusSubresource());
  ASSERT_TRUE(put) << put.error().toString();
  auto back = client_->get(resources::trainingJobs(), ns_, "llm");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ((*back)["status"], written) << "the API server changed or pruned the status";

  // C4P writes status.plan alone with a merge patch (trafficplan/controller.cc): every member of
  // plan survives and the rest of the status stays as it was.
  TrainingJobStatus plan_only;
  plan_only.plan = PlanStatus{.version = 10,
                              .mode = c4p::Mode::kAdvisory,
                              .max_link_load = std::string{"1.250"},
                              .reason = std::string{"link plane0/leaf-1/uplink2 failed"},
                              .time = std::string{"2025-03-01T10:05:00Z"},
                              .applied_version = 9,
                              .ranks_applied = 0,
                              .ranks_reporting = 8};
  const Json plan_json = trainingJobStatusJson(plan_only);
  auto patched = client_->patch(resources::trainingJobs(), ns_, "llm", PatchType::kMerge,
                                {{"status", plan_json}}, statusSubresource());
  ASSERT_TRUE(patched) << patched.error().toString();
  back = client_->get(resources::trainingJobs(), ns_, "llm");
  ASSERT_TRUE(back) << back.error().toString();
  Json expected = written;
  expected["plan"] = plan_json["plan"];
  EXPECT_EQ((*back)["status"], expected);
  auto reread = parseTrainingJobStatus(*back);
  ASSERT_TRUE(reread) << reread.error().toString();
  ASSERT_TRUE(reread->plan);
  EXPECT_EQ(*reread->plan, *plan_only.plan);

  // The applied fields are written alone the same way (what the ranks report): the rest of
  // status.plan stays.
  TrainingJobStatus applied;
  applied.plan.emplace();
  applied.plan->applied_version = 10;
  applied.plan->ranks_applied = 8;
  applied.plan->ranks_reporting = 8;
  patched = client_->patch(resources::trainingJobs(), ns_, "llm", PatchType::kMerge,
                           {{"status", trainingJobStatusJson(applied)}}, statusSubresource());
  ASSERT_TRUE(patched) << patched.error().toString();
  back = client_->get(resources::trainingJobs(), ns_, "llm");
  ASSERT_TRUE(back) << back.error().toString();
  reread = parseTrainingJobStatus(*back);
  ASSERT_TRUE(reread && reread->plan);
  PlanStatus want = *plan_only.plan;
  want.applied_version = 10;
  want.ranks_applied = 8;
  EXPECT_EQ(*reread->plan, want);
}

TEST_F(StatusRoundTripIT, EveryFabricStatusFieldTheOperatorWritesComesBackUnchanged) {
  installCrdFile(*client_, C4_FABRIC_CRD_FILE, "fabrics.c4.dev");
  const std::string name = uniqueName("c4-status-fabric");
  const Json object = {{"apiVersion", "c4.dev/v1alpha1"},
                       {"kind", "Fabric"},
                       {"metadata", {{"name", name}}},
                       {"spec",
                        {{"spines", 2},
                         {"uplinksPerLeaf", 4},
                         {"uplinkSpeedGbps", 400},
                         {"hostLinkSpeedGbps", 400},
                         {"coreUplinksPerSpine", 3},
                         {"coreUplinkSpeedGbps", 800},
                         {"pathSelection", {{"rule", "sourcePortModulo"}}}}}};
  auto created = client_->create(trafficplan::fabrics(), "", object);
  ASSERT_TRUE(created) << created.error().toString();
  struct Cleanup {
    KubeClient& client;
    std::string name;
    ~Cleanup() { (void)client.remove(trafficplan::fabrics(), "", name, DeleteOptions{}); }
  } cleanup{*client_, name};

  // As the controller renders it: a leaf uplink and a spine-core link (in a named pod and in the
  // unlabelled one) degraded by telemetry, and the Accepted condition.
  auto fabric = c4p::Fabric::fromJson(object);
  ASSERT_TRUE(fabric) << fabric.error().toString();
  ASSERT_TRUE(fabric->setLinkState(c4p::LinkRef(0, "leaf-1", 2), 0.5, c4p::Direction::kUp));
  ASSERT_TRUE(fabric->setLinkState(c4p::LinkRef::spineTier(0, "pod-a", 1, 2), 0.0));
  ASSERT_TRUE(fabric->setLinkState(c4p::LinkRef::spineTier(0, "", 0, 1), 0.25));
  Json written = c4p::renderFabricStatus(*fabric, 1, 1.25);
  setCondition(written, "Accepted", "True", "Accepted", "the planner uses this description", 1,
               realClock().wallNow());

  std::set<std::string> declared;
  std::set<std::string> filled;
  schemaPaths(statusSchema(C4_FABRIC_CRD_FILE), "", declared);
  valuePaths(written, "", filled);
  ASSERT_FALSE(declared.empty());
  EXPECT_EQ(missingText(declared, filled), "")
      << "Fabric status properties the CRD declares that the operator's rendering leaves out";
  EXPECT_EQ(missingText(filled, declared), "")
      << "Fabric status fields the operator writes that the CRD does not declare";

  auto put = client_->patch(trafficplan::fabrics(), "", name, PatchType::kMerge,
                            {{"status", written}}, statusSubresource());
  ASSERT_TRUE(put) << put.error().toString();
  auto back = client_->get(trafficplan::fabrics(), "", name);
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ((*back)["status"], written) << "the API server changed or pruned the status";
}

}  // namespace
}  // namespace c4::op::it
