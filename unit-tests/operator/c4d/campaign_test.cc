// Precision and recall of the analyser over a randomised, seeded fault campaign: 240 runs of a
// synthetic job (4-12 nodes, 1-4 ranks per node, 1-3 rings, ±30% jitter), each with one fault
// class or one of the no-fault situations (healthy, node plugin outage, checkpoint pause, idle),
// injected at a random window and run for 45 windows. Slow links/NICs run at 5-20% of their rate,
// stragglers compute 2.5-4x slower; crashes have a pod-status lag of 0-2 windows and half of them
// take the whole job down with them (NCCL abort cascade). A verdict counts as correct when its
// class and culprit equal the injected fault's; every other verdict is a false positive.
#include "campaign.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>

namespace c4::c4d::testing {
namespace {

TEST(C4dCampaign, PrecisionAndRecallOverSeededFaults) {
  constexpr int kRuns = 240;
  constexpr int kWindows = 45;
  int correct = 0, wrong = 0, faultRuns = 0, found = 0;
  Tallies stats;
  for (const Injected f : kAllSituations) stats.row(situationName(f));
  for (int run = 0; run < kRuns; ++run) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(run) * 7919 + 17);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    JobSpec spec;
    spec.seed = static_cast<std::uint64_t>(run) + 1000;
    spec.nodes = pick(4, 12);
    spec.ranks_per_node = std::array{1, 2, 4}[static_cast<std::size_t>(pick(0, 2))];
    spec.extra_rings = pick(0, 2);
    const Injected fault = kAllSituations[static_cast<std::size_t>(run) % kAllSituations.size()];
    const int inject = pick(6, 12);
    const int n = spec.nodes * spec.ranks_per_node;
    FaultDraw d;
    d.rank = pick(0, n - 1);
    d.node = pick(0, spec.nodes - 1);
    d.slow_factor = std::uniform_real_distribution<double>(0.05, 0.2)(rng);
    d.compute_factor = std::uniform_real_distribution<double>(2.5, 4.0)(rng);
    if (fault == Injected::kCrash) {  // in this order: the figures in docs/c4d.md were drawn so
      d.cascade = pick(0, 1) == 1;
      d.pod_lag_windows = pick(0, 2);
    }

    Harness h(spec);
    const std::string expected = runSituation(h, fault, d, spec, inject, kWindows);

    ClassStats& cs = stats.row(situationName(fault));
    ++cs.runs;
    if (!expected.empty()) ++faultRuns;
    const auto t = tally(
        h.all, expected.empty() ? std::vector<std::string>{} : std::vector<std::string>{expected},
        inject, [&](const Emitted& e) {
          std::cout << "  false: run " << run << " (" << situationName(fault) << ", " << spec.nodes
                    << "x" << spec.ranks_per_node << " rings " << spec.extra_rings << ", expected '"
                    << expected << "'): unexpected " << e.verdict.key() << ": "
                    << e.verdict.evidence.message << "\n";
        });
    correct += t.correct;
    wrong += t.wrong;
    cs.false_positives += t.wrong;
    if (!expected.empty() && t.all_found) {
      ++found;
      ++cs.detected;
      cs.max_latency = std::max(cs.max_latency, t.latency);
      cs.sum_latency += t.latency;
    } else if (!expected.empty()) {
      std::cout << "  missed: run " << run << " (" << situationName(fault) << ", " << spec.nodes
                << "x" << spec.ranks_per_node << " rings " << spec.extra_rings << "): missed "
                << expected << "\n";
    }
  }
  const double precision = correct + wrong > 0 ? double(correct) / double(correct + wrong) : 1.0;
  const double recall = faultRuns > 0 ? double(found) / double(faultRuns) : 1.0;
  std::printf(
      "C4D campaign: %d runs, %d with a fault; %d correct verdicts, %d false; "
      "precision %.4f, recall %.4f\n",
      kRuns, faultRuns, correct, wrong, precision, recall);
  printTable(stats);
  EXPECT_GE(precision, 0.95);
  EXPECT_GE(recall, 0.95);
}

}  // namespace
}  // namespace c4::c4d::testing
