// Reassembly of RankReports that the plugin split into parts (part/parts) because one report did
// not fit a datagram. Parts of one report share the sender pid (the kernel's) and `seq`, and
// every field but `part` and `connections`. A complete report is merged into one RankReport
// (part 0 of 1, connections in part order).
//
// Bounds: at most `max_partial` reports in assembly and `max_parts` buffered parts in all, and of
// those at most `max_partial_per_pod` and `max_parts_per_pod` from one pod (the namespace and pod
// of the part's identity, which the receiver has attributed to the sender's pod). A new report past
// its pod's bounds evicts that pod's oldest partial report (counted as pod_limit); past the node's
// bounds, the oldest partial report of the pod holding the most (reports, or parts) goes (counted
// as evicted), so one pod flooding split reports evicts its own and leaves the other pods' room. A
// report announcing more parts than max_parts_per_pod can never complete and is dropped at its
// first part (pod_limit). A partial report older than
// `timeout` is dropped by expire(). A part seen twice (same pid, seq, part) is a duplicate and
// dropped; a part whose shared fields differ from the first part's makes the whole report
// inconsistent and drops it. A merged report with more than report::kMaxConnectionsPerReport
// connections cannot travel in a NodeReport and is dropped (kOversize). Every outcome is counted
// (stats()). Not thread-safe: one thread (the receiver's) owns it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/report.h"

namespace c4::node {

struct ReassemblyLimits {
  std::size_t max_partial = 256;
  std::size_t max_parts = 4096;
  Duration timeout = std::chrono::seconds{2};
  std::size_t max_partial_per_pod = 64;
  std::size_t max_parts_per_pod = 1024;
};

enum class PartOutcome {
  kComplete,      // the report is whole (returned)
  kPending,       // kept, waiting for more parts
  kDuplicate,     // dropped: this part was seen already
  kInconsistent,  // dropped with the whole report: shared fields differ between parts
  kOversize,      // dropped: the merged report has more connections than one report may carry
};

struct ReassemblyStats {
  std::uint64_t complete = 0;      // whole reports returned (single-part ones included)
  std::uint64_t merged = 0;        // of those, reports merged from more than one part
  std::uint64_t duplicate = 0;     // parts
  std::uint64_t inconsistent = 0;  // reports
  std::uint64_t evicted = 0;       // partial reports evicted by the bounds
  std::uint64_t timed_out = 0;     // partial reports dropped by expire()
  std::uint64_t oversize = 0;      // merged reports over report::kMaxConnectionsPerReport
  std::uint64_t pod_limit = 0;     // partial reports dropped by their own pod's bounds
};

class Reassembler {
 public:
  Reassembler(Clock& clock, ReassemblyLimits limits);

  struct Offer {
    PartOutcome outcome = PartOutcome::kPending;
    std::optional<report::RankReport> report;  // set when kComplete
  };
  Offer offer(pid_t pid, report::RankReport part);
  // Drops partial reports older than the timeout; returns how many.
  std::size_t expire();

  [[nodiscard]] std::size_t partialReports() const { return partial_.size(); }
  [[nodiscard]] std::size_t bufferedParts() const { return parts_; }
  [[nodiscard]] const ReassemblyStats& stats() const { return stats_; }

 private:
  struct Partial {
    MonoTime first_seen;
    std::uint64_t order = 0;  // arrival order of the first part (eviction)
    std::string pod;          // "<namespace>/<pod>" of the identity: the fairness key
    std::vector<std::optional<report::RankReport>> parts;
    std::size_t received = 0;
  };
  struct PodUsage {
    std::size_t partial = 0;
    std::size_t parts = 0;
  };
  using Key = std::pair<pid_t, std::uint64_t>;
  using Iter = std::map<Key, Partial>::iterator;
  void erase(Iter it);
  // The oldest partial report of `pod`, other than `keep`; end() when none.
  Iter oldestOf(const std::string& pod, Iter keep);
  // The oldest partial report of the pod holding the most parts (by_parts) or partial reports,
  // other than `keep`; end() when none.
  Iter largestPodsOldest(bool by_parts, Iter keep);
  [[nodiscard]] PodUsage usage(const std::string& pod) const;

  Clock& clock_;
  ReassemblyLimits limits_;
  std::map<Key, Partial> partial_;
  std::map<std::string, PodUsage> pods_;
  std::size_t parts_ = 0;
  std::uint64_t next_order_ = 0;
  ReassemblyStats stats_;
};

}  // namespace c4::node
