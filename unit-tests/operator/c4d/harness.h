// Drives a JobAnalyser over a SyntheticJob window by window and records what it emits.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/c4d/analyser.h"
#include "synthetic_job.h"

namespace c4::c4d::testing {

struct Emitted {
  Verdict verdict;
  int window = 0;  // harness window in which it was confirmed
};

class Harness {
 public:
  explicit Harness(JobSpec spec = {}) : job(std::move(spec)) {}

  // Advances n windows; returns the verdicts confirmed during them.
  std::vector<Emitted> run(int n) {
    std::vector<Emitted> out;
    for (int i = 0; i < n; ++i) {
      job.step();
      ++window;
      auto result = analyser.tick(job.snapshot(), job.now());
      EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().toString());
      if (!result) return out;
      last = *result;
      for (auto& v : result->verdicts) {
        out.push_back({v, window});
        all.push_back({v, window});
      }
      for (auto& o : result->observations) {
        if (o.is_new) new_observations.push_back(o);
      }
      for (auto& k : result->cleared) cleared.push_back(k);
    }
    return out;
  }

  SyntheticJob job;
  JobAnalyser analyser;
  int window = 0;
  TickResult last;
  std::vector<Emitted> all;
  std::vector<Observation> new_observations;
  std::vector<std::string> cleared;
};

inline std::string describe(const std::vector<Emitted>& v) {
  std::string out;
  for (const auto& e : v) {
    out += "[w" + std::to_string(e.window) + "] " + e.verdict.key() + " (" +
           std::string(actionName(e.verdict.action)) + "): " + e.verdict.evidence.message + "\n";
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace c4::c4d::testing
