#include "operator/c4p/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace c4::op::c4p {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Degraded {
  int leaf;
  int uplink;
  double fraction;
};

Fabric makeFabric(int uplinks, const std::vector<Degraded>& degraded = {}, double host = 100,
                  double uplink_speed = 100) {
  FabricSpec spec;
  spec.spines = uplinks;
  spec.uplinks_per_leaf = uplinks;
  spec.uplink_speed_gbps = uplink_speed;
  spec.host_link_speed_gbps = host;
  for (const auto& d : degraded) {
    LinkState st;
    st.link.leaf = "leaf-" + std::to_string(d.leaf);
    st.link.uplink = d.uplink;
    st.capacity_fraction = d.fraction;
    spec.links.push_back(std::move(st));
  }
  auto f = Fabric::fromSpec(spec);
  EXPECT_TRUE(f) << f.error().toString();
  return *f;
}

std::string node(int leaf, int i) {
  return "n" + std::to_string(leaf) + "-" + std::to_string(i);
}

void addNodes(Planner& p, int leaves, int per_leaf) {
  for (int l = 0; l < leaves; ++l) {
    for (int i = 0; i < per_leaf; ++i) {
      ASSERT_TRUE(p.setNode(node(l, i), {{"c4.dev/leaf", "leaf-" + std::to_string(l)}}));
    }
  }
}

int leafOf(const std::string& n) {
  return std::stoi(n.substr(1, n.find('-') - 1));
}

// One planned subflow with its pair's locations.
struct PathSub {
  NodeLocation src;
  NodeLocation dst;
  double demand;  // the pair's demand (Gbps)
  int subflows;
  int path;
  double weight;
};

std::vector<PathSub> pathSubflowsOf(const Planner& p, const std::vector<JobPlacement>& jobs,
                                    const std::map<std::string, NodeLocation>& where, double host) {
  std::vector<PathSub> out;
  for (const auto& job : jobs) {
    auto conns = jobConnections(job);
    EXPECT_TRUE(conns);
    std::map<std::string, int> out_deg, in_deg;
    std::map<std::pair<std::string, std::string>, int> count;
    for (const auto& c : *conns) {
      out_deg[c.src] += c.count;
      in_deg[c.dst] += c.count;
      count[{c.src, c.dst}] = c.count;
    }
    const JobPlan* plan = p.plan(job.job);
    EXPECT_NE(plan, nullptr);
    if (plan == nullptr) continue;
    std::size_t cross = 0;
    for (const auto& c : *conns) cross += where.at(c.src).leaf != where.at(c.dst).leaf ? 1U : 0U;
    EXPECT_EQ(plan->pairs.size(), cross) << "every cross-leaf pair is planned, no other";
    for (const auto& pair : plan->pairs) {
      double demand = host * count[{pair.local_node, pair.peer_node}] /
                      std::max(out_deg[pair.local_node], in_deg[pair.peer_node]);
      EXPECT_EQ(pair.subflows.size(), static_cast<std::size_t>(job.subflows_per_connection));
      for (const auto& s : pair.subflows) {
        out.push_back({where.at(pair.local_node), where.at(pair.peer_node), demand,
                       job.subflows_per_connection, s.path, s.weight});
      }
    }
  }
  return out;
}

// The planned subflows of jobs on the two-tier fabrics of these tests: node n<l>-<i> is on
// leaf-<l>.
std::vector<PathSub> subflowsOf(const Planner& p, const std::vector<JobPlacement>& jobs,
                                double host) {
  std::map<std::string, NodeLocation> where;
  for (const auto& job : jobs) {
    for (const auto& n : job.nodes) where[n] = NodeLocation{0, "leaf-" + std::to_string(leafOf(n))};
  }
  return pathSubflowsOf(p, jobs, where, host);
}

// Max link load of `subs` with the given paths; weights as planned or equal (integer plan).
double maxLoad(const Fabric& f, const std::vector<PathSub>& subs, const std::vector<int>& paths,
               bool weighted) {
  std::map<std::tuple<std::string, int, int>, double> used;
  for (std::size_t i = 0; i < subs.size(); ++i) {
    double w = weighted ? subs[i].weight : 1.0 / subs[i].subflows;
    used[{subs[i].src.leaf, paths[i], 0}] += subs[i].demand * w;
    used[{subs[i].dst.leaf, paths[i], 1}] += subs[i].demand * w;
  }
  double m = 0;
  for (const auto& [k, u] : used) {
    const auto& [leaf, path, dir] = k;
    double cap = f.capacityGbps(0, leaf, path, dir == 0 ? Direction::kUp : Direction::kDown);
    double load = cap <= 0 ? (u > 1e-12 ? kInf : 0.0) : u / cap;
    m = std::max(m, load);
  }
  return m;
}

std::vector<int> pathsOf(const std::vector<PathSub>& subs) {
  std::vector<int> v;
  for (const auto& s : subs) v.push_back(s.path);
  return v;
}

// The optimum over every assignment of paths (equal weights).
double bruteForce(const Fabric& f, const std::vector<PathSub>& subs, int uplinks) {
  std::vector<int> paths(subs.size(), 0);
  double best = kInf;
  while (true) {
    best = std::min(best, maxLoad(f, subs, paths, false));
    std::size_t i = 0;
    while (i < paths.size() && ++paths[i] == uplinks) paths[i++] = 0;
    if (i == paths.size()) break;
  }
  return best;
}

// " job[s=2: n0 n1 ...]" per job, for failure messages.
std::string describeJobs(const std::vector<JobPlacement>& jobs) {
  std::string s;
  for (const auto& j : jobs) {
    s += " job[s=" + std::to_string(j.subflows_per_connection) + ":";
    for (const auto& n : j.nodes) s += " " + n;
    s += "]";
  }
  return s;
}

struct Instance {
  int leaves, per_leaf, uplinks;
  std::vector<Degraded> degraded;
  std::vector<JobPlacement> jobs;
};

std::string describe(const Instance& in) {
  std::string s = "L=" + std::to_string(in.leaves) + " H=" + std::to_string(in.per_leaf) +
                  " U=" + std::to_string(in.uplinks);
  for (const auto& d : in.degraded) {
    s += " degraded(" + std::to_string(d.leaf) + "," + std::to_string(d.uplink) +
         ")=" + std::to_string(d.fraction);
  }
  return s + describeJobs(in.jobs);
}

// One job over all `nodes` (shuffled) or, when there are at least 4, possibly two over a random
// cut, each with 1–2 subflows per connection (the same count when `equal_subflows`).
std::vector<JobPlacement> randomJobs(std::vector<std::string> nodes, bool equal_subflows,
                                     std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::shuffle(nodes.begin(), nodes.end(), rng);
  int jobs = nodes.size() >= 4 ? pick(1, 2) : 1;
  std::size_t cut = jobs == 1
                        ? nodes.size()
                        : static_cast<std::size_t>(pick(2, static_cast<int>(nodes.size()) - 2));
  int s0 = pick(1, 2);
  std::vector<JobPlacement> out;
  out.push_back({"job-a", {nodes.begin(), nodes.begin() + static_cast<long>(cut)}, 1, s0});
  if (jobs == 2) {
    out.push_back({"job-b",
                   {nodes.begin() + static_cast<long>(cut), nodes.end()},
                   1,
                   equal_subflows ? s0 : pick(1, 2)});
  }
  return out;
}

// `after` has the pairs of `before`, every subflow on the same path and port.
void expectPathsAndPortsKept(const JobPlan& before, const JobPlan& after) {
  ASSERT_EQ(after.pairs.size(), before.pairs.size());
  for (std::size_t i = 0; i < after.pairs.size(); ++i) {
    ASSERT_EQ(after.pairs[i].subflows.size(), before.pairs[i].subflows.size());
    for (std::size_t j = 0; j < after.pairs[i].subflows.size(); ++j) {
      EXPECT_EQ(after.pairs[i].subflows[j].path, before.pairs[i].subflows[j].path);
      EXPECT_EQ(after.pairs[i].subflows[j].local_port, before.pairs[i].subflows[j].local_port);
    }
  }
}

// Random tiny instances: 2–3 leaves, 1–2 nodes per leaf, 2–3 uplinks, one or two jobs.
std::vector<Instance> randomInstances(int count, bool healthy_equal, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Instance> out;
  while (static_cast<int>(out.size()) < count) {
    Instance in{pick(2, 3), pick(1, 2), pick(2, 3), {}, {}};
    std::vector<std::string> nodes;
    for (int l = 0; l < in.leaves; ++l) {
      for (int i = 0; i < in.per_leaf; ++i) nodes.push_back(node(l, i));
    }
    in.jobs = randomJobs(std::move(nodes), healthy_equal, rng);
    if (!healthy_equal) {
      int kind = pick(0, 2);
      if (kind > 0) {
        in.degraded.push_back(
            {pick(0, in.leaves - 1), pick(0, in.uplinks - 1), kind == 1 ? 0.0 : 0.5});
      }
    }
    int items = 0;
    for (const auto& j : in.jobs) {
      auto conns = jobConnections(j);
      for (const auto& c : *conns) {
        if (leafOf(c.src) != leafOf(c.dst)) items += j.subflows_per_connection;
      }
    }
    if (items == 0 || items > 9) continue;
    out.push_back(std::move(in));
  }
  return out;
}

// The optimum over the paths of subs[fixed..] with the paths of subs[0..fixed) as planned (equal
// weights): what planning a job around a running one can reach.
double bruteForceAround(const Fabric& f, const std::vector<PathSub>& subs, std::size_t fixed,
                        int uplinks) {
  std::vector<int> paths = pathsOf(subs);
  const std::size_t n = subs.size() - fixed;
  double best = kInf;
  std::vector<int> tail(n, 0);
  while (true) {
    for (std::size_t i = 0; i < n; ++i) paths[fixed + i] = tail[i];
    best = std::min(best, maxLoad(f, subs, paths, false));
    std::size_t i = 0;
    while (i < n && ++tail[i] == uplinks) tail[i++] = 0;
    if (i == n) break;
  }
  return best;
}

// Each job is planned optimally: the first over all its paths, the second around the first.
void checkOptimal(const std::vector<Instance>& instances, int* optimal, int* total) {
  for (const auto& in : instances) {
    Fabric f = makeFabric(in.uplinks, in.degraded);
    Planner p(f);
    addNodes(p, in.leaves, in.per_leaf);
    std::size_t fixed = 0;
    for (std::size_t j = 0; j < in.jobs.size(); ++j) {
      ASSERT_TRUE(p.planJob(in.jobs[j])) << describe(in);
      std::vector<JobPlacement> so_far(in.jobs.begin(), in.jobs.begin() + static_cast<long>(j) + 1);
      auto subs = subflowsOf(p, so_far, 100);
      double planned = maxLoad(f, subs, pathsOf(subs), false);
      double best = bruteForceAround(f, subs, fixed, in.uplinks);
      ++*total;
      if (std::fabs(planned - best) < 1e-9) ++*optimal;
      EXPECT_NEAR(planned, best, 1e-9) << describe(in) << " (job " << j << ")";
      // Weights only lower the maximum, and the planner reports the load the links carry.
      double weighted = maxLoad(f, subs, pathsOf(subs), true);
      EXPECT_LE(weighted, planned + 1e-3) << describe(in);
      EXPECT_NEAR(p.maxLinkLoad(), weighted, 1e-3) << describe(in);
      fixed = subs.size();
    }
  }
}

// Tier 1 (edge colouring) is optimal: equal demands, healthy links.
TEST(PlannerTest, OptimalOnEveryTinyHealthyFabricExhaustively) {
  int optimal = 0, total = 0;
  checkOptimal(randomInstances(300, /*healthy_equal=*/true, 1), &optimal, &total);
  EXPECT_EQ(optimal, total);
}

// The general tier (failed and degraded links, unequal demands, a second job planned around the
// first) reaches the optimum on these instances too.
TEST(PlannerTest, OptimalOnTinyFabricsWithFailuresAndMixedJobsExhaustively) {
  auto instances = randomInstances(300, /*healthy_equal=*/false, 2);
  int failed = 0, degraded = 0, mixed = 0;
  for (const auto& in : instances) {
    for (const auto& d : in.degraded) (d.fraction == 0 ? failed : degraded) += 1;
    if (in.jobs.size() == 2 &&
        in.jobs[0].subflows_per_connection != in.jobs[1].subflows_per_connection) {
      ++mixed;
    }
  }
  // The set covers the hard cases: dead links, half-capacity links, jobs of unequal demand.
  EXPECT_GT(failed, 50);
  EXPECT_GT(degraded, 50);
  EXPECT_GT(mixed, 30);
  int optimal = 0, total = 0;
  checkOptimal(instances, &optimal, &total);
  EXPECT_EQ(optimal, total);
}

// A ring whose every hop crosses leaves, hosts per leaf = uplinks: a plan with no two subflows on
// one link exists (König) and the planner finds it; with 4 subflows each link carries exactly
// its capacity.
TEST(PlannerTest, ZeroCollisionWhenFeasible) {
  for (int s : {1, 4}) {
    const int leaves = 8, per_leaf = 8, uplinks = 8;
    Fabric f = makeFabric(uplinks);
    Planner p(f);
    addNodes(p, leaves, per_leaf);
    JobPlacement job{"ns/big", {}, 8, s};
    for (int i = 0; i < per_leaf; ++i) {
      for (int l = 0; l < leaves; ++l) job.nodes.push_back(node(l, i));
    }
    auto out = p.planJob(job);
    ASSERT_TRUE(out) << out.error().toString();
    EXPECT_EQ(out->tier1_planes, 1);
    EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 1.0);
    auto subs = subflowsOf(p, {job}, 100);
    EXPECT_EQ(subs.size(), static_cast<std::size_t>(leaves * per_leaf * s));
    std::map<std::tuple<std::string, int, int>, int> per_link;
    for (const auto& x : subs) {
      ++per_link[{x.src.leaf, x.path, 0}];
      ++per_link[{x.dst.leaf, x.path, 1}];
      EXPECT_DOUBLE_EQ(x.weight, 1.0 / s);
    }
    EXPECT_EQ(per_link.size(), static_cast<std::size_t>(leaves * uplinks * 2));
    for (const auto& [k, n] : per_link) EXPECT_EQ(n, s);
  }
}

TEST(PlannerTest, FailedLinksAreAvoidedAndWeightsSpreadTheLoss) {
  const int leaves = 4, per_leaf = 4, uplinks = 4;
  Fabric f = makeFabric(uplinks, {{1, 2, 0.0}, {3, 0, 0.0}});
  Planner p(f);
  addNodes(p, leaves, per_leaf);
  JobPlacement job{"ns/j", {}, 1, 3};
  for (int i = 0; i < per_leaf; ++i) {
    for (int l = 0; l < leaves; ++l) job.nodes.push_back(node(l, i));
  }
  ASSERT_TRUE(p.planJob(job));
  auto subs = subflowsOf(p, {job}, 100);
  for (const auto& x : subs) {
    EXPECT_FALSE((x.src.leaf == "leaf-1" || x.dst.leaf == "leaf-1") && x.path == 2);
    EXPECT_FALSE((x.src.leaf == "leaf-3" || x.dst.leaf == "leaf-3") && x.path == 0);
  }
  // 4 flows × 3 subflows over 3 live uplinks: 12 units on 3 links is 4 per link = 4/3 of the
  // host rate; the fluid optimum is 4/3 too, the plan meets it.
  EXPECT_NEAR(p.maxLinkLoad(), 4.0 / 3.0, 1e-3);
  EXPECT_TRUE(std::isfinite(p.maxLinkLoad()));
}

// A link that fails under a running job: paths and ports stay (live connections keep them),
// the subflows on the dead link get weight 0 and the others of their connection take the bytes.
TEST(PlannerTest, LiveFailureChangesOnlyWeights) {
  const int leaves = 4, per_leaf = 4, uplinks = 4;
  Planner p(makeFabric(uplinks));
  addNodes(p, leaves, per_leaf);
  JobPlacement job{"ns/j", {}, 8, 4};
  for (int i = 0; i < per_leaf; ++i) {
    for (int l = 0; l < leaves; ++l) job.nodes.push_back(node(l, i));
  }
  ASSERT_TRUE(p.planJob(job));
  JobPlan before = *p.plan("ns/j");
  EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 1.0);
  auto out = p.setLinkState({0, "leaf-2", 1}, 0.0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->changed, std::vector<std::string>{"ns/j"});
  const JobPlan& after = *p.plan("ns/j");
  ASSERT_EQ(after.pairs.size(), before.pairs.size());
  for (std::size_t i = 0; i < after.pairs.size(); ++i) {
    const auto& a = after.pairs[i];
    const auto& b = before.pairs[i];
    double sum = 0;
    for (std::size_t j = 0; j < a.subflows.size(); ++j) {
      EXPECT_EQ(a.subflows[j].path, b.subflows[j].path);
      EXPECT_EQ(a.subflows[j].local_port, b.subflows[j].local_port);
      sum += a.subflows[j].weight;
      bool dead =
          (leafOf(a.local_node) == 2 || leafOf(a.peer_node) == 2) && a.subflows[j].path == 1;
      if (dead) {
        EXPECT_EQ(a.subflows[j].weight, 0.0);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  // Leaf 2 sends and receives 4 host rates over 3 live uplinks: 4/3 is the fluid optimum; the
  // weights get within 2% of it.
  EXPECT_TRUE(std::isfinite(p.maxLinkLoad()));
  EXPECT_LE(p.maxLinkLoad(), 4.0 / 3.0 * 1.02);
  EXPECT_GE(p.maxLinkLoad(), 4.0 / 3.0 - 1e-3);
  // Healing restores equal weights.
  ASSERT_TRUE(p.setLinkState({0, "leaf-2", 1}, 1.0));
  EXPECT_EQ(*p.plan("ns/j"), before);
}

TEST(PlannerTest, PortsAreDistinctPerNodeAndSelectThePlannedPath) {
  Fabric f = makeFabric(4);
  PlannerOptions o;
  o.port_first = 41000;
  o.port_last = 41999;
  Planner p(f, o);
  addNodes(p, 4, 4);
  std::vector<JobPlacement> jobs;
  for (int j = 0; j < 2; ++j) {
    JobPlacement job{"job-" + std::to_string(j), {}, 1, 4, /*both_directions=*/true};
    for (int l = 0; l < 4; ++l) {
      job.nodes.push_back(node(l, 2 * j));
      job.nodes.push_back(node(l, 2 * j + 1));
    }
    ASSERT_TRUE(p.planJob(job));
    jobs.push_back(job);
  }
  std::map<std::string, std::set<int>> ports;
  for (const auto& job : jobs) {
    for (const auto& pair : p.plan(job.job)->pairs) {
      for (const auto& s : pair.subflows) {
        EXPECT_GE(s.local_port, 41000);
        EXPECT_LE(s.local_port, 41999);
        EXPECT_EQ(f.pathOfPort(s.local_port), s.path);
        EXPECT_TRUE(ports[pair.local_node].insert(s.local_port).second)
            << "port " << s.local_port << " twice on " << pair.local_node;
      }
    }
  }
}

TEST(PlannerTest, TablePathRuleGivesTablePorts) {
  FabricSpec spec;
  spec.spines = 2;
  spec.uplinks_per_leaf = 2;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  spec.rule = PathRule::kTable;
  spec.port_table = {{50001, 0}, {50007, 1}, {50003, 0}, {50002, 1}};
  auto f = Fabric::fromSpec(spec);
  ASSERT_TRUE(f);
  PlannerOptions o;
  o.port_first = 50000;
  o.port_last = 50010;
  Planner p(*f, o);
  addNodes(p, 2, 1);
  ASSERT_TRUE(p.planJob({"j", {node(0, 0), node(1, 0)}, 1, 2}));
  for (const auto& pair : p.plan("j")->pairs) {
    std::set<int> seen;
    for (const auto& s : pair.subflows) {
      EXPECT_EQ(f->pathOfPort(s.local_port), s.path);
      seen.insert(s.path);
    }
    EXPECT_EQ(seen.size(), 2u);  // 1 connection, 2 subflows, 2 uplinks: one each
  }
  // The table has two ports per path: a second job from the same nodes still fits, a third
  // does not.
  ASSERT_TRUE(p.planJob({"k", {node(0, 0), node(1, 0)}, 1, 2}));
  auto third = p.planJob({"l", {node(0, 0), node(1, 0)}, 1, 2});
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::kResourceExhausted);
}

TEST(PlannerTest, PortExhaustionIsAnErrorAndChangesNothing) {
  PlannerOptions o;
  o.port_first = 40000;
  o.port_last = 40003;  // one port per path on 4 uplinks
  Planner p(makeFabric(4), o);
  addNodes(p, 2, 1);
  ASSERT_TRUE(p.planJob({"a", {node(0, 0), node(1, 0)}, 1, 4}));
  JobPlan a = *p.plan("a");
  double load = p.maxLinkLoad();
  auto r = p.planJob({"b", {node(0, 0), node(1, 0)}, 1, 4});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(r.error().message.find("no free source port"), std::string::npos);
  EXPECT_EQ(p.plan("b"), nullptr);
  EXPECT_EQ(*p.plan("a"), a);
  EXPECT_EQ(p.maxLinkLoad(), load);
}

TEST(PlannerTest, BadInputIsRefusedAndChangesNothing) {
  FabricSpec spec;
  spec.planes = 2;
  spec.spines = 2;
  spec.uplinks_per_leaf = 2;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  Planner p(*Fabric::fromSpec(spec));
  addNodes(p, 2, 2);
  ASSERT_TRUE(p.setNode("other-plane", {{"c4.dev/leaf", "leaf-0"}, {"c4.dev/plane", "1"}}));
  ASSERT_TRUE(p.planJob({"a", {node(0, 0), node(1, 0)}, 1, 2}));
  JobPlan a = *p.plan("a");

  auto bad_label = p.setNode("n", {{"c4.dev/plane", "0"}});
  ASSERT_FALSE(bad_label);
  auto unknown = p.planJob({"b", {node(0, 1), "ghost"}, 1, 2});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(unknown.error().message.find("ghost"), std::string::npos);
  auto planes = p.planJob({"b", {node(0, 1), "other-plane"}, 1, 2});
  ASSERT_FALSE(planes);
  EXPECT_NE(planes.error().message.find("different planes"), std::string::npos);
  auto placement = p.planJob({"b", {node(0, 1), node(0, 1)}, 1, 2});
  ASSERT_FALSE(placement);
  auto link = p.setLinkState({0, "leaf-0", 5}, 0.0);
  ASSERT_FALSE(link);
  // Re-planning "a" with a bad placement keeps the old plan of "a".
  ASSERT_FALSE(p.planJob({"a", {node(0, 0)}, 1, 0}));

  EXPECT_EQ(p.jobs(), std::vector<std::string>{"a"});
  EXPECT_EQ(*p.plan("a"), a);
  // A description without plane 1 is refused while a node sits there.
  spec.planes = 1;
  auto smaller = p.setFabric(*Fabric::fromSpec(spec));
  ASSERT_FALSE(smaller);
  EXPECT_EQ(p.fabric().planes(), 2);
}

// Planning a second job keeps the first one's paths when planning around them is as good.
TEST(PlannerTest, IncrementalPlanningKeepsOtherJobs) {
  Planner p(makeFabric(4));
  addNodes(p, 4, 4);
  JobPlacement a{"a", {}, 1, 2};
  JobPlacement b{"b", {}, 1, 2};
  for (int l = 0; l < 4; ++l) {
    a.nodes.push_back(node(l, 0));
    a.nodes.push_back(node(l, 1));
    b.nodes.push_back(node(l, 2));
    b.nodes.push_back(node(l, 3));
  }
  ASSERT_TRUE(p.planJob(a));
  JobPlan plan_a = *p.plan("a");
  auto out = p.planJob(b);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->changed, std::vector<std::string>{"b"});
  EXPECT_EQ(*p.plan("a"), plan_a);
  // Each leaf sends one connection of each job (2 subflows of 50 Gbps each) over 4 uplinks of
  // 100 Gbps: no two subflows share a link.
  EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 0.5);
  // Removing b leaves a as it was; removing it again is a no-op.
  auto removed = p.removeJob("b");
  EXPECT_TRUE(removed.changed.empty());
  EXPECT_EQ(*p.plan("a"), plan_a);
  EXPECT_EQ(p.plan("b"), nullptr);
}

// The second job is planned around the first, which keeps every path and port: the result is
// the exhaustive optimum over the second job's subflows with the first job's paths fixed, even
// where moving the first job would lower the maximum (its live connections could not follow).
TEST(PlannerTest, IncrementalPlanningIsTheOptimumAroundTheRunningJob) {
  int worse_than_joint = 0;
  for (const auto& in : randomInstances(400, /*healthy_equal=*/true, 7)) {
    if (in.jobs.size() != 2) continue;
    Fabric f = makeFabric(in.uplinks, in.degraded);
    Planner p(f);
    addNodes(p, in.leaves, in.per_leaf);
    ASSERT_TRUE(p.planJob(in.jobs[0]));
    const JobPlan plan_a = *p.plan("job-a");
    auto first = subflowsOf(p, {in.jobs[0]}, 100);
    auto out = p.planJob(in.jobs[1]);
    ASSERT_TRUE(out);
    expectPathsAndPortsKept(plan_a, *p.plan("job-a"));
    auto both = subflowsOf(p, in.jobs, 100);
    // The best plan that keeps job a's paths: brute force over job b's subflows only.
    double pinned_best = bruteForceAround(f, both, first.size(), in.uplinks);
    double planned = maxLoad(f, both, pathsOf(both), false);
    EXPECT_NEAR(planned, pinned_best, 1e-9) << describe(in);
    if (planned > bruteForce(f, both, in.uplinks) + 1e-9) ++worse_than_joint;
  }
  // The price of stability exists in this set: some instances would do better jointly.
  EXPECT_GT(worse_than_joint, 0);
}

// One pair of a running job in a random sequence, with what the sequence knows of it.
struct PairView {
  const std::string& job;
  const JobPlacement& placement;
  const PlannedPair& pair;
  bool arrived_now;                                    // the job was planned by this event
  std::string where;                                   // "event E: job src->dst", for messages
  std::function<bool(const PlannedSubflow&)> on_dead;  // its path crosses a dead link
  std::function<bool(int)> path_dead;                  // path id crosses a dead link
};

struct RandomCounts {
  int arrivals = 0, failures = 0, departures = 0;
};

// A random sequence of `events` events on 6 leaves x 8 nodes with 4 uplinks: an arrival on 4-12
// free nodes for `arrival_kinds` of 10 draws (`shape` sets its subflow counts), a leaf uplink
// dying or coming back (both directions, at most 3 dead at once) for the draws up to 8, a
// departure for the rest. After every event, each job planned before it keeps every path and
// port, and `check` sees every pair of every running job.
RandomCounts runRandomEvents(
    std::uint64_t seed, int events, int arrival_kinds,
    const std::function<void(JobPlacement&, const std::function<int(int, int)>&)>& shape,
    const std::function<void(const PairView&)>& check) {
  constexpr int kLeaves = 6, kPerLeaf = 8, kUplinks = 4;
  Planner p(makeFabric(kUplinks));
  addNodes(p, kLeaves, kPerLeaf);
  std::mt19937_64 rng(seed);
  const std::function<int(int, int)> pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<std::string> free_nodes;
  for (int l = 0; l < kLeaves; ++l) {
    for (int i = 0; i < kPerLeaf; ++i) free_nodes.push_back(node(l, i));
  }
  std::map<std::string, JobPlacement> running;
  std::set<std::pair<int, int>> dead;  // (leaf, uplink), both directions
  RandomCounts counts;
  int next_job = 0;
  for (int event = 0; event < events; ++event) {
    std::map<std::string, JobPlan> before;
    for (const auto& [name, _] : running) before[name] = *p.plan(name);
    const int kind = pick(0, 9);
    if (kind < arrival_kinds && free_nodes.size() >= 4) {
      std::shuffle(free_nodes.begin(), free_nodes.end(), rng);
      const int n = std::min<int>(pick(4, 12), static_cast<int>(free_nodes.size()));
      JobPlacement job{
          "job-" + std::to_string(next_job++), {free_nodes.end() - n, free_nodes.end()}, 1};
      shape(job, pick);
      free_nodes.resize(free_nodes.size() - static_cast<std::size_t>(n));
      EXPECT_TRUE(p.planJob(job));
      running[job.job] = job;
      ++counts.arrivals;
    } else if (kind < 8) {
      const std::pair<int, int> link{pick(0, kLeaves - 1), pick(0, kUplinks - 1)};
      const bool revive = dead.contains(link);
      if (!revive && dead.size() >= 3) continue;
      EXPECT_TRUE(p.setLinkState({0, "leaf-" + std::to_string(link.first), link.second},
                                 revive ? 1.0 : 0.0));
      revive ? (void)dead.erase(link) : (void)dead.insert(link);
      ++counts.failures;
    } else if (!running.empty()) {
      auto it = running.begin();
      std::advance(it, pick(0, static_cast<int>(running.size()) - 1));
      free_nodes.insert(free_nodes.end(), it->second.nodes.begin(), it->second.nodes.end());
      p.removeJob(it->first);
      before.erase(it->first);
      running.erase(it);
      ++counts.departures;
    }
    for (const auto& [name, plan] : before) {
      SCOPED_TRACE("event " + std::to_string(event) + ", job " + name);
      expectPathsAndPortsKept(plan, *p.plan(name));
    }
    for (const auto& [name, placement] : running) {
      for (const auto& pair : p.plan(name)->pairs) {
        const int src = leafOf(pair.local_node), dst = leafOf(pair.peer_node);
        auto path_dead = [&dead, src, dst](int path) {
          return dead.contains({src, path}) || dead.contains({dst, path});
        };
        check({name, placement, pair, !before.contains(name),
               "event " + std::to_string(event) + ": " + name + " " + pair.local_node + "->" +
                   pair.peer_node,
               [&](const PlannedSubflow& sf) { return path_dead(sf.path); }, path_dead});
      }
    }
  }
  return counts;
}

// The stability contract: a running job's subflows keep their paths and source ports through
// every arrival, departure and link failure (live connections stay bound to their ports and apply
// weights by subflow index), and no subflow on a path with a dead link direction carries weight.
// A random sequence of events on 6 leaves x 8 nodes, 4 uplinks; 1-4 subflows per connection.
TEST(PlannerTest, RunningJobsKeepPathsAndPortsThroughArrivalsDeparturesAndFailures) {
  int stranded = 0;
  const RandomCounts counts = runRandomEvents(
      2406, 120, 5,
      [](JobPlacement& job, const auto& pick) { job.subflows_per_connection = pick(1, 4); },
      [&](const PairView& v) {
        const bool any_alive = std::any_of(v.pair.subflows.begin(), v.pair.subflows.end(),
                                           [&](const auto& sf) { return !v.on_dead(sf); });
        if (!any_alive) {
          // Every subflow's fixed path died after the job was planned: weights cannot help (the
          // escape needs spares, tested below, or a new connection). A job planned now never lands
          // there.
          EXPECT_FALSE(v.arrived_now) << v.where << " was planned onto dead paths only";
          ++stranded;
          return;
        }
        double sum = 0;
        for (const auto& sf : v.pair.subflows) {
          if (v.arrived_now) {
            EXPECT_FALSE(v.on_dead(sf)) << v.where << " planned onto dead path " << sf.path;
          }
          if (v.on_dead(sf)) {
            EXPECT_EQ(sf.weight, 0.0)
                << v.where << " weights path " << sf.path << ", which crosses a dead link";
          }
          sum += sf.weight;
        }
        EXPECT_NEAR(sum, 1.0, 1e-9) << v.where;
      });
  // The sequence reaches the case weights cannot fix (counted, not judged here).
  EXPECT_GT(stranded, 0);
  EXPECT_GT(counts.arrivals, 10);
  EXPECT_GT(counts.failures, 10);
  EXPECT_GT(counts.departures, 5);
}

// Spare subflows: a connection of one subflow leaves a dead path by weights alone. The spare is
// planned on another path with a port of its own, carries nothing while the primary lives, takes
// the whole share when the primary's uplink dies and hands it back when the link returns. Without
// a spare, the same connection keeps its weight on the dead path (the control).
TEST(PlannerTest, AOneSubflowConnectionLeavesADeadPathThroughItsSpare) {
  for (const int spares : {0, 1}) {
    SCOPED_TRACE("spares " + std::to_string(spares));
    Planner p(makeFabric(4));
    addNodes(p, 2, 2);
    JobPlacement job{"ns/j", {node(0, 0), node(1, 0), node(0, 1), node(1, 1)}, 1, 1};
    job.spare_subflows = spares;
    auto planned = p.planJob(job);
    ASSERT_TRUE(planned) << planned.error().toString();
    EXPECT_NEAR(planned->max_link_load, 1.0, 1e-9);  // the spares add no load
    const JobPlan first = *p.plan("ns/j");
    EXPECT_EQ(first.spare_subflows, spares);
    ASSERT_EQ(first.pairs.size(), 4U);
    std::set<std::uint16_t> ports;
    for (const auto& pair : first.pairs) {
      ASSERT_EQ(pair.subflows.size(), static_cast<std::size_t>(1 + spares));
      EXPECT_EQ(pair.subflows[0].weight, 1.0);
      for (const auto& sf : pair.subflows) {
        EXPECT_EQ(p.fabric().pathOfPort(sf.local_port), sf.path);
        EXPECT_TRUE(ports.insert(sf.local_port).second || pair.local_node != node(0, 0));
      }
      if (spares == 1) {
        EXPECT_NE(pair.subflows[1].path, pair.subflows[0].path) << pair.local_node;
        EXPECT_EQ(pair.subflows[1].weight, 0.0);
      }
    }
    const PlannedPair& watched = first.pairs.front();  // n0-0 -> n1-0
    ASSERT_EQ(watched.local_node, node(0, 0));
    const int primary_path = watched.subflows[0].path;
    auto out = p.setLinkState({0, "leaf-0", primary_path}, 0.0);
    ASSERT_TRUE(out);
    const PlannedPair& after = p.plan("ns/j")->pairs.front();
    expectPathsAndPortsKept(first, *p.plan("ns/j"));
    if (spares == 1) {
      EXPECT_EQ(after.subflows[0].weight, 0.0);
      EXPECT_EQ(after.subflows[1].weight, 1.0);
      EXPECT_TRUE(std::find(out->changed.begin(), out->changed.end(), "ns/j") !=
                  out->changed.end());
      EXPECT_NEAR(out->max_link_load, 1.0, 1e-9);  // onto an idle uplink
    } else {
      EXPECT_EQ(after.subflows[0].weight, 1.0);  // stranded: nothing but a new connection helps
      EXPECT_EQ(out->max_link_load, kInf);
    }
    ASSERT_TRUE(p.setLinkState({0, "leaf-0", primary_path}, 1.0));
    EXPECT_EQ(*p.plan("ns/j"), first) << "the link back: the spare idles again";
  }
}

// Spares through a random sequence of arrivals, departures and link failures (6 leaves x 8 nodes,
// 4 uplinks; 1-3 primaries and 1-3 spares, at most 4 subflows per connection): running jobs keep
// every path and port, spares included; a newly planned spare shares no path with its pair's
// other subflows (there are enough paths), and lands on a dead link only when every path its pair
// leaves free is dead; a spare carries weight only while a primary of its pair is on a dead path;
// no subflow on a dead path carries weight while its connection has a live one; and connections
// whose every primary died escape through their spares (counted: the sequence reaches the case).
TEST(PlannerTest, SparesIdleUntilAPrimaryDiesAndConnectionsEscapeThroughThem) {
  constexpr int kUplinks = 4;
  int escaped = 0, stranded = 0;
  const RandomCounts counts = runRandomEvents(
      4594, 160, 4,
      [](JobPlacement& job, const auto& pick) {
        job.subflows_per_connection = pick(1, 3);
        job.spare_subflows = pick(1, kUplinks - job.subflows_per_connection);
      },
      [&](const PairView& v) {
        const auto& subflows = v.pair.subflows;
        const auto k = static_cast<std::size_t>(v.placement.subflows_per_connection);
        ASSERT_EQ(subflows.size(), k + static_cast<std::size_t>(v.placement.spare_subflows));
        std::size_t dead_primaries = 0;
        for (std::size_t i = 0; i < k; ++i) dead_primaries += v.on_dead(subflows[i]) ? 1U : 0U;
        if (v.arrived_now) {
          std::set<int> paths;  // primaries may share one around dead links; spares never do
          for (std::size_t i = 0; i < subflows.size(); ++i) {
            const bool added = paths.insert(subflows[i].path).second;
            if (i >= k) {
              EXPECT_TRUE(added) << v.where << " spare " << i << " shares path "
                                 << subflows[i].path;
            }
          }
          bool free_live = false;
          for (int q = 0; q < kUplinks; ++q)
            free_live = free_live || (!paths.contains(q) && !v.path_dead(q));
          for (std::size_t i = 0; i < subflows.size(); ++i) {
            if (i < k || free_live) {
              EXPECT_FALSE(v.on_dead(subflows[i]))
                  << v.where << " planned subflow " << i << " onto dead path " << subflows[i].path;
            }
          }
        }
        if (std::none_of(subflows.begin(), subflows.end(),
                         [&](const auto& sf) { return !v.on_dead(sf); })) {
          ++stranded;
          return;
        }
        double sum = 0, spare_weight = 0;
        for (std::size_t i = 0; i < subflows.size(); ++i) {
          if (v.on_dead(subflows[i])) {
            EXPECT_EQ(subflows[i].weight, 0.0)
                << v.where << " weights dead path " << subflows[i].path;
          }
          if (i >= k) spare_weight += subflows[i].weight;
          sum += subflows[i].weight;
        }
        EXPECT_NEAR(sum, 1.0, 1e-9) << v.where;
        if (dead_primaries == 0) {
          EXPECT_EQ(spare_weight, 0.0) << v.where << " uses an idle spare";
        }
        if (dead_primaries == k) {
          EXPECT_NEAR(spare_weight, 1.0, 1e-9) << v.where;
          ++escaped;
        }
      });
  EXPECT_GT(escaped, 10) << "connections whose every primary died, carried by their spares";
  EXPECT_GT(counts.arrivals + counts.failures + counts.departures, 100);
  RecordProperty("escaped", escaped);
  RecordProperty("stranded", stranded);
}

// 4 leaves of 4 nodes; ns/a planned on leaves 0 and 1, ns/b on leaves 2 and 3 (4 nodes each, 8
// ranks per node, 4 subflows per connection).
void planTwoJobsApart(Planner& p) {
  addNodes(p, 4, 4);
  JobPlacement a{"ns/a", {}, 8, 4}, b{"ns/b", {}, 8, 4};
  for (int i = 0; i < 4; ++i) {
    a.nodes.push_back(node(i % 2, i / 2));      // leaves 0 and 1
    b.nodes.push_back(node(2 + i % 2, i / 2));  // leaves 2 and 3
  }
  ASSERT_TRUE(p.planJob(a));
  ASSERT_TRUE(p.planJob(b));
}

// A live change re-weights the pairs whose paths cross the changed link and the pairs sharing a
// hot link with them, not every pair: a job on other leaves keeps its plan object untouched and
// is not reported, and the re-weighted pairs are counted.
TEST(PlannerTest, ALinkChangeReweightsOnlyThePairsNearIt) {
  Planner p(makeFabric(4));
  planTwoJobsApart(p);
  const JobPlan b_before = *p.plan("ns/b");
  const std::size_t a_pairs = p.plan("ns/a")->pairs.size();
  auto out = p.setLinkState({0, "leaf-0", 1}, 0.0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->changed, std::vector<std::string>{"ns/a"});
  EXPECT_GT(out->pairs_reweighted, 0U);
  EXPECT_LE(out->pairs_reweighted, a_pairs);
  EXPECT_EQ(*p.plan("ns/b"), b_before);
  // A link no pair uses changes nothing and re-weights nothing.
  auto idle = p.setLinkState({0, "leaf-0", 1}, 0.0);  // the same state again
  ASSERT_TRUE(idle);
  EXPECT_TRUE(idle->changed.empty());
  // The job leaving re-weights no pair of the other (nothing it shared was hot).
  const PlanOutcome gone = p.removeJob("ns/a");
  EXPECT_TRUE(gone.changed.empty());
  EXPECT_EQ(gone.pairs_reweighted, 0U);
  EXPECT_EQ(*p.plan("ns/b"), b_before);
}

// Every change also re-weights the pairs on hot links anywhere (within the bound), but a job whose
// links are hot for good (every uplink of its leaf at half capacity) gets the same weights again:
// a link change under another job leaves its plan as it was and reports only that other job.
TEST(PlannerTest, AFarChangeLeavesAPersistentlyHotJobsPlanAsItWas) {
  Planner p(makeFabric(4, {{0, 0, 0.5}, {0, 1, 0.5}, {0, 2, 0.5}, {0, 3, 0.25}}));
  planTwoJobsApart(p);
  ASSERT_GT(p.maxLinkLoad(), 1.0);
  const JobPlan a_before = *p.plan("ns/a");
  auto out = p.setLinkState({0, "leaf-2", 1}, 0.0);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->changed, std::vector<std::string>{"ns/b"});
  EXPECT_GT(out->pairs_reweighted, p.plan("ns/b")->pairs.size()) << "a's hot pairs taken too";
  EXPECT_EQ(*p.plan("ns/a"), a_before);
}

// Changes (jobs arriving and leaving, links failing, halving and coming back) re-weight only the
// pairs near them, yet end at the maximum link load a re-weighting of every pair reaches: over a
// random sequence of 300 events (seed `seed`; with `spares`, 0 to 4 - k spare subflows per
// connection), within 1e-3 of it after every change (the rounding of the weights); summed over the
// changes, they touch fewer pairs than there are.
void expectChangesReachAFullReweighting(std::uint64_t seed, bool spares) {
  constexpr int kLeaves = 8, kPerLeaf = 8, kUplinks = 4;
  Planner p(makeFabric(kUplinks));
  addNodes(p, kLeaves, kPerLeaf);
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::string> free_nodes;
  for (int l = 0; l < kLeaves; ++l) {
    for (int i = 0; i < kPerLeaf; ++i) free_nodes.push_back(node(l, i));
  }
  std::map<std::string, JobPlacement> running;
  std::set<std::pair<int, int>> dead;
  int next_job = 0, changes = 0;
  std::size_t touched = 0, pairs_then = 0;
  for (int event = 0; event < 300; ++event) {
    const int kind = pick(0, 9);
    std::optional<PlanOutcome> out;
    if (kind < 4 && free_nodes.size() >= 4) {
      std::shuffle(free_nodes.begin(), free_nodes.end(), rng);
      const int n = std::min<int>(pick(4, 16), static_cast<int>(free_nodes.size()));
      JobPlacement job{"job-" + std::to_string(next_job++),
                       {free_nodes.end() - n, free_nodes.end()},
                       1,
                       pick(1, 4)};
      if (spares) job.spare_subflows = pick(0, kUplinks - job.subflows_per_connection);
      free_nodes.resize(free_nodes.size() - static_cast<std::size_t>(n));
      auto r = p.planJob(job);
      ASSERT_TRUE(r);
      out = *r;
      running[job.job] = job;
    } else if (kind < 8) {
      const std::pair<int, int> link{pick(0, kLeaves - 1), pick(0, kUplinks - 1)};
      const bool revive = dead.contains(link);
      if (!revive && dead.size() >= 4) continue;
      auto r = p.setLinkState({0, "leaf-" + std::to_string(link.first), link.second},
                              revive ? 1.0 : pick(0, 1) * 0.5);
      ASSERT_TRUE(r);
      out = *r;
      if (revive) {
        dead.erase(link);
      } else {
        dead.insert(link);
      }
    } else if (!running.empty()) {
      auto it = running.begin();
      std::advance(it, pick(0, static_cast<int>(running.size()) - 1));
      free_nodes.insert(free_nodes.end(), it->second.nodes.begin(), it->second.nodes.end());
      out = p.removeJob(it->first);
      running.erase(it);
    } else {
      continue;
    }
    std::size_t pairs = 0;
    for (const auto& name : p.jobs()) pairs += p.plan(name)->pairs.size();
    Planner every = p;
    every.rebalance();
    ++changes;
    touched += out->pairs_reweighted;
    pairs_then += pairs;
    EXPECT_LE(p.maxLinkLoad(), every.maxLinkLoad() + 1e-3)
        << "event " << event << " kind " << kind << " reweighted " << out->pairs_reweighted
        << " of " << pairs;
  }
  ASSERT_GT(changes, 100);
  EXPECT_LT(touched, pairs_then) << "every change re-weighted every pair";
}

// (Seeds 1-16 and 2593 pass as well.)
TEST(PlannerTest, ChangesReweightNearbyPairsAndReachTheLoadOfAFullReweighting) {
  expectChangesReachAFullReweighting(6, false);
}

// With spare subflows in the mix. These sequences caught two gaps in the rules. Seed 1: a
// departure or a cooled link left alone a pair that sat on a hot link and could now lean onto the
// cooled one (it was neither leaning nor on a hot link of the set): 1.5 against 1.001. Seeds 15
// and 34: room freed by a change reached a hot pair only through a chain of pairs (the hot pair
// leans onto a link whose pairs lean onto the freed one), so no rule took it; every pair on a hot
// link of the fabric is now taken after the change's own (1.6667 against 1.501 for seed 15).
TEST(PlannerTest, ChangesWithSparesReachTheLoadOfAFullReweighting) {
  for (std::uint64_t seed : {1U, 15U, 34U}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    expectChangesReachAFullReweighting(seed, true);
  }
}

TEST(PlannerTest, DeterministicForEqualInputs) {
  auto run = [] {
    Planner p(makeFabric(8, {{2, 3, 0.5}}));
    addNodes(p, 6, 8);
    std::mt19937_64 rng(42);
    std::vector<std::string> nodes;
    for (int l = 0; l < 6; ++l) {
      for (int i = 0; i < 8; ++i) nodes.push_back(node(l, i));
    }
    std::shuffle(nodes.begin(), nodes.end(), rng);
    EXPECT_TRUE(p.planJob({"x", {nodes.begin(), nodes.begin() + 20}, 8, 4}));
    EXPECT_TRUE(p.planJob({"y", {nodes.begin() + 20, nodes.end()}, 8, 3}));
    return std::make_pair(*p.plan("x"), *p.plan("y"));
  };
  EXPECT_EQ(run(), run());
}

// A new description keeps telemetry and the paths and ports of live connections; only weights
// follow the new capacities.
TEST(PlannerTest, NewFabricDescriptionKeepsPathsAndTelemetry) {
  Planner p(makeFabric(4));
  addNodes(p, 2, 4);
  JobPlacement job{"j", {}, 1, 4};
  for (int i = 0; i < 4; ++i) {
    for (int l = 0; l < 2; ++l) job.nodes.push_back(node(l, i));
  }
  ASSERT_TRUE(p.planJob(job));
  JobPlan before = *p.plan("j");
  ASSERT_TRUE(p.setLinkState({0, "leaf-1", 3}, 0.0));
  auto out = p.setFabric(makeFabric(4, {{0, 0, 0.5}}));
  ASSERT_TRUE(out) << out.error().toString();
  EXPECT_DOUBLE_EQ(p.fabric().capacityFraction(0, "leaf-1", 3, Direction::kUp), 0.0);
  EXPECT_DOUBLE_EQ(p.fabric().capacityFraction(0, "leaf-0", 0, Direction::kUp), 0.5);
  const JobPlan& after = *p.plan("j");
  expectPathsAndPortsKept(before, after);
  for (const auto& pair : after.pairs) {
    for (const auto& sf : pair.subflows) {
      if (sf.path == 3) {
        EXPECT_EQ(sf.weight, 0.0);
      }
    }
  }
  EXPECT_TRUE(std::isfinite(p.maxLinkLoad()));
}

// A job inside one leaf uses no uplink: no pairs, but the planes of its nodes are named.
TEST(PlannerTest, JobInsideOneLeafHasNoPairs) {
  Planner p(makeFabric(2));
  addNodes(p, 1, 3);
  auto out = p.planJob({"j", {node(0, 0), node(0, 1), node(0, 2)}, 8, 4});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->changed, std::vector<std::string>{"j"});
  EXPECT_TRUE(p.plan("j")->pairs.empty());
  EXPECT_EQ(p.plan("j")->planes.size(), 3u);
  EXPECT_EQ(p.maxLinkLoad(), 0.0);
  EXPECT_TRUE(p.linkLoads().empty());
}

// Planes are separate networks: leaves of the same name in two planes share no link.
TEST(PlannerTest, PlanesDoNotShareLinks) {
  FabricSpec spec;
  spec.planes = 2;
  spec.spines = 1;
  spec.uplinks_per_leaf = 1;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  Planner p(*Fabric::fromSpec(spec));
  for (int plane : {0, 1}) {
    for (int l : {0, 1}) {
      ASSERT_TRUE(p.setNode(
          "p" + std::to_string(plane) + "-" + std::to_string(l),
          {{"c4.dev/leaf", "leaf-" + std::to_string(l)}, {"c4.dev/plane", std::to_string(plane)}}));
    }
  }
  ASSERT_TRUE(p.planJob({"a", {"p0-0", "p0-1"}, 1, 1}));
  ASSERT_TRUE(p.planJob({"b", {"p1-0", "p1-1"}, 1, 1}));
  EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 1.0);  // 2.0 if the planes shared the one uplink
  auto loads = p.linkLoads();
  ASSERT_EQ(loads.size(), 8u);  // 2 planes × 2 leaves × (up, down)
  for (const auto& l : loads) EXPECT_DOUBLE_EQ(l.load, 1.0);
  EXPECT_EQ(p.plan("b")->planes, (std::map<std::string, int>{{"p1-0", 1}, {"p1-1", 1}}));
  EXPECT_EQ(p.plan("b")->pairs[0].plane, 1);
}

// ---- Three tiers: pods, spines with core uplinks, paths across pods ----

struct Tier3Shape {
  int pods = 2;
  int leaves_per_pod = 1;
  int per_leaf = 1;
  int spines = 1;
  int uplinks = 1;
  int core_uplinks = 1;
  double core_speed = 100;
};

std::string podName(int pod) {
  return "pod-" + std::to_string(pod);
}
std::string leafName3(int pod, int leaf) {
  return "leaf-" + std::to_string(pod) + "-" + std::to_string(leaf);
}
std::string node3(int pod, int leaf, int i) {
  return "q" + std::to_string(pod) + "l" + std::to_string(leaf) + "n" + std::to_string(i);
}

Fabric makeFabric3(const Tier3Shape& t, const std::vector<LinkState>& links = {}) {
  FabricSpec spec;
  spec.spines = t.spines;
  spec.uplinks_per_leaf = t.uplinks;
  spec.uplink_speed_gbps = 100;
  spec.host_link_speed_gbps = 100;
  spec.core_uplinks_per_spine = t.core_uplinks;
  spec.core_uplink_speed_gbps = t.core_uplinks > 0 ? t.core_speed : 0;
  spec.links = links;
  auto f = Fabric::fromSpec(spec);
  EXPECT_TRUE(f) << f.error().toString();
  return *f;
}

// Registers every node of the shape with the planner; returns where each one is.
std::map<std::string, NodeLocation> addNodes3(Planner& p, const Tier3Shape& t) {
  std::map<std::string, NodeLocation> where;
  for (int q = 0; q < t.pods; ++q) {
    for (int l = 0; l < t.leaves_per_pod; ++l) {
      for (int i = 0; i < t.per_leaf; ++i) {
        EXPECT_TRUE(p.setNode(node3(q, l, i),
                              {{"c4.dev/leaf", leafName3(q, l)}, {"c4.dev/pod", podName(q)}}));
        where[node3(q, l, i)] = NodeLocation{0, leafName3(q, l), podName(q)};
      }
    }
  }
  return where;
}

// An independent evaluation through Fabric::pathLinks: per subflow and path, the dense ids of the
// link directions it uses; capacities per id.
struct PathTable {
  std::vector<double> cap;
  std::vector<std::vector<std::vector<int>>> links;  // subflow -> path -> link ids
};

PathTable pathTable(const Fabric& f, const std::vector<PathSub>& subs) {
  PathTable t;
  std::map<std::pair<LinkRef, Direction>, int> id;
  for (const auto& s : subs) {
    std::vector<std::vector<int>> per_path;
    for (int path = 0; path < f.pathCount(s.src, s.dst); ++path) {
      auto hops = f.pathLinks(s.src, s.dst, path);
      EXPECT_TRUE(hops);
      std::vector<int> ids;
      for (const auto& hop : *hops) {
        auto [it, added] = id.emplace(hop, static_cast<int>(t.cap.size()));
        if (added) t.cap.push_back(f.capacityGbps(hop.first, hop.second));
        ids.push_back(it->second);
      }
      per_path.push_back(std::move(ids));
    }
    t.links.push_back(std::move(per_path));
  }
  return t;
}

double maxLoadOf(const PathTable& t, const std::vector<PathSub>& subs,
                 const std::vector<int>& paths, bool weighted) {
  std::vector<double> used(t.cap.size(), 0.0);
  for (std::size_t i = 0; i < subs.size(); ++i) {
    double w = weighted ? subs[i].weight : 1.0 / subs[i].subflows;
    for (int l : t.links[i][static_cast<std::size_t>(paths[i])]) {
      used[static_cast<std::size_t>(l)] += subs[i].demand * w;
    }
  }
  double m = 0;
  for (std::size_t l = 0; l < used.size(); ++l) {
    m = std::max(m, t.cap[l] <= 0 ? (used[l] > 1e-12 ? kInf : 0.0) : used[l] / t.cap[l]);
  }
  return m;
}

// The optimum over every assignment of paths (each subflow over its pair's paths, equal weights).
// The optimum over every path of subs[fixed..], the paths of subs[0..fixed) as in `planned`.
double bruteForcePaths(const PathTable& t, const std::vector<PathSub>& subs,
                       std::vector<int> planned = {}, std::size_t fixed = 0) {
  std::vector<int> paths = std::move(planned);
  paths.resize(subs.size(), 0);
  for (std::size_t i = fixed; i < paths.size(); ++i) paths[i] = 0;
  double best = kInf;
  while (true) {
    best = std::min(best, maxLoadOf(t, subs, paths, false));
    std::size_t i = fixed;
    while (i < paths.size() && ++paths[i] == static_cast<int>(t.links[i].size())) paths[i++] = 0;
    if (i == paths.size()) break;
  }
  return best;
}

struct Instance3 {
  Tier3Shape shape;
  std::vector<LinkState> links;
  std::vector<JobPlacement> jobs;
};

std::string describe3(const Instance3& in) {
  const auto& t = in.shape;
  std::string s = "pods=" + std::to_string(t.pods) + " L=" + std::to_string(t.leaves_per_pod) +
                  " H=" + std::to_string(t.per_leaf) + " S=" + std::to_string(t.spines) +
                  " U=" + std::to_string(t.uplinks) + " C=" + std::to_string(t.core_uplinks) +
                  " core=" + std::to_string(t.core_speed);
  for (const auto& l : in.links) {
    // Appended piece by piece: GCC 12 misreads `" " + string` here as an overlapping copy.
    s.append(" ").append(linkName(l.link)).append("=").append(std::to_string(l.capacity_fraction));
  }
  return s + describeJobs(in.jobs);
}

// Random tiny three-tier instances: 2 pods of 1–2 leaves, 1–2 nodes per leaf, S = 1–2,
// U = S or 2S, C = 1–2, core links of the leaf links' speed or twice it, one or two jobs (healthy:
// of equal subflow counts), and (unless healthy) a failed or half-capacity leaf or spine–core
// link. Every instance has a pair across pods and at most 2·10⁴ path assignments.
std::vector<Instance3> randomInstances3(int count, bool healthy, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Instance3> out;
  while (static_cast<int>(out.size()) < count) {
    Instance3 in;
    Tier3Shape& t = in.shape;
    t.pods = 2;
    t.leaves_per_pod = pick(1, 2);
    t.per_leaf = pick(1, 2);
    t.spines = pick(1, 2);
    t.uplinks = t.spines * pick(1, 2);
    t.core_uplinks = pick(1, 2);
    t.core_speed = pick(0, 2) == 0 ? 200 : 100;
    std::map<std::string, NodeLocation> where;
    std::vector<std::string> nodes;
    for (int q = 0; q < t.pods; ++q) {
      for (int l = 0; l < t.leaves_per_pod; ++l) {
        for (int i = 0; i < t.per_leaf; ++i) {
          nodes.push_back(node3(q, l, i));
          where[node3(q, l, i)] = NodeLocation{0, leafName3(q, l), podName(q)};
        }
      }
    }
    in.jobs = randomJobs(std::move(nodes), healthy, rng);
    if (!healthy) {
      int kind = pick(0, 4);  // none, failed leaf link, half leaf link, failed core, half core
      LinkState st;
      st.capacity_fraction = kind % 2 == 1 ? 0.0 : 0.5;
      if (kind == 1 || kind == 2) {
        st.link = LinkRef{0, leafName3(pick(0, t.pods - 1), pick(0, t.leaves_per_pod - 1)),
                          pick(0, t.uplinks - 1)};
      } else if (kind > 2) {
        st.link = LinkRef::spineTier(0, podName(pick(0, t.pods - 1)), pick(0, t.spines - 1),
                                     pick(0, t.core_uplinks - 1));
      }
      if (pick(0, 2) == 0) st.direction = pick(0, 1) == 0 ? Direction::kUp : Direction::kDown;
      if (kind > 0) in.links.push_back(st);
    }
    bool across = false;
    double assignments = 1;
    for (const auto& j : in.jobs) {
      auto conns = jobConnections(j);
      for (const auto& c : *conns) {
        const auto& a = where.at(c.src);
        const auto& b = where.at(c.dst);
        if (a.leaf == b.leaf) continue;
        across = across || a.pod != b.pod;
        int paths = a.pod != b.pod ? t.uplinks * t.core_uplinks : t.uplinks;
        for (int k = 0; k < j.subflows_per_connection; ++k) assignments *= paths;
      }
    }
    if (!across || assignments > 2e4) continue;
    out.push_back(std::move(in));
  }
  return out;
}

bool sameLoad(double a, double b, double tolerance) {
  return a == b || std::fabs(a - b) < tolerance;  // equal infinities: every path of a pair dead
}

// Compares the planner's integer plan with the exhaustive optimum over every path assignment
// (paths across pods use 4 link directions, inside a pod 2): counts the instances where they are
// equal, and checks that the plan is never above 1.5 × the optimum, that weights only lower the
// maximum and that the planner reports the load the links carry.
void checkOptimal3(const std::vector<Instance3>& instances, int* optimal, int* total) {
  for (const auto& in : instances) {
    Fabric f = makeFabric3(in.shape, in.links);
    Planner p(f);
    auto where = addNodes3(p, in.shape);
    bool all_optimal = true;
    std::size_t fixed = 0;
    for (std::size_t j = 0; j < in.jobs.size(); ++j) {
      auto out = p.planJob(in.jobs[j]);
      ASSERT_TRUE(out) << describe3(in) << ": " << out.error().toString();
      // Each job against the optimum around the ones planned before it (whose paths stay).
      std::vector<JobPlacement> so_far(in.jobs.begin(), in.jobs.begin() + static_cast<long>(j) + 1);
      auto subs = pathSubflowsOf(p, so_far, where, 100);
      auto table = pathTable(f, subs);
      std::vector<int> paths;
      for (std::size_t i = 0; i < subs.size(); ++i) {
        ASSERT_GE(subs[i].path, 0);
        ASSERT_LT(subs[i].path, f.pathCount(subs[i].src, subs[i].dst)) << describe3(in);
        paths.push_back(subs[i].path);
      }
      double planned = maxLoadOf(table, subs, paths, false);
      double best = bruteForcePaths(table, subs, paths, fixed);
      all_optimal = all_optimal && sameLoad(planned, best, 1e-9);
      EXPECT_LE(planned, 1.5 * best + 1e-9) << describe3(in) << " (job " << j << ")";
      double weighted = maxLoadOf(table, subs, paths, true);
      EXPECT_LE(weighted, planned + 1e-3) << describe3(in);
      EXPECT_TRUE(sameLoad(p.maxLinkLoad(), weighted, 1e-3))
          << describe3(in) << ": reported " << p.maxLinkLoad() << ", carried " << weighted;
      fixed = subs.size();
    }
    ++*total;
    if (all_optimal) ++*optimal;
  }
}

// Equal demands on healthy links (the case tier 1 solves inside a pod): with pairs across pods the
// general method reaches the optimum on every instance (also on 3000 of this kind).
TEST(PlannerTest, ThreeTierOptimalOnTinyHealthyFabricsExhaustively) {
  int optimal = 0, total = 0;
  checkOptimal3(randomInstances3(300, /*healthy=*/true, 11), &optimal, &total);
  EXPECT_EQ(total, 300);
  EXPECT_EQ(optimal, total);
}

// Failed and degraded links of both tiers, jobs of unequal demand, a second job planned around
// the first. The general method is a heuristic: on 4000 instances of this kind (these 400 and
// more of the same seed) it reaches the optimum around the first job on all of them; it must reach
// it on 99 % of them.
TEST(PlannerTest, ThreeTierOptimalOnTinyFabricsWithFailuresExhaustively) {
  auto instances = randomInstances3(400, /*healthy=*/false, 12);
  int leaf_failed = 0, leaf_half = 0, core_failed = 0, core_half = 0, two_jobs = 0, mixed = 0;
  for (const auto& in : instances) {
    for (const auto& l : in.links) {
      bool dead = l.capacity_fraction == 0;
      (l.link.isSpineTier() ? (dead ? core_failed : core_half)
                            : (dead ? leaf_failed : leaf_half)) += 1;
    }
    if (in.jobs.size() == 2) {
      ++two_jobs;
      mixed += in.jobs[0].subflows_per_connection != in.jobs[1].subflows_per_connection ? 1 : 0;
    }
  }
  // The set covers dead and half-capacity links of both tiers and a second job planned around
  // the first.
  EXPECT_GT(leaf_failed, 50);
  EXPECT_GT(leaf_half, 50);
  EXPECT_GT(core_failed, 50);
  EXPECT_GT(core_half, 50);
  EXPECT_GT(two_jobs, 60);
  EXPECT_GT(mixed, 30);
  int optimal = 0, total = 0;
  checkOptimal3(instances, &optimal, &total);
  EXPECT_EQ(total, 400);
  EXPECT_GE(optimal, total * 99 / 100);
}

// A ring over both pods: every node's successor is in the other pod (pod 0, pod 1, pod 0, ...).
JobPlacement acrossPods(const std::string& job, const Tier3Shape& t, int subflows,
                        bool both_directions = false) {
  JobPlacement j{job, {}, 1, subflows, both_directions};
  for (int l = 0; l < t.leaves_per_pod; ++l) {
    for (int i = 0; i < t.per_leaf; ++i) {
      for (int q = 0; q < t.pods; ++q) j.nodes.push_back(node3(q, l, i));
    }
  }
  return j;
}

bool pathUses(const Fabric& f, const NodeLocation& src, const NodeLocation& dst, int path,
              const LinkRef& link) {
  auto hops = f.pathLinks(src, dst, path);
  EXPECT_TRUE(hops);
  return std::any_of(hops->begin(), hops->end(), [&](const auto& h) { return h.first == link; });
}

// Pairs inside a pod of a three-tier fabric are planned as on two tiers: edge colouring, leaf
// uplinks only; a pair across pods loads its spine's core uplinks, and linkLoads lists them.
TEST(PlannerTest, ThreeTierPairsInsideAPodAreColouredAndPairsAcrossPodsLoadCoreLinks) {
  Tier3Shape t{2, 2, 2, 2, 4, 2, 100};
  Fabric f = makeFabric3(t);
  Planner p(f);
  auto where = addNodes3(p, t);
  JobPlacement inside{"inside", {}, 1, 4};
  for (int i = 0; i < 2; ++i) {
    for (int l = 0; l < 2; ++l) inside.nodes.push_back(node3(0, l, i));
  }
  auto out = p.planJob(inside);
  ASSERT_TRUE(out) << out.error().toString();
  EXPECT_EQ(out->tier1_planes, 1);
  for (const auto& pair : p.plan("inside")->pairs) {
    for (const auto& s : pair.subflows) EXPECT_LT(s.path, t.uplinks);
  }
  for (const auto& l : p.linkLoads()) EXPECT_FALSE(l.link.isSpineTier()) << linkName(l.link);
  // Each of pod 0's leaves sends 2 connections of 4 subflows over 4 uplinks: one per link.
  EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 0.5);

  JobPlacement across{"across", {}, 1, 4};
  for (int i = 0; i < 2; ++i) {
    for (int q = 0; q < 2; ++q) across.nodes.push_back(node3(q, 1, i));
  }
  out = p.planJob(across);
  ASSERT_TRUE(out) << out.error().toString();
  EXPECT_EQ(out->tier1_planes, 0);
  // What the spine–core links carry, per pod and direction, from the plan and pathLinks.
  std::map<std::pair<std::string, Direction>, double> expected;
  bool high_path = false;
  for (const auto& pair : p.plan("across")->pairs) {
    const auto& a = where.at(pair.local_node);
    const auto& b = where.at(pair.peer_node);
    for (const auto& s : pair.subflows) {
      ASSERT_LT(s.path, f.pathCount(a, b));
      if (a.pod == b.pod) continue;
      high_path = high_path || s.path >= t.uplinks;
      auto links = f.pathLinks(a, b, s.path);
      ASSERT_TRUE(links) << links.error().toString();
      for (const auto& [ref, dir] : *links) {
        if (ref.isSpineTier()) expected[{ref.pod, dir}] += 100 * s.weight;
      }
    }
  }
  EXPECT_TRUE(high_path) << "pairs across pods use the core uplinks beyond the first";
  std::map<std::pair<std::string, Direction>, double> listed;
  for (const auto& l : p.linkLoads()) {
    if (!l.link.isSpineTier()) continue;
    EXPECT_DOUBLE_EQ(l.capacity_gbps, 100);
    EXPECT_NEAR(l.load, l.carried_gbps / 100, 1e-12);
    listed[{l.link.pod, l.direction}] += l.carried_gbps;
  }
  ASSERT_EQ(listed.size(), 4u);  // both pods, up and down
  for (const auto& [k, v] : expected) EXPECT_NEAR(listed[k], v, 1e-6);
  // Pod 0 sends two 100 Gbps connections to pod 1: 200 Gbps over its 4 core uplinks.
  EXPECT_NEAR((listed[{podName(0), Direction::kUp}]), 200, 1e-6);
}

// A rearrangeably non-blocking three-tier Clos (as many core uplinks per spine as leaves per pod,
// all links at the host speed) carries any ring at the host rate, a load of 1: the two-level
// colouring (leaf uplinks over the leaves' bipartite multigraph, then each spine's core uplinks
// over the pods' multigraph of the subflows through it) reaches that optimum. Random placements
// of 256, 1,024 and 4,096 hosts with 1 subflow per connection, and 256 with 4. Before the
// colouring, the local search ended at 2.0 on each one-subflow placement (1.0 with 4 subflows).
TEST(PlannerTest, ThreeTierNonBlockingClosCarriesAnyRingAtTheHostRate) {
  for (const auto& [pods, leaves, subflows, seed] :
       {std::tuple{4, 8, 1, 1}, std::tuple{4, 8, 1, 2}, std::tuple{4, 8, 4, 3},
        std::tuple{8, 16, 1, 4}, std::tuple{16, 32, 1, 5}}) {
    SCOPED_TRACE("pods " + std::to_string(pods) + ", subflows " + std::to_string(subflows) +
                 ", seed " + std::to_string(seed));
    Tier3Shape t{pods, leaves, 8, 8, 8, leaves, 100};
    Planner p(makeFabric3(t));
    auto where = addNodes3(p, t);
    JobPlacement job{"ring", {}, 1, subflows};
    for (const auto& [name, _] : where) job.nodes.push_back(name);
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    std::shuffle(job.nodes.begin(), job.nodes.end(), rng);
    auto out = p.planJob(job);
    ASSERT_TRUE(out) << out.error().toString();
    EXPECT_EQ(out->tier1_planes, 1);
    EXPECT_NEAR(out->max_link_load, 1.0, 1e-9);
  }
}

// A spine–core link that fails under a running job carries nothing: paths and ports stay, the
// subflows whose path crosses it get weight 0, their siblings take the bytes; planned with the
// failure known, no path crosses it.
TEST(PlannerTest, ThreeTierFailedCoreLinkCarriesNothing) {
  Tier3Shape t{2, 2, 2, 2, 2, 2, 100};
  Fabric f = makeFabric3(t);
  Planner p(f);
  auto where = addNodes3(p, t);
  JobPlacement job = acrossPods("j", t, 4);
  ASSERT_TRUE(p.planJob(job));
  const JobPlan before = *p.plan("j");
  const LinkRef dead = LinkRef::spineTier(0, podName(0), 1, 1);
  double carried = 0;
  for (const auto& l : p.linkLoads()) carried += l.link == dead ? l.carried_gbps : 0;
  ASSERT_GT(carried, 0) << "the link to fail carries part of the plan";
  auto out = p.setLinkState(dead, 0.0);
  ASSERT_TRUE(out) << out.error().toString();
  EXPECT_EQ(out->changed, std::vector<std::string>{"j"});
  const JobPlan& after = *p.plan("j");
  ASSERT_EQ(after.pairs.size(), before.pairs.size());
  int zeroed = 0;
  for (std::size_t i = 0; i < after.pairs.size(); ++i) {
    const auto& a = after.pairs[i];
    double sum = 0;
    for (std::size_t j = 0; j < a.subflows.size(); ++j) {
      EXPECT_EQ(a.subflows[j].path, before.pairs[i].subflows[j].path);
      EXPECT_EQ(a.subflows[j].local_port, before.pairs[i].subflows[j].local_port);
      sum += a.subflows[j].weight;
      if (pathUses(f, where.at(a.local_node), where.at(a.peer_node), a.subflows[j].path, dead)) {
        EXPECT_EQ(a.subflows[j].weight, 0.0);
        ++zeroed;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  EXPECT_GT(zeroed, 0);
  for (const auto& l : p.linkLoads()) EXPECT_FALSE(l.link == dead) << "the dead link carries";
  EXPECT_TRUE(std::isfinite(p.maxLinkLoad()));

  // Planned with the link failed from the start: no subflow is on it.
  FabricSpec spec = f.spec();
  LinkState st;
  st.link = dead;
  st.capacity_fraction = 0;
  spec.links.push_back(st);
  Fabric broken = *Fabric::fromSpec(spec);
  Planner fresh(broken);
  addNodes3(fresh, t);
  ASSERT_TRUE(fresh.planJob(job));
  for (const auto& pair : fresh.plan("j")->pairs) {
    for (const auto& s : pair.subflows) {
      EXPECT_FALSE(
          pathUses(broken, where.at(pair.local_node), where.at(pair.peer_node), s.path, dead));
    }
  }
  EXPECT_TRUE(std::isfinite(fresh.maxLinkLoad()));
}

// Ports select the planned path of the pair (Fabric::pathOfPortFor), for both rules, and stay
// distinct per source node.
TEST(PlannerTest, ThreeTierPortsSelectThePlannedPath) {
  Tier3Shape t{2, 2, 1, 2, 2, 2, 100};
  for (bool table : {false, true}) {
    FabricSpec spec = makeFabric3(t).spec();
    if (table) {
      spec.rule = PathRule::kTable;
      // Two ports per path id in [0, U·C), out of order.
      for (int id = 0; id < t.uplinks * t.core_uplinks; ++id) {
        spec.port_table[static_cast<std::uint16_t>(41100 - 3 * id)] = id;
        spec.port_table[static_cast<std::uint16_t>(41200 + 5 * id)] = id;
      }
    } else {
      spec.port_base = 3;
    }
    auto f = Fabric::fromSpec(spec);
    ASSERT_TRUE(f) << f.error().toString();
    PlannerOptions o;
    o.port_first = 41000;
    o.port_last = 41999;
    Planner p(*f, o);
    auto where = addNodes3(p, t);
    JobPlacement job = acrossPods("j", t, 2, /*both_directions=*/true);
    JobPlacement inside{"inside", {node3(0, 0, 0), node3(0, 1, 0)}, 1, 2};
    ASSERT_TRUE(p.planJob(job));
    ASSERT_TRUE(p.planJob(inside));
    std::map<std::string, std::set<int>> ports;
    int across = 0;
    for (const auto* plan : {p.plan("j"), p.plan("inside")}) {
      for (const auto& pair : plan->pairs) {
        const auto& a = where.at(pair.local_node);
        const auto& b = where.at(pair.peer_node);
        across += a.pod != b.pod ? 1 : 0;
        for (const auto& s : pair.subflows) {
          EXPECT_EQ(f->pathOfPortFor(s.local_port, a, b), s.path)
              << "table=" << table << " port " << s.local_port;
          EXPECT_TRUE(ports[pair.local_node].insert(s.local_port).second)
              << "port " << s.local_port << " twice on " << pair.local_node;
        }
      }
    }
    EXPECT_GT(across, 0);
  }
}

// A job that connects pods of a plane without core uplinks is refused and changes nothing; so is
// one whose nodes put one leaf in two pods.
TEST(PlannerTest, ThreeTierJobAcrossUnconnectedPodsIsRefused) {
  Tier3Shape t{2, 2, 1, 2, 2, 0, 0};
  Planner p(makeFabric3(t));
  addNodes3(p, t);
  ASSERT_TRUE(p.planJob({"a", {node3(0, 0, 0), node3(0, 1, 0)}, 1, 2}));
  const JobPlan a = *p.plan("a");
  const double load = p.maxLinkLoad();
  auto r = p.planJob({"b", {node3(1, 0, 0), node3(0, 0, 0)}, 1, 2});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("\"pod-0\""), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("\"pod-1\""), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("coreUplinksPerSpine is 0"), std::string::npos);
  // Re-planning "a" across the pods is refused too and keeps its plan.
  ASSERT_FALSE(p.planJob({"a", {node3(0, 0, 0), node3(1, 1, 0)}, 1, 2}));
  ASSERT_TRUE(p.setNode("stray", {{"c4.dev/leaf", leafName3(0, 1)}, {"c4.dev/pod", podName(1)}}));
  auto two_pods = p.planJob({"c", {node3(0, 0, 0), node3(0, 1, 0), "stray"}, 1, 1});
  ASSERT_FALSE(two_pods);
  EXPECT_NE(two_pods.error().message.find("a leaf belongs to one pod"), std::string::npos)
      << two_pods.error().message;
  EXPECT_EQ(p.jobs(), std::vector<std::string>{"a"});
  EXPECT_EQ(*p.plan("a"), a);
  EXPECT_EQ(p.maxLinkLoad(), load);
}

// A new description that drops paths a pair across pods uses (fewer core uplinks) or stops
// connecting its pods is refused and changes nothing; one that keeps them is taken, paths kept.
TEST(PlannerTest, ThreeTierNewFabricMustKeepThePathsAcrossPods) {
  Tier3Shape t{2, 1, 2, 1, 2, 2, 100};
  Planner p(makeFabric3(t));
  addNodes3(p, t);
  ASSERT_TRUE(p.planJob(acrossPods("j", t, 4)));
  const JobPlan before = *p.plan("j");
  int highest = 0;
  for (const auto& pair : before.pairs) {
    for (const auto& s : pair.subflows) highest = std::max(highest, s.path);
  }
  ASSERT_GE(highest, t.uplinks) << "4 subflows over U = 2: core uplink 1 is in use";

  Tier3Shape fewer = t;
  fewer.core_uplinks = 1;
  auto r = p.setFabric(makeFabric3(fewer));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.error().message.find("between pods"), std::string::npos) << r.error().message;
  Tier3Shape two_tiers = t;
  two_tiers.core_uplinks = 0;
  r = p.setFabric(makeFabric3(two_tiers));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not connect"), std::string::npos) << r.error().message;
  EXPECT_EQ(p.fabric().coreUplinksPerSpine(), 2);
  EXPECT_EQ(*p.plan("j"), before);

  LinkState half;
  half.link = LinkRef::spineTier(0, podName(1), 0, 0);
  half.capacity_fraction = 0.5;
  auto ok = p.setFabric(makeFabric3(t, {half}));
  ASSERT_TRUE(ok) << ok.error().toString();
  EXPECT_DOUBLE_EQ(p.fabric().capacityGbps(half.link, Direction::kUp), 50);
  expectPathsAndPortsKept(before, *p.plan("j"));
}

TEST(PlannerTest, ThreeTierDeterministicForEqualInputs) {
  auto run = [] {
    Tier3Shape t{3, 2, 4, 2, 4, 2, 200};
    LinkState st;
    st.link = LinkRef::spineTier(0, podName(2), 1, 0);
    st.capacity_fraction = 0.5;
    Planner p(makeFabric3(t, {st}));
    addNodes3(p, t);
    std::vector<std::string> nodes;
    for (int q = 0; q < 3; ++q) {
      for (int l = 0; l < 2; ++l) {
        for (int i = 0; i < 4; ++i) nodes.push_back(node3(q, l, i));
      }
    }
    std::mt19937_64 rng(5);
    std::shuffle(nodes.begin(), nodes.end(), rng);
    EXPECT_TRUE(p.planJob({"x", {nodes.begin(), nodes.begin() + 10}, 8, 4}));
    EXPECT_TRUE(p.planJob({"y", {nodes.begin() + 10, nodes.end()}, 8, 3}));
    return std::make_pair(*p.plan("x"), *p.plan("y"));
  };
  EXPECT_EQ(run(), run());
}

TEST(PlannerTest, ModesParse) {
  EXPECT_EQ(parseMode("Off"), Mode::kOff);
  EXPECT_EQ(parseMode("Advisory"), Mode::kAdvisory);
  EXPECT_EQ(parseMode("Enforce"), Mode::kEnforce);
  auto bad = parseMode("enforce");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "trafficPlanning.mode: \"enforce\" is not one of Off, Advisory, Enforce");
  for (Mode m : {Mode::kOff, Mode::kAdvisory, Mode::kEnforce}) EXPECT_EQ(parseMode(modeName(m)), m);
}

TEST(PlannerTest, LinkLoadsReportWhatTheLinksCarry) {
  Planner p(makeFabric(2, {}, 100, 50));
  addNodes(p, 2, 1);
  ASSERT_TRUE(p.planJob({"j", {node(0, 0), node(1, 0)}, 1, 1}));
  auto loads = p.linkLoads();
  // Two connections (0->1, 1->0), one subflow each at 100 Gbps, on 50 Gbps uplinks.
  ASSERT_EQ(loads.size(), 4u);
  for (const auto& l : loads) {
    EXPECT_DOUBLE_EQ(l.carried_gbps, 100);
    EXPECT_DOUBLE_EQ(l.capacity_gbps, 50);
    EXPECT_DOUBLE_EQ(l.load, 2.0);
  }
  EXPECT_DOUBLE_EQ(p.maxLinkLoad(), 2.0);
}

}  // namespace
}  // namespace c4::op::c4p
