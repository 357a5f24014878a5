#include "operator/c4p/fabric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>

namespace c4::op::c4p {
namespace {

Error invalid(const std::string& path, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, path + ": " + what);
}

Status onlyKeys(const Json& obj, const std::string& path, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) return std::unexpected(invalid(path + "." + it.key(), "unknown field"));
  }
  return {};
}

// An integer field in [lo, hi]; `fallback` when absent (nullopt: required).
Result<int> intField(const Json& obj, const std::string& path, const char* key, long lo, long hi,
                     std::optional<int> fallback) {
  auto it = obj.find(key);
  std::string p = path + "." + key;
  if (it == obj.end()) {
    if (fallback) return *fallback;
    return std::unexpected(invalid(p, "required"));
  }
  if (!it->is_number_integer() || it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi) {
    return std::unexpected(invalid(
        p, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
  }
  return static_cast<int>(it->get<std::int64_t>());
}

Result<double> positiveNumber(const Json& obj, const std::string& path, const char* key,
                              const char* required = "required") {
  auto it = obj.find(key);
  std::string p = path + "." + key;
  if (it == obj.end()) return std::unexpected(invalid(p, required));
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0 ||
      it->get<double>() > 1e6) {
    return std::unexpected(invalid(p, "must be a number in (0, 1e6] (Gbps)"));
  }
  return it->get<double>();
}

Result<Direction> parseDirection(const Json& obj, const std::string& path) {
  auto it = obj.find("direction");
  if (it == obj.end()) return Direction::kBoth;
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    if (s == "Up") return Direction::kUp;
    if (s == "Down") return Direction::kDown;
    if (s == "Both") return Direction::kBoth;
  }
  return std::unexpected(invalid(path + ".direction", "must be one of Up, Down, Both"));
}

Result<FabricSpec> parseSpec(const Json& s, const std::string& path) {
  if (!s.is_object()) return std::unexpected(invalid(path, "must be an object"));
  C4_RETURN_IF_ERROR(
      onlyKeys(s, path,
               {"planes", "spines", "uplinksPerLeaf", "uplinkSpeedGbps", "hostLinkSpeedGbps",
                "coreUplinksPerSpine", "coreUplinkSpeedGbps", "pathSelection", "links"}));
  FabricSpec spec;
  C4_ASSIGN_OR_RETURN(spec.planes, intField(s, path, "planes", 1, kMaxPlanes, 1));
  C4_ASSIGN_OR_RETURN(spec.spines, intField(s, path, "spines", 1, kMaxUplinksPerLeaf, {}));
  C4_ASSIGN_OR_RETURN(spec.uplinks_per_leaf,
                      intField(s, path, "uplinksPerLeaf", 1, kMaxUplinksPerLeaf, {}));
  if (spec.uplinks_per_leaf % spec.spines != 0) {
    return std::unexpected(invalid(path + ".uplinksPerLeaf",
                                   "must be a multiple of spines (" + std::to_string(spec.spines) +
                                       "): uplink u goes to spine u % spines"));
  }
  C4_ASSIGN_OR_RETURN(spec.uplink_speed_gbps, positiveNumber(s, path, "uplinkSpeedGbps"));
  C4_ASSIGN_OR_RETURN(spec.host_link_speed_gbps, positiveNumber(s, path, "hostLinkSpeedGbps"));
  C4_ASSIGN_OR_RETURN(spec.core_uplinks_per_spine,
                      intField(s, path, "coreUplinksPerSpine", 0, kMaxCoreUplinksPerSpine, 0));
  if (spec.core_uplinks_per_spine > 0) {
    C4_ASSIGN_OR_RETURN(
        spec.core_uplink_speed_gbps,
        positiveNumber(s, path, "coreUplinkSpeedGbps", "required when coreUplinksPerSpine > 0"));
  } else if (s.contains("coreUplinkSpeedGbps")) {
    return std::unexpected(invalid(path + ".coreUplinkSpeedGbps",
                                   "only with coreUplinksPerSpine > 0 (a three-tier fabric)"));
  }
  // Path ids a source port selects: U per pod, U · C across pods.
  const int path_ids = spec.uplinks_per_leaf * std::max(1, spec.core_uplinks_per_spine);

  std::string ps_path = path + ".pathSelection";
  auto ps = s.find("pathSelection");
  if (ps == s.end()) return std::unexpected(invalid(ps_path, "required"));
  if (!ps->is_object()) return std::unexpected(invalid(ps_path, "must be an object"));
  C4_RETURN_IF_ERROR(onlyKeys(*ps, ps_path, {"rule", "sourcePortModulo", "table"}));
  auto rule = ps->find("rule");
  if (rule == ps->end() || !rule->is_string()) {
    return std::unexpected(invalid(ps_path + ".rule", "required: sourcePortModulo or table"));
  }
  const auto& rule_name = rule->get_ref<const std::string&>();
  if (rule_name == "sourcePortModulo") {
    spec.rule = PathRule::kSourcePortModulo;
    if (ps->contains("table")) {
      return std::unexpected(invalid(ps_path + ".table", "only with rule table"));
    }
    if (auto m = ps->find("sourcePortModulo"); m != ps->end()) {
      std::string m_path = ps_path + ".sourcePortModulo";
      if (!m->is_object()) return std::unexpected(invalid(m_path, "must be an object"));
      C4_RETURN_IF_ERROR(onlyKeys(*m, m_path, {"base"}));
      C4_ASSIGN_OR_RETURN(spec.port_base, intField(*m, m_path, "base", 0, 65535, 0));
    }
  } else if (rule_name == "table") {
    spec.rule = PathRule::kTable;
    if (ps->contains("sourcePortModulo")) {
      return std::unexpected(
          invalid(ps_path + ".sourcePortModulo", "only with rule sourcePortModulo"));
    }
    std::string t_path = ps_path + ".table";
    auto t = ps->find("table");
    if (t == ps->end()) return std::unexpected(invalid(t_path, "required with rule table"));
    if (!t->is_object()) return std::unexpected(invalid(t_path, "must be an object"));
    C4_RETURN_IF_ERROR(onlyKeys(*t, t_path, {"entries"}));
    auto e = t->find("entries");
    if (e == t->end() || !e->is_array() || e->empty()) {
      return std::unexpected(invalid(t_path + ".entries", "must be a non-empty array"));
    }
    for (std::size_t i = 0; i < e->size(); ++i) {
      const Json& entry = (*e)[i];
      std::string e_path = t_path + ".entries[" + std::to_string(i) + "]";
      if (!entry.is_object()) return std::unexpected(invalid(e_path, "must be an object"));
      C4_RETURN_IF_ERROR(onlyKeys(entry, e_path, {"port", "path"}));
      C4_ASSIGN_OR_RETURN(int port, intField(entry, e_path, "port", 1, 65535, {}));
      C4_ASSIGN_OR_RETURN(int p, intField(entry, e_path, "path", 0, path_ids - 1, {}));
      if (!spec.port_table.emplace(static_cast<std::uint16_t>(port), p).second) {
        return std::unexpected(invalid(e_path + ".port", "duplicate port " + std::to_string(port)));
      }
    }
    std::vector<bool> covered(static_cast<std::size_t>(path_ids), false);
    for (const auto& [port, p] : spec.port_table) covered[static_cast<std::size_t>(p)] = true;
    for (int p = 0; p < path_ids; ++p) {
      if (!covered[static_cast<std::size_t>(p)]) {
        return std::unexpected(
            invalid(t_path + ".entries", "no port maps to path " + std::to_string(p)));
      }
    }
  } else {
    return std::unexpected(
        invalid(ps_path + ".rule",
                "unsupported rule \"" + rule_name + "\" (supported: sourcePortModulo, table)"));
  }

  if (auto links = s.find("links"); links != s.end()) {
    std::string l_path = path + ".links";
    if (!links->is_array()) return std::unexpected(invalid(l_path, "must be an array"));
    std::set<std::pair<LinkRef, int>> seen;
    for (std::size_t i = 0; i < links->size(); ++i) {
      const Json& l = (*links)[i];
      std::string p = l_path + "[" + std::to_string(i) + "]";
      if (!l.is_object()) return std::unexpected(invalid(p, "must be an object"));
      C4_RETURN_IF_ERROR(onlyKeys(l, p,
                                  {"plane", "leaf", "uplink", "pod", "spine", "coreUplink",
                                   "direction", "capacityFraction", "reason"}));
      LinkState st;
      C4_ASSIGN_OR_RETURN(st.link.plane, intField(l, p, "plane", 0, spec.planes - 1, 0));
      if (l.contains("spine")) {
        // A spine–core link: (plane, pod, spine, coreUplink).
        if (l.contains("leaf")) {
          return std::unexpected(
              invalid(p,
                      "either leaf and uplink (a leaf–spine link) or spine and coreUplink (a "
                      "spine–core link), not both"));
        }
        if (l.contains("uplink")) {
          return std::unexpected(
              invalid(p + ".uplink", "only with leaf; a spine–core link names its coreUplink"));
        }
        if (spec.core_uplinks_per_spine == 0) {
          return std::unexpected(
              invalid(p + ".spine", "spine–core links need coreUplinksPerSpine > 0"));
        }
        if (auto pod = l.find("pod"); pod != l.end()) {
          if (!pod->is_string() || pod->get_ref<const std::string&>().empty() ||
              pod->get_ref<const std::string&>().size() > 63) {
            return std::unexpected(invalid(
                p + ".pod",
                "must be a pod name of 1..63 characters (omit it for nodes without the label)"));
          }
          st.link.pod = pod->get<std::string>();
        }
        C4_ASSIGN_OR_RETURN(st.link.spine, intField(l, p, "spine", 0, spec.spines - 1, {}));
        C4_ASSIGN_OR_RETURN(st.link.uplink,
                            intField(l, p, "coreUplink", 0, spec.core_uplinks_per_spine - 1, {}));
      } else {
        for (const char* key : {"pod", "coreUplink"}) {
          if (l.contains(key)) {
            return std::unexpected(invalid(p + "." + key, "only with spine (a spine–core link)"));
          }
        }
        auto leaf = l.find("leaf");
        if (leaf == l.end() || !leaf->is_string() || leaf->get_ref<const std::string&>().empty() ||
            leaf->get_ref<const std::string&>().size() > 63) {
          return std::unexpected(invalid(p + ".leaf", "must be a leaf name of 1..63 characters"));
        }
        st.link.leaf = leaf->get<std::string>();
        C4_ASSIGN_OR_RETURN(st.link.uplink,
                            intField(l, p, "uplink", 0, spec.uplinks_per_leaf - 1, {}));
      }
      C4_ASSIGN_OR_RETURN(st.direction, parseDirection(l, p));
      auto f = l.find("capacityFraction");
      if (f == l.end() || !f->is_number() || !std::isfinite(f->get<double>()) ||
          f->get<double>() < 0 || f->get<double>() > 1) {
        return std::unexpected(invalid(p + ".capacityFraction", "must be a number in [0, 1]"));
      }
      st.capacity_fraction = f->get<double>();
      if (auto r = l.find("reason"); r != l.end()) {
        if (!r->is_string()) return std::unexpected(invalid(p + ".reason", "must be a string"));
        st.reason = r->get<std::string>();
      }
      for (int d : {0, 1}) {
        if (st.direction != Direction::kBoth && static_cast<int>(st.direction) != d) continue;
        if (!seen.insert({st.link, d}).second) {
          return std::unexpected(invalid(p, "duplicate link " + linkName(st.link)));
        }
      }
      spec.links.push_back(std::move(st));
    }
  }
  return spec;
}

void applyState(std::map<std::pair<LinkRef, int>, double>& states, const LinkRef& link,
                Direction direction, double fraction) {
  for (int d : {0, 1}) {
    if (direction != Direction::kBoth && static_cast<int>(direction) != d) continue;
    if (fraction >= 1.0) {
      states.erase({link, d});
    } else {
      states[{link, d}] = fraction;
    }
  }
}

}  // namespace

std::string_view directionName(Direction d) {
  switch (d) {
    case Direction::kUp:
      return "Up";
    case Direction::kDown:
      return "Down";
    case Direction::kBoth:
      return "Both";
  }
  return "Both";
}

std::string_view pathRuleName(PathRule r) {
  return r == PathRule::kTable ? "table" : "sourcePortModulo";
}

std::string linkName(const LinkRef& link) {
  if (link.isSpineTier()) {
    return "plane" + std::to_string(link.plane) + "/" + (link.pod.empty() ? "-" : link.pod) +
           "/spine" + std::to_string(link.spine) + "/core" + std::to_string(link.uplink);
  }
  return "plane" + std::to_string(link.plane) + "/" + link.leaf + "/uplink" +
         std::to_string(link.uplink);
}

Fabric::Fabric(FabricSpec spec) : spec_(std::move(spec)) {
  for (const auto& st : spec_.links) {
    // Two entries for one direction cannot happen (the parser refuses duplicates); the smaller
    // fraction wins if a caller-built spec has them.
    for (int d : {0, 1}) {
      if (st.direction != Direction::kBoth && static_cast<int>(st.direction) != d) continue;
      auto key = std::make_pair(st.link, d);
      auto it = spec_state_.find(key);
      if (st.capacity_fraction < 1.0 &&
          (it == spec_state_.end() || it->second > st.capacity_fraction)) {
        spec_state_[key] = st.capacity_fraction;
      }
    }
  }
  if (spec_.rule == PathRule::kTable) {
    table_ports_.assign(static_cast<std::size_t>(pathsPerPlane()), {});
    for (const auto& [port, p] : spec_.port_table) {
      table_ports_[static_cast<std::size_t>(p)].push_back(port);
    }
  }
}

Result<Fabric> Fabric::fromJson(const Json& object) {
  if (!object.is_object()) return std::unexpected(invalid("$", "must be an object"));
  if (!object.contains("kind")) {
    C4_ASSIGN_OR_RETURN(auto spec, parseSpec(object, "spec"));
    return Fabric(std::move(spec));
  }
  C4_RETURN_IF_ERROR(onlyKeys(object, "$", {"apiVersion", "kind", "metadata", "spec", "status"}));
  if (object["kind"] != "Fabric") return std::unexpected(invalid("kind", "must be Fabric"));
  auto api = object.find("apiVersion");
  if (api == object.end() || *api != "c4.dev/v1alpha1") {
    return std::unexpected(invalid("apiVersion", "must be c4.dev/v1alpha1"));
  }
  auto spec = object.find("spec");
  if (spec == object.end()) return std::unexpected(invalid("spec", "required"));
  C4_ASSIGN_OR_RETURN(auto parsed, parseSpec(*spec, "spec"));
  return Fabric(std::move(parsed));
}

Result<Fabric> Fabric::parse(std::string_view json_text) {
  Json doc = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::unexpected(invalid("$", "not valid JSON"));
  return fromJson(doc);
}

Result<Fabric> Fabric::fromSpec(FabricSpec spec) {
  // One validation path: render the fields the parser checks and parse them back.
  Json s = {{"planes", spec.planes},
            {"spines", spec.spines},
            {"uplinksPerLeaf", spec.uplinks_per_leaf},
            {"uplinkSpeedGbps", spec.uplink_speed_gbps},
            {"hostLinkSpeedGbps", spec.host_link_speed_gbps}};
  // Rendered when set, so a two-tier spec renders as before and nonsense is refused by the parser.
  if (spec.core_uplinks_per_spine != 0) {
    s["coreUplinksPerSpine"] = spec.core_uplinks_per_spine;
    s["coreUplinkSpeedGbps"] = spec.core_uplink_speed_gbps;
  } else if (spec.core_uplink_speed_gbps != 0) {
    s["coreUplinkSpeedGbps"] = spec.core_uplink_speed_gbps;
  }
  if (spec.rule == PathRule::kSourcePortModulo) {
    s["pathSelection"] = {{"rule", "sourcePortModulo"},
                          {"sourcePortModulo", {{"base", spec.port_base}}}};
  } else {
    Json entries = Json::array();
    for (const auto& [port, p] : spec.port_table) entries.push_back({{"port", port}, {"path", p}});
    s["pathSelection"] = {{"rule", "table"}, {"table", {{"entries", entries}}}};
  }
  Json links = Json::array();
  for (const auto& st : spec.links) {
    Json l = {{"plane", st.link.plane},
              {"direction", directionName(st.direction)},
              {"capacityFraction", st.capacity_fraction},
              {"reason", st.reason}};
    if (st.link.spine != -1) {
      if (!st.link.pod.empty()) l["pod"] = st.link.pod;
      if (!st.link.leaf.empty()) l["leaf"] = st.link.leaf;  // refused: not both
      l["spine"] = st.link.spine;
      l["coreUplink"] = st.link.uplink;
    } else {
      if (!st.link.pod.empty()) l["pod"] = st.link.pod;  // refused: only with spine
      l["leaf"] = st.link.leaf;
      l["uplink"] = st.link.uplink;
    }
    links.push_back(std::move(l));
  }
  if (!links.empty()) s["links"] = links;
  C4_ASSIGN_OR_RETURN(auto parsed, parseSpec(s, "spec"));
  return Fabric(std::move(parsed));
}

Status Fabric::validateLink(const LinkRef& link, std::string_view path) const {
  std::string p(path);
  if (link.plane < 0 || link.plane >= spec_.planes) {
    return std::unexpected(
        invalid(p + ".plane", "must be in [0, " + std::to_string(spec_.planes - 1) + "]"));
  }
  if (link.spine != -1) {
    if (spec_.core_uplinks_per_spine == 0) {
      return std::unexpected(invalid(p + ".spine",
                                     "spine–core links need coreUplinksPerSpine > 0 (a three-tier "
                                     "fabric); -1 names a leaf uplink"));
    }
    if (link.spine < 0 || link.spine >= spec_.spines) {
      return std::unexpected(invalid(p + ".spine", "must be -1 (a leaf uplink) or in [0, " +
                                                       std::to_string(spec_.spines - 1) + "]"));
    }
    if (!link.leaf.empty()) {
      return std::unexpected(invalid(p + ".leaf", "must be empty for a spine–core link"));
    }
    if (link.pod.size() > 63) {
      return std::unexpected(invalid(p + ".pod", "must be a pod name of 0..63 characters"));
    }
    if (link.uplink < 0 || link.uplink >= spec_.core_uplinks_per_spine) {
      return std::unexpected(invalid(
          p + ".uplink",
          "core uplink must be in [0, " + std::to_string(spec_.core_uplinks_per_spine - 1) + "]"));
    }
    return {};
  }
  if (!link.pod.empty()) {
    return std::unexpected(
        invalid(p + ".pod", "must be empty for a leaf uplink (leaves are named per plane)"));
  }
  if (link.leaf.empty() || link.leaf.size() > 63) {
    return std::unexpected(invalid(p + ".leaf", "must be a leaf name of 1..63 characters"));
  }
  if (link.uplink < 0 || link.uplink >= spec_.uplinks_per_leaf) {
    return std::unexpected(invalid(
        p + ".uplink", "must be in [0, " + std::to_string(spec_.uplinks_per_leaf - 1) + "]"));
  }
  return {};
}

Status Fabric::setLinkState(const LinkRef& link, double capacity_fraction, Direction direction) {
  C4_RETURN_IF_ERROR(validateLink(link, "link"));
  if (!std::isfinite(capacity_fraction) || capacity_fraction < 0 || capacity_fraction > 1) {
    return std::unexpected(invalid("capacityFraction", "must be a number in [0, 1]"));
  }
  applyState(telemetry_state_, link, direction, capacity_fraction);
  return {};
}

int Fabric::adoptTelemetry(const Fabric& other) {
  int dropped = 0;
  for (const auto& [key, fraction] : other.telemetry_state_) {
    if (validateLink(key.first, "link")) {
      telemetry_state_[key] = fraction;
    } else {
      ++dropped;
    }
  }
  return dropped;
}

double Fabric::capacityFraction(int plane, std::string_view leaf, int uplink,
                                Direction direction) const {
  return capacityFraction(LinkRef{plane, std::string(leaf), uplink}, direction);
}

double Fabric::capacityGbps(int plane, std::string_view leaf, int uplink,
                            Direction direction) const {
  return capacityGbps(LinkRef{plane, std::string(leaf), uplink}, direction);
}

double Fabric::capacityFraction(const LinkRef& link, Direction direction) const {
  double f = 1.0;
  for (int d : {0, 1}) {
    if (direction != Direction::kBoth && static_cast<int>(direction) != d) continue;
    auto key = std::make_pair(link, d);
    if (auto it = spec_state_.find(key); it != spec_state_.end()) f = std::min(f, it->second);
    if (auto it = telemetry_state_.find(key); it != telemetry_state_.end()) {
      f = std::min(f, it->second);
    }
  }
  return f;
}

double Fabric::capacityGbps(const LinkRef& link, Direction direction) const {
  double speed = link.isSpineTier() ? spec_.core_uplink_speed_gbps : spec_.uplink_speed_gbps;
  return speed * capacityFraction(link, direction);
}

std::vector<LinkState> Fabric::degradedLinks() const {
  std::map<std::pair<LinkRef, int>, LinkState> merged;
  for (const auto& st : spec_.links) {
    for (int d : {0, 1}) {
      if (st.direction != Direction::kBoth && static_cast<int>(st.direction) != d) continue;
      if (st.capacity_fraction >= 1.0) continue;
      merged[{st.link, d}] =
          LinkState{st.link, Direction::kBoth, st.capacity_fraction, st.reason, "spec"};
    }
  }
  for (const auto& [key, fraction] : telemetry_state_) {
    auto it = merged.find(key);
    if (it == merged.end() || fraction < it->second.capacity_fraction) {
      merged[key] = LinkState{key.first, Direction::kBoth, fraction, "", "telemetry"};
    }
  }
  std::vector<LinkState> out;
  for (auto& [key, st] : merged) {
    // The two directions of a link fold into one Both entry when they agree.
    if (!out.empty() && out.back().link == key.first && key.second == 1 &&
        out.back().direction == Direction::kUp &&
        out.back().capacity_fraction == st.capacity_fraction && out.back().source == st.source &&
        out.back().reason == st.reason) {
      out.back().direction = Direction::kBoth;
      continue;
    }
    st.direction = key.second == 0 ? Direction::kUp : Direction::kDown;
    out.push_back(std::move(st));
  }
  return out;
}

int Fabric::pathsPerPlane() const {
  return spec_.uplinks_per_leaf * std::max(1, spec_.core_uplinks_per_spine);
}

int Fabric::pathCount(const NodeLocation& src, const NodeLocation& dst) const {
  if (src.plane != dst.plane || src.leaf == dst.leaf) return 0;
  if (src.pod == dst.pod) return spec_.uplinks_per_leaf;
  return spec_.uplinks_per_leaf * spec_.core_uplinks_per_spine;
}

Result<std::vector<std::pair<LinkRef, Direction>>> Fabric::pathLinks(const NodeLocation& src,
                                                                     const NodeLocation& dst,
                                                                     int path) const {
  if (src.plane != dst.plane) {
    return makeError(ErrorCode::kInvalidArgument,
                     "planes " + std::to_string(src.plane) + " and " + std::to_string(dst.plane) +
                         " cannot reach each other through the fabric");
  }
  if (src.leaf == dst.leaf) {
    if (src.pod != dst.pod) {
      return makeError(ErrorCode::kInvalidArgument, "leaf " + src.leaf + " is in two pods (\"" +
                                                        src.pod + "\" and \"" + dst.pod +
                                                        "\"): a leaf belongs to one pod");
    }
    return makeError(ErrorCode::kInvalidArgument,
                     "leaf " + src.leaf + ": traffic inside a leaf uses no uplink (no path)");
  }
  const int u_count = spec_.uplinks_per_leaf;
  if (src.pod != dst.pod && spec_.core_uplinks_per_spine == 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "pods \"" + src.pod + "\" and \"" + dst.pod + "\" of plane " +
                         std::to_string(src.plane) +
                         " are not connected (coreUplinksPerSpine is 0: two tiers)");
  }
  const int count = pathCount(src, dst);
  if (path < 0 || path >= count) {
    return makeError(
        ErrorCode::kInvalidArgument,
        "path " + std::to_string(path) + " is outside [0, " + std::to_string(count - 1) + "]");
  }
  const int u = path % u_count;
  std::vector<std::pair<LinkRef, Direction>> out;
  out.emplace_back(LinkRef{src.plane, src.leaf, u}, Direction::kUp);
  if (src.pod != dst.pod) {
    const int c = path / u_count;
    const int spine = u % spec_.spines;
    out.emplace_back(LinkRef::spineTier(src.plane, src.pod, spine, c), Direction::kUp);
    out.emplace_back(LinkRef::spineTier(dst.plane, dst.pod, spine, c), Direction::kDown);
  }
  out.emplace_back(LinkRef{dst.plane, dst.leaf, u}, Direction::kDown);
  return out;
}

int Fabric::pathOfPort(std::uint16_t port) const {
  if (spec_.rule == PathRule::kTable) {
    auto it = spec_.port_table.find(port);
    return it == spec_.port_table.end() ? -1 : it->second;
  }
  int n = pathsPerPlane();
  return ((static_cast<int>(port) - spec_.port_base) % n + n) % n;
}

int Fabric::pathOfPortFor(std::uint16_t port, const NodeLocation& src,
                          const NodeLocation& dst) const {
  int count = pathCount(src, dst);
  int id = pathOfPort(port);
  if (count == 0 || id < 0) return -1;
  return id % count;  // count is U (inside a pod) or U · C = pathsPerPlane() (across pods)
}

std::optional<std::uint16_t> Fabric::freePort(int path, int modulus, std::uint16_t first,
                                              std::uint16_t last,
                                              const std::set<std::uint16_t>& used) const {
  if (path < 0 || path >= modulus || first > last) return std::nullopt;
  if (spec_.rule == PathRule::kTable) {
    // Every id congruent to `path`: one id per core uplink for a pair inside a pod.
    std::optional<std::uint16_t> best;
    for (std::size_t id = static_cast<std::size_t>(path); id < table_ports_.size();
         id += static_cast<std::size_t>(modulus)) {
      for (std::uint16_t port : table_ports_[id]) {
        if (best && port >= *best) break;
        if (port >= first && port <= last && !used.contains(port)) {
          best = port;
          break;
        }
      }
    }
    return best;
  }
  int offset = ((path + spec_.port_base - static_cast<int>(first)) % modulus + modulus) % modulus;
  for (long port = static_cast<long>(first) + offset; port <= last; port += modulus) {
    if (!used.contains(static_cast<std::uint16_t>(port))) return static_cast<std::uint16_t>(port);
  }
  return std::nullopt;
}

std::optional<std::uint16_t> Fabric::freePortForPath(int path, std::uint16_t first,
                                                     std::uint16_t last,
                                                     const std::set<std::uint16_t>& used) const {
  return freePort(path, pathsPerPlane(), first, last, used);
}

std::optional<std::uint16_t> Fabric::freePortForPathFor(const NodeLocation& src,
                                                        const NodeLocation& dst, int path,
                                                        std::uint16_t first, std::uint16_t last,
                                                        const std::set<std::uint16_t>& used) const {
  int count = pathCount(src, dst);
  if (count == 0) return std::nullopt;
  return freePort(path, count, first, last, used);
}

Result<NodeLocation> Fabric::locate(std::string_view node,
                                    const std::map<std::string, std::string>& labels) const {
  std::string who = "node " + std::string(node);
  NodeLocation loc;
  auto leaf = labels.find(kLeafLabel);
  if (leaf == labels.end() || leaf->second.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     who + ": label " + std::string(kLeafLabel) + " is missing or empty");
  }
  if (leaf->second.size() > 63) {
    return makeError(ErrorCode::kInvalidArgument,
                     who + ": label " + std::string(kLeafLabel) + " is longer than 63 characters");
  }
  loc.leaf = leaf->second;
  if (auto pod = labels.find(kPodLabel); pod != labels.end()) {
    if (pod->second.empty() || pod->second.size() > 63) {
      return makeError(ErrorCode::kInvalidArgument,
                       who + ": label " + std::string(kPodLabel) +
                           " must be 1..63 characters (omit it for the plane's single pod)");
    }
    loc.pod = pod->second;
  }
  if (auto plane = labels.find(kPlaneLabel); plane != labels.end()) {
    const std::string& v = plane->second;
    bool digits = !v.empty() && v.size() <= 5 &&
                  std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    int p = digits ? std::stoi(v) : -1;
    if (p < 0 || p >= spec_.planes) {
      return makeError(ErrorCode::kInvalidArgument,
                       who + ": label " + std::string(kPlaneLabel) + "=\"" + v +
                           "\" must be an integer in [0, " + std::to_string(spec_.planes - 1) +
                           "] (the fabric's planes)");
    }
    loc.plane = p;
  }
  return loc;
}

Json renderFabricStatus(const Fabric& fabric, std::int64_t observed_generation,
                        double max_link_load) {
  Json links = Json::array();
  for (const auto& st : fabric.degradedLinks()) {
    if (st.link.isSpineTier()) {
      Json l = {{"plane", st.link.plane},
                {"spine", st.link.spine},
                {"coreUplink", st.link.uplink},
                {"direction", directionName(st.direction)},
                {"capacityFraction", st.capacity_fraction},
                {"source", st.source}};
      if (!st.link.pod.empty()) l["pod"] = st.link.pod;
      links.push_back(std::move(l));
      continue;
    }
    links.push_back({{"plane", st.link.plane},
                     {"leaf", st.link.leaf},
                     {"uplink", st.link.uplink},
                     {"direction", directionName(st.direction)},
                     {"capacityFraction", st.capacity_fraction},
                     {"source", st.source}});
  }
  // A string keeps the printer column readable ("1.25") and the value exact to 3 decimals.
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", max_link_load);
  return {{"observedGeneration", observed_generation},
          {"degradedLinks", static_cast<std::int64_t>(links.size())},
          {"links", links},
          {"maxLinkLoad", buf}};
}

}  // namespace c4::op::c4p
