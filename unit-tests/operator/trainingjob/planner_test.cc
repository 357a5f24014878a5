// The TrainingJob planner: children, condition bookkeeping and the restart state machine,
// table-driven on simulated time (no I/O: planReconcile is a pure function).
#include "operator/trainingjob/planner.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

namespace c4::op {
namespace {

using std::chrono::seconds;

Json makeJob(std::int64_t replicas = 2, Json extra_spec = Json::object()) {
  Json job = {
      {"apiVersion", "c4.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}, {"generation", 3}}},
      {"spec",
       {{"replicas", replicas},
        {"checkpoint", {{"dir", "/ckpt"}}},
        {"faultTolerance", {{"maxRestarts", 2}, {"restartBackoffSeconds", 5}}},
        {"template",
         {{"metadata", {{"labels", {{"team", "a"}}}}},
          {"spec",
           {{"containers", Json::array({{{"name", "trainer"},
                                         {"image", "trainer:1"},
                                         {"env", Json::array({{{"name", "NCCL_DEBUG"},
                                                               {"value", "INFO"}}})}}})}}}}}}}};
  job["spec"].merge_patch(extra_spec);
  return job;
}

Json makePod(const Json& job, int index, int attempt, const std::string& phase,
             const std::string& node = "node-0") {
  Json pod = buildPod(job, *parseTrainingJobSpec(job), index, attempt, std::nullopt, PodSettings{});
  pod["metadata"]["uid"] = "pod-uid-" + std::to_string(index) + "-" + std::to_string(attempt);
  pod["spec"]["nodeName"] = node;
  pod["status"] = {{"phase", phase}};
  return pod;
}

NodeFacts healthyNode(const std::string&) {
  return NodeFacts{true, true, false, false};
}

std::string envOf(const Json& pod, const std::string& name) {
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : "<ref>";
  }
  return "<unset>";
}

bool hasEvent(const JobPlan& plan, const std::string& reason) {
  for (const auto& e : plan.events) {
    if (e.reason == reason) return true;
  }
  return false;
}

// Applies a plan's status the way the API server would.
Json withStatus(Json job, const JobPlan& plan) {
  job["status"] = trainingJobStatusJson(plan.status);
  return job;
}

// The plan's status as the reconciler writes it.
Json statusJson(const JobPlan& plan) {
  return trainingJobStatusJson(plan.status);
}

TEST(TrainingJobSpecTest, ParsesDefaultsAndRejectsBadValues) {
  auto spec = parseTrainingJobSpec(makeJob(4));
  ASSERT_TRUE(spec) << spec.error().toString();
  EXPECT_EQ(spec->replicas, 4);
  EXPECT_EQ(spec->fault_tolerance.max_restarts, 2);
  EXPECT_EQ(spec->traffic_mode, c4p::Mode::kAdvisory);
  EXPECT_EQ(spec->checkpoint_dir, "/ckpt");

  Json bad = makeJob();
  bad["spec"]["replicas"] = 0;
  EXPECT_EQ(parseTrainingJobSpec(bad).error().code, ErrorCode::kInvalidArgument);
  bad = makeJob();
  bad["spec"]["faultTolerance"]["maxRestarts"] = -1;
  EXPECT_NE(parseTrainingJobSpec(bad).error().message.find("maxRestarts"), std::string::npos);
  bad = makeJob();
  bad["spec"]["trafficPlanning"] = {{"mode", "Sometimes"}};
  EXPECT_FALSE(parseTrainingJobSpec(bad));
  bad = makeJob();
  bad["spec"]["template"]["spec"]["containers"] = Json::array();
  EXPECT_FALSE(parseTrainingJobSpec(bad));
  bad = makeJob();
  bad["spec"]["replicas"] = "two";
  EXPECT_FALSE(parseTrainingJobSpec(bad));
}

TEST(TrainingJobSpecTest, SlowNoiseSigmasDefaultsToFourZeroTurnsItOffAndBadValuesAreRefused) {
  auto spec = parseTrainingJobSpec(makeJob(4));
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->fault_tolerance.slow_noise_sigmas, 4.0);
  Json job = makeJob(4);
  job["spec"]["faultTolerance"]["slowNoiseSigmas"] = 0;
  spec = parseTrainingJobSpec(job);
  ASSERT_TRUE(spec) << spec.error().toString();
  EXPECT_EQ(spec->fault_tolerance.slow_noise_sigmas, 0.0);
  for (const Json& value : {Json("loud"), Json(-1), Json(101), Json::array()}) {
    job["spec"]["faultTolerance"]["slowNoiseSigmas"] = value;
    const auto refused = parseTrainingJobSpec(job);
    ASSERT_FALSE(refused) << value;
    EXPECT_NE(refused.error().message.find("spec.faultTolerance.slowNoiseSigmas"),
              std::string::npos)
        << refused.error().message;
  }
}

TEST(ConditionsTest, LastTransitionTimeChangesOnlyWithStatus) {
  SimulatedClock clock;
  Json status = Json::object();
  EXPECT_TRUE(setCondition(status, "Running", "False", "Pending", "0 of 2", 1, clock.wallNow()));
  std::string t0 = (*findCondition(status, "Running"))["lastTransitionTime"];
  clock.advance(seconds{60});
  EXPECT_TRUE(setCondition(status, "Running", "False", "Pending", "1 of 2", 2, clock.wallNow()));
  const Json* c = findCondition(status, "Running");
  EXPECT_EQ((*c)["lastTransitionTime"], t0) << "message/generation change keeps the time";
  EXPECT_EQ((*c)["observedGeneration"], 2);
  EXPECT_EQ((*c)["message"], "1 of 2");
  EXPECT_FALSE(setCondition(status, "Running", "False", "Pending", "1 of 2", 2, clock.wallNow()));
  clock.advance(seconds{60});
  EXPECT_TRUE(
      setCondition(status, "Running", "True", "AllReplicasRunning", "2 of 2", 2, clock.wallNow()));
  EXPECT_NE((*findCondition(status, "Running"))["lastTransitionTime"], t0);
  EXPECT_TRUE(isConditionTrue(status, "Running"));
  EXPECT_EQ(status["conditions"].size(), 1u);
}

TEST(BuildPodTest, InjectsTheEnvironmentContractLabelsOwnersAndVolumes) {
  Json job = makeJob(4);
  Json pod = buildPod(job, *parseTrainingJobSpec(job), 2, 1, 1200, PodSettings{});
  EXPECT_EQ(pod["metadata"]["name"], "llm-2");
  EXPECT_EQ(pod["metadata"]["namespace"], "team");
  EXPECT_EQ(pod["metadata"]["labels"]["c4.dev/job-name"], "llm");
  EXPECT_EQ(pod["metadata"]["labels"]["c4.dev/replica-index"], "2");
  EXPECT_EQ(pod["metadata"]["labels"]["c4.dev/restart-attempt"], "1");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "a") << "template labels kept";
  const Json& owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["uid"], "job-uid");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(pod["spec"]["hostname"], "llm-2");
  EXPECT_EQ(pod["spec"]["subdomain"], "llm");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(envOf(pod, "MASTER_ADDR"), "llm-0.llm");
  EXPECT_EQ(envOf(pod, "MASTER_PORT"), "29500");
  EXPECT_EQ(envOf(pod, "WORLD_SIZE"), "4");
  EXPECT_EQ(envOf(pod, "RANK"), "2");
  EXPECT_EQ(envOf(pod, "NCCL_DEBUG"), "INFO") << "the user's own variables are kept";
  EXPECT_EQ(envOf(pod, "PET_NPROC_PER_NODE"), "1");
  EXPECT_EQ(envOf(pod, "C4_NODE_RANK"), "2");
  EXPECT_EQ(envOf(pod, "C4_NPROC_PER_NODE"), "1");
  EXPECT_EQ(envOf(pod, "PET_NNODES"), "4");
  EXPECT_EQ(envOf(pod, "PET_NODE_RANK"), "2");
  EXPECT_EQ(envOf(pod, "PET_MASTER_ADDR"), "llm-0.llm");
  EXPECT_EQ(envOf(pod, "PET_MASTER_PORT"), "29500");
  EXPECT_EQ(envOf(pod, "NCCL_PROFILER_PLUGIN"), "/opt/c4/lib/libnccl-profiler-c4.so")
      << "telemetry.source Profiler (default)";
  EXPECT_EQ(envOf(pod, "NCCL_NET_PLUGIN"), "<unset>") << "Advisory: NCCL keeps its transports";
  EXPECT_EQ(envOf(pod, "C4_AGENT_SOCKET"), "/var/run/c4/agent.sock");
  EXPECT_EQ(envOf(pod, "C4_PLAN_FILE"), "/etc/c4/plan/plan.json");
  EXPECT_EQ(envOf(pod, "C4_PLAN_WAIT_MS"), "<unset>") << "Advisory (default): nothing waits";
  EXPECT_EQ(envOf(pod, "C4_SUBFLOWS"), "4") << "spec.trafficPlanning.subflowsPerConnection";
  Json enforce = makeJob(4);
  enforce["spec"]["trafficPlanning"] = {{"mode", "Enforce"}};
  EXPECT_EQ(envOf(buildPod(enforce, *parseTrainingJobSpec(enforce), 2, 1, 1200, PodSettings{}),
                  "C4_PLAN_WAIT_MS"),
            "60000")
      << "Enforce: connections wait for the plan";
  EXPECT_EQ(envOf(pod, "C4_JOB"), "llm");
  EXPECT_EQ(envOf(pod, "C4_NAMESPACE"), "team");
  EXPECT_EQ(envOf(pod, "C4_POD_NAME"), "<ref>");
  EXPECT_EQ(envOf(pod, "C4_NODE_NAME"), "<ref>");
  EXPECT_EQ(envOf(pod, "C4_RANK"), "2");
  EXPECT_EQ(envOf(pod, "C4_RESTART_ATTEMPT"), "1");
  EXPECT_EQ(envOf(pod, "C4_CHECKPOINT_DIR"), "/ckpt");
  EXPECT_EQ(envOf(pod, "C4_RESUME_STEP"), "1200");
  int rank_entries = 0;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) rank_entries += e["name"] == "RANK";
  EXPECT_EQ(rank_entries, 1);
  std::set<std::string> volumes;
  for (const auto& v : pod["spec"]["volumes"]) volumes.insert(v["name"]);
  EXPECT_EQ(volumes, (std::set<std::string>{"c4-agent", "c4-plugin", "c4-plan"}));
  // The plan ConfigMap is the traffic-plan controller's: the pod only names it, and starts
  // without it (its subflow count is C4_SUBFLOWS until a plan is written).
  for (const auto& v : pod["spec"]["volumes"]) {
    if (v["name"] != "c4-plan") continue;
    EXPECT_EQ(v["configMap"]["name"], planConfigMapName("llm"));
    EXPECT_EQ(v["configMap"]["optional"], true);
  }
  EXPECT_EQ(pod["spec"]["volumes"][0]["hostPath"]["path"], "/var/run/c4");
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"].size(), 3u);
  // Every C4 mount is read-only in the training container: it sends datagrams to the node
  // plugin's socket (a socket on a read-only mount still takes them) but cannot unlink, replace
  // or impersonate it, nor change the plugin or the plan.
  for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"]) {
    EXPECT_EQ(m["readOnly"], true) << m.dump();
  }

  Json fresh = buildPod(job, *parseTrainingJobSpec(job), 0, 0, std::nullopt, PodSettings{});
  EXPECT_EQ(envOf(fresh, "C4_RESUME_STEP"), "<unset>") << "only when known";
}

// Enforce: the planned source ports leave the pods' ephemeral range (a safe sysctl), so no other
// connection takes one; nothing else asks for it, a hostNetwork pod cannot have it and the
// user's own value of the sysctl stands.
TEST(BuildPodTest, EnforceReservesThePlannedPortsWithASafeSysctl) {
  auto sysctlsOf = [](const Json& pod) {
    std::map<std::string, std::string> out;
    const Json& spec = pod["spec"];
    if (!spec.contains("securityContext") || !spec["securityContext"].contains("sysctls")) {
      return out;
    }
    for (const auto& sc : spec["securityContext"]["sysctls"]) out[sc["name"]] = sc["value"];
    return out;
  };
  auto build = [](const Json& job) {
    return buildPod(job, *parseTrainingJobSpec(job), 0, 0, std::nullopt, PodSettings{});
  };
  Json advisory = makeJob(2);
  EXPECT_TRUE(sysctlsOf(build(advisory)).empty()) << "Advisory binds ephemeral ports";
  Json enforce = makeJob(2);
  enforce["spec"]["trafficPlanning"] = {{"mode", "Enforce"}};
  const auto reserved = sysctlsOf(build(enforce));
  ASSERT_EQ(reserved.size(), 1u);
  EXPECT_EQ(reserved.at("net.ipv4.ip_local_reserved_ports"), "40000-59999")
      << "the planner's range (c4p::PlannerOptions)";
  PodSettings narrow;
  narrow.planned_port_first = 45000;
  narrow.planned_port_last = 45999;
  EXPECT_EQ(sysctlsOf(buildPod(enforce, *parseTrainingJobSpec(enforce), 0, 0, std::nullopt, narrow))
                .at("net.ipv4.ip_local_reserved_ports"),
            "45000-45999");

  Json own = enforce;
  own["spec"]["template"]["spec"]["securityContext"] = {
      {"runAsUser", 1000},
      {"sysctls", Json::array({{{"name", "net.ipv4.ip_local_reserved_ports"}, {"value", "30000"}},
                               {{"name", "net.ipv4.tcp_syncookies"}, {"value", "1"}}})}};
  const Json own_pod = build(own);
  EXPECT_EQ(sysctlsOf(own_pod),
            (std::map<std::string, std::string>{{"net.ipv4.ip_local_reserved_ports", "30000"},
                                                {"net.ipv4.tcp_syncookies", "1"}}));
  EXPECT_EQ(own_pod["spec"]["securityContext"]["runAsUser"], 1000);
  Json host = enforce;
  host["spec"]["template"]["spec"]["hostNetwork"] = true;
  EXPECT_TRUE(sysctlsOf(build(host)).empty()) << "the kubelet refuses them with hostNetwork";
}

// The headless Service as the API server returns it (defaults filled in) has no drift; an edit of
// a field the operator owns is named and put back, what others may set is left alone.
TEST(HeadlessServiceTest, DriftIsTheOwnedFieldsAndRestoreKeepsTheRest) {
  const Json job = makeJob();
  const Json desired = buildHeadlessService(job, PodSettings{});
  Json served = desired;
  served["metadata"]["resourceVersion"] = "42";
  served["metadata"]["annotations"] = {{"team", "x"}};
  served["spec"]["ports"][0]["protocol"] = "TCP";
  served["spec"]["clusterIPs"] = Json::array({"None"});
  served["spec"]["sessionAffinity"] = "None";
  served["spec"]["type"] = "ClusterIP";
  EXPECT_EQ(serviceDrift(served, desired), "");

  Json edited = served;
  edited["metadata"]["labels"].erase(labels::kJobName);
  edited["spec"]["selector"]["extra"] = "x";
  edited["spec"]["ports"][0]["port"] = 8080;
  edited["spec"]["publishNotReadyAddresses"] = false;
  EXPECT_EQ(serviceDrift(edited, desired),
            "label c4.dev/job-name, spec.selector, spec.ports, spec.publishNotReadyAddresses");
  Json restored = restoreService(edited, desired);
  EXPECT_EQ(serviceDrift(restored, desired), "");
  EXPECT_EQ(restored["spec"]["selector"], desired["spec"]["selector"]);
  EXPECT_EQ(restored["metadata"]["resourceVersion"], "42") << "an update, not a blind write";
  EXPECT_EQ(restored["metadata"]["annotations"]["team"], "x");
  EXPECT_EQ(restored["spec"]["sessionAffinity"], "None");

  Json no_ports = served;
  no_ports["spec"].erase("ports");
  EXPECT_EQ(serviceDrift(no_ports, desired), "spec.ports");
}

TEST(NodeFactsTest, ReadinessCordonAndTaintOnlyHeartbeatsIgnored) {
  Json node = {
      {"metadata", {{"name", "n"}}},
      {"spec",
       {{"unschedulable", true},
        {"taints", Json::array({{{"key", "c4.dev/faulty"}, {"effect", "NoSchedule"}}})}}},
      {"status",
       {{"conditions",
         Json::array({{{"type", "Ready"}, {"status", "True"}, {"lastHeartbeatTime", "t1"}}})}}}};
  NodeFacts facts = nodeFactsOf(node);
  EXPECT_TRUE(facts.exists);
  EXPECT_TRUE(facts.ready);
  EXPECT_TRUE(facts.unschedulable);
  EXPECT_TRUE(facts.faulty_taint);
  Json heartbeat = node;
  heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "t2";
  EXPECT_EQ(nodeFactsOf(heartbeat), facts);
  Json not_ready = node;
  not_ready["status"]["conditions"][0]["status"] = "Unknown";
  EXPECT_FALSE(nodeFactsOf(not_ready).ready);
  EXPECT_FALSE(nodeFactsOf(Json{{"metadata", {{"name", "bare"}}}}).ready);
}

TEST(PlannerTest, NewJobCreatesAllPodsAndChildren) {
  SimulatedClock clock;
  JobPlan plan = planReconcile(makeJob(3), {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(plan.ensure_children);
  ASSERT_EQ(plan.pods_to_create.size(), 3u);
  EXPECT_EQ(plan.pods_to_create[2]["metadata"]["name"], "llm-2");
  EXPECT_TRUE(plan.pods_to_delete.empty());
  EXPECT_EQ(statusJson(plan)["phase"], "Pending");
  EXPECT_EQ(statusJson(plan)["observedGeneration"], 3);
  EXPECT_TRUE(plan.status_changed);
}

TEST(PlannerTest, IsIdempotentOnceTheWorldMatches) {
  SimulatedClock clock;
  Json job = makeJob(2);
  std::vector<Json> pods = {makePod(job, 0, 0, "Running"), makePod(job, 1, 0, "Running")};
  JobPlan first = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(first)["phase"], "Running");
  EXPECT_TRUE(hasEvent(first, "Running"));
  job = withStatus(job, first);
  clock.advance(seconds{30});
  JobPlan second = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_FALSE(second.status_changed) << "nothing changed: no status write";
  EXPECT_TRUE(second.events.empty()) << "no event without a transition";
  EXPECT_TRUE(second.pods_to_create.empty());
  EXPECT_TRUE(second.pods_to_delete.empty());
}

TEST(PlannerTest, PodsOfOtherOwnersAreIgnored) {
  SimulatedClock clock;
  Json job = makeJob(1);
  Json stranger = makePod(job, 0, 0, "Failed");
  stranger["metadata"]["ownerReferences"][0]["uid"] = "previous-incarnation";
  JobPlan plan = planReconcile(job, {stranger}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(plan.pods_to_delete.empty());
  EXPECT_EQ(plan.pods_to_create.size(), 1u);
  EXPECT_EQ(statusJson(plan).value("restarts", 0), 0);
}

TEST(PlannerTest, FailedPodRestartsTheWholeJobOnceFromTheLastCheckpoint) {
  SimulatedClock clock;
  Json job = makeJob(3);
  job["status"] = {{"phase", "Running"},
                   {"lastCheckpoint", {{"step", 4200}, {"path", "/ckpt/4200"}}}};
  Json failed = makePod(job, 1, 0, "Failed", "node-1");
  failed["status"]["containerStatuses"] =
      Json::array({{{"name", "trainer"},
                    {"state", {{"terminated", {{"exitCode", 137}, {"reason", "OOMKilled"}}}}}}});
  std::vector<Json> pods = {makePod(job, 0, 0, "Running"), failed, makePod(job, 2, 0, "Running")};

  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(plan.restart_started);
  EXPECT_EQ(statusJson(plan)["restarts"], 1);
  EXPECT_EQ(statusJson(plan)["phase"], "Restarting");
  EXPECT_TRUE(isConditionTrue(plan.status, "Restarting"));
  EXPECT_EQ(findCondition(plan.status, "Restarting")->reason, "PodFailed");
  EXPECT_EQ(plan.pods_to_delete.size(), 3u) << "the whole attempt goes";
  EXPECT_TRUE(plan.pods_to_create.empty()) << "new pods wait for the old ones";
  EXPECT_TRUE(hasEvent(plan, "PodFailed"));
  EXPECT_TRUE(hasEvent(plan, "RestartingFromCheckpoint"));
  ASSERT_EQ(statusJson(plan)["faults"].size(), 1u);
  EXPECT_EQ(statusJson(plan)["faults"][0]["node"], "node-1");
  EXPECT_EQ(statusJson(plan)["faults"][0]["rank"], 1);
  EXPECT_NE(statusJson(plan)["lastFault"].get<std::string>().find("OOMKilled, exit code 137"),
            std::string::npos)
      << statusJson(plan)["lastFault"];
  EXPECT_EQ(statusJson(plan)["restartsCountTowardsMax"], 1) << "a trainer failure counts";
  EXPECT_EQ(statusJson(plan)["faults"][0]["class"], "crash");
  for (const auto& d : plan.pods_to_delete) {
    EXPECT_EQ(d.force, d.name == "llm-1") << d.name << ": only the dead pod is force-deleted";
  }

  // Crash after the status write, before any deletion: the next reconcile sees attempt 1 and
  // attempt-0 pods. It deletes them — and does not restart again.
  job = withStatus(job, plan);
  JobPlan again = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_FALSE(again.restart_started);
  EXPECT_EQ(statusJson(again)["restarts"], 1);
  EXPECT_EQ(again.pods_to_delete.size(), 3u);
  EXPECT_TRUE(again.pods_to_create.empty());
  EXPECT_FALSE(hasEvent(again, "RestartingFromCheckpoint"));

  // Old pods gone, still inside the backoff: wait.
  JobPlan waiting = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(waiting.pods_to_create.empty());
  ASSERT_TRUE(waiting.requeue_after);
  EXPECT_EQ(*waiting.requeue_after, seconds{5});

  // Backoff over: attempt 1 created with the resume step.
  clock.advance(seconds{5});
  JobPlan create = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_EQ(create.pods_to_create.size(), 3u);
  for (const auto& pod : create.pods_to_create) {
    EXPECT_EQ(pod["metadata"]["labels"]["c4.dev/restart-attempt"], "1");
    EXPECT_EQ(envOf(pod, "C4_RESTART_ATTEMPT"), "1");
    EXPECT_EQ(envOf(pod, "C4_RESUME_STEP"), "4200");
  }

  // All running again: Running, Restarting cleared, one "Restarted" event, lost time counted.
  job = withStatus(job, create);
  clock.advance(seconds{20});
  std::vector<Json> fresh = {makePod(job, 0, 1, "Running"), makePod(job, 1, 1, "Running"),
                             makePod(job, 2, 1, "Running")};
  JobPlan running = planReconcile(job, fresh, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(running)["phase"], "Running");
  EXPECT_FALSE(isConditionTrue(running.status, "Restarting"));
  EXPECT_EQ(findCondition(running.status, "Restarting")->reason, "RestartCompleted");
  EXPECT_TRUE(hasEvent(running, "Restarted"));
  EXPECT_EQ(statusJson(running)["goodput"]["lostSeconds"], 25);
}

// Goodput: the work since the checkpoint (a hang before the restart included) was counted
// productive while the attempt ran; the restart moves it to lost, bounded by the attempt's own
// running time.
TEST(PlannerTest, ARestartCountsTheWorkSinceTheCheckpointAsLost) {
  SimulatedClock clock;
  Json job = makeJob(2);
  const auto start = clock.wallNow();
  job["status"] = {
      {"phase", "Running"},
      {"phaseSince", formatRfc3339(start)},
      {"goodput", {{"productiveSeconds", 0}, {"lostSeconds", 0}}},
      {"lastCheckpoint",
       {{"step", 40}, {"path", "/ckpt/40"}, {"time", formatRfc3339(start + seconds{60})}}}};
  clock.advance(seconds{100});
  std::vector<Json> pods = {makePod(job, 0, 0, "Running"), makePod(job, 1, 0, "Failed", "node-1")};
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_TRUE(plan.restart_started);
  EXPECT_EQ(statusJson(plan)["faults"][0]["recomputeSeconds"], 40);
  EXPECT_EQ(statusJson(plan)["goodput"]["productiveSeconds"], 60);
  EXPECT_EQ(statusJson(plan)["goodput"]["lostSeconds"], 40);

  // Attempt 1 runs 10 s and fails before its first checkpoint: its 10 s are lost, not the 50 s
  // since the checkpoint (40 of them were settled at the first restart), nor the restart time.
  job = withStatus(job, plan);
  job["status"]["phase"] = "Running";
  job["status"]["attempt"] = 1;
  clock.advance(seconds{20});  // restarting: lost
  job["status"]["phaseSince"] = formatRfc3339(clock.wallNow());
  job["status"]["goodput"]["lostSeconds"] = 60;
  job["status"]["goodput"]["lastUpdateTime"] = formatRfc3339(clock.wallNow());
  clock.advance(seconds{10});
  std::vector<Json> again = {makePod(job, 0, 1, "Running"), makePod(job, 1, 1, "Failed", "node-1")};
  JobPlan second = planReconcile(job, again, healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_TRUE(second.restart_started);
  EXPECT_EQ(statusJson(second)["faults"][1]["recomputeSeconds"], 70);
  EXPECT_EQ(statusJson(second)["goodput"]["productiveSeconds"], 60);
  EXPECT_EQ(statusJson(second)["goodput"]["lostSeconds"], 70);
}

TEST(PlannerTest, BudgetSpentFailsTheJobWithAnEvent) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"}, {"restarts", 2}, {"restartsCountTowardsMax", 2}};
  std::vector<Json> pods = {makePod(job, 0, 2, "Failed"), makePod(job, 1, 2, "Running")};
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_FALSE(plan.restart_started);
  EXPECT_EQ(statusJson(plan)["phase"], "Failed");
  EXPECT_EQ(statusJson(plan)["restarts"], 2);
  EXPECT_TRUE(isConditionTrue(plan.status, "Failed"));
  EXPECT_EQ(findCondition(plan.status, "Failed")->reason, "ReachedMaxRestarts");
  ASSERT_TRUE(hasEvent(plan, "ReachedMaxRestarts"));
  EXPECT_EQ(plan.events.back().type, "Warning");
  ASSERT_EQ(plan.pods_to_delete.size(), 1u) << "only the still-active pod is deleted";
  EXPECT_EQ(plan.pods_to_delete[0].name, "llm-1");

  job = withStatus(job, plan);
  JobPlan after = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(after.events.empty()) << "Failed is terminal: no second event";
  EXPECT_TRUE(after.pods_to_create.empty());
}

TEST(PlannerTest, ZeroRestartBudgetFailsOnTheFirstFault) {
  SimulatedClock clock;
  Json job = makeJob(1, {{"faultTolerance", {{"maxRestarts", 0}}}});
  JobPlan plan = planReconcile(job, {makePod(job, 0, 0, "Failed")}, healthyNode, clock.wallNow(),
                               PlanContext{});
  EXPECT_EQ(statusJson(plan)["phase"], "Failed");
}

TEST(PlannerTest, RestartRequestCountsOnlyForItsAttempt) {
  SimulatedClock clock;
  Json job = makeJob(1);
  job["metadata"]["annotations"] = {{"c4.dev/restart-request", "0"},
                                    {"c4.dev/restart-reason", "hang on rank 0"}};
  job["status"] = {{"phase", "Running"}};
  JobPlan plan = planReconcile(job, {makePod(job, 0, 0, "Running")}, healthyNode, clock.wallNow(),
                               PlanContext{});
  EXPECT_TRUE(plan.restart_started);
  EXPECT_EQ(findCondition(plan.status, "Restarting")->reason, "RestartRequested");
  EXPECT_NE(statusJson(plan)["lastFault"].get<std::string>().find("hang on rank 0"),
            std::string::npos);
  job = withStatus(job, plan);
  clock.advance(seconds{10});
  JobPlan next = planReconcile(job, {makePod(job, 0, 1, "Running")}, healthyNode, clock.wallNow(),
                               PlanContext{});
  EXPECT_FALSE(next.restart_started) << "the stale request (attempt 0) is ignored";
  EXPECT_EQ(statusJson(next)["restarts"], 1);
}

TEST(PlannerTest, PodsOnBadNodesAreForceDeleted) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Restarting"}, {"restarts", 1}};
  Json stuck = makePod(job, 0, 0, "Running", "dead-node");
  stuck["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  Json cordoned = makePod(job, 1, 0, "Running", "cordoned-node");
  auto nodes = [](const std::string& name) {
    if (name == "dead-node") return NodeFacts{true, false, false, false};
    if (name == "cordoned-node") return NodeFacts{true, true, true, true};
    return NodeFacts{true, true, false, false};
  };
  JobPlan plan = planReconcile(job, {stuck, cordoned}, nodes, clock.wallNow(), PlanContext{});
  ASSERT_EQ(plan.pods_to_delete.size(), 2u);
  EXPECT_TRUE(plan.pods_to_delete[0].force) << "stuck Terminating on a NotReady node";
  EXPECT_TRUE(plan.pods_to_delete[1].force) << "on a cordoned, tainted node";
  EXPECT_TRUE(plan.pods_to_create.empty());
}

TEST(PlannerTest, SuspendDeletesPodsKeepsStateAndResumes) {
  SimulatedClock clock;
  Json job = makeJob(2, {{"suspend", true}});
  job["status"] = {{"phase", "Running"}, {"restarts", 1}};
  std::vector<Json> pods = {makePod(job, 0, 1, "Running"), makePod(job, 1, 1, "Running")};
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(plan)["phase"], "Suspended");
  EXPECT_EQ(statusJson(plan)["restarts"], 1);
  EXPECT_TRUE(isConditionTrue(plan.status, "Suspended"));
  EXPECT_EQ(plan.pods_to_delete.size(), 2u);
  EXPECT_TRUE(hasEvent(plan, "Suspended"));
  EXPECT_FALSE(plan.restart_started) << "deletion by suspend is not a fault";

  job = withStatus(job, plan);
  job["spec"]["suspend"] = false;
  JobPlan resumed = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(hasEvent(resumed, "Resumed"));
  EXPECT_FALSE(isConditionTrue(resumed.status, "Suspended"));
  ASSERT_EQ(resumed.pods_to_create.size(), 2u);
  EXPECT_EQ(resumed.pods_to_create[0]["metadata"]["labels"]["c4.dev/restart-attempt"], "2")
      << "a resume starts a new attempt";
  EXPECT_EQ(statusJson(resumed)["restarts"], 1) << "but is no restart";

  // What the informer saw of the suspended attempt (its pods going away) is no crash now.
  job = withStatus(job, resumed);
  PlanContext seen;
  seen.observed_attempt = 1;
  seen.observed_indexes = {0, 1};
  seen.gone_pods[0] = makePod(job, 0, 1, "Running");
  JobPlan after = planReconcile(job, {}, healthyNode, clock.wallNow(), seen);
  EXPECT_FALSE(after.restart_started);
  EXPECT_EQ(after.pods_to_create.size(), 2u);
}

TEST(PlannerTest, AllReplicasSucceededCompletesTheJob) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"}};
  std::vector<Json> pods = {makePod(job, 0, 0, "Succeeded"), makePod(job, 1, 0, "Succeeded")};
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(plan)["phase"], "Succeeded");
  EXPECT_TRUE(isConditionTrue(plan.status, "Succeeded"));
  EXPECT_TRUE(hasEvent(plan, "Succeeded"));
  EXPECT_TRUE(plan.pods_to_create.empty());
  EXPECT_TRUE(plan.pods_to_delete.empty());
}

TEST(PlannerTest, InvalidSpecFailsWithAClearCondition) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["spec"]["template"]["spec"]["containers"] = Json::array();
  JobPlan plan = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(plan)["phase"], "Failed");
  EXPECT_EQ(findCondition(plan.status, "Failed")->reason, "InvalidSpec");
  EXPECT_TRUE(plan.pods_to_create.empty());
  EXPECT_FALSE(plan.ensure_children);
}

TEST(PlannerTest, FaultListIsBounded) {
  SimulatedClock clock;
  Json job = makeJob(1, {{"faultTolerance", {{"maxRestarts", 100}, {"restartBackoffSeconds", 0}}}});
  for (int attempt = 0; attempt < 20; ++attempt) {
    JobPlan plan = planReconcile(job, {makePod(job, 0, attempt, "Failed")}, healthyNode,
                                 clock.wallNow(), PlanContext{});
    ASSERT_TRUE(plan.restart_started);
    job = withStatus(job, plan);
  }
  EXPECT_EQ(job["status"]["restarts"], 20);
  EXPECT_EQ(job["status"]["faults"].size(), kMaxFaults);
  EXPECT_EQ(job["status"]["faults"].back()["attempt"], 19);
}

Json failedWithExit(Json pod, std::int64_t code, const std::string& reason = "Error") {
  pod["status"]["phase"] = "Failed";
  pod["status"]["containerStatuses"] =
      Json::array({{{"name", "trainer"},
                    {"state", {{"terminated", {{"exitCode", code}, {"reason", reason}}}}}}});
  return pod;
}

// Which of C4's NCCL plugins a pod loads follows spec.telemetry.source and
// spec.trafficPlanning.mode; a variable the operator does not set stays the user's.
TEST(BuildPodTest, TelemetrySourceAndPlanningModeChooseTheNcclPlugins) {
  struct Case {
    const char* source;  // nullptr: field absent
    const char* mode;
    const char* net;
    const char* profiler;
  };
  const Case cases[] = {
      {nullptr, "Advisory", "<unset>", "/opt/c4/lib/libnccl-profiler-c4.so"},
      {"Profiler", "Off", "<unset>", "/opt/c4/lib/libnccl-profiler-c4.so"},
      // Enforce: C4's transport carries the traffic and reports it; one reporter per rank.
      {"Profiler", "Enforce", "/opt/c4/lib/libnccl-net-c4.so", "<unset>"},
      {"NetPlugin", "Advisory", "/opt/c4/lib/libnccl-net-c4.so", "<unset>"},
      {"NetPlugin", "Enforce", "/opt/c4/lib/libnccl-net-c4.so", "<unset>"},
  };
  for (const auto& c : cases) {
    Json job = makeJob(4, {{"trafficPlanning", {{"mode", c.mode}}}});
    if (c.source != nullptr) job["spec"]["telemetry"] = {{"source", c.source}};
    auto spec = parseTrainingJobSpec(job);
    ASSERT_TRUE(spec) << spec.error().toString();
    EXPECT_EQ(telemetrySourceName(spec->telemetry_source),
              c.source != nullptr ? c.source : "Profiler");
    Json pod = buildPod(job, *spec, 1, 0, std::nullopt, PodSettings{});
    EXPECT_EQ(envOf(pod, "NCCL_NET_PLUGIN"), c.net) << (c.source ? c.source : "-") << " " << c.mode;
    EXPECT_EQ(envOf(pod, "NCCL_PROFILER_PLUGIN"), c.profiler)
        << (c.source ? c.source : "-") << " " << c.mode;
  }
  // The cluster's own net plugin (aws-ofi-nccl and the like) beside C4's profiler plugin.
  Json own = makeJob(4);
  own["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "NCCL_NET_PLUGIN"}, {"value", "libnccl-net-ofi.so"}});
  auto own_spec = parseTrainingJobSpec(own);
  ASSERT_TRUE(own_spec) << own_spec.error().toString();
  Json pod = buildPod(own, *own_spec, 0, 0, std::nullopt, PodSettings{});
  EXPECT_EQ(envOf(pod, "NCCL_NET_PLUGIN"), "libnccl-net-ofi.so");
  EXPECT_EQ(envOf(pod, "NCCL_PROFILER_PLUGIN"), "/opt/c4/lib/libnccl-profiler-c4.so");
  // With telemetry from the net plugin, the user may bring a profiler plugin of their own.
  Json own_profiler = makeJob(4, {{"telemetry", {{"source", "NetPlugin"}}}});
  own_profiler["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "NCCL_PROFILER_PLUGIN"}, {"value", "inspector"}});
  auto own_profiler_spec = parseTrainingJobSpec(own_profiler);
  ASSERT_TRUE(own_profiler_spec) << own_profiler_spec.error().toString();
  EXPECT_EQ(envOf(buildPod(own_profiler, *own_profiler_spec, 0, 0, std::nullopt, PodSettings{}),
                  "NCCL_PROFILER_PLUGIN"),
            "inspector");
}

// The C4_* names the operator sets are the user's to leave alone, and no others: every C4_*
// variable a pod gets from the operator (Enforce, a checkpoint directory and a resume step, so all
// of them appear) is reserved, and the plugins' tuning variables stay the user's, in the pod as
// written.
TEST(TrainingJobSpecTest, OnlyTheC4VariablesTheOperatorSetsAreReserved) {
  Json job =
      makeJob(4, {{"trafficPlanning", {{"mode", "Enforce"}}}, {"checkpoint", {{"dir", "/ckpt"}}}});
  auto spec = parseTrainingJobSpec(job);
  ASSERT_TRUE(spec) << spec.error().toString();
  Json pod = buildPod(job, *spec, 2, 1, 1200, PodSettings{});
  std::set<std::string> set_by_operator;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    std::string name = e["name"];
    if (name.starts_with("C4_")) set_by_operator.insert(name);
  }
  std::set<std::string> reserved(std::begin(kOperatorC4Env), std::end(kOperatorC4Env));
  EXPECT_EQ(set_by_operator, reserved) << "kOperatorC4Env and what buildPod sets differ";
  for (const auto& name : reserved) EXPECT_TRUE(isReservedEnvName(name, *spec)) << name;

  for (const char* name : {"C4_SOCKET_IFNAME", "C4_TCP_USER_TIMEOUT_MS", "C4_REPORT_INTERVAL_MS"}) {
    Json mine = makeJob(4);
    mine["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
        {{"name", name}, {"value", "42"}});
    auto mine_spec = parseTrainingJobSpec(mine);
    ASSERT_TRUE(mine_spec) << name << ": " << mine_spec.error().toString();
    EXPECT_FALSE(isReservedEnvName(name, *mine_spec)) << name;
    EXPECT_EQ(envOf(buildPod(mine, *mine_spec, 0, 0, std::nullopt, PodSettings{}), name), "42")
        << name;
  }
}

TEST(TrainingJobSpecTest, RejectsWhatTheCrdRejects) {
  auto reason = [](Json job) {
    auto spec = parseTrainingJobSpec(job);
    return spec ? std::string{"ok"} : spec.error().message;
  };
  Json job = makeJob(4);
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "RANK"}, {"value", "3"}});
  EXPECT_NE(reason(job).find("RANK is set by the operator"), std::string::npos) << reason(job);
  job = makeJob(4);
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back({{"name", "C4_JOB"}});
  EXPECT_NE(reason(job).find("C4_JOB"), std::string::npos);
  job = makeJob(4);
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back({{"name", "PET_NNODES"}});
  EXPECT_NE(reason(job).find("PET_NNODES"), std::string::npos);
  // C4's plugin variables are reserved where the job runs that plugin (the CRD's spec-level
  // rules), and the error says why.
  job = makeJob(4);
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "NCCL_PROFILER_PLUGIN"}, {"value", "x"}});
  EXPECT_NE(reason(job).find("NCCL_PROFILER_PLUGIN is set by the operator (telemetry.source "
                             "Profiler without Enforce"),
            std::string::npos)
      << reason(job);
  job = makeJob(4, {{"telemetry", {{"source", "NetPlugin"}}}});
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "NCCL_NET_PLUGIN"}, {"value", "x"}});
  EXPECT_NE(reason(job).find("NCCL_NET_PLUGIN is set by the operator (telemetry.source NetPlugin"),
            std::string::npos)
      << reason(job);
  job = makeJob(4, {{"trafficPlanning", {{"mode", "Enforce"}}}});
  job["spec"]["template"]["spec"]["containers"][0]["env"].push_back(
      {{"name", "NCCL_NET_PLUGIN"}, {"value", "x"}});
  EXPECT_NE(reason(job).find("NCCL_NET_PLUGIN is set by the operator (trafficPlanning.mode "
                             "Enforce"),
            std::string::npos)
      << reason(job);
  job = makeJob(4, {{"telemetry", {{"source", "Inspector"}}}});
  EXPECT_EQ(reason(job), "spec.telemetry.source must be Profiler or NetPlugin");
  job = makeJob(4, {{"telemetry", "Profiler"}});
  EXPECT_NE(reason(job).find("spec.telemetry"), std::string::npos) << reason(job);
  job = makeJob(4);
  job["metadata"]["name"] = "Bad_Name";
  EXPECT_NE(reason(job).find("DNS-1035"), std::string::npos);
  job = makeJob(4);
  job["metadata"]["name"] = "9lives";
  EXPECT_NE(reason(job).find("DNS-1035"), std::string::npos);
  job = makeJob(10);
  job["metadata"]["name"] = std::string(61, 'a');
  EXPECT_EQ(reason(job), "ok") << "aaa...-9 is 63 characters";
  job = makeJob(11);
  job["metadata"]["name"] = std::string(61, 'a');
  EXPECT_NE(reason(job).find("too long"), std::string::npos) << "aaa...-10 would be 64";
  job = makeJob(4, {{"managedBy", "c4.dev/trainingjob-controler"}});
  EXPECT_NE(reason(job).find("spec.managedBy"), std::string::npos);
  EXPECT_EQ(reason(makeJob(4, {{"managedBy", "kueue.x-k8s.io/multikueue"}})), "ok");
  EXPECT_NE(reason(makeJob(4, {{"numProcPerNode", "fast"}})).find("numProcPerNode"),
            std::string::npos);
  EXPECT_NE(reason(makeJob(4, {{"numProcPerNode", 0}})).find("numProcPerNode"), std::string::npos);
  EXPECT_NE(reason(makeJob(4, {{"faultTolerance", {{"slowFactor", "fast"}}}}))
                .find("slowFactor must be a number"),
            std::string::npos);
  EXPECT_NE(reason(makeJob(4, {{"faultTolerance", {{"slowFactor", 0.5}}}})).find("slowFactor"),
            std::string::npos);
  EXPECT_NE(
      reason(makeJob(4, {{"faultTolerance",
                          {{"restartBackoffSeconds", 100}, {"maxRestartBackoffSeconds", 10}}}}))
          .find("maxRestartBackoffSeconds"),
      std::string::npos);
  EXPECT_NE(
      reason(makeJob(
                 4, {{"faultTolerance",
                      {{"podFailurePolicy", {{"rules", Json::array({{{"action", "Ignore"}}})}}}}}}))
          .find("needs onExitCodes or onPodConditions"),
      std::string::npos);
  EXPECT_NE(
      reason(
          makeJob(4, {{"faultTolerance",
                       {{"podFailurePolicy",
                         {{"rules", Json::array({{{"action", "Retry"},
                                                  {"onExitCodes",
                                                   {{"operator", "In"}, {"values", {1}}}}}})}}}}}}))
          .find("FailJob, Ignore or Restart"),
      std::string::npos);
}

TEST(BuildPodTest, SeveralRanksPerPodFromTheGpuLimit) {
  Json job = makeJob(4, {{"numProcPerNode", "auto"}});
  job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
      {"limits", {{"nvidia.com/gpu", "8"}}}};
  auto spec = parseTrainingJobSpec(job);
  ASSERT_TRUE(spec) << spec.error().toString();
  EXPECT_EQ(procsPerPod(*spec), 8);
  Json pod = buildPod(job, *spec, 3, 0, std::nullopt, PodSettings{});
  EXPECT_EQ(envOf(pod, "WORLD_SIZE"), "32") << "ranks, not pods";
  EXPECT_EQ(envOf(pod, "RANK"), "3") << "the pod's node rank; torchrun sets each process's";
  EXPECT_EQ(envOf(pod, "PET_NNODES"), "4");
  EXPECT_EQ(envOf(pod, "PET_NPROC_PER_NODE"), "8");
  EXPECT_EQ(envOf(pod, "PET_NODE_RANK"), "3");
  EXPECT_EQ(envOf(pod, "C4_NODE_RANK"), "3");
  EXPECT_EQ(envOf(pod, "C4_NPROC_PER_NODE"), "8");
  EXPECT_EQ(envOf(pod, "C4_RANK"), "<unset>") << "the plugin reads each process's RANK";

  Json cpu = makeJob(2, {{"numProcPerNode", "auto"}});
  EXPECT_EQ(procsPerPod(*parseTrainingJobSpec(cpu)), 1) << "auto without a GPU limit";
  Json fixed = makeJob(2, {{"numProcPerNode", 4}});
  EXPECT_EQ(envOf(buildPod(fixed, *parseTrainingJobSpec(fixed), 1, 0, std::nullopt, PodSettings{}),
                  "WORLD_SIZE"),
            "8");
}

TEST(IndexSetTest, FormatsAndParsesBatchJobStyleRanges) {
  EXPECT_EQ(formatIndexSet({}), "");
  EXPECT_EQ(formatIndexSet({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
  auto parsed = parseIndexSet("0-3,5,7-8", 10);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, (std::vector<std::int64_t>{0, 1, 2, 3, 5, 7, 8}));
  EXPECT_FALSE(parseIndexSet("0-3,2", 10)) << "not ascending";
  EXPECT_FALSE(parseIndexSet("3-1", 10));
  EXPECT_FALSE(parseIndexSet("0,10", 10)) << "out of range";
  EXPECT_FALSE(parseIndexSet("a", 10));
  EXPECT_FALSE(parseIndexSet("1,", 10));
}

// A vanished pod of a started attempt is a crash of that rank, not a pod to re-create.
TEST(PlannerTest, AStartedPodThatVanishedRestartsTheJob) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-1"}};
  JobPlan plan = planReconcile(job, {makePod(job, 0, 0, "Running")}, healthyNode, clock.wallNow(),
                               PlanContext{});
  EXPECT_TRUE(plan.restart_started);
  EXPECT_TRUE(plan.pods_to_create.empty()) << "never re-created at the same attempt";
  EXPECT_EQ(statusJson(plan)["restarts"], 1);
  EXPECT_EQ(statusJson(plan)["restartsCountTowardsMax"], 0) << "not the trainer's fault";
  EXPECT_EQ(statusJson(plan)["infrastructureRestarts"], 1);
  EXPECT_EQ(statusJson(plan)["faults"][0]["class"], "disruption");
  EXPECT_EQ(statusJson(plan)["faults"][0]["rank"], 1);
  EXPECT_NE(statusJson(plan)["lastFault"].get<std::string>().find("llm-1 (rank 1) vanished"),
            std::string::npos)
      << statusJson(plan)["lastFault"];
  EXPECT_TRUE(hasEvent(plan, "PodDisrupted"));
  EXPECT_EQ(statusJson(plan)["startedIndexes"], "") << "the next attempt starts afresh";
}

// A pod deleted before it was bound has no node to blame; one bound to a vanished node does.
TEST(PlannerTest, AGonePodWithoutANodeIsNotBlamedOnAMissingNode) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Pending"}};
  auto no_nodes = [](const std::string&) { return NodeFacts{}; };  // every lookup: no such node
  PlanContext unbound;
  unbound.observed_attempt = 0;
  unbound.gone_pods[1] = makePod(job, 1, 0, "Pending", "");
  JobPlan plan =
      planReconcile(job, {makePod(job, 0, 0, "Running")}, no_nodes, clock.wallNow(), unbound);
  ASSERT_TRUE(plan.restart_started);
  std::string fault = statusJson(plan)["lastFault"].get<std::string>();
  EXPECT_NE(fault.find("llm-1 (rank 1) was deleted"), std::string::npos) << fault;
  EXPECT_EQ(fault.find("node"), std::string::npos) << fault;

  PlanContext bound = unbound;
  bound.gone_pods[1] = makePod(job, 1, 0, "Running", "node-9");
  JobPlan gone =
      planReconcile(job, {makePod(job, 0, 0, "Running")}, no_nodes, clock.wallNow(), bound);
  ASSERT_TRUE(gone.restart_started);
  EXPECT_NE(statusJson(gone)["lastFault"].get<std::string>().find("its node is gone"),
            std::string::npos)
      << statusJson(gone)["lastFault"];
}

TEST(PlannerTest, PodsTheInformerSawGoAreCrashesBeforeTheStatusRecordedThem) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Pending"}};  // the batched status write has not happened yet
  PlanContext seen;
  seen.observed_attempt = 0;
  seen.observed_indexes = {0, 1};
  JobPlan plan =
      planReconcile(job, {makePod(job, 0, 0, "Running")}, healthyNode, clock.wallNow(), seen);
  EXPECT_TRUE(plan.restart_started);

  // The Failed update and the deletion were merged: the last state seen decides the class.
  PlanContext gone = seen;
  gone.gone_pods[1] = failedWithExit(makePod(job, 1, 0, "Running"), 3);
  JobPlan crash =
      planReconcile(job, {makePod(job, 0, 0, "Running")}, healthyNode, clock.wallNow(), gone);
  EXPECT_TRUE(crash.restart_started);
  EXPECT_EQ(statusJson(crash)["faults"][0]["class"], "crash");
  EXPECT_EQ(statusJson(crash)["restartsCountTowardsMax"], 1);
  EXPECT_NE(statusJson(crash)["lastFault"].get<std::string>().find("exit code 3"),
            std::string::npos);

  // Informer news of an earlier attempt says nothing about this one.
  PlanContext stale = seen;
  stale.observed_attempt = 7;
  JobPlan fine =
      planReconcile(job, {makePod(job, 0, 0, "Running")}, healthyNode, clock.wallNow(), stale);
  EXPECT_FALSE(fine.restart_started);
  EXPECT_EQ(fine.pods_to_create.size(), 1u);
}

TEST(PlannerTest, PodsCreatedButNotYetSeenAreNotVanished) {
  SimulatedClock clock;
  Json job = makeJob(3);
  JobPlan plan = planReconcile(job, {makePod(job, 0, 0, "Pending")}, healthyNode, clock.wallNow(),
                               PlanContext{});
  EXPECT_FALSE(plan.restart_started);
  EXPECT_EQ(plan.pods_to_create.size(), 2u);
  EXPECT_EQ(statusJson(plan)["startedIndexes"], "0");
}

TEST(PlannerTest, FailurePolicyDecidesFailJobIgnoreOrRestart) {
  SimulatedClock clock;
  Json policy = {
      {"faultTolerance",
       {{"maxRestarts", 1},
        {"podFailurePolicy",
         {{"rules",
           Json::array(
               {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "In"}, {"values", {42}}}}},
                {{"action", "Ignore"},
                 {"onExitCodes",
                  {{"containerName", "trainer"}, {"operator", "In"}, {"values", {143}}}}},
                {{"action", "Restart"},
                 {"onPodConditions", Json::array({{{"type", "DisruptionTarget"}}})}}})}}}}}};
  Json job = makeJob(2, policy);
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-1"}};
  auto plan = [&](const Json& failed) {
    return planReconcile(job, {makePod(job, 0, 0, "Running"), failed}, healthyNode, clock.wallNow(),
                         PlanContext{});
  };
  JobPlan fail = plan(failedWithExit(makePod(job, 1, 0, "Running"), 42));
  EXPECT_EQ(statusJson(fail)["phase"], "Failed");
  EXPECT_EQ(findCondition(fail.status, "Failed")->reason, "PodFailurePolicy");
  EXPECT_EQ(fail.pods_to_delete.size(), 1u) << "the running pod goes";

  JobPlan ignore = plan(failedWithExit(makePod(job, 1, 0, "Running"), 143));
  EXPECT_TRUE(ignore.restart_started);
  EXPECT_EQ(statusJson(ignore)["restartsCountTowardsMax"], 0);
  EXPECT_EQ(statusJson(ignore)["infrastructureRestarts"], 1);

  Json evicted = failedWithExit(makePod(job, 1, 0, "Running"), 137);
  evicted["status"]["conditions"] = Json::array(
      {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "EvictionByEvictionAPI"}}});
  JobPlan counted = plan(evicted);
  EXPECT_TRUE(counted.restart_started);
  EXPECT_EQ(statusJson(counted)["restartsCountTowardsMax"], 1) << "the user's rule counts it";

  JobPlan plain = plan(failedWithExit(makePod(job, 1, 0, "Running"), 1));
  EXPECT_EQ(statusJson(plain)["restartsCountTowardsMax"], 1) << "no rule: a trainer failure counts";
}

TEST(PlannerTest, DisruptionsDoNotSpendTheBudgetButTheirOwnCapStopsALoop) {
  SimulatedClock clock;
  Json job =
      makeJob(2, {{"faultTolerance", {{"maxRestarts", 0}, {"maxInfrastructureRestarts", 2}}}});
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-1"}};
  auto disrupted = [&](int attempt) {
    Json pod = failedWithExit(makePod(job, 1, attempt, "Running"), 137);
    pod["status"]["conditions"] = Json::array(
        {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "PreemptionByScheduler"}}});
    return pod;
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    JobPlan plan = planReconcile(job, {makePod(job, 0, attempt, "Running"), disrupted(attempt)},
                                 healthyNode, clock.wallNow(), PlanContext{});
    ASSERT_TRUE(plan.restart_started) << "attempt " << attempt;
    EXPECT_NE(statusJson(plan)["lastFault"].get<std::string>().find("PreemptionByScheduler"),
              std::string::npos);
    job = withStatus(job, plan);
    job["status"]["startedIndexes"] = "0-1";
  }
  JobPlan last = planReconcile(job, {makePod(job, 0, 2, "Running"), disrupted(2)}, healthyNode,
                               clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(last)["phase"], "Failed");
  EXPECT_EQ(findCondition(last.status, "Failed")->reason, "ReachedMaxInfrastructureRestarts");
}

TEST(PlannerTest, RestartBackoffDoublesPerConsecutiveFailureAndResetsAfterALongRun) {
  SimulatedClock clock;
  Json job = makeJob(
      1,
      {{"faultTolerance",
        {{"maxRestarts", 100}, {"restartBackoffSeconds", 10}, {"maxRestartBackoffSeconds", 50}}}});
  std::vector<std::int64_t> delays;
  for (int attempt = 0; attempt < 5; ++attempt) {
    job["status"]["phase"] = "Running";
    job["status"]["phaseSince"] = formatRfc3339(clock.wallNow());
    clock.advance(seconds{30});  // a short run
    JobPlan plan = planReconcile(job, {failedWithExit(makePod(job, 0, attempt, "Running"), 1)},
                                 healthyNode, clock.wallNow(), PlanContext{});
    ASSERT_TRUE(plan.restart_started);
    delays.push_back(std::chrono::duration_cast<seconds>(*plan.requeue_after).count());
    job = withStatus(job, plan);
  }
  EXPECT_EQ(delays, (std::vector<std::int64_t>{10, 20, 40, 50, 50}));
  EXPECT_EQ(job["status"]["consecutiveFailures"], 5);

  // Still inside the backoff: no pods; after it: the next attempt.
  JobPlan waiting = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(waiting.pods_to_create.empty());
  clock.advance(seconds{50});
  EXPECT_EQ(
      planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{}).pods_to_create.size(),
      1u);

  // An attempt that ran ten minutes resets the backoff.
  job["status"]["phase"] = "Running";
  job["status"]["phaseSince"] = formatRfc3339(clock.wallNow());
  clock.advance(seconds{kBackoffResetSeconds});
  JobPlan fresh = planReconcile(job, {failedWithExit(makePod(job, 0, 5, "Running"), 1)},
                                healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_TRUE(fresh.restart_started);
  EXPECT_EQ(*fresh.requeue_after, seconds{10});
  EXPECT_EQ(statusJson(fresh)["consecutiveFailures"], 1);
}

TEST(PlannerTest, ANodeThatWentNotReadyUnderTheJobIsCordoned) {
  SimulatedClock clock;
  auto nodes = [](const std::string& name) {
    if (name == "sick") return NodeFacts{true, false, false, false};
    return NodeFacts{true, true, false, false};
  };
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-1"}};
  std::vector<Json> pods = {makePod(job, 0, 0, "Running", "fine"),
                            failedWithExit(makePod(job, 1, 0, "Running", "sick"), 137)};
  JobPlan plan = planReconcile(job, pods, nodes, clock.wallNow(), PlanContext{});
  EXPECT_TRUE(plan.restart_started);
  ASSERT_EQ(plan.cordons.size(), 1u);
  EXPECT_EQ(plan.cordons[0].node, "sick");
  EXPECT_FALSE(plan.cordons[0].dry_run);
  EXPECT_NE(plan.cordons[0].reason.find("NotReady"), std::string::npos);
  EXPECT_EQ(statusJson(plan)["restartsCountTowardsMax"], 0) << "a node fault is not the trainer's";

  Json dry = makeJob(2, {{"faultTolerance", {{"dryRun", true}}}});
  dry["status"] = job["status"];
  JobPlan dry_plan = planReconcile(dry, pods, nodes, clock.wallNow(), PlanContext{});
  ASSERT_EQ(dry_plan.cordons.size(), 1u);
  EXPECT_TRUE(dry_plan.cordons[0].dry_run);

  Json off = makeJob(2, {{"faultTolerance", {{"cordonFaultyNodes", false}}}});
  off["status"] = job["status"];
  EXPECT_TRUE(planReconcile(off, pods, nodes, clock.wallNow(), PlanContext{}).cordons.empty());
  EXPECT_TRUE(planReconcile(job,
                            {makePod(job, 0, 0, "Running", "fine"),
                             failedWithExit(makePod(job, 1, 0, "Running", "fine"), 1)},
                            nodes, clock.wallNow(), PlanContext{})
                  .cordons.empty())
      << "a crash on a healthy node implicates no node";
}

TEST(PlannerTest, ReplicaCountsOfTheCurrentAttempt) {
  SimulatedClock clock;
  Json job = makeJob(4);
  Json ready = makePod(job, 0, 0, "Running");
  ready["status"]["conditions"] = Json::array({{{"type", "Ready"}, {"status", "True"}}});
  Json deleting = makePod(job, 3, 0, "Running");
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  JobPlan plan =
      planReconcile(job, {ready, makePod(job, 1, 0, "Running"), makePod(job, 2, 0, "Pending")},
                    healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(plan)["active"], 3);
  EXPECT_EQ(statusJson(plan)["ready"], 1);
  EXPECT_EQ(statusJson(plan)["succeeded"], 0);
  EXPECT_EQ(statusJson(plan)["failed"], 0);
}

TEST(PlannerTest, GoodputIsBroughtUpToDateWhileTheJobRuns) {
  SimulatedClock clock;
  Json job = makeJob(1);
  std::vector<Json> pods = {makePod(job, 0, 0, "Running")};
  PlanContext context;
  context.goodput_period = seconds{60};
  JobPlan running = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  ASSERT_EQ(statusJson(running)["phase"], "Running");
  job = withStatus(job, running);
  clock.advance(seconds{30});
  JobPlan early = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  EXPECT_FALSE(early.status_changed) << "nothing due yet: no write";
  ASSERT_TRUE(early.requeue_after);
  EXPECT_EQ(*early.requeue_after, seconds{30}) << "woken when the update is due";
  clock.advance(seconds{31});
  clock.advance(std::chrono::milliseconds{400});
  JobPlan due = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  EXPECT_TRUE(due.status_changed);
  EXPECT_EQ(statusJson(due)["goodput"]["productiveSeconds"], 61);
  job = withStatus(job, due);
  clock.advance(seconds{60});
  clock.advance(std::chrono::milliseconds{700});
  JobPlan next = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  EXPECT_EQ(statusJson(next)["goodput"]["productiveSeconds"], 122)
      << "fractions are carried, not lost";
}

TEST(PlannerTest, ChildProblemsSetDegradedAndAForeignServiceBlocksPods) {
  SimulatedClock clock;
  Json job = makeJob(2);
  PlanContext context;
  context.child_problem = ChildProblem{"NameConflict",
                                       "Service llm already exists and is not controlled by this "
                                       "TrainingJob",
                                       true};
  JobPlan plan = planReconcile(job, {}, healthyNode, clock.wallNow(), context);
  EXPECT_TRUE(isConditionTrue(plan.status, "Degraded"));
  EXPECT_EQ(findCondition(plan.status, "Degraded")->reason, "NameConflict");
  EXPECT_TRUE(plan.pods_to_create.empty()) << "no pod starts against someone else's Service";
  EXPECT_EQ(statusJson(plan)["phase"], "Pending") << "the job still gets a status";

  job = withStatus(job, plan);
  JobPlan fixed = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_FALSE(isConditionTrue(fixed.status, "Degraded"));
  EXPECT_EQ(findCondition(fixed.status, "Degraded")->reason, "ChildrenCreated");
  EXPECT_EQ(fixed.pods_to_create.size(), 2u);

  PlanContext pod_problem;
  pod_problem.child_problem =
      ChildProblem{"FailedCreate", "create Pod llm-1: HTTP 422: bad", false};
  JobPlan pods_fail = planReconcile(job, {}, healthyNode, clock.wallNow(), pod_problem);
  EXPECT_TRUE(isConditionTrue(pods_fail.status, "Degraded"));
  EXPECT_EQ(pods_fail.pods_to_create.size(), 2u) << "pods are tried again";
}

}  // namespace
}  // namespace c4::op

namespace c4::op {
namespace {

TEST(PlannerTest, ReportedCheckpointsAdvanceLastCheckpointAndNeverMoveItBack) {
  SimulatedClock clock;
  Json job = makeJob(2);
  std::vector<Json> pods = {makePod(job, 0, 0, "Running"), makePod(job, 1, 0, "Running")};
  job = withStatus(job, planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{}));

  PlanContext context;
  context.reported_checkpoint = ReportedCheckpointFact{100, "/ckpt/100", clock.wallNow()};
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  EXPECT_TRUE(plan.status_changed);
  EXPECT_EQ(statusJson(plan)["lastCheckpoint"]["step"], 100);
  EXPECT_EQ(statusJson(plan)["lastCheckpoint"]["path"], "/ckpt/100");
  EXPECT_EQ(statusJson(plan)["lastCheckpoint"]["time"], formatRfc3339(clock.wallNow()));
  job = withStatus(job, plan);

  // The same or an older step (a new attempt's store starts afresh) changes nothing.
  context.reported_checkpoint = ReportedCheckpointFact{100, "/ckpt/100", clock.wallNow()};
  EXPECT_FALSE(planReconcile(job, pods, healthyNode, clock.wallNow(), context).status_changed);
  context.reported_checkpoint = ReportedCheckpointFact{50, "/ckpt/50", clock.wallNow()};
  JobPlan older = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  EXPECT_FALSE(older.status_changed);
  EXPECT_EQ(statusJson(older)["lastCheckpoint"]["step"], 100);

  // A restart resumes from the reported step.
  context.reported_checkpoint = ReportedCheckpointFact{200, "/ckpt/200", clock.wallNow()};
  Json failed = makePod(job, 1, 0, "Failed");
  JobPlan restart = planReconcile(job, {makePod(job, 0, 0, "Running"), failed}, healthyNode,
                                  clock.wallNow(), context);
  EXPECT_TRUE(restart.restart_started);
  EXPECT_EQ(statusJson(restart)["lastCheckpoint"]["step"], 200);
  EXPECT_TRUE(hasEvent(restart, "RestartingFromCheckpoint"));
}

}  // namespace
}  // namespace c4::op

namespace c4::op {
namespace {

DiagnosedFault linkHang(std::int64_t attempt) {
  DiagnosedFault d;
  d.attempt = attempt;
  d.fault_class = "nonCommHang";
  d.key = "nonCommHang/node/node-b";
  d.summary = "nonCommHang of node node-b: peers 0,2 wait on rank 1 for 12.0 s";
  d.nodes = {"node-b"};
  d.cordon_nodes = {"node-b"};
  d.rank = 1;
  return d;
}

TEST(PlannerDiagnosisTest, AConfirmedVerdictRestartsAwayFromTheCulpritWithoutSpendingTheBudget) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"},
                   {"attempt", 0},
                   {"startedIndexes", "0-1"},
                   {"lastCheckpoint",
                    {{"step", 300},
                     {"path", "/ckpt/300"},
                     {"time", formatRfc3339(clock.wallNow() - seconds{42})}}}};
  std::vector<Json> pods = {makePod(job, 0, 0, "Running", "node-a"),
                            makePod(job, 1, 0, "Running", "node-b")};
  PlanContext context;
  context.diagnosis = linkHang(0);
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  ASSERT_TRUE(plan.restart_started);
  EXPECT_TRUE(hasEvent(plan, "FaultDiagnosed"));
  EXPECT_EQ(statusJson(plan)["attempt"], 1);
  EXPECT_EQ(statusJson(plan)["restartsCountTowardsMax"], 0) << "C4 diagnosed it: not the trainer's";
  EXPECT_EQ(statusJson(plan)["infrastructureRestarts"], 1);
  EXPECT_EQ(statusJson(plan)["avoidNodes"], Json::array({"node-b"}));
  ASSERT_EQ(plan.cordons.size(), 1u);
  EXPECT_EQ(plan.cordons[0].node, "node-b");
  EXPECT_NE(plan.cordons[0].reason.find("peers 0,2 wait on rank 1"), std::string::npos);
  const Json fault = statusJson(plan)["faults"].back();
  EXPECT_EQ(fault["class"], "nonCommHang");
  EXPECT_EQ(fault["node"], "node-b");
  EXPECT_EQ(fault["rank"], 1);
  EXPECT_EQ(plan.pods_to_delete.size(), 2u);

  EXPECT_EQ(fault["detectionSeconds"], 0.0);
  EXPECT_EQ(fault["recomputeSeconds"], 42) << "work since the checkpoint is computed again";

  // The next attempt's pods avoid node-b (cordoned by then) and resume from the checkpoint.
  Json restarted = withStatus(job, plan);
  restarted["status"]["nextAttemptTime"] = formatRfc3339(clock.wallNow());
  auto cordonedB = [](const std::string& n) {
    return NodeFacts{true, true, n == "node-b", n == "node-b"};
  };
  JobPlan next = planReconcile(restarted, {}, cordonedB, clock.wallNow(), PlanContext{});
  // ... and once they run, the fault records how long the restart took.
  clock.advance(seconds{7});
  Json running = withStatus(restarted, next);
  std::vector<Json> pods1 = {makePod(running, 0, 1, "Running", "node-a"),
                             makePod(running, 1, 1, "Running", "node-c")};
  JobPlan up = planReconcile(running, pods1, healthyNode, clock.wallNow(), PlanContext{});
  EXPECT_EQ(statusJson(up)["phase"], "Running");
  EXPECT_EQ(statusJson(up)["faults"].back()["restartSeconds"], 7);
  ASSERT_EQ(next.pods_to_create.size(), 2u);
  const Json& terms =
      next.pods_to_create[0]["spec"]["affinity"]["nodeAffinity"]
                         ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0]["matchFields"][0],
            Json({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-b"}}}));
  EXPECT_FALSE(next.pods_to_create[0]["spec"]["affinity"]["nodeAffinity"].contains(
      "preferredDuringSchedulingIgnoredDuringExecution"));
  EXPECT_EQ(envOf(next.pods_to_create[0], "C4_RESUME_STEP"), "300");
}

// The avoided nodes nobody cordoned (a dead link's ends, a policy without cordon) are avoided
// only where the cluster has room elsewhere: two link verdicts on a four-node job name every
// node, and required affinity would leave its pods Pending for ever. A cordoned or faulty-tainted
// one stays required (a pod tolerating every taint would otherwise land on it).
TEST(PlannerDiagnosisTest, OnlyCordonedCulpritsAreRequiredToBeAvoidedTheOthersArePreferred) {
  SimulatedClock clock;
  Json job = makeJob(4);
  job["status"] = {{"phase", "Restarting"},
                   {"attempt", 1},
                   {"nextAttemptTime", formatRfc3339(clock.wallNow())},
                   {"avoidNodes", {"node-a", "node-b", "node-c", "node-d"}}};
  auto facts = [](const std::string& n) {
    return NodeFacts{true, true, n == "node-b", n == "node-d"};  // b cordoned, d tainted
  };
  JobPlan plan = planReconcile(job, {}, facts, clock.wallNow(), PlanContext{});
  ASSERT_EQ(plan.pods_to_create.size(), 4u);
  for (const Json& pod : plan.pods_to_create) {
    const Json& node_affinity = pod["spec"]["affinity"]["nodeAffinity"];
    const Json& terms =
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    ASSERT_EQ(terms.size(), 1u);
    EXPECT_EQ(
        terms[0]["matchFields"],
        Json::array({{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-b"}}},
                     {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-d"}}}}));
    const Json& preferred = node_affinity["preferredDuringSchedulingIgnoredDuringExecution"];
    ASSERT_EQ(preferred.size(), 1u);
    EXPECT_EQ(preferred[0]["weight"], 100);
    EXPECT_EQ(
        preferred[0]["preference"]["matchFields"],
        Json::array({{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-a"}}},
                     {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-c"}}}}));
  }
  // Nothing cordoned: no required term at all, so the pods can be placed.
  JobPlan soft = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_EQ(soft.pods_to_create.size(), 4u);
  const Json& node_affinity = soft.pods_to_create[0]["spec"]["affinity"]["nodeAffinity"];
  EXPECT_FALSE(node_affinity.contains("requiredDuringSchedulingIgnoredDuringExecution"));
  EXPECT_EQ(node_affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
                         ["matchFields"]
                             .size(),
            4u);
}

// Two faults joined in one diagnosis (a frozen rank on node-b, a dead link node-c<->node-d): one
// restart avoids all three nodes and cordons only the one the evidence names.
TEST(PlannerDiagnosisTest, AJoinedDiagnosisAvoidsEveryCulpritAndCordonsOnlyTheNamedNodes) {
  SimulatedClock clock;
  Json job = makeJob(4);
  job["status"] = {{"phase", "Running"}, {"attempt", 0}, {"startedIndexes", "0-3"}};
  std::vector<Json> pods = {
      makePod(job, 0, 0, "Running", "node-a"), makePod(job, 1, 0, "Running", "node-b"),
      makePod(job, 2, 0, "Running", "node-c"), makePod(job, 3, 0, "Running", "node-d")};
  PlanContext context;
  context.diagnosis = linkHang(0);
  context.diagnosis->keys = {context.diagnosis->key, "commHang/link/node-c<->node-d"};
  context.diagnosis->nodes = {"node-b", "node-c", "node-d"};
  context.diagnosis->summary += "; and commHang of link node-c<->node-d: no bytes for 12 s";
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
  ASSERT_TRUE(plan.restart_started);
  EXPECT_EQ(statusJson(plan)["attempt"], 1);
  EXPECT_EQ(statusJson(plan)["infrastructureRestarts"], 1) << "one restart for both faults";
  EXPECT_EQ(statusJson(plan)["avoidNodes"], Json::array({"node-b", "node-c", "node-d"}));
  ASSERT_EQ(plan.cordons.size(), 1u);
  EXPECT_EQ(plan.cordons[0].node, "node-b");
  EXPECT_NE(statusJson(plan)["faults"].back()["summary"].get<std::string>().find("node-c<->node-d"),
            std::string::npos);
}

TEST(PlannerDiagnosisTest, StaleDryRunAndNoCordonPolicyAreRespected) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["status"] = {{"phase", "Running"}, {"attempt", 1}, {"startedIndexes", "0-1"}};
  std::vector<Json> pods = {makePod(job, 0, 1, "Running", "node-a"),
                            makePod(job, 1, 1, "Running", "node-b")};
  PlanContext stale;
  stale.diagnosis = linkHang(0);  // for the previous attempt
  EXPECT_FALSE(planReconcile(job, pods, healthyNode, clock.wallNow(), stale).restart_started);

  PlanContext current;
  current.diagnosis = linkHang(1);
  Json dry = makeJob(2, {{"faultTolerance", {{"dryRun", true}}}});
  dry["status"] = job["status"];
  JobPlan dry_plan = planReconcile(dry, pods, healthyNode, clock.wallNow(), current);
  EXPECT_FALSE(dry_plan.restart_started) << "dry run: the detector only reports";
  EXPECT_TRUE(dry_plan.cordons.empty());

  Json no_cordon = makeJob(2, {{"faultTolerance", {{"cordonFaultyNodes", false}}}});
  no_cordon["status"] = job["status"];
  JobPlan plan = planReconcile(no_cordon, pods, healthyNode, clock.wallNow(), current);
  EXPECT_TRUE(plan.restart_started);
  EXPECT_TRUE(plan.cordons.empty());
  EXPECT_EQ(statusJson(plan)["avoidNodes"], Json::array({"node-b"}))
      << "the job avoids the culprit even where policy does not cordon it";
}

TEST(BuildPodTest, AvoidedNodesJoinEveryNodeSelectorTermOfTheTemplate) {
  Json job = makeJob(1);
  job["spec"]["template"]["spec"]["affinity"] = {
      {"nodeAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         {{"nodeSelectorTerms",
           Json::array(
               {{{"matchExpressions",
                  Json::array({{{"key", "gpu"}, {"operator", "In"}, {"values", {"h100"}}}})}},
                {{"matchExpressions",
                  Json::array({{{"key", "gpu"}, {"operator", "In"}, {"values", {"h200"}}}})}}})}}},
        {"preferredDuringSchedulingIgnoredDuringExecution",
         Json::array(
             {{{"weight", 7},
               {"preference",
                {{"matchExpressions",
                  Json::array({{{"key", "zone"}, {"operator", "In"}, {"values", {"a"}}}})}}}}})}}}};
  Json pod = buildPod(job, *parseTrainingJobSpec(job), 0, 1, std::nullopt, PodSettings{},
                      NodeAvoidance{{"bad-1", "bad-2"}, {"meh"}});
  const Json& preferred =
      pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(preferred.size(), 2u);
  EXPECT_EQ(preferred[0]["weight"], 7) << "the user's preferences are kept";
  EXPECT_EQ(preferred[1], Json({{"weight", 100},
                                {"preference",
                                 {{"matchFields", Json::array({{{"key", "metadata.name"},
                                                                {"operator", "NotIn"},
                                                                {"values", {"meh"}}}})}}}}));
  const Json& terms = pod["spec"]["affinity"]["nodeAffinity"]
                         ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  for (const auto& term : terms) {
    EXPECT_EQ(term["matchExpressions"].size(), 1u) << "the user's terms are kept";
    // One expression per node: the API server rejects a field selector with several values.
    ASSERT_EQ(term["matchFields"].size(), 2u);
    EXPECT_EQ(term["matchFields"][0],
              Json({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"bad-1"}}}));
    EXPECT_EQ(term["matchFields"][1],
              Json({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"bad-2"}}}));
  }
  Json plain = buildPod(job, *parseTrainingJobSpec(job), 0, 1, std::nullopt, PodSettings{});
  EXPECT_EQ(plain["spec"]["affinity"], job["spec"]["template"]["spec"]["affinity"])
      << "nothing to avoid: the template's affinity as it is";
}

// Wrong-typed fields (issue #27): nothing throws; a TrainingJob the operator cannot use fails
// with InvalidSpec (an Event), a Pod whose owner cannot be read is not the job's, a Node field
// of another type reads as absent.
TEST(WrongTypesTest, ATrainingJobWithWrongTypedFieldsIsRefusedWithAnEvent) {
  SimulatedClock clock;
  Json job = makeJob(2);
  job["metadata"]["generation"] = "3";
  JobPlan plan;
  ASSERT_NO_THROW(plan = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{}));
  EXPECT_EQ(statusJson(plan)["observedGeneration"], 0) << "an unreadable generation is none";
  EXPECT_EQ(plan.pods_to_create.size(), 2u) << "the rest of the job is fine";

  job = makeJob(2);
  job["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"] = 5;
  ASSERT_NO_THROW(plan = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{}));
  EXPECT_TRUE(hasEvent(plan, "InvalidSpec"));
  EXPECT_EQ(statusJson(plan)["phase"], "Failed");
  EXPECT_NE(findCondition(plan.status, "Failed")->message.find("env[0].name must be a string"),
            std::string::npos);
  EXPECT_TRUE(plan.pods_to_create.empty());

  job = makeJob(2);
  job["spec"]["managedBy"] = 5;
  ASSERT_NO_THROW(plan = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{}));
  EXPECT_TRUE(hasEvent(plan, "InvalidSpec"));

  job = makeJob(2);
  job["status"] = {{"phase", 5}, {"restarts", "one"}};
  ASSERT_NO_THROW(plan = planReconcile(job, {}, healthyNode, clock.wallNow(), PlanContext{}));
  EXPECT_TRUE(hasEvent(plan, "InvalidStatus"));
  EXPECT_FALSE(plan.status_changed) << "left alone";
  EXPECT_TRUE(plan.pods_to_create.empty());
}

TEST(WrongTypesTest, PodFieldsOfAnotherTypeAreReadAsAbsent) {
  SimulatedClock clock;
  Json job = makeJob(3);
  job["status"] = {{"phase", "Running"}};
  // Not readable as the job's: ownerReferences[0].controller is a string.
  Json stranger = makePod(job, 0, 0, "Failed");
  stranger["metadata"]["ownerReferences"][0]["controller"] = "true";
  // The job's, with status fields of other types.
  Json odd = makePod(job, 1, 0, "Running");
  odd["spec"]["nodeName"] = 7;
  odd["metadata"]["uid"] = 8;
  odd["status"] = {
      {"phase", 3},
      {"reason", 4},
      {"conditions", Json::array({{{"type", 1}, {"status", true}}})},
      {"containerStatuses",
       Json::array(
           {{{"name", 5}, {"state", {{"terminated", {{"exitCode", 1}, {"reason", 9}}}}}}})}};
  Json failed = makePod(job, 2, 0, "Failed");
  failed["status"]["containerStatuses"] =
      Json::array({{{"name", 5}, {"state", {{"terminated", {{"exitCode", 137}, {"reason", 9}}}}}}});
  failed["status"]["conditions"] = Json::array({{{"type", "DisruptionTarget"}, {"status", 1}}});
  JobPlan plan;
  ASSERT_NO_THROW(plan = planReconcile(job, {stranger, odd, failed}, healthyNode, clock.wallNow(),
                                       PlanContext{}));
  EXPECT_TRUE(plan.restart_started) << "the failed pod still counts";
  EXPECT_EQ(statusJson(plan)["faults"][0]["rank"], 2);
  for (const auto& d : plan.pods_to_delete) {
    EXPECT_NE(d.name, "llm-0") << "the stranger is not the job's to delete";
  }
}

TEST(WrongTypesTest, NodeFieldsOfAnotherTypeAreReadAsAbsent) {
  Json node = {
      {"metadata", {{"name", "n"}}},
      {"spec", {{"unschedulable", "yes"}, {"taints", Json::array({{{"key", 5}}, 7})}}},
      {"status",
       {{"conditions", Json::array({{{"type", "Ready"}, {"status", true}}, {{"type", 3}}, "x"})}}}};
  NodeFacts facts;
  ASSERT_NO_THROW(facts = nodeFactsOf(node));
  EXPECT_TRUE(facts.exists);
  EXPECT_FALSE(facts.ready);
  EXPECT_FALSE(facts.unschedulable);
  EXPECT_FALSE(facts.faulty_taint);
  node["spec"] = "x";
  node["status"] = 5;
  ASSERT_NO_THROW(facts = nodeFactsOf(node));
  EXPECT_FALSE(facts.ready);
}

// Issue #24: the fault names the pod that failed first.

// A pod whose trainer container exited with `code` at `finished`
// (status.containerStatuses[].state.terminated.finishedAt).
Json crashedAt(Json pod, std::int64_t code, WallTime finished) {
  pod = failedWithExit(std::move(pod), code);
  pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] =
      formatRfc3339(finished);
  return pod;
}

// The pods of one attempt of an n-replica job, rank i on node-i, all running.
std::vector<Json> runningPods(const Json& job, int n, int attempt = 0) {
  std::vector<Json> pods;
  for (int i = 0; i < n; ++i) {
    pods.push_back(makePod(job, i, attempt, "Running", "node-" + std::to_string(i)));
  }
  return pods;
}

std::string eventMessage(const JobPlan& plan, const std::string& reason) {
  for (const auto& e : plan.events) {
    if (e.reason == reason) return e.message;
  }
  return "<no " + reason + " event>";
}

// Rank 5's process crashes at t; ranks 1 and 6 fail 2 s later as victims of it (their collective
// lost a peer). The record and the Event name rank 5, and say there were two more.
TEST(PlannerFirstFailureTest, TheFaultNamesThePodThatFailedFirstNotTheLowestIndex) {
  SimulatedClock clock;
  Json job = makeJob(8);
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-7"}};
  const WallTime t = clock.wallNow() - seconds{10};
  std::vector<Json> pods = runningPods(job, 8);
  pods[5] = crashedAt(pods[5], 139, t);
  pods[1] = crashedAt(pods[1], 1, t + seconds{2});
  pods[6] = crashedAt(pods[6], 1, t + seconds{2});
  JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), PlanContext{});
  ASSERT_TRUE(plan.restart_started);
  const Json fault = statusJson(plan)["faults"][0];
  EXPECT_EQ(fault["pod"], "llm-5");
  EXPECT_EQ(fault["node"], "node-5");
  EXPECT_EQ(fault["rank"], 5);
  EXPECT_EQ(fault["class"], "crash");
  const std::string expected =
      "pod llm-5 (rank 5) on node node-5 failed: Error, exit code 139 "
      "(and 2 more)";
  EXPECT_EQ(fault["summary"], expected);
  EXPECT_EQ(statusJson(plan)["lastFault"], expected);
  EXPECT_EQ(eventMessage(plan, "PodFailed"), expected);
}

// Precedence stays (a FailJob verdict, then a counted failure, then the rest); within one level
// the earliest termination decides, then the lowest index. A pod's own termination time comes
// first; without one its conditions' or its deletion's time; without any time it comes last.
TEST(PlannerFirstFailureTest, PrecedenceThenTheEarliestThenTheLowestIndex) {
  SimulatedClock clock;
  const WallTime t = clock.wallNow() - seconds{60};
  Json job = makeJob(
      4, {{"faultTolerance",
           {{"podFailurePolicy",
             {{"rules",
               Json::array({{{"action", "FailJob"},
                             {"onExitCodes", {{"operator", "In"}, {"values", {42}}}}}})}}}}}});
  job["status"] = {{"phase", "Running"}, {"startedIndexes", "0-3"}};
  auto decide = [&](const std::vector<Json>& pods, PlanContext context = {}) {
    JobPlan plan = planReconcile(job, pods, healthyNode, clock.wallNow(), context);
    return statusJson(plan)["faults"].back();
  };
  auto evicted = [&](Json pod, WallTime at) {
    pod["status"]["phase"] = "Failed";
    pod["status"]["reason"] = "Evicted";
    pod["status"]["conditions"] = Json::array({{{"type", "DisruptionTarget"},
                                                {"status", "True"},
                                                {"reason", "EvictionByEvictionAPI"},
                                                {"lastTransitionTime", formatRfc3339(at)}}});
    return pod;
  };

  {  // A FailJob verdict wins over an earlier counted crash.
    std::vector<Json> pods = runningPods(job, 4);
    pods[1] = crashedAt(pods[1], 1, t);
    pods[3] = crashedAt(pods[3], 42, t + seconds{5});
    Json fault = decide(pods);
    EXPECT_EQ(fault["rank"], 3);
    EXPECT_EQ(fault["action"], "fail");
  }
  {  // Two FailJob verdicts: the earlier one.
    std::vector<Json> pods = runningPods(job, 4);
    pods[1] = crashedAt(pods[1], 42, t + seconds{5});
    pods[3] = crashedAt(pods[3], 42, t);
    EXPECT_EQ(decide(pods)["rank"], 3);
  }
  {  // A counted crash wins over an earlier disruption.
    std::vector<Json> pods = runningPods(job, 4);
    pods[0] = evicted(pods[0], t);
    pods[2] = crashedAt(pods[2], 1, t + seconds{5});
    Json fault = decide(pods);
    EXPECT_EQ(fault["rank"], 2);
    EXPECT_EQ(fault["class"], "crash");
  }
  {  // Same second: the lowest index.
    std::vector<Json> pods = runningPods(job, 4);
    pods[1] = crashedAt(pods[1], 1, t + seconds{1});
    pods[3] = crashedAt(pods[3], 1, t);
    pods[2] = crashedAt(pods[2], 1, t);
    EXPECT_EQ(decide(pods)["rank"], 2);
  }
  {  // A pod without any stop time comes after one with a time.
    std::vector<Json> pods = runningPods(job, 4);
    pods[1] = failedWithExit(pods[1], 1);  // no finishedAt, no conditions
    pods[3] = crashedAt(pods[3], 1, t + seconds{30});
    EXPECT_EQ(decide(pods)["rank"], 3);
    pods[3] = failedWithExit(pods[3], 1);
    EXPECT_EQ(decide(pods)["rank"], 1) << "no times at all: the lowest index";
  }
  {  // No container time: the Ready condition's turn to False says when the pod stopped.
    std::vector<Json> pods = runningPods(job, 4);
    pods[3]["status"] = {{"phase", "Failed"},
                         {"conditions", Json::array({{{"type", "Ready"},
                                                      {"status", "False"},
                                                      {"lastTransitionTime", formatRfc3339(t)}}})}};
    pods[1] = crashedAt(pods[1], 1, t + seconds{2});
    EXPECT_EQ(decide(pods)["rank"], 3);
  }
  {  // The previous container's termination (lastState) when the current state has none.
    std::vector<Json> pods = runningPods(job, 4);
    pods[2] = crashedAt(pods[2], 1, t + seconds{3});
    pods[3]["status"] = {
        {"phase", "Failed"},
        {"containerStatuses",
         Json::array({{{"name", "trainer"},
                       {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}},
                       {"lastState",
                        {{"terminated", {{"exitCode", 1}, {"finishedAt", formatRfc3339(t)}}}}}}})}};
    EXPECT_EQ(decide(pods)["rank"], 3);
  }
  {  // Disruptions only: an eviction's DisruptionTarget time, a deletion's request time
     // (deletionTimestamp - grace period), a pod gone unseen last of all.
    std::vector<Json> pods = runningPods(job, 4);
    pods.erase(pods.begin());  // rank 0 vanished: no time known
    Json& deleted = pods[0];   // rank 1, deleted at t + 4 with a 30 s grace period
    deleted["metadata"]["deletionTimestamp"] = formatRfc3339(t + seconds{34});
    deleted["metadata"]["deletionGracePeriodSeconds"] = 30;
    pods[1] = evicted(pods[1], t + seconds{2});  // rank 2
    Json fault = decide(pods);
    EXPECT_EQ(fault["rank"], 2);
    EXPECT_EQ(fault["class"], "disruption");
    pods[1] = evicted(pods[1], t + seconds{6});
    EXPECT_EQ(decide(pods)["rank"], 1) << "the deletion was requested at t + 4";
  }
}

// Issue #24: a deterministic crash of the trainer stops the job before the budget is spent.

// One counted crash: `rank` on `node` with the container's exit `code` (none: a failed pod
// without a container status) in the job's current attempt; returns the plan and applies it.
int currentAttempt(const Json& job) {
  auto status = parseTrainingJobStatus(job);
  return status && status->attempt ? static_cast<int>(*status->attempt) : 0;
}

struct CrashAt {
  int rank;
  std::string node;
  std::optional<int> code;
};
JobPlan crashOnce(Json& job, const CrashAt& c, WallTime now) {
  const int attempt = currentAttempt(job);
  Json pod = makePod(job, c.rank, attempt, "Failed", c.node);
  if (c.code) pod = failedWithExit(pod, *c.code);
  JobPlan plan = planReconcile(job, {pod}, healthyNode, now, PlanContext{});
  job = withStatus(job, plan);
  return plan;
}

// A disruption of `rank` on `node` (evicted; its container killed with 137).
JobPlan evictOnce(Json& job, int rank, const std::string& node, WallTime now) {
  const int attempt = currentAttempt(job);
  Json pod = failedWithExit(makePod(job, rank, attempt, "Failed", node), 137);
  pod["status"]["conditions"] = Json::array(
      {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "PreemptionByScheduler"}}});
  JobPlan plan = planReconcile(job, {pod}, healthyNode, now, PlanContext{});
  job = withStatus(job, plan);
  return plan;
}

Json crashJob(Json fault_tolerance = Json::object()) {
  Json ft = {{"maxRestarts", 10}, {"restartBackoffSeconds", 0}};
  ft.merge_patch(fault_tolerance);
  return makeJob(4, {{"faultTolerance", ft}});
}

TEST(PlannerIdenticalCrashTest, TheSameExitCodeOnTwoNodesFailsTheJobAtTheThirdCrash) {
  SimulatedClock clock;
  Json job = crashJob();
  ASSERT_TRUE(crashOnce(job, {1, "node-a", 3}, clock.wallNow()).restart_started);
  ASSERT_TRUE(crashOnce(job, {1, "node-b", 3}, clock.wallNow()).restart_started);
  JobPlan plan = crashOnce(job, {1, "node-a", 3}, clock.wallNow());
  EXPECT_FALSE(plan.restart_started);
  EXPECT_EQ(job["status"]["phase"], "Failed");
  const Condition* failed = findCondition(plan.status, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "RepeatedIdenticalCrash");
  const std::string& m = failed->message;
  EXPECT_NE(m.find("pod llm-1 (rank 1) on node node-a failed: Error, exit code 3"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("exit code 3 in 3 attempts in a row (attempts 0, 1, 2; rank 1; nodes node-a, "
                   "node-b)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("no node was cordoned"), std::string::npos) << m;
  EXPECT_EQ(eventMessage(plan, "RepeatedIdenticalCrash"), m);
  EXPECT_TRUE(plan.cordons.empty());
  EXPECT_EQ(job["status"]["restartsCountTowardsMax"], 2) << "the budget of 10 is not spent";
  const Json& faults = job["status"]["faults"];
  ASSERT_EQ(faults.size(), 3u);
  for (const auto& f : faults) EXPECT_EQ(f["exitCode"], 3) << f.dump();
  EXPECT_EQ(faults.back()["action"], "fail");
}

// The history is status.faults, so an operator that restarts (or another replica that takes the
// lease) decides the same: here the earlier crashes were recorded by someone else.
TEST(PlannerIdenticalCrashTest, TheDecisionComesFromStatusFaultsAlone) {
  SimulatedClock clock;
  Json job = crashJob({{"maxIdenticalCrashes", 3}});
  auto record = [](int attempt, const std::string& node, int code) {
    return Json{{"class", "crash"}, {"attempt", attempt}, {"pod", "llm-2"},  {"node", node},
                {"rank", 2},        {"exitCode", code},   {"counted", true}, {"action", "restart"}};
  };
  job["status"] = {{"phase", "Restarting"},
                   {"attempt", 7},
                   {"restarts", 7},
                   {"restartsCountTowardsMax", 2},
                   {"faults", Json::array({record(5, "node-x", 134), record(6, "node-y", 134)})}};
  JobPlan plan = crashOnce(job, {2, "node-z", 134}, clock.wallNow());
  EXPECT_EQ(job["status"]["phase"], "Failed");
  ASSERT_NE(findCondition(plan.status, "Failed"), nullptr);
  EXPECT_NE(findCondition(plan.status, "Failed")
                ->message.find("(attempts 5, 6, 7; rank 2; nodes "
                               "node-x, node-y, node-z)"),
            std::string::npos)
      << findCondition(plan.status, "Failed")->message;
}

// A node that went NotReady under the job in the same attempt is still cordoned (node-level
// evidence), and the message says it is not for the crash.
TEST(PlannerIdenticalCrashTest, ANodeThatWentNotReadyMeanwhileIsCordonedForThatAlone) {
  SimulatedClock clock;
  Json job = crashJob();
  ASSERT_TRUE(crashOnce(job, {1, "node-a", 3}, clock.wallNow()).restart_started);
  ASSERT_TRUE(crashOnce(job, {1, "node-b", 3}, clock.wallNow()).restart_started);
  auto nodes = [](const std::string& name) {
    return NodeFacts{true, name != "sick", false, false};
  };
  std::vector<Json> pods = {crashedAt(makePod(job, 1, 2, "Running", "node-a"), 3, clock.wallNow()),
                            makePod(job, 2, 2, "Failed", "sick")};
  JobPlan plan = planReconcile(job, pods, nodes, clock.wallNow(), PlanContext{});
  ASSERT_EQ(statusJson(plan)["phase"], "Failed");
  const std::string& m = findCondition(plan.status, "Failed")->message;
  EXPECT_EQ(findCondition(plan.status, "Failed")->reason, "RepeatedIdenticalCrash");
  ASSERT_EQ(plan.cordons.size(), 1u);
  EXPECT_EQ(plan.cordons[0].node, "sick");
  EXPECT_NE(m.find("no node was cordoned for this crash (sick went NotReady under the job and is "
                   "cordoned for that)"),
            std::string::npos)
      << m;
}

// A crash that repeats on one node may be that node's fault: the job keeps restarting (and
// maxRestarts decides).
TEST(PlannerIdenticalCrashTest, OnOneNodeTheJobKeepsRestarting) {
  SimulatedClock clock;
  Json job = crashJob();
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(crashOnce(job, {1, "node-a", 3}, clock.wallNow()).restart_started) << i;
  }
  EXPECT_EQ(job["status"]["restartsCountTowardsMax"], 5);
}

TEST(PlannerIdenticalCrashTest, DifferentCrashesKeepRestarting) {
  SimulatedClock clock;
  {  // Different exit codes (the same rank, two nodes).
    Json job = crashJob();
    for (int code : {3, 4, 3, 5, 3}) {
      std::string node = code == 3 ? "node-a" : "node-b";
      EXPECT_TRUE(crashOnce(job, {1, node, code}, clock.wallNow()).restart_started) << code;
    }
  }
  {  // No exit code known: the rank is the identity, and these differ.
    Json job = crashJob();
    for (int rank : {1, 2, 3, 1}) {
      std::string node = "node-" + std::to_string(rank);
      EXPECT_TRUE(crashOnce(job, {rank, node, std::nullopt}, clock.wallNow()).restart_started)
          << rank;
    }
  }
  {  // A known exit code and an unknown one are not the same crash.
    Json job = crashJob();
    EXPECT_TRUE(crashOnce(job, {1, "node-a", 1}, clock.wallNow()).restart_started);
    EXPECT_TRUE(crashOnce(job, {1, "node-b", std::nullopt}, clock.wallNow()).restart_started);
    EXPECT_TRUE(crashOnce(job, {1, "node-a", 1}, clock.wallNow()).restart_started);
  }
}

TEST(PlannerIdenticalCrashTest, TheSameRankWithoutAnExitCodeOrTheSameCodeOnOtherRanksIsIdentical) {
  SimulatedClock clock;
  Json job = crashJob();
  ASSERT_TRUE(crashOnce(job, {2, "node-a", std::nullopt}, clock.wallNow()).restart_started);
  ASSERT_TRUE(crashOnce(job, {2, "node-b", std::nullopt}, clock.wallNow()).restart_started);
  JobPlan plan = crashOnce(job, {2, "node-c", std::nullopt}, clock.wallNow());
  ASSERT_EQ(job["status"]["phase"], "Failed");
  EXPECT_NE(findCondition(plan.status, "Failed")
                ->message.find("rank 2 (exit code unknown) in 3 "
                               "attempts in a row"),
            std::string::npos)
      << findCondition(plan.status, "Failed")->message;

  job = crashJob();
  ASSERT_TRUE(crashOnce(job, {0, "node-a", 139}, clock.wallNow()).restart_started);
  ASSERT_TRUE(crashOnce(job, {3, "node-b", 139}, clock.wallNow()).restart_started);
  plan = crashOnce(job, {1, "node-b", 139}, clock.wallNow());
  ASSERT_EQ(job["status"]["phase"], "Failed");
  EXPECT_NE(findCondition(plan.status, "Failed")
                ->message.find("exit code 139 in 3 attempts in a row (attempts 0, 1, 2; ranks 0, "
                               "3, 1; nodes node-a, node-b)"),
            std::string::npos)
      << findCondition(plan.status, "Failed")->message;
}

// Disruptions are not crashes of the trainer: they neither count towards the streak nor break it.
TEST(PlannerIdenticalCrashTest, InfrastructureFaultsDoNotCount) {
  SimulatedClock clock;
  Json job = crashJob();
  ASSERT_TRUE(crashOnce(job, {1, "node-a", 137}, clock.wallNow()).restart_started);
  ASSERT_TRUE(evictOnce(job, 1, "node-b", clock.wallNow()).restart_started);
  EXPECT_EQ(job["status"]["faults"].back()["class"], "disruption");
  ASSERT_TRUE(crashOnce(job, {1, "node-b", 137}, clock.wallNow()).restart_started)
      << "two counted crashes, not three";
  ASSERT_TRUE(evictOnce(job, 1, "node-c", clock.wallNow()).restart_started);
  JobPlan plan = crashOnce(job, {1, "node-c", 137}, clock.wallNow());
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_NE(findCondition(plan.status, "Failed")->message.find("(attempts 0, 2, 4;"),
            std::string::npos)
      << findCondition(plan.status, "Failed")->message;
}

TEST(PlannerIdenticalCrashTest, TheLimitIsTheJobsAndZeroTurnsTheCheckOff) {
  SimulatedClock clock;
  Json job = crashJob({{"maxIdenticalCrashes", 2}});
  ASSERT_TRUE(crashOnce(job, {1, "node-a", 3}, clock.wallNow()).restart_started);
  crashOnce(job, {1, "node-b", 3}, clock.wallNow());
  EXPECT_EQ(job["status"]["phase"], "Failed");

  job = crashJob({{"maxIdenticalCrashes", 0}});
  for (int i = 0; i < 6; ++i) {
    std::string node = i % 2 == 0 ? "node-a" : "node-b";
    EXPECT_TRUE(crashOnce(job, {1, node, 3}, clock.wallNow()).restart_started) << i;
  }
}

// status.faults keeps 16 entries: when disruptions between the crashes push the oldest out, the
// check waits until the list shows N-1 earlier identical crashes again.
TEST(PlannerIdenticalCrashTest, TheFaultListBoundDelaysTheCheck) {
  SimulatedClock clock;
  Json job = crashJob({{"maxRestarts", 100}, {"maxIdenticalCrashes", 16}});
  auto node = [](int i) { return i % 2 == 0 ? std::string{"node-a"} : std::string{"node-b"}; };
  ASSERT_TRUE(crashOnce(job, {1, node(0), 3}, clock.wallNow()).restart_started);
  ASSERT_TRUE(evictOnce(job, 1, "node-c", clock.wallNow()).restart_started);
  ASSERT_TRUE(evictOnce(job, 1, "node-c", clock.wallNow()).restart_started);
  for (int i = 1; i <= 15; ++i) {
    ASSERT_TRUE(crashOnce(job, {1, node(i), 3}, clock.wallNow()).restart_started)
        << "crash " << i + 1 << ": fewer than 15 earlier crashes are listed";
  }
  crashOnce(job, {1, node(16), 3}, clock.wallNow());
  EXPECT_EQ(job["status"]["phase"], "Failed") << "the 17th crash sees 15 earlier ones";
  EXPECT_EQ(findCondition(*parseTrainingJobStatus(job), "Failed")->reason,
            "RepeatedIdenticalCrash");
}

TEST(TrainingJobSpecTest, MaxIdenticalCrashesIsZeroOrTwoToSixteen) {
  auto parsed = [](Json value) {
    return parseTrainingJobSpec(makeJob(2, {{"faultTolerance", {{"maxIdenticalCrashes", value}}}}));
  };
  EXPECT_EQ(parseTrainingJobSpec(makeJob(2))->fault_tolerance.max_identical_crashes, 3);
  EXPECT_EQ(parsed(0)->fault_tolerance.max_identical_crashes, 0);
  EXPECT_EQ(parsed(2)->fault_tolerance.max_identical_crashes, 2);
  EXPECT_EQ(parsed(16)->fault_tolerance.max_identical_crashes, 16);
  for (Json bad : {Json(1), Json(-1), Json(17)}) {
    auto spec = parsed(bad);
    ASSERT_FALSE(spec) << bad;
    EXPECT_EQ(spec.error().message,
              "spec.faultTolerance.maxIdenticalCrashes must be 0 (off) or in [2, 16]")
        << bad;
  }
  EXPECT_EQ(parsed("3").error().message,
            "spec.faultTolerance.maxIdenticalCrashes must be an integer");
}

}  // namespace
}  // namespace c4::op
