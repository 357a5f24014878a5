// The plan document: what the operator writes into ConfigMap `<job>-c4-plan` (key plan.json) and
// the plugin reads from C4_PLAN_FILE (schema: nccl-net-plugin/README.md, "Plan file").
//
//   {"version": 7, "default": {"subflows": 4}, "planes": {"node-a": 0, ...},
//    "pairs": [{"localNode": "node-a", "peerNode": "node-b",
//               "subflows": [{"localPort": 40001, "pathId": 1, "weight": 0.5}, ...]}]}
//
// The caller chooses the version (it increases whenever the document changes). By mode:
//   Enforce   every cross-leaf pair with its planned ports, path ids and weights;
//   Advisory  the same pairs and path ids, but port 0 (ephemeral) and weight 1 on every subflow:
//             the plugin applies nothing and echoes the plan's version and path labels;
//   Off       version and default subflow count only.
// parsePlanDocument() is the plugin's own parser (c4::parsePlan: unknown fields, types,
// ranges, 1..64 subflows, a positive weight per pair, duplicate pairs, plane ids) converted to the
// operator's types, so a round trip proves the plugin accepts what the operator writes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"
#include "operator/c4p/planner.h"

namespace c4::op::c4p {

inline constexpr const char* kPlanDocumentKey = "plan.json";  // the ConfigMap data key

struct PlanDocument {
  std::int64_t version = 0;
  int default_subflows = 0;        // 0: absent
  std::vector<PlannedPair> pairs;  // plane taken from `planes` (0 when absent)
  std::map<std::string, int> planes;
  friend bool operator==(const PlanDocument&, const PlanDocument&) = default;
};

// The document of `plan` in `mode`; version must be >= 0.
Result<PlanDocument> makePlanDocument(const JobPlan& plan, std::int64_t version, Mode mode);
Json planDocumentJson(const PlanDocument& doc);
std::string renderPlanDocument(const PlanDocument& doc);  // compact JSON
Result<PlanDocument> parsePlanDocument(std::string_view text);

}  // namespace c4::op::c4p
