// The traffic plan schema (libc4-common): strict parsing with the failing field named, and planes
// reported only when every node has one. How the plugin applies a plan is tested with the plugin
// (unit-tests/nccl-net-plugin/plan_test.cc).
#include "c4/common/plan.h"

#include <gtest/gtest.h>

#include <string>

namespace c4 {
namespace {

TEST(PlanParse, AcceptsTheDocumentedSchema) {
  auto p = parsePlan(R"({"version": 3, "default": {"subflows": 2},
    "pairs": [{"localNode": "a", "peerNode": "b",
               "subflows": [{"localPort": 40001, "pathId": 0, "weight": 2},
                            {"localPort": 0, "pathId": 1, "weight": 0.5}]}]})");
  ASSERT_TRUE(p.has_value()) << p.error().toString();
  EXPECT_EQ(p->version, 3);
  EXPECT_EQ(p->default_subflows, 2);
  const PlanPair* pair = p->find("a", nodeHash("b"));
  ASSERT_NE(pair, nullptr);
  ASSERT_EQ(pair->subflows.size(), 2u);
  EXPECT_EQ(pair->subflows[0].local_port, 40001);
  EXPECT_EQ(pair->subflows[1].path_id, 1);
  EXPECT_DOUBLE_EQ(pair->subflows[1].weight, 0.5);
  EXPECT_EQ(p->find("b", nodeHash("a")), nullptr);
}

TEST(PlanParse, RejectsBadInputWithTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  for (const Case& c : std::vector<Case>{
           {"not json", "$"},
           {"[]", "$"},
           {R"({"pairs": []})", "$.version"},
           {R"({"version": -1})", "$.version"},
           {R"({"version": 1, "extra": 1})", "$.extra"},
           {R"({"version": 1, "default": {"subflows": 0}})", "$.default.subflows"},
           {R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b", "subflows": []}]})",
            "$.pairs[0].subflows"},
           {R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
              "subflows": [{"localPort": 70000}]}]})",
            "localPort"},
           {R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
              "subflows": [{"weight": 0}]}]})",
            "at least one weight"},
           {R"({"version": 1, "pairs": [{"localNode": "a", "peerNode": "b",
              "subflows": [{"weight": -1}]}]})",
            "weight"},
           {R"({"version": 1, "pairs": [{"localNode": "", "peerNode": "b",
              "subflows": [{}]}]})",
            "localNode"},
       }) {
    auto p = parsePlan(c.json);
    ASSERT_FALSE(p.has_value()) << c.json;
    EXPECT_NE(p.error().message.find(c.field), std::string::npos)
        << c.json << " -> " << p.error().message;
  }
}

// Planes (node label c4.dev/plane) become NCCL's planeId only when the plan is complete for the
// job: every node the plan mentions has one.
TEST(PlanParse, PlaneIsReportedOnlyWhenEveryNodeHasOne) {
  auto p = parsePlan(R"({"version": 1, "planes": {"a": 1, "b": 1, "c": 0},
    "pairs": [{"localNode": "a", "peerNode": "b", "subflows": [{}]},
              {"localNode": "b", "peerNode": "c", "subflows": [{}]}]})");
  ASSERT_TRUE(p.has_value()) << p.error().toString();
  EXPECT_EQ(p->planeOf("a"), 1);
  EXPECT_EQ(p->planeOf("c"), 0);
  std::string why;
  EXPECT_EQ(p->planeOf("d", &why), kPlaneUnknown);
  EXPECT_NE(why.find("node d"), std::string::npos) << why;
  auto partial = parsePlan(R"({"version": 1, "planes": {"a": 1},
    "pairs": [{"localNode": "a", "peerNode": "b", "subflows": [{}]}]})");
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->planeOf("a", &why), kPlaneUnknown);
  EXPECT_NE(why.find("node b"), std::string::npos) << why;
  auto none = parsePlan(R"({"version": 1})");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->planeOf("a"), kPlaneUnknown);
  for (const char* bad :
       {R"({"version": 1, "planes": []})", R"({"version": 1, "planes": {"a": -1}})",
        R"({"version": 1, "planes": {"a": 32768}})", R"({"version": 1, "planes": {"a": "0"}})"}) {
    auto q = parsePlan(bad);
    ASSERT_FALSE(q.has_value()) << bad;
    EXPECT_NE(q.error().message.find("$.planes"), std::string::npos) << q.error().message;
  }
}

}  // namespace
}  // namespace c4
