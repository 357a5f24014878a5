// Leader election on a coordination.k8s.io/v1 Lease (client-go leaderelection semantics):
// a candidate takes the lease when it is free or when the holder has not renewed it for
// leaseDuration as observed on the candidate's own monotonic clock (no cross-node clock
// comparison); the leader renews every retryPeriod and gives up when it could not renew for
// renewDeadline; on stop it releases the lease so a successor need not wait.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "operator/client/kube_client.h"

namespace c4::op {

struct LeaderElectionConfig {
  std::string lease_namespace = "c4-system";
  std::string lease_name = "c4-operator";
  std::string identity;
  Duration lease_duration = std::chrono::seconds{15};
  Duration renew_deadline = std::chrono::seconds{10};
  Duration retry_period = std::chrono::seconds{2};
  // Give the lease up on stop() (a successor need not wait). Tests set false to play a crash.
  bool release_on_stop = true;
};

class LeaderElector {
 public:
  LeaderElector(KubeClient& client, Clock& clock, LeaderElectionConfig config);

  // Blocks: tries to acquire every retryPeriod until it leads or stop(); then calls
  // `on_started` (on this thread; it must return promptly) and renews until stop() or loss of
  // the lease, then calls `on_stopped`. Stopped while leading, it releases the lease after
  // `on_stopped` has returned (the guarded work has stopped), so a successor need not wait.
  // Returns true if it led and stopped voluntarily, false if it lost the lease.
  bool run(const std::function<void()>& on_started, const std::function<void()>& on_stopped);
  void stop();

  // One acquire-or-renew step (exposed for tests). True when this candidate holds the lease.
  bool tryAcquireOrRenew();
  // Gives the lease up if held (holderIdentity cleared). Exposed for tests.
  Status release();
  [[nodiscard]] bool isLeader() const { return leader_.load(); }
  [[nodiscard]] const std::string& identity() const { return config_.identity; }

 private:
  Json newLeaseSpec(const Json& old_spec, bool acquiring) const;
  // Remembers the lease this candidate just wrote (holder, renewTime, resourceVersion, when).
  void recordOwnLease(const Json& lease, MonoTime now);

  KubeClient& client_;
  Clock& clock_;
  LeaderElectionConfig config_;
  Logger log_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable_any cv_;
  // What we last saw of the lease, and when (our monotonic clock).
  std::string observed_holder_;
  std::string observed_renew_time_;
  std::string observed_resource_version_;
  MonoTime observed_time_{};
};

}  // namespace c4::op
