// C4D in the operator: every analysis window (1 s) the detector turns each running TrainingJob's
// reports in the ingest store into a c4d::JobSnapshot, runs the job's c4d::JobAnalyser on it and
// acts on what it confirms:
//
//   - every new verdict: a Warning Event `FaultDetected` on the TrainingJob naming class, culprit,
//     evidence and action (with "dry run" when the job's faultTolerance.dryRun is set), a
//     `FaultSuspected` Event on each culprit Node, the node's fault history (annotation
//     c4.dev/fault-history, kept across jobs and operator restarts), metrics;
//   - a verdict that calls for a restart (cordonAndRestart, restartOnly, or a straggler whose
//     measured slowdown costs more than a restart would) becomes the job's DiagnosedFault, which
//     the TrainingJob controller reads (diagnosis()) when it reconciles the job — enqueued at
//     once — and turns into a restart from the last checkpoint away from the culprits, with a
//     cordon when the evidence names a node;
//   - a slow link (replan) is reported and handed to the traffic planner (setReplan), which
//     looks at that connection's subflows with a lower bar;
//   - telemetry missing from a node: a Warning Event `TelemetryMissing`, never an action.
//
// Coordination with C4P (setTrafficExplanation): a communication hang between two nodes whose
// planned paths cross a link C4P holds failed, degraded or suspect is C4P's to handle first — it
// moves new data off the link, and bytes queued on it move when the link or the routing does. The
// verdict is deferred (a Warning Event `FaultDetected` that says so) and acted on only if the hang
// outlasts `traffic_plan_grace` or C4P's explanation ends first; a hang that clears within the
// grace gets a Normal Event `FaultCleared` and no action. Slowness C4P explains is the remaining
// links' capacity, not a NIC: a slow link is not escalated, and a node named only because all the
// slow links touch it is held, while the explanation lasts. A node culprit counts as explained
// when every link between it and the verdict's other nodes is.
//
// Repeat offenders: a node's score is the number of entries in its fault history within
// `repeat_offender_window`; the analyser relaxes its thresholds for nodes with a score >= 1.
//
// Straggler cost model (docs/c4d.md): a restart costs `restart_cost` (measured: the job's
// goodput.lostSeconds per restart so far, else the default) plus the work since the last
// checkpoint; letting a straggler run costs (1 - 1/slowdown) of every second until the job ends,
// estimated over `straggler_horizon`. The detector restarts when the second exceeds the first
// and the slowdown is at least `straggler_min_slowdown`.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "operator/c4d/analyser.h"
#include "operator/cache/informer.h"
#include "operator/client/kube_client.h"
#include "operator/controller/events.h"
#include "operator/ingest/report_store.h"
#include "operator/trainingjob/planner.h"

namespace c4::op {

inline constexpr const char* kFaultHistoryAnnotation = "c4.dev/fault-history";

struct DetectorConfig {
  Duration window = std::chrono::seconds{1};
  // A node's batches count as arriving when the newest is at most this old.
  Duration node_silence = std::chrono::seconds{5};
  Duration repeat_offender_window = std::chrono::hours{24};
  std::size_t max_fault_history = 10;  // entries per node annotation
  // Straggler cost model.
  Duration restart_cost = std::chrono::seconds{60};
  Duration straggler_horizon = std::chrono::hours{1};
  // Below this slowdown a straggler verdict is an Event only, whatever the horizon: a few
  // percent of lateness is within what contention on shared links produces (ECMP collisions
  // look like a slightly late rank), and a cordon needs a clear signal.
  double straggler_min_slowdown = 2.0;
  // Report samples per rank handed to the analyser (it uses the newest two).
  std::size_t report_samples = 3;
  // A slow link (commSlow, action replan) still found this long after C4P was asked to re-plan
  // around it is treated as a NIC fault at one of its ends (DESIGN: re-plan first; if the
  // slowness persists, the node's NIC).
  Duration replan_grace = std::chrono::seconds{30};
  // How long a communication hang C4P explains (a failed, degraded or suspect link on the
  // connection's planned paths) is left to C4P before the detector acts. Longer than the plugin's
  // TCP user timeout (10 s), which ends a connection whose bytes stay stuck: then the crash rule
  // takes over.
  Duration traffic_plan_grace = std::chrono::seconds{15};
};

// One entry of a node's fault history.
struct NodeFaultRecord {
  WallTime time{};
  std::string fault_class;
  std::string job;  // "<ns>/<name>"
};
// The entries of a Node's c4.dev/fault-history annotation (malformed entries are skipped).
std::vector<NodeFaultRecord> faultHistoryOf(const Json& node);
// The annotation value with `added` appended, the oldest dropped beyond `max_entries`.
std::string appendFaultHistory(const Json& node, const NodeFaultRecord& added,
                               std::size_t max_entries);

// The analyser's snapshot of one job from the store's record, the job's pods and the nodes
// (exposed for tests). `job` is the TrainingJob; pods are looked up as "<ns>/<job>-<index>".
struct SnapshotSources {
  std::function<std::optional<Json>(const std::string& key)> pod;
  std::function<std::optional<Json>(const std::string& name)> node;
  std::function<std::optional<ingest::NodeRecord>(const std::string& name)> node_record;
};
c4d::JobSnapshot buildSnapshot(const Json& job, const ingest::JobRecord& record,
                               const SnapshotSources& sources, const DetectorConfig& config,
                               WallTime now, std::int64_t* last_anomaly_ns);

class Detector {
 public:
  // `client` writes node annotations (the manager's fenced client); `jobs`, `pods` and `nodes`
  // are the controller's informers. Everything must outlive the detector.
  Detector(ingest::ReportStore& store, Informer& jobs, Informer& pods, Informer& nodes,
           KubeClient& client, EventRecorder& events, Clock& clock, DetectorConfig config,
           metrics::Registry& registry);
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  // Called with "<ns>/<name>" when a job gets a diagnosis (the controller enqueues it).
  void setEnqueue(std::function<void(const std::string& key)> enqueue);
  // Called with "<ns>/<name>" and the two nodes of a connection C4D found slow (a kReplan
  // verdict of a link, not in dry run): the traffic planner (operator/trafficplan) takes it.
  void setReplan(std::function<void(const std::string& key, const std::string& node,
                                    const std::string& peer_node)>
                     replan);
  // C4P's view of a connection between two nodes of job "<ns>/<name>": why it may hang or slow
  // down without a fault at either end (a link on its planned paths that C4P holds failed,
  // degraded or suspect), or nullopt. Called from the detector's thread; must be thread-safe.
  using TrafficExplanation = std::function<std::optional<std::string>(
      const std::string& key, const std::string& node, const std::string& peer_node)>;
  void setTrafficExplanation(TrafficExplanation explain);
  // The restart-causing verdict of the job's current attempt, if any (thread-safe).
  [[nodiscard]] std::optional<DiagnosedFault> diagnosis(const std::string& key) const;

  // One analysis window over every job the store holds.
  void tick();
  // Runs tick() every window on a thread of its own until stop().
  void start();
  void stop();

 private:
  struct JobState {
    c4d::JobAnalyser analyser;
    std::string uid;
    std::uint32_t attempt = 0;
    std::int64_t last_anomaly_ns = 0;
    std::optional<DiagnosedFault> diagnosis;
    // Slow-link verdicts (by key) C4P was asked to re-plan around, and when.
    std::map<std::string, WallTime> replanned;
    // Verdicts (by key) left to C4P — hangs, and slow nodes C4P explains: the verdict, since
    // when, and C4P's explanation.
    struct Deferred {
      c4d::Verdict verdict;
      WallTime since{};
      std::string why;
    };
    std::map<std::string, Deferred> deferred;
  };
  void analyse(const std::string& key, const Json& job, JobState& state, WallTime now);
  void act(const std::string& key, const Json& job, JobState& state, const c4d::Verdict& v,
           bool dry_run);
  void escalatePersistentSlowLinks(const std::string& key, const Json& job, JobState& state,
                                   const c4d::TickResult& result, const c4d::JobSnapshot& snap,
                                   WallTime now, bool dry_run);
  // C4P's explanation of a comm verdict's link (or of every link of a node named without
  // node-level evidence), or nullopt.
  std::optional<std::string> trafficExplanation(const std::string& key, const c4d::Verdict& v,
                                                const c4d::JobSnapshot& snap) const;
  void resolveDeferred(const std::string& key, const Json& job, JobState& state,
                       const c4d::TickResult& result, const c4d::JobSnapshot& snap, WallTime now,
                       bool dry_run);
  void recordNodeFault(const std::string& node_name, const NodeFaultRecord& record);
  bool stragglerWorthRestart(const Json& job, const c4d::Verdict& v, WallTime now) const;

  ingest::ReportStore& store_;
  Informer& jobs_;
  Informer& pods_;
  Informer& nodes_;
  KubeClient& client_;
  EventRecorder& events_;
  Clock& clock_;
  DetectorConfig config_;
  Logger log_;
  metrics::Family<metrics::Counter>& verdicts_;
  metrics::Family<metrics::Counter>& observations_;
  metrics::Family<metrics::Histogram>& detection_seconds_;
  metrics::Family<metrics::Histogram>& tick_seconds_;
  metrics::Family<metrics::Counter>& deferred_;

  mutable std::mutex mu_;  // guards jobs_state_ diagnoses, enqueue_, replan_ and explain_
  std::map<std::string, JobState> job_state_;
  std::function<void(const std::string&)> enqueue_;
  std::function<void(const std::string&, const std::string&, const std::string&)> replan_;
  TrafficExplanation explain_;

  std::mutex loop_mu_;
  std::condition_variable_any loop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace c4::op
