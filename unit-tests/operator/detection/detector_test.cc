// The detector: the synthetic ring job of the analyser's tests, delivered through the real
// report store as node batches, analysed every window on simulated time; what the detector
// records (Events, node fault history) lands in an in-memory API (the component under test is
// the detector, not the API server).
#include "operator/detection/detector.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "synthetic_job.h"
#include "testing/fake_kube_client.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

using c4d::testing::JobSpec;
using c4d::testing::SyntheticJob;

// C4P as the detector sees it: what each test sets, nothing otherwise.
struct FakeTrafficPlan final : TrafficPlanPeer {
  using Replan = std::function<void(const std::string&, const std::string&, const std::string&)>;
  using Explain = std::function<std::optional<std::string>(const std::string&, const std::string&,
                                                           const std::string&)>;
  void setReplan(Replan r) { replan_ = std::move(r); }
  void setTrafficExplanation(Explain e) { explain_ = std::move(e); }
  void replan(const std::string& key, const std::string& node,
              const std::string& peer_node) override {
    if (replan_) replan_(key, node, peer_node);
  }
  std::optional<std::string> explain(const std::string& key, const std::string& node,
                                     const std::string& peer_node) const override {
    return explain_ ? explain_(key, node, peer_node) : std::nullopt;
  }
  Replan replan_;
  Explain explain_;
};

// The TrainingJob controller as the detector sees it: the keys it was asked to enqueue.
struct RecordedDiagnoses final : DiagnosisListener {
  explicit RecordedDiagnoses(std::vector<std::string>& keys) : keys_(keys) {}
  void diagnosed(const std::string& key) override { keys_.push_back(key); }
  std::vector<std::string>& keys_;
};

class DetectorTest : public ::testing::Test {
 protected:
  void SetUp() override { build({}); }

  void build(Json fault_tolerance, DetectorConfig config = {}) {
    // A new scenario, not a restart of the operator: no diagnosis recorded by an earlier one.
    if (auto cm = client_.get(resources::configMaps(), "c4-system", "c4-node-actions", {})) {
      (*cm)["data"].erase("diagnoses.json");
      client_.put(resources::configMaps(), *cm);
    }
    last_sent_.clear();
    report_seq_.clear();
    enqueued_.clear();
    JobSpec spec;
    spec.nodes = 4;
    spec.ranks_per_node = 1;
    spec.seed = 7;
    synth_ = std::make_unique<SyntheticJob>(spec);
    clock_.setWall(synth_->now());
    job_ = {{"apiVersion", "c4.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}}},
            {"spec",
             {{"replicas", 4},
              {"faultTolerance", fault_tolerance},
              {"template", {{"spec", {{"containers", {{{"name", "t"}, {"image", "i"}}}}}}}}}},
            {"status", {{"phase", "Running"}, {"attempt", 0}}}};
    jobs_.store().upsert(job_);
    for (int r = 0; r < 4; ++r) {
      std::string node = SyntheticJob::nodeName(synth_->nodeOfRank(r));
      nodes_.store().upsert(
          {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node}}}});
      client_.put(resources::nodes(),
                  {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node}}}});
      pods_.store().upsert({{"metadata",
                             {{"namespace", "team"},
                              {"name", "llm-" + std::to_string(r)},
                              {"labels",
                               {{"c4.dev/job-name", "llm"},
                                {"c4.dev/replica-index", std::to_string(r)},
                                {"c4.dev/restart-attempt", "0"}}}}},
                            {"spec", {{"nodeName", node}}},
                            {"status", {{"phase", "Running"}}}});
    }
    store_.observeJob("team", "llm", facts());
    traffic_ = FakeTrafficPlan{};
    window_ = config.window;
    detector_ =
        std::make_unique<Detector>(store_, jobs_, pods_, nodes_, remediator_, events_, clock_,
                                   config, registry_, DetectorPeers{&diagnoses_, &traffic_});
  }

  ingest::JobFacts facts() const { return {"job-uid", 0, 4}; }

  // A detector with a 10 s re-plan grace whose job's link 1-2 goes slow after 8 healthy windows;
  // counts the re-plans C4P is asked for in `replans` and steps until the first (at most 20).
  // With `explained`, C4P explains every connection (a failed link on its paths) while it holds.
  void slowLinkUntilReplanned(int& replans, const bool* explained = nullptr) {
    DetectorConfig config;
    config.replan_grace = std::chrono::seconds{10};
    build({}, config);
    traffic_.setReplan(
        [&replans](const std::string&, const std::string&, const std::string&) { ++replans; });
    if (explained != nullptr) {
      traffic_.setTrafficExplanation(
          [explained](const std::string&, const std::string&, const std::string&) {
            return *explained ? std::optional<std::string>(
                                    "C4P holds link plane0/leaf-0/uplink1 "
                                    "Down failed")
                              : std::nullopt;
          });
    }
    for (int i = 0; i < 8; ++i) step();
    synth_->slowLink(1, 2, 0.1);
    for (int i = 0; i < 20 && replans == 0; ++i) step();
  }

  // One window: the synthetic job's newest reports become one batch per node.
  void step() {
    synth_->step();
    clock_.advance(window_);  // the job's next analysis window is due
    clock_.setWall(synth_->now());
    const c4d::JobSnapshot& snap = synth_->snapshot();
    for (int r = 0; r < synth_->worldSize(); ++r) {
      const auto& rank = snap.ranks[static_cast<std::size_t>(r)];
      const int node_index = synth_->nodeOfRank(r);
      const std::string node = SyntheticJob::nodeName(node_index);
      if (rank.pod_state == c4d::PodState::kFailed) {  // the kubelet reports the exit
        Json pod = *pods_.store().get("team/llm-" + std::to_string(r));
        pod["status"]["phase"] = "Failed";
        pods_.store().upsert(pod);
      }
      const report::RankIdentity id{"team", "llm", "llm-" + std::to_string(r), node, r, 4, 0, 100};
      // Stamps are the node's clock: the operator's, moved by the node's skew.
      const std::int64_t skew = skew_[node_index].count();
      report::NodeReport batch;
      batch.node = node;
      batch.seq = ++seq_;
      batch.time_unix_ns = toUnixNanos(clock_.wallNow()) + skew;
      if (!rank.reports.empty() && rank.reports.back().time > last_sent_[r]) {
        const c4d::ReportSample& newest = rank.reports.back();
        last_sent_[r] = newest.time;
        batch.reports.push_back(c4d::testing::rankReportOf(newest, id, ++report_seq_[r]));
      }
      for (const c4d::AnomalySample& a : rank.anomalies) {
        report::AnomalyNotice notice;
        notice.id = id;
        notice.time_unix_ns = toUnixNanos(a.time) + skew;
        notice.kind = a.kind;
        notice.direction = a.direction;
        notice.peer_rank = a.peer_rank;
        notice.age_us = a.age_us;
        batch.notices.emplace_back(std::move(notice));
      }
      // Sent even when empty: a node plugin ships a batch (its health) every interval, so a
      // frozen rank's node still shows arriving telemetry.
      store_.apply(batch, {{"team/llm", facts()}}, clock_.wallNow(), 0);
    }
    reconcile();
  }

  // What the detector's worker does with the job's key.
  void reconcile() { ASSERT_TRUE(detector_->reconcile("team/llm")); }

  // Analysis windows run so far (c4_c4d_tick_duration_seconds observations).
  int windows() {
    const std::string text = registry_.expose();
    const std::string name = "c4_c4d_tick_duration_seconds_count ";
    auto at = text.find(name);
    return at == std::string::npos ? -1 : std::stoi(text.substr(at + name.size()));
  }
  // Waits (real time, bounded) until `done` holds; for tests that run the detector's worker.
  static bool eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 10000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    return done();
  }

  // Steps until an Event with `reason` exists (at most `windows` windows); returns those Events.
  std::vector<Json> stepUntilEvent(const std::string& reason, int windows = 20) {
    for (int i = 0; i < windows && eventsWithReason(reason).empty(); ++i) step();
    return eventsWithReason(reason);
  }

  std::vector<Json> eventsWithReason(const std::string& reason) {
    std::vector<Json> out;
    for (const auto& e : client_.stored(resources::events())) {
      if (e.value("reason", std::string{}) == reason) out.push_back(e);
    }
    return out;
  }

  // The diagnoses recorded in the breaker's ConfigMap (data diagnoses.json), or [].
  Json recordedDiagnoses() {
    auto cm = client_.get(resources::configMaps(), "c4-system", "c4-node-actions", {});
    if (!cm || !(*cm)["data"].contains("diagnoses.json")) return Json::array();
    return Json::parse((*cm)["data"]["diagnoses.json"].get_ref<const std::string&>());
  }
  // Replaces them (as someone with write access to the ConfigMap might).
  void writeRecordedDiagnoses(const Json& list) {
    Json cm = {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", {{"name", "c4-node-actions"}, {"namespace", "c4-system"}}},
               {"data", {{"diagnoses.json", list.dump()}}}};
    client_.put(resources::configMaps(), cm);
  }

  SimulatedClock clock_;
  kube::testing::FakeKubeClient client_;
  metrics::Registry registry_;
  EventRecorder events_{client_, clock_, "c4-operator", "test", nullptr};
  ingest::ReportStore store_;
  Informer jobs_{client_, clock_, resources::trainingJobs(), ""};
  Informer pods_{client_, clock_, resources::pods(), ""};
  Informer nodes_{client_, clock_, resources::nodes(), ""};
  // The only writer of Nodes (the culprits' fault history), reading the cache above.
  NodeRemediator remediator_{client_,
                             clock_,
                             events_,
                             NodeActionConfig{},
                             [this](const std::string& name) { return nodes_.store().get(name); },
                             [this] { return nodes_.store().list(); },
                             nullptr};
  std::vector<std::string> enqueued_;
  RecordedDiagnoses diagnoses_{enqueued_};
  FakeTrafficPlan traffic_;
  Duration window_ = std::chrono::seconds{1};
  std::unique_ptr<SyntheticJob> synth_;
  std::unique_ptr<Detector> detector_;
  Json job_;
  std::map<int, WallTime> last_sent_;
  std::map<int, std::uint64_t> report_seq_;
  std::map<int, std::chrono::nanoseconds> skew_;  // by node index: the node's clock - operator's
  std::uint64_t seq_ = 0;
};

TEST_F(DetectorTest, AHealthyJobGetsNoDiagnosis) {
  for (int i = 0; i < 30; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  EXPECT_TRUE(eventsWithReason("FaultDetected").empty());
  EXPECT_TRUE(enqueued_.empty());
}

TEST_F(DetectorTest, AFrozenRankIsDiagnosedOnItsNodeWithEventsAndHistory) {
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(2);
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(2));
  int windows = 0;
  while (!detector_->diagnosis("team/llm") && windows < 30) {
    step();
    ++windows;
  }
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "no diagnosis within 30 windows";
  EXPECT_LE(windows, 20);
  EXPECT_EQ(d->attempt, 0);
  EXPECT_EQ(d->fault_class, "nonCommHang");
  EXPECT_EQ(d->nodes, std::vector<std::string>{culprit});
  EXPECT_EQ(d->cordon_nodes, d->nodes);
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"});

  auto detected = eventsWithReason("FaultDetected");
  ASSERT_EQ(detected.size(), 1u);
  EXPECT_NE(detected[0]["message"].get<std::string>().find(culprit), std::string::npos);
  ASSERT_EQ(eventsWithReason("FaultSuspected").size(), 1u);
  // The node's history, in the cluster.
  bool patched = false;
  for (const auto& p : client_.patches()) {
    if (p.resource == "nodes" && p.name == culprit) {
      Json node = {{"metadata", {{"annotations", p.body["metadata"]["annotations"]}}}};
      auto history = faultHistoryOf(node);
      ASSERT_EQ(history.size(), 1u);
      EXPECT_EQ(history[0].fault_class, "nonCommHang");
      EXPECT_EQ(history[0].job, "team/llm");
      patched = true;
    }
  }
  EXPECT_TRUE(patched);

  // More windows of the same fault: one verdict, one diagnosis.
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(eventsWithReason("FaultDetected").size(), 1u);
  EXPECT_EQ(enqueued_.size(), 1u);

  // A new attempt clears the diagnosis.
  job_["status"]["attempt"] = 1;
  jobs_.store().upsert(job_);
  reconcile();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
}

// The snapshot carries each report's communicators (profiler telemetry) as the store kept them.
// Two independent faults in one attempt (two ranks frozen at once on different nodes): both
// verdicts join one diagnosis, so the one restart avoids and cordons both nodes — not a restart
// per fault, the second of which would land on the other culprit again.
// Issue #27: C4D's restarts are bounded cluster-wide (NodeRemediator::takeRestartSlot, 20 an
// hour by default). Beyond the budget the diagnosis is held, not lost: a Warning Event
// RestartDeferred, the budget asked again every 10 s, and the diagnosis published once the hour
// has room. The control: the same job with the budget free is diagnosed at once (the test above).
TEST_F(DetectorTest, ADiagnosisBeyondTheRestartBudgetWaitsForRoom) {
  // C4D restarted 20 other job attempts, the first 40 s short of an hour ago.
  const WallTime now = clock_.wallNow();
  clock_.setWall(now - std::chrono::hours{1} + std::chrono::seconds{40});
  std::string why;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(remediator_.takeRestartSlot("other/job-" + std::to_string(i), 0, why), true);
  }
  clock_.setWall(now);
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(2);
  const auto deferred = stepUntilEvent("RestartDeferred", 25);
  ASSERT_EQ(deferred.size(), 1u) << "no RestartDeferred Event within 25 windows";
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  EXPECT_TRUE(enqueued_.empty()) << "the controller heard of a restart beyond the budget";
  const std::string message = deferred[0].value("message", std::string{});
  EXPECT_NE(message.find("nonCommHang"), std::string::npos) << message;
  EXPECT_NE(message.find("limit 20"), std::string::npos) << message;
  EXPECT_FALSE(eventsWithReason("FaultDetected").empty()) << "the verdict itself is reported";
  // The other restarts leave the window: the diagnosis follows within a retry.
  int windows = 0;
  while (!detector_->diagnosis("team/llm") && windows < 60) {
    step();
    ++windows;
  }
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "still held after 60 more windows";
  EXPECT_EQ(d->fault_class, "nonCommHang");
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"});
  EXPECT_EQ(eventsWithReason("RestartDeferred").size(), 1u) << "one Event per diagnosis";
  EXPECT_EQ(remediator_.takeRestartSlot("team/llm", 0, why), true) << "its slot is taken";
}

TEST_F(DetectorTest, FaultsConfirmedTogetherJoinOneRestartThatAvoidsEveryCulprit) {
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(0);
  synth_->freeze(2);
  const std::string a = SyntheticJob::nodeName(synth_->nodeOfRank(0));
  const std::string b = SyntheticJob::nodeName(synth_->nodeOfRank(2));
  for (int i = 0; i < 30 && !detector_->diagnosis("team/llm"); ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "no diagnosis within 30 windows";
  EXPECT_EQ(eventsWithReason("FaultDetected").size(), 2u);
  std::vector<std::string> nodes = d->nodes;
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<std::string>{a, b}));
  EXPECT_EQ(d->cordon_nodes.size(), 2u);
  EXPECT_EQ(d->keys.size(), 2u);
  EXPECT_EQ(d->key, d->keys.front());
  EXPECT_NE(d->summary.find(a), std::string::npos) << d->summary;
  EXPECT_NE(d->summary.find(b), std::string::npos) << d->summary;
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"}) << "the controller hears once";
}

// A diagnosis is held until the end of the window after its verdict's (so that faults confirmed
// together join it), never longer: the job leaving Running publishes it at once.
TEST_F(DetectorTest, AHeldDiagnosisIsPublishedAfterOneMoreWindow) {
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(1);
  int windows = 0;
  while (eventsWithReason("FaultDetected").empty() && windows < 30) {
    step();
    ++windows;
  }
  ASSERT_EQ(eventsWithReason("FaultDetected").size(), 1u);
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "held for one more window";
  EXPECT_TRUE(enqueued_.empty());
  step();
  ASSERT_TRUE(detector_->diagnosis("team/llm"));
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"});

  build({});
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(1);
  for (int i = 0; i < 30 && eventsWithReason("FaultDetected").size() < 2; ++i) step();
  ASSERT_EQ(eventsWithReason("FaultDetected").size(), 2u);
  ASSERT_FALSE(detector_->diagnosis("team/llm"));
  job_["status"]["phase"] = "Failed";  // pods failed: the controller moves on
  jobs_.store().upsert(job_);
  step();
  EXPECT_TRUE(detector_->diagnosis("team/llm")) << "nothing more can join: published";
}

// Issue #27: a verdict held for its restart is recorded in the cluster before anything else is
// done about it. An operator killed before the restart leaves it there: the next process, with
// an empty report store (the evidence went with its predecessor) and a rank that will never
// report again, publishes it at its first look at the job, and removes it once the restart
// happened.
TEST_F(DetectorTest, AHeldDiagnosisSurvivesTheOperatorAndIsPublishedByTheNextOne) {
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(2);
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(2));
  ASSERT_FALSE(stepUntilEvent("FaultDetected").empty());
  ASSERT_FALSE(detector_->diagnosis("team/llm")) << "held for one more window";
  ASSERT_TRUE(enqueued_.empty());
  Json records = recordedDiagnoses();
  ASSERT_EQ(records.size(), 1u) << records.dump();
  EXPECT_EQ(records[0]["job"], "team/llm");
  EXPECT_EQ(records[0]["uid"], "job-uid");
  EXPECT_EQ(records[0]["attempt"], 0);
  EXPECT_EQ(records[0]["diagnosis"]["class"], "nonCommHang");

  // The operator dies here. Its successor shares only the cluster.
  detector_.reset();
  ingest::ReportStore fresh_store;
  metrics::Registry fresh_registry;
  Detector next(fresh_store, jobs_, pods_, nodes_, remediator_, events_, clock_, {}, fresh_registry,
                DetectorPeers{&diagnoses_, &traffic_});
  ASSERT_TRUE(next.reconcile("team/llm"));
  auto d = next.diagnosis("team/llm");
  ASSERT_TRUE(d) << "the restart the first operator decided is lost";
  EXPECT_EQ(d->fault_class, "nonCommHang");
  EXPECT_EQ(d->attempt, 0);
  EXPECT_EQ(d->nodes, std::vector<std::string>{culprit});
  EXPECT_EQ(d->cordon_nodes, std::vector<std::string>{culprit});
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"}) << "the controller hears of it";
  std::string why;
  EXPECT_EQ(remediator_.takeRestartSlot("team/llm", 0, why), true) << "within the budget";

  // The controller restarted the job: the record has done its work.
  job_["status"]["attempt"] = 1;
  jobs_.store().upsert(job_);
  ASSERT_TRUE(next.reconcile("team/llm"));
  EXPECT_FALSE(next.diagnosis("team/llm"));
  EXPECT_TRUE(recordedDiagnoses().empty()) << recordedDiagnoses().dump();
}

// The failpoint "after-finding-pending" (armed from C4_FAILPOINTS in the binary) is passed in
// the windows where C4D has found a fault it has not confirmed, and in no other: not in healthy
// windows, not once the verdict is confirmed.
TEST_F(DetectorTest, TheUnconfirmedFindingFailpointIsPassedOnlyBeforeTheVerdict) {
  std::vector<int> calls;  // the window of each call
  int window = 0;
  DetectorConfig config;
  config.fault_hook = [&](std::string_view point, const std::string& key) {
    EXPECT_EQ(point, kFailpointAfterFindingPending);
    EXPECT_EQ(key, "team/llm");
    calls.push_back(window);
    return true;
  };
  build({}, config);
  for (; window < 8; ++window) step();
  EXPECT_TRUE(calls.empty()) << "passed in a healthy window";
  synth_->freeze(2);
  for (; window < 30 && eventsWithReason("FaultDetected").empty(); ++window) step();
  ASSERT_FALSE(eventsWithReason("FaultDetected").empty());
  ASSERT_FALSE(calls.empty()) << "never passed while the hang was unconfirmed";
  const int confirmed = window;
  EXPECT_LT(calls.back(), confirmed - 1) << "passed in the window that confirmed the verdict";
  for (int i = 0; i < 5; ++i, ++window) step();
  EXPECT_LT(calls.back(), confirmed) << "passed while the verdict was active";
}

// A rank killed while its pod stays up (an MPI-style worker) over NCCL's socket transport: its
// peers die of its closed connections 150 ms later, and every pod runs on. The node plugins
// delivered every exit to the operator, which was killed before it confirmed the crash. Its
// successor's store is empty and no rank will ever report again, so it would wait for ever on a
// job whose pods all run; the node plugins resend each exited rank's last words (its last
// report, its progress, its exit) when they hear a new operator instance, and the successor
// names the crash from them. The control: without the resend, nothing is ever diagnosed.
TEST_F(DetectorTest, ACrashTheOperatorDiedBeforeConfirmingIsFoundFromTheRanksLastWords) {
  for (const bool resend : {true, false}) {
    SCOPED_TRACE(resend ? "last words resent" : "control: nothing resent");
    build({});
    for (int i = 0; i < 8; ++i) step();
    auto id = [&](int r) {
      return report::RankIdentity{"team",
                                  "llm",
                                  "llm-" + std::to_string(r),
                                  SyntheticJob::nodeName(synth_->nodeOfRank(r)),
                                  r,
                                  4,
                                  0,
                                  100};
    };
    // What each node plugin kept of its rank: the trainer's progress (another process), the last
    // report the plugin sent, and the exit the node plugin saw (rank 2 first).
    const WallTime died = clock_.wallNow() + std::chrono::milliseconds{300};
    std::vector<report::NodeReport> last_words;
    for (int r = 0; r < 4; ++r) {
      report::NodeReport words;
      words.node = id(r).node;
      words.replay = true;
      const auto& reports = synth_->snapshot().ranks[static_cast<std::size_t>(r)].reports;
      words.reports.push_back(c4d::testing::rankReportOf(reports.back(), id(r), report_seq_[r]));
      report::ProgressNotice training;
      training.id = id(r);
      training.id.pid = 200;
      training.time_unix_ns = toUnixNanos(clock_.wallNow() - std::chrono::seconds{5});
      training.step = 40;
      words.notices.emplace_back(training);
      report::AnomalyNotice exited;
      exited.id = id(r);
      exited.kind = report::AnomalyKind::kProcessExited;
      exited.time_unix_ns = toUnixNanos(
          died + (r == 2 ? std::chrono::milliseconds{0} : std::chrono::milliseconds{150}));
      exited.detail = "process exited (seen by the node plugin)";
      words.notices.emplace_back(exited);
      last_words.push_back(words);
    }
    // The operator heard all of it and died within the same window.
    for (const auto& words : last_words) {
      report::NodeReport delivered = words;
      delivered.replay = false;
      delivered.reports.clear();  // sent in the window before
      delivered.seq = ++seq_;
      delivered.time_unix_ns = toUnixNanos(clock_.wallNow());
      store_.apply(delivered, {{"team/llm", facts()}}, clock_.wallNow(), 0);
    }
    detector_.reset();

    // Its successor, after the lease expired.
    ingest::ReportStore fresh_store;
    metrics::Registry fresh_registry;
    Detector next(fresh_store, jobs_, pods_, nodes_, remediator_, events_, clock_, {},
                  fresh_registry, DetectorPeers{&diagnoses_, &traffic_});
    WallTime wall = clock_.wallNow() + std::chrono::seconds{15};
    std::optional<DiagnosedFault> d;
    for (int window = 0; window < 30 && !d; ++window) {
      clock_.advance(window_);
      wall += window_;
      clock_.setWall(wall);
      for (int r = 0; r < 4; ++r) {
        report::NodeReport heartbeat;  // every node plugin sends its health every interval
        heartbeat.node = id(r).node;
        heartbeat.seq = ++seq_;
        heartbeat.time_unix_ns = toUnixNanos(wall);
        fresh_store.apply(heartbeat, {{"team/llm", facts()}}, wall, 0);
        if (resend && window == 0) {  // the first answer named a new instance: the resend
          report::NodeReport words = last_words[static_cast<std::size_t>(r)];
          words.seq = ++seq_;
          words.time_unix_ns = toUnixNanos(wall);
          fresh_store.apply(words, {{"team/llm", facts()}}, wall, 0);
        }
      }
      ASSERT_TRUE(next.reconcile("team/llm"));
      d = next.diagnosis("team/llm");
    }
    if (!resend) {
      EXPECT_FALSE(d) << "the control found the crash without the resend";
      continue;
    }
    ASSERT_TRUE(d) << "the crash died with the operator";
    EXPECT_EQ(d->fault_class, "crash");
    EXPECT_EQ(d->key, "crash/rank/2");
    EXPECT_TRUE(d->cordon_nodes.empty()) << "a killed process is no node fault";
  }
}

// What a new process finds recorded is outside input and may be stale: a record of an attempt
// that has ended, of a job created again under the name, or of a shape this detector does not
// write (wrong types, a cordon of a node the diagnosis does not name) is removed and restarts
// nothing; the process goes on.
TEST_F(DetectorTest, AStaleOrMalformedRecordedDiagnosisRestartsNothing) {
  const Json good = {{"attempt", 0},
                     {"class", "nonCommHang"},
                     {"key", "nonCommHang/node/node-1"},
                     {"keys", {"nonCommHang/node/node-1"}},
                     {"summary", "s"},
                     {"nodes", {"node-1"}},
                     {"cordonNodes", {"node-1"}},
                     {"rank", 1},
                     {"detectionSeconds", 2.5}};
  auto recordOf = [&](const Json& diagnosis, const std::string& uid, int attempt) {
    return Json{{"job", "team/llm"},
                {"uid", uid},
                {"attempt", attempt},
                {"recordedUnixNs", toUnixNanos(clock_.wallNow())},
                {"diagnosis", diagnosis}};
  };
  Json forged_cordon = good;
  forged_cordon["cordonNodes"] = {"node-1", "node-9"};
  Json wrong_types = good;
  wrong_types["nodes"] = "node-1";
  Json unknown_class = good;
  unknown_class["class"] = "meteorStrike";
  const std::vector<std::pair<std::string, Json>> cases = {
      {"an ended attempt", recordOf(good, "job-uid", 0)},
      {"another job under the name", recordOf(good, "other-uid", 1)},
      {"a forged cordon", recordOf(forged_cordon, "job-uid", 1)},
      {"wrong types", recordOf(wrong_types, "job-uid", 1)},
      {"an unknown class", recordOf(unknown_class, "job-uid", 1)},
      {"a record of the wrong shape", Json{{"job", "team/llm"}, {"attempt", "one"}}},
  };
  for (const auto& [what, record] : cases) {
    SCOPED_TRACE(what);
    build({});
    job_["status"]["attempt"] = 1;
    jobs_.store().upsert(job_);
    writeRecordedDiagnoses(Json::array({record}));
    ASSERT_TRUE(detector_->reconcile("team/llm"));
    EXPECT_FALSE(detector_->diagnosis("team/llm"));
    EXPECT_TRUE(enqueued_.empty());
    if (record.contains("diagnosis")) {
      EXPECT_TRUE(recordedDiagnoses().empty()) << "not removed: " << recordedDiagnoses().dump();
    }
  }
  // The control: the same good record for the job's current attempt restarts it.
  build({});
  job_["status"]["attempt"] = 1;
  jobs_.store().upsert(job_);
  Json current = good;
  current["attempt"] = 1;
  writeRecordedDiagnoses(Json::array({recordOf(current, "job-uid", 1)}));
  ASSERT_TRUE(detector_->reconcile("team/llm"));
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->nodes, std::vector<std::string>{"node-1"});
  EXPECT_EQ(d->detection_seconds, 2.5);
}

// A link that keeps going slow and recovering gives a verdict each time. Its Events are budgeted
// (three an hour, then one per 5 minutes saying how many were held back), so they cannot spend
// the Event spam filter's budget for the job (25, one more per 5 minutes): the Event of a
// frozen rank afterwards is written.
TEST_F(DetectorTest, AFlappingLinkCannotCrowdOutTheEventsOfALaterFault) {
  DetectorConfig config;
  config.replan_grace = std::chrono::seconds{10};  // healthy longer than this: never escalated
  build({}, config);
  int replans = 0;
  traffic_.setReplan(
      [&](const std::string&, const std::string&, const std::string&) { ++replans; });
  for (int i = 0; i < 8; ++i) step();
  int flaps = 0;
  for (int i = 0; i < 40; ++i) {
    synth_->slowLink(1, 2, 0.1);
    for (int w = 0; w < 15 && replans == 0; ++w) step();
    if (replans > 0) ++flaps;
    replans = 0;
    synth_->healAll();
    for (int w = 0; w < 15; ++w) step();
  }
  ASSERT_GE(flaps, 30) << "the link flapped";
  const auto link = eventsWithReason("FaultDetected");
  ASSERT_FALSE(link.empty());
  EXPECT_LE(link.size(), 3u + 3u) << "three, then one per 5 minutes of the flapping";
  bool summarised = false;
  for (const auto& e : link) {
    summarised =
        summarised || e["message"].get<std::string>().find("held back") != std::string::npos;
  }
  EXPECT_TRUE(summarised) << "a later Event says how many were held back";

  synth_->freeze(0);
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(0));
  for (int i = 0; i < 30 && !detector_->diagnosis("team/llm"); ++i) step();
  ASSERT_TRUE(detector_->diagnosis("team/llm"));
  bool frozen_reported = false;
  for (const auto& e : eventsWithReason("FaultDetected")) {
    const auto m = e["message"].get<std::string>();
    frozen_reported = frozen_reported || m.rfind("nonCommHang", 0) == 0;
  }
  EXPECT_TRUE(frozen_reported) << "the frozen rank's Event was dropped";
}

// A job's ReportSampleCache converts each stored report once: the newest report of one window is
// the older of the next, and the next window's snapshot shares its converted connections. A
// report is known by the stored object, not by its contents, and what a window does not read is
// let go.
TEST_F(DetectorTest, AReportReadInTwoWindowsIsConvertedOnce) {
  auto stored = [&](std::uint64_t seq, std::uint64_t bytes) {
    auto s = std::make_shared<ingest::StoredReport>();
    s->header.seq = seq;
    s->header.received = clock_.wallNow();
    report::ConnectionStats c;
    c.id = 7;
    c.direction = report::Direction::kSend;
    c.peer_rank = 2;
    c.bytes = bytes;
    c.subflows = {{0, 40000, 0, 1.0, bytes / 2}, {1, 40001, 1, 1.0, bytes / 2}};
    s->connections.push_back(c);
    return ingest::StoredReportPtr(std::move(s));
  };
  auto record = [&](std::vector<ingest::StoredReportPtr> reports) {
    ingest::RecentReports r;
    r.ns = "team";
    r.name = "llm";
    r.facts = facts();
    r.ranks[1].reports = std::move(reports);
    return r;
  };
  const auto a = stored(1, 1000), b = stored(2, 2000), c = stored(3, 3000);
  const auto b_again = stored(2, 2000);  // the same contents in another object
  ReportSampleCache cache;
  const DetectorConfig config;
  const c4d::JobSnapshot first =
      buildSnapshot(job_, record({a, b}), {}, config, clock_.wallNow(), &cache);
  EXPECT_EQ(cache.converted(), 2u);
  const c4d::JobSnapshot second =
      buildSnapshot(job_, record({b, c}), {}, config, clock_.wallNow(), &cache);
  EXPECT_EQ(cache.converted(), 1u) << "only the new report";
  ASSERT_EQ(second.ranks[1].reports.size(), 2u);
  EXPECT_EQ(second.ranks[1].reports[0].connections.shared(),
            first.ranks[1].reports[1].connections.shared());
  const c4d::ConnSample& conn = second.ranks[1].reports[1].connections[0];
  EXPECT_EQ(conn.bytes, 3000u);
  EXPECT_EQ(conn.wire_bytes, 3000u);
  EXPECT_EQ(conn.peer_rank, 2);
  const c4d::JobSnapshot third =
      buildSnapshot(job_, record({b_again, c}), {}, config, clock_.wallNow(), &cache);
  EXPECT_EQ(cache.converted(), 1u) << "another stored object is another report";
  EXPECT_NE(third.ranks[1].reports[0].connections.shared(),
            first.ranks[1].reports[1].connections.shared());
  EXPECT_EQ(third.ranks[1].reports[1].connections.shared(),
            second.ranks[1].reports[1].connections.shared());
  // A window that reads nothing of rank 1 lets its reports go; the next one converts again.
  (void)buildSnapshot(job_, record({}), {}, config, clock_.wallNow(), &cache);
  (void)buildSnapshot(job_, record({c}), {}, config, clock_.wallNow(), &cache);
  EXPECT_EQ(cache.converted(), 1u);
  // Without a cache every report is converted, into the same samples.
  const c4d::JobSnapshot uncached =
      buildSnapshot(job_, record({b, c}), {}, config, clock_.wallNow());
  EXPECT_NE(uncached.ranks[1].reports[0].connections.shared(),
            second.ranks[1].reports[0].connections.shared());
  EXPECT_EQ(uncached.ranks[1].reports[1].connections[0].bytes, 3000u);
}

// A PodFactsCache reads an unchanged pod (the same resourceVersion) by its version alone: the
// facts are read again when the version changes, every time for a pod without one, and a pod not
// read since the last sweep is let go.
TEST_F(DetectorTest, APodsFactsAreReadAgainWhenItsResourceVersionChanges) {
  Json pod = *pods_.store().get("team/llm-1");
  pod["metadata"]["resourceVersion"] = "41";
  pod["status"]["phase"] = "Running";
  PodFactsCache cache;
  EXPECT_EQ(cache.of("team/llm-1", pod).state, c4d::PodState::kRunning);
  // Not what the API server does (every change of a pod changes its version): shows the key.
  pod["status"]["phase"] = "Failed";
  EXPECT_EQ(cache.of("team/llm-1", pod).state, c4d::PodState::kRunning);
  pod["metadata"]["resourceVersion"] = "42";
  EXPECT_EQ(cache.of("team/llm-1", pod).state, c4d::PodState::kFailed);
  EXPECT_EQ(cache.of("team/llm-1", pod).node, podFactsOf(pod).node);

  Json unversioned = pod;
  unversioned["metadata"].erase("resourceVersion");
  EXPECT_EQ(cache.of("team/llm-2", unversioned).state, c4d::PodState::kFailed);
  unversioned["status"]["phase"] = "Succeeded";
  EXPECT_EQ(cache.of("team/llm-2", unversioned).state, c4d::PodState::kSucceeded);

  cache.sweep();
  EXPECT_EQ(cache.size(), 2u);
  (void)cache.of("team/llm-1", pod);
  cache.sweep();
  EXPECT_EQ(cache.size(), 1u) << "llm-2 was not read since the last sweep";
}

TEST_F(DetectorTest, TheSnapshotCarriesTheReportsCommunicators) {
  ingest::RecentReports record;
  record.ns = "team";
  record.name = "llm";
  record.facts = facts();
  auto stored = std::make_shared<ingest::StoredReport>();
  stored->header.seq = 1;
  stored->header.received = clock_.wallNow();
  stored->header.communicators = {{0x5eed, 4, 1, 12, 11, 0, 0, 12, 2'500'000}};
  record.ranks[1].reports.push_back(stored);
  const c4d::JobSnapshot snap = buildSnapshot(job_, record, {}, DetectorConfig{}, clock_.wallNow());
  ASSERT_EQ(snap.ranks.size(), 4u);
  ASSERT_EQ(snap.ranks[1].reports.size(), 1u);
  EXPECT_EQ(snap.ranks[1].reports[0].communicators, stored->header.communicators);
  EXPECT_TRUE(snap.ranks[0].reports.empty());
}

// What the snapshot takes of pods and Nodes (read in place in the caches): the current attempt's
// pod, its phase (a pod being deleted is gone) and node; another attempt's pod is not the rank's;
// a node's repeat-offender score counts its fault history within the window.
TEST_F(DetectorTest, TheSnapshotReadsPodFactsAndNodeHistoryFromTheCaches) {
  Json deleting = *pods_.store().get("team/llm-1");
  deleting["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z";
  pods_.store().upsert(deleting);
  Json old_attempt = *pods_.store().get("team/llm-2");
  old_attempt["metadata"]["labels"]["c4.dev/restart-attempt"] = "1";
  pods_.store().upsert(old_attempt);
  const std::string node0 = SyntheticJob::nodeName(synth_->nodeOfRank(0));
  Json node = *nodes_.store().get(node0);
  node["metadata"]["annotations"][kFaultHistoryAnnotation] =
      Json::array({{{"time", formatRfc3339(clock_.wallNow() - std::chrono::hours{1})},
                    {"class", "crash"},
                    {"job", "team/a"}},
                   {{"time", formatRfc3339(clock_.wallNow() - std::chrono::hours{48})},
                    {"class", "crash"},
                    {"job", "team/b"}}})
          .dump();
  nodes_.store().upsert(node);

  SnapshotSources sources;
  sources.pod = [this](const std::string& key) {
    std::optional<PodFacts> facts;
    pods_.store().read(key, [&](const Json& pod) { facts = podFactsOf(pod); });
    return facts;
  };
  sources.node_history = [this](const std::string& name) {
    std::optional<std::vector<NodeFaultRecord>> history;
    nodes_.store().read(name, [&](const Json& n) { history = faultHistoryOf(n); });
    return history;
  };
  ingest::RecentReports record;
  record.ns = "team";
  record.name = "llm";
  record.facts = facts();
  const c4d::JobSnapshot snap =
      buildSnapshot(job_, record, sources, DetectorConfig{}, clock_.wallNow());
  ASSERT_EQ(snap.ranks.size(), 4u);
  EXPECT_EQ(snap.ranks[0].pod_state, c4d::PodState::kRunning);
  EXPECT_EQ(snap.ranks[1].pod_state, c4d::PodState::kGone);
  EXPECT_EQ(snap.ranks[2].pod_state, c4d::PodState::kGone);
  EXPECT_EQ(snap.ranks[2].pod, "llm-2");
  ASSERT_GE(snap.ranks[0].node, 0);
  const c4d::NodeSnapshot& n0 = snap.nodes[static_cast<std::size_t>(snap.ranks[0].node)];
  EXPECT_EQ(n0.name, node0);
  EXPECT_EQ(n0.repeat_offender_score, 1.0);
  EXPECT_EQ(snap.ranks[2].node, -1) << "another attempt's pod names no node";
  ASSERT_GE(snap.ranks[3].node, 0);
  EXPECT_EQ(snap.nodes[static_cast<std::size_t>(snap.ranks[3].node)].repeat_offender_score, 0.0);
}

// A crash cascade (the NCCL abort: rank 1 dies, each survivor then reports a peer closed and
// exits) on nodes whose clocks disagree by seconds. Rank 0 saw rank 1 close 2.5 s before rank 3
// saw rank 0 close, but rank 0's node runs 7 s ahead and rank 3's 5 s behind: by the senders'
// stamps rank 0 was accused before it saw anything, and would be named a second culprit. The
// store puts every stamp on the operator's clock first, so rank 0 is the victim it is.
TEST_F(DetectorTest, ACrashCascadeIsOrderedOnTheOperatorsClockNotTheNodes) {
  skew_[synth_->nodeOfRank(3)] = std::chrono::seconds{-5};
  skew_[synth_->nodeOfRank(0)] = std::chrono::seconds{7};
  for (int i = 0; i < 8; ++i) step();
  synth_->crash(1, 3, /*cascade=*/true);
  for (int i = 0; i < 15; ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "no diagnosis within 15 windows";
  EXPECT_EQ(d->fault_class, "crash");
  EXPECT_EQ(d->key, "crash/rank/1");
  const auto detected = eventsWithReason("FaultDetected");
  ASSERT_EQ(detected.size(), 1u) << "one culprit, one verdict: "
                                 << detected.back()["message"].get<std::string>();
}

// The node's fault history is read, changed and written back: an entry another writer added in
// the cluster after the cache's copy was taken (another job's verdict, an earlier verdict of this
// tick) is kept, not overwritten from the stale copy.
TEST_F(DetectorTest, AFaultHistoryEntryWrittenSinceTheCachedCopyIsKept) {
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(2));
  nodes_.store().upsert(*client_.peek(resources::nodes(), "", culprit));  // the cache: as stored
  Json stored = *client_.peek(resources::nodes(), "", culprit);
  ASSERT_TRUE(client_.patch(
      resources::nodes(), "", culprit, PatchType::kMerge,
      {{"metadata",
        {{"annotations",
          {{kFaultHistoryAnnotation,
            appendFaultHistory(stored,
                               {clock_.wallNow() - std::chrono::hours{1}, "crash", "team/other"},
                               10)}}}}}},
      PatchOptions{}));
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(2);
  for (int i = 0; i < 30 && !detector_->diagnosis("team/llm"); ++i) step();
  ASSERT_TRUE(detector_->diagnosis("team/llm"));
  auto history = faultHistoryOf(*client_.peek(resources::nodes(), "", culprit));
  ASSERT_EQ(history.size(), 2u) << "an entry was lost";
  EXPECT_EQ(history[0].job, "team/other");
  EXPECT_EQ(history[1].job, "team/llm");
  EXPECT_EQ(history[1].fault_class, "nonCommHang");
}

// The job's reconcile is one window and asks to be queued again when the next is due; a key
// queued before then (an informer event) adds no window: the analyser counts them.
TEST_F(DetectorTest, AReconcileBeforeTheWindowIsDueAddsNoWindow) {
  step();
  step();
  ASSERT_EQ(windows(), 2);
  clock_.advance(std::chrono::milliseconds{400});
  auto early = detector_->reconcile("team/llm");
  ASSERT_TRUE(early);
  ASSERT_TRUE(early->requeue_after);
  EXPECT_EQ(*early->requeue_after, std::chrono::milliseconds{600});
  EXPECT_EQ(windows(), 2);
  clock_.advance(std::chrono::milliseconds{600});
  auto due = detector_->reconcile("team/llm");
  ASSERT_TRUE(due);
  EXPECT_EQ(windows(), 3);
  EXPECT_EQ(due->requeue_after, std::optional<Duration>(window_));
  // A deleted job is forgotten: no requeue.
  jobs_.store().erase("team/llm");
  auto gone = detector_->reconcile("team/llm");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->requeue_after);
}

// Started, the detector queues the jobs in the cache and its worker analyses each one every
// window (requeue-after on the injected clock) until stop().
TEST_F(DetectorTest, TheWorkerAnalysesEveryJobOnceAWindow) {
  step();
  ASSERT_EQ(windows(), 1);
  clock_.advance(window_);
  detector_->start();
  ASSERT_TRUE(eventually([&] { return windows() == 2; }));
  ASSERT_TRUE(clock_.awaitWaiters(1));  // parked until the next window
  EXPECT_EQ(windows(), 2);
  clock_.advance(window_);
  ASSERT_TRUE(eventually([&] { return windows() == 3; }));
  detector_->queue().add("team/llm");  // an event: no extra window
  ASSERT_TRUE(eventually([&] { return detector_->queue().len() == 0; }));
  ASSERT_TRUE(clock_.awaitWaiters(1));
  EXPECT_EQ(windows(), 3);
  detector_->stop();
  clock_.advance(window_ * 3);
  EXPECT_EQ(windows(), 3);
}

TEST_F(DetectorTest, DryRunReportsButDiagnosesNothing) {
  build({{"dryRun", true}});
  for (int i = 0; i < 8; ++i) step();
  synth_->freeze(1);
  for (int i = 0; i < 25; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  auto detected = eventsWithReason("FaultDetected");
  ASSERT_EQ(detected.size(), 1u);
  EXPECT_NE(detected[0]["message"].get<std::string>().find("dry run"), std::string::npos);
  EXPECT_TRUE(enqueued_.empty());
  // Reported on the node too, but its history is not written: a dry run changes no Node.
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(1));
  EXPECT_EQ(eventsWithReason("FaultSuspected").size(), 1u);
  EXPECT_TRUE(faultHistoryOf(*client_.peek(resources::nodes(), "", culprit)).empty());
}

// A straggler restarts the job only when the slowdown costs more than a restart: over a
// one-hour horizon a 3x straggler does; over a 10-second horizon it does not (an Event only).
TEST_F(DetectorTest, AStragglerRestartsTheJobOnlyWhenTheSlowdownCostsMoreThanARestart) {
  auto run = [&](DetectorConfig config) {
    build({}, config);
    job_["status"]["lastCheckpoint"] = {{"step", 10}, {"time", formatRfc3339(clock_.wallNow())}};
    jobs_.store().upsert(job_);
    for (int i = 0; i < 8; ++i) step();
    synth_->straggler(1, 3.0);
    for (int i = 0; i < 20; ++i) step();
  };
  DetectorConfig long_horizon;
  long_horizon.straggler_horizon = std::chrono::hours{1};
  run(long_horizon);
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "a 3x straggler over an hour costs more than a restart";
  EXPECT_EQ(d->fault_class, "nonCommSlow");
  EXPECT_EQ(d->nodes, std::vector<std::string>{SyntheticJob::nodeName(synth_->nodeOfRank(1))});
  EXPECT_EQ(d->cordon_nodes, d->nodes);

  DetectorConfig mild;  // the same straggler is below a 3x slowdown floor: an Event only
  mild.straggler_min_slowdown = 3.0;
  run(mild);
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "below the slowdown floor nothing is restarted";

  DetectorConfig short_horizon;
  short_horizon.straggler_horizon = std::chrono::seconds{10};
  run(short_horizon);
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "10 s of slowdown cost less than a restart";
  EXPECT_TRUE(enqueued_.empty());
  // Still reported, as an Event only (identical Events of the two runs aggregate into one).
  bool event_only = false;
  for (const auto& e : eventsWithReason("FaultDetected")) {
    const std::string m = e["message"].get<std::string>();
    event_only |= m.find("nonCommSlow") != std::string::npos &&
                  m.find("action eventOnly") != std::string::npos;
  }
  EXPECT_TRUE(event_only) << "the straggler is reported as an Event";
  // An Event-only verdict writes no fault history (the long-horizon run, which acted, did).
  EXPECT_TRUE(faultHistoryOf(*client_.peek(resources::nodes(), "",
                                           SyntheticJob::nodeName(synth_->nodeOfRank(1))))
                  .empty());
}

// A slow link is first handed to C4P (a re-plan around it, no restart). Still slow after
// replan_grace, it lies where no path choice helps, at an end of the link: without node-level
// evidence the job restarts away from both ends, neither cordoned.
TEST_F(DetectorTest, ASlowLinkStillSlowAfterTheReplanGraceRestartsAwayFromBothEnds) {
  DetectorConfig config;
  config.replan_grace = std::chrono::seconds{10};
  build({}, config);
  std::vector<std::string> replans;
  traffic_.setReplan([&](const std::string& job, const std::string& a, const std::string& b) {
    replans.push_back(job + " " + a + "<->" + b);
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->slowLink(1, 2, 0.1);
  int windows = 0;
  while (replans.empty() && windows < 20) {
    step();
    ++windows;
  }
  ASSERT_EQ(replans, std::vector<std::string>{"team/llm node-1<->node-2"});
  for (int i = 0; i < 8; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "within the grace C4P gets to re-plan";
  for (int i = 0; i < 4; ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "still slow after the grace";
  EXPECT_EQ(d->fault_class, "commSlow");
  EXPECT_EQ(d->nodes, (std::vector<std::string>{"node-1", "node-2"}));
  EXPECT_TRUE(d->cordon_nodes.empty());
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"});
  bool escalated = false;
  for (const auto& e : eventsWithReason("FaultDetected")) {
    const std::string m = e["message"].get<std::string>();
    escalated |= m.find("after C4P was asked to re-plan") != std::string::npos &&
                 m.find("action restartOnly") != std::string::npos;
  }
  EXPECT_TRUE(escalated);
  EXPECT_EQ(replans.size(), 1u);
}

// The end with node-level evidence (here a repeat offender: a fault in its history) is the NIC:
// cordoned and avoided.
TEST_F(DetectorTest, APersistentSlowLinkCordonsTheEndWithNodeEvidence) {
  DetectorConfig config;
  config.replan_grace = std::chrono::seconds{10};
  build({}, config);
  Json node = *nodes_.store().get("node-2");
  node["metadata"]["annotations"]["c4.dev/fault-history"] =
      appendFaultHistory(node, {clock_.wallNow(), "commSlow", "team/other"}, 10);
  nodes_.store().upsert(node);
  for (int i = 0; i < 8; ++i) step();
  synth_->slowLink(1, 2, 0.1);
  for (int i = 0; i < 30 && !detector_->diagnosis("team/llm"); ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->fault_class, "commSlow");
  EXPECT_EQ(d->nodes, std::vector<std::string>{"node-2"});
  EXPECT_EQ(d->cordon_nodes, d->nodes);
  bool escalated = false;
  for (const auto& e : eventsWithReason("FaultDetected")) {
    const std::string m = e["message"].get<std::string>();
    escalated |= m.find("after C4P was asked to re-plan") != std::string::npos &&
                 m.find("node node-2 has node-level evidence: its NIC") != std::string::npos &&
                 m.find("action cordonAndRestart") != std::string::npos;
  }
  EXPECT_TRUE(escalated);
}

// A link the re-plan (or anything else) made normal again within the grace is not escalated.
// Found by e2e.c4p_fabric (2026-12-07): a gray failure made a connection slow while C4P held its
// link failed (explained), the link healed, C4P's hold expired, and the connection was slow again
// for a while on the path it had returned to. The verdict had cleared in between, so the clock
// kept the explained verdict's time and the job was restarted as soon as the slowness came back.
// The clock starts when the explanation ends, also when it ends while the verdict is cleared.
TEST_F(DetectorTest, ASlowLinkBackAfterC4PsExplanationEndedStartsANewClock) {
  int replans = 0;
  bool explained = true;
  slowLinkUntilReplanned(replans, &explained);
  ASSERT_EQ(replans, 1);
  for (int i = 0; i < 4; ++i) step();  // slow, explained
  synth_->slowLink(1, 2, 1.0);         // the link healed: the verdict clears
  for (int i = 0; i < 4; ++i) step();
  explained = false;  // C4P's hold expired
  for (int i = 0; i < 2; ++i) step();
  synth_->slowLink(1, 2, 0.1);  // slow again on the path the weights returned to
  int windows = 0;
  while (!detector_->diagnosis("team/llm") && windows < 40) {
    step();
    ++windows;
  }
  ASSERT_TRUE(detector_->diagnosis("team/llm")) << "a slow link that stays slow is escalated";
  EXPECT_GE(windows, 10) << "escalated on the clock of a verdict C4P explained";
  EXPECT_LE(windows, 16) << "the grace (10 s) from the unexplained verdict's return";
}

// A link that stays slow but whose verdict clears now and then (its rate hovering around the
// threshold, as profiler telemetry's coarser transfer times make it) is escalated after the
// re-plan grace counted from its first verdict: a brief clearing does not restart the clock.
TEST_F(DetectorTest, ASlowLinkWhoseVerdictFlickersIsEscalatedOnTheFirstVerdictsClock) {
  int replans = 0;
  slowLinkUntilReplanned(replans);
  ASSERT_EQ(replans, 1);
  int since_verdict = 0;
  for (int i = 0; i < 2; ++i, ++since_verdict) step();
  synth_->slowLink(1, 2, 1.0);  // looks healthy long enough for the verdict to clear
  for (int i = 0; i < 6; ++i, ++since_verdict) step();
  synth_->slowLink(1, 2, 0.1);
  while (!detector_->diagnosis("team/llm") && since_verdict < 40) {
    step();
    ++since_verdict;
  }
  ASSERT_TRUE(detector_->diagnosis("team/llm"));
  EXPECT_GE(replans, 2) << "the verdict cleared and came back";
  EXPECT_LE(since_verdict, 15) << "escalated on the first verdict's clock (grace 10 s)";
}

TEST_F(DetectorTest, ASlowLinkThatRecoversWithinTheReplanGraceIsNotEscalated) {
  int replans = 0;
  slowLinkUntilReplanned(replans);
  ASSERT_EQ(replans, 1);
  synth_->slowLink(1, 2, 1.0);
  for (int i = 0; i < 30; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  EXPECT_TRUE(enqueued_.empty());
}

// C4P answers first for a hang on a link it holds failed or suspects: the verdict is an Event
// that says it was deferred, and a hang that clears within the grace costs no restart.
TEST_F(DetectorTest, AHangOnALinkC4PExplainsIsLeftToC4PAndClearsWithoutARestart) {
  DetectorConfig config;
  config.traffic_plan_grace = std::chrono::seconds{15};
  build({}, config);
  std::vector<std::string> asked;
  traffic_.setTrafficExplanation([&](const std::string& job, const std::string& a,
                                     const std::string& b) -> std::optional<std::string> {
    asked.push_back(job + " " + a + "<->" + b);
    if (a == "node-1" && b == "node-2") return "C4P holds link plane0/leaf-0/uplink0 Up failed";
    return std::nullopt;
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->blackhole(1, 2);
  auto detected = stepUntilEvent("FaultDetected");
  ASSERT_EQ(detected.size(), 1u);
  const std::string m = detected[0]["message"].get<std::string>();
  EXPECT_NE(m.find("commHang"), std::string::npos) << m;
  EXPECT_NE(m.find("deferred up to 15 s: C4P holds link plane0/leaf-0/uplink0 Up failed"),
            std::string::npos)
      << m;
  EXPECT_EQ(asked.front(), "team/llm node-1<->node-2");
  for (int i = 0; i < 5; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "left to C4P within the grace";
  synth_->healAll();
  for (int i = 0; i < 30; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  EXPECT_TRUE(enqueued_.empty());
  auto cleared = eventsWithReason("FaultCleared");
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0]["type"], "Normal");
  EXPECT_NE(cleared[0]["message"].get<std::string>().find("after it was left to C4P"),
            std::string::npos);
  const std::string metrics = registry_.expose();
  EXPECT_NE(metrics.find("c4_c4d_deferred_total{outcome=\"deferred\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("c4_c4d_deferred_total{outcome=\"cleared\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("c4_c4d_deferred_total{outcome=\"acted\"} 0"), std::string::npos);
}

// A hang that outlasts the grace is acted on as the verdict says, with the deferral in its
// evidence; until then nothing happens.
TEST_F(DetectorTest, AHangThatOutlastsTheC4PGraceRestartsTheJob) {
  DetectorConfig config;
  config.traffic_plan_grace = std::chrono::seconds{10};
  build({}, config);
  traffic_.setTrafficExplanation([](const std::string&, const std::string&, const std::string&) {
    return std::optional<std::string>("C4P suspects link plane0/leaf-1/uplink1 Down");
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->blackhole(1, 2);
  ASSERT_EQ(stepUntilEvent("FaultDetected").size(), 1u);
  const WallTime deferred_at = clock_.wallNow();
  int windows = 0;
  while (!detector_->diagnosis("team/llm") && windows < 40) {
    step();
    ++windows;
  }
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_GE(clock_.wallNow() - deferred_at, std::chrono::seconds{10});
  EXPECT_LE(clock_.wallNow() - deferred_at, std::chrono::seconds{12});
  EXPECT_EQ(d->fault_class, "commHang");
  EXPECT_EQ(d->nodes, (std::vector<std::string>{"node-1", "node-2"}));
  EXPECT_TRUE(d->cordon_nodes.empty());
  EXPECT_NE(d->summary.find("after it was left to C4P (C4P suspects link"), std::string::npos)
      << d->summary;
  EXPECT_EQ(enqueued_, std::vector<std::string>{"team/llm"});
  EXPECT_NE(registry_.expose().find("c4_c4d_deferred_total{outcome=\"acted\"} 1"),
            std::string::npos);
}

// When C4P stops explaining the hang (it lifted the link state) before the grace, the detector
// acts at once; a hang on a pair C4P does not explain is acted on as before (next test).
TEST_F(DetectorTest, AHangC4PNoLongerExplainsIsActedOnAtOnce) {
  build({});
  bool explained = true;
  traffic_.setTrafficExplanation([&](const std::string&, const std::string& a,
                                     const std::string&) -> std::optional<std::string> {
    if (explained && a == "node-1") return "C4P holds link plane0/leaf-0/uplink0 Up failed";
    return std::nullopt;
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->blackhole(1, 2);
  ASSERT_EQ(stepUntilEvent("FaultDetected").size(), 1u);
  step();
  EXPECT_FALSE(detector_->diagnosis("team/llm"));
  explained = false;
  step();
  step();  // the diagnosis is held one window for faults confirmed with it
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_NE(d->summary.find("C4P no longer explains it"), std::string::npos) << d->summary;
}

TEST_F(DetectorTest, AHangOnAPairC4PDoesNotExplainIsNotDeferred) {
  traffic_.setTrafficExplanation([](const std::string&, const std::string& a, const std::string&) {
    return a == "node-0" ? std::optional<std::string>("elsewhere") : std::nullopt;
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->blackhole(1, 2);
  for (int i = 0; i < 20 && !detector_->diagnosis("team/llm"); ++i) step();
  ASSERT_TRUE(detector_->diagnosis("team/llm"));
  for (const auto& e : eventsWithReason("FaultDetected")) {
    EXPECT_EQ(e["message"].get<std::string>().find("deferred"), std::string::npos);
  }
}

// Slowness on a link C4P holds failed is what the remaining links allow: not escalated to a NIC
// while C4P explains it; escalated after the replan grace once the explanation ends.
TEST_F(DetectorTest, ASlowLinkC4PExplainsIsNotEscalatedWhileTheExplanationHolds) {
  int replans = 0;
  bool explained = true;
  slowLinkUntilReplanned(replans, &explained);
  ASSERT_EQ(replans, 1) << "a slow link still goes to C4P";
  for (int i = 0; i < 30; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "explained by C4P: not a NIC";
  explained = false;
  for (int i = 0; i < 8; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "the replan grace starts again";
  for (int i = 0; i < 6; ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "still slow after the grace without C4P's explanation";
  EXPECT_EQ(d->fault_class, "commSlow");
}

// A node named only because all the slow links touch it is held while C4P explains every one of
// those links (a failed uplink on their paths: the remaining links carry them slower), and acted
// on when the explanation ends. One unexplained link is enough to act at once.
TEST_F(DetectorTest, ASlowNodeWhoseLinksC4PExplainsIsHeldWhileTheExplanationLasts) {
  build({});
  bool explained = true;
  std::set<std::string> asked;
  traffic_.setTrafficExplanation([&](const std::string&, const std::string& a,
                                     const std::string& b) -> std::optional<std::string> {
    asked.insert(a + "<->" + b);
    if (!explained || a != "node-2") return std::nullopt;
    return "C4P holds link plane0/leaf-1/uplink0 Up failed";
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->slowNic(2, 0.1);
  auto detected = stepUntilEvent("FaultDetected");
  ASSERT_EQ(detected.size(), 1u);
  const std::string m = detected[0]["message"].get<std::string>();
  EXPECT_NE(m.find("commSlow of node node-2"), std::string::npos) << m;
  EXPECT_NE(m.find("action cordonAndRestart held while C4P explains it: C4P holds link"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("(and the paths to its 1 other peer(s))"), std::string::npos) << m;
  EXPECT_EQ(asked, (std::set<std::string>{"node-2<->node-1", "node-2<->node-3"}));
  for (int i = 0; i < 40; ++i) step();
  EXPECT_FALSE(detector_->diagnosis("team/llm")) << "no grace for slowness C4P explains";
  explained = false;
  step();
  step();  // the diagnosis is held one window for faults confirmed with it
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->fault_class, "commSlow");
  EXPECT_EQ(d->nodes, std::vector<std::string>{"node-2"});
  EXPECT_EQ(d->cordon_nodes, d->nodes);
  EXPECT_NE(d->summary.find("C4P no longer explains it"), std::string::npos) << d->summary;
}

TEST_F(DetectorTest, ASlowNodeIsActedOnWhenC4PExplainsOnlySomeOfItsLinks) {
  build({});
  traffic_.setTrafficExplanation([](const std::string&, const std::string& a,
                                    const std::string& b) -> std::optional<std::string> {
    if (a == "node-2" && b == "node-1") return "C4P holds link plane0/leaf-1/uplink0 Up failed";
    return std::nullopt;
  });
  for (int i = 0; i < 8; ++i) step();
  synth_->slowNic(2, 0.1);
  for (int i = 0; i < 20 && !detector_->diagnosis("team/llm"); ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cordon_nodes, d->nodes);
  for (const auto& e : eventsWithReason("FaultDetected")) {
    EXPECT_EQ(e["message"].get<std::string>().find("held while"), std::string::npos);
  }
}

// Issue #27: anyone who may patch a Node writes its fault-history annotation. One with fields of
// another type (here `time` a number, `class` a number) on the node of a running job is
// reported once (Warning InvalidFaultHistory on the Node), its entries are ignored, and the
// detector still diagnoses the fault on that node and writes a well-formed history.
TEST_F(DetectorTest, AMalformedFaultHistoryIsReportedAndTheFaultStillDiagnosed) {
  const std::string culprit = SyntheticJob::nodeName(synth_->nodeOfRank(2));
  Json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata",
                {{"name", culprit},
                 {"annotations", {{kFaultHistoryAnnotation, R"([{"time": 5, "class": 7}])"}}}}}};
  client_.put(resources::nodes(), node);
  nodes_.store().upsert(*client_.peek(resources::nodes(), "", culprit));  // the cache: as stored
  for (int i = 0; i < 8; ++i) step();
  auto invalid = eventsWithReason("InvalidFaultHistory");
  ASSERT_EQ(invalid.size(), 1u) << "reported once, not every window";
  EXPECT_EQ(invalid[0]["involvedObject"]["kind"], "Node");
  EXPECT_EQ(invalid[0]["involvedObject"]["name"], culprit);
  EXPECT_NE(invalid[0]["message"].get<std::string>().find("entry 0"), std::string::npos)
      << invalid[0]["message"];
  synth_->freeze(2);
  for (int i = 0; i < 30 && !detector_->diagnosis("team/llm"); ++i) step();
  auto d = detector_->diagnosis("team/llm");
  ASSERT_TRUE(d) << "the detector still acts";
  EXPECT_EQ(d->nodes, std::vector<std::string>{culprit});
  EXPECT_EQ(eventsWithReason("InvalidFaultHistory").size(), 1u);
  std::string problem;
  auto history = faultHistoryOf(*client_.peek(resources::nodes(), "", culprit), &problem);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].job, "team/llm");
  EXPECT_EQ(problem, "") << "the malformed entry was dropped with the new one";
}

TEST(FaultHistoryTest, AppendsBoundedAndSkipsMalformedEntries) {
  Json node = {{"metadata", {{"name", "n"}}}};
  WallTime t0{std::chrono::seconds{1'800'000'000}};
  for (int i = 0; i < 12; ++i) {
    node["metadata"]["annotations"][kFaultHistoryAnnotation] = appendFaultHistory(
        node, {t0 + std::chrono::seconds{i}, "crash", "ns/job-" + std::to_string(i)}, 10);
  }
  auto history = faultHistoryOf(node);
  ASSERT_EQ(history.size(), 10u);
  EXPECT_EQ(history.front().job, "ns/job-2");
  EXPECT_EQ(history.back().job, "ns/job-11");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] =
      R"([{"time":"garbage"},{"time":"2027-01-15T08:00:00Z","class":"commHang","job":"a/b"},7])";
  history = faultHistoryOf(node);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].fault_class, "commHang");
  node["metadata"]["annotations"][kFaultHistoryAnnotation] = "not json";
  EXPECT_TRUE(faultHistoryOf(node).empty());
}

}  // namespace
}  // namespace c4::op
