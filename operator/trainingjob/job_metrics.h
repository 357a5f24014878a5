// Per-job gauges derived from the TrainingJobs the operator caches, refreshed at every scrape (a
// collect hook), so /metrics shows each job's goodput, restart budget, plan version and phase
// without a second source of truth: the values are the job's status (and spec) as cached, with
// goodput accrued up to the scrape the way the reconciler accrues it (whole seconds since
// status.goodput.lastUpdateTime count as productive while Running, lost while Restarting).
//
// Series, all labelled {namespace, trainingjob} (not "job": Prometheus sets that one to the scrape
// job; scrape the operator with honor_labels so "namespace" stays the job's); a job's series
// disappear when it leaves the cache:
//   c4_operator_job_productive_seconds   status.goodput.productiveSeconds (+ accrual)
//   c4_operator_job_lost_seconds         status.goodput.lostSeconds (+ accrual)
//   c4_operator_job_goodput_ratio        productive / (productive + lost); absent while both are 0
//   c4_operator_job_restarts             status.restarts (every whole-job restart)
//   c4_operator_job_restarts_counted     status.restartsCountTowardsMax (the user's budget spent)
//   c4_operator_job_max_restarts         spec.faultTolerance.maxRestarts (default applied)
//   c4_operator_job_attempt              status.attempt
//   c4_operator_job_plan_version         status.plan.version (C4P); absent before the first plan
//   c4_operator_job_phase{phase}         1 for the job's current status.phase
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

class JobMetrics {
 public:
  // `list_jobs` returns the cached TrainingJobs (it runs on the scraping thread, so it must be
  // thread-safe, as an informer's store is). The registry must outlive this object.
  JobMetrics(std::function<std::vector<Json>()> list_jobs, Clock& clock,
             metrics::Registry& registry);
  JobMetrics(const JobMetrics&) = delete;
  JobMetrics& operator=(const JobMetrics&) = delete;

  // Sets every job's series from list_jobs() and drops those of jobs gone since the last call
  // (the collect hook runs it; exposed for tests).
  void refresh();

 private:
  std::function<std::vector<Json>()> list_jobs_;
  Clock& clock_;
  metrics::Family<metrics::Gauge>& productive_;
  metrics::Family<metrics::Gauge>& lost_;
  metrics::Family<metrics::Gauge>& ratio_;
  metrics::Family<metrics::Gauge>& restarts_;
  metrics::Family<metrics::Gauge>& restarts_counted_;
  metrics::Family<metrics::Gauge>& max_restarts_;
  metrics::Family<metrics::Gauge>& attempt_;
  metrics::Family<metrics::Gauge>& plan_version_;
  metrics::Family<metrics::Gauge>& phase_;
  // Label values last exposed per family (only refresh() touches them; the registry runs one
  // hook at a time).
  std::map<const void*, std::vector<std::vector<std::string>>> exposed_;
  metrics::CollectHook hook_;  // last: removed (and waited for) before the members above go
};

}  // namespace c4::op
