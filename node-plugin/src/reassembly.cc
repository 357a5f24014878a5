#include "c4/node_plugin/reassembly.h"

#include <algorithm>

namespace c4::node {
namespace {

// Every field that all parts of one report share.
bool sameHeader(const report::RankReport& a, const report::RankReport& b) {
  return a.id == b.id && a.seq == b.seq && a.parts == b.parts && a.time_unix_ns == b.time_unix_ns &&
         a.interval_ms == b.interval_ms && a.plan_version == b.plan_version &&
         a.dropped_messages == b.dropped_messages && a.last == b.last;
}

}  // namespace

Reassembler::Reassembler(Clock& clock, ReassemblyLimits limits) : clock_(clock), limits_(limits) {}

void Reassembler::erase(Iter it) {
  parts_ -= it->second.received;
  auto pod = pods_.find(it->second.pod);
  if (pod != pods_.end()) {
    pod->second.parts -= it->second.received;
    if (--pod->second.partial == 0) pods_.erase(pod);
  }
  partial_.erase(it);
}

Reassembler::PodUsage Reassembler::usage(const std::string& pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? PodUsage{} : it->second;
}

Reassembler::Iter Reassembler::oldestOf(const std::string& pod, Iter keep) {
  auto oldest = partial_.end();
  for (auto it = partial_.begin(); it != partial_.end(); ++it) {
    if (it == keep || it->second.pod != pod) continue;
    if (oldest == partial_.end() || it->second.order < oldest->second.order) oldest = it;
  }
  return oldest;
}

Reassembler::Iter Reassembler::largestPodsOldest(bool by_parts, Iter keep) {
  auto victim = partial_.end();
  std::size_t victim_size = 0;
  for (auto it = partial_.begin(); it != partial_.end(); ++it) {
    if (it == keep) continue;
    const PodUsage u = usage(it->second.pod);
    const std::size_t size = by_parts ? u.parts : u.partial;
    if (victim == partial_.end() || size > victim_size ||
        (size == victim_size && it->second.order < victim->second.order)) {
      victim = it;
      victim_size = size;
    }
  }
  return victim;
}

Reassembler::Offer Reassembler::offer(pid_t pid, report::RankReport part) {
  if (part.parts <= 1) {
    ++stats_.complete;
    part.part = 0;
    part.parts = 1;
    return {PartOutcome::kComplete, std::move(part)};
  }
  const Key key{pid, part.seq};
  auto it = partial_.find(key);
  if (it == partial_.end()) {
    std::string pod = part.id.ns + "/" + part.id.pod;
    if (part.parts > limits_.max_parts_per_pod || limits_.max_partial_per_pod == 0) {
      ++stats_.pod_limit;  // can never complete within its pod's bounds
      return {PartOutcome::kPending, std::nullopt};
    }
    // The pod's own bounds first: its oldest partial report goes.
    for (PodUsage u = usage(pod); u.partial > 0 && (u.partial >= limits_.max_partial_per_pod ||
                                                    u.parts + 1 > limits_.max_parts_per_pod);
         u = usage(pod)) {
      erase(oldestOf(pod, partial_.end()));
      ++stats_.pod_limit;
    }
    // Then the node's: the oldest partial report of the pod that holds the most.
    while (!partial_.empty() &&
           (partial_.size() >= limits_.max_partial || parts_ + 1 > limits_.max_parts)) {
      erase(largestPodsOldest(partial_.size() < limits_.max_partial, partial_.end()));
      ++stats_.evicted;
    }
    if (limits_.max_partial == 0 || limits_.max_parts == 0) {
      ++stats_.evicted;
      return {PartOutcome::kPending, std::nullopt};
    }
    Partial p;
    p.first_seen = clock_.monoNow();
    p.order = next_order_++;
    p.pod = std::move(pod);
    p.parts.resize(part.parts);
    it = partial_.emplace(key, std::move(p)).first;
    ++pods_[it->second.pod].partial;
  } else {
    const auto& first = *std::find_if(it->second.parts.begin(), it->second.parts.end(),
                                      [](const auto& x) { return x.has_value(); });
    if (!sameHeader(*first, part) || part.part >= it->second.parts.size()) {
      erase(it);
      ++stats_.inconsistent;
      return {PartOutcome::kInconsistent, std::nullopt};
    }
    if (it->second.parts[part.part].has_value()) {
      ++stats_.duplicate;
      return {PartOutcome::kDuplicate, std::nullopt};
    }
    // Evict others first; the report being completed is the one most likely to finish. The pod's
    // own other reports go before any other pod's.
    while (usage(it->second.pod).parts + 1 > limits_.max_parts_per_pod) {
      auto victim = oldestOf(it->second.pod, it);
      if (victim == partial_.end()) break;
      erase(victim);
      ++stats_.pod_limit;
    }
    while (parts_ + 1 > limits_.max_parts && partial_.size() > 1) {
      auto victim = largestPodsOldest(true, it);
      if (victim == partial_.end()) break;
      if (usage(victim->second.pod).parts < usage(it->second.pod).parts) {
        // This report's pod holds the most, and this is its only report: it goes itself.
        erase(it);
        ++stats_.evicted;
        return {PartOutcome::kPending, std::nullopt};
      }
      erase(victim);
      ++stats_.evicted;
    }
  }
  Partial& p = it->second;
  const std::uint16_t index = part.part;
  p.parts[index] = std::move(part);
  ++p.received;
  ++parts_;
  ++pods_[p.pod].parts;
  if (p.received < p.parts.size()) return {PartOutcome::kPending, std::nullopt};

  report::RankReport merged = std::move(*p.parts[0]);
  for (std::size_t i = 1; i < p.parts.size(); ++i) {
    auto& conns = p.parts[i]->connections;
    merged.connections.insert(merged.connections.end(), std::make_move_iterator(conns.begin()),
                              std::make_move_iterator(conns.end()));
    auto& comms = p.parts[i]->communicators;
    merged.communicators.insert(merged.communicators.end(), std::make_move_iterator(comms.begin()),
                                std::make_move_iterator(comms.end()));
  }
  merged.part = 0;
  merged.parts = 1;
  erase(it);
  if (merged.connections.size() > report::kMaxConnectionsPerReport ||
      merged.communicators.size() > report::kMaxCommunicatorsPerReport) {
    ++stats_.oversize;
    return {PartOutcome::kOversize, std::nullopt};
  }
  ++stats_.complete;
  ++stats_.merged;
  return {PartOutcome::kComplete, std::move(merged)};
}

std::size_t Reassembler::expire() {
  const MonoTime now = clock_.monoNow();
  std::size_t n = 0;
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (now - it->second.first_seen >= limits_.timeout) {
      auto next = std::next(it);
      erase(it);
      it = next;
      ++n;
    } else {
      ++it;
    }
  }
  stats_.timed_out += n;
  return n;
}

}  // namespace c4::node
