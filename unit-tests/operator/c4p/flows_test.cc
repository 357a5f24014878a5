#include "operator/c4p/flows.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace c4::op::c4p {
namespace {

std::vector<std::string> names(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("node-" + std::to_string(i));
  return v;
}

int total(const std::vector<Connection>& c) {
  int t = 0;
  for (const auto& x : c) t += x.count;
  return t;
}

TEST(FlowsTest, RingOfManyNodesConnectsEachNodeToTheNext) {
  for (int n : {3, 4, 8, 33}) {
    for (int nproc : {1, 2, 8}) {
      JobPlacement p{"ns/job", names(n), nproc, 4, false, false};
      auto conns = jobConnections(p);
      ASSERT_TRUE(conns) << conns.error().toString();
      ASSERT_EQ(conns->size(), static_cast<std::size_t>(n)) << n << " " << nproc;
      std::map<std::string, std::string> next;
      for (const auto& c : *conns) {
        EXPECT_EQ(c.count, 1);
        EXPECT_TRUE(next.emplace(c.src, c.dst).second) << "two connections out of " << c.src;
      }
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(next["node-" + std::to_string(i)], "node-" + std::to_string((i + 1) % n));
      }
      // Sorted by (src, dst).
      for (std::size_t i = 1; i < conns->size(); ++i) {
        EXPECT_LT(std::tie((*conns)[i - 1].src, (*conns)[i - 1].dst),
                  std::tie((*conns)[i].src, (*conns)[i].dst));
      }
    }
  }
}

TEST(FlowsTest, SmallRings) {
  auto one = jobConnections({"j", names(1), 8, 4, true, true});
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->empty());  // all ranks inside one node
  auto two = jobConnections({"j", names(2), 4, 2, false, false});
  ASSERT_TRUE(two);
  EXPECT_EQ(*two, (std::vector<Connection>{{"node-0", "node-1", 1}, {"node-1", "node-0", 1}}));
  auto both = jobConnections({"j", names(2), 4, 2, true, false});
  ASSERT_TRUE(both);
  EXPECT_EQ(*both, (std::vector<Connection>{{"node-0", "node-1", 2}, {"node-1", "node-0", 2}}));
}

TEST(FlowsTest, BothDirectionsAddsTheReverseRing) {
  auto conns = jobConnections({"j", names(5), 1, 4, true, false});
  ASSERT_TRUE(conns);
  EXPECT_EQ(conns->size(), 10u);
  EXPECT_EQ(total(*conns), 10);
  std::set<std::pair<std::string, std::string>> s;
  for (const auto& c : *conns) s.insert({c.src, c.dst});
  EXPECT_TRUE(s.contains({"node-3", "node-2"}));
  EXPECT_TRUE(s.contains({"node-0", "node-4"}));
}

// Each of the two trees spans the nodes: n − 1 parent links per tree, each used both ways (reduce
// up, broadcast down), and the tree links connect every node.
TEST(FlowsTest, DoubleBinaryTreeSpansTheNodes) {
  for (int n : {2, 3, 4, 5, 7, 8, 16, 31}) {
    auto with = jobConnections({"j", names(n), 1, 1, false, true});
    auto without = jobConnections({"j", names(n), 1, 1, false, false});
    ASSERT_TRUE(with && without);
    EXPECT_EQ(total(*with) - total(*without), 2 * 2 * (n - 1)) << n;
    // Connectivity of the tree links (union-find).
    std::map<std::string, std::string> parent;
    for (const auto& name : names(n)) parent[name] = name;
    auto find = [&](std::string x) {
      while (parent[x] != x) x = parent[x];
      return x;
    };
    std::map<std::pair<std::string, std::string>, int> tree;
    for (const auto& c : *with) tree[{c.src, c.dst}] += c.count;
    for (const auto& c : *without) tree[{c.src, c.dst}] -= c.count;
    for (const auto& [k, count] : tree) {
      ASSERT_GE(count, 0);
      if (count == 0) continue;
      parent[find(k.first)] = find(k.second);
      // Tree links are symmetric: every reduce link has its broadcast twin.
      auto twin = tree.find({k.second, k.first});
      ASSERT_NE(twin, tree.end());
      EXPECT_EQ(count, twin->second) << n << " " << k.first << "->" << k.second;
    }
    std::set<std::string> roots;
    for (const auto& name : names(n)) roots.insert(find(name));
    EXPECT_EQ(roots.size(), 1u) << n;
  }
}

TEST(FlowsTest, RefusesBadPlacements) {
  struct Case {
    JobPlacement p;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"", names(2), 1, 4}, "placement: job is empty"},
      {{"j", {}, 1, 4}, "placement j: nodes is empty"},
      {{"j", {"a", ""}, 1, 4}, "placement j: nodes[1] is empty"},
      {{"j", {"a", "b", "a"}, 1, 4}, "placement j: nodes[2]: node a appears twice"},
      {{"j", names(2), 0, 4}, "placement j: procsPerNode must be >= 1"},
      {{"j", names(2), 1, 0}, "placement j: subflowsPerConnection must be in [1, 64]"},
      {{"j", names(2), 1, 65}, "placement j: subflowsPerConnection must be in [1, 64]"},
  };
  JobPlacement negative{"j", names(2), 1, 1};
  negative.spare_subflows = -1;
  cases.push_back({negative,
                   "placement j: spareSubflows must be in [0, 64 - subflowsPerConnection] (got -1 "
                   "with subflowsPerConnection 1)"});
  JobPlacement too_many{"j", names(2), 1, 60};
  too_many.spare_subflows = 5;
  cases.push_back({too_many,
                   "placement j: spareSubflows must be in [0, 64 - subflowsPerConnection] (got 5 "
                   "with subflowsPerConnection 60)"});
  for (const auto& c : cases) {
    auto r = jobConnections(c.p);
    ASSERT_FALSE(r) << c.message;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message, c.message);
  }
}

}  // namespace
}  // namespace c4::op::c4p
