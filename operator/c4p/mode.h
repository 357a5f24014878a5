// TrainingJob spec.trafficPlanning.mode, the one representation every room uses: the spec parser
// (trainingjob/api.cc), status.plan.mode (trainingjob/status.h), the planner's documents and the
// traffic-plan controller.
//   Off:      no plan (the document carries the version only; the plugin spreads by default)
//   Advisory: the plan is computed and published with its path labels, but the plugin is given
//             ephemeral ports and equal weights, so it only reports what the plan would do
//   Enforce:  the plugin binds the planned ports and splits bytes by the planned weights
#pragma once

#include <string_view>

#include "c4/common/error.h"

namespace c4::op::c4p {

enum class Mode { kOff, kAdvisory, kEnforce };
// "Off" | "Advisory" | "Enforce" (case-sensitive, as the CRD's enum); kInvalidArgument otherwise.
Result<Mode> parseMode(std::string_view name);
std::string_view modeName(Mode mode);

}  // namespace c4::op::c4p
