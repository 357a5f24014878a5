#include "c4/common/plan.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "c4/common/hash.h"
#include "c4/common/log.h"

namespace c4 {
namespace {

using nlohmann::json;

Error invalid(const std::string& path, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "plan: " + path + ": " + what);
}

Status onlyKeys(const json& obj, const std::string& path, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) return std::unexpected(invalid(path + "." + it.key(), "unknown field"));
  }
  return {};
}

Result<std::string> nodeName(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return std::unexpected(invalid(path + "." + key, "must be a non-empty string"));
  }
  if (it->get_ref<const std::string&>().size() > 253) {
    return std::unexpected(invalid(path + "." + key, "longer than 253 bytes"));
  }
  return it->get<std::string>();
}

Result<PlannedSubflow> parseSubflow(const json& s, const std::string& path) {
  if (!s.is_object()) return std::unexpected(invalid(path, "must be an object"));
  C4_RETURN_IF_ERROR(onlyKeys(s, path, {"localPort", "pathId", "weight"}));
  PlannedSubflow out;
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
    out.path_id = static_cast<std::int32_t>(it->get<std::int64_t>());
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

std::uint64_t nodeHash(std::string_view node) {
  if (node.empty()) return 0;
  const std::uint64_t h = fnv1a64(node.data(), node.size());
  return h == 0 ? 1 : h;
}

const PlanPair* Plan::find(std::string_view localNode, std::uint64_t peerHash) const {
  for (const auto& p : pairs) {
    if (p.local_node == localNode && p.peer_node_hash == peerHash) return &p;
  }
  return nullptr;
}

bool Plan::mentions(std::string_view node) const {
  for (const auto& p : pairs) {
    if (p.local_node == node || p.peer_node == node) return true;
  }
  return false;
}

int Plan::planeOf(std::string_view node, std::string* why) const {
  auto unknown = [&](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return kPlaneUnknown;
  };
  if (planes.empty()) return unknown("the plan names no planes");
  auto self = planes.find(node);
  if (self == planes.end()) return unknown("the plan names no plane for node " + std::string(node));
  for (const auto& p : pairs) {
    for (const std::string* n : {&p.local_node, &p.peer_node}) {
      if (!planes.contains(*n)) return unknown("the plan names no plane for node " + *n);
    }
  }
  return self->second;
}

Result<Plan> parsePlan(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::unexpected(invalid("$", "not valid JSON"));
  if (!doc.is_object()) return std::unexpected(invalid("$", "must be an object"));
  C4_RETURN_IF_ERROR(onlyKeys(doc, "$", {"version", "default", "pairs", "planes"}));
  Plan plan;
  auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer() || v->get<std::int64_t>() < 0) {
    return std::unexpected(invalid("$.version", "must be an integer >= 0"));
  }
  plan.version = v->get<std::int64_t>();
  if (auto d = doc.find("default"); d != doc.end()) {
    if (!d->is_object()) return std::unexpected(invalid("$.default", "must be an object"));
    C4_RETURN_IF_ERROR(onlyKeys(*d, "$.default", {"subflows"}));
    auto s = d->find("subflows");
    if (s == d->end() || !s->is_number_integer() || s->get<std::int64_t>() < 1 ||
        s->get<std::int64_t>() > static_cast<std::int64_t>(kMaxSubflows)) {
      return std::unexpected(invalid("$.default.subflows", "must be an integer in [1, 64]"));
    }
    plan.default_subflows = static_cast<int>(s->get<std::int64_t>());
  }
  if (auto ps = doc.find("pairs"); ps != doc.end()) {
    if (!ps->is_array()) return std::unexpected(invalid("$.pairs", "must be an array"));
    std::set<std::pair<std::string, std::string>> seen;
    for (std::size_t i = 0; i < ps->size(); ++i) {
      const json& p = (*ps)[i];
      std::string path = "$.pairs[" + std::to_string(i) + "]";
      if (!p.is_object()) return std::unexpected(invalid(path, "must be an object"));
      C4_RETURN_IF_ERROR(onlyKeys(p, path, {"localNode", "peerNode", "subflows"}));
      PlanPair pair;
      C4_ASSIGN_OR_RETURN(pair.local_node, nodeName(p, path, "localNode"));
      C4_ASSIGN_OR_RETURN(pair.peer_node, nodeName(p, path, "peerNode"));
      pair.peer_node_hash = nodeHash(pair.peer_node);
      if (!seen.insert({pair.local_node, pair.peer_node}).second) {
        return std::unexpected(invalid(path, "duplicate (localNode, peerNode)"));
      }
      auto sf = p.find("subflows");
      if (sf == p.end() || !sf->is_array() || sf->empty() || sf->size() > kMaxSubflows) {
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
      plan.pairs.push_back(std::move(pair));
    }
  }
  if (auto pl = doc.find("planes"); pl != doc.end()) {
    if (!pl->is_object()) return std::unexpected(invalid("$.planes", "must be an object"));
    for (auto it = pl->begin(); it != pl->end(); ++it) {
      std::string path = "$.planes." + it.key();
      if (it.key().empty() || it.key().size() > 253) {
        return std::unexpected(invalid(path, "node names are 1..253 bytes"));
      }
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
          it->get<std::int64_t>() > kMaxPlaneId) {
        return std::unexpected(invalid(path, "must be an integer in [0, 32767]"));
      }
      plan.planes.emplace(it.key(), static_cast<int>(it->get<std::int64_t>()));
    }
  }
  return plan;
}

Result<Plan> loadPlanFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(errnoError("plan: cannot open " + path, errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1u << 24)) {
    return makeError(ErrorCode::kInvalidArgument, "plan: " + path + " is larger than 16 MiB");
  }
  auto plan = parsePlan(ss.str());
  if (!plan) return std::unexpected(plan.error().withContext(path));
  return plan;
}

PlanWatcher::PlanWatcher(std::string path) : path_(std::move(path)) {}

std::shared_ptr<const Plan> PlanWatcher::current() const {
  std::lock_guard lock(mu_);
  return plan_;
}

std::string PlanWatcher::unusable() const {
  std::lock_guard lock(mu_);
  return plan_ ? std::string{} : load_error_;
}

bool PlanWatcher::poll() {
  static const Logger log("nccl-net-c4");
  if (path_.empty()) return false;
  struct stat st {};
  std::string warning;
  bool changed = false;
  if (::stat(path_.c_str(), &st) != 0) {
    warning = errnoError("plan file " + path_, errno).toString();
    std::lock_guard lock(mu_);
    statted_ = false;
    load_error_.clear();  // not there (yet): a plan may still come
  } else {
    std::lock_guard lock(mu_);
    changed = !statted_ || st.st_mtim.tv_sec != mtime_.tv_sec ||
              st.st_mtim.tv_nsec != mtime_.tv_nsec || st.st_size != size_ || st.st_ino != inode_;
    statted_ = true;
    mtime_ = st.st_mtim;
    size_ = st.st_size;
    inode_ = st.st_ino;
  }
  bool applied = false;
  if (changed) {
    auto plan = loadPlanFile(path_);
    if (!plan) {
      warning = plan.error().toString();
      std::lock_guard lock(mu_);
      load_error_ = warning;
    } else {
      auto shared = std::make_shared<const Plan>(std::move(*plan));
      std::lock_guard lock(mu_);
      bool sameVersion = plan_ && plan_->version == shared->version;
      plan_ = shared;
      applied = true;
      last_warning_.clear();
      load_error_.clear();
      log.info(sameVersion ? "plan reloaded (same version)" : "plan applied",
               {{"file", path_}, {"version", shared->version}, {"pairs", shared->pairs.size()}});
    }
  }
  if (!warning.empty()) {
    std::lock_guard lock(mu_);
    if (warning != last_warning_) {
      last_warning_ = warning;
      log.warn(plan_ ? "plan file unusable; keeping the previous plan"
                     : "plan file unusable; using the default spread",
               {{"error", warning}});
    }
  }
  return applied;
}

}  // namespace c4
