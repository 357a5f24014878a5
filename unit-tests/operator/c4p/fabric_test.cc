#include "operator/c4p/fabric.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace c4::op::c4p {
namespace {

Json validCr() {
  return Json::parse(R"({
    "apiVersion": "c4.dev/v1alpha1",
    "kind": "Fabric",
    "metadata": {"name": "default"},
    "spec": {
      "planes": 2,
      "spines": 4,
      "uplinksPerLeaf": 8,
      "uplinkSpeedGbps": 400,
      "hostLinkSpeedGbps": 200,
      "pathSelection": {"rule": "sourcePortModulo", "sourcePortModulo": {"base": 3}},
      "links": [
        {"leaf": "leaf-1", "uplink": 2, "capacityFraction": 0, "reason": "cable cut"},
        {"plane": 1, "leaf": "leaf-0", "uplink": 7, "direction": "Down", "capacityFraction": 0.5}
      ]
    }
  })");
}

TEST(FabricTest, ParsesAValidResource) {
  auto f = Fabric::fromJson(validCr());
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->planes(), 2);
  EXPECT_EQ(f->spec().spines, 4);
  EXPECT_EQ(f->uplinksPerLeaf(), 8);
  EXPECT_DOUBLE_EQ(f->spec().uplink_speed_gbps, 400);
  EXPECT_DOUBLE_EQ(f->hostLinkSpeedGbps(), 200);
  EXPECT_EQ(f->spec().rule, PathRule::kSourcePortModulo);
  EXPECT_EQ(f->spec().port_base, 3);
  // The failed link is dead both ways; the degraded one only down.
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-1", 2, Direction::kUp), 0);
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-1", 2, Direction::kDown), 0);
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-1", 3, Direction::kUp), 400);
  EXPECT_DOUBLE_EQ(f->capacityGbps(1, "leaf-0", 7, Direction::kDown), 200);
  EXPECT_DOUBLE_EQ(f->capacityGbps(1, "leaf-0", 7, Direction::kUp), 400);
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-0", 7, Direction::kDown), 400);  // other plane
  auto degraded = f->degradedLinks();
  ASSERT_EQ(degraded.size(), 2u);
  EXPECT_EQ(degraded[0].link, (LinkRef{0, "leaf-1", 2}));
  EXPECT_EQ(degraded[0].direction, Direction::kBoth);
  EXPECT_EQ(degraded[0].reason, "cable cut");
  EXPECT_EQ(degraded[1].direction, Direction::kDown);
}

// The object as kube-apiserver returns it after `kubectl apply -f` of a minimal Fabric (schema
// defaults filled in, status written through /status with renderFabricStatus's shape).
TEST(FabricTest, ParsesTheObjectTheApiServerReturns) {
  const char* from_api =
      R"({"apiVersion": "c4.dev/v1alpha1", "kind": "Fabric", "metadata": {"creationTimestamp":
      "2026-12-03T10:24:13Z", "generation": 1, "name": "default", "resourceVersion": "295",
      "uid": "233f6885-8e1d-42b5-a250-d6ea3f81d599"}, "spec": {"hostLinkSpeedGbps": 1, "links":
      [{"capacityFraction": 0, "direction": "Both", "leaf": "leaf-1", "plane": 0, "reason":
      "cut in e2e", "uplink": 1}], "pathSelection": {"rule": "sourcePortModulo"}, "planes": 1,
      "spines": 2, "uplinkSpeedGbps": 1, "uplinksPerLeaf": 2}, "status": {"degradedLinks": 1,
      "links": [{"capacityFraction": 0, "direction": "Both", "leaf": "leaf-1", "plane": 0,
      "source": "spec", "uplink": 1}], "maxLinkLoad": "1.067", "observedGeneration": 1}})";
  auto f = Fabric::parse(from_api);
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->uplinksPerLeaf(), 2);
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-1", 1, Direction::kUp), 0);
  Json status = renderFabricStatus(*f, 1, 1.0667);
  Json api_status = Json::parse(from_api)["status"];
  EXPECT_EQ(status, api_status);
}

TEST(FabricTest, BareSpecAndDefaults) {
  auto f = Fabric::parse(R"({"spines": 2, "uplinksPerLeaf": 2, "uplinkSpeedGbps": 1,
      "hostLinkSpeedGbps": 1, "pathSelection": {"rule": "sourcePortModulo"}})");
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->planes(), 1);
  EXPECT_EQ(f->spec().port_base, 0);
  EXPECT_TRUE(f->degradedLinks().empty());
}

// Every invalid field is refused with a message that starts with its path.
TEST(FabricTest, RefusesEveryInvalidFieldNamingIt) {
  struct Case {
    std::string pointer;  // JSON pointer into the CR
    Json value;           // nullptr: remove the field
    std::string expected_prefix;
  };
  std::vector<Case> cases = {
      {"/kind", "Other", "kind:"},
      {"/apiVersion", "c4.dev/v1", "apiVersion:"},
      {"/spec", nullptr, "spec: required"},
      {"/spec/unknown", 1, "spec.unknown: unknown field"},
      {"/spec/planes", 0, "spec.planes:"},
      {"/spec/planes", 17, "spec.planes:"},
      {"/spec/planes", "2", "spec.planes:"},
      {"/spec/spines", nullptr, "spec.spines: required"},
      {"/spec/spines", 0, "spec.spines:"},
      {"/spec/uplinksPerLeaf", 6, "spec.uplinksPerLeaf: must be a multiple of spines"},
      {"/spec/uplinksPerLeaf", 1.5, "spec.uplinksPerLeaf:"},
      {"/spec/uplinkSpeedGbps", 0, "spec.uplinkSpeedGbps:"},
      {"/spec/uplinkSpeedGbps", "fast", "spec.uplinkSpeedGbps:"},
      {"/spec/hostLinkSpeedGbps", nullptr, "spec.hostLinkSpeedGbps: required"},
      {"/spec/hostLinkSpeedGbps", -1, "spec.hostLinkSpeedGbps:"},
      {"/spec/pathSelection", nullptr, "spec.pathSelection: required"},
      {"/spec/pathSelection/rule", "crc32", "spec.pathSelection.rule: unsupported rule \"crc32\""},
      {"/spec/pathSelection/rule", nullptr, "spec.pathSelection.rule: required"},
      {"/spec/pathSelection/sourcePortModulo/base", 70000,
       "spec.pathSelection.sourcePortModulo.base:"},
      {"/spec/pathSelection/sourcePortModulo/x", 1,
       "spec.pathSelection.sourcePortModulo.x: unknown field"},
      {"/spec/pathSelection/table", Json{{"entries", Json::array()}},
       "spec.pathSelection.table: only with rule table"},
      {"/spec/links", Json::object(), "spec.links: must be an array"},
      {"/spec/links/0/leaf", "", "spec.links[0].leaf:"},
      {"/spec/links/0/leaf", nullptr, "spec.links[0].leaf:"},
      {"/spec/links/0/uplink", 8, "spec.links[0].uplink:"},
      {"/spec/links/0/plane", 2, "spec.links[0].plane:"},
      {"/spec/links/0/capacityFraction", 1.5, "spec.links[0].capacityFraction:"},
      {"/spec/links/0/capacityFraction", nullptr, "spec.links[0].capacityFraction:"},
      {"/spec/links/0/direction", "Sideways", "spec.links[0].direction:"},
      {"/spec/links/0/reason", 5, "spec.links[0].reason:"},
      {"/spec/links/0/colour", "red", "spec.links[0].colour: unknown field"},
      {"/spec/links/1", Json{{"leaf", "leaf-1"}, {"uplink", 2}, {"capacityFraction", 0.5}},
       "spec.links[1]: duplicate link plane0/leaf-1/uplink2"},
  };
  for (const auto& c : cases) {
    Json cr = validCr();
    Json::json_pointer ptr(c.pointer);
    if (c.value.is_null()) {
      cr[ptr.parent_pointer()].erase(ptr.back());
    } else {
      cr[ptr] = c.value;
    }
    auto f = Fabric::fromJson(cr);
    ASSERT_FALSE(f) << c.pointer;
    EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument) << c.pointer;
    EXPECT_EQ(f.error().message.rfind(c.expected_prefix, 0), 0u)
        << c.pointer << ": " << f.error().message;
  }
  EXPECT_FALSE(Fabric::parse("{not json"));
}

TEST(FabricTest, TableRule) {
  Json spec = {{"spines", 2},
               {"uplinksPerLeaf", 2},
               {"uplinkSpeedGbps", 100},
               {"hostLinkSpeedGbps", 100},
               {"pathSelection",
                {{"rule", "table"},
                 {"table",
                  {{"entries",
                    {{{"port", 5001}, {"path", 1}},
                     {{"port", 5000}, {"path", 0}},
                     {{"port", 5003}, {"path", 1}}}}}}}}};
  auto f = Fabric::fromJson(spec);
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->pathOfPort(5000), 0);
  EXPECT_EQ(f->pathOfPort(5003), 1);
  EXPECT_EQ(f->pathOfPort(5002), -1);
  EXPECT_EQ(f->freePortForPath(1, 1, 65535, {}), 5001);
  EXPECT_EQ(f->freePortForPath(1, 1, 65535, {5001}), 5003);
  EXPECT_EQ(f->freePortForPath(1, 1, 65535, {5001, 5003}), std::nullopt);
  EXPECT_EQ(f->freePortForPath(0, 5001, 65535, {}), std::nullopt);  // outside the range

  Json dup = spec;
  dup["pathSelection"]["table"]["entries"][2]["port"] = 5000;
  auto d = Fabric::fromJson(dup);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, "spec.pathSelection.table.entries[2].port: duplicate port 5000");
  Json uncovered = spec;
  uncovered["pathSelection"]["table"]["entries"].erase(1);
  auto u = Fabric::fromJson(uncovered);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().message, "spec.pathSelection.table.entries: no port maps to path 0");
  Json bad_path = spec;
  bad_path["pathSelection"]["table"]["entries"][0]["path"] = 2;
  EXPECT_FALSE(Fabric::fromJson(bad_path));
  Json missing = spec;
  missing["pathSelection"].erase("table");
  auto m = Fabric::fromJson(missing);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, "spec.pathSelection.table: required with rule table");
}

TEST(FabricTest, SourcePortModuloMapsPortsAndFindsFreeOnes) {
  auto f = Fabric::fromJson(validCr());
  ASSERT_TRUE(f);
  // base 3, 8 uplinks: port 3 -> 0, 10 -> 7, 11 -> 0.
  EXPECT_EQ(f->pathOfPort(3), 0);
  EXPECT_EQ(f->pathOfPort(10), 7);
  EXPECT_EQ(f->pathOfPort(11), 0);
  EXPECT_EQ(f->pathOfPort(2), 7);
  for (int path = 0; path < 8; ++path) {
    auto p = f->freePortForPath(path, 40000, 40100, {});
    ASSERT_TRUE(p);
    EXPECT_EQ(f->pathOfPort(*p), path);
    EXPECT_GE(*p, 40000);
    EXPECT_LT(*p, 40008);
    auto q = f->freePortForPath(path, 40000, 40100, {*p});
    ASSERT_TRUE(q);
    EXPECT_EQ(*q, *p + 8);
  }
  EXPECT_EQ(f->freePortForPath(0, 40000, 40002, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPath(9, 40000, 50000, {}), std::nullopt);
}

TEST(FabricTest, TelemetryLinkStateIsValidatedAndCombinedWithTheSpec) {
  auto f = Fabric::fromJson(validCr());
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->setLinkState({0, "leaf-3", 1}, 0.25));
  EXPECT_DOUBLE_EQ(f->capacityFraction(0, "leaf-3", 1, Direction::kUp), 0.25);
  EXPECT_DOUBLE_EQ(f->capacityFraction(0, "leaf-3", 1, Direction::kDown), 0.25);
  // Telemetry cannot heal what the description says is dead.
  ASSERT_TRUE(f->setLinkState({0, "leaf-1", 2}, 1.0));
  EXPECT_DOUBLE_EQ(f->capacityFraction(0, "leaf-1", 2, Direction::kUp), 0);
  // One direction only, then cleared.
  ASSERT_TRUE(f->setLinkState({1, "leaf-9", 0}, 0.5, Direction::kUp));
  EXPECT_DOUBLE_EQ(f->capacityFraction(1, "leaf-9", 0, Direction::kUp), 0.5);
  EXPECT_DOUBLE_EQ(f->capacityFraction(1, "leaf-9", 0, Direction::kDown), 1.0);
  ASSERT_TRUE(f->setLinkState({1, "leaf-9", 0}, 1.0, Direction::kUp));
  EXPECT_DOUBLE_EQ(f->capacityFraction(1, "leaf-9", 0, Direction::kUp), 1.0);

  auto before = f->degradedLinks();
  for (auto [link, fraction] :
       std::vector<std::pair<LinkRef, double>>{{{2, "leaf-0", 0}, 0.5},
                                               {{-1, "leaf-0", 0}, 0.5},
                                               {{0, "", 0}, 0.5},
                                               {{0, "leaf-0", 8}, 0.5},
                                               {{0, "leaf-0", -1}, 0.5},
                                               {{0, "leaf-0", 0}, -0.1},
                                               {{0, "leaf-0", 0}, 1.1},
                                               {{0, "leaf-0", 0}, std::nan("")}}) {
    auto st = f->setLinkState(link, fraction);
    ASSERT_FALSE(st) << linkName(link) << " " << fraction;
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  }
  auto after = f->degradedLinks();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].link, before[i].link);
    EXPECT_EQ(after[i].capacity_fraction, before[i].capacity_fraction);
  }
  auto telemetry = std::find_if(after.begin(), after.end(),
                                [](const LinkState& s) { return s.link.leaf == "leaf-3"; });
  ASSERT_NE(telemetry, after.end());
  EXPECT_EQ(telemetry->source, "telemetry");
}

TEST(FabricTest, LocatesNodesFromLabels) {
  auto f = Fabric::fromJson(validCr());
  ASSERT_TRUE(f);
  auto a = f->locate("n1", {{"c4.dev/leaf", "leaf-2"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (NodeLocation{0, "leaf-2"}));
  auto b = f->locate("n2", {{"c4.dev/leaf", "leaf-2"}, {"c4.dev/plane", "1"}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->plane, 1);
  auto missing = f->locate("n3", {{"other", "x"}});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "node n3: label c4.dev/leaf is missing or empty");
  for (std::string plane : {"2", "-1", "x", "", "1.0", "999999"}) {
    auto bad = f->locate("n4", {{"c4.dev/leaf", "l"}, {"c4.dev/plane", plane}});
    ASSERT_FALSE(bad) << plane;
    EXPECT_NE(bad.error().message.find("c4.dev/plane"), std::string::npos);
  }
}

TEST(FabricTest, StatusShowsDegradedLinksAndMaxLoad) {
  auto f = Fabric::fromJson(validCr());
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->setLinkState({0, "leaf-5", 4}, 0));
  Json st = renderFabricStatus(*f, 7, 1.25);
  EXPECT_EQ(st["observedGeneration"], 7);
  EXPECT_EQ(st["maxLinkLoad"], "1.250");
  EXPECT_EQ(st["degradedLinks"], 3);
  ASSERT_EQ(st["links"].size(), 3u);
  EXPECT_EQ(st["links"][0]["leaf"], "leaf-1");
  EXPECT_EQ(st["links"][0]["source"], "spec");
  EXPECT_EQ(st["links"][1]["leaf"], "leaf-5");
  EXPECT_EQ(st["links"][1]["source"], "telemetry");
  EXPECT_EQ(st["links"][1]["direction"], "Both");
}

TEST(FabricTest, FromSpecValidatesLikeTheParser) {
  FabricSpec spec;
  spec.spines = 4;
  spec.uplinks_per_leaf = 4;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  EXPECT_TRUE(Fabric::fromSpec(spec));
  spec.uplinks_per_leaf = 5;
  auto bad = Fabric::fromSpec(spec);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message.rfind("spec.uplinksPerLeaf:", 0), 0u);
}

}  // namespace
}  // namespace c4::op::c4p
