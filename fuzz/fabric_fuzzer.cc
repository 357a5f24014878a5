// The Fabric spec (the cluster-scoped Fabric object, as the API server hands it over) on
// arbitrary text; a parsed fabric answers the planner's questions: every source port maps into
// [0, pathsPerPlane()) or to -1, and paths between two leaves stay inside the fabric.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "fuzz_check.h"
#include "operator/c4p/fabric.h"

using namespace c4::op::c4p;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto fabric = Fabric::parse(text);
  if (!fabric) return 0;
  const int paths = fabric->pathsPerPlane();
  C4_FUZZ_CHECK(paths >= 1);
  for (std::uint16_t port :
       {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{40000}, std::uint16_t{65535}}) {
    const int id = fabric->pathOfPort(port);
    C4_FUZZ_CHECK(id >= -1 && id < paths);
  }
  for (const auto& link : fabric->degradedLinks()) {
    const double f = fabric->capacityFraction(link.link, Direction::kBoth);
    C4_FUZZ_CHECK(f >= 0.0 && f <= 1.0);
  }
  const NodeLocation a(0, "leaf-0"), b(0, "leaf-1");
  const int n = fabric->pathCount(a, b);
  for (int p = 0; p < n && p < 4; ++p) (void)fabric->pathLinks(a, b, p);
  (void)fabric->freePortForPathFor(a, b, 0, 40000, 40100, std::set<std::uint16_t>{});
  (void)renderFabricStatus(*fabric, 1, 0.5);
  return 0;
}
