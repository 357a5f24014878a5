#include "operator/c4p/fabric.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
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

// `cr` with the value at JSON pointer `pointer` replaced (null: removed) is refused with an
// invalid-argument error whose message starts with `prefix`.
void expectRefused(Json cr, const std::string& pointer, const Json& value,
                   const std::string& prefix) {
  Json::json_pointer ptr(pointer);
  if (value.is_null()) {
    cr[ptr.parent_pointer()].erase(ptr.back());
  } else {
    cr[ptr] = value;
  }
  auto f = Fabric::fromJson(cr);
  ASSERT_FALSE(f) << pointer;
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument) << pointer;
  EXPECT_EQ(f.error().message.rfind(prefix, 0), 0u) << pointer << ": " << f.error().message;
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
  for (const auto& c : cases) expectRefused(validCr(), c.pointer, c.value, c.expected_prefix);
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

// A three-tier fabric: 2 spines per pod, 4 uplinks per leaf, 3 core uplinks per spine (12 paths
// across pods), port base 5.
Json threeTierCr() {
  return Json::parse(R"({
    "apiVersion": "c4.dev/v1alpha1",
    "kind": "Fabric",
    "metadata": {"name": "default"},
    "spec": {
      "planes": 2,
      "spines": 2,
      "uplinksPerLeaf": 4,
      "uplinkSpeedGbps": 400,
      "hostLinkSpeedGbps": 200,
      "coreUplinksPerSpine": 3,
      "coreUplinkSpeedGbps": 800,
      "pathSelection": {"rule": "sourcePortModulo", "sourcePortModulo": {"base": 5}},
      "links": [
        {"leaf": "leaf-1", "uplink": 2, "capacityFraction": 0, "reason": "cable cut"},
        {"pod": "pod-b", "spine": 1, "coreUplink": 2, "direction": "Up", "capacityFraction": 0.5,
         "reason": "flapping optic"},
        {"plane": 1, "spine": 0, "coreUplink": 0, "capacityFraction": 0}
      ]
    }
  })");
}

const NodeLocation kA{0, "leaf-1", "pod-a"};
const NodeLocation kB{0, "leaf-2", "pod-a"};
const NodeLocation kC{0, "leaf-3", "pod-b"};
const NodeLocation kD{1, "leaf-4", "pod-a"};

TEST(FabricThreeTierTest, ParsesTheCoreTier) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->coreUplinksPerSpine(), 3);
  EXPECT_EQ(f->spines(), 2);
  EXPECT_DOUBLE_EQ(f->spec().core_uplink_speed_gbps, 800);
  EXPECT_EQ(f->pathsPerPlane(), 12);
  // Absent fields: two tiers, one path per uplink.
  auto two = Fabric::fromJson(validCr());
  ASSERT_TRUE(two);
  EXPECT_EQ(two->coreUplinksPerSpine(), 0);
  EXPECT_DOUBLE_EQ(two->spec().core_uplink_speed_gbps, 0);
  EXPECT_EQ(two->pathsPerPlane(), 8);
  Json zero = validCr();
  zero["spec"]["coreUplinksPerSpine"] = 0;
  auto z = Fabric::fromJson(zero);
  ASSERT_TRUE(z) << z.error().toString();
  EXPECT_EQ(z->pathsPerPlane(), 8);
}

TEST(FabricThreeTierTest, RefusesEveryInvalidCoreFieldNamingIt) {
  struct Case {
    bool three_tier;      // start from threeTierCr() (else validCr())
    std::string pointer;  // JSON pointer into the CR
    Json value;           // nullptr: remove the field
    std::string expected_prefix;
  };
  const Json spine_link = {{"spine", 0}, {"coreUplink", 0}, {"capacityFraction", 0}};
  std::vector<Case> cases = {
      {true, "/spec/coreUplinksPerSpine", -1, "spec.coreUplinksPerSpine: must be an integer"},
      {true, "/spec/coreUplinksPerSpine", 1025, "spec.coreUplinksPerSpine: must be an integer"},
      {true, "/spec/coreUplinksPerSpine", 1.5, "spec.coreUplinksPerSpine: must be an integer"},
      {true, "/spec/coreUplinksPerSpine", "3", "spec.coreUplinksPerSpine: must be an integer"},
      {true, "/spec/coreUplinkSpeedGbps", nullptr,
       "spec.coreUplinkSpeedGbps: required when coreUplinksPerSpine > 0"},
      {true, "/spec/coreUplinkSpeedGbps", 0, "spec.coreUplinkSpeedGbps: must be a number"},
      {true, "/spec/coreUplinkSpeedGbps", 2e6, "spec.coreUplinkSpeedGbps: must be a number"},
      {true, "/spec/coreUplinkSpeedGbps", "fast", "spec.coreUplinkSpeedGbps: must be a number"},
      {false, "/spec/coreUplinkSpeedGbps", 100,
       "spec.coreUplinkSpeedGbps: only with coreUplinksPerSpine > 0"},
      {false, "/spec/links/2", spine_link,
       "spec.links[2].spine: spine–core links need coreUplinksPerSpine > 0"},
      {true, "/spec/links/1/spine", 2, "spec.links[1].spine: must be an integer in [0, 1]"},
      {true, "/spec/links/1/spine", -1, "spec.links[1].spine: must be an integer in [0, 1]"},
      {true, "/spec/links/1/coreUplink", 3,
       "spec.links[1].coreUplink: must be an integer in [0, 2]"},
      {true, "/spec/links/1/coreUplink", nullptr, "spec.links[1].coreUplink: required"},
      {true, "/spec/links/1/pod", "", "spec.links[1].pod: must be a pod name"},
      {true, "/spec/links/1/pod", std::string(64, 'p'), "spec.links[1].pod: must be a pod name"},
      {true, "/spec/links/1/pod", 5, "spec.links[1].pod: must be a pod name"},
      {true, "/spec/links/1/leaf", "leaf-1", "spec.links[1]: either leaf and uplink"},
      {true, "/spec/links/1/uplink", 0, "spec.links[1].uplink: only with leaf"},
      {true, "/spec/links/0/pod", "pod-a", "spec.links[0].pod: only with spine"},
      {true, "/spec/links/0/coreUplink", 0, "spec.links[0].coreUplink: only with spine"},
      {true, "/spec/links/3",
       Json{{"pod", "pod-b"}, {"spine", 1}, {"coreUplink", 2}, {"capacityFraction", 0.3}},
       "spec.links[3]: duplicate link plane0/pod-b/spine1/core2"},
      {true, "/spec/links/3",
       Json{{"plane", 1},
            {"spine", 0},
            {"coreUplink", 0},
            {"direction", "Down"},
            {"capacityFraction", 0.3}},
       "spec.links[3]: duplicate link plane1/-/spine0/core0"},
  };
  for (const auto& c : cases) {
    expectRefused(c.three_tier ? threeTierCr() : validCr(), c.pointer, c.value, c.expected_prefix);
  }
  // The same spine link in another pod is another link.
  Json other_pod = threeTierCr();
  other_pod["spec"]["links"].push_back(
      {{"pod", "pod-c"}, {"spine", 1}, {"coreUplink", 2}, {"capacityFraction", 0.3}});
  EXPECT_TRUE(Fabric::fromJson(other_pod));
}

TEST(FabricThreeTierTest, LocatesThePodFromItsLabel) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  auto a = f->locate("n1", {{"c4.dev/leaf", "leaf-2"}, {"c4.dev/pod", "pod-a"}});
  ASSERT_TRUE(a) << a.error().toString();
  EXPECT_EQ(*a, (NodeLocation{0, "leaf-2", "pod-a"}));
  EXPECT_NE(*a, (NodeLocation{0, "leaf-2"}));
  auto b = f->locate("n2", {{"c4.dev/leaf", "leaf-2"}, {"c4.dev/plane", "1"}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->pod, "");
  EXPECT_EQ(*b, (NodeLocation{1, "leaf-2"}));
  for (std::string pod : {std::string(), std::string(64, 'x')}) {
    auto bad = f->locate("n3", {{"c4.dev/leaf", "l"}, {"c4.dev/pod", pod}});
    ASSERT_FALSE(bad) << pod;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(bad.error().message.rfind("node n3: label c4.dev/pod must be 1..63 characters", 0),
              0u)
        << bad.error().message;
  }
  EXPECT_TRUE(f->locate("n4", {{"c4.dev/leaf", "l"}, {"c4.dev/pod", std::string(63, 'x')}}));
}

TEST(FabricThreeTierTest, PathCountAndLinksInsideAPodAcrossPodsAndPlanes) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->pathCount(kA, kB), 4);
  EXPECT_EQ(f->pathCount(kA, kC), 12);
  EXPECT_EQ(f->pathCount(kC, kA), 12);
  EXPECT_EQ(f->pathCount(kA, kA), 0);
  EXPECT_EQ(f->pathCount(kA, kD), 0);
  EXPECT_EQ(f->pathCount(NodeLocation{0, "leaf-9"}, kC), 12);  // the empty pod is a pod

  using Hops = std::vector<std::pair<LinkRef, Direction>>;
  auto inside = f->pathLinks(kA, kB, 3);
  ASSERT_TRUE(inside) << inside.error().toString();
  EXPECT_EQ(*inside, (Hops{{LinkRef{0, "leaf-1", 3}, Direction::kUp},
                           {LinkRef{0, "leaf-2", 3}, Direction::kDown}}));
  // Path 7 across pods: leaf uplink 7 mod 4 = 3 (spine 3 mod 2 = 1), core uplink 7 div 4 = 1.
  auto across = f->pathLinks(kA, kC, 7);
  ASSERT_TRUE(across) << across.error().toString();
  EXPECT_EQ(*across, (Hops{{LinkRef{0, "leaf-1", 3}, Direction::kUp},
                           {LinkRef::spineTier(0, "pod-a", 1, 1), Direction::kUp},
                           {LinkRef::spineTier(0, "pod-b", 1, 1), Direction::kDown},
                           {LinkRef{0, "leaf-3", 3}, Direction::kDown}}));
  EXPECT_EQ(linkName((*across)[1].first), "plane0/pod-a/spine1/core1");
  // Every path across pods is a distinct (uplink, core uplink) pair through spine uplink mod S.
  std::set<std::pair<int, int>> pairs;
  for (int path = 0; path < 12; ++path) {
    auto hops = f->pathLinks(kC, kA, path);
    ASSERT_TRUE(hops);
    ASSERT_EQ(hops->size(), 4u);
    int u = (*hops)[0].first.uplink;
    EXPECT_EQ((*hops)[3].first.uplink, u);
    EXPECT_EQ((*hops)[1].first.spine, u % 2);
    EXPECT_EQ((*hops)[2].first.spine, u % 2);
    EXPECT_EQ((*hops)[1].first.uplink, (*hops)[2].first.uplink);
    EXPECT_EQ((*hops)[1].first.pod, "pod-b");
    EXPECT_EQ((*hops)[2].first.pod, "pod-a");
    EXPECT_EQ(u + 4 * (*hops)[1].first.uplink, path);
    pairs.insert({u, (*hops)[1].first.uplink});
  }
  EXPECT_EQ(pairs.size(), 12u);

  for (auto [src, dst, path, needle] :
       std::vector<std::tuple<NodeLocation, NodeLocation, int, std::string>>{
           {kA, kB, 4, "path 4 is outside [0, 3]"},
           {kA, kB, -1, "path -1 is outside [0, 3]"},
           {kA, kC, 12, "path 12 is outside [0, 11]"},
           {kA, kD, 0, "planes 0 and 1"},
           {kA, kA, 0, "leaf leaf-1: traffic inside a leaf"},
           {kA, NodeLocation{0, "leaf-1", "pod-b"}, 0, "leaf leaf-1 is in two pods"}}) {
    auto bad = f->pathLinks(src, dst, path);
    ASSERT_FALSE(bad) << needle;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(bad.error().message.find(needle), std::string::npos) << bad.error().message;
  }

  // Two tiers: pods of a plane are not connected.
  auto two = Fabric::fromJson(validCr());
  ASSERT_TRUE(two);
  EXPECT_EQ(two->pathCount(kA, kB), 8);
  EXPECT_EQ(two->pathCount(kA, kC), 0);
  auto cut = two->pathLinks(kA, kC, 0);
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().message,
            "pods \"pod-a\" and \"pod-b\" of plane 0 are not connected (coreUplinksPerSpine is 0: "
            "two tiers)");
  auto same_pod = two->pathLinks(kA, kB, 7);
  ASSERT_TRUE(same_pod);
  EXPECT_EQ(same_pod->size(), 2u);
}

TEST(FabricThreeTierTest, SpineTierLinkStatesFromSpecAndTelemetry) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  const LinkRef flapping = LinkRef::spineTier(0, "pod-b", 1, 2);
  const LinkRef dead = LinkRef::spineTier(1, "", 0, 0);
  EXPECT_TRUE(flapping.isSpineTier());
  EXPECT_FALSE((LinkRef{0, "leaf-1", 2}).isSpineTier());
  EXPECT_DOUBLE_EQ(f->capacityGbps(flapping, Direction::kUp), 400);
  EXPECT_DOUBLE_EQ(f->capacityGbps(flapping, Direction::kDown), 800);
  EXPECT_DOUBLE_EQ(f->capacityFraction(flapping, Direction::kBoth), 0.5);
  EXPECT_DOUBLE_EQ(f->capacityGbps(dead, Direction::kDown), 0);
  EXPECT_DOUBLE_EQ(f->capacityGbps(LinkRef::spineTier(0, "", 0, 0), Direction::kDown), 800);
  // Leaf links keep the uplink speed, in both overloads.
  EXPECT_DOUBLE_EQ(f->capacityGbps(LinkRef{0, "leaf-1", 3}, Direction::kUp), 400);
  EXPECT_DOUBLE_EQ(f->capacityGbps(0, "leaf-1", 2, Direction::kUp), 0);

  const LinkRef slow = LinkRef::spineTier(0, "pod-a", 0, 1);
  ASSERT_TRUE(f->setLinkState(slow, 0.25));
  EXPECT_DOUBLE_EQ(f->capacityGbps(slow, Direction::kUp), 200);
  EXPECT_DOUBLE_EQ(f->capacityGbps(slow, Direction::kDown), 200);
  // Telemetry cannot heal what the description says.
  ASSERT_TRUE(f->setLinkState(flapping, 1.0, Direction::kUp));
  EXPECT_DOUBLE_EQ(f->capacityFraction(flapping, Direction::kUp), 0.5);
  ASSERT_TRUE(f->setLinkState(flapping, 0.1, Direction::kDown));
  EXPECT_DOUBLE_EQ(f->capacityFraction(flapping, Direction::kDown), 0.1);

  LinkRef with_leaf = LinkRef::spineTier(0, "pod-a", 0, 0);
  with_leaf.leaf = "leaf-1";
  LinkRef leaf_with_pod{0, "leaf-1", 0};
  leaf_with_pod.pod = "pod-a";
  LinkRef bad_spine = LinkRef::spineTier(0, "pod-a", 0, 0);
  bad_spine.spine = -2;
  auto before = f->degradedLinks();
  for (auto [link, prefix] : std::vector<std::pair<LinkRef, std::string>>{
           {LinkRef::spineTier(0, "pod-a", 2, 0), "link.spine:"},
           {bad_spine, "link.spine:"},
           {LinkRef::spineTier(0, "pod-a", 0, 3), "link.uplink:"},
           {LinkRef::spineTier(0, "pod-a", 0, -1), "link.uplink:"},
           {LinkRef::spineTier(2, "pod-a", 0, 0), "link.plane:"},
           {LinkRef::spineTier(0, std::string(64, 'p'), 0, 0), "link.pod:"},
           {with_leaf, "link.leaf:"},
           {leaf_with_pod, "link.pod:"}}) {
    auto st = f->setLinkState(link, 0.5);
    ASSERT_FALSE(st) << linkName(link);
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(st.error().message.rfind(prefix, 0), 0u) << st.error().message;
  }
  EXPECT_EQ(f->degradedLinks().size(), before.size());

  // Sorted: per plane the spine–core links (no leaf) first, then the leaf uplinks.
  auto degraded = f->degradedLinks();
  std::vector<std::string> names;
  for (const auto& st : degraded) {
    names.push_back(linkName(st.link) + " " + std::string(directionName(st.direction)) + " " +
                    st.source);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "plane0/pod-a/spine0/core1 Both telemetry",
                       "plane0/pod-b/spine1/core2 Up spec",
                       "plane0/pod-b/spine1/core2 Down telemetry",
                       "plane0/leaf-1/uplink2 Both spec",
                       "plane1/-/spine0/core0 Both spec",
                   }));
  EXPECT_EQ(degraded[1].reason, "flapping optic");

  // A two-tier fabric has no spine–core links.
  auto two = Fabric::fromJson(validCr());
  ASSERT_TRUE(two);
  auto refused = two->setLinkState(LinkRef::spineTier(0, "", 0, 0), 0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(
      refused.error().message.rfind("link.spine: spine–core links need coreUplinksPerSpine", 0), 0u)
      << refused.error().message;

  // Telemetry survives a new description that still has the link, and is dropped otherwise.
  ASSERT_TRUE(f->setLinkState({0, "leaf-5", 1}, 0.5));
  auto next = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(next);
  EXPECT_EQ(next->adoptTelemetry(*f), 0);
  EXPECT_DOUBLE_EQ(next->capacityFraction(slow, Direction::kUp), 0.25);
  Json fewer = threeTierCr();
  fewer["spec"]["coreUplinksPerSpine"] = 1;
  fewer["spec"]["links"].erase(1);
  auto narrower = Fabric::fromJson(fewer);
  ASSERT_TRUE(narrower) << narrower.error().toString();
  // Dropped: (pod-a, spine 0, core 1) up and down, (pod-b, spine 1, core 2) down.
  EXPECT_EQ(narrower->adoptTelemetry(*f), 3);
  EXPECT_DOUBLE_EQ(narrower->capacityFraction(0, "leaf-5", 1, Direction::kUp), 0.5);
  EXPECT_EQ(two->adoptTelemetry(*f), 3);
  EXPECT_DOUBLE_EQ(two->capacityFraction(0, "leaf-5", 1, Direction::kDown), 0.5);
  EXPECT_EQ(two->degradedLinks().size(), 3u);  // its two spec links and leaf-5
}

TEST(FabricThreeTierTest, StatusShowsSpineTierLinks) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->setLinkState(LinkRef::spineTier(0, "pod-a", 0, 1), 0));
  Json st = renderFabricStatus(*f, 3, 0.5);
  EXPECT_EQ(st["degradedLinks"], 4);
  ASSERT_EQ(st["links"].size(), 4u);
  EXPECT_EQ(st["links"][0], (Json{{"plane", 0},
                                  {"pod", "pod-a"},
                                  {"spine", 0},
                                  {"coreUplink", 1},
                                  {"direction", "Both"},
                                  {"capacityFraction", 0},
                                  {"source", "telemetry"}}));
  EXPECT_EQ(st["links"][1], (Json{{"plane", 0},
                                  {"pod", "pod-b"},
                                  {"spine", 1},
                                  {"coreUplink", 2},
                                  {"direction", "Up"},
                                  {"capacityFraction", 0.5},
                                  {"source", "spec"}}));
  EXPECT_EQ(st["links"][2]["leaf"], "leaf-1");
  EXPECT_EQ(st["links"][2]["uplink"], 2);
  EXPECT_FALSE(st["links"][2].contains("spine"));
  EXPECT_EQ(st["links"][3], (Json{{"plane", 1},
                                  {"spine", 0},
                                  {"coreUplink", 0},
                                  {"direction", "Both"},
                                  {"capacityFraction", 0},
                                  {"source", "spec"}}));
}

TEST(FabricThreeTierTest, FromSpecRoundTripsBothLinkKinds) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  auto again = Fabric::fromSpec(f->spec());
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_EQ(again->coreUplinksPerSpine(), 3);
  EXPECT_DOUBLE_EQ(again->spec().core_uplink_speed_gbps, 800);
  ASSERT_EQ(again->spec().links.size(), f->spec().links.size());
  for (std::size_t i = 0; i < f->spec().links.size(); ++i) {
    const LinkState& a = f->spec().links[i];
    const LinkState& b = again->spec().links[i];
    EXPECT_EQ(a.link, b.link) << i;
    EXPECT_EQ(a.direction, b.direction) << i;
    EXPECT_EQ(a.capacity_fraction, b.capacity_fraction) << i;
    EXPECT_EQ(a.reason, b.reason) << i;
  }
  EXPECT_EQ(renderFabricStatus(*again, 1, 0), renderFabricStatus(*f, 1, 0));

  FabricSpec spec;
  spec.spines = 2;
  spec.uplinks_per_leaf = 2;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  spec.core_uplinks_per_spine = 2;
  spec.core_uplink_speed_gbps = 200;
  spec.links.push_back({LinkRef::spineTier(0, "", 1, 1), Direction::kDown, 0, "", "spec"});
  auto ok = Fabric::fromSpec(spec);
  ASSERT_TRUE(ok) << ok.error().toString();
  EXPECT_DOUBLE_EQ(ok->capacityGbps(LinkRef::spineTier(0, "", 1, 1), Direction::kDown), 0);
  EXPECT_DOUBLE_EQ(ok->capacityGbps(LinkRef::spineTier(0, "", 1, 1), Direction::kUp), 200);

  auto refuse = [](FabricSpec s, const std::string& prefix) {
    auto r = Fabric::fromSpec(std::move(s));
    ASSERT_FALSE(r) << prefix;
    EXPECT_EQ(r.error().message.rfind(prefix, 0), 0u) << r.error().message;
  };
  FabricSpec no_speed = spec;
  no_speed.core_uplink_speed_gbps = 0;
  refuse(no_speed, "spec.coreUplinkSpeedGbps:");
  FabricSpec speed_only = spec;
  speed_only.core_uplinks_per_spine = 0;
  speed_only.links.clear();
  refuse(speed_only, "spec.coreUplinkSpeedGbps: only with coreUplinksPerSpine > 0");
  FabricSpec negative = spec;
  negative.core_uplinks_per_spine = -1;
  refuse(negative, "spec.coreUplinksPerSpine:");
  FabricSpec two_tier_spine_link = spec;
  two_tier_spine_link.core_uplinks_per_spine = 0;
  two_tier_spine_link.core_uplink_speed_gbps = 0;
  refuse(two_tier_spine_link, "spec.links[0].spine:");
  FabricSpec both = spec;
  both.links[0].link.leaf = "leaf-1";
  refuse(both, "spec.links[0]: either leaf");
  FabricSpec leaf_with_pod = spec;
  leaf_with_pod.links[0].link = LinkRef{0, "leaf-1", 0};
  leaf_with_pod.links[0].link.pod = "pod-a";
  refuse(leaf_with_pod, "spec.links[0].pod: only with spine");
  FabricSpec bad_spine = spec;
  bad_spine.links[0].link.spine = -2;
  refuse(bad_spine, "spec.links[0].spine:");
}

TEST(FabricThreeTierTest, SourcePortModuloSpansThePathsAcrossPods) {
  auto f = Fabric::fromJson(threeTierCr());
  ASSERT_TRUE(f);
  // base 5, 12 path ids: port 5 -> 0, 16 -> 11, 17 -> 0, 4 -> 11.
  EXPECT_EQ(f->pathOfPort(5), 0);
  EXPECT_EQ(f->pathOfPort(16), 11);
  EXPECT_EQ(f->pathOfPort(17), 0);
  EXPECT_EQ(f->pathOfPort(4), 11);
  // A pair inside a pod sees only the leaf uplink: id mod 4.
  EXPECT_EQ(f->pathOfPortFor(16, kA, kC), 11);
  EXPECT_EQ(f->pathOfPortFor(16, kA, kB), 3);
  EXPECT_EQ(f->pathOfPortFor(16, kA, kD), -1);
  EXPECT_EQ(f->pathOfPortFor(16, kA, kA), -1);
  for (int port = 40000; port < 40100; ++port) {
    auto p = static_cast<std::uint16_t>(port);
    EXPECT_EQ(f->pathOfPortFor(p, kA, kC), (port - 5) % 12);
    EXPECT_EQ(f->pathOfPortFor(p, kA, kB), (port - 5) % 4);
  }
  for (int path = 0; path < 12; ++path) {
    auto p = f->freePortForPathFor(kA, kC, path, 40000, 40100, {});
    ASSERT_TRUE(p);
    EXPECT_EQ(f->pathOfPortFor(*p, kA, kC), path);
    EXPECT_EQ(f->pathOfPort(*p), path);
    EXPECT_GE(*p, 40000);
    EXPECT_LT(*p, 40012);
    auto q = f->freePortForPathFor(kA, kC, path, 40000, 40100, {*p});
    ASSERT_TRUE(q);
    EXPECT_EQ(*q, *p + 12);
    EXPECT_EQ(f->freePortForPath(path, 40000, 40100, {}), p);
  }
  for (int path = 0; path < 4; ++path) {
    auto p = f->freePortForPathFor(kA, kB, path, 40000, 40100, {});
    ASSERT_TRUE(p);
    EXPECT_EQ(f->pathOfPortFor(*p, kA, kB), path);
    EXPECT_LT(*p, 40004);
    auto q = f->freePortForPathFor(kA, kB, path, 40000, 40100, {*p});
    ASSERT_TRUE(q);
    EXPECT_EQ(*q, *p + 4);
  }
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 4, 40000, 40100, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 12, 40000, 40100, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kD, 0, 40000, 40100, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kA, 0, 40000, 40100, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPath(12, 40000, 40100, {}), std::nullopt);
  // Ports 40000..40010 select ids 11, 0, 1, ..., 9: none selects 10.
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 10, 40000, 40010, {}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 11, 40000, 40010, {}), 40000);

  // Two tiers: the pair functions equal the plain ones for a pair of leaves.
  auto two = Fabric::fromJson(validCr());
  ASSERT_TRUE(two);
  for (int port = 0; port < 30; ++port) {
    auto p = static_cast<std::uint16_t>(port);
    EXPECT_EQ(two->pathOfPortFor(p, kA, kB), two->pathOfPort(p));
  }
  for (int path = 0; path < 8; ++path) {
    EXPECT_EQ(two->freePortForPathFor(kA, kB, path, 40000, 40100, {40003}),
              two->freePortForPath(path, 40000, 40100, {40003}));
  }
}

TEST(FabricThreeTierTest, TableSpansThePathsAcrossPods) {
  // 2 uplinks, 2 core uplinks: 4 path ids.
  Json spec = {{"spines", 2},
               {"uplinksPerLeaf", 2},
               {"uplinkSpeedGbps", 100},
               {"hostLinkSpeedGbps", 100},
               {"coreUplinksPerSpine", 2},
               {"coreUplinkSpeedGbps", 100},
               {"pathSelection",
                {{"rule", "table"},
                 {"table",
                  {{"entries",
                    {{{"port", 5000}, {"path", 0}},
                     {{"port", 5001}, {"path", 1}},
                     {{"port", 5002}, {"path", 2}},
                     {{"port", 5003}, {"path", 3}},
                     {{"port", 5004}, {"path", 1}}}}}}}}};
  auto f = Fabric::fromJson(spec);
  ASSERT_TRUE(f) << f.error().toString();
  EXPECT_EQ(f->pathOfPort(5002), 2);
  EXPECT_EQ(f->pathOfPort(5009), -1);
  EXPECT_EQ(f->pathOfPortFor(5002, kA, kC), 2);
  EXPECT_EQ(f->pathOfPortFor(5002, kA, kB), 0);
  EXPECT_EQ(f->pathOfPortFor(5003, kA, kB), 1);
  EXPECT_EQ(f->pathOfPortFor(5009, kA, kB), -1);
  // Inside a pod, path 0 is id 0 or id 2.
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 0, 1, 65535, {}), 5000);
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 0, 1, 65535, {5000}), 5002);
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 0, 5001, 65535, {}), 5002);
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 0, 1, 65535, {5000, 5002}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 1, 1, 65535, {5001}), 5003);
  EXPECT_EQ(f->freePortForPathFor(kA, kB, 1, 1, 65535, {5001, 5003}), 5004);
  // Across pods each id is its own path.
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 3, 1, 65535, {}), 5003);
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 3, 1, 65535, {5003}), std::nullopt);
  EXPECT_EQ(f->freePortForPathFor(kA, kC, 1, 1, 65535, {5001}), 5004);
  EXPECT_EQ(f->freePortForPath(2, 1, 65535, {}), 5002);
  for (int path = 0; path < 4; ++path) {
    auto p = f->freePortForPathFor(kA, kC, path, 1, 65535, {});
    ASSERT_TRUE(p);
    EXPECT_EQ(f->pathOfPortFor(*p, kA, kC), path);
  }

  Json uncovered = spec;
  uncovered["pathSelection"]["table"]["entries"].erase(3);
  auto u = Fabric::fromJson(uncovered);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().message, "spec.pathSelection.table.entries: no port maps to path 3");
  Json beyond = spec;
  beyond["pathSelection"]["table"]["entries"][4]["path"] = 4;
  auto b = Fabric::fromJson(beyond);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message.rfind("spec.pathSelection.table.entries[4].path: must be an "
                                    "integer in [0, 3]",
                                    0),
            0u)
      << b.error().message;
  // Without the core tier the same table has ids beyond the uplinks.
  Json two_tier = spec;
  two_tier.erase("coreUplinksPerSpine");
  two_tier.erase("coreUplinkSpeedGbps");
  auto t = Fabric::fromJson(two_tier);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().message.rfind("spec.pathSelection.table.entries[2].path:", 0), 0u);
}

}  // namespace
}  // namespace c4::op::c4p
