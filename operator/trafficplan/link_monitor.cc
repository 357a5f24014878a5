// Link health from per-subflow telemetry (see link_monitor.h).
#include "operator/trafficplan/link_monitor.h"

#include <cstdio>

namespace c4::op::trafficplan {
namespace {

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

}  // namespace

LinkMonitor::LinkMonitor(LinkMonitorOptions options) : options_(options) {}

void LinkMonitor::hint(const std::string& local_node, const std::string& peer_node) {
  hints_.insert({local_node, peer_node});
}

std::vector<LinkVerdict> LinkMonitor::observe(const std::vector<ConnectionDelta>& deltas,
                                              const c4p::Fabric& fabric, const Locate& locate,
                                              const JobsOn& jobs_on) {
  if (deltas.empty()) return {};        // no report arrived: nothing to judge (hints wait for one)
  std::map<Key, std::string> suspects;  // -> evidence of the first stalled subflow
  std::map<Key, std::set<std::string>> jobs_now;  // -> jobs whose subflows stalled there
  std::set<Key> lagging;                          // suspects named by a stalled connection's lag
  std::set<Key> cleared;
  for (const auto& conn : deltas) {
    auto src = locate(conn.local_node);
    auto dst = locate(conn.peer_node);
    if (!src || !dst) continue;
    const int paths = fabric.pathCount(*src, *dst);  // 0: same leaf, other plane, unreachable
    if (paths <= 0) continue;
    // A subflow's path, or -1 when the fabric knows none (no planned path, an unmapped port).
    auto pathOf = [&](const SubflowDelta& s) {
      const int path = s.path >= 0 ? s.path : fabric.pathOfPortFor(s.local_port, *src, *dst);
      return path < paths ? path : -1;
    };
    // The link directions of a path (2 inside a pod, 4 across pods).
    auto linksOf = [&](int path) {
      std::vector<Key> keys;
      auto links = fabric.pathLinks(*src, *dst, path);
      if (!links) return keys;
      for (const auto& [link, dir] : *links)
        keys.push_back({link, dir == c4p::Direction::kUp ? 0 : 1});
      return keys;
    };
    std::uint64_t total = 0;
    double weights = 0;
    for (const auto& s : conn.subflows) {
      total += s.bytes;
      if (s.weight > 0) weights += s.weight;
    }
    if (weights <= 0) continue;
    if (total < options_.min_connection_bytes) {
      if (!conn.stalled) continue;
      for (const auto& s : conn.subflows) {
        if (s.weight <= 0 || s.lag_bytes < options_.min_lag_bytes) continue;
        const int path = pathOf(s);
        const std::vector<Key> keys = path < 0 ? std::vector<Key>{} : linksOf(path);
        if (keys.empty()) continue;
        std::string why = conn.local_node + " -> " + conn.peer_node + " path " +
                          std::to_string(path) + ": connection stalled, " +
                          megabytes(static_cast<double>(s.lag_bytes)) + " behind its siblings";
        for (const Key& key : keys) {
          suspects.try_emplace(key, why);
          lagging.insert(key);
          jobs_now[key].insert(conn.job);
        }
      }
      continue;
    }
    const bool hinted = hints_.contains({conn.local_node, conn.peer_node});
    const double stall = hinted ? options_.hint_ratio : options_.stall_ratio;
    for (const auto& s : conn.subflows) {
      if (s.weight <= 0) continue;
      const int path = pathOf(s);
      const std::vector<Key> keys = path < 0 ? std::vector<Key>{} : linksOf(path);
      if (keys.empty()) continue;
      const double expected = static_cast<double>(total) * s.weight / weights;
      const double ratio = static_cast<double>(s.bytes) / expected;
      if (ratio < stall) {
        std::string why = conn.local_node + " -> " + conn.peer_node + " path " +
                          std::to_string(path) + ": " + megabytes(static_cast<double>(s.bytes)) +
                          " of " + megabytes(expected) + " expected" +
                          (hinted ? " (C4D: slow connection)" : "");
        for (const Key& key : keys) {
          suspects.try_emplace(key, why);
          jobs_now[key].insert(conn.job);
        }
      } else if (ratio >= options_.healthy_ratio) {
        cleared.insert(keys.begin(), keys.end());
      }
    }
  }
  hints_.clear();

  std::vector<LinkVerdict> out;
  std::map<Key, int> next;
  std::map<Key, std::set<std::string>> next_jobs;
  std::map<Key, std::string> next_held;
  auto advance = [&](const Key& key, const std::string& why) {
    auto prev = streak_.find(key);
    const int streak = (prev == streak_.end() ? 0 : prev->second) + 1;
    next[key] = streak;
    std::set<std::string>& jobs = next_jobs[key];
    if (auto p = stalled_jobs_.find(key); p != stalled_jobs_.end()) jobs = p->second;
    if (auto n = jobs_now.find(key); n != jobs_now.end())
      jobs.insert(n->second.begin(), n->second.end());
    const int needed =
        lagging.contains(key) ? options_.stalled_confirm_windows : options_.confirm_windows;
    if (streak < needed || reported_.contains(key)) return;
    const auto dir = key.second == 0 ? c4p::Direction::kUp : c4p::Direction::kDown;
    std::string others;  // jobs on the link whose subflows did not stall there
    if (jobs_on && jobs.size() < 2) {
      for (const auto& j : jobs_on(key.first, dir)) {
        if (!jobs.contains(j)) others += (others.empty() ? "" : ", ") + j;
      }
    }
    if (!others.empty()) {
      // One job's word against the others' silence: a suspect, not a verdict.
      next_held[key] = "only " + (jobs.empty() ? std::string("one job") : *jobs.begin()) +
                       " stalled there, not yet " + others;
      return;
    }
    reported_.insert(key);
    out.push_back({key.first, dir, 0.0, why});
  };
  for (const auto& [key, why] : suspects) {
    if (!cleared.contains(key)) advance(key, why);
  }
  // A suspect that nothing cleared stays one while reports arrive, also when nothing moved (a
  // dead subflow stalls its connection's next messages, so the window after the first often
  // carries no bytes at all); a healthy subflow on it ends its streak.
  for (const auto& [key, streak] : streak_) {
    if (suspects.contains(key) || cleared.contains(key)) continue;
    advance(key, evidence_[key]);
  }
  for (const auto& [key, why] : suspects) evidence_.try_emplace(key, why);
  std::erase_if(evidence_, [&](const auto& e) { return !next.contains(e.first); });
  streak_ = std::move(next);
  stalled_jobs_ = std::move(next_jobs);
  held_ = std::move(next_held);
  return out;
}

std::vector<LinkSuspect> LinkMonitor::suspects() const {
  std::vector<LinkSuspect> out;
  for (const auto& [key, streak] : streak_) {
    auto why = evidence_.find(key);
    std::string evidence = why == evidence_.end() ? std::string() : why->second;
    if (auto held = held_.find(key); held != held_.end()) evidence += "; " + held->second;
    out.push_back({key.first, key.second == 0 ? c4p::Direction::kUp : c4p::Direction::kDown, streak,
                   std::move(evidence)});
  }
  return out;
}

void LinkMonitor::reset(const c4p::LinkRef& link) {
  for (int d = 0; d < 2; ++d) {
    streak_.erase({link, d});
    reported_.erase({link, d});
    stalled_jobs_.erase({link, d});
    held_.erase({link, d});
    evidence_.erase({link, d});  // a new streak quotes its own evidence
  }
}

void LinkMonitor::resetAll() {
  streak_.clear();
  reported_.clear();
  stalled_jobs_.clear();
  held_.clear();
  evidence_.clear();
  hints_.clear();
}

}  // namespace c4::op::trafficplan
