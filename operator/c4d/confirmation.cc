#include "operator/c4d/confirmation.h"

#include <algorithm>
#include <utility>

namespace c4::c4d {

std::vector<Verdict> Confirmation::active() const {
  std::vector<Verdict> out;
  for (const auto& [key, f] : findings_) {
    if (f.confirmed) out.push_back(f.verdict);
  }
  return out;
}

std::vector<std::string> Confirmation::clear() {
  std::vector<std::string> keys;
  for (const auto& [key, f] : findings_) {
    if (f.confirmed) keys.push_back(key);
  }
  findings_.clear();
  return keys;
}

void Confirmation::apply(std::vector<Candidate>& candidates, const Thresholds& th, WallTime now,
                         TickResult& result) {
  for (auto& [key, f] : findings_) f.seen_this_tick = false;
  for (Candidate& c : candidates) {
    const std::string key = c.verdict.key();
    auto it = findings_.find(key);
    if (it == findings_.end()) {
      Finding f;
      f.verdict = std::move(c.verdict);
      f.verdict.first_seen = now;
      it = findings_.emplace(key, std::move(f)).first;
    } else if (it->second.seen_this_tick) {
      continue;  // the same culprit found twice in one tick: keep the first
    } else {
      const WallTime firstSeen = it->second.verdict.first_seen;
      const WallTime confirmedAt = it->second.verdict.confirmed_at;
      it->second.verdict = std::move(c.verdict);
      it->second.verdict.first_seen = firstSeen;
      it->second.verdict.confirmed_at = confirmedAt;
    }
    Finding& f = it->second;
    f.seen_this_tick = true;
    f.missing = 0;
    ++f.consecutive;
    const int required =
        c.relaxed ? std::max(1, th.confirmation_windows - 1) : th.confirmation_windows;
    if (!f.confirmed && f.consecutive >= required) {
      f.confirmed = true;
      f.verdict.confirmed_at = now;
      result.verdicts.push_back(f.verdict);
    }
  }
  std::size_t pending = 0;
  for (auto it = findings_.begin(); it != findings_.end();) {
    Finding& f = it->second;
    if (!f.seen_this_tick) {
      if (!f.confirmed) {
        it = findings_.erase(it);
        continue;
      }
      if (++f.missing >= th.clear_windows) {
        result.cleared.push_back(it->first);
        it = findings_.erase(it);
        continue;
      }
    }
    if (f.confirmed) {
      result.active.push_back(f.verdict);
    } else {
      ++pending;
    }
    ++it;
  }
  result.stats.pending_findings = pending;
}

}  // namespace c4::c4d
