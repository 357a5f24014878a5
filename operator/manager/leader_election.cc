// Lease-based leader election.
#include "operator/manager/leader_election.h"

#include <cmath>

namespace c4::op {

LeaderElector::LeaderElector(KubeClient& client, Clock& clock, LeaderElectionConfig config)
    : client_(client),
      clock_(clock),
      config_(std::move(config)),
      log_(Logger("leader-election")
               .with({{"lease", config_.lease_namespace + "/" + config_.lease_name},
                      {"identity", config_.identity}})) {}

Json LeaderElector::newLeaseSpec(const Json& old_spec, bool acquiring) const {
  Json spec = old_spec.is_object() ? old_spec : Json::object();
  std::string now = formatRfc3339Micro(clock_.wallNow());
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = static_cast<std::int64_t>(
      std::ceil(std::chrono::duration<double>(config_.lease_duration).count()));
  spec["renewTime"] = now;
  if (acquiring) {
    // A new term: the holder was someone else or nobody (released). client-go counts every
    // acquisition from a holder that was not this candidate, an empty one included (a lease
    // created from nothing starts at 0, see tryAcquireOrRenew()). Renewals and releases keep
    // the count.
    spec["acquireTime"] = now;
    std::int64_t transitions = 0;
    if (old_spec.is_object() && old_spec.contains("leaseTransitions") &&
        old_spec["leaseTransitions"].is_number_integer()) {
      transitions = old_spec["leaseTransitions"].get<std::int64_t>();
    }
    spec["leaseTransitions"] = transitions + 1;
  }
  return spec;
}

void LeaderElector::recordOwnLease(const Json& lease, MonoTime now) {
  observed_holder_ = config_.identity;
  observed_renew_time_ = lease["spec"].value("renewTime", std::string{});
  observed_resource_version_ = lease["metadata"].value("resourceVersion", std::string{});
  observed_time_ = now;
}

bool LeaderElector::tryAcquireOrRenew() {
  const auto& leases = resources::leases();
  MonoTime now = clock_.monoNow();
  auto current = client_.get(leases, config_.lease_namespace, config_.lease_name);
  if (!current) {
    if (current.error().code != ErrorCode::kNotFound) {
      log_.warn("Lease read failed", {{"error", current.error()}});
      return false;
    }
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec", newLeaseSpec(Json::object(), true)}};
    lease["spec"]["leaseTransitions"] = 0;  // the first term
    auto created = client_.create(leases, config_.lease_namespace, lease);
    if (!created) {
      log_.info("Lease create lost", {{"error", created.error()}});
      return false;
    }
    recordOwnLease(*created, now);
    return true;
  }
  const Json& spec = (*current)["spec"];
  std::string holder = spec.is_object() ? spec.value("holderIdentity", std::string{}) : "";
  std::string renew_time = spec.is_object() ? spec.value("renewTime", std::string{}) : "";
  std::string rv = (*current)["metadata"].value("resourceVersion", std::string{});
  if (holder != observed_holder_ || renew_time != observed_renew_time_ ||
      rv != observed_resource_version_) {
    observed_holder_ = holder;
    observed_renew_time_ = renew_time;
    observed_resource_version_ = rv;
    observed_time_ = now;
  }
  Duration duration = config_.lease_duration;
  if (spec.is_object() && spec.contains("leaseDurationSeconds") &&
      spec["leaseDurationSeconds"].is_number_integer()) {
    duration = std::chrono::seconds{spec["leaseDurationSeconds"].get<std::int64_t>()};
  }
  bool held_by_other = !holder.empty() && holder != config_.identity;
  if (held_by_other && observed_time_ + duration > now) return false;  // not expired yet

  Json updated = *current;
  updated["spec"] = newLeaseSpec(spec, holder != config_.identity);
  auto result = client_.update(leases, config_.lease_namespace, updated);
  if (!result) {
    log_.info("Lease update failed", {{"error", result.error()}});
    return false;
  }
  recordOwnLease(*result, now);
  return true;
}

Status LeaderElector::release() {
  const auto& leases = resources::leases();
  C4_ASSIGN_OR_RETURN(Json current,
                      client_.get(leases, config_.lease_namespace, config_.lease_name));
  if (current["spec"].value("holderIdentity", std::string{}) != config_.identity) return okStatus();
  current["spec"]["holderIdentity"] = "";
  current["spec"]["leaseDurationSeconds"] = 1;
  current["spec"]["renewTime"] = formatRfc3339Micro(clock_.wallNow());
  auto result = client_.update(leases, config_.lease_namespace, current);
  if (!result) return std::unexpected(result.error());
  leader_ = false;
  return okStatus();
}

void LeaderElector::stop() {
  std::lock_guard lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

bool LeaderElector::run(const std::function<void()>& on_started,
                        const std::function<void()>& on_stopped) {
  auto waitRetry = [this] {
    std::unique_lock lock(mu_);
    clock_.waitUntil(lock, cv_, clock_.monoNow() + config_.retry_period,
                     [this] { return stop_.load(); });
  };
  while (!stop_.load()) {
    if (tryAcquireOrRenew()) break;
    waitRetry();
  }
  if (stop_.load()) return true;
  leader_ = true;
  log_.info("Became leader");
  on_started();
  MonoTime last_renew = clock_.monoNow();
  bool lost = false;
  while (!stop_.load()) {
    waitRetry();
    if (stop_.load()) break;
    if (tryAcquireOrRenew()) {
      last_renew = clock_.monoNow();
    } else if (clock_.monoNow() - last_renew >= config_.renew_deadline) {
      lost = true;
      break;
    }
  }
  leader_ = false;
  if (lost) log_.error("Lost leadership: could not renew the lease within the renew deadline");
  // The guarded work stops first; only then may another instance take the lease (client-go's
  // ReleaseOnCancel contract), so two leaders never reconcile at the same time.
  on_stopped();
  if (lost) {
    // Nothing to release: someone else may already hold it.
  } else if (!config_.release_on_stop) {
    log_.info("Stopped leading without releasing the lease");
  } else if (auto released = release(); !released) {
    log_.warn("Lease release failed", {{"error", released.error()}});
  } else {
    log_.info("Released the lease");
  }
  return !lost;
}

}  // namespace c4::op
