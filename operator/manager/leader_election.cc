// Lease-based leader election.
#include "operator/manager/leader_election.h"

#include <algorithm>
#include <cmath>

namespace c4::op {

LeaderElector::LeaderElector(KubeClient& client, Clock& clock, LeaderElectionConfig config)
    : client_(client),
      clock_(clock),
      config_(std::move(config)),
      log_(Logger("leader-election")
               .with({{"lease", config_.lease_namespace + "/" + config_.lease_name},
                      {"identity", config_.identity}})) {
  if (!config_.random) config_.random = defaultRandomSource();
}

MonoTime LeaderElector::leaseValidUntil() const {
  std::lock_guard lock(fence_mu_);
  return valid_until_;
}

bool LeaderElector::mayWrite(MonoTime now) const {
  std::lock_guard lock(fence_mu_);
  return valid_until_ != MonoTime{} && now < valid_until_;
}

void LeaderElector::setValidUntil(MonoTime t) {
  std::lock_guard lock(fence_mu_);
  valid_until_ = t;
}

Duration LeaderElector::callTimeout(bool renewing) const {
  MonoTime valid_until = leaseValidUntil();
  MonoTime now = clock_.monoNow();
  if (renewing) return valid_until - now;  // zero or less: the deadline has passed
  if (valid_until != MonoTime{} && valid_until > now) return valid_until - now;
  return config_.renew_deadline;
}

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
    // created from nothing starts at 0, see attempt()). Renewals and releases keep the count.
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
  observed_renew_time_ = stringAt(fieldsOf(lease, "spec"), "renewTime").value_or("");
  observed_resource_version_ =
      stringAt(fieldsOf(lease, "metadata"), "resourceVersion").value_or("");
  observed_time_ = now;
}

bool LeaderElector::tryAcquireOrRenew() {
  return attempt(false) == Attempt::kHeld;
}

LeaderElector::Attempt LeaderElector::attempt(bool renewing) {
  const auto& leases = resources::leases();
  if (!renewing && leaseValidUntil() != MonoTime{} && !mayWrite(clock_.monoNow())) {
    setValidUntil(MonoTime{});  // our term lapsed: this is an acquisition again
  }
  Duration timeout = callTimeout(renewing);
  if (timeout <= Duration::zero()) return Attempt::kFailed;  // past the deadline: no write
  GetOptions get_options;
  get_options.cancel = &stop_token_;
  get_options.timeout = timeout;
  auto current = client_.get(leases, config_.lease_namespace, config_.lease_name, get_options);
  MonoTime now = clock_.monoNow();
  WriteOptions write_options;
  if (!current) {
    if (current.error().code != ErrorCode::kNotFound) {
      log_.warn("Lease read failed", {{"error", current.error()}});
      return Attempt::kFailed;
    }
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec", newLeaseSpec(Json::object(), true)}};
    lease["spec"]["leaseTransitions"] = 0;  // the first term
    write_options.timeout = callTimeout(renewing);
    if (write_options.timeout <= Duration::zero()) return Attempt::kFailed;
    MonoTime sent = clock_.monoNow();
    auto created = client_.create(leases, config_.lease_namespace, lease, write_options);
    if (!created) {
      log_.info("Lease create lost", {{"error", created.error()}});
      return Attempt::kFailed;
    }
    recordOwnLease(*created, clock_.monoNow());
    setValidUntil(sent + config_.renew_deadline);
    return Attempt::kHeld;
  }
  const Json& spec = fieldsOf(*current, "spec");
  std::string holder = stringAt(spec, "holderIdentity").value_or("");
  std::string renew_time = stringAt(spec, "renewTime").value_or("");
  std::string rv = stringAt(fieldsOf(*current, "metadata"), "resourceVersion").value_or("");
  if (holder != observed_holder_ || renew_time != observed_renew_time_ ||
      rv != observed_resource_version_) {
    observed_holder_ = holder;
    observed_renew_time_ = renew_time;
    observed_resource_version_ = rv;
    observed_time_ = now;
  }
  Duration duration = config_.lease_duration;
  if (auto seconds = intAt(spec, "leaseDurationSeconds")) {
    duration = std::chrono::seconds{*seconds};
  }
  bool held_by_other = !holder.empty() && holder != config_.identity;
  if (held_by_other) setValidUntil(MonoTime{});  // whatever we thought, it is not ours now
  if (held_by_other && observed_time_ + duration > now) return Attempt::kHeldByOther;

  Json updated = *current;
  updated["spec"] = newLeaseSpec(spec, holder != config_.identity);
  write_options.timeout = callTimeout(renewing);
  if (write_options.timeout <= Duration::zero()) return Attempt::kFailed;
  MonoTime sent = clock_.monoNow();
  auto result = client_.update(leases, config_.lease_namespace, updated, write_options);
  if (!result) {
    log_.info("Lease update failed", {{"error", result.error()}});
    return Attempt::kFailed;
  }
  recordOwnLease(*result, clock_.monoNow());
  setValidUntil(sent + config_.renew_deadline);
  return Attempt::kHeld;
}

Status LeaderElector::release() {
  setValidUntil(MonoTime{});  // giving up: nothing guarded by the lease may be written now
  const auto& leases = resources::leases();
  GetOptions get_options;
  get_options.timeout = config_.renew_deadline;
  C4_ASSIGN_OR_RETURN(
      Json current, client_.get(leases, config_.lease_namespace, config_.lease_name, get_options));
  if (stringAt(fieldsOf(current, "spec"), "holderIdentity") != config_.identity) return okStatus();
  current["spec"]["holderIdentity"] = "";
  current["spec"]["leaseDurationSeconds"] = 1;
  current["spec"]["renewTime"] = formatRfc3339Micro(clock_.wallNow());
  WriteOptions write_options;
  write_options.timeout = config_.renew_deadline;
  auto result = client_.update(leases, config_.lease_namespace, current, write_options);
  if (!result) return std::unexpected(result.error());
  leader_ = false;
  return okStatus();
}

void LeaderElector::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  stop_token_.cancel();
}

bool LeaderElector::run(const std::function<void()>& on_started,
                        const std::function<void()>& on_stopped,
                        const std::function<void()>& on_lost) {
  auto waitUntil = [this](MonoTime deadline) {
    std::unique_lock lock(mu_);
    clock_.waitUntil(lock, cv_, deadline, [this] { return stop_.load(); });
  };
  // Acquire: at once, then after every failed attempt retryPeriod * (1 + 1.2 * random())
  // (client-go: wait.JitterUntil, sliding).
  while (!stop_.load()) {
    if (tryAcquireOrRenew()) break;
    waitUntil(clock_.monoNow() + jitter(config_.retry_period, kAcquireJitter, config_.random));
  }
  if (stop_.load()) {
    setValidUntil(MonoTime{});
    return true;
  }
  leader_ = true;
  log_.info("Became leader");
  on_started();
  bool lost = false;
  const char* why = "";
  MonoTime next_renew = clock_.monoNow() + config_.retry_period;
  while (!stop_.load()) {
    // Wake for the next renewal, or at the deadline if that comes first.
    waitUntil(std::min(next_renew, leaseValidUntil()));
    if (stop_.load()) break;
    if (clock_.monoNow() >= leaseValidUntil()) {
      lost = true;
      why = "not renewed within the renew deadline";
      break;
    }
    if (clock_.monoNow() < next_renew) continue;
    Attempt result = attempt(/*renewing=*/true);
    if (result == Attempt::kHeldByOther) {
      lost = true;
      why = "another candidate holds the lease";
      break;
    }
    if (clock_.monoNow() >= leaseValidUntil()) {
      lost = true;
      why = "not renewed within the renew deadline";
      break;
    }
    next_renew = clock_.monoNow() + config_.retry_period;
  }
  leader_ = false;
  if (lost) {
    setValidUntil(MonoTime{});
    log_.error("Lost leadership", {{"reason", why}});
    if (on_lost) on_lost();
  }
  // The guarded work stops first; only then may another instance take the lease (client-go's
  // ReleaseOnCancel contract), so two leaders never reconcile at the same time.
  on_stopped();
  setValidUntil(MonoTime{});
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
