// c4-c4p-scale-bench: the C4P planner's time at scale, counted in NICs (one NIC per host; GPUs
// per NIC are the job's business and do not enter the planner). Fabric: H hosts and U uplinks
// (= spines) per leaf, NICs / H leaves, one plane. Workloads: "1 job", one ring over every NIC
// visiting the leaves in turn (every connection crosses the spine); "4 jobs", four rings of a
// quarter of the NICs each, drawn at random, planned one after the other. Failures: one uplink
// on every fourth leaf, known when planning.
//
// Measured per case (median of --reps runs):
//   plan         planJob for every job, failed links known;
//   link change  setLinkState of one leaf link direction that carries planned subflows (failed,
//                then restored, each timed), beside the baseline in the same process: a
//                re-weighting of every pair (rebalance(), what setLinkState did before it touched
//                only the affected pairs). Prints how many pairs each change touched.
// Usage: c4-c4p-scale-bench [--nics 16384,131072] [--hosts-per-leaf 8] [--uplinks 8]
//                           [--reps 3] [--jobs 1,4] [--reweight-max-pairs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/c4p_fabric.h"
#include "operator/c4p/planner.h"

namespace {

namespace c4p = c4::op::c4p;

constexpr int kSubflows = 4;
c4p::PlannerOptions g_options;  // --reweight-max-pairs sets reweight_max_pairs

std::string named(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

struct Shape {
  int nics = 0;
  int hosts_per_leaf = 8;
  int uplinks = 8;
  [[nodiscard]] int leaves() const { return nics / hosts_per_leaf; }
  [[nodiscard]] int leafOf(int n) const { return n / hosts_per_leaf; }
};

std::vector<std::vector<int>> rings(const Shape& s, int jobs) {
  std::vector<std::vector<int>> out;
  if (jobs == 1) {
    std::vector<int> order;
    for (int i = 0; i < s.hosts_per_leaf; ++i) {
      for (int l = 0; l < s.leaves(); ++l) order.push_back(l * s.hosts_per_leaf + i);
    }
    out.push_back(order);
    return out;
  }
  std::vector<int> all(static_cast<std::size_t>(s.nics));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(0xC4C4 + static_cast<std::uint64_t>(s.nics));
  std::shuffle(all.begin(), all.end(), rng);
  const std::size_t per = all.size() / static_cast<std::size_t>(jobs);
  for (int j = 0; j < jobs; ++j) {
    out.emplace_back(all.begin() + static_cast<long>(per * static_cast<std::size_t>(j)),
                     all.begin() + static_cast<long>(per * static_cast<std::size_t>(j + 1)));
  }
  return out;
}

c4p::Fabric fabricFor(const Shape& s) {
  std::vector<std::pair<std::string, int>> failed;
  for (int l = 0; l < s.leaves(); l += 4)
    failed.emplace_back(named("leaf-", l), (l / 4) % s.uplinks);
  return c4::bench::leafSpineFabric(s.uplinks, 400, 400, failed);
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename T>
T check(c4::Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().toString().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

struct Measured {
  double plan_ms = 0;
  double fail_ms = 0;
  double restore_ms = 0;
  double full_ms = 0;
  std::size_t pairs = 0;
  std::size_t touched = 0;
  double max_load = 0;
  double fail_load = 0;  // max link load after the failure: only the affected pairs re-weighted
  double full_fail_load = 0;  // the same with every pair re-weighted
  double restore_load = 0;
  double full_restore_load = 0;
};

Measured once(const Shape& s, int jobs) {
  c4p::Planner planner(fabricFor(s), g_options);
  for (int n = 0; n < s.nics; ++n) {
    auto st = planner.setNode(named("n", n), {{"c4.dev/leaf", named("leaf-", s.leafOf(n))}});
    if (!st) std::exit(1);
  }
  Measured m;
  auto t0 = std::chrono::steady_clock::now();
  int j = 0;
  for (const auto& order : rings(s, jobs)) {
    c4p::JobPlacement p{named("job-", j++), {}, 8, kSubflows};
    for (int n : order) p.nodes.push_back(named("n", n));
    check(planner.planJob(p), "plan");
  }
  m.plan_ms = msSince(t0);
  m.max_load = planner.maxLinkLoad();
  for (const auto& name : planner.jobs()) m.pairs += planner.plan(name)->pairs.size();
  // Leaf 1's uplink 1 (healthy: the failed ones are on every fourth leaf), its up direction.
  const c4p::LinkRef link{0, named("leaf-", 1), 1};
  t0 = std::chrono::steady_clock::now();
  auto failed = check(planner.setLinkState(link, 0.0, c4p::Direction::kUp), "fail");
  m.fail_ms = msSince(t0);
  m.touched = failed.pairs_reweighted;
  m.fail_load = planner.maxLinkLoad();
  {
    c4p::Planner every = planner;  // the baseline: the same state, every pair re-weighted
    t0 = std::chrono::steady_clock::now();
    every.rebalance();
    m.full_ms = msSince(t0);
    m.full_fail_load = every.maxLinkLoad();
  }
  t0 = std::chrono::steady_clock::now();
  check(planner.setLinkState(link, 1.0, c4p::Direction::kUp), "restore");
  m.restore_ms = msSince(t0);
  m.restore_load = planner.maxLinkLoad();
  planner.rebalance();
  m.full_restore_load = planner.maxLinkLoad();
  return m;
}

std::vector<int> parseList(const char* s) {
  std::vector<int> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> nics = {16384, 131072};
  std::vector<int> jobs = {1, 4};
  Shape base;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--nics") {
      nics = parseList(argv[i + 1]);
    } else if (a == "--jobs") {
      jobs = parseList(argv[i + 1]);
    } else if (a == "--hosts-per-leaf") {
      base.hosts_per_leaf = std::atoi(argv[i + 1]);
    } else if (a == "--uplinks") {
      base.uplinks = std::atoi(argv[i + 1]);
    } else if (a == "--reweight-max-pairs") {
      g_options.reweight_max_pairs = std::strtoul(argv[i + 1], nullptr, 10);
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::printf(
      "| NICs | leaves × uplinks | jobs | pairs | plan | max link load | link change: pairs "
      "re-weighted | fail | restore | every pair re-weighted (baseline) | ratio | max link load "
      "after fail / restore | the same, every pair re-weighted |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
  for (int n : nics) {
    for (int j : jobs) {
      Shape s = base;
      s.nics = n;
      std::vector<double> plan, fail, restore, full;
      Measured last;
      for (int r = 0; r < reps; ++r) {
        last = once(s, j);
        plan.push_back(last.plan_ms);
        fail.push_back(last.fail_ms);
        restore.push_back(last.restore_ms);
        full.push_back(last.full_ms);
      }
      const double change = std::max(median(fail), median(restore));
      std::printf(
          "| %d | %d × %d | %d | %zu | %.0f ms | %.3f | %zu | %.1f ms | %.1f ms | %.0f ms | "
          "%.3f | %.3f / %.3f | %.3f / %.3f |\n",
          n, s.leaves(), s.uplinks, j, last.pairs, median(plan), last.max_load, last.touched,
          median(fail), median(restore), median(full), change / median(full), last.fail_load,
          last.restore_load, last.full_fail_load, last.full_restore_load);
      std::fflush(stdout);
    }
  }
  return 0;
}
