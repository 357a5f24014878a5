// Leader election on a coordination.k8s.io/v1 Lease (client-go leaderelection semantics):
// a candidate takes the lease when it is free or when the holder has not renewed it for
// leaseDuration as observed on the candidate's own monotonic clock (no cross-node clock
// comparison), trying every retryPeriod stretched by up to 120% jitter; the leader renews every
// retryPeriod and gives up when it could not renew for renewDeadline; on stop it releases the
// lease so a successor need not wait.
//
// Fencing. A lease write sent at time t that succeeded keeps every other candidate out until at
// least t + leaseDuration on their clocks (they time the lease from when they observe it, which
// is after t). The elector therefore counts its own lease from the moment each successful
// acquire/renew write was SENT, and the leader may act until leaseValidUntil() = that time +
// renewDeadline, leaving leaseDuration - renewDeadline for clock-rate differences and the
// successor's observation delay. Past that instant mayWrite() is false and the renew loop
// declares the loss at once (it wakes at leaseValidUntil(), not at its next retry tick); every
// call the elector makes carries a timeout that ends at leaseValidUntil() while it leads, so no
// renew attempt blocks past it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "kube/client/kube_client.h"
#include "kube/client/random.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

struct LeaderElectionConfig {
  std::string lease_namespace = "c4-system";
  std::string lease_name = "c4-operator";
  std::string identity;
  Duration lease_duration = std::chrono::seconds{15};
  Duration renew_deadline = std::chrono::seconds{10};  // < lease_duration
  Duration retry_period = std::chrono::seconds{2};
  // Give the lease up on stop() (a successor need not wait). Tests set false to play a crash.
  bool release_on_stop = true;
  // The acquire loop's jitter draws from this (default: seeded from std::random_device).
  RandomSource random;
};

class LeaderElector {
 public:
  // client-go's JitterFactor for the acquire loop: waits are retryPeriod * [1, 2.2).
  static constexpr double kAcquireJitter = 1.2;

  // `client` should be the elector's own (a throttled burst of other requests must not delay a
  // renewal), and must not refuse lease writes through a RequestGate. `client`, `clock` outlive
  // the elector.
  LeaderElector(KubeClient& client, Clock& clock, LeaderElectionConfig config);

  // Blocks: tries to acquire (at once, then every retryPeriod with jitter) until it leads or
  // stop(); then calls `on_started` (on this thread; it must return promptly) and renews until
  // stop() or loss of the lease, then calls `on_stopped`. Stopped while leading, it releases the
  // lease after `on_stopped` has returned (the guarded work has stopped), so a successor need
  // not wait. The loss is declared at leaseValidUntil() at the latest, or as soon as a renewal
  // finds another holder: then `on_lost` (if set) runs at once on this thread, before
  // `on_stopped`. Returns true if it led and stopped voluntarily (or never led), false if it
  // lost the lease.
  bool run(const std::function<void()>& on_started, const std::function<void()>& on_stopped,
           const std::function<void()>& on_lost = {});
  // Ends run() (an acquire attempt's read is cancelled at once). Thread-safe.
  void stop();

  // One acquire-or-renew step (exposed for tests). True when this candidate holds the lease.
  bool tryAcquireOrRenew();
  // Gives the lease up if held (holderIdentity cleared); leaseValidUntil() is reset first.
  Status release();
  [[nodiscard]] bool isLeader() const { return leader_.load(); }
  [[nodiscard]] const std::string& identity() const { return config_.identity; }

  // The instant until which this candidate may act as the leader: the send time of its last
  // successful acquire/renew write + renewDeadline; MonoTime{} when it does not hold the lease
  // (never acquired, lost, released, or run() has ended). Thread-safe; never blocks.
  [[nodiscard]] MonoTime leaseValidUntil() const;
  // now < leaseValidUntil(): whether a write guarded by this lease may be sent at `now` (the
  // caller's reading of the same clock). Thread-safe; never blocks.
  [[nodiscard]] bool mayWrite(MonoTime now) const;

 private:
  enum class Attempt { kHeld, kHeldByOther, kFailed };
  // One acquire-or-renew step. `renewing`: the leader's renew loop, which must not write once
  // leaseValidUntil() has passed (the loss is declared then).
  Attempt attempt(bool renewing);
  Json newLeaseSpec(const Json& old_spec, bool acquiring) const;
  // Remembers the lease this candidate just wrote (holder, renewTime, resourceVersion, when).
  void recordOwnLease(const Json& lease, MonoTime now);
  // The timeout of the elector's next API call: until leaseValidUntil() while holding the
  // lease (when renewing, zero or less once the deadline has passed), renew_deadline otherwise.
  Duration callTimeout(bool renewing) const;
  void setValidUntil(MonoTime t);

  KubeClient& client_;
  Clock& clock_;
  LeaderElectionConfig config_;
  Logger log_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stop_{false};
  CancelToken stop_token_;  // cancels an acquire attempt's read on stop()
  std::mutex mu_;
  std::condition_variable_any cv_;
  mutable std::mutex fence_mu_;
  MonoTime valid_until_{};
  // What we last saw of the lease, and when (our monotonic clock). Run thread only.
  std::string observed_holder_;
  std::string observed_renew_time_;
  std::string observed_resource_version_;
  MonoTime observed_time_{};
};

}  // namespace c4::op
