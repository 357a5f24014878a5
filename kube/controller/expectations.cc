// Creation expectations (see expectations.h).
#include "kube/controller/expectations.h"

namespace c4::kube {

void CreationExpectations::expect(const std::string& id, const std::string& version, MonoTime now) {
  std::lock_guard lock(mu_);
  entries_[id] = Entry{version, now};
  if (now - last_prune_ >= ttl_) {  // drop lapsed entries now and then (deleted jobs' children)
    std::erase_if(entries_, [&](const auto& kv) { return now - kv.second.since >= ttl_; });
    last_prune_ = now;
  }
}

bool CreationExpectations::pending(const std::string& id, const std::string& version,
                                   MonoTime now) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.version != version) return false;
  if (now - it->second.since >= ttl_) {
    entries_.erase(it);
    return false;
  }
  return true;
}

void CreationExpectations::observed(const std::string& id, const std::string& version) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.version == version) entries_.erase(it);
}

std::size_t CreationExpectations::size() {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace c4::kube
