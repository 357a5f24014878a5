#include "operator/trainingjob/job_metrics.h"

#include <chrono>
#include <set>
#include <utility>

#include "operator/trainingjob/api.h"
#include "operator/trainingjob/status.h"

namespace c4::op {
namespace {

const std::vector<std::string> kJobLabels = {"namespace", "trainingjob"};

double number(const std::optional<std::int64_t>& value) {
  return static_cast<double>(value.value_or(0));
}

}  // namespace

JobMetrics::JobMetrics(std::function<std::vector<Json>()> list_jobs, Clock& clock,
                       metrics::Registry& registry)
    : list_jobs_(std::move(list_jobs)),
      clock_(clock),
      productive_(registry.gauge("c4_operator_job_productive_seconds",
                                 "Seconds the job ran (status.goodput, accrued to the scrape).",
                                 kJobLabels)),
      lost_(registry.gauge("c4_operator_job_lost_seconds",
                           "Seconds the job spent restarting (status.goodput, accrued).",
                           kJobLabels)),
      ratio_(registry.gauge("c4_operator_job_goodput_ratio",
                            "Productive share of the job's productive plus lost seconds.",
                            kJobLabels)),
      restarts_(registry.gauge("c4_operator_job_restarts",
                               "Whole-job restarts of the job (status.restarts).", kJobLabels)),
      restarts_counted_(registry.gauge(
          "c4_operator_job_restarts_counted",
          "Restarts counted against the user's budget (status.restartsCountTowardsMax).",
          kJobLabels)),
      max_restarts_(registry.gauge("c4_operator_job_max_restarts",
                                   "The job's restart budget (spec.faultTolerance.maxRestarts).",
                                   kJobLabels)),
      attempt_(registry.gauge("c4_operator_job_attempt", "The job's current attempt (0 first).",
                              kJobLabels)),
      plan_version_(registry.gauge("c4_operator_job_plan_version",
                                   "Version of the job's current C4P traffic plan.", kJobLabels)),
      phase_(registry.gauge("c4_operator_job_phase", "1 for the job's current phase.",
                            {"namespace", "trainingjob", "phase"})),
      hook_(registry.onCollect([this] { refresh(); })) {}

void JobMetrics::refresh() {
  const WallTime now = clock_.wallNow();
  std::map<metrics::Family<metrics::Gauge>*, std::set<std::vector<std::string>>> seen;
  auto put = [&seen](metrics::Family<metrics::Gauge>& family, std::vector<std::string> labels,
                     double value) {
    family.labels(labels).set(value);
    seen[&family].insert(std::move(labels));
  };
  for (const Json& job : list_jobs_()) {
    const std::string ns = objectNamespace(job);
    const std::string name = objectName(job);
    if (name.empty()) continue;
    const std::vector<std::string> key = {ns, name};
    // A status that does not decode (never from the API server) reads as an empty one.
    const TrainingJobStatus status = parseTrainingJobStatus(job).value_or(TrainingJobStatus{});
    const std::string phase = status.phase.value_or("");
    const GoodputStatus goodput = status.goodput.value_or(GoodputStatus{});

    double productive = number(goodput.productive_seconds);
    double lost = number(goodput.lost_seconds);
    // The reconciler's accrual (planner.cc accrueGoodput), up to now.
    auto since = parseRfc3339(goodput.last_update_time.value_or(""));
    if (!since) since = parseRfc3339(status.phase_since.value_or(""));
    if (since && *since < now) {
      const auto whole = std::chrono::duration_cast<std::chrono::seconds>(now - *since).count();
      if (phase == phases::kRunning) productive += static_cast<double>(whole);
      if (phase == phases::kRestarting) lost += static_cast<double>(whole);
    }
    put(productive_, key, productive);
    put(lost_, key, lost);
    if (productive + lost > 0) put(ratio_, key, productive / (productive + lost));

    put(restarts_, key, number(status.restarts));
    put(restarts_counted_, key, number(status.restarts_count_towards_max));
    if (auto spec = parseTrainingJobSpec(job)) {
      put(max_restarts_, key, static_cast<double>(spec->fault_tolerance.max_restarts));
    }
    put(attempt_, key, number(status.attempt));
    if (status.plan && status.plan->version) {
      put(plan_version_, key, static_cast<double>(*status.plan->version));
    }
    if (!phase.empty()) put(phase_, {ns, name, phase}, 1);
  }
  for (auto* family : {&productive_, &lost_, &ratio_, &restarts_, &restarts_counted_,
                       &max_restarts_, &attempt_, &plan_version_, &phase_}) {
    auto& previous = exposed_[family];
    const auto& current = seen[family];
    for (const auto& labels : previous) {
      if (!current.contains(labels)) family->remove(labels);
    }
    previous.assign(current.begin(), current.end());
  }
}

}  // namespace c4::op
