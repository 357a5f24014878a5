// Precision and recall of the analyser over a randomised, seeded fault campaign: 240 runs of a
// synthetic job (4-12 nodes, 1-4 ranks per node, 1-3 rings, ±30% jitter), each with one fault
// class or one of the no-fault situations (healthy, node plugin outage, checkpoint pause, idle),
// injected at a random window and run for 45 windows. Slow links/NICs run at 5-20% of their rate,
// stragglers compute 2.5-4x slower; crashes have a pod-status lag of 0-2 windows and half of them
// take the whole job down with them (NCCL abort cascade). A verdict counts as correct when its
// class and culprit equal the injected fault's; every other verdict is a false positive.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>

#include "harness.h"

namespace c4::c4d::testing {
namespace {

enum class Injected {
  kHealthy,
  kCrash,
  kFreeze,
  kBusyHang,
  kLinkHang,
  kNicHang,
  kSlowLink,
  kSlowNic,
  kStraggler,
  kPluginOutage,
  kPause,
  kIdle,
};
constexpr std::array kAll = {Injected::kHealthy,      Injected::kCrash,    Injected::kFreeze,
                             Injected::kBusyHang,     Injected::kLinkHang, Injected::kNicHang,
                             Injected::kSlowLink,     Injected::kSlowNic,  Injected::kStraggler,
                             Injected::kPluginOutage, Injected::kPause,    Injected::kIdle};

const char* name(Injected f) {
  switch (f) {
    case Injected::kHealthy:
      return "healthy";
    case Injected::kCrash:
      return "crash";
    case Injected::kFreeze:
      return "freeze (non-comm hang)";
    case Injected::kBusyHang:
      return "busy hang (non-comm hang)";
    case Injected::kLinkHang:
      return "dead link (comm hang)";
    case Injected::kNicHang:
      return "dead NIC (comm hang)";
    case Injected::kSlowLink:
      return "slow link (comm slow)";
    case Injected::kSlowNic:
      return "slow NIC (comm slow)";
    case Injected::kStraggler:
      return "straggler (non-comm slow)";
    case Injected::kPluginOutage:
      return "node plugin outage";
    case Injected::kPause:
      return "checkpoint pause";
    case Injected::kIdle:
      return "idle";
  }
  return "?";
}

std::string linkKey(const char* cls, int a, int b) {
  const std::string na = SyntheticJob::nodeName(a), nb = SyntheticJob::nodeName(b);
  return std::string(cls) + "/link/" + std::min(na, nb) + "<->" + std::max(na, nb);
}

struct ClassStats {
  int runs = 0;
  int detected = 0;
  int false_positives = 0;
  int max_latency = 0;
  double sum_latency = 0.0;
};

TEST(C4dCampaign, PrecisionAndRecallOverSeededFaults) {
  constexpr int kRuns = 240;
  constexpr int kWindows = 45;
  int correct = 0, wrong = 0, faultRuns = 0, found = 0;
  std::map<Injected, ClassStats> stats;
  for (int run = 0; run < kRuns; ++run) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(run) * 7919 + 17);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    JobSpec spec;
    spec.seed = static_cast<std::uint64_t>(run) + 1000;
    spec.nodes = pick(4, 12);
    spec.ranks_per_node = std::array{1, 2, 4}[static_cast<std::size_t>(pick(0, 2))];
    spec.extra_rings = pick(0, 2);
    const Injected fault = kAll[static_cast<std::size_t>(run) % kAll.size()];
    const int inject = pick(6, 12);
    const int n = spec.nodes * spec.ranks_per_node;
    const int rank = pick(0, n - 1);
    const int node = pick(0, spec.nodes - 1);
    const int next = (node + 1) % spec.nodes;
    const double slowFactor = std::uniform_real_distribution<double>(0.05, 0.2)(rng);
    const double computeFactor = std::uniform_real_distribution<double>(2.5, 4.0)(rng);

    Harness h(spec);
    h.run(inject);
    std::string expected;
    const std::string nodeOfRank = SyntheticJob::nodeName(rank / spec.ranks_per_node);
    switch (fault) {
      case Injected::kHealthy:
        break;
      case Injected::kCrash:
        h.job.crash(rank, pick(0, 2), pick(0, 1) == 1);
        expected = "crash/rank/" + std::to_string(rank);
        break;
      case Injected::kFreeze:
        h.job.freeze(rank);
        expected = "nonCommHang/node/" + nodeOfRank;
        break;
      case Injected::kBusyHang:
        h.job.busyHang(rank);
        expected = "nonCommHang/node/" + nodeOfRank;
        break;
      case Injected::kLinkHang:
        h.job.blackhole(node, next);
        expected = linkKey("commHang", node, next);
        break;
      case Injected::kNicHang:
        h.job.killNic(node);
        expected = "commHang/node/" + SyntheticJob::nodeName(node);
        break;
      case Injected::kSlowLink:
        h.job.slowLink(node, next, slowFactor);
        expected = linkKey("commSlow", node, next);
        break;
      case Injected::kSlowNic:
        h.job.slowNic(node, slowFactor);
        expected = "commSlow/node/" + SyntheticJob::nodeName(node);
        break;
      case Injected::kStraggler:
        h.job.straggler(rank, computeFactor);
        expected = "nonCommSlow/node/" + nodeOfRank;
        break;
      case Injected::kPluginOutage:
        h.job.pluginOutage(node);
        break;
      case Injected::kPause:
        h.job.pause();
        break;
      case Injected::kIdle:
        h.job.idle();
        break;
    }
    h.run(kWindows - inject);
    if (fault == Injected::kPause) {
      h.job.resume();
      h.run(20);
    }

    ClassStats& cs = stats[fault];
    ++cs.runs;
    if (!expected.empty()) ++faultRuns;
    bool hit = false;
    for (const Emitted& e : h.all) {
      if (!expected.empty() && e.verdict.key() == expected && !hit) {
        hit = true;
        ++correct;
        const int latency = e.window - inject;
        cs.max_latency = std::max(cs.max_latency, latency);
        cs.sum_latency += latency;
      } else {
        ++wrong;
        ++cs.false_positives;
        std::cout << "  false: run " << run << " (" << name(fault) << ", " << spec.nodes << "x"
                  << spec.ranks_per_node << " rings " << spec.extra_rings << ", expected '"
                  << expected << "'): unexpected " << e.verdict.key() << ": "
                  << e.verdict.evidence.message << "\n";
      }
    }
    if (hit) {
      ++found;
      ++cs.detected;
    } else if (!expected.empty()) {
      std::cout << "  missed: run " << run << " (" << name(fault) << ", " << spec.nodes << "x"
                << spec.ranks_per_node << " rings " << spec.extra_rings << "): missed " << expected
                << "\n";
    }
  }
  const double precision = correct + wrong > 0 ? double(correct) / double(correct + wrong) : 1.0;
  const double recall = faultRuns > 0 ? double(found) / double(faultRuns) : 1.0;
  std::printf(
      "C4D campaign: %d runs, %d with a fault; %d correct verdicts, %d false; "
      "precision %.4f, recall %.4f\n",
      kRuns, faultRuns, correct, wrong, precision, recall);
  std::printf("%-28s %5s %9s %7s %16s %16s\n", "injected", "runs", "detected", "false",
              "mean latency (s)", "max latency (s)");
  for (const auto& [fault, cs] : stats) {
    std::printf("%-28s %5d %9d %7d %16.1f %16d\n", name(fault), cs.runs, cs.detected,
                cs.false_positives, cs.detected ? cs.sum_latency / cs.detected : 0.0,
                cs.max_latency);
  }
  EXPECT_GE(precision, 0.95);
  EXPECT_GE(recall, 0.95);
}

}  // namespace
}  // namespace c4::c4d::testing
