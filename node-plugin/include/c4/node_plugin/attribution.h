// Attribution: which pod sent a datagram. The kernel names the sender's pid (SCM_CREDENTIALS);
// /proc/<pid>/cgroup names the pod UID where the kubelet's cgroup layout is visible; the pod
// informer on this node (field selector spec.nodeName=<node>) turns the UID into the pod. The
// identity the message claims must then be that pod's:
//
//   ns, pod        == the pod's namespace and name
//   node           == this node (and the pod's spec.nodeName)
//   job            == label c4.dev/job-name ("" when the pod has no such label)
//   rank           in [replica-index * nproc, (replica-index + 1) * nproc), where replica-index is
//                  label c4.dev/replica-index and nproc the container env C4_NPROC_PER_NODE
//                  (default 1); only checked for pods with a job label
//   restartAttempt == label c4.dev/restart-attempt (pods with a job label)
//
// Where the cgroup names no pod (no kubelet layout: a host process, an unusual runtime), mode
// kAuto falls back to the claimed identity: the claimed pod must exist on this node and pass the
// same checks. kCgroup never falls back; kIdentity never reads cgroups. Anything that fails is a
// Drop with a reason (metrics label) and a detail (logs).
//
// A process's last datagrams (the profiler plugin's last report, sent as it exits) are often read
// after the process is gone and its /proc entry with it. The attributor remembers what each pid's
// cgroup named at its newest read, for `exited_grace` after it: a datagram from a pid whose cgroup
// can no longer be read is attributed by that memory (Attribution::remembered) and passes the same
// checks. A pid reused within the grace by another process reads its own cgroup (the memory is
// used only where none can be read). Without a memory such a datagram is dropped (kProcessGone).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/report.h"
#include "kube/cache/informer.h"

namespace c4::node {

// Labels the operator puts on the pods of a TrainingJob.
inline constexpr const char* kJobLabel = "c4.dev/job-name";
inline constexpr const char* kReplicaIndexLabel = "c4.dev/replica-index";
inline constexpr const char* kRestartAttemptLabel = "c4.dev/restart-attempt";
inline constexpr const char* kNprocEnv = "C4_NPROC_PER_NODE";

// The pod UID a /proc/<pid>/cgroup file names (lower-case, with dashes), for the kubelet layouts
// of both cgroup drivers on cgroup v1 (any hierarchy line) and v2 ("0::"):
//   cgroupfs: .../kubepods[/besteffort|/burstable]/pod<uid>/<container>
//   systemd:  .../kubepods[-besteffort|-burstable]-pod<uid_with_underscores>.slice/<scope>
// std::nullopt when no line names a pod; kInvalidArgument when lines name different pods.
Result<std::optional<std::string>> podUidFromCgroup(std::string_view content);

// What attribution needs of a pod.
struct PodInfo {
  std::string ns;
  std::string name;
  std::string uid;
  std::string node;                 // spec.nodeName
  std::string job;                  // label c4.dev/job-name ("" when absent)
  std::string replica_index;        // label c4.dev/replica-index, raw ("" when absent)
  std::string restart_attempt;      // label c4.dev/restart-attempt, raw ("" when absent)
  std::int32_t nproc_per_node = 1;  // C4_NPROC_PER_NODE of the first container that sets it
};
PodInfo podInfoFromJson(const kube::Json& pod);

// The pods on this node, looked up by UID or by name.
class PodDirectory {
 public:
  virtual ~PodDirectory() = default;
  [[nodiscard]] virtual std::optional<PodInfo> byUid(std::string_view uid) const = 0;
  [[nodiscard]] virtual std::optional<PodInfo> byName(std::string_view ns,
                                                      std::string_view name) const = 0;
  [[nodiscard]] virtual bool synced() const = 0;
};

// A PodDirectory over an informer's Store. Call addIndexes() on the store before it holds
// objects (before the informer starts).
class StorePodDirectory final : public PodDirectory {
 public:
  static void addIndexes(kube::Store& store);
  // `synced` reports whether the store has been filled (the informer's hasSynced()).
  StorePodDirectory(const kube::Store& store, std::function<bool()> synced)
      : store_(store), synced_(std::move(synced)) {}
  [[nodiscard]] std::optional<PodInfo> byUid(std::string_view uid) const override;
  [[nodiscard]] std::optional<PodInfo> byName(std::string_view ns,
                                              std::string_view name) const override;
  [[nodiscard]] bool synced() const override { return !synced_ || synced_(); }

 private:
  const kube::Store& store_;
  std::function<bool()> synced_;
};

enum class AttributionMode { kCgroup, kIdentity, kAuto };
Result<AttributionMode> parseAttributionMode(std::string_view text);
std::string_view attributionModeName(AttributionMode mode) noexcept;

enum class AttributionPath { kCgroup, kIdentity };
std::string_view attributionPathName(AttributionPath path) noexcept;

// Why a datagram was dropped (the `reason` label of c4_node_plugin_messages_dropped_total).
enum class DropReason {
  kTruncated,         // larger than the receive buffer
  kNoCredentials,     // the kernel attached no SCM_CREDENTIALS
  kDecode,            // not a valid message (strict decode)
  kPidNotVisible,     // pid 0: the sender is in a pid namespace this process cannot see
  kProcessGone,       // /proc/<pid>/cgroup unreadable (exited, or no such pid) and not remembered
  kCgroupConflict,    // the cgroup file names more than one pod
  kNotAPod,           // the cgroup names no pod and mode is kCgroup
  kPodsNotSynced,     // the pod informer has not listed yet
  kPodUnknown,        // the cgroup names a pod UID that is not on this node
  kPodNotOnNode,      // identity fallback: the claimed pod is not on this node
  kPodMismatch,       // claimed ns/pod differ from the sender's pod
  kNodeMismatch,      // claimed node is not this node
  kJobMismatch,       // claimed job differs from the pod's label
  kPodLabelsInvalid,  // a job pod without a usable replica-index/restart-attempt label
  kRankOutOfRange,    // claimed rank outside the pod's rank range
  kAttemptMismatch,   // claimed restartAttempt differs from the pod's label
  kReassembly,        // an inconsistent, duplicate or excess part of a split report
  kQueueFull,         // the receiver's queue toward the shipper is full
};
inline constexpr int kDropReasonCount = static_cast<int>(DropReason::kQueueFull) + 1;
std::string_view dropReasonName(DropReason reason) noexcept;

struct Drop {
  DropReason reason;
  std::string detail;
};

struct Attribution {
  PodInfo pod;
  AttributionPath path = AttributionPath::kCgroup;
  pid_t pid = 0;  // the sender, as the kernel named it to this process
  // The sender had exited: its cgroup is the one remembered from its newest read.
  bool remembered = false;
};

class Attributor {
 public:
  struct Config {
    std::string node;  // this node's name
    AttributionMode mode = AttributionMode::kAuto;
    std::string proc_root = "/proc";
    // How long after a pid's newest cgroup read its memory attributes datagrams from it once it
    // is gone, and how many pids are remembered (the oldest reads are forgotten first).
    Duration exited_grace = std::chrono::seconds{10};
    std::size_t max_remembered = 4096;
  };
  Attributor(Config config, const PodDirectory& pods, Clock& clock = realClock());

  // Attributes a message claiming `id` from the process `pid` (as the kernel names it).
  [[nodiscard]] std::expected<Attribution, Drop> attribute(pid_t pid,
                                                           const report::RankIdentity& id) const;
  // The identity checks alone (exposed for tests).
  [[nodiscard]] std::optional<Drop> check(const PodInfo& pod, const report::RankIdentity& id) const;
  // Pids whose cgroup is remembered (tests, metrics).
  [[nodiscard]] std::size_t remembered() const;

 private:
  struct Seen {
    std::optional<std::string> uid;  // the pod UID the cgroup named (none: no pod cgroup)
    MonoTime read_at{};
  };
  // The pod UID pid's cgroup names; nullopt inside: the cgroup names no pod. An error Drop when
  // the cgroup is unreadable and not remembered, or names two pods.
  std::expected<std::optional<std::string>, Drop> podUidOf(pid_t pid, bool& remembered) const;
  void remember(pid_t pid, const std::optional<std::string>& uid, MonoTime now) const;

  Config config_;
  const PodDirectory& pods_;
  Clock& clock_;
  mutable std::mutex mu_;  // seen_
  mutable std::unordered_map<pid_t, Seen> seen_;
};

}  // namespace c4::node
