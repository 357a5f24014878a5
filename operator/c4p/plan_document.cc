#include "operator/c4p/plan_document.h"

#include <algorithm>

#include "c4/common/plan.h"

namespace c4::op::c4p {
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
      // The plugin applies nothing: the spares would be subflows like any other.
      if (plan.spare_subflows > 0) {
        out.subflows.resize(
            std::min(out.subflows.size(), static_cast<std::size_t>(plan.subflows_per_connection)));
      }
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
  // The plugin's own parser decides what is valid, so the operator cannot accept a document the
  // plugin would refuse (or the other way round).
  C4_ASSIGN_OR_RETURN(Plan plan, parsePlan(text));
  PlanDocument out;
  out.version = plan.version;
  out.default_subflows = plan.default_subflows;
  out.planes.insert(plan.planes.begin(), plan.planes.end());
  for (const auto& p : plan.pairs) {
    PlannedPair pair;
    pair.local_node = p.local_node;
    pair.peer_node = p.peer_node;
    auto plane = out.planes.find(pair.local_node);
    pair.plane = plane == out.planes.end() ? 0 : plane->second;
    for (const auto& sf : p.subflows) {
      pair.subflows.push_back(PlannedSubflow{sf.local_port, sf.path_id, sf.weight});
    }
    out.pairs.push_back(std::move(pair));
  }
  return out;
}

}  // namespace c4::op::c4p
