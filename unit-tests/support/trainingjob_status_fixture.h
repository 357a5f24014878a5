// A TrainingJob status with every field the CRD declares and the operator writes, as the API
// server returns it: shared by the codec's unit test and the round trip through the real API
// server (e2e/integration/operator/status_roundtrip_test.cc), which also checks that it covers
// every property of the CRD's status schema.
#pragma once

#include "operator/trainingjob/status.h"

namespace c4::op::fixtures {

inline Json fullStatus() {
  return {{"phase", "Restarting"},
          {"phaseSince", "2025-03-01T10:00:00Z"},
          {"observedGeneration", 7},
          {"restarts", 3},
          {"attempt", 4},
          {"restartsCountTowardsMax", 1},
          {"infrastructureRestarts", 2},
          {"consecutiveFailures", 1},
          {"nextAttemptTime", "2025-03-01T10:00:10Z"},
          {"startedIndexes", "0-3,5"},
          {"active", 5},
          {"ready", 4},
          {"succeeded", 0},
          {"failed", 1},
          {"lastRestartTime", "2025-03-01T10:00:00Z"},
          {"lastFault", "pod llm-1 (rank 1) failed: exit code 3"},
          {"lastCheckpoint",
           {{"step", 1200}, {"path", "/ckpt/1200"}, {"time", "2025-03-01T09:59:00Z"}}},
          {"plan",
           {{"version", 9},
            {"mode", "Enforce"},
            {"maxLinkLoad", "0.750"},
            {"reason", "link failed"},
            {"time", "2025-03-01T09:58:00Z"},
            {"appliedVersion", 8},
            {"ranksApplied", 6},
            {"ranksReporting", 8}}},
          {"avoidNodes", Json::array({"node-a", "node-b"})},
          {"faults", Json::array({{{"time", "2025-03-01T10:00:00Z"},
                                   {"class", "commHang"},
                                   {"attempt", 3},
                                   {"pod", "llm-1"},
                                   {"node", "node-a"},
                                   {"rank", 1},
                                   {"exitCode", 134},
                                   {"link", "node-a<->node-b"},
                                   {"summary", "hang on rank 1"},
                                   {"action", "restart"},
                                   {"counted", false},
                                   {"detectionSeconds", 2.5},
                                   {"recomputeSeconds", 60},
                                   {"restartSeconds", 7}}})},
          {"goodput",
           {{"productiveSeconds", 3600},
            {"lostSeconds", 120},
            {"lastUpdateTime", "2025-03-01T10:00:00Z"}}},
          {"conditions", Json::array({{{"type", "Restarting"},
                                       {"status", "True"},
                                       {"observedGeneration", 7},
                                       {"lastTransitionTime", "2025-03-01T10:00:00Z"},
                                       {"reason", "FaultDiagnosed"},
                                       {"message", "restarting as attempt 4"}},
                                      {{"type", "Running"},
                                       {"status", "False"},
                                       {"lastTransitionTime", "2025-03-01T10:00:00Z"},
                                       {"reason", "Restarting"},
                                       {"message", ""}}})}};
}

}  // namespace c4::op::fixtures
