// The fabric model of C4P: a two-tier leaf–spine or three-tier pod / spine / core Clos network
// per plane, read from the cluster-scoped custom resource `Fabric` (c4.dev/v1alpha1,
// crds/fabric.yaml), plus the health of its links from the description and from telemetry.
//
// Model. A plane is an independent Clos network. Every leaf of a plane has `uplinksPerLeaf` (U)
// uplinks of `uplinkSpeedGbps`; uplink u goes to spine u % S (S = `spines`) of the leaf's pod, and
// the spine forwards down to a destination leaf of its pod on that leaf's link of the same index u.
// A node belongs to one plane, one pod and one leaf, given by its labels `c4.dev/plane` (default
// 0), `c4.dev/pod` (default: the empty pod "", one pod per plane) and `c4.dev/leaf` (required);
// leaves and pods are named by those labels and need not be listed anywhere else. A leaf belongs
// to the pod of its nodes; leaf names are unique within a plane (a link is named by plane, leaf
// and uplink, without the pod), so every node of one leaf carries the same pod label.
//
// Paths inside a pod. A path between two leaves of one pod is an uplink index u in [0, U): it
// uses the up direction of (source leaf, u) and the down direction of (destination leaf, u).
//
// Paths across pods (three tiers). With `coreUplinksPerSpine` (C) > 0, spine s of every pod has C
// uplinks of `coreUplinkSpeedGbps` to the core layer: the cores are split into S groups of C, and
// core uplink c of spine s reaches core (s, c), so spine s of every pod meets spine s of every
// other pod at each of the C cores of group s. A path between leaves of different pods of a plane
// is the pair (u, c), numbered u + U·c in [0, U·C): it uses (source leaf, u) up, (source pod,
// spine u % S, core uplink c) up, (destination pod, spine u % S, core uplink c) down and
// (destination leaf, u) down. With C = 0 (the default: two tiers) pods of a plane are not
// connected and leaves of different pods cannot reach each other. pathCount() and pathLinks()
// give the paths of a pair of nodes. Traffic between two nodes of the same leaf uses no uplink;
// nodes of different planes cannot reach each other through the fabric.
//
// The path of a flow is chosen by its source port (`pathSelection`). A port selects a path id in
// [0, P), P = pathsPerPlane() = U · max(1, C):
//   sourcePortModulo  id = (port − base) mod P (the emulated fabric, base 0)
//   table             an explicit (probed) port → id table; every id in [0, P) needs a port
// A pair across pods takes the id as its path (u = id mod U picks the leaf uplink, c = id div U
// the spine's core uplink); a pair inside one pod only sees the leaf uplink: its path is id mod U
// (pathOfPortFor, freePortForPathFor). With C = 0, P = U and both reductions are the identity.
// Further rules (a known switch hash) extend `pathSelection.rule`; the parser rejects rules it
// does not implement, naming the ones it does.
//
// Link health. A leaf–spine link is named by (plane, leaf, uplink) and has two directions (up:
// leaf → spine, down: spine → leaf); a spine–core link is named by (plane, pod, spine, core
// uplink) and has two directions (up: spine → core, down: core → spine). Its usable capacity is
// uplinkSpeedGbps (coreUplinkSpeedGbps for a spine–core link) × fraction, where the fraction is
// the smaller of what the description says (`spec.links`) and what telemetry set through
// setLinkState(); 0 means failed, 1 healthy. A `spec.links` entry names either a leaf uplink
// {plane, leaf, uplink, ...} or a spine–core link {plane, pod, spine, coreUplink, ...}, never
// both; its pod is absent for the empty pod and otherwise 1..63 characters, as the label.
// degradedLinks() sorts by LinkRef: per plane, spine–core links (empty leaf) come first. Bad input
// is refused with an error naming the field and changes nothing.
//
// Users. The planner plans paths across pods on their four link directions; the link monitor
// and C4D's explanations walk pathLinks; the Fabric CRD carries the three-tier fields and
// spine–core links (crds/fabric.yaml, with CEL rules matching this parser).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c4/common/error.h"

namespace c4::op::c4p {

using Json = nlohmann::json;

inline constexpr const char* kLeafLabel = "c4.dev/leaf";
inline constexpr const char* kPlaneLabel = "c4.dev/plane";
inline constexpr const char* kPodLabel = "c4.dev/pod";
inline constexpr int kMaxPlanes = 16;
inline constexpr int kMaxUplinksPerLeaf = 1024;
inline constexpr int kMaxCoreUplinksPerSpine = 1024;

enum class Direction { kUp, kDown, kBoth };
std::string_view directionName(Direction d);

// One link (both directions), as the description and telemetry name it: a leaf–spine link
// (plane, leaf, uplink), spine = -1 and pod empty; or a spine–core link (plane, pod, spine,
// uplink = the spine's core uplink), spine >= 0 and leaf empty. LinkRef{plane, leaf, uplink}
// names a leaf–spine link (the constructor keeps that form free of missing-initializer warnings).
struct LinkRef {
  int plane = 0;
  std::string leaf;
  int uplink = 0;
  std::string pod;
  int spine = -1;

  LinkRef() = default;
  LinkRef(int plane_index, std::string leaf_name, int uplink_index)
      : plane(plane_index), leaf(std::move(leaf_name)), uplink(uplink_index) {}
  // Core uplink `core_uplink` of spine `spine_index` of pod `pod_name` ("" = the unlabelled pod).
  static LinkRef spineTier(int plane_index, std::string pod_name, int spine_index,
                           int core_uplink) {
    LinkRef link;
    link.plane = plane_index;
    link.uplink = core_uplink;
    link.pod = std::move(pod_name);
    link.spine = spine_index;
    return link;
  }
  [[nodiscard]] bool isSpineTier() const { return spine >= 0; }
  friend auto operator<=>(const LinkRef&, const LinkRef&) = default;
};
// "plane0/leaf-1/uplink2"; a spine–core link "plane0/pod-a/spine1/core2" ("-" for the empty pod,
// which no label value can be).
std::string linkName(const LinkRef& link);

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
  std::map<std::uint16_t, int> port_table;  // table: port -> path id in [0, pathsPerPlane())
  std::vector<LinkState> links;             // spec.links: known failed/degraded links
  // Three tiers (after the two-tier fields, so positional initialisation keeps its meaning).
  int core_uplinks_per_spine = 0;     // 0: two tiers (pods are not connected)
  double core_uplink_speed_gbps = 0;  // required when core_uplinks_per_spine > 0, else 0
};

// Where a node sits, from its labels. NodeLocation{plane, leaf} is in the empty pod.
struct NodeLocation {
  int plane = 0;
  std::string leaf;
  std::string pod;  // "" without the c4.dev/pod label

  NodeLocation() = default;
  NodeLocation(int plane_index, std::string leaf_name, std::string pod_name = {})
      : plane(plane_index), leaf(std::move(leaf_name)), pod(std::move(pod_name)) {}
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
  [[nodiscard]] int spines() const { return spec_.spines; }
  [[nodiscard]] int coreUplinksPerSpine() const { return spec_.core_uplinks_per_spine; }
  // The path ids a source port can select: U · max(1, C).
  [[nodiscard]] int pathsPerPlane() const;
  [[nodiscard]] double hostLinkSpeedGbps() const { return spec_.host_link_speed_gbps; }

  // Telemetry: sets the capacity fraction in [0, 1] of one link (1 clears what telemetry said).
  // Refuses a plane or uplink out of range, an empty leaf or a fraction outside [0, 1]; for a
  // spine–core link, a fabric without core uplinks, a spine outside [0, spines) or a core uplink
  // outside [0, coreUplinksPerSpine).
  Status setLinkState(const LinkRef& link, double capacity_fraction,
                      Direction direction = Direction::kBoth);
  // Copies the telemetry states of `other` that are valid for this fabric (used when the
  // description changes and the telemetry view must survive); returns how many were dropped.
  int adoptTelemetry(const Fabric& other);

  // Usable capacity of one direction of a link, Gbps (spec and telemetry combined); kBoth gives
  // the smaller direction. The (plane, leaf, uplink) forms name a leaf–spine link.
  [[nodiscard]] double capacityGbps(int plane, std::string_view leaf, int uplink,
                                    Direction direction) const;
  [[nodiscard]] double capacityFraction(int plane, std::string_view leaf, int uplink,
                                        Direction direction) const;
  [[nodiscard]] double capacityGbps(const LinkRef& link, Direction direction) const;
  [[nodiscard]] double capacityFraction(const LinkRef& link, Direction direction) const;
  // Every link that is not fully healthy, spec and telemetry combined, sorted.
  [[nodiscard]] std::vector<LinkState> degradedLinks() const;

  // Paths between two nodes: 0 for the same leaf, across planes and across pods without core
  // uplinks; U inside a pod; U · C across pods.
  [[nodiscard]] int pathCount(const NodeLocation& src, const NodeLocation& dst) const;
  // The link directions path `path` from src to dst uses, in order along the path: 2 inside a
  // pod, 4 across pods. Errors (kInvalidArgument): a path outside [0, pathCount), different
  // planes, the same leaf, pods that are not connected.
  [[nodiscard]] Result<std::vector<std::pair<LinkRef, Direction>>> pathLinks(
      const NodeLocation& src, const NodeLocation& dst, int path) const;

  // The path id in [0, pathsPerPlane()) a source port selects, or -1 when the rule does not map
  // that port.
  [[nodiscard]] int pathOfPort(std::uint16_t port) const;
  // The lowest port in [first, last] that maps to path id `path` and is not in `used`.
  [[nodiscard]] std::optional<std::uint16_t> freePortForPath(
      int path, std::uint16_t first, std::uint16_t last, const std::set<std::uint16_t>& used) const;
  // The same for one pair of nodes: the path id reduced to the pair's paths (mod U inside a pod),
  // in [0, pathCount(src, dst)); -1 when the port is not mapped or the pair has no path.
  [[nodiscard]] int pathOfPortFor(std::uint16_t port, const NodeLocation& src,
                                  const NodeLocation& dst) const;
  // The lowest port in [first, last], not in `used`, with pathOfPortFor(port, src, dst) == path.
  [[nodiscard]] std::optional<std::uint16_t> freePortForPathFor(
      const NodeLocation& src, const NodeLocation& dst, int path, std::uint16_t first,
      std::uint16_t last, const std::set<std::uint16_t>& used) const;

  // A node's plane, pod and leaf from its labels; errors name the label.
  [[nodiscard]] Result<NodeLocation> locate(std::string_view node,
                                            const std::map<std::string, std::string>& labels) const;

 private:
  explicit Fabric(FabricSpec spec);
  Status validateLink(const LinkRef& link, std::string_view path) const;
  // The lowest free port in [first, last] whose path id is congruent to `path` modulo `modulus`
  // (a divisor of pathsPerPlane()).
  [[nodiscard]] std::optional<std::uint16_t> freePort(int path, int modulus, std::uint16_t first,
                                                      std::uint16_t last,
                                                      const std::set<std::uint16_t>& used) const;

  FabricSpec spec_;
  // (link, direction kUp/kDown) -> fraction, from the spec and from telemetry.
  std::map<std::pair<LinkRef, int>, double> spec_state_;
  std::map<std::pair<LinkRef, int>, double> telemetry_state_;
  std::vector<std::vector<std::uint16_t>> table_ports_;  // path -> sorted ports (table rule)
};

// The `status` object of the Fabric resource: observedGeneration, the degraded links with their
// source (a spine–core link as {plane, pod (absent for the empty pod), spine, coreUplink, ...}),
// and the current maximum link load (a fraction of capacity; > 1 means oversubscribed).
Json renderFabricStatus(const Fabric& fabric, std::int64_t observed_generation,
                        double max_link_load);

}  // namespace c4::op::c4p
