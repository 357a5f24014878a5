#include "c4/node_plugin/attribution.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <vector>

namespace c4::node {
namespace {

bool isHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// A UID in 8-4-4-4-12 form with `sep` as separator; returns it lower-case with dashes.
std::optional<std::string> normaliseUid(std::string_view s, char sep) {
  if (s.size() != 36) return std::nullopt;
  std::string out(s);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool dash_pos = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_pos) {
      if (out[i] != sep) return std::nullopt;
      out[i] = '-';
    } else {
      if (!isHex(out[i])) return std::nullopt;
      if (out[i] >= 'A' && out[i] <= 'F') out[i] = static_cast<char>(out[i] - 'A' + 'a');
    }
  }
  return out;
}

// The pod UID one path component names, if any.
std::optional<std::string> uidFromComponent(std::string_view c) {
  // cgroupfs: "pod<uid>"
  if (c.starts_with("pod")) {
    if (auto uid = normaliseUid(c.substr(3), '-')) return uid;
  }
  // systemd: "kubepods[-<qos>]-pod<uid_>.slice"
  if (c.starts_with("kubepods") && c.ends_with(".slice")) {
    auto pos = c.rfind("-pod");
    if (pos != std::string_view::npos) {
      std::string_view rest = c.substr(pos + 4, c.size() - pos - 4 - 6);
      if (auto uid = normaliseUid(rest, '_')) return uid;
    }
  }
  return std::nullopt;
}

std::optional<std::string> uidFromPath(std::string_view path) {
  std::optional<std::string> found;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (auto uid = uidFromComponent(path.substr(start, end - start))) found = uid;
    start = end + 1;
  }
  return found;
}

std::optional<std::int64_t> parseInt(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The string at a JSON pointer ("" when absent or not a string).
std::string stringAt(const kube::Json& j, const char* pointer) {
  const kube::Json::json_pointer p(pointer);
  if (!j.contains(p)) return {};
  const kube::Json& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : std::string{};
}

}  // namespace

Result<std::optional<std::string>> podUidFromCgroup(std::string_view content) {
  std::optional<std::string> uid;
  std::size_t start = 0;
  while (start < content.size()) {
    std::size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    start = end + 1;
    // hierarchy-ID:controller-list:cgroup-path (the path may itself contain ':').
    auto c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    auto c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    auto found = uidFromPath(line.substr(c2 + 1));
    if (!found) continue;
    if (uid && *uid != *found) {
      return makeError(ErrorCode::kInvalidArgument,
                       "cgroup names two pods: " + *uid + " and " + *found);
    }
    uid = std::move(found);
  }
  return uid;
}

PodInfo podInfoFromJson(const kube::Json& pod) {
  PodInfo info;
  info.ns = kube::objectNamespace(pod);
  info.name = kube::objectName(pod);
  info.uid = stringAt(pod, "/metadata/uid");
  info.node = stringAt(pod, "/spec/nodeName");
  info.job = kube::labelOf(pod, kJobLabel);
  info.replica_index = kube::labelOf(pod, kReplicaIndexLabel);
  info.restart_attempt = kube::labelOf(pod, kRestartAttemptLabel);
  static const kube::Json::json_pointer kContainers("/spec/containers");
  if (!pod.contains(kContainers) || !pod.at(kContainers).is_array()) return info;
  for (const auto& c : pod.at(kContainers)) {
    if (!c.is_object() || !c.contains("env") || !c.at("env").is_array()) continue;
    for (const auto& e : c.at("env")) {
      if (stringAt(e, "/name") != kNprocEnv) continue;
      auto v = parseInt(stringAt(e, "/value"));
      if (v && *v >= 1 && *v <= 4096) {
        info.nproc_per_node = static_cast<std::int32_t>(*v);
        return info;
      }
    }
  }
  return info;
}

void StorePodDirectory::addIndexes(kube::Store& store) {
  store.addIndex("uid", [](const kube::Json& pod) -> std::vector<std::string> {
    std::string uid = stringAt(pod, "/metadata/uid");
    if (uid.empty()) return {};
    return {uid};
  });
}

std::optional<PodInfo> StorePodDirectory::byUid(std::string_view uid) const {
  auto pods = store_.byIndex("uid", std::string(uid));
  if (pods.size() != 1) return std::nullopt;
  return podInfoFromJson(pods.front());
}

std::optional<PodInfo> StorePodDirectory::byName(std::string_view ns, std::string_view name) const {
  auto pod = store_.get(kube::objectKey(ns, name));
  if (!pod) return std::nullopt;
  return podInfoFromJson(*pod);
}

Result<AttributionMode> parseAttributionMode(std::string_view text) {
  if (text == "cgroup") return AttributionMode::kCgroup;
  if (text == "identity") return AttributionMode::kIdentity;
  if (text == "auto") return AttributionMode::kAuto;
  return makeError(
      ErrorCode::kInvalidArgument,
      "attribution: expected cgroup, identity or auto, got '" + std::string(text) + "'");
}

std::string_view attributionModeName(AttributionMode mode) noexcept {
  switch (mode) {
    case AttributionMode::kCgroup:
      return "cgroup";
    case AttributionMode::kIdentity:
      return "identity";
    case AttributionMode::kAuto:
      return "auto";
  }
  return "auto";
}

std::string_view attributionPathName(AttributionPath path) noexcept {
  return path == AttributionPath::kCgroup ? "cgroup" : "identity";
}

std::string_view dropReasonName(DropReason reason) noexcept {
  switch (reason) {
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kNoCredentials:
      return "no_credentials";
    case DropReason::kDecode:
      return "decode";
    case DropReason::kPidNotVisible:
      return "pid_not_visible";
    case DropReason::kProcessGone:
      return "process_gone";
    case DropReason::kCgroupConflict:
      return "cgroup_conflict";
    case DropReason::kNotAPod:
      return "not_a_pod";
    case DropReason::kPodsNotSynced:
      return "pods_not_synced";
    case DropReason::kPodUnknown:
      return "pod_unknown";
    case DropReason::kPodNotOnNode:
      return "pod_not_on_node";
    case DropReason::kPodMismatch:
      return "pod_mismatch";
    case DropReason::kNodeMismatch:
      return "node_mismatch";
    case DropReason::kJobMismatch:
      return "job_mismatch";
    case DropReason::kPodLabelsInvalid:
      return "pod_labels_invalid";
    case DropReason::kRankOutOfRange:
      return "rank_out_of_range";
    case DropReason::kAttemptMismatch:
      return "attempt_mismatch";
    case DropReason::kReassembly:
      return "reassembly";
    case DropReason::kQueueFull:
      return "queue_full";
  }
  return "unknown";
}

Attributor::Attributor(Config config, const PodDirectory& pods, Clock& clock)
    : config_(std::move(config)), pods_(pods), clock_(clock) {}

std::size_t Attributor::remembered() const {
  std::lock_guard lock(mu_);
  return seen_.size();
}

void Attributor::remember(pid_t pid, const std::optional<std::string>& uid, MonoTime now) const {
  std::lock_guard lock(mu_);
  auto it = seen_.find(pid);
  if (it != seen_.end()) {
    it->second = Seen{uid, now};
    return;
  }
  if (config_.max_remembered == 0) return;
  if (seen_.size() >= config_.max_remembered) {
    // Forget what is past its grace; if nothing is, the oldest read.
    std::erase_if(seen_,
                  [&](const auto& e) { return now - e.second.read_at > config_.exited_grace; });
    if (seen_.size() >= config_.max_remembered) {
      auto oldest = seen_.begin();
      for (auto e = seen_.begin(); e != seen_.end(); ++e) {
        if (e->second.read_at < oldest->second.read_at) oldest = e;
      }
      seen_.erase(oldest);
    }
  }
  seen_.emplace(pid, Seen{uid, now});
}

std::expected<std::optional<std::string>, Drop> Attributor::podUidOf(pid_t pid,
                                                                     bool& remembered) const {
  remembered = false;
  const MonoTime now = clock_.monoNow();
  const std::string path = config_.proc_root + "/" + std::to_string(pid) + "/cgroup";
  std::ifstream in(path);
  std::stringstream buf;
  if (in) buf << in.rdbuf();
  if (!in) {
    std::lock_guard lock(mu_);
    auto it = seen_.find(pid);
    if (it == seen_.end() || now - it->second.read_at > config_.exited_grace) {
      return std::unexpected(Drop{DropReason::kProcessGone, "cannot read " + path});
    }
    remembered = true;
    return it->second.uid;
  }
  auto uid = podUidFromCgroup(buf.str());
  if (!uid) return std::unexpected(Drop{DropReason::kCgroupConflict, uid.error().message});
  remember(pid, *uid, now);
  return std::move(*uid);
}

std::optional<Drop> Attributor::check(const PodInfo& pod, const report::RankIdentity& id) const {
  if (id.ns != pod.ns || id.pod != pod.name) {
    return Drop{DropReason::kPodMismatch,
                "claims " + id.ns + "/" + id.pod + ", sent from " + pod.ns + "/" + pod.name};
  }
  if (id.node != config_.node || pod.node != config_.node) {
    return Drop{DropReason::kNodeMismatch, "claims node '" + id.node + "', pod runs on '" +
                                               pod.node + "', this is '" + config_.node + "'"};
  }
  if (id.job != pod.job) {
    return Drop{DropReason::kJobMismatch,
                "claims job '" + id.job + "', pod label says '" + pod.job + "'"};
  }
  if (pod.job.empty()) return std::nullopt;  // not a TrainingJob pod: no rank/attempt labels
  auto index = parseInt(pod.replica_index);
  auto attempt = parseInt(pod.restart_attempt);
  if (!index || *index < 0 || *index >= report::kMaxRank || !attempt || *attempt < 0) {
    return Drop{DropReason::kPodLabelsInvalid,
                "pod " + pod.ns + "/" + pod.name + " has replica-index '" + pod.replica_index +
                    "', restart-attempt '" + pod.restart_attempt + "'"};
  }
  const std::int64_t lo = *index * pod.nproc_per_node;
  const std::int64_t hi = lo + pod.nproc_per_node;
  if (id.rank < lo || id.rank >= hi) {
    return Drop{DropReason::kRankOutOfRange, "claims rank " + std::to_string(id.rank) +
                                                 ", pod holds [" + std::to_string(lo) + ", " +
                                                 std::to_string(hi) + ")"};
  }
  if (static_cast<std::int64_t>(id.restart_attempt) != *attempt) {
    return Drop{DropReason::kAttemptMismatch, "claims restart attempt " +
                                                  std::to_string(id.restart_attempt) +
                                                  ", pod label says " + std::to_string(*attempt)};
  }
  return std::nullopt;
}

std::expected<Attribution, Drop> Attributor::attribute(pid_t pid,
                                                       const report::RankIdentity& id) const {
  if (!pods_.synced()) {
    return std::unexpected(Drop{DropReason::kPodsNotSynced, "pod informer not synced"});
  }
  bool remembered = false;
  if (config_.mode != AttributionMode::kIdentity) {
    if (pid <= 0) {
      return std::unexpected(
          Drop{DropReason::kPidNotVisible, "sender pid not visible in this pid namespace"});
    }
    auto uid = podUidOf(pid, remembered);
    if (!uid) return std::unexpected(std::move(uid.error()));
    if (uid->has_value()) {
      auto pod = pods_.byUid(**uid);
      if (!pod) {
        return std::unexpected(
            Drop{DropReason::kPodUnknown, "pod uid " + **uid + " is not on this node"});
      }
      if (auto drop = check(*pod, id)) return std::unexpected(std::move(*drop));
      return Attribution{std::move(*pod), AttributionPath::kCgroup, pid, remembered};
    }
    if (config_.mode == AttributionMode::kCgroup) {
      return std::unexpected(
          Drop{DropReason::kNotAPod, "pid " + std::to_string(pid) + " is in no pod cgroup"});
    }
  }
  auto pod = pods_.byName(id.ns, id.pod);
  if (!pod || pod->node != config_.node) {
    return std::unexpected(Drop{DropReason::kPodNotOnNode,
                                "claimed pod " + id.ns + "/" + id.pod + " is not on this node"});
  }
  if (auto drop = check(*pod, id)) return std::unexpected(std::move(*drop));
  return Attribution{std::move(*pod), AttributionPath::kIdentity, pid, remembered};
}

}  // namespace c4::node
