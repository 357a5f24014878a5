// The traffic plan (docs/design.md §3.5): which local source port, path and share of bytes each
// subflow of a connection gets. Schema in nccl-net-plugin/README.md ("Plan file").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"

namespace c4 {

inline constexpr std::size_t kMaxSubflows = 64;

struct PlannedSubflow {
  std::uint16_t local_port = 0;  // 0: ephemeral
  std::int32_t path_id = -1;
  double weight = 1.0;
};

struct PlanPair {
  std::string local_node;
  std::string peer_node;
  std::uint64_t peer_node_hash = 0;  // nodeHash(peerNode)
  std::vector<PlannedSubflow> subflows;
};

inline constexpr int kPlaneUnknown = -1;   // NCCL_NET_ID_UNDEF
inline constexpr int kMaxPlaneId = 32767;  // ncclNetProperties_v12_t::planeId is an int16_t

struct Plan {
  std::int64_t version = -1;
  int default_subflows = 0;  // 0: C4_SUBFLOWS
  std::vector<PlanPair> pairs;
  std::map<std::string, int, std::less<>>
      planes;  // node -> network plane (node label c4.dev/plane)

  // Subflows planned for (localNode, peer whose node hashes to peerHash); nullptr when unplanned.
  [[nodiscard]] const PlanPair* find(std::string_view localNode, std::uint64_t peerHash) const;
  // True if a pair starts or ends at `node`: the plan is for a placement that includes it.
  [[nodiscard]] bool mentions(std::string_view node) const;
  // The plane of `node` as NCCL should see it (planeId of every device), or kPlaneUnknown. NCCL's
  // topology search never pairs NICs of two different known planes, so a plane is reported only
  // when the plan is complete for the job: it names a plane for `node` and for every node its
  // pairs mention. `why` (optional) says what is missing when the answer is kPlaneUnknown.
  [[nodiscard]] int planeOf(std::string_view node, std::string* why = nullptr) const;
};

// FNV-1a 64 of a node name; carried in connection handles so the connecting side can look the
// listener's node up in the plan before any byte is exchanged. 0 is reserved for "unknown".
std::uint64_t nodeHash(std::string_view node);

// Strict parse: unknown fields, wrong types, ports out of range, negative or all-zero weights,
// more than 64 subflows, duplicate pairs are rejected with a message naming the field.
Result<Plan> parsePlan(std::string_view json);
Result<Plan> loadPlanFile(const std::string& path);

// Watches C4_PLAN_FILE: poll() stats the file and reloads it when (mtime, size, inode) changed.
// Thread-safe; current() is cheap (shared_ptr copy under a mutex, never on the data path).
class PlanWatcher {
 public:
  explicit PlanWatcher(std::string path);
  // Returns true when a new valid plan was applied by this call. An invalid or missing file logs
  // one warning per distinct problem and keeps the previous plan (or none).
  bool poll();
  [[nodiscard]] std::shared_ptr<const Plan> current() const;
  // Why the file is unusable, when it exists but its last load failed and no plan is held (a
  // plan that will not parse, not one still to come): nothing to wait for. Empty otherwise.
  [[nodiscard]] std::string unusable() const;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const Plan> plan_;
  bool statted_ = false;
  struct timespec mtime_ {};
  off_t size_ = -1;
  ino_t inode_ = 0;
  std::string last_warning_;
  std::string load_error_;  // the existing file's last load error; empty after a good load
};

}  // namespace c4
