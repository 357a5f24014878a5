// The TrainingJob status codec: every field round-trips, wrong types are errors naming the field
// (never exceptions), members the operator does not know survive a write back, and the planner
// leaves a status it cannot read alone.
#include "operator/trainingjob/status.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "c4/common/clock.h"
#include "operator/trainingjob/planner.h"
#include "unit-tests/support/trainingjob_status_fixture.h"

namespace c4::op {
namespace {

using fixtures::fullStatus;

TEST(TrainingJobStatusTest, EveryFieldRoundTrips) {
  const Json in = fullStatus();
  auto decoded = decodeTrainingJobStatus(in);
  ASSERT_TRUE(decoded) << decoded.error().toString();
  const TrainingJobStatus& s = *decoded;
  EXPECT_EQ(s.phase, "Restarting");
  EXPECT_EQ(s.phase_since, "2025-03-01T10:00:00Z");
  EXPECT_EQ(s.observed_generation, 7);
  EXPECT_EQ(s.restarts, 3);
  EXPECT_EQ(s.attempt, 4);
  EXPECT_EQ(s.restarts_count_towards_max, 1);
  EXPECT_EQ(s.infrastructure_restarts, 2);
  EXPECT_EQ(s.consecutive_failures, 1);
  EXPECT_EQ(s.next_attempt_time, "2025-03-01T10:00:10Z");
  EXPECT_EQ(s.started_indexes, "0-3,5");
  EXPECT_EQ(s.active, 5);
  EXPECT_EQ(s.ready, 4);
  EXPECT_EQ(s.succeeded, 0);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.last_restart_time, "2025-03-01T10:00:00Z");
  EXPECT_EQ(s.last_fault, "pod llm-1 (rank 1) failed: exit code 3");
  ASSERT_TRUE(s.last_checkpoint);
  EXPECT_EQ(s.last_checkpoint->step, 1200);
  EXPECT_EQ(s.last_checkpoint->path, "/ckpt/1200");
  EXPECT_EQ(s.last_checkpoint->time, "2025-03-01T09:59:00Z");
  ASSERT_TRUE(s.plan);
  EXPECT_EQ(s.plan->version, 9);
  EXPECT_EQ(s.plan->mode, c4p::Mode::kEnforce);
  EXPECT_EQ(s.plan->max_link_load, "0.750");
  EXPECT_EQ(s.plan->reason, "link failed");
  EXPECT_EQ(s.plan->time, "2025-03-01T09:58:00Z");
  EXPECT_EQ(s.plan->applied_version, 8);
  EXPECT_EQ(s.plan->ranks_applied, 6);
  EXPECT_EQ(s.plan->ranks_reporting, 8);
  EXPECT_EQ(s.avoid_nodes, (std::vector<std::string>{"node-a", "node-b"}));
  ASSERT_EQ(s.faults.size(), 1u);
  const FaultRecord& f = s.faults[0];
  EXPECT_EQ(f.time, "2025-03-01T10:00:00Z");
  EXPECT_EQ(f.fault_class, "commHang");
  EXPECT_EQ(f.attempt, 3);
  EXPECT_EQ(f.pod, "llm-1");
  EXPECT_EQ(f.node, "node-a");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.exit_code, 134);
  EXPECT_EQ(f.link, "node-a<->node-b");
  EXPECT_EQ(f.summary, "hang on rank 1");
  EXPECT_EQ(f.action, "restart");
  EXPECT_EQ(f.counted, false);
  EXPECT_EQ(f.detection_seconds, 2.5);
  EXPECT_EQ(f.recompute_seconds, 60);
  EXPECT_EQ(f.restart_seconds, 7);
  ASSERT_TRUE(s.goodput);
  EXPECT_EQ(s.goodput->productive_seconds, 3600);
  EXPECT_EQ(s.goodput->lost_seconds, 120);
  EXPECT_EQ(s.goodput->last_update_time, "2025-03-01T10:00:00Z");
  ASSERT_EQ(s.conditions.size(), 2u);
  EXPECT_EQ(s.conditions[0].type, "Restarting");
  EXPECT_EQ(s.conditions[0].status, "True");
  EXPECT_EQ(s.conditions[0].observed_generation, 7);
  EXPECT_EQ(s.conditions[0].last_transition_time, "2025-03-01T10:00:00Z");
  EXPECT_EQ(s.conditions[0].reason, "FaultDiagnosed");
  EXPECT_EQ(s.conditions[0].message, "restarting as attempt 4");
  EXPECT_FALSE(s.conditions[1].observed_generation) << "absent stays absent";
  EXPECT_TRUE(isConditionTrue(s, "Restarting"));
  EXPECT_FALSE(isConditionTrue(s, "Running"));
  EXPECT_EQ(findCondition(s, "Degraded"), nullptr);
  EXPECT_TRUE(s.unknown.empty());

  EXPECT_EQ(trainingJobStatusJson(s), in) << "encodes to exactly what it decoded";
  auto again = decodeTrainingJobStatus(trainingJobStatusJson(s));
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, s);
}

TEST(TrainingJobStatusTest, AbsentNullAndPartialStatuses) {
  Json job = {{"metadata", {{"name", "llm"}}}};
  auto none = parseTrainingJobStatus(job);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, TrainingJobStatus{});
  EXPECT_EQ(trainingJobStatusJson(*none), Json::object()) << "nothing invented";
  job["status"] = nullptr;
  ASSERT_TRUE(parseTrainingJobStatus(job));
  // Null members count as absent; a status of an older operator (no attempt) keeps its shape.
  Json partial = {{"phase", "Running"}, {"restarts", 1}, {"attempt", nullptr}, {"plan", nullptr}};
  auto s = decodeTrainingJobStatus(partial);
  ASSERT_TRUE(s) << s.error().toString();
  EXPECT_FALSE(s->attempt);
  EXPECT_FALSE(s->plan);
  EXPECT_EQ(trainingJobStatusJson(*s), (Json{{"phase", "Running"}, {"restarts", 1}}));
  // status.plan alone: what the traffic-plan controller merge-patches.
  TrainingJobStatus plan_only;
  plan_only.plan.emplace();
  plan_only.plan->version = 2;
  plan_only.plan->mode = c4p::Mode::kAdvisory;
  EXPECT_EQ(trainingJobStatusJson(plan_only),
            (Json{{"plan", {{"version", 2}, {"mode", "Advisory"}}}}));
}

TEST(TrainingJobStatusTest, WrongTypesAreErrorsNamingTheField) {
  // (JSON pointer into the status, wrong value, the field the error must name)
  const std::vector<std::tuple<std::string, Json, std::string>> cases = {
      {"/phase", 3, "status.phase must be a string"},
      {"/restarts", "3", "status.restarts must be an integer"},
      {"/attempt", 1.5, "status.attempt must be an integer"},
      {"/observedGeneration", true, "status.observedGeneration must be an integer"},
      {"/failed", 18446744073709551615ULL, "status.failed must be an integer"},
      {"/startedIndexes", Json::array(), "status.startedIndexes must be a string"},
      {"/lastCheckpoint", "1200", "status.lastCheckpoint must be an object"},
      {"/lastCheckpoint/step", "1200", "status.lastCheckpoint.step must be an integer"},
      {"/lastCheckpoint/time", 0, "status.lastCheckpoint.time must be a string"},
      {"/plan/version", "9", "status.plan.version must be an integer"},
      {"/plan/mode", "Sometimes",
       "status.plan.mode must be Off, Advisory or Enforce, not \"Sometimes\""},
      {"/plan/mode", 1, "status.plan.mode must be a string"},
      {"/avoidNodes", "node-a", "status.avoidNodes must be a list"},
      {"/avoidNodes/1", 7, "status.avoidNodes[1] must be a string"},
      {"/faults", Json::object(), "status.faults must be a list"},
      {"/faults/0", "crash", "status.faults[0] must be an object"},
      {"/faults/0/rank", "1", "status.faults[0].rank must be an integer"},
      {"/faults/0/exitCode", "134", "status.faults[0].exitCode must be an integer"},
      {"/faults/0/counted", "no", "status.faults[0].counted must be a boolean"},
      {"/faults/0/detectionSeconds", "2.5", "status.faults[0].detectionSeconds must be a number"},
      {"/faults/0/restartSeconds", 7.5, "status.faults[0].restartSeconds must be an integer"},
      {"/goodput", Json::array(), "status.goodput must be an object"},
      {"/goodput/lostSeconds", "120", "status.goodput.lostSeconds must be an integer"},
      {"/conditions/1/status", false, "status.conditions[1].status must be a string"},
      {"/conditions/0/observedGeneration", "7",
       "status.conditions[0].observedGeneration must be an integer"},
  };
  for (const auto& [pointer, value, message] : cases) {
    Json job = {{"metadata", {{"name", "llm"}}}, {"status", fullStatus()}};
    job["status"][Json::json_pointer(pointer)] = value;
    Result<TrainingJobStatus> s = TrainingJobStatus{};
    EXPECT_NO_THROW(s = parseTrainingJobStatus(job)) << pointer;
    ASSERT_FALSE(s) << pointer << " = " << value.dump();
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << pointer;
    EXPECT_EQ(s.error().message, message) << pointer;
  }
  Json job = {{"status", Json::array()}};
  auto s = parseTrainingJobStatus(job);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "status must be an object");
}

TEST(TrainingJobStatusTest, UnknownMembersSurviveAWriteBack) {
  Json in = fullStatus();
  in["fromANewerOperator"] = {{"x", 1}};
  in["goodput"]["idleSeconds"] = 5;
  in["faults"][0]["gpu"] = 3;
  in["plan"]["planes"] = 2;
  in["lastCheckpoint"]["bytes"] = 100;
  in["conditions"][0]["severity"] = "high";
  auto s = decodeTrainingJobStatus(in);
  ASSERT_TRUE(s) << s.error().toString();
  EXPECT_EQ(s->unknown, (Json{{"fromANewerOperator", {{"x", 1}}}}));
  EXPECT_EQ(trainingJobStatusJson(*s), in);

  // The reconciler writes the planner's status with PUT /status: what the planner did not touch
  // is written back as it came, unknown members included.
  Json job = {
      {"apiVersion", "c4.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}, {"generation", 7}}},
      {"spec",
       {{"replicas", 2},
        {"template",
         {{"spec", {{"containers", Json::array({{{"name", "t"}, {"image", "i"}}})}}}}}}},
      {"status", in}};
  SimulatedClock clock;
  JobPlan plan = planReconcile(
      job, {},
      [](const std::string&) {
        return NodeFacts{true, true, false, false};
      },
      clock.wallNow(), PlanContext{});
  const Json out = trainingJobStatusJson(plan.status);
  EXPECT_EQ(out["fromANewerOperator"], in["fromANewerOperator"]);
  EXPECT_EQ(out["goodput"]["idleSeconds"], 5);
  EXPECT_EQ(out["faults"][0]["gpu"], 3);
  EXPECT_EQ(out["plan"], in["plan"]) << "status.plan is the traffic-plan controller's";
  EXPECT_EQ(out["lastCheckpoint"], in["lastCheckpoint"]);
  EXPECT_EQ(out["conditions"][0]["severity"], "high");
}

TEST(TrainingJobStatusTest, ConditionBookkeeping) {
  SimulatedClock clock;
  TrainingJobStatus s;
  EXPECT_TRUE(setCondition(s, "Running", "False", "Pending", "0 of 2", 1, clock.wallNow()));
  const std::string t0 = findCondition(s, "Running")->last_transition_time;
  clock.advance(std::chrono::seconds{5});
  EXPECT_TRUE(setCondition(s, "Running", "False", "Pending", "1 of 2", 2, clock.wallNow()));
  EXPECT_EQ(findCondition(s, "Running")->last_transition_time, t0) << "status unchanged";
  EXPECT_EQ(findCondition(s, "Running")->observed_generation, 2);
  EXPECT_FALSE(setCondition(s, "Running", "False", "Pending", "1 of 2", 2, clock.wallNow()));
  EXPECT_TRUE(setCondition(s, "Running", "True", "AllReplicasRunning", std::string(40000, 'x'), 2,
                           clock.wallNow()));
  EXPECT_NE(findCondition(s, "Running")->last_transition_time, t0);
  EXPECT_EQ(findCondition(s, "Running")->message.size(), 32768u) << "bounded as the CRD says";
  EXPECT_EQ(s.conditions.size(), 1u);
}

TEST(TrainingJobStatusTest, ThePlannerLeavesAStatusItCannotReadAlone) {
  Json job = {
      {"apiVersion", "c4.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}, {"generation", 1}}},
      {"spec",
       {{"replicas", 2},
        {"template",
         {{"spec", {{"containers", Json::array({{{"name", "t"}, {"image", "i"}}})}}}}}}},
      {"status", {{"phase", "Running"}, {"restarts", "two"}}}};
  SimulatedClock clock;
  JobPlan plan;
  EXPECT_NO_THROW(plan = planReconcile(
                      job, {},
                      [](const std::string&) {
                        return NodeFacts{true, true, false, false};
                      },
                      clock.wallNow(), PlanContext{}));
  EXPECT_FALSE(plan.status_changed);
  EXPECT_TRUE(plan.pods_to_create.empty());
  EXPECT_TRUE(plan.pods_to_delete.empty());
  EXPECT_TRUE(plan.cordons.empty());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "InvalidStatus");
  EXPECT_NE(plan.events[0].message.find("status.restarts must be an integer"), std::string::npos);
}

TEST(TrainingJobStatusTest, TheSpecParserUsesC4psMode) {
  Json job = {{"metadata", {{"name", "llm"}}},
              {"spec",
               {{"replicas", 1},
                {"trafficPlanning", {{"mode", "Enforce"}}},
                {"template",
                 {{"spec", {{"containers", Json::array({{{"name", "t"}, {"image", "i"}}})}}}}}}}};
  EXPECT_EQ(parseTrainingJobSpec(job)->traffic_mode, c4p::Mode::kEnforce);
  job["spec"]["trafficPlanning"]["mode"] = "Off";
  EXPECT_EQ(parseTrainingJobSpec(job)->traffic_mode, c4p::Mode::kOff);
  job["spec"]["trafficPlanning"].erase("mode");
  EXPECT_EQ(parseTrainingJobSpec(job)->traffic_mode, c4p::Mode::kAdvisory) << "the CRD default";
  job["spec"]["trafficPlanning"]["mode"] = "enforce";
  auto bad = parseTrainingJobSpec(job);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "spec.trafficPlanning.mode must be Off, Advisory or Enforce");
  job["spec"]["trafficPlanning"]["mode"] = "Enforce";
  EXPECT_EQ(parseTrainingJobSpec(job)->spare_subflows, 0) << "the CRD default";
  job["spec"]["trafficPlanning"]["subflowsPerConnection"] = 1;
  job["spec"]["trafficPlanning"]["spareSubflows"] = 1;
  EXPECT_EQ(parseTrainingJobSpec(job)->spare_subflows, 1);
  job["spec"]["trafficPlanning"]["subflowsPerConnection"] = 60;
  job["spec"]["trafficPlanning"]["spareSubflows"] = 5;
  auto over = parseTrainingJobSpec(job);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message,
            "spec.trafficPlanning: subflowsPerConnection + spareSubflows must be at most 64 (the "
            "plugin's limit per connection), got 60 + 5");
  job["spec"]["trafficPlanning"]["spareSubflows"] = "1";
  EXPECT_FALSE(parseTrainingJobSpec(job)) << "a string is no count";
}

}  // namespace
}  // namespace c4::op
