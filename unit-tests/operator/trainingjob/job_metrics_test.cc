#include "operator/trainingjob/job_metrics.h"

#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"

namespace c4::op {
namespace {

// The value of one exposed series ("name{labels}"), or nullopt when it is not exposed.
std::optional<double> seriesValue(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

Json job(const std::string& name, Json status, Json fault_tolerance = nullptr) {
  Json spec = {{"replicas", 2},
               {"template", {{"spec", {{"containers", {{{"name", "t"}, {"image", "x"}}}}}}}}};
  if (!fault_tolerance.is_null()) spec["faultTolerance"] = std::move(fault_tolerance);
  return {{"apiVersion", "c4.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"namespace", "ml"}, {"name", name}, {"uid", name + "-uid"}}},
          {"spec", spec},
          {"status", std::move(status)}};
}

class JobMetricsTest : public ::testing::Test {
 protected:
  std::string scrape() { return registry_.expose(); }
  std::string at(int seconds_ago) {
    return formatRfc3339(clock_.wallNow() - std::chrono::seconds{seconds_ago});
  }

  SimulatedClock clock_;
  metrics::Registry registry_;
  std::vector<Json> jobs_;
  JobMetrics metrics_{[this] { return jobs_; }, clock_, registry_};
};

TEST_F(JobMetricsTest, RunningJobExposesStatusWithGoodputAccruedToTheScrape) {
  jobs_.push_back(job(
      "a",
      {{"phase", "Running"},
       {"phaseSince", at(100)},
       {"attempt", 2},
       {"restarts", 2},
       {"restartsCountTowardsMax", 1},
       {"goodput", {{"productiveSeconds", 100}, {"lostSeconds", 20}, {"lastUpdateTime", at(5)}}},
       {"plan", {{"version", 3}}}},
      {{"maxRestarts", 4}}));
  clock_.advance(std::chrono::milliseconds{500});  // fractions of a second do not count
  const std::string out = scrape();
  const std::string k = "{namespace=\"ml\",trainingjob=\"a\"}";
  EXPECT_EQ(seriesValue(out, "c4_operator_job_productive_seconds" + k), 105);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_lost_seconds" + k), 20);
  EXPECT_DOUBLE_EQ(*seriesValue(out, "c4_operator_job_goodput_ratio" + k), 105.0 / 125.0);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_restarts" + k), 2);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_restarts_counted" + k), 1);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_max_restarts" + k), 4);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_attempt" + k), 2);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_plan_version" + k), 3);
  EXPECT_EQ(seriesValue(
                out, "c4_operator_job_phase{namespace=\"ml\",trainingjob=\"a\",phase=\"Running\"}"),
            1);
}

TEST_F(JobMetricsTest, RestartingAccruesLostSecondsAndDefaultsApply) {
  jobs_.push_back(job(
      "b",
      {{"phase", "Restarting"},
       {"goodput", {{"productiveSeconds", 30}, {"lostSeconds", 0}, {"lastUpdateTime", at(10)}}}}));
  const std::string out = scrape();
  const std::string k = "{namespace=\"ml\",trainingjob=\"b\"}";
  EXPECT_EQ(seriesValue(out, "c4_operator_job_productive_seconds" + k), 30);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_lost_seconds" + k), 10);
  EXPECT_DOUBLE_EQ(*seriesValue(out, "c4_operator_job_goodput_ratio" + k), 0.75);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_max_restarts" + k), 3);  // the API's default
  EXPECT_EQ(seriesValue(out, "c4_operator_job_plan_version" + k), std::nullopt);  // no plan yet
}

TEST_F(JobMetricsTest, NewJobHasNoRatioAndABadSpecNoBudget) {
  Json bad = job("c", {{"phase", "Pending"}});
  bad["spec"]["replicas"] = "many";
  jobs_.push_back(bad);
  const std::string out = scrape();
  const std::string k = "{namespace=\"ml\",trainingjob=\"c\"}";
  EXPECT_EQ(seriesValue(out, "c4_operator_job_productive_seconds" + k), 0);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_goodput_ratio" + k), std::nullopt);
  EXPECT_EQ(seriesValue(out, "c4_operator_job_max_restarts" + k), std::nullopt);
  EXPECT_EQ(seriesValue(
                out, "c4_operator_job_phase{namespace=\"ml\",trainingjob=\"c\",phase=\"Pending\"}"),
            1);
}

TEST_F(JobMetricsTest, SeriesFollowTheCache) {
  jobs_.push_back(job("a", {{"phase", "Running"}, {"plan", {{"version", 1}}}}));
  jobs_.push_back(job("b", {{"phase", "Running"}}));
  std::string out = scrape();
  ASSERT_TRUE(seriesValue(out, "c4_operator_job_attempt{namespace=\"ml\",trainingjob=\"a\"}"));
  ASSERT_TRUE(seriesValue(out, "c4_operator_job_plan_version{namespace=\"ml\",trainingjob=\"a\"}"));

  jobs_.erase(jobs_.begin());                 // job a deleted
  jobs_[0]["status"]["phase"] = "Succeeded";  // job b finished
  out = scrape();
  EXPECT_EQ(out.find("trainingjob=\"a\""), std::string::npos) << out;
  EXPECT_EQ(seriesValue(
                out, "c4_operator_job_phase{namespace=\"ml\",trainingjob=\"b\",phase=\"Running\"}"),
            std::nullopt);
  EXPECT_EQ(
      seriesValue(out,
                  "c4_operator_job_phase{namespace=\"ml\",trainingjob=\"b\",phase=\"Succeeded\"}"),
      1);
}

}  // namespace
}  // namespace c4::op
