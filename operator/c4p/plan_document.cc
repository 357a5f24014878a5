#include "operator/c4p/plan_document.h"

#include <cmath>
#include <initializer_list>
#include <set>

namespace c4::op::c4p {
namespace {

Error invalid(const std::string& path, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "plan: " + path + ": " + what);
}

Status onlyKeys(const Json& obj, const std::string& path, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) return std::unexpected(invalid(path + "." + it.key(), "unknown field"));
  }
  return {};
}

Result<std::string> nodeName(const Json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string() || it->get_ref<const std::string&>().empty() ||
      it->get_ref<const std::string&>().size() > 253) {
    return std::unexpected(invalid(path + "." + key, "must be a string of 1..253 bytes"));
  }
  return it->get<std::string>();
}

Result<PlannedSubflow> parseSubflow(const Json& s, const std::string& path) {
  if (!s.is_object()) return std::unexpected(invalid(path, "must be an object"));
  C4_RETURN_IF_ERROR(onlyKeys(s, path, {"localPort", "pathId", "weight"}));
  PlannedSubflow out{0, -1, 1.0};
  if (auto it = s.find("localPort"); it != s.end()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
        it->get<std::int64_t>() > 65535) {
      return std::unexpected(invalid(path + ".localPort", "must be an integer in [0, 65535]"));
    }
    out.local_port = static_cast<std::uint16_t>(it->get<std::int64_t>());
  }
  if (auto it = s.find("pathId"); it != s.end()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < -1 ||
        it->get<std::int64_t>() > INT32_MAX) {
      return std::unexpected(invalid(path + ".pathId", "must be an integer >= -1"));
    }
    out.path = static_cast<int>(it->get<std::int64_t>());
  }
  if (auto it = s.find("weight"); it != s.end()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0 ||
        it->get<double>() > 1e6) {
      return std::unexpected(invalid(path + ".weight", "must be a number in [0, 1e6]"));
    }
    out.weight = it->get<double>();
  }
  return out;
}

}  // namespace

Result<PlanDocument> makePlanDocument(const JobPlan& plan, std::int64_t version, Mode mode) {
  if (version < 0) return makeError(ErrorCode::kInvalidArgument, "plan: version must be >= 0");
  PlanDocument doc;
  doc.version = version;
  doc.default_subflows = plan.subflows_per_connection;
  if (mode == Mode::kOff) return doc;
  doc.planes = plan.planes;
  for (const auto& p : plan.pairs) {
    PlannedPair out{p.local_node, p.peer_node, p.plane, p.subflows};
    if (mode == Mode::kAdvisory) {
      for (auto& s : out.subflows) {
        s.local_port = 0;
        s.weight = 1.0;
      }
    }
    doc.pairs.push_back(std::move(out));
  }
  return doc;
}

Json planDocumentJson(const PlanDocument& doc) {
  Json out = {{"version", doc.version}};
  if (doc.default_subflows > 0) out["default"] = {{"subflows", doc.default_subflows}};
  if (!doc.planes.empty()) {
    Json planes = Json::object();
    for (const auto& [node, plane] : doc.planes) planes[node] = plane;
    out["planes"] = planes;
  }
  if (!doc.pairs.empty()) {
    Json pairs = Json::array();
    for (const auto& p : doc.pairs) {
      Json subflows = Json::array();
      for (const auto& s : p.subflows) {
        subflows.push_back({{"localPort", s.local_port}, {"pathId", s.path}, {"weight", s.weight}});
      }
      pairs.push_back(
          {{"localNode", p.local_node}, {"peerNode", p.peer_node}, {"subflows", subflows}});
    }
    out["pairs"] = pairs;
  }
  return out;
}

std::string renderPlanDocument(const PlanDocument& doc) {
  return planDocumentJson(doc).dump();
}

Result<PlanDocument> parsePlanDocument(std::string_view text) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::unexpected(invalid("$", "not valid JSON"));
  if (!doc.is_object()) return std::unexpected(invalid("$", "must be an object"));
  C4_RETURN_IF_ERROR(onlyKeys(doc, "$", {"version", "default", "pairs", "planes"}));
  PlanDocument out;
  auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer() || v->get<std::int64_t>() < 0) {
    return std::unexpected(invalid("$.version", "must be an integer >= 0"));
  }
  out.version = v->get<std::int64_t>();
  if (auto d = doc.find("default"); d != doc.end()) {
    if (!d->is_object()) return std::unexpected(invalid("$.default", "must be an object"));
    C4_RETURN_IF_ERROR(onlyKeys(*d, "$.default", {"subflows"}));
    auto s = d->find("subflows");
    if (s == d->end() || !s->is_number_integer() || s->get<std::int64_t>() < 1 ||
        s->get<std::int64_t>() > kMaxSubflowsPerConnection) {
      return std::unexpected(invalid("$.default.subflows", "must be an integer in [1, 64]"));
    }
    out.default_subflows = static_cast<int>(s->get<std::int64_t>());
  }
  if (auto pl = doc.find("planes"); pl != doc.end()) {
    if (!pl->is_object()) return std::unexpected(invalid("$.planes", "must be an object"));
    for (auto it = pl->begin(); it != pl->end(); ++it) {
      std::string path = "$.planes." + it.key();
      if (it.key().empty() || it.key().size() > 253) {
        return std::unexpected(invalid(path, "node names are 1..253 bytes"));
      }
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
          it->get<std::int64_t>() > 32767) {
        return std::unexpected(invalid(path, "must be an integer in [0, 32767]"));
      }
      out.planes.emplace(it.key(), static_cast<int>(it->get<std::int64_t>()));
    }
  }
  if (auto ps = doc.find("pairs"); ps != doc.end()) {
    if (!ps->is_array()) return std::unexpected(invalid("$.pairs", "must be an array"));
    std::set<std::pair<std::string, std::string>> seen;
    for (std::size_t i = 0; i < ps->size(); ++i) {
      const Json& p = (*ps)[i];
      std::string path = "$.pairs[" + std::to_string(i) + "]";
      if (!p.is_object()) return std::unexpected(invalid(path, "must be an object"));
      C4_RETURN_IF_ERROR(onlyKeys(p, path, {"localNode", "peerNode", "subflows"}));
      PlannedPair pair;
      C4_ASSIGN_OR_RETURN(pair.local_node, nodeName(p, path, "localNode"));
      C4_ASSIGN_OR_RETURN(pair.peer_node, nodeName(p, path, "peerNode"));
      if (!seen.insert({pair.local_node, pair.peer_node}).second) {
        return std::unexpected(invalid(path, "duplicate (localNode, peerNode)"));
      }
      auto sf = p.find("subflows");
      if (sf == p.end() || !sf->is_array() || sf->empty() ||
          sf->size() > static_cast<std::size_t>(kMaxSubflowsPerConnection)) {
        return std::unexpected(invalid(path + ".subflows", "must be an array of 1..64 subflows"));
      }
      double total = 0;
      for (std::size_t j = 0; j < sf->size(); ++j) {
        C4_ASSIGN_OR_RETURN(auto s,
                            parseSubflow((*sf)[j], path + ".subflows[" + std::to_string(j) + "]"));
        total += s.weight;
        pair.subflows.push_back(s);
      }
      if (total <= 0) {
        return std::unexpected(invalid(path + ".subflows", "at least one weight must be > 0"));
      }
      auto plane = out.planes.find(pair.local_node);
      pair.plane = plane == out.planes.end() ? 0 : plane->second;
      out.pairs.push_back(std::move(pair));
    }
  }
  return out;
}

}  // namespace c4::op::c4p
