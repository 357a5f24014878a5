#include "operator/c4d/rules/rule.h"

namespace c4::c4d {

std::vector<std::unique_ptr<Rule>> makeRules() {
  std::vector<std::unique_ptr<Rule>> rules;
  // The order matters where a rule reads what an earlier one published in Findings (rule.h):
  // crash, then processExit (it orders exits around the crash rule's candidates), before the
  // hangs, the straggler and telemetry missing; nonCommHang before telemetry
  // missing; commSlow before the straggler. Candidates reach the confirmation in this order.
  rules.push_back(makeCrashRule());
  rules.push_back(makeProcessExitRule());
  rules.push_back(makeNonCommHangRule());
  rules.push_back(makeCommHangRule());
  rules.push_back(makeCommSlowRule());
  rules.push_back(makeStragglerRule());
  rules.push_back(makeTelemetryMissingRule());
  return rules;
}

}  // namespace c4::c4d
