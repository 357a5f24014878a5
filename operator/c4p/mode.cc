// spec.trafficPlanning.mode.
#include "operator/c4p/mode.h"

#include <string>

namespace c4::op::c4p {

Result<Mode> parseMode(std::string_view name) {
  if (name == "Off") return Mode::kOff;
  if (name == "Advisory") return Mode::kAdvisory;
  if (name == "Enforce") return Mode::kEnforce;
  return makeError(ErrorCode::kInvalidArgument, "trafficPlanning.mode: \"" + std::string(name) +
                                                    "\" is not one of Off, Advisory, Enforce");
}

std::string_view modeName(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "Off";
    case Mode::kAdvisory:
      return "Advisory";
    case Mode::kEnforce:
      return "Enforce";
  }
  return "Off";
}

}  // namespace c4::op::c4p
