// The fabric model of C4P: a two-tier leaf–spine network per plane, read from the cluster-scoped
// custom resource `Fabric` (c4.dev/v1alpha1, crds/fabric.yaml), plus the health of its leaf–spine
// links from the description and from telemetry.
//
// Model. A plane is an independent leaf–spine network. Every leaf of a plane has
// `uplinksPerLeaf` uplinks of `uplinkSpeedGbps`; uplink u goes to spine u % spines, and the spine
// forwards down to the destination leaf on that leaf's link of the same index u. A path between
// two leaves of a plane is therefore one uplink index u in [0, uplinksPerLeaf): it uses the up
// direction of (source leaf, u) and the down direction of (destination leaf, u). A node belongs
// to one plane and one leaf, given by its labels `c4.dev/plane` (default 0) and `c4.dev/leaf`
// (required); leaves are named by that label and need not be listed anywhere else. Traffic
// between two nodes of the same leaf uses no uplink; nodes of different planes cannot reach each
// other through the fabric.
//
// The path of a flow is chosen by its source port (`pathSelection`):
//   sourcePortModulo  path = (port − base) mod uplinksPerLeaf (the emulated fabric, base 0)
//   table             an explicit (probed) port → path table
// Further rules (a known switch hash) extend `pathSelection.rule`; the parser rejects rules it
// does not implement, naming the ones it does.
//
// Link health. A leaf–spine link is named by (plane, leaf, uplink) and has two directions (up:
// leaf → spine, down: spine → leaf). Its usable capacity is uplinkSpeedGbps × fraction, where the
// fraction is the smaller of what the description says (`spec.links`) and what telemetry set
// through setLinkState(); 0 means failed, 1 healthy. Bad input is refused with an error naming the
// field and changes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"

namespace c4::op::c4p {

using Json = nlohmann::json;

inline constexpr const char* kLeafLabel = "c4.dev/leaf";
inline constexpr const char* kPlaneLabel = "c4.dev/plane";
inline constexpr int kMaxPlanes = 16;
inline constexpr int kMaxUplinksPerLeaf = 1024;

enum class Direction { kUp, kDown, kBoth };
std::string_view directionName(Direction d);

// One leaf–spine link (both directions), as the description and telemetry name it.
struct LinkRef {
  int plane = 0;
  std::string leaf;
  int uplink = 0;
  friend auto operator<=>(const LinkRef&, const LinkRef&) = default;
};
std::string linkName(const LinkRef& link);  // "plane0/leaf-1/uplink2"

enum class PathRule { kSourcePortModulo, kTable };
std::string_view pathRuleName(PathRule r);

// A link whose capacity differs from healthy, with where that came from.
struct LinkState {
  LinkRef link;
  Direction direction = Direction::kBoth;
  double capacity_fraction = 1.0;
  std::string reason;           // free text from the description
  std::string source = "spec";  // "spec" or "telemetry" (degradedLinks())
};

struct FabricSpec {
  int planes = 1;
  int spines = 0;
  int uplinks_per_leaf = 0;
  double uplink_speed_gbps = 0;
  double host_link_speed_gbps = 0;
  PathRule rule = PathRule::kSourcePortModulo;
  int port_base = 0;                        // sourcePortModulo
  std::map<std::uint16_t, int> port_table;  // table: port -> path
  std::vector<LinkState> links;             // spec.links: known failed/degraded links
};

// Where a node sits, from its labels.
struct NodeLocation {
  int plane = 0;
  std::string leaf;
  friend bool operator==(const NodeLocation&, const NodeLocation&) = default;
};

class Fabric {
 public:
  // Parses a whole Fabric object (apiVersion c4.dev/v1alpha1, kind Fabric, .spec) or, when the
  // object has no `kind`, a bare spec. Strict: unknown fields, wrong types and out-of-range values
  // are errors of code kInvalidArgument whose message starts with the field path
  // ("spec.uplinksPerLeaf: ...").
  static Result<Fabric> fromJson(const Json& object);
  static Result<Fabric> parse(std::string_view json_text);
  static Result<Fabric> fromSpec(FabricSpec spec);

  [[nodiscard]] const FabricSpec& spec() const { return spec_; }
  [[nodiscard]] int planes() const { return spec_.planes; }
  [[nodiscard]] int uplinksPerLeaf() const { return spec_.uplinks_per_leaf; }
  [[nodiscard]] double hostLinkSpeedGbps() const { return spec_.host_link_speed_gbps; }

  // Telemetry: sets the capacity fraction in [0, 1] of one link (1 clears what telemetry said).
  // Refuses a plane or uplink out of range, an empty leaf or a fraction outside [0, 1].
  Status setLinkState(const LinkRef& link, double capacity_fraction,
                      Direction direction = Direction::kBoth);
  // Copies the telemetry states of `other` that are valid for this fabric (used when the
  // description changes and the telemetry view must survive); returns how many were dropped.
  int adoptTelemetry(const Fabric& other);

  // Usable capacity of one direction of a link, Gbps (spec and telemetry combined).
  [[nodiscard]] double capacityGbps(int plane, std::string_view leaf, int uplink,
                                    Direction direction) const;
  [[nodiscard]] double capacityFraction(int plane, std::string_view leaf, int uplink,
                                        Direction direction) const;
  // Every link that is not fully healthy, spec and telemetry combined, sorted.
  [[nodiscard]] std::vector<LinkState> degradedLinks() const;

  // The path a source port selects, or -1 when the rule does not map that port.
  [[nodiscard]] int pathOfPort(std::uint16_t port) const;
  // The lowest port in [first, last] that maps to `path` and is not in `used`.
  [[nodiscard]] std::optional<std::uint16_t> freePortForPath(
      int path, std::uint16_t first, std::uint16_t last, const std::set<std::uint16_t>& used) const;

  // A node's plane and leaf from its labels; errors name the label.
  [[nodiscard]] Result<NodeLocation> locate(std::string_view node,
                                            const std::map<std::string, std::string>& labels) const;

 private:
  explicit Fabric(FabricSpec spec);
  Status validateLink(const LinkRef& link, std::string_view path) const;

  FabricSpec spec_;
  // (link, direction kUp/kDown) -> fraction, from the spec and from telemetry.
  std::map<std::pair<LinkRef, int>, double> spec_state_;
  std::map<std::pair<LinkRef, int>, double> telemetry_state_;
  std::vector<std::vector<std::uint16_t>> table_ports_;  // path -> sorted ports (table rule)
};

// The `status` object of the Fabric resource: observedGeneration, the degraded links with their
// source, and the current maximum link load (a fraction of capacity; > 1 means oversubscribed).
Json renderFabricStatus(const Fabric& fabric, std::int64_t observed_generation,
                        double max_link_load);

}  // namespace c4::op::c4p
