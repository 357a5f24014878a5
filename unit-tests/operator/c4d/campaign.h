// The seeded fault campaigns' shared parts (campaign_test.cc: 240 runs of small jobs;
// scale_campaign_test.cc: 1,200 runs of 8-4,096 ranks and compound faults): the situations, how
// each is injected into a synthetic job and which verdict it expects, and the tally.
#pragma once

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"

namespace c4::c4d::testing {

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
inline constexpr std::array kAllSituations = {
    Injected::kHealthy,   Injected::kCrash,        Injected::kFreeze,   Injected::kBusyHang,
    Injected::kLinkHang,  Injected::kNicHang,      Injected::kSlowLink, Injected::kSlowNic,
    Injected::kStraggler, Injected::kPluginOutage, Injected::kPause,    Injected::kIdle};

inline const char* situationName(Injected f) {
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

inline std::string linkKey(const char* cls, int a, int b) {
  const std::string na = SyntheticJob::nodeName(a), nb = SyntheticJob::nodeName(b);
  return std::string(cls) + "/link/" + std::min(na, nb) + "<->" + std::max(na, nb);
}
inline std::string nodeKey(const char* cls, int node) {
  return std::string(cls) + "/node/" + SyntheticJob::nodeName(node);
}

// Where and how hard a fault strikes (drawn by the campaign).
struct FaultDraw {
  int rank = 0;              // crash, freeze, busy hang, straggler
  int node = 0;              // dead or slow link (node -> node + 1), dead or slow NIC, outage
  double slow_factor = 0.1;  // slow link / NIC: the fraction of the rate left
  double compute_factor = 3.0;
  int pod_lag_windows = 0;  // crash: windows until its pod turns Failed
  bool cascade = false;     // crash: every other rank aborts two windows later
};

// Injects `fault` into the job; returns the key of the verdict it calls for ("" for none).
inline std::string inject(SyntheticJob& job, Injected fault, const FaultDraw& d, int nodes,
                          int ranksPerNode) {
  const int next = (d.node + 1) % nodes;
  switch (fault) {
    case Injected::kHealthy:
      return "";
    case Injected::kCrash:
      job.crash(d.rank, d.pod_lag_windows, d.cascade);
      return "crash/rank/" + std::to_string(d.rank);
    case Injected::kFreeze:
      job.freeze(d.rank);
      return nodeKey("nonCommHang", d.rank / ranksPerNode);
    case Injected::kBusyHang:
      job.busyHang(d.rank);
      return nodeKey("nonCommHang", d.rank / ranksPerNode);
    case Injected::kLinkHang:
      job.blackhole(d.node, next);
      return linkKey("commHang", d.node, next);
    case Injected::kNicHang:
      job.killNic(d.node);
      return nodeKey("commHang", d.node);
    case Injected::kSlowLink:
      job.slowLink(d.node, next, d.slow_factor);
      return linkKey("commSlow", d.node, next);
    case Injected::kSlowNic:
      job.slowNic(d.node, d.slow_factor);
      return nodeKey("commSlow", d.node);
    case Injected::kStraggler:
      job.straggler(d.rank, d.compute_factor);
      return nodeKey("nonCommSlow", d.rank / ranksPerNode);
    case Injected::kPluginOutage:
      job.pluginOutage(d.node);
      return "";
    case Injected::kPause:
      job.pause();
      return "";
    case Injected::kIdle:
      job.idle();
      return "";
  }
  return "";
}

// One run of a situation: `inject` windows of training, the fault, then up to `windows` in all
// (a pause resumes after them and runs 20 more). Returns the key of the verdict it calls for.
inline std::string runSituation(Harness& h, Injected fault, const FaultDraw& d, const JobSpec& spec,
                                int injectAt, int windows) {
  h.run(injectAt);
  const std::string key = inject(h.job, fault, d, spec.nodes, spec.ranks_per_node);
  h.run(windows - injectAt);
  if (fault == Injected::kPause) {
    h.job.resume();
    h.run(20);
  }
  return key;
}

struct ClassStats {
  int runs = 0;
  int detected = 0;  // runs in which every expected verdict came
  int false_positives = 0;
  int max_latency = 0;
  double sum_latency = 0.0;  // of the last expected verdict of each detected run
};

// The verdicts of one run against the keys it expects: a key's first verdict is correct, every
// other verdict is false. Returns whether every key came; `latency` is the window of the last.
struct RunTally {
  int correct = 0;
  int wrong = 0;
  bool all_found = false;
  int latency = 0;
};
inline RunTally tally(const std::vector<Emitted>& emitted, const std::vector<std::string>& expected,
                      int injectedAt, const std::function<void(const Emitted&)>& onFalse) {
  RunTally t;
  std::map<std::string, bool> seen;
  for (const auto& k : expected) seen[k] = false;
  for (const Emitted& e : emitted) {
    auto it = seen.find(e.verdict.key());
    if (it != seen.end() && !it->second) {
      it->second = true;
      ++t.correct;
      t.latency = std::max(t.latency, e.window - injectedAt);
    } else {
      ++t.wrong;
      onFalse(e);
    }
  }
  t.all_found = std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second; });
  return t;
}

// Rows of the campaign's table, in the order they first appear.
struct Tallies {
  std::vector<std::pair<std::string, ClassStats>> rows;
  ClassStats& row(const std::string& what) {
    for (auto& [name, cs] : rows) {
      if (name == what) return cs;
    }
    return rows.emplace_back(what, ClassStats{}).second;
  }
};

inline void printTable(const Tallies& stats) {
  std::printf("%-34s %5s %9s %7s %16s %16s\n", "injected", "runs", "detected", "false",
              "mean latency (s)", "max latency (s)");
  for (const auto& [what, cs] : stats.rows) {
    std::printf("%-34s %5d %9d %7d %16.1f %16d\n", what.c_str(), cs.runs, cs.detected,
                cs.false_positives, cs.detected ? cs.sum_latency / cs.detected : 0.0,
                cs.max_latency);
  }
}

}  // namespace c4::c4d::testing
