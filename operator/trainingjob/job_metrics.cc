#include "operator/trainingjob/job_metrics.h"

#include <chrono>
#include <set>
#include <utility>

#include "operator/trainingjob/api.h"

namespace c4::op {
namespace {

const std::vector<std::string> kJobLabels = {"namespace", "trainingjob"};

double numberAt(const Json& object, const char* pointer, double fallback) {
  const Json::json_pointer p(pointer);
  if (!object.contains(p)) return fallback;
  const Json& v = object.at(p);
  return v.is_number() ? v.get<double>() : fallback;
}

std::string stringAt(const Json& object, const char* pointer) {
  const Json::json_pointer p(pointer);
  if (!object.contains(p) || !object.at(p).is_string()) return {};
  return object.at(p).get<std::string>();
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
    const std::string ns = stringAt(job, "/metadata/namespace");
    const std::string name = stringAt(job, "/metadata/name");
    if (name.empty()) continue;
    const std::vector<std::string> key = {ns, name};
    const std::string phase = stringAt(job, "/status/phase");

    double productive = numberAt(job, "/status/goodput/productiveSeconds", 0);
    double lost = numberAt(job, "/status/goodput/lostSeconds", 0);
    // The reconciler's accrual (planner.cc accrueGoodput), up to now.
    auto since = parseRfc3339(stringAt(job, "/status/goodput/lastUpdateTime"));
    if (!since) since = parseRfc3339(stringAt(job, "/status/phaseSince"));
    if (since && *since < now) {
      const auto whole = std::chrono::duration_cast<std::chrono::seconds>(now - *since).count();
      if (phase == phases::kRunning) productive += static_cast<double>(whole);
      if (phase == phases::kRestarting) lost += static_cast<double>(whole);
    }
    put(productive_, key, productive);
    put(lost_, key, lost);
    if (productive + lost > 0) put(ratio_, key, productive / (productive + lost));

    put(restarts_, key, numberAt(job, "/status/restarts", 0));
    put(restarts_counted_, key, numberAt(job, "/status/restartsCountTowardsMax", 0));
    if (auto spec = parseTrainingJobSpec(job)) {
      put(max_restarts_, key, static_cast<double>(spec->fault_tolerance.max_restarts));
    }
    put(attempt_, key, numberAt(job, "/status/attempt", 0));
    const Json::json_pointer version("/status/plan/version");
    if (job.contains(version) && job.at(version).is_number()) {
      put(plan_version_, key, job.at(version).get<double>());
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
