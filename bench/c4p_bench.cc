// c4-c4p-bench: ring allreduce bus bandwidth on a simulated leaf–spine fabric (bench/c4p_sim.h)
// with ECMP (random source ports hashed onto the live uplinks, many seeds) against C4P's plan
// (operator/c4p), healthy and with failed uplinks, one job and several jobs sharing the fabric;
// and the planner's time. Every case is measured in both models of bench/c4p_sim.h (pipelined
// steady state, one step); prints two Markdown tables; --json writes the rows for
// bench/plot_c4p.py. Run it as docs/benchmarks.md says.
//
// Fabric per size: 8 GPUs per node, one host link per node, leaves = max(2, nodes / 16), nodes
// per leaf = nodes / leaves, uplinks per leaf = nodes per leaf (non-blocking, 1:1), host and
// uplinks 400 Gbps. Every connection has 4 subflows (the plugin's default).
// Workloads: "1 job": one ring over all nodes, visiting the leaves in turn (a placement that does
// not follow the topology: every hop crosses the spine). "4 jobs": four rings of a quarter of the
// nodes each, nodes drawn at random (fragmented cluster), random ring order.
// Failures: "1 failed": uplink 0 of leaf 0; "several failed": one uplink on every fourth leaf
// (at least 2). "plan" knows the failures when it plans; "plan, live" plans the healthy fabric
// and then learns the failures through telemetry (weights only, as live connections apply).
// --spray K,...: planner-free spreading as well, in the pipelined model: every connection opens K
// subflows on random source ports (a random live path each, equal weights), as transports that
// rotate traffic over many queue pairs do; a third table sets it beside the plan.
// --pipelined-only: skip the one-step model (slow at 16,384 NICs and more).
// --reweight-max-pairs N: PlannerOptions::reweight_max_pairs for the live changes (0: no bound).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bench/c4p_fabric.h"
#include "bench/c4p_sim.h"
#include "operator/c4p/planner.h"

namespace {

using c4::bench::c4psim::LeafSpine;
using c4::bench::c4psim::Routes;
using c4::bench::c4psim::SimJob;
namespace c4p = c4::op::c4p;

constexpr int kGpusPerNode = 8;
constexpr int kSubflows = 4;
c4p::PlannerOptions g_options;  // --reweight-max-pairs sets reweight_max_pairs

struct Scenario {
  std::string name;
  int jobs;
  int failures;  // 0, 1, or -1 for "several"
};

// Shares of the ideal under one transport model.
struct Result {
  double ecmp_mean = 0;   // mean over seeds of the mean over jobs
  double ecmp_worst = 0;  // min over seeds and jobs
  double plan = 0;        // min over jobs
  double plan_live = -1;  // min over jobs; -1 when healthy
};

struct Row {
  std::string scenario;
  int gpus = 0;
  int leaves = 0;
  int uplinks = 0;
  double ideal_gbps = 0;
  Result pipelined;  // steady state of a pipelined ring (the headline)
  Result step;       // one step, no pipelining (conservative for weighted plans)
  double plan_max_load = 0;
  double plan_ms = 0;
  // --spray: per K, the pipelined share of the ideal with K random subflows per connection
  // (mean over seeds of the mean over jobs, and the slowest job of the worst seed).
  std::vector<std::pair<double, double>> spray;
};

// Built by append: GCC 12 warns (-Wrestrict, a false positive) on "literal" + std::string here.
std::string named(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}
std::string nodeName(int n) {
  return named("n", n);
}
std::string leafName(int l) {
  return named("leaf-", l);
}
std::string jobName(std::size_t j) {
  return named("job-", static_cast<int>(j));
}

LeafSpine fabricFor(int gpus) {
  int nodes = gpus / kGpusPerNode;
  int leaves = std::max(2, nodes / 16);
  LeafSpine f;
  f.leaves = leaves;
  f.nodes_per_leaf = nodes / leaves;
  f.uplinks = f.nodes_per_leaf;
  f.host_gbps = 400;
  f.uplink_gbps = 400;
  return f;
}

std::vector<std::pair<int, int>> failuresFor(const LeafSpine& f, int failures) {
  if (failures == 0) return {};
  if (failures == 1) return {{0, 0}};
  std::vector<std::pair<int, int>> out;
  int count = std::max(2, f.leaves / 4);
  for (int i = 0; i < count; ++i) out.emplace_back((i * 4) % f.leaves, i % f.uplinks);
  return out;
}

std::vector<std::vector<int>> placements(const LeafSpine& f, int jobs, std::uint64_t seed) {
  std::vector<std::vector<int>> out;
  if (jobs == 1) {
    std::vector<int> order;
    for (int i = 0; i < f.nodes_per_leaf; ++i) {
      for (int l = 0; l < f.leaves; ++l) order.push_back(l * f.nodes_per_leaf + i);
    }
    out.push_back(order);
    return out;
  }
  std::vector<int> all(static_cast<std::size_t>(f.nodes()));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  std::size_t per = all.size() / static_cast<std::size_t>(jobs);
  for (int j = 0; j < jobs; ++j) {
    out.emplace_back(all.begin() + static_cast<long>(per * static_cast<std::size_t>(j)),
                     all.begin() + static_cast<long>(per * static_cast<std::size_t>(j + 1)));
  }
  return out;
}

c4p::Fabric plannerFabric(const LeafSpine& f, const std::vector<std::pair<int, int>>& failed) {
  std::vector<std::pair<std::string, int>> named_failed;
  for (auto [leaf, uplink] : failed) named_failed.emplace_back(leafName(leaf), uplink);
  return c4::bench::leafSpineFabric(f.uplinks, f.uplink_gbps, f.host_gbps, named_failed);
}

// Plans every job; returns the planner and the time it took (ms).
std::pair<c4p::Planner, double> plan(const LeafSpine& f,
                                     const std::vector<std::pair<int, int>>& failed,
                                     const std::vector<std::vector<int>>& orders) {
  c4p::Planner planner(plannerFabric(f, failed), g_options);
  for (int n = 0; n < f.nodes(); ++n) {
    auto st = planner.setNode(nodeName(n), {{"c4.dev/leaf", leafName(f.leafOf(n))}});
    if (!st) std::exit(1);
  }
  auto t0 = std::chrono::steady_clock::now();
  for (std::size_t j = 0; j < orders.size(); ++j) {
    c4p::JobPlacement p{jobName(j), {}, kGpusPerNode, kSubflows};
    for (int n : orders[j]) p.nodes.push_back(nodeName(n));
    auto out = planner.planJob(p);
    if (!out) {
      std::fprintf(stderr, "plan: %s\n", out.error().toString().c_str());
      std::exit(1);
    }
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return {std::move(planner), ms};
}

Routes planRoutes(const c4p::Planner& planner, const LeafSpine& f,
                  const std::vector<SimJob>& jobs) {
  Routes routes;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const c4p::JobPlan* p = planner.plan(jobName(j));
    std::map<std::pair<std::string, std::string>, const c4p::PlannedPair*> pairs;
    for (const auto& pair : p->pairs) pairs[{pair.local_node, pair.peer_node}] = &pair;
    auto& jr = routes.emplace_back();
    for (auto [src, dst] : jobs[j].connections) {
      auto& cr = jr.emplace_back();
      if (f.leafOf(src) == f.leafOf(dst)) {
        for (int s = 0; s < kSubflows; ++s) cr.push_back({-1, 1.0 / kSubflows});
        continue;
      }
      for (const auto& s : pairs.at({nodeName(src), nodeName(dst)})->subflows) {
        cr.push_back({s.path, s.weight});
      }
    }
  }
  return routes;
}

double minRatio(const std::vector<double>& busbw, const std::vector<double>& ideal) {
  double m = 1e9;
  for (std::size_t j = 0; j < busbw.size(); ++j) m = std::min(m, busbw[j] / ideal[j]);
  return m;
}

// Share of the ideal (mean, worst) over `seeds` random route draws in `model`.
template <typename Model>
std::pair<double, double> randomRoutes(const LeafSpine& fabric, const std::vector<SimJob>& jobs,
                                       const std::vector<double>& ideal, int seeds, Model model) {
  double sum = 0, worst = 1e9;
  for (int s = 0; s < seeds; ++s) {
    auto routes = c4::bench::c4psim::ecmpRoutes(fabric, jobs, 1000 + static_cast<std::uint64_t>(s));
    auto busbw = model(fabric, jobs, routes);
    double mean = 0;
    for (std::size_t j = 0; j < jobs.size(); ++j) mean += busbw[j] / ideal[j];
    sum += mean / static_cast<double>(jobs.size());
    worst = std::min(worst, minRatio(busbw, ideal));
  }
  return {sum / seeds, worst};
}

Row run(const Scenario& sc, int gpus, int seeds, const std::vector<int>& spray, bool stepModel) {
  LeafSpine f = fabricFor(gpus);
  auto failed = failuresFor(f, sc.failures);
  auto orders = placements(f, sc.jobs, 0xC4C4 + static_cast<std::uint64_t>(gpus));
  std::vector<SimJob> jobs;
  for (const auto& o : orders) jobs.push_back(c4::bench::c4psim::ringJob(o, kSubflows));
  LeafSpine failed_fabric = f;
  failed_fabric.failed = failed;
  std::vector<double> ideal;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    ideal.push_back(c4::bench::c4psim::idealBusbw(failed_fabric, jobs, j));
  }

  Row row;
  row.scenario = sc.name;
  row.gpus = gpus;
  row.leaves = f.leaves;
  row.uplinks = f.uplinks;
  row.ideal_gbps = *std::min_element(ideal.begin(), ideal.end());

  using Model =
      std::vector<double> (*)(const LeafSpine&, const std::vector<SimJob>&, const Routes&);
  const std::pair<Model, Result*> allModels[] = {
      {&c4::bench::c4psim::ringPipelinedBusbw, &row.pipelined},
      {&c4::bench::c4psim::ringStepBusbw, &row.step}};
  const std::span models(allModels, stepModel ? 2 : 1);
  for (auto [model, result] : models) {
    std::tie(result->ecmp_mean, result->ecmp_worst) =
        randomRoutes(failed_fabric, jobs, ideal, seeds, model);
  }
  for (int k : spray) {
    std::vector<SimJob> sprayed;
    for (const auto& o : orders) sprayed.push_back(c4::bench::c4psim::ringJob(o, k));
    row.spray.push_back(
        randomRoutes(failed_fabric, sprayed, ideal, seeds, &c4::bench::c4psim::ringPipelinedBusbw));
  }

  // Planning time: the median of 3 runs.
  std::vector<double> times;
  for (int r = 0; r < 2; ++r) times.push_back(plan(f, failed, orders).second);
  auto [planner, ms] = plan(f, failed, orders);
  times.push_back(ms);
  std::sort(times.begin(), times.end());
  row.plan_ms = times[1];
  row.plan_max_load = planner.maxLinkLoad();
  Routes planned = planRoutes(planner, f, jobs);
  for (auto [model, result] : models)
    result->plan = minRatio(model(failed_fabric, jobs, planned), ideal);

  if (!failed.empty()) {
    auto [live, unused] = plan(f, {}, orders);
    for (auto [leaf, uplink] : failed) {
      auto st = live.setLinkState({0, leafName(leaf), uplink}, 0.0);
      if (!st) std::exit(1);
    }
    Routes after = planRoutes(live, f, jobs);
    for (auto [model, result] : models) {
      result->plan_live = minRatio(model(failed_fabric, jobs, after), ideal);
    }
  }
  return row;
}

std::string pct(double x) {
  if (x < 0) return "–";
  char b[16];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  std::vector<int> sizes = {128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  std::string json_path;
  std::vector<int> spray;
  bool stepModel = true;
  auto intList = [](const std::string& list) {
    std::vector<int> out;
    for (std::size_t p = 0; p < list.size();) {
      std::size_t q = list.find(',', p);
      out.push_back(std::atoi(list.substr(p, q - p).c_str()));
      p = q == std::string::npos ? list.size() : q + 1;
    }
    return out;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seeds" && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes = intList(argv[++i]);
    } else if (a == "--spray" && i + 1 < argc) {
      spray = intList(argv[++i]);
    } else if (a == "--reweight-max-pairs" && i + 1 < argc) {
      g_options.reweight_max_pairs = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--pipelined-only") {
      stepModel = false;
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: c4-c4p-bench [--seeds N (20)] [--sizes 128,256,...] [--spray 4,16,...] "
                   "[--pipelined-only] [--reweight-max-pairs N (1024)] [--json FILE]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const std::vector<Scenario> scenarios = {{"1 job, healthy", 1, 0},
                                           {"1 job, 1 failed uplink", 1, 1},
                                           {"1 job, several failed uplinks", 1, -1},
                                           {"4 jobs, healthy", 4, 0},
                                           {"4 jobs, several failed uplinks", 4, -1}};
  std::vector<Row> rows;
  for (const auto& sc : scenarios) {
    for (int gpus : sizes) {
      rows.push_back(run(sc, gpus, seeds, spray, stepModel));
      std::fprintf(stderr, "done: %s, %d GPUs\n", sc.name.c_str(), gpus);
    }
  }
  std::printf("Steady state of a pipelined ring (share of the ideal busbw):\n\n");
  std::printf(
      "| scenario | NICs | GPUs | leaves × uplinks | ideal busbw | ECMP mean | ECMP worst | plan | "
      "plan, live failure | plan max link load | plan time |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %d | %d | %d × %d | %.0f Gbps | %s | %s | %s | %s | %.3f | %.1f ms |\n",
                r.scenario.c_str(), r.gpus / kGpusPerNode, r.gpus, r.leaves, r.uplinks,
                r.ideal_gbps, pct(r.pipelined.ecmp_mean).c_str(),
                pct(r.pipelined.ecmp_worst).c_str(), pct(r.pipelined.plan).c_str(),
                pct(r.pipelined.plan_live).c_str(), r.plan_max_load, r.plan_ms);
  }
  if (stepModel) {
    std::printf("\nOne step without pipelining (share of the ideal busbw):\n\n");
    std::printf(
        "| scenario | NICs | GPUs | ECMP mean | ECMP worst | plan | plan, live failure |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
      std::printf("| %s | %d | %d | %s | %s | %s | %s |\n", r.scenario.c_str(),
                  r.gpus / kGpusPerNode, r.gpus, pct(r.step.ecmp_mean).c_str(),
                  pct(r.step.ecmp_worst).c_str(), pct(r.step.plan).c_str(),
                  pct(r.step.plan_live).c_str());
    }
  }
  if (!spray.empty()) {
    std::printf(
        "\nPlanner-free spreading, pipelined model (share of the ideal busbw; mean / worst over "
        "seeds; one NIC per node, %d GPUs per NIC):\n\n| scenario | NICs | GPUs | plan (%d "
        "subflows) |",
        kGpusPerNode, kSubflows);
    for (int k : spray) std::printf(" %d random subflows |", k);
    std::printf("\n|---|---:|---:|---:|");
    for (std::size_t i = 0; i < spray.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (const Row& r : rows) {
      std::printf("| %s | %d | %d | %s |", r.scenario.c_str(), r.gpus / kGpusPerNode, r.gpus,
                  pct(r.pipelined.plan).c_str());
      for (auto [mean, worst] : r.spray) {
        std::printf(" %s / %s |", pct(mean).c_str(), pct(worst).c_str());
      }
      std::printf("\n");
    }
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "[\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      char line[768];
      std::snprintf(line, sizeof line,
                    "  {\"scenario\": \"%s\", \"gpus\": %d, \"ideal_gbps\": %.3f, "
                    "\"ecmp_mean\": %.5f, \"ecmp_worst\": %.5f, \"plan\": %.5f, "
                    "\"plan_live\": %.5f, \"step_ecmp_mean\": %.5f, \"step_ecmp_worst\": %.5f, "
                    "\"step_plan\": %.5f, \"step_plan_live\": %.5f, \"plan_max_load\": %.5f, "
                    "\"plan_ms\": %.3f}%s\n",
                    r.scenario.c_str(), r.gpus, r.ideal_gbps, r.pipelined.ecmp_mean,
                    r.pipelined.ecmp_worst, r.pipelined.plan, r.pipelined.plan_live,
                    r.step.ecmp_mean, r.step.ecmp_worst, r.step.plan, r.step.plan_live,
                    r.plan_max_load, r.plan_ms, i + 1 < rows.size() ? "," : "");
      out << line;
    }
    out << "]\n";
  }
  return 0;
}
