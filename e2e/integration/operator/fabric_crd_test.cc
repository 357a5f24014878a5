// The Fabric CRD (crds/fabric.yaml) against the real API server: its schema and CEL rules refuse
// bad descriptions with the rule's message, the three-tier fields included, and what they accept
// the operator's parser (c4p::Fabric::fromJson) accepts too; what they refuse it refuses as well.
#include <gtest/gtest.h>

#include "harness.h"
#include "operator/c4p/fabric.h"
#include "operator/trafficplan/controller.h"

namespace c4::op::it {
namespace {

class FabricCrdIT : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testenvDir().empty()) GTEST_SKIP() << "C4_TESTENV_DIR is not set (no test cluster)";
    client_ = makeClient();
    ASSERT_TRUE(client_);
    installCrdFile(*client_, C4_FABRIC_CRD_FILE, "fabrics.c4.dev");
  }
  void TearDown() override {
    for (const auto& name : created_) {
      (void)client_->remove(trafficplan::fabrics(), "", name, DeleteOptions{});
    }
  }
  // A three-tier fabric: 2 spines per pod, 4 uplinks per leaf, 3 core uplinks per spine.
  static Json threeTier(const std::string& name) {
    return {{"apiVersion", "c4.dev/v1alpha1"},
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
  }
  Result<Json> create(const Json& fabric) {
    auto done = client_->create(trafficplan::fabrics(), "", fabric);
    if (done) created_.push_back(fabric["metadata"]["name"].get<std::string>());
    return done;
  }
  // The API server refuses `fabric` with a message containing `why`, and so does the parser.
  void refused(const Json& fabric, const std::string& why) {
    auto done = create(fabric);
    ASSERT_FALSE(done) << "accepted: " << fabric.dump();
    EXPECT_EQ(done.error().code, ErrorCode::kInvalidArgument) << done.error().toString();
    EXPECT_NE(done.error().message.find(why), std::string::npos) << done.error().message;
    EXPECT_FALSE(c4p::Fabric::fromJson(fabric)) << "the parser accepts " << fabric.dump();
  }

  std::unique_ptr<KubeClient> client_;
  std::vector<std::string> created_;
};

TEST_F(FabricCrdIT, ThreeTierDescriptionsAreCheckedByTheApiServerAndTheParserAlike) {
  const std::string base = uniqueName("fabric");
  // Accepted: three tiers with a degraded spine–core link and a table over all U·C paths.
  Json good = threeTier(base + "-good");
  good["spec"]["links"] =
      Json::array({{{"pod", "pod-a"},
                    {"spine", 1},
                    {"coreUplink", 2},
                    {"direction", "Up"},
                    {"capacityFraction", 0.5}},
                   {{"leaf", "leaf-1"}, {"uplink", 3}, {"capacityFraction", 0}}});
  Json entries = Json::array();
  for (int path = 0; path < 12; ++path) entries.push_back({{"port", 40000 + path}, {"path", path}});
  good["spec"]["pathSelection"] = {{"rule", "table"}, {"table", {{"entries", entries}}}};
  auto stored = create(good);
  ASSERT_TRUE(stored) << stored.error().toString();
  auto parsed = c4p::Fabric::fromJson(*stored);
  ASSERT_TRUE(parsed) << parsed.error().toString();
  EXPECT_EQ(parsed->coreUplinksPerSpine(), 3);
  EXPECT_EQ(parsed->pathsPerPlane(), 12);
  EXPECT_EQ(parsed->capacityGbps(c4p::LinkRef::spineTier(0, "pod-a", 1, 2), c4p::Direction::kUp),
            400);
  EXPECT_EQ(parsed->degradedLinks().size(), 2u);

  // A two-tier fabric gets coreUplinksPerSpine 0 from the API server, which the parser accepts.
  Json two = threeTier(base + "-two");
  two["spec"].erase("coreUplinksPerSpine");
  two["spec"].erase("coreUplinkSpeedGbps");
  stored = create(two);
  ASSERT_TRUE(stored) << stored.error().toString();
  EXPECT_EQ((*stored)["spec"]["coreUplinksPerSpine"], 0);
  parsed = c4p::Fabric::fromJson(*stored);
  ASSERT_TRUE(parsed) << parsed.error().toString();
  EXPECT_EQ(parsed->pathsPerPlane(), 4);

  Json bad = threeTier(base + "-bad");
  bad["spec"].erase("coreUplinkSpeedGbps");
  refused(bad, "coreUplinkSpeedGbps is required when coreUplinksPerSpine is above 0");

  bad = two;
  bad["metadata"]["name"] = base + "-bad";
  bad["spec"]["coreUplinkSpeedGbps"] = 800;
  refused(bad, "coreUplinkSpeedGbps is required when coreUplinksPerSpine is above 0");

  auto withLink = [&](Json link) {
    Json f = threeTier(base + "-bad");
    f["spec"]["links"] = Json::array({std::move(link)});
    return f;
  };
  refused(withLink({{"leaf", "leaf-1"},
                    {"uplink", 0},
                    {"spine", 0},
                    {"coreUplink", 0},
                    {"capacityFraction", 0}}),
          "a link is either leaf and uplink");
  refused(withLink({{"leaf", "leaf-1"}, {"capacityFraction", 0}}), "leaf and uplink go together");
  refused(withLink({{"spine", 0}, {"capacityFraction", 0}}), "spine and coreUplink go together");
  refused(withLink({{"pod", "pod-a"}, {"leaf", "leaf-1"}, {"uplink", 0}, {"capacityFraction", 0}}),
          "pod only with spine");
  refused(withLink({{"spine", 2}, {"coreUplink", 0}, {"capacityFraction", 0}}),
          "links[].spine must be below spines");
  refused(withLink({{"spine", 0}, {"coreUplink", 3}, {"capacityFraction", 0}}),
          "links[].coreUplink must be below coreUplinksPerSpine");
  Json twoTierLink = two;
  twoTierLink["metadata"]["name"] = base + "-bad";
  twoTierLink["spec"]["links"] =
      Json::array({{{"spine", 0}, {"coreUplink", 0}, {"capacityFraction", 0}}});
  refused(twoTierLink, "links[].coreUplink must be below coreUplinksPerSpine");

  bad = good;
  bad["metadata"]["name"] = base + "-bad";
  bad["spec"]["pathSelection"]["table"]["entries"].push_back({{"port", 41000}, {"path", 12}});
  refused(bad, "pathSelection.table.entries[].path must be below uplinksPerLeaf");
}

}  // namespace
}  // namespace c4::op::it
