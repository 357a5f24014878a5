// C4D in the operator: a reconciler of TrainingJob keys ("<ns>/<name>") behind a rate-limited
// work queue (kube/controller/work_queue.h), like the TrainingJob controller. A job's reconcile is
// one analysis window: it turns the job's recent reports in the ingest store
// (ReportStore::recentReports) into a c4d::JobSnapshot, runs the job's c4d::JobAnalyser on it,
// acts on what it confirms and re-queues the job after the window (`window`, 1 s; measured from
// when the window was due, so a slow analysis does not stretch the cadence). Jobs are discovered
// from the TrainingJob informer (every event adds the job's key; a key added before its window
// is due waits for it: the analyser counts windows, so an informer event never adds one) and,
// at start(), from its cache. A job with nothing in the store is looked at again after a window
// while it runs, and forgotten when it is not running or is deleted. One worker: analysis is
// cheap and per job.
//
// What it confirms:
//
//   - every new verdict: a Warning Event `FaultDetected` on the TrainingJob naming class, culprit,
//     evidence and action (with "dry run" when the job's faultTolerance.dryRun is set), a
//     `FaultSuspected` Event on each culprit Node, an entry in the node's fault history
//     (annotation c4.dev/fault-history, kept across jobs and operator restarts; written by
//     operator/remediation, NodeRemediator::recordFault, with optimistic concurrency), metrics;
//   - a verdict that calls for a restart (cordonAndRestart, restartOnly, or a straggler whose
//     measured slowdown costs more than a restart would) becomes the job's DiagnosedFault, which
//     the TrainingJob controller reads (diagnosis()) when it reconciles the job — enqueued at
//     once (DiagnosisListener) — and turns into a restart from the last checkpoint away from the
//     culprits, with a cordon when the evidence names a node. Compound faults: the diagnosis is
//     held until the end of the window after its first verdict's, and every restart-causing
//     verdict of the attempt confirmed until the controller restarts the job joins it (each
//     with its own Events and history; the restart avoids every culprit and cordons each one
//     the evidence names) — two independent faults cost one restart, not two;
//     The diagnosis is recorded in the cluster (NodeRemediator::recordDiagnosis) before the
//     verdict's Events, and again when a verdict joins it; a process that ends before the
//     restart leaves it to the next, which publishes it at its first look at the job
//     (restoreDiagnosis) — the evidence may be gone by then (a rank killed while its pod stays
//     up never reports again). The record goes once the attempt has ended.
//     The restart is asked for only within the cluster-wide restart budget (remediation,
//     NodeRemediator::takeRestartSlot: at most --restart-max-per-hour job attempts ended by C4D,
//     all jobs together): beyond it the diagnosis stays held, with a Warning Event
//     RestartDeferred, and is published once the window has room;
//   - a slow link (replan) is reported and handed to the traffic planner (TrafficPlanPeer), which
//     looks at that connection's subflows with a lower bar;
//   - telemetry missing from a node: a Warning Event `TelemetryMissing`, never an action.
//
// Coordination with C4P (TrafficPlanPeer::explain): a communication hang between two nodes whose
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

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/cache/informer.h"
#include "kube/client/kube_client.h"
#include "kube/controller/events.h"
#include "kube/controller/work_queue.h"
#include "operator/c4d/analyser.h"
#include "operator/ingest/report_store.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/planner.h"
#include "operator/trainingjob/reconciler.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

struct DetectorConfig {
  Duration window = std::chrono::seconds{1};
  // A node's batches count as arriving when the newest is at most this old (and never older
  // than the job's silenceSeconds).
  Duration node_silence = std::chrono::seconds{5};
  Duration repeat_offender_window = std::chrono::hours{24};
  // Straggler cost model.
  Duration restart_cost = std::chrono::seconds{60};
  Duration straggler_horizon = std::chrono::hours{1};
  // Below this slowdown a straggler verdict is an Event only, whatever the horizon: a few
  // percent of lateness is within what contention on shared links produces (ECMP collisions
  // look like a slightly late rank), and a cordon needs a clear signal.
  double straggler_min_slowdown = 2.0;
  // Report samples per rank handed to the analyser (it uses the newest two).
  std::size_t report_samples = 2;
  // A slow link (commSlow, action replan) still found this long after C4P was asked to re-plan
  // around it is treated as a NIC fault at one of its ends (DESIGN: re-plan first; if the
  // slowness persists, the node's NIC).
  Duration replan_grace = std::chrono::seconds{30};
  // How long a communication hang C4P explains (a failed, degraded or suspect link on the
  // connection's planned paths) is left to C4P before the detector acts. Longer than the plugin's
  // TCP user timeout (10 s), which ends a connection whose bytes stay stuck: then the crash rule
  // takes over.
  Duration traffic_plan_grace = std::chrono::seconds{15};
  // Test hook: called at kFailpointAfterFindingPending with the job's key; false ends the
  // window there, as a crash would (manager/failpoints.h arms it in the binary).
  std::function<bool(std::string_view point, const std::string& key)> fault_hook;
};

// The failpoint of a window in which C4D has found a fault it has not confirmed yet (the
// analyser's pending findings), with no verdict of the job's attempt yet: an operator killed here
// takes unconfirmed evidence with it (the node plugins resend what exited ranks last said).
inline constexpr std::string_view kFailpointAfterFindingPending = "after-finding-pending";

// What the snapshot takes from a rank's pod: read in place from the informer cache, so a window
// copies no Pod object.
struct PodFacts {
  std::string name;                               // metadata.name
  std::string node;                               // spec.nodeName
  std::string restart_attempt;                    // label c4.dev/restart-attempt
  c4d::PodState state = c4d::PodState::kUnknown;  // kGone once it has a deletionTimestamp
};
PodFacts podFactsOf(const Json& pod);

// A job's PodFacts by pod key, kept with the pod's resourceVersion: a window reads an unchanged
// pod's version, not its fields (a pod without one is read whole every time).
class PodFactsCache {
 public:
  // The facts of `pod`, the informer's object under `key`: kept ones while its resourceVersion is
  // the one they were read at. Valid until the next call.
  const PodFacts& of(const std::string& key, const Json& pod);
  // Lets the pods go that were not read since the previous sweep.
  void sweep();
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::string resource_version;
    PodFacts facts;
    bool read = false;
  };
  std::unordered_map<std::string, Entry> entries_;
};

// The analyser's snapshot of one job from its recent reports in the store
// (ReportStore::recentReports), the job's pods and the nodes (exposed for tests). `job` is the
// TrainingJob; pods are looked up as "<ns>/<job>-<index>"; a node's record is the one in
// `reports.nodes`, else `node_record`'s; `node_history` is a Node's fault history
// (faultHistoryOf), nullopt when the Node is not known.
struct SnapshotSources {
  std::function<std::optional<PodFacts>(const std::string& key)> pod;
  std::function<std::optional<std::vector<NodeFaultRecord>>(const std::string& name)> node_history;
  std::function<std::optional<ingest::NodeRecord>(const std::string& name)> node_record;
};

// A job's stored reports in the analyser's form, kept from one window to the next: the newest
// report of a window is the older of the next, so each report's connections are converted once
// (ConnSample::from of each), not in every window that reads it. Holds the reports the last
// window read, no more.
class ReportSampleCache {
 public:
  // Starts a window of a job of `world_size` ranks.
  void begin(std::int32_t world_size);
  // The connections of rank `rank`'s report `report`: as the previous window converted them if it
  // read the same report, else converted now.
  c4d::ConnSamples connections(std::int32_t rank, const ingest::StoredReportPtr& report);
  // Ends the window: what it did not read is let go.
  void end();
  // Reports converted in the last window.
  std::size_t converted() const noexcept { return converted_; }

 private:
  struct Entry {
    ingest::StoredReportPtr report;
    c4d::ConnSamples connections;
  };
  std::vector<std::vector<Entry>> previous_, current_;  // by rank
  std::size_t converted_ = 0;
};

// `cache`: the job's, kept between its windows (null: every report is converted).
c4d::JobSnapshot buildSnapshot(const Json& job, const ingest::RecentReports& reports,
                               const SnapshotSources& sources, const DetectorConfig& config,
                               WallTime now, ReportSampleCache* cache = nullptr);

// Who hears of a diagnosis: the TrainingJob controller, which enqueues the job.
class DiagnosisListener {
 public:
  virtual ~DiagnosisListener() = default;
  // Job "<ns>/<name>" got a diagnosis (Detector::diagnosis). Called from the detector's worker.
  virtual void diagnosed(const std::string& key) = 0;
};

// C4P as C4D sees it (operator/trafficplan; the manager adapts its controller). Thread-safe.
class TrafficPlanPeer {
 public:
  virtual ~TrafficPlanPeer() = default;
  // The connection between `node` and `peer_node` of job "<ns>/<name>" is slow (a kReplan
  // verdict of a link, not in dry run): re-plan around it.
  virtual void replan(const std::string& key, const std::string& node,
                      const std::string& peer_node) = 0;
  // Why the connection may hang or slow down without a fault at either end (a link on its
  // planned paths that C4P holds failed, degraded or suspect), or nullopt.
  [[nodiscard]] virtual std::optional<std::string> explain(const std::string& key,
                                                           const std::string& node,
                                                           const std::string& peer_node) const = 0;
};

// The detector's peers; null: nobody (no controller, no traffic planning).
struct DetectorPeers {
  DiagnosisListener* diagnoses = nullptr;
  TrafficPlanPeer* traffic = nullptr;
};

class Detector {
 public:
  // `remediator` records the culprit nodes' fault history (the only writer of Nodes); `jobs`,
  // `pods` and `nodes` are the controller's informers (a handler is added to `jobs`: construct
  // before the informers start). Everything must outlive the detector.
  Detector(ingest::ReportStore& store, Informer& jobs, Informer& pods, Informer& nodes,
           NodeRemediator& remediator, EventRecorder& events, Clock& clock, DetectorConfig config,
           metrics::Registry& registry, DetectorPeers peers = {});
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  // The restart-causing verdicts of the job's current attempt, joined, once published (the end
  // of the window after the first one's), if any (thread-safe).
  [[nodiscard]] std::optional<DiagnosedFault> diagnosis(const std::string& key) const;

  // One reconcile of job "<ns>/<name>" (exposed for tests; the worker calls it): a new uid or
  // attempt resets the job's state at once; the analysis window runs when it is due (the
  // first at once), and the result says when to look again (none: forget the key).
  Result<ReconcileResult> reconcile(const std::string& key);
  // Queues every job in the TrainingJob cache and starts the worker; the manager calls it once
  // the caches synced. stop() shuts the queue down and joins (idempotent; no restart).
  void start();
  void stop();
  WorkQueue& queue() { return queue_; }

 private:
  struct JobState {
    c4d::JobAnalyser analyser;
    ReportSampleCache samples;
    PodFactsCache pod_facts;
    std::optional<MonoTime> next_window;  // when the next analysis window is due
    std::string uid;
    std::uint32_t attempt = 0;
    std::uint64_t last_anomaly_seq = 0;  // the store's arrival order (RecentReports)
    // The restart-causing diagnosis of this attempt. Held (not published) from the window of
    // its first verdict to the end of the next, so that verdicts confirmed together join it.
    std::optional<DiagnosedFault> diagnosis;
    bool diagnosis_published = false;
    // `diagnosis` is recorded in the cluster (NodeRemediator::recordDiagnosis).
    bool diagnosis_recorded = false;
    std::uint64_t windows = 0;           // analysis windows of this attempt (while it runs)
    std::uint64_t diagnosis_window = 0;  // the window that created `diagnosis`
    // The restart budget (NodeRemediator::takeRestartSlot) refused or could not be read: when to
    // ask again, and whether the job's RestartDeferred Event is written.
    std::optional<MonoTime> restart_retry_at;
    bool restart_deferred_event = false;
    // Slow-link verdicts (by key) C4P was asked to re-plan around, and when.
    // A verdict that clears is kept until it has stayed cleared for replan_grace: a link whose
    // rate hovers around the threshold keeps the clock of its first verdict.
    struct Replanned {
      WallTime since{};
      std::optional<WallTime> cleared_at;
      bool explained = false;  // C4P explained it when it was last active
    };
    std::map<std::string, Replanned> replanned;
    // Verdicts (by key) left to C4P — hangs, and slow nodes C4P explains: the verdict, since
    // when, and C4P's explanation.
    struct Deferred {
      c4d::Verdict verdict;
      WallTime since{};
      std::string why;
    };
    std::map<std::string, Deferred> deferred;
    // Per verdict key, the Events of that fault (FaultDetected, FaultCleared) written within the
    // last hour, and how many were held back since the last one (allowFaultEvent). Kept across
    // attempts.
    struct EventBudget {
      std::deque<MonoTime> written;
      std::int64_t held = 0;
    };
    std::map<std::string, EventBudget> event_budget;
  };
  void worker();
  // Resets the state when the job's uid or attempt changed.
  void observeAttempt(const std::string& key, const Json& job, JobState& state);
  // One analysis window; false when the store holds nothing of the job.
  bool analyse(const std::string& key, const Json& job, JobState& state, WallTime now);
  void act(const std::string& key, const Json& job, JobState& state, const c4d::Verdict& v,
           bool dry_run);
  // Whether an Event about the fault `verdict_key` is written now: the first
  // kFaultEventsPerHour of an hour are; after that at most one per kFlappingEventInterval, its
  // message prefixed with how many were held back. A flapping link then cannot spend the spam
  // filter's budget of the job's Events (EventCorrelatorOptions::spam_burst), and a later fault's
  // Events are written.
  bool allowFaultEvent(JobState& state, const std::string& verdict_key, std::string& message);
  // Publishes the held diagnosis (diagnosis() returns it; the controller hears of it) once the
  // cluster-wide restart budget has a slot for it; until then it stays held (and joinable), with
  // a Warning Event RestartDeferred, and the budget is asked again every kRestartSlotRetry.
  void publishDiagnosis(const std::string& key, JobState& state);
  // Holds `d` as the attempt's diagnosis, or joins it to the one held, and records the result
  // in the cluster.
  void holdDiagnosis(const std::string& key, JobState& state, DiagnosedFault d,
                     const std::string& culprit);
  // Writes the held diagnosis to the cluster (the breaker's ConfigMap); a failure is logged
  // and leaves it to be tried again when it is published.
  void recordHeldDiagnosis(const std::string& key, JobState& state);
  void forgetRecordedDiagnosis(const std::string& key);
  // On every reconcile (a map lookup; the cluster is read once, on the first): a diagnosis an
  // earlier process recorded for the job's current attempt (same uid) is held again and published
  // at once (its restart had not happened); a record of an ended attempt, or one that does not
  // decode, is removed.
  void restoreDiagnosis(const std::string& key, JobState& state);
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
  // A Warning Event InvalidFaultHistory on a node whose c4.dev/fault-history annotation is
  // malformed (`problem`, from faultHistoryOf; once per resourceVersion); its malformed entries
  // are ignored. Called outside the informer cache's lock.
  void checkFaultHistory(const std::string& name, const std::string& resource_version,
                         const std::string& problem);
  bool stragglerWorthRestart(const Json& job, const c4d::Verdict& v, WallTime now) const;

  ingest::ReportStore& store_;
  Informer& jobs_;
  Informer& pods_;
  Informer& nodes_;
  NodeRemediator& remediator_;
  EventRecorder& events_;
  Clock& clock_;
  DetectorConfig config_;
  Logger log_;
  metrics::Family<metrics::Counter>& verdicts_;
  metrics::Family<metrics::Counter>& observations_;
  metrics::Family<metrics::Histogram>& detection_seconds_;
  metrics::Family<metrics::Histogram>& tick_seconds_;
  metrics::Family<metrics::Counter>& deferred_;

  DetectorPeers peers_;

  mutable std::mutex mu_;  // guards job_state_ (the map) and the states' diagnoses
  std::map<std::string, JobState> job_state_;
  // The diagnoses recorded in the cluster by earlier processes, by job, read once (guarded by
  // mu_; an entry leaves when its job is first reconciled).
  std::map<std::string, RecordedDiagnosis> recorded_;
  bool recorded_loaded_ = false;
  std::optional<MonoTime> recorded_retry_at_;  // the worker's only
  // Node -> the resourceVersion whose malformed fault history was last reported (guarded by mu_).
  std::map<std::string, std::string> history_reported_;

  WorkQueue queue_;
  std::mutex lifecycle_mu_;
  bool stopped_ = false;
  std::thread worker_;
};

}  // namespace c4::op
