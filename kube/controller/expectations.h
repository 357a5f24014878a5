// Creation expectations (client-go's ControllerExpectations, keyed by object): a child the
// controller created is "expected" until its informer reports it. While expected, a reconcile
// that runs before the cache has caught up does not create it again, which would cost a
// request and a 409 each time. An expectation lapses after a TTL, so a lost watch event
// delays a re-create by at most that much. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "c4/common/clock.h"

namespace c4::kube {

class CreationExpectations {
 public:
  explicit CreationExpectations(Duration ttl = std::chrono::seconds{15}) : ttl_(ttl) {}

  // `id` names the object ("<kind>/<ns>/<name>"); `version` tells generations of the same name
  // apart (a pod's restart attempt; "" for objects that have one generation).
  void expect(const std::string& id, const std::string& version, MonoTime now);
  // True while (id, version) is expected and its TTL has not run out.
  [[nodiscard]] bool pending(const std::string& id, const std::string& version, MonoTime now);
  // The informer saw the object (added, updated or deleted): that version is no longer pending.
  void observed(const std::string& id, const std::string& version);
  // The create failed: (id, version) will not appear, so it is no longer expected.
  void lower(const std::string& id, const std::string& version) { observed(id, version); }
  [[nodiscard]] std::size_t size();

 private:
  struct Entry {
    std::string version;
    MonoTime since;
  };
  Duration ttl_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
  MonoTime last_prune_{};
};

}  // namespace c4::kube
