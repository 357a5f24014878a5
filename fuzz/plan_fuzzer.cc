// The plan file (C4_PLAN_FILE, written by the operator into a ConfigMap that anyone allowed to
// edit it can change) on arbitrary text; a parsed plan answers its lookups.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "c4/common/plan.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto plan = c4::parsePlan(text);
  if (!plan) {
    C4_FUZZ_CHECK(!plan.error().message.empty());
    return 0;
  }
  for (const auto& pair : plan->pairs) {
    const auto* found = plan->find(pair.local_node, c4::nodeHash(pair.peer_node));
    C4_FUZZ_CHECK(found != nullptr);
    C4_FUZZ_CHECK(!found->subflows.empty());
    C4_FUZZ_CHECK(found->subflows.size() <= c4::kMaxSubflows);
    C4_FUZZ_CHECK(plan->mentions(pair.local_node));
    std::string why;
    (void)plan->planeOf(pair.peer_node, &why);
  }
  return 0;
}
