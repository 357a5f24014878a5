#include "c4/node_plugin/reassembly.h"

#include <algorithm>

namespace c4::node {
namespace {

// Every field that all parts of one report share.
bool sameHeader(const report::RankReport& a, const report::RankReport& b) {
  return a.id == b.id && a.seq == b.seq && a.parts == b.parts && a.time_unix_ns == b.time_unix_ns &&
         a.interval_ms == b.interval_ms && a.plan_version == b.plan_version &&
         a.dropped_messages == b.dropped_messages;
}

}  // namespace

Reassembler::Reassembler(Clock& clock, ReassemblyLimits limits) : clock_(clock), limits_(limits) {}

void Reassembler::erase(std::map<Key, Partial>::iterator it) {
  parts_ -= it->second.received;
  partial_.erase(it);
}

void Reassembler::evictOldest() {
  auto oldest = partial_.begin();
  for (auto it = partial_.begin(); it != partial_.end(); ++it) {
    if (it->second.order < oldest->second.order) oldest = it;
  }
  if (oldest == partial_.end()) return;
  erase(oldest);
  ++stats_.evicted;
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
    while (!partial_.empty() &&
           (partial_.size() >= limits_.max_partial || parts_ + 1 > limits_.max_parts)) {
      evictOldest();
    }
    if (limits_.max_partial == 0 || limits_.max_parts == 0) {
      ++stats_.evicted;
      return {PartOutcome::kPending, std::nullopt};
    }
    Partial p;
    p.first_seen = clock_.monoNow();
    p.order = next_order_++;
    p.parts.resize(part.parts);
    it = partial_.emplace(key, std::move(p)).first;
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
    while (parts_ + 1 > limits_.max_parts && partial_.size() > 1) {
      // Evict others first; the report being completed is the one most likely to finish.
      auto victim = partial_.begin();
      for (auto v = partial_.begin(); v != partial_.end(); ++v) {
        if (v != it && (victim == it || v->second.order < victim->second.order)) victim = v;
      }
      if (victim == it) break;
      erase(victim);
      ++stats_.evicted;
    }
  }
  Partial& p = it->second;
  const std::uint16_t index = part.part;
  p.parts[index] = std::move(part);
  ++p.received;
  ++parts_;
  if (p.received < p.parts.size()) return {PartOutcome::kPending, std::nullopt};

  report::RankReport merged = std::move(*p.parts[0]);
  for (std::size_t i = 1; i < p.parts.size(); ++i) {
    auto& conns = p.parts[i]->connections;
    merged.connections.insert(merged.connections.end(), std::make_move_iterator(conns.begin()),
                              std::make_move_iterator(conns.end()));
  }
  merged.part = 0;
  merged.parts = 1;
  erase(it);
  if (merged.connections.size() > report::kMaxConnectionsPerReport) {
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
