#include "operator/c4p/plan_document.h"

#include <gtest/gtest.h>

#include <string>

#include "c4/common/plan.h"

namespace c4::op::c4p {
namespace {

// A real plan: 3 leaves × 2 nodes, a ring crossing leaves, one failed uplink (weights below 1);
// with `spares`, one subflow and that many spares per connection, and the failed uplink is the
// first connection's.
JobPlan makePlan(int spares = 0) {
  FabricSpec spec;
  spec.planes = 2;
  spec.spines = 4;
  spec.uplinks_per_leaf = 4;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  Planner p(*Fabric::fromSpec(spec));
  JobPlacement job{"ns/train", {}, 8, spares > 0 ? 1 : 4};
  job.spare_subflows = spares;
  for (int i = 0; i < 2; ++i) {
    for (int l = 0; l < 3; ++l) {
      std::string n = "node-" + std::to_string(l) + "-" + std::to_string(i);
      EXPECT_TRUE(
          p.setNode(n, {{"c4.dev/leaf", "leaf-" + std::to_string(l)}, {"c4.dev/plane", "1"}}));
      job.nodes.push_back(n);
    }
  }
  EXPECT_TRUE(p.planJob(job));
  if (spares == 0) {
    EXPECT_TRUE(p.setLinkState({1, "leaf-1", 2}, 0.0));
  } else {  // the uplink under the first connection's one primary subflow
    const PlannedPair& first = p.plan("ns/train")->pairs.front();
    const std::string leaf = "leaf-" + first.local_node.substr(5, 1);
    EXPECT_TRUE(p.setLinkState({1, leaf, first.subflows.front().path}, 0.0));
  }
  return *p.plan("ns/train");
}

TEST(PlanDocumentTest, EnforceRoundTrips) {
  JobPlan plan = makePlan();
  ASSERT_EQ(plan.pairs.size(), 6u);
  auto doc = makePlanDocument(plan, 12, Mode::kEnforce);
  ASSERT_TRUE(doc);
  std::string text = renderPlanDocument(*doc);
  auto back = parsePlanDocument(text);
  ASSERT_TRUE(back) << back.error().toString() << "\n" << text;
  EXPECT_EQ(*back, *doc);
  EXPECT_EQ(back->version, 12);
  EXPECT_EQ(back->default_subflows, 4);
  EXPECT_EQ(back->planes.size(), 6u);
  for (const auto& [node, plane] : back->planes) EXPECT_EQ(plane, 1) << node;
  bool zero_weight = false;
  for (std::size_t i = 0; i < plan.pairs.size(); ++i) {
    EXPECT_EQ(back->pairs[i].local_node, plan.pairs[i].local_node);
    EXPECT_EQ(back->pairs[i].peer_node, plan.pairs[i].peer_node);
    EXPECT_EQ(back->pairs[i].plane, 1);
    EXPECT_EQ(back->pairs[i].subflows, plan.pairs[i].subflows);
    for (const auto& s : back->pairs[i].subflows) zero_weight = zero_weight || s.weight == 0;
  }
  EXPECT_TRUE(zero_weight) << "the failed uplink's subflows carry weight 0";
  // Rendering is stable: the same document gives the same bytes.
  EXPECT_EQ(renderPlanDocument(*back), text);
}

// The plugin's own parser (nccl-net-plugin/src/plan.cc) accepts the document and reads the same
// values, field by field.
TEST(PlanDocumentTest, ThePluginParserReadsWhatThePlannerWrites) {
  JobPlan plan = makePlan();
  for (Mode mode : {Mode::kOff, Mode::kAdvisory, Mode::kEnforce}) {
    auto doc = makePlanDocument(plan, 3, mode);
    ASSERT_TRUE(doc);
    auto parsed = c4::parsePlan(renderPlanDocument(*doc));
    ASSERT_TRUE(parsed) << parsed.error().toString();
    EXPECT_EQ(parsed->version, 3);
    EXPECT_EQ(parsed->default_subflows, 4);
    ASSERT_EQ(parsed->pairs.size(), doc->pairs.size()) << modeName(mode);
    EXPECT_EQ(parsed->planes.size(), doc->planes.size());
    for (std::size_t i = 0; i < doc->pairs.size(); ++i) {
      const auto& mine = doc->pairs[i];
      const auto* theirs = parsed->find(mine.local_node, c4::nodeHash(mine.peer_node));
      ASSERT_NE(theirs, nullptr);
      ASSERT_EQ(theirs->subflows.size(), mine.subflows.size());
      for (std::size_t j = 0; j < mine.subflows.size(); ++j) {
        EXPECT_EQ(theirs->subflows[j].local_port, mine.subflows[j].local_port);
        EXPECT_EQ(theirs->subflows[j].path_id, mine.subflows[j].path);
        EXPECT_EQ(theirs->subflows[j].weight, mine.subflows[j].weight);
      }
    }
    if (mode != Mode::kOff) {
      EXPECT_EQ(parsed->planeOf("node-0-0"), 1) << "the plan names every node's plane";
    }
  }
}

TEST(PlanDocumentTest, ModesDecideWhatThePluginApplies) {
  JobPlan plan = makePlan();
  auto off = makePlanDocument(plan, 5, Mode::kOff);
  ASSERT_TRUE(off);
  EXPECT_EQ(renderPlanDocument(*off), R"({"default":{"subflows":4},"version":5})");
  auto advisory = makePlanDocument(plan, 5, Mode::kAdvisory);
  ASSERT_TRUE(advisory);
  ASSERT_EQ(advisory->pairs.size(), plan.pairs.size());
  for (std::size_t i = 0; i < plan.pairs.size(); ++i) {
    for (std::size_t j = 0; j < plan.pairs[i].subflows.size(); ++j) {
      const auto& s = advisory->pairs[i].subflows[j];
      EXPECT_EQ(s.local_port, 0);
      EXPECT_EQ(s.weight, 1.0);
      EXPECT_EQ(s.path, plan.pairs[i].subflows[j].path);
    }
  }
  EXPECT_FALSE(makePlanDocument(plan, -1, Mode::kEnforce));
}

// Spares travel in Enforce (weight 0 while idle, the plugin connects them and sends nothing on
// them) and are left out in Advisory, where the plugin applies no weights and would use them as
// ordinary subflows.
TEST(PlanDocumentTest, SparesAreInEnforceOnly) {
  JobPlan plan = makePlan(1);
  EXPECT_EQ(plan.spare_subflows, 1);
  auto enforce = makePlanDocument(plan, 3, Mode::kEnforce);
  ASSERT_TRUE(enforce);
  auto parsed = parsePlanDocument(renderPlanDocument(*enforce));
  ASSERT_TRUE(parsed) << parsed.error().toString();
  ASSERT_EQ(parsed->pairs.size(), plan.pairs.size());
  int idle = 0, standing_in = 0;
  for (const auto& pair : parsed->pairs) {
    ASSERT_EQ(pair.subflows.size(), 2U);
    EXPECT_NE(pair.subflows[1].local_port, 0);
    (pair.subflows[1].weight == 0.0 ? idle : standing_in) += 1;
  }
  EXPECT_GT(idle, 0);
  EXPECT_GT(standing_in, 0) << "a spare stands in for the subflow on the failed uplink";
  auto advisory = makePlanDocument(plan, 3, Mode::kAdvisory);
  ASSERT_TRUE(advisory);
  for (const auto& pair : advisory->pairs) EXPECT_EQ(pair.subflows.size(), 1U);
}

TEST(PlanDocumentTest, ParserRefusesWhatThePluginRefuses) {
  const char* bad[] = {
      R"({})",
      R"({"version": -1})",
      R"({"version": 1, "extra": 1})",
      R"({"version": 1, "default": {"subflows": 65}})",
      R"({"version": 1, "planes": {"a": 40000}})",
      R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b", "subflows": []}]})",
      R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
          "subflows": [{"weight": 0}]}]})",
      R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
          "subflows": [{"localPort": 70000}]}]})",
      R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b", "subflows": [{}]},
          {"localNode": "a", "peerNode": "b", "subflows": [{}]}]})",
      R"({"version": 1, "pairs": [{"localNode": "", "peerNode": "b", "subflows": [{}]}]})",
      R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
          "subflows": [{"pathId": -2}]}]})",
      R"(not json)",
  };
  for (const char* text : bad) {
    auto mine = parsePlanDocument(text);
    EXPECT_FALSE(mine) << text;
    if (!mine) {
      EXPECT_EQ(mine.error().message.rfind("plan: ", 0), 0u);
    }
    EXPECT_FALSE(c4::parsePlan(text)) << "the plugin agrees: " << text;
  }
  auto defaults = parsePlanDocument(
      R"({"version": 2, "pairs": [{"localNode": "a", "peerNode": "b", "subflows": [{}]}]})");
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->pairs[0].subflows[0], (PlannedSubflow{0, -1, 1.0}));
}

}  // namespace
}  // namespace c4::op::c4p
