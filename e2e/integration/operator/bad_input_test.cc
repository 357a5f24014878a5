// Bad input from the cluster (issue #27) against the REAL API server: anyone who may patch a
// Node writes its c4.dev/fault-history annotation, and one with fields of another type on the
// node of a running job once ended the operator within seconds (and every successor, since the
// annotation stays). Here the detector reads the job, its pods and the nodes through informers
// on the API server, the job's reports come from the analyser tests' synthetic ring job through
// the real report store, and what the detector writes (Events, the node's history) lands in the
// API server.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "harness.h"
#include "kube/cache/shared_informers.h"
#include "operator/detection/detector.h"
#include "synthetic_job.h"

namespace c4::op::it {
namespace {

using c4d::testing::JobSpec;
using c4d::testing::SyntheticJob;

// Nodes no kubelet manages (the pods name them; the test plays their kubelet), deleted at the
// end.
class TestNodes {
 public:
  explicit TestNodes(KubeClient& client) : client_(client) {}
  ~TestNodes() {
    for (const auto& n : names_) (void)client_.remove(resources::nodes(), "", n, DeleteOptions{});
  }
  TestNodes(const TestNodes&) = delete;
  TestNodes& operator=(const TestNodes&) = delete;
  void add(const std::string& name, Json annotations) {
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata",
                  {{"name", name},
                   {"labels", {{"c4.dev/it", "bad-input"}}},
                   {"annotations", std::move(annotations)}}}};
    auto created = client_.create(resources::nodes(), "", node);
    ASSERT_TRUE(created) << created.error().toString();
    names_.push_back(name);
  }

 private:
  KubeClient& client_;
  std::vector<std::string> names_;
};

class BadInputTest : public NamespacedTest {
 protected:
  BadInputTest() : NamespacedTest("c4-bad-input") {}
};

// A malformed fault history on a running job's node: the detector reports it and still acts, and
// the restart it decides outlives the process (recorded in the cluster first).
TEST_F(BadInputTest, AMalformedFaultHistoryOnARunningJobsNodeIsReportedAndTheDetectorStillActs) {
  JobSpec spec;
  spec.nodes = 4;
  spec.ranks_per_node = 1;
  spec.seed = 7;
  SyntheticJob synth(spec);
  const std::string prefix = uniqueName("c4-bad");
  auto nodeOfRank = [&](int r) {
    return prefix + "-" + SyntheticJob::nodeName(synth.nodeOfRank(r));
  };
  const std::string culprit = nodeOfRank(2);
  TestNodes nodes(*client_);
  for (int r = 0; r < 4; ++r) {
    Json annotations = Json::object();
    // The shape of the annotation with fields of another type: what crashed the operator.
    if (r == 2) annotations[kFaultHistoryAnnotation] = R"([{"time": 5, "class": 7}])";
    ASSERT_NO_FATAL_FAILURE(nodes.add(nodeOfRank(r), annotations));
  }

  // The job, Running at attempt 0, and its four pods, Running on those nodes.
  Json job = trainingJob(ns_, "llm", 4);
  auto created = client_->create(resources::trainingJobs(), ns_, job);
  ASSERT_TRUE(created) << created.error().toString();
  const std::string uid = (*created)["metadata"]["uid"].get<std::string>();
  auto running =
      client_->patch(resources::trainingJobs(), ns_, "llm", PatchType::kMerge,
                     {{"status", {{"phase", "Running"}, {"attempt", 0}}}}, statusSubresource());
  ASSERT_TRUE(running) << running.error().toString();
  for (int r = 0; r < 4; ++r) {
    const std::string name = "llm-" + std::to_string(r);
    Json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", name},
                  {"namespace", ns_},
                  {"labels",
                   {{labels::kJobName, "llm"},
                    {labels::kReplicaIndex, std::to_string(r)},
                    {labels::kRestartAttempt, "0"}}}}},
                {"spec",
                 {{"nodeName", nodeOfRank(r)},
                  {"tolerations", Json::array({{{"operator", "Exists"}}})},
                  {"containers", Json::array({{{"name", "trainer"}, {"image", "trainer:it"}}})}}}};
    auto made = client_->create(resources::pods(), ns_, pod);
    ASSERT_TRUE(made) << made.error().toString();
    auto phase = client_->patch(resources::pods(), ns_, name, PatchType::kMerge,
                                {{"status", {{"phase", "Running"}}}}, statusSubresource());
    ASSERT_TRUE(phase) << phase.error().toString();
  }

  // The detector as the manager wires it, on informers of the real API server; its own clock
  // is simulated (one analysis window per step).
  SharedInformers informers(*client_, realClock());
  Informer& jobs = informers.informerFor(resources::trainingJobs(), ns_);
  Informer& pods = informers.informerFor(resources::pods(), ns_, labels::kJobName);
  Informer& node_cache = informers.informerFor(resources::nodes());
  informers.start();
  struct StopInformers {
    SharedInformers& informers;
    ~StopInformers() { informers.stop(); }
  } stop_informers{informers};
  ASSERT_TRUE(informers.waitForSync(realClock().monoNow() + std::chrono::seconds{30}));
  ASSERT_TRUE(waitFor([&] {
    auto cached = jobs.store().get(ns_ + "/llm");
    if (!cached || stringAt(fieldsOf(*cached, "status"), "phase") != "Running") return false;
    for (int r = 0; r < 4; ++r) {
      auto pod = pods.store().get(ns_ + "/llm-" + std::to_string(r));
      if (!pod || stringAt(fieldsOf(*pod, "status"), "phase") != "Running") return false;
    }
    auto node = node_cache.store().get(culprit);
    return node && !annotationOf(*node, kFaultHistoryAnnotation).empty();
  })) << "the caches never showed the job, its pods and the node";

  SimulatedClock clock;
  clock.setWall(synth.now());
  metrics::Registry registry;
  EventRecorder events(*client_, clock, "c4-operator", uniqueName("it"), nullptr);
  NodeActionConfig actions;
  actions.state_namespace = ns_;  // the breaker's ConfigMap (the fault-history budget) lives here
  NodeRemediator remediator(
      *client_, clock, events, actions,
      [&](const std::string& name) { return node_cache.store().get(name); },
      [&] { return node_cache.store().list(); }, nullptr);
  ingest::ReportStore store;
  const ingest::JobFacts facts{uid, 0, 4};
  store.observeJob(ns_, "llm", facts);
  DetectorConfig config;
  Detector detector(store, jobs, pods, node_cache, remediator, events, clock, config, registry,
                    DetectorPeers{});

  // One window: the synthetic job's newest reports become one batch per node, then the
  // detector's reconcile of the job (what its worker does with the key).
  std::map<int, WallTime> last_sent;
  std::map<int, std::uint64_t> report_seq;
  std::uint64_t seq = 0;
  auto step = [&] {
    synth.step();
    clock.advance(config.window);
    clock.setWall(synth.now());
    const c4d::JobSnapshot& snap = synth.snapshot();
    for (int r = 0; r < synth.worldSize(); ++r) {
      const auto& rank = snap.ranks[static_cast<std::size_t>(r)];
      // A batch every window, with or without a new report: a node plugin ships one (its
      // health) every interval, so a frozen rank's node still shows arriving telemetry.
      report::NodeReport batch;
      batch.node = nodeOfRank(r);
      batch.seq = ++seq;
      batch.time_unix_ns = toUnixNanos(clock.wallNow());
      if (!rank.reports.empty() && rank.reports.back().time > last_sent[r]) {
        const c4d::ReportSample& newest = rank.reports.back();
        last_sent[r] = newest.time;
        batch.reports.push_back(c4d::testing::rankReportOf(
            newest, {ns_, "llm", "llm-" + std::to_string(r), nodeOfRank(r), r, 4, 0, 100},
            ++report_seq[r]));
      }
      store.apply(batch, {{ns_ + "/llm", facts}}, clock.wallNow(), 0);
    }
    Result<ReconcileResult> result = makeError(ErrorCode::kInternal, "threw");
    EXPECT_NO_THROW(result = detector.reconcile(ns_ + "/llm"));
    EXPECT_TRUE(result) << result.error().toString();
  };

  for (int i = 0; i < 8; ++i) step();
  synth.freeze(2);  // rank 2 on the node with the malformed history stops: a hang
  for (int i = 0; i < 30 && !detector.diagnosis(ns_ + "/llm"); ++i) step();
  auto d = detector.diagnosis(ns_ + "/llm");
  ASSERT_TRUE(d) << "the detector no longer acts";
  EXPECT_EQ(d->nodes, std::vector<std::string>{culprit});

  // In the API server: the Events on the node and a well-formed history that names the job.
  auto reasons = eventReasons(*client_, "default", culprit);
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "InvalidFaultHistory"), 1)
      << "the malformed annotation is reported once";
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "FaultSuspected"), 1);
  auto job_reasons = eventReasons(*client_, ns_, "llm");
  EXPECT_EQ(std::count(job_reasons.begin(), job_reasons.end(), "FaultDetected"), 1);
  auto stored = client_->get(resources::nodes(), "", culprit);
  ASSERT_TRUE(stored) << stored.error().toString();
  std::string problem;
  auto history = faultHistoryOf(*stored, &problem);
  EXPECT_EQ(problem, "") << annotationOf(*stored, kFaultHistoryAnnotation);
  ASSERT_EQ(history.size(), 1u) << annotationOf(*stored, kFaultHistoryAnnotation);
  EXPECT_EQ(history[0].job, ns_ + "/llm");
  // The restart took its slot of the cluster-wide restart budget, in the breaker's ConfigMap.
  auto breaker = client_->get(resources::configMaps(), ns_, actions.state_name);
  ASSERT_TRUE(breaker) << breaker.error().toString();
  const Json slots = Json::parse(stringAt(fieldsOf(*breaker, "data"), "restarts.json").value_or(""),
                                 nullptr, false);
  ASSERT_TRUE(slots.is_array() && slots.size() == 1u) << breaker->dump();
  EXPECT_EQ(slots[0].value("job", std::string{}), ns_ + "/llm");
  EXPECT_EQ(slots[0].value("attempt", -1), 0);

  // Issue #27: the diagnosis was recorded there before the restart was asked for. A new process
  // (an empty report store: the evidence went with the first) finds it in the real API server's
  // ConfigMap and asks for the same restart.
  const Json recorded = Json::parse(
      stringAt(fieldsOf(*breaker, "data"), "diagnoses.json").value_or(""), nullptr, false);
  ASSERT_TRUE(recorded.is_array() && recorded.size() == 1u) << breaker->dump();
  EXPECT_EQ(recorded[0].value("uid", std::string{}), uid);
  ingest::ReportStore fresh_store;
  metrics::Registry fresh_registry;
  Detector next(fresh_store, jobs, pods, node_cache, remediator, events, clock, config,
                fresh_registry, DetectorPeers{});
  ASSERT_TRUE(next.reconcile(ns_ + "/llm"));
  auto restored = next.diagnosis(ns_ + "/llm");
  ASSERT_TRUE(restored) << "the restart decided before the process ended is lost";
  EXPECT_EQ(*restored, *d);
}

// A TrainingJob whose pod template has a field of another type where the operator reads it (a
// volume name that is a number: the template keeps unknown fields, only env names are typed)
// is not a crash: the pods it would make are refused by the API server, which the job reports
// (FailedCreatePod); the operator goes on with the other jobs.
TEST_F(BadInputTest, ATrainingJobWithAWrongTypedTemplateFieldGetsAnEventAndTheOthersGoOn) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  Json bad = trainingJob(ns_, "bad", 2);
  bad["spec"]["template"]["spec"]["volumes"] = Json::array({{{"name", 5}, {"emptyDir", {}}}});
  auto created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_TRUE(created) << created.error().toString();
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "good", 2)));
  EXPECT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "bad");
    return std::find(reasons.begin(), reasons.end(), "FailedCreatePod") != reasons.end();
  }));
  EXPECT_TRUE(listPods(*client_, ns_, "bad").empty());
  EXPECT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "good", 2, 0, "Running"); }))
      << describePods(*client_, ns_, "good");
}

// The controller's last line: a reconcile that throws on a field nothing checked (here the
// test hook throws nlohmann's type_error for one job) records InvalidObject on that job instead
// of retrying the same object; the other jobs are reconciled as usual.
TEST_F(BadInputTest, AReconcileThatThrowsOnAFieldRecordsInvalidObjectAndTheOthersGoOn) {
  std::atomic<int> throws{0};
  OperatorInstance op(*client_, ns_, [&](std::string_view, const std::string& key) {
    if (key == ns_ + "/bad") {
      ++throws;
      (void)Json(5).get<std::string>();  // type_error.302, as a wrong-typed field would
    }
    return true;
  });
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "bad", 1)));
  ASSERT_TRUE(client_->create(resources::trainingJobs(), ns_, trainingJob(ns_, "good", 2)));
  ASSERT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "bad");
    return std::find(reasons.begin(), reasons.end(), "InvalidObject") != reasons.end();
  }));
  EXPECT_TRUE(waitFor([&] { return podsAtAttempt(*client_, ns_, "good", 2, 0, "Running"); }))
      << describePods(*client_, ns_, "good");
  EXPECT_GE(throws.load(), 1);
}

}  // namespace
}  // namespace c4::op::it
