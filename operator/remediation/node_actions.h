// Node actions: cordon + taint c4.dev/faulty:NoSchedule with bookkeeping annotations (who, why,
// when, whether the node was already cordoned), the reverse that never uncordons what someone
// else cordoned, Events on the Node, a circuit breaker (maximum fraction of nodes cordoned by us,
// maximum cordons per window) and dry runs that decide but do not act.
//
// Nodes are read from the informer cache and changed by a merge patch that carries the
// resourceVersion it was computed from (a precondition: a concurrent change answers 409 and the
// action is retried from a fresh read). The circuit breaker's state lives in the cluster, in a
// ConfigMap (`state_namespace/state_name`), so its window survives an operator restart or a
// leader failover; checking and recording a cordon there is one optimistic-concurrency update,
// so two workers (or an old and a new leader) can never both take the last slot.
//
// A node's fault history (annotation c4.dev/fault-history: the faults C4D named the node in,
// across jobs and operator restarts; the repeat-offender score) is written here too, within a
// budget per window kept in the same ConfigMap as the cordons' (max_fault_records_per_window),
// and the same way: the entry is appended to the history of the cached copy and patched with that
// copy's resourceVersion, so a concurrent writer (another verdict naming the node in the same
// window, another job) makes the patch fail with 409 and the entry is appended again to a fresh
// read. This room is the only writer of a Node's annotations; C4D asks it (recordFault).
//
// C4D's restarts are bounded the same way (takeRestartSlot): at most max_restarts_per_window job
// attempts ended by a diagnosis per window, all jobs together, each slot recorded in the same
// ConfigMap before the restart is asked for, so a fault of C4 itself that misreads every job
// (a bad telemetry release, a clock jump) restarts a bounded number of them, across restarts and
// failovers alike. The restart C4D holds for a job's attempt is recorded there too
// (recordDiagnosis), before the restart is asked for, for a successor to act on.
//
// Owed actions live in the cluster until they are done. A cordon's breaker record is written
// "owed" (with its reason) before the Node is patched and marked "done" once the patch landed:
// a refused patch (403, 5xx) or an operator killed in between leaves the owed record, which holds
// its breaker slot and nothing more. A fault-history entry whose patch fails is written to the
// same ConfigMap as owed. start() runs a loop that completes what is owed (at once when it
// starts, so a new process or a new leader finishes what its predecessor left) and retries with
// exponential backoff until the action lands, the node is gone (the record is dropped and the
// slot released) or the node is already cordoned by us (marked done: the patch is idempotent).
// Each failure records a Warning Event on the Node (at most one per failure_event_interval and
// action); the success records NodeCordoned or FaultHistoryWritten. What cannot even be written
// to the ConfigMap (the API server unreachable) is kept in memory and retried the same way.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"
#include "kube/controller/events.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library

namespace node_annotations {
inline constexpr const char* kCordonedBy = "c4.dev/cordoned-by";
inline constexpr const char* kCordonReason = "c4.dev/cordon-reason";
inline constexpr const char* kCordonTime = "c4.dev/cordon-time";
inline constexpr const char* kWasCordoned = "c4.dev/was-already-cordoned";
// Set by a person on a node C4 cordoned, once it is repaired: "true" returns it to service
// (NodeRemediator::requestRelease); "forget-history" also removes its fault history (the repair
// removed the cause: a replaced NIC or GPU).
inline constexpr const char* kRelease = "c4.dev/release";
}  // namespace node_annotations
inline constexpr const char* kReleaseTrue = "true";
inline constexpr const char* kReleaseForgetHistory = "forget-history";
// Whether `node` carries c4.dev/release (whatever its value).
bool hasReleaseAnnotation(const Json& node);
inline constexpr const char* kFaultyTaintKey = "c4.dev/faulty";
// The failpoint between an owed cordon's record (its breaker slot) and the Node patch
// (NodeActionConfig::fault_hook; manager/failpoints.h arms it in the binary).
inline constexpr std::string_view kFailpointAfterCordonOwed = "after-cordon-owed";
inline constexpr const char* kFaultHistoryAnnotation = "c4.dev/fault-history";

// One entry of a node's fault history.
struct NodeFaultRecord {
  WallTime time{};
  std::string fault_class;
  std::string job;  // "<ns>/<name>"
};
// The entries of a Node's c4.dev/fault-history annotation, oldest first. Never throws: a value
// that is not a JSON array yields none, malformed entries (not an object, a field missing or of
// another type, a time that is not RFC 3339) are skipped. `problem`, when given, is set to what
// is wrong with the first malformed part ("" when nothing is).
std::vector<NodeFaultRecord> faultHistoryOf(const Json& node, std::string* problem = nullptr);
// The annotation value with `added` appended, the oldest dropped beyond `max_entries`.
std::string appendFaultHistory(const Json& node, const NodeFaultRecord& added,
                               std::size_t max_entries);

struct NodeActionConfig {
  std::string identity = "c4-operator";  // written to c4.dev/cordoned-by
  double max_fraction = 0.1;  // of all nodes, cordoned by us at once (at least 1; 0 = none)
  int max_cordons_per_window = 3;
  Duration window = std::chrono::hours{1};
  bool dry_run = false;  // operator-wide: decide and report, never act
  // The circuit breaker's state (a ConfigMap the operator owns).
  std::string state_namespace = "c4-system";
  std::string state_name = "c4-node-actions";
  std::size_t max_fault_history = 10;  // entries kept in a node's c4.dev/fault-history
  // Fault-history entries appended per `window`, all nodes together (0 = none), counted in the
  // breaker's ConfigMap like cordons, so the window survives a restart or failover.
  int max_fault_records_per_window = 20;
  // C4D restarts (job attempts ended by a diagnosis) per `window`, all jobs together (0 = none),
  // counted in the breaker's ConfigMap like cordons: a C4 fault that misreads every job cannot
  // restart them all.
  int max_restarts_per_window = 20;
  // Owed actions: retried after retry_initial, doubling up to retry_max; the loop also reads
  // the ConfigMap again every rescan_interval; a failure's Warning Event on the Node at most
  // once per failure_event_interval per action.
  Duration retry_initial = std::chrono::seconds{2};
  Duration retry_max = std::chrono::minutes{5};
  Duration rescan_interval = std::chrono::minutes{5};
  Duration failure_event_interval = std::chrono::minutes{5};
  // Test hook: called at kFailpointAfterCordonOwed with the node's name; false aborts the cordon
  // there, as a crash would (the owed record stays). Null in production.
  std::function<bool(std::string_view point, const std::string& node)> fault_hook;
};

// kOwed: the breaker slot is taken and recorded owed, but the patch failed; the loop (start())
// retries it until it lands.
enum class CordonOutcome { kCordoned, kAlreadyOurs, kDryRun, kBreakerOpen, kOwed };
enum class UncordonOutcome { kUncordoned, kTaintRemovedKeptCordon, kNotOurs, kDryRun };

// A diagnosis C4D holds for one attempt of a job, recorded in the breaker's ConfigMap (data
// `diagnoses.json`) before the restart is asked for, so that an operator killed between the
// verdict and the restart leaves it to the next one (Detector). `diagnosis` is the detector's
// encoding, opaque here.
struct RecordedDiagnosis {
  std::string job;  // "<ns>/<name>"
  std::string uid;  // the TrainingJob's metadata.uid: a job created again under the name differs
  std::int64_t attempt = 0;
  WallTime recorded{};
  Json diagnosis;  // an object
};

std::string_view cordonOutcomeName(CordonOutcome o);

class NodeRemediator {
 public:
  // Cache accessors (the shared node informer): one node by name, all nodes.
  using NodeGetter = std::function<std::optional<Json>(const std::string& name)>;
  using NodeLister = std::function<std::vector<Json>()>;

  NodeRemediator(KubeClient& client, Clock& clock, EventRecorder& events, NodeActionConfig config,
                 NodeGetter get_node, NodeLister list_nodes, metrics::Registry* registry);
  ~NodeRemediator();
  NodeRemediator(NodeRemediator&&) = delete;

  // Cordons and taints `node` because of `reason` (an evidence summary). Idempotent. `dry_run`
  // (the job's own) or the operator-wide dry run: Events and outcome only, no change. A patch
  // that fails after the slot was taken answers kOwed (the loop completes it); an error means
  // nothing is recorded in the cluster (kNotFound: no such node; the breaker state could not be
  // read or written: kept in memory and retried by the loop).
  Result<CordonOutcome> cordon(const std::string& node, const std::string& reason,
                               bool dry_run = false);
  // Removes our taint and bookkeeping; uncordons only if the node was not cordoned before us.
  Result<UncordonOutcome> uncordon(const std::string& node);

  // The node carries c4.dev/release (the informer saw it): the loop returns it to service —
  // uncordon() with the annotation removed in the same patch (and the fault history too for
  // "forget-history"), Event NodeUncordoned "... (released: c4.dev/release)". A node C4 did not
  // cordon: only the annotation is removed, Warning Event NodeReleaseIgnored. Another value: a
  // Warning Event NodeReleaseIgnored naming the values allowed, nothing changed. A failed patch
  // is retried by the loop (as owed actions are); a pass that reads the breaker's ConfigMap again
  // (the first after start(), then every rescan_interval) also lists the nodes that carry it, so
  // one set while no operator led is released by the next. Never throws.
  void requestRelease(const std::string& node);
  // One release, now (the loop's step; exposed for tests): kNotFound when the node is gone;
  // kInvalidArgument for a value other than "true" or "forget-history"; nullopt when the node no
  // longer carries the annotation.
  Result<std::optional<UncordonOutcome>> release(const std::string& node);

  // Appends `record` to the node's c4.dev/fault-history (bounded by max_fault_history) with
  // optimistic concurrency (see the top of this header). The history makes a node a repeat
  // offender, so it is an action: nothing is written in an operator-wide dry run (and C4D asks
  // only for verdicts it acts on). kNotFound when the node does not exist. Idempotent: an entry
  // the history already holds (same time, class and job) is not appended again. Bounded like
  // cordons: at most max_fault_records_per_window entries per window, all nodes together, each
  // taking a slot recorded in the breaker's ConfigMap before its patch; one over the budget is
  // not written (kResourceExhausted, a Warning Event FaultHistorySkipped on the Node, counted as
  // c4_operator_node_actions_total{action="fault_history",outcome="budget_spent"}). Any other
  // error leaves the entry owed (the error says so) and the loop writes it.
  Status recordFault(const std::string& node, const NodeFaultRecord& record);

  // Takes a slot of the restart budget for attempt `attempt` of `job` ("<ns>/<name>"), or finds
  // the one it has (idempotent), in one conditional update of the breaker's ConfigMap: false
  // (and `why`) when max_restarts_per_window restarts were taken in the window; an error when the
  // state cannot be read or written (nothing taken). Counted as
  // c4_operator_node_actions_total{action="restart",outcome="allowed"|"budget_spent"}.
  Result<bool> takeRestartSlot(const std::string& job, std::int64_t attempt, std::string& why);

  // Records `d` as its job's diagnosis (replacing any earlier one of the job) in one conditional
  // update of the breaker's ConfigMap. At most kMaxRecordedDiagnoses are kept (the oldest go)
  // and none longer than kRecordedDiagnosisTtl; a diagnosis encoded in more than
  // kMaxDiagnosisBytes is refused (kInvalidArgument, nothing written).
  static constexpr std::size_t kMaxRecordedDiagnoses = 256;
  static constexpr std::size_t kMaxDiagnosisBytes = 16 * 1024;
  static constexpr Duration kRecordedDiagnosisTtl = std::chrono::hours{24};
  Status recordDiagnosis(const RecordedDiagnosis& d);
  // The recorded diagnoses, read from the cluster; entries of the wrong shape are left out
  // (counted in `malformed` when given).
  Result<std::vector<RecordedDiagnosis>> recordedDiagnoses(std::size_t* malformed = nullptr);
  // Removes job's recorded diagnosis, if any (no write when there is none).
  Status forgetDiagnosis(const std::string& job);

  // The cordons recorded in the breaker's window (node names), owed ones included, read from
  // the cluster.
  Result<std::vector<std::string>> recentCordons();
  // The owed actions recorded in the cluster: nodes with an owed cordon, and the owed
  // fault-history entries ("<node> <class> <job>").
  Result<std::vector<std::string>> owedCordons();
  Result<std::vector<std::string>> owedFaults();

  // One pass of the loop: completes every owed action that is due (all of them on the first
  // pass, and on every pass that reads the ConfigMap again). Never throws. Exposed for tests.
  void completeOwed();
  // Runs completeOwed() on a thread of its own: at once, then when a retry is due or every
  // rescan_interval. stop() ends it (also called by the destructor). Idempotent.
  void start();
  void stop();

 private:
  struct State;  // the breaker's ConfigMap, parsed (node_actions.cc)
  // An owed action this process knows of: its backoff (in memory: a new process retries at once)
  // and what it needs to be done again.
  struct Retry {
    Retry(std::string n, std::string r, std::optional<NodeFaultRecord> f, bool p)
        : node(std::move(n)), reason(std::move(r)), fault(std::move(f)), persisted(p) {}
    std::string node;
    std::string reason;                    // a cordon's reason
    std::optional<NodeFaultRecord> fault;  // a fault-history entry
    bool persisted = false;                // the owed record is in the ConfigMap
    int failures = 0;
    MonoTime next{};
    std::optional<MonoTime> last_event;
  };
  // Counts one more failure of the owed action `retry` (under `key`), schedules its next try and
  // wakes the loop; returns whether a failure Event is due now.
  bool failed(const std::string& key, Retry retry);
  // Forgets `key`; returns the failures it had (0 if none).
  int succeeded(const std::string& key);
  // Applies `edit` to the breaker's state and writes it back with optimistic concurrency
  // (retried on conflict); `edit` returns false when nothing is to be written. Done cordons
  // older than the window are dropped with the write.
  Status editState(const std::function<bool(State&)>& edit);
  Status markCordonDone(const std::string& node);
  Status dropCordon(const std::string& node);
  Status persistFault(const std::string& node, const NodeFaultRecord& record);
  Status dropFault(const std::string& node, const NodeFaultRecord& record);
  // Appends the entry to the node's history unless it holds it already (kNotFound: no node).
  Status writeFault(const std::string& node, const NodeFaultRecord& record);
  // Takes a slot of the fault-history budget for the entry (or finds the one it has) in one
  // conditional update of the breaker's state: false (and `why`) when the window's budget is
  // spent.
  Result<bool> takeFaultSlot(const std::string& node, const NodeFaultRecord& record,
                             std::string& why);
  Status releaseFaultSlot(const std::string& node, const NodeFaultRecord& record);
  // An entry refused by the budget: counted, logged, a Warning Event FaultHistorySkipped.
  void faultSkipped(const std::string& node, const NodeFaultRecord& record, const std::string& why);
  // uncordon(); `release`: also removes c4.dev/release, and with `forget_history` the history.
  Result<UncordonOutcome> uncordonImpl(const std::string& node, bool release, bool forget_history);
  void completeReleases(bool rescan);
  Result<CordonOutcome> cordonImpl(const std::string& node, const std::string& reason, bool dry_run,
                                   const std::string& note);
  void completeCordon(const std::string& node, const std::string& reason);
  void completeFault(const std::string& node, const NodeFaultRecord& record, bool persisted);
  void completeOwedPass();
  void loop();

  Result<Json> readNode(const std::string& name, bool fresh);
  // Checks the breaker and records `node` in its state in one conditional update. False (and
  // `why`) when the breaker is open; `record` false only checks.
  // A recorded slot is owed (with `reason`) until markCordonDone.
  Result<bool> takeSlot(const std::string& node, bool record, const std::string& reason,
                        std::string& why);
  Result<CordonOutcome> patchCordon(const std::string& node_name, const std::string& reason,
                                    const std::string& note = {});

  KubeClient& client_;
  Clock& clock_;
  EventRecorder& events_;
  NodeActionConfig config_;
  NodeGetter get_node_;
  NodeLister list_nodes_;
  Logger log_;
  metrics::Family<metrics::Counter>* actions_ = nullptr;

  std::mutex mu_;  // retries_, the loop's state
  std::condition_variable_any cv_;
  std::map<std::string, Retry> retries_;  // "cordon/<node>", "fault/<node>/<time>/<class>/<job>"
  struct Release {
    MonoTime next{};  // when it is due
    int failures = 0;
  };
  std::map<std::string, Release> releases_;  // by node
  bool stopping_ = false;
  bool rescan_ = true;  // read the ConfigMap on the next pass
  MonoTime next_rescan_{};
  std::thread loop_;
};

}  // namespace c4::op
