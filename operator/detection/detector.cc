#include "operator/detection/detector.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>
#include <utility>

#include "operator/trainingjob/api.h"
#include "operator/trainingjob/status.h"

namespace c4::op {
namespace {

// Verdicts joined into one diagnosis whose evidence its summary spells out; later ones are
// counted (each has its own FaultDetected Event).
constexpr std::size_t kMaxJoinedInSummary = 4;

// Events about one fault (verdict key) written per hour before the rest are held back, and the
// interval between the Events of a fault that keeps coming back after that (allowFaultEvent).
constexpr std::size_t kFaultEventsPerHour = 3;
constexpr auto kFlappingEventInterval = std::chrono::minutes{5};
// A diagnosis the restart budget refused asks for a slot again this often.
constexpr auto kRestartSlotRetry = std::chrono::seconds{10};

// The recorded diagnoses are read again after a failed read no sooner than this.
constexpr auto kRecordedRetry = std::chrono::seconds{10};
// The most culprit nodes a recorded diagnosis may name (a restart avoids them all).
constexpr std::size_t kMaxRecordedNodes = 64;

std::string stringAtPath(const Json& j, const char* pointer) {
  const Json::json_pointer p(pointer);
  if (!j.contains(p)) return {};
  const Json& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : std::string{};
}

// A string field of an object ("" when absent or not a string), read in place.
const std::string& stringIn(const Json& object, const char* key) {
  static const std::string none;
  if (!object.is_object()) return none;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get_ref<const std::string&>() : none;
}

// A held diagnosis as it is recorded in the cluster (NodeRemediator::recordDiagnosis).
Json encodeDiagnosis(const DiagnosedFault& d) {
  return {{"attempt", d.attempt},
          {"class", d.fault_class},
          {"key", d.key},
          {"keys", d.keys},
          {"summary", d.summary},
          {"nodes", d.nodes},
          {"cordonNodes", d.cordon_nodes},
          {"rank", d.rank},
          {"detectionSeconds", d.detection_seconds}};
}

// A list of strings, each non-empty and at most `max_len` long, at most `max_count` of them.
bool stringList(const Json& object, const char* name, std::size_t max_count, std::size_t max_len,
                std::vector<std::string>& out) {
  const Json* list = arrayAt(object, name);
  if (list == nullptr || list->size() > max_count) return false;
  for (const auto& v : *list) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
        v.get_ref<const std::string&>().size() > max_len) {
      return false;
    }
    out.push_back(v.get<std::string>());
  }
  return true;
}

// A recorded diagnosis read back (checked: the ConfigMap is outside input); nullopt and
// `problem` when it is not one this detector wrote.
std::optional<DiagnosedFault> decodeDiagnosis(const Json& j, std::string& problem) {
  DiagnosedFault d;
  const std::string fault_class = stringAt(j, "class").value_or("");
  bool known_class = false;
  for (auto c : {c4d::FaultClass::kCrash, c4d::FaultClass::kCommHang, c4d::FaultClass::kNonCommHang,
                 c4d::FaultClass::kCommSlow, c4d::FaultClass::kNonCommSlow}) {
    known_class = known_class || c4d::faultClassName(c) == fault_class;
  }
  const auto attempt = intAt(j, "attempt");
  const auto rank = intAt(j, "rank");
  const auto seconds = numberAt(j, "detectionSeconds");
  const std::string key = stringAt(j, "key").value_or("");
  if (!j.is_object()) {
    problem = "not an object";
  } else if (!attempt || *attempt < 0) {
    problem = "attempt is not a non-negative integer";
  } else if (!known_class) {
    problem = "class is not a fault class";
  } else if (key.empty() || !stringList(j, "keys", 1024, 1024, d.keys) || d.keys.empty()) {
    problem = "key or keys missing";
  } else if (!stringList(j, "nodes", kMaxRecordedNodes, 253, d.nodes) ||
             !stringList(j, "cordonNodes", kMaxRecordedNodes, 253, d.cordon_nodes)) {
    problem = "nodes or cordonNodes are not lists of node names";
  } else if (std::any_of(d.cordon_nodes.begin(), d.cordon_nodes.end(), [&](const std::string& n) {
               return std::find(d.nodes.begin(), d.nodes.end(), n) == d.nodes.end();
             })) {
    problem = "cordonNodes names a node that nodes does not";
  } else if (!rank || !seconds) {
    problem = "rank or detectionSeconds missing";
  } else {
    d.attempt = *attempt;
    d.fault_class = fault_class;
    d.key = key;
    d.summary = stringAt(j, "summary").value_or("");
    d.rank = *rank;
    d.detection_seconds = *seconds;
    return d;
  }
  return std::nullopt;
}

// Direct field reads (a window reads every pod of the job).
c4d::PodState podStateOf(const Json& metadata, const Json& status) {
  if (metadata.contains("deletionTimestamp")) return c4d::PodState::kGone;
  const std::string& phase = stringIn(status, "phase");
  if (phase == "Running") return c4d::PodState::kRunning;
  if (phase == "Succeeded") return c4d::PodState::kSucceeded;
  if (phase == "Failed") return c4d::PodState::kFailed;
  if (phase == "Pending") return c4d::PodState::kPending;
  return c4d::PodState::kUnknown;
}

// A status that does not decode (never from the API server) reads as an empty one: not Running.
TrainingJobStatus jobStatus(const Json& job) {
  return parseTrainingJobStatus(job).value_or(TrainingJobStatus{});
}

std::string describeCulprit(const c4d::Culprit& c) {
  switch (c.kind) {
    case c4d::CulpritKind::kNode:
      return "node " + c.node;
    case c4d::CulpritKind::kLink:
      return "link " + c.node + "<->" + c.peer_node;
    case c4d::CulpritKind::kRank:
      return "rank " + std::to_string(c.rank) + " on node " + c.node;
  }
  return "unknown";
}

}  // namespace

PodFacts podFactsOf(const Json& pod) {
  const Json& metadata = fieldsOf(pod, "metadata");
  return PodFacts{stringIn(metadata, "name"), stringIn(fieldsOf(pod, "spec"), "nodeName"),
                  stringIn(fieldsOf(metadata, "labels"), labels::kRestartAttempt),
                  podStateOf(metadata, fieldsOf(pod, "status"))};
}

const PodFacts& PodFactsCache::of(const std::string& key, const Json& pod) {
  const std::string& version = stringIn(fieldsOf(pod, "metadata"), "resourceVersion");
  auto [it, added] = entries_.try_emplace(key);
  Entry& e = it->second;
  e.read = true;
  if (added || version.empty() || e.resource_version != version) {
    e.facts = podFactsOf(pod);
    e.resource_version = version;
  }
  return e.facts;
}

void PodFactsCache::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second.read) {
      it = entries_.erase(it);
    } else {
      it->second.read = false;
      ++it;
    }
  }
}

void ReportSampleCache::begin(std::int32_t world_size) {
  const auto n = static_cast<std::size_t>(std::max(0, world_size));
  previous_.resize(n);
  current_.resize(n);
  converted_ = 0;
}

c4d::ConnSamples ReportSampleCache::connections(std::int32_t rank,
                                                const ingest::StoredReportPtr& report) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= current_.size()) {
    ++converted_;
    return c4d::ConnSamples(c4d::convertConnections(report->connections));
  }
  const auto r = static_cast<std::size_t>(rank);
  for (const Entry& e : previous_[r]) {
    if (e.report == report) {
      current_[r].push_back(e);
      return e.connections;
    }
  }
  ++converted_;
  current_[r].push_back({report, c4d::ConnSamples(c4d::convertConnections(report->connections))});
  return current_[r].back().connections;
}

void ReportSampleCache::end() {
  std::swap(previous_, current_);
  for (auto& entries : current_) entries.clear();  // keeps their capacity for the next window
}

c4d::JobSnapshot buildSnapshot(const Json& job, const ingest::RecentReports& record,
                               const SnapshotSources& sources, const DetectorConfig& config,
                               WallTime now, ReportSampleCache* cache) {
  c4d::JobSnapshot snap;
  snap.ns = record.ns;
  snap.name = record.name;
  snap.world_size = record.facts.world_size;
  snap.attempt = record.facts.attempt;
  snap.ranks.resize(static_cast<std::size_t>(std::max(0, snap.world_size)));
  if (cache != nullptr) cache->begin(snap.world_size);

  auto spec = parseTrainingJobSpec(job);
  std::int64_t procs = 1;
  if (spec) {
    const FaultTolerance& ft = spec->fault_tolerance;
    snap.thresholds.hang_seconds = static_cast<double>(ft.hang_seconds);
    snap.thresholds.slow_factor = ft.slow_factor;
    snap.thresholds.slow_noise_sigmas = ft.slow_noise_sigmas;
    snap.thresholds.confirmation_windows = static_cast<int>(std::max<std::int64_t>(
        1, ft.window_seconds /
               std::max<std::int64_t>(
                   1, std::chrono::duration_cast<std::chrono::seconds>(config.window).count())));
    procs = std::max<std::int64_t>(1, procsPerPod(*spec));
  }
  snap.thresholds.window_seconds = std::chrono::duration<double>(config.window).count();

  std::unordered_map<std::string, std::int32_t> node_index;
  // Consecutive ranks mostly share a node: the last one looked up is asked first.
  const std::string* last_node = nullptr;
  std::int32_t last_node_index = -1;
  auto nodeIndex = [&](const std::string& name) -> std::int32_t {
    if (name.empty()) return -1;
    if (last_node != nullptr && *last_node == name) return last_node_index;
    auto [it, added] = node_index.emplace(name, static_cast<std::int32_t>(snap.nodes.size()));
    last_node = &it->first;
    last_node_index = it->second;
    if (added) {
      c4d::NodeSnapshot n;
      n.name = name;
      std::optional<ingest::NodeRecord> rec;
      if (auto known = record.nodes.find(name); known != record.nodes.end()) {
        rec = known->second;
      } else if (sources.node_record) {
        rec = sources.node_record(name);
      }
      if (rec) {
        // Never later than a rank's silence: a rank silent while its node's batches have
        // stopped must not count as frozen (docs/c4d.md, "Telemetry gaps").
        const Duration silence = std::min(
            config.node_silence, std::chrono::duration_cast<Duration>(std::chrono::duration<double>(
                                     snap.thresholds.silence_seconds)));
        n.telemetry_arriving = now - rec->last_batch <= silence;
        c4d::applyNodeHealth(rec->health, n);
      } else {
        n.telemetry_arriving = false;
      }
      if (sources.node_history) {
        if (auto history = sources.node_history(name)) {
          for (const auto& r : *history) {
            if (now - r.time <= config.repeat_offender_window) n.repeat_offender_score += 1.0;
          }
        }
      }
      snap.nodes.push_back(std::move(n));
    }
    return it->second;
  };

  const std::string job_name = objectName(job);
  const std::string attempt = std::to_string(record.facts.attempt);
  // Ranks are visited in order, so a pod's ranks (replica index r / procs) come together: its
  // facts are read once, and the ranks' records are walked alongside.
  std::string pod_key = record.ns + "/" + job_name + "-";
  const std::size_t pod_key_prefix = pod_key.size();
  std::int64_t pod_index = -1;
  std::optional<PodFacts> pod;
  std::string pod_name;  // the rank's pod: its name, or the name it would have
  auto rec = record.ranks.begin();
  for (std::int32_t r = 0; r < snap.world_size; ++r) {
    c4d::RankSnapshot& rank = snap.ranks[static_cast<std::size_t>(r)];
    const std::int64_t index = r / procs;
    if (index != pod_index) {
      pod_index = index;
      pod.reset();
      pod_key.resize(pod_key_prefix);
      pod_key += std::to_string(index);
      if (sources.pod) pod = sources.pod(pod_key);
      // Only the current attempt's pod is this rank's.
      if (pod && pod->restart_attempt != attempt) pod.reset();
      pod_name = pod ? pod->name : pod_key.substr(record.ns.size() + 1);
    }
    rank.pod_state = pod ? pod->state : c4d::PodState::kGone;
    rank.pod = pod_name;
    const std::string* node = pod ? &pod->node : nullptr;

    while (rec != record.ranks.end() && rec->first < r) ++rec;
    if (rec != record.ranks.end() && rec->first == r) {
      const ingest::RecentRank& rr = rec->second;
      if (node == nullptr || node->empty()) node = &rr.identity.node;
      const std::size_t n = std::min(config.report_samples, rr.reports.size());
      rank.reports.reserve(n);
      for (std::size_t i = rr.reports.size() - n; i < rr.reports.size(); ++i) {
        const ingest::StoredReport& report = *rr.reports[i];
        c4d::ReportSample& sample = rank.reports.emplace_back();
        sample.time = report.header.received;  // operator clock: silence is measured to `now`
        sample.interval_ms = report.header.interval_ms;
        sample.communicators = report.header.communicators;
        sample.last = report.header.last;
        sample.connections = cache != nullptr
                                 ? cache->connections(r, rr.reports[i])
                                 : c4d::ConnSamples(c4d::convertConnections(report.connections));
      }
      if (rr.progress) {
        rank.progress = c4d::ProgressSample{rr.progress->state, rr.progress->step,
                                            fromUnixNanos(rr.progress->time_unix_ns),
                                            static_cast<double>(rr.progress->expected_seconds)};
      }
    }
    rank.node = node != nullptr ? nodeIndex(*node) : -1;
  }

  if (cache != nullptr) cache->end();
  for (const auto& a : record.anomalies) {
    if (a.id.rank < 0 || a.id.rank >= snap.world_size) continue;
    snap.ranks[static_cast<std::size_t>(a.id.rank)].anomalies.push_back(c4d::AnomalySample{
        a.kind, a.peer_rank, a.direction, a.age_us, fromUnixNanos(a.time_unix_ns)});
  }
  return snap;
}

Detector::Detector(ingest::ReportStore& store, Informer& jobs, Informer& pods, Informer& nodes,
                   NodeRemediator& remediator, EventRecorder& events, Clock& clock,
                   DetectorConfig config, metrics::Registry& registry, DetectorPeers peers)
    : store_(store),
      jobs_(jobs),
      pods_(pods),
      nodes_(nodes),
      remediator_(remediator),
      events_(events),
      clock_(clock),
      config_(config),
      log_("detector"),
      verdicts_(registry.counter("c4_c4d_verdicts_total",
                                 "Confirmed C4D verdicts by fault class and action taken.",
                                 {"class", "action"})),
      observations_(registry.counter("c4_c4d_observations_total",
                                     "C4D observations that are not faults (telemetry missing).",
                                     {"kind"})),
      detection_seconds_(registry.histogram(
          "c4_c4d_detection_seconds",
          "From the first window a fault was seen to its confirmation, by fault class.", {"class"},
          metrics::exponentialBuckets(0.5, 2.0, 10))),
      tick_seconds_(registry.histogram("c4_c4d_tick_duration_seconds",
                                       "Time of one analysis window of one job.", {},
                                       metrics::exponentialBuckets(0.0005, 2.0, 14))),
      deferred_(registry.counter(
          "c4_c4d_deferred_total",
          "Communication hangs and slow nodes left to C4P (a failed, degraded or suspect link "
          "on the connections' planned paths), by outcome: deferred, then cleared or acted.",
          {"outcome"})),
      peers_(peers),
      queue_(clock, defaultControllerRateLimiter(clock), &registry, "c4d") {
  // Every class's histogram and the observation counter from the start at 0, so increase() in
  // alerts and dashboards sees the first verdict of a class and the first observation.
  for (auto c : {c4d::FaultClass::kCrash, c4d::FaultClass::kCommHang, c4d::FaultClass::kNonCommHang,
                 c4d::FaultClass::kCommSlow, c4d::FaultClass::kNonCommSlow}) {
    detection_seconds_.labels({std::string(c4d::faultClassName(c))});
  }
  observations_.labels(
      {std::string(c4d::observationKindName(c4d::ObservationKind::kTelemetryMissing))});
  for (const char* outcome : {"deferred", "cleared", "acted"}) deferred_.labels({outcome});
  // Every change of a job (new, new attempt, phase, deleted) queues it; its window decides
  // whether it is analysed now.
  jobs_.addHandler([this](InformerEvent, const Json*, const Json& job) {
    queue_.add(objectKey(objectNamespace(job), objectName(job)));
  });
}

Detector::~Detector() {
  stop();
}

std::optional<DiagnosedFault> Detector::diagnosis(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = job_state_.find(key);
  if (it == job_state_.end() || !it->second.diagnosis_published) return std::nullopt;
  return it->second.diagnosis;
}

Result<ReconcileResult> Detector::reconcile(const std::string& key) {
  auto job = jobs_.store().get(key);
  if (!job) {  // deleted: forget it, and its recorded diagnosis
    bool recorded = false;
    {
      std::lock_guard lock(mu_);
      auto it = job_state_.find(key);
      recorded =
          (it != job_state_.end() && it->second.diagnosis_recorded) || recorded_.erase(key) > 0;
      job_state_.erase(key);
    }
    if (recorded) forgetRecordedDiagnosis(key);
    return ReconcileResult{};
  }
  JobState* state = nullptr;
  {
    std::lock_guard lock(mu_);
    state = &job_state_[key];  // only this key's reconcile touches or erases it
  }
  observeAttempt(key, *job, *state);
  restoreDiagnosis(key, *state);
  const MonoTime started = clock_.monoNow();
  if (state->next_window && started < *state->next_window) {
    return ReconcileResult{*state->next_window - started};  // not due: an event queued it early
  }
  // Due now; the next window follows this one's due time (fell behind: no burst).
  state->next_window = std::max(state->next_window.value_or(started) + config_.window, started);
  const bool known = analyse(key, *job, *state, clock_.wallNow());
  const MonoTime finished = clock_.monoNow();
  tick_seconds_.get().observe(std::chrono::duration<double>(finished - started).count());
  if (!known) {
    // Nothing in the store (no reports yet, or the job's data was dropped): nothing to keep but
    // a diagnosis (one restored from the cluster after a restart: the reports that led to it
    // went with the process that confirmed it). A running job is looked at again after a
    // window; any other waits for its next event.
    bool publish_pending = false;
    {
      std::lock_guard lock(mu_);
      if (!state->diagnosis) {
        job_state_.erase(key);
      } else if (!state->diagnosis_published) {
        publish_pending = true;
      }
    }
    if (publish_pending) publishDiagnosis(key, *state);
    if (jobStatus(*job).phase.value_or("") != "Running") return ReconcileResult{};
    return ReconcileResult{config_.window};
  }
  return ReconcileResult{std::max(Duration::zero(), *state->next_window - finished)};
}

void Detector::observeAttempt(const std::string& key, const Json& job, JobState& state) {
  const std::string uid = stringAtPath(job, "/metadata/uid");
  const std::int64_t attempt = jobStatus(job).attempt.value_or(0);
  if (state.uid == uid && state.attempt == static_cast<std::uint32_t>(attempt)) return;
  // The attempt a recorded diagnosis was for has ended (restarted, or the job was created
  // again): the record has done its work.
  if (state.diagnosis_recorded) forgetRecordedDiagnosis(key);
  state.diagnosis_recorded = false;
  state.analyser.reset();
  state.uid = uid;
  state.attempt = static_cast<std::uint32_t>(attempt);
  state.last_anomaly_seq = 0;
  state.replanned.clear();
  state.deferred.clear();
  state.windows = 0;
  std::lock_guard lock(mu_);
  state.diagnosis.reset();
  state.diagnosis_published = false;
  state.restart_retry_at.reset();
  state.restart_deferred_event = false;
}

bool Detector::allowFaultEvent(JobState& state, const std::string& verdict_key,
                               std::string& message) {
  const MonoTime now = clock_.monoNow();
  JobState::EventBudget& b = state.event_budget[verdict_key];
  while (!b.written.empty() && now - b.written.front() >= std::chrono::hours{1}) {
    b.written.pop_front();
  }
  const bool allowed =
      b.written.size() < kFaultEventsPerHour || now - b.written.back() >= kFlappingEventInterval;
  if (!allowed) {
    ++b.held;
    log_.debug("Event of a recurring fault held back", {{"fault", verdict_key}, {"held", b.held}});
    return false;
  }
  if (b.held > 0) {
    message =
        "recurring: " + std::to_string(b.held) +
        " Event(s) of this fault held back since the last one (at most " +
        std::to_string(kFaultEventsPerHour) + " an hour, then one per " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::minutes>(kFlappingEventInterval).count()) +
        " min); latest: " + message;
  }
  b.held = 0;
  b.written.push_back(now);
  return true;
}

void Detector::publishDiagnosis(const std::string& key, JobState& state) {
  std::string summary;
  {
    std::lock_guard lock(mu_);
    if (!state.diagnosis || state.diagnosis_published) return;
    summary = state.diagnosis->summary;
  }
  const MonoTime mono = clock_.monoNow();
  if (state.restart_retry_at && mono < *state.restart_retry_at) return;
  // Recorded before the restart is asked for (a failed record at the verdict is tried again).
  if (!state.diagnosis_recorded) recordHeldDiagnosis(key, state);
  std::string why;
  auto slot = remediator_.takeRestartSlot(key, state.attempt, why);
  if (!slot || !*slot) {
    state.restart_retry_at = mono + kRestartSlotRetry;
    if (!slot) {
      log_.warn("Restart budget not readable; the restart waits",
                {{"job", key}, {"error", slot.error().toString()}});
      return;
    }
    if (state.restart_deferred_event) {  // said once per diagnosis; the retries quietly
      log_.debug("Restart still deferred", {{"job", key}, {"why", why}});
    } else {
      log_.warn("Restart deferred: the restart budget is spent", {{"job", key}, {"why", why}});
      state.restart_deferred_event = true;
      if (auto job = jobs_.store().get(key)) {
        events_.record(
            *job, "Warning", "RestartDeferred",
            summary + "; not restarted yet: " + why + "; the restart is asked for again every " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::seconds>(kRestartSlotRetry).count()) +
                " s until the window has room (or restart the job by hand)");
      }
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (!state.diagnosis || state.diagnosis_published) return;
    state.diagnosis_published = true;
  }
  if (peers_.diagnoses != nullptr) peers_.diagnoses->diagnosed(key);
}

bool Detector::analyse(const std::string& key, const Json& job, JobState& state, WallTime now) {
  const std::string uid = stringAtPath(job, "/metadata/uid");
  const std::string phase = jobStatus(job).phase.value_or("");
  if (!store_.hasJob(objectNamespace(job), objectName(job))) return false;
  // Only a running attempt is analysed: pods starting, a restart in progress or a finished job
  // have no communication syndrome to read.
  if (phase != "Running") {
    state.analyser.reset();
    publishDiagnosis(key, state);  // nothing more can join it
    return true;
  }
  ++state.windows;
  // A diagnosis held since an earlier window is published after this window's verdicts join it.
  const bool publish_after = [&] {
    std::lock_guard lock(mu_);
    return state.diagnosis && !state.diagnosis_published && state.diagnosis_window < state.windows;
  }();
  ingest::RecentReportsQuery query;
  query.reports = config_.report_samples;
  query.anomalies_after_seq = state.last_anomaly_seq;
  auto reports = store_.recentReports(objectNamespace(job), objectName(job), query);
  if (!reports) return false;
  if (reports->facts.attempt != state.attempt || reports->facts.uid != uid) return true;
  SnapshotSources sources;
  // Pods and Nodes are read in place in the informer caches: a window copies none of them.
  sources.pod = [this, &state](const std::string& k) {
    std::optional<PodFacts> facts;
    pods_.store().read(k, [&](const Json& pod) { facts = state.pod_facts.of(k, pod); });
    return facts;
  };
  sources.node_history = [this](const std::string& n) {
    std::optional<std::vector<NodeFaultRecord>> history;
    std::string problem, rv;
    nodes_.store().read(n, [&](const Json& node) {
      history = faultHistoryOf(node, &problem);
      if (!problem.empty()) {
        rv = stringAt(fieldsOf(node, "metadata"), "resourceVersion").value_or("");
      }
    });
    if (history) checkFaultHistory(n, rv, problem);
    return history;
  };
  sources.node_record = [this](const std::string& n) { return store_.node(n); };
  const c4d::JobSnapshot snap = buildSnapshot(job, *reports, sources, config_, now, &state.samples);
  state.pod_facts.sweep();
  state.last_anomaly_seq = reports->anomaly_seq;
  auto result = state.analyser.tick(snap, now);
  if (!result) {
    log_.warn("Analysis skipped", {{"job", key}, {"error", result.error()}});
    return true;
  }
  if (config_.fault_hook && result->stats.pending_findings > 0 && result->verdicts.empty() &&
      result->active.empty() && !config_.fault_hook(kFailpointAfterFindingPending, key)) {
    return true;
  }
  auto spec = parseTrainingJobSpec(job);
  const bool dry_run = spec && spec->fault_tolerance.dry_run;
  for (const auto& v : result->verdicts) {
    // Which verdicts C4P answers for first (see the header): a hang, and a slowness that would
    // restart the job (a node named because all its slow links share it). A slow link (replan)
    // is C4P's anyway.
    const bool deferrable =
        v.fault_class == c4d::FaultClass::kCommHang ||
        (v.fault_class == c4d::FaultClass::kCommSlow && v.action != c4d::Action::kReplan);
    auto why = deferrable ? trafficExplanation(key, v, snap) : std::nullopt;
    if (!why) {
      act(key, job, state, v, dry_run);
      continue;
    }
    const bool hang = v.fault_class == c4d::FaultClass::kCommHang;
    state.deferred[v.key()] = JobState::Deferred{v, now, *why};
    deferred_.labels({"deferred"}).inc();
    const std::string culprit = describeCulprit(v.culprit);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f s",
                  std::chrono::duration<double>(config_.traffic_plan_grace).count());
    log_.warn("Fault left to C4P", {{"job", key},
                                    {"class", c4d::faultClassName(v.fault_class)},
                                    {"culprit", culprit},
                                    {"explanation", *why},
                                    {"evidence", v.evidence.message}});
    std::string message =
        std::string(c4d::faultClassName(v.fault_class)) + " of " + culprit + ": " +
        v.evidence.message + "; action " + std::string(c4d::actionName(v.action)) +
        (hang ? " deferred up to " + std::string(secs) + ": " : " held while C4P explains it: ") +
        *why;
    if (allowFaultEvent(state, v.key(), message)) {
      events_.record(job, "Warning", "FaultDetected", message);
    }
  }
  resolveDeferred(key, job, state, *result, snap, now, dry_run);
  escalatePersistentSlowLinks(key, job, state, *result, snap, now, dry_run);
  if (publish_after) publishDiagnosis(key, state);
  for (const auto& o : result->observations) {
    if (!o.is_new) continue;
    observations_.labels({std::string(c4d::observationKindName(o.kind))}).inc();
    events_.record(job, "Warning", "TelemetryMissing", o.message);
  }
  return true;
}

// A slow link C4P re-planned around (or that no plan covers) and that is still slow after
// replan_grace lies where no path choice helps: at an end of the link, its host link or NIC.
// The end with node-level evidence (NIC/RDMA/GPU fault or a repeat offender) is that node's NIC
// (cordon and restart); without such evidence the job restarts away from both ends, neither
// cordoned. A finding that cleared in the meantime (the re-plan worked) is forgotten.
void Detector::escalatePersistentSlowLinks(const std::string& key, const Json& job, JobState& state,
                                           const c4d::TickResult& result,
                                           const c4d::JobSnapshot& snap, WallTime now,
                                           bool dry_run) {
  for (auto it = state.replanned.begin(); it != state.replanned.end();) {
    auto active = std::find_if(result.active.begin(), result.active.end(),
                               [&](const c4d::Verdict& v) { return v.key() == it->first; });
    JobState::Replanned& r = it->second;
    if (active == result.active.end()) {
      // Cleared: forgotten once it stayed cleared for the grace (the re-plan worked); back
      // before that, it keeps its first verdict's clock.
      if (!r.cleared_at) r.cleared_at = now;
      if (now - *r.cleared_at >= config_.replan_grace) {
        it = state.replanned.erase(it);
      } else {
        ++it;
      }
      continue;
    }
    r.cleared_at.reset();
    // Slowness C4P explains (a link on the connection's paths failed, degraded or suspect) is
    // the remaining links' capacity, not a NIC: the clock starts again when the explanation ends,
    // also when it ended while the verdict was cleared (a link healed, C4P's hold expired, and
    // the connection is slow again on the path its weights returned to).
    const bool explained = trafficExplanation(key, *active, snap).has_value();
    if (explained || r.explained) r.since = now;
    r.explained = explained;
    const double since = std::chrono::duration<double>(now - r.since).count();
    if (now - r.since < config_.replan_grace) {
      ++it;
      continue;
    }
    it = state.replanned.erase(it);
    c4d::Verdict v = *active;
    auto suspect = [&](const std::string& name) {
      for (const auto& n : snap.nodes) {
        if (n.name == name) {
          return n.hasHardwareFault() ||
                 n.repeat_offender_score >= snap.thresholds.repeat_offender_min_score;
        }
      }
      return false;
    };
    const bool a = suspect(v.culprit.node), b = suspect(v.culprit.peer_node);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", since);
    std::string message = "still slow " + std::string(secs) +
                          " after C4P was asked to re-plan around it (" + v.evidence.message + ")";
    if (a != b) {
      const std::string node = a ? v.culprit.node : v.culprit.peer_node;
      v.culprit = c4d::Culprit{};
      v.culprit.kind = c4d::CulpritKind::kNode;
      v.culprit.node = node;
      v.node_evidence = true;
      v.action = c4d::Action::kCordonAndRestart;
      v.evidence.message = message + "; node " + node + " has node-level evidence: its NIC";
    } else {
      v.action = c4d::Action::kRestartOnly;
      v.evidence.message = message +
                           "; a NIC at either end: restart away from both, neither cordoned "
                           "without node-level evidence";
    }
    v.evidence.numbers.push_back({"secondsAfterReplan", since});
    act(key, job, state, v, dry_run);
  }
}

std::optional<std::string> Detector::trafficExplanation(const std::string& key,
                                                        const c4d::Verdict& v,
                                                        const c4d::JobSnapshot& snap) const {
  if (v.fault_class != c4d::FaultClass::kCommHang && v.fault_class != c4d::FaultClass::kCommSlow) {
    return std::nullopt;
  }
  const TrafficPlanPeer* traffic = peers_.traffic;
  if (traffic == nullptr || v.culprit.node.empty()) return std::nullopt;
  auto explain = [&](const std::string& k, const std::string& a, const std::string& b) {
    return traffic->explain(k, a, b);
  };
  if (v.culprit.kind == c4d::CulpritKind::kLink) {
    if (v.culprit.peer_node.empty()) return std::nullopt;
    return explain(key, v.culprit.node, v.culprit.peer_node);
  }
  // A node named only because every hung or slow link of the job touches it (no node-level
  // evidence): C4P explains it when it explains every one of those links.
  if (v.culprit.kind != c4d::CulpritKind::kNode || v.node_evidence) return std::nullopt;
  std::set<std::string> peers;
  for (std::int32_t r : v.ranks) {
    if (r < 0 || static_cast<std::size_t>(r) >= snap.ranks.size()) continue;
    const std::int32_t n = snap.ranks[static_cast<std::size_t>(r)].node;
    if (n < 0 || static_cast<std::size_t>(n) >= snap.nodes.size()) continue;
    const std::string& name = snap.nodes[static_cast<std::size_t>(n)].name;
    if (name != v.culprit.node) peers.insert(name);
  }
  if (peers.empty()) return std::nullopt;
  std::string first;
  for (const auto& peer : peers) {
    auto why = explain(key, v.culprit.node, peer);
    if (!why) return std::nullopt;
    if (first.empty()) first = *why;
  }
  if (peers.size() > 1) {
    first += " (and the paths to its " + std::to_string(peers.size() - 1) + " other peer(s))";
  }
  return first;
}

// Verdicts left to C4P: one that cleared is forgotten (Event FaultCleared); a hang that outlasts
// the grace, or any verdict C4P no longer explains, is acted on as the verdict says. Slowness is
// held as long as C4P explains it (the remaining links are slower; that lasts as the link does).
void Detector::resolveDeferred(const std::string& key, const Json& job, JobState& state,
                               const c4d::TickResult& result, const c4d::JobSnapshot& snap,
                               WallTime now, bool dry_run) {
  for (auto it = state.deferred.begin(); it != state.deferred.end();) {
    auto active = std::find_if(result.active.begin(), result.active.end(),
                               [&](const c4d::Verdict& v) { return v.key() == it->first; });
    const double since = std::chrono::duration<double>(now - it->second.since).count();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", since);
    const std::string culprit = describeCulprit(it->second.verdict.culprit);
    if (active == result.active.end()) {
      deferred_.labels({"cleared"}).inc();
      log_.info("Fault left to C4P cleared", {{"job", key}, {"culprit", culprit}});
      std::string message = std::string(c4d::faultClassName(it->second.verdict.fault_class)) +
                            " of " + culprit + " cleared " + secs + " after it was left to C4P (" +
                            it->second.why + "); nothing done";
      if (allowFaultEvent(state, it->first, message)) {
        events_.record(job, "Normal", "FaultCleared", message);
      }
      it = state.deferred.erase(it);
      continue;
    }
    auto why = trafficExplanation(key, *active, snap);
    const bool expired = active->fault_class == c4d::FaultClass::kCommHang &&
                         now - it->second.since >= config_.traffic_plan_grace;
    if (why && !expired) {
      it->second.why = *why;
      ++it;
      continue;
    }
    c4d::Verdict v = *active;
    v.evidence.message += expired ? "; still hung " + std::string(secs) +
                                        " after it was left to C4P (" + it->second.why + ")"
                                  : "; C4P no longer explains it (it was: " + it->second.why + ")";
    v.evidence.numbers.push_back({"secondsLeftToC4P", since});
    it = state.deferred.erase(it);
    deferred_.labels({"acted"}).inc();
    act(key, job, state, v, dry_run);
  }
}

bool Detector::stragglerWorthRestart(const Json& job, const c4d::Verdict& v, WallTime now) const {
  if (v.slowdown < config_.straggler_min_slowdown) return false;
  // A restart: the job's measured loss per restart (or the default) plus the work since the
  // last checkpoint, which is computed again.
  double restart = std::chrono::duration<double>(config_.restart_cost).count();
  const TrainingJobStatus status = jobStatus(job);
  const std::int64_t restarts = status.restarts.value_or(0);
  const std::int64_t lost = status.goodput ? status.goodput->lost_seconds.value_or(0) : 0;
  if (restarts > 0 && lost > 0) restart = static_cast<double>(lost) / static_cast<double>(restarts);
  if (auto t = parseRfc3339(status.last_checkpoint ? status.last_checkpoint->time.value_or("")
                                                   : std::string{})) {
    restart += std::max(0.0, std::chrono::duration<double>(now - *t).count());
  } else if (auto since = parseRfc3339(status.phase_since.value_or(""))) {
    restart += std::max(0.0, std::chrono::duration<double>(now - *since).count());
  }
  // Running on: this share of every second is lost until the job ends (horizon).
  const double horizon = std::chrono::duration<double>(config_.straggler_horizon).count();
  const double keep = (1.0 - 1.0 / v.slowdown) * horizon;
  return keep > restart;
}

void Detector::act(const std::string& key, const Json& job, JobState& state, const c4d::Verdict& v,
                   bool dry_run) {
  const std::string fault_class(c4d::faultClassName(v.fault_class));
  const WallTime now = clock_.wallNow();
  c4d::Action action = v.action;
  if (v.fault_class == c4d::FaultClass::kNonCommSlow && action == c4d::Action::kEventOnly &&
      stragglerWorthRestart(job, v, now)) {
    action = c4d::Action::kCordonAndRestart;
  }
  const std::string action_name(c4d::actionName(action));
  verdicts_.labels({fault_class, dry_run ? "dryRun" : action_name}).inc();
  detection_seconds_.labels({fault_class})
      .observe(std::chrono::duration<double>(v.confirmed_at - v.first_seen).count());

  std::vector<std::string> nodes;
  if (v.culprit.kind == c4d::CulpritKind::kNode || v.culprit.kind == c4d::CulpritKind::kRank) {
    if (!v.culprit.node.empty()) nodes.push_back(v.culprit.node);
  } else if (v.culprit.kind == c4d::CulpritKind::kLink) {
    if (!v.culprit.node.empty()) nodes.push_back(v.culprit.node);
    if (!v.culprit.peer_node.empty()) nodes.push_back(v.culprit.peer_node);
  }
  const std::string culprit = describeCulprit(v.culprit);
  // A node the evidence names (a link implicates both ends weakly, a crash without node evidence
  // implicates nobody).
  const bool node_culprit =
      v.culprit.kind != c4d::CulpritKind::kLink &&
      (v.fault_class != c4d::FaultClass::kCrash || v.node_evidence || v.repeat_offender);
  // A restart is held, and recorded in the cluster, before anything else is said or done about
  // the fault: an operator killed after this point leaves the restart to its successor.
  if (!dry_run &&
      (action == c4d::Action::kCordonAndRestart || action == c4d::Action::kRestartOnly)) {
    DiagnosedFault d;
    d.attempt = state.attempt;
    d.fault_class = fault_class;
    d.key = v.key();
    d.summary = fault_class + " of " + culprit + ": " + v.evidence.message;
    d.keys = {d.key};
    d.nodes = node_culprit || v.culprit.kind == c4d::CulpritKind::kLink
                  ? nodes
                  : std::vector<std::string>{};
    if (action == c4d::Action::kCordonAndRestart && node_culprit) d.cordon_nodes = d.nodes;
    d.rank = v.culprit.rank;
    d.detection_seconds = std::chrono::duration<double>(v.confirmed_at - v.first_seen).count();
    holdDiagnosis(key, state, std::move(d), culprit);
  }
  std::string message = fault_class + " of " + culprit + ": " + v.evidence.message + "; action " +
                        action_name + (dry_run ? " (dry run: nothing done)" : "");
  log_.warn("Fault detected", {{"job", key},
                               {"class", fault_class},
                               {"culprit", culprit},
                               {"action", action_name},
                               {"dryRun", dry_run},
                               {"evidence", v.evidence.message}});
  if (std::string event_message = message; allowFaultEvent(state, v.key(), event_message)) {
    events_.record(job, "Warning", "FaultDetected", event_message);
  }

  // The node's Event and history: only a node the evidence names. The history, which makes a
  // node a repeat offender (relaxed thresholds later), is written only for a verdict C4 acts on:
  // a dry run or an Event-only verdict reports and leaves the Node as it is.
  const bool acted_on = !dry_run && action != c4d::Action::kEventOnly;
  if (node_culprit) {
    for (const auto& n : nodes) {
      auto node = nodes_.store().get(n);
      if (!node) continue;
      events_.record(*node, "Warning", "FaultSuspected",
                     "TrainingJob " + key + ": " + fault_class + ": " + v.evidence.message);
      if (acted_on) recordNodeFault(n, {now, fault_class, key});
    }
  }
  if (dry_run) return;
  if (action == c4d::Action::kReplan && v.culprit.kind == c4d::CulpritKind::kLink &&
      !v.culprit.node.empty() && !v.culprit.peer_node.empty()) {
    // Escalated if still slow after replan_grace (a verdict back after clearing keeps its clock).
    state.replanned.try_emplace(v.key(), JobState::Replanned{now, std::nullopt, false});
    if (peers_.traffic != nullptr) peers_.traffic->replan(key, v.culprit.node, v.culprit.peer_node);
    return;
  }
}

void Detector::holdDiagnosis(const std::string& key, JobState& state, DiagnosedFault d,
                             const std::string& culprit) {
  bool joined_published = false;
  {
    std::lock_guard lock(mu_);
    if (!state.diagnosis) {
      state.diagnosis = std::move(d);
      state.diagnosis_window = state.windows;
    } else {
      // Another fault of the same attempt: it joins the restart, which avoids its culprits too.
      DiagnosedFault& held = *state.diagnosis;
      if (std::find(held.keys.begin(), held.keys.end(), d.key) != held.keys.end()) return;
      held.keys.push_back(d.key);
      auto add = [](std::vector<std::string>& to, const std::vector<std::string>& from) {
        for (const auto& n : from) {
          if (std::find(to.begin(), to.end(), n) == to.end()) to.push_back(n);
        }
      };
      add(held.nodes, d.nodes);
      add(held.cordon_nodes, d.cordon_nodes);
      if (held.keys.size() <= kMaxJoinedInSummary) {
        held.summary += "; and " + d.summary;
      } else if (held.keys.size() == kMaxJoinedInSummary + 1) {
        held.summary += "; and more verdicts (see the FaultDetected Events)";
      }
      joined_published = state.diagnosis_published;
      log_.info("Fault joins the pending restart", {{"job", key}, {"culprit", culprit}});
    }
  }
  recordHeldDiagnosis(key, state);
  // Published already: the controller looks again (unless it restarted the job meanwhile).
  if (joined_published && peers_.diagnoses != nullptr) peers_.diagnoses->diagnosed(key);
}

void Detector::recordHeldDiagnosis(const std::string& key, JobState& state) {
  RecordedDiagnosis record;
  {
    std::lock_guard lock(mu_);
    if (!state.diagnosis) return;
    record = {key, state.uid, state.attempt, clock_.wallNow(), encodeDiagnosis(*state.diagnosis)};
  }
  if (auto written = remediator_.recordDiagnosis(record); !written) {
    // Held in memory all the same; tried again when it is published.
    state.diagnosis_recorded = false;
    log_.warn(
        "Diagnosis not recorded in the cluster (a restart of the operator before the "
        "job's restart would lose it)",
        {{"job", key}, {"error", written.error()}});
    return;
  }
  state.diagnosis_recorded = true;
}

void Detector::forgetRecordedDiagnosis(const std::string& key) {
  if (auto forgotten = remediator_.forgetDiagnosis(key); !forgotten) {
    // It ages out (NodeRemediator::kRecordedDiagnosisTtl) or is found stale by the next process.
    log_.warn("Recorded diagnosis not removed", {{"job", key}, {"error", forgotten.error()}});
  }
}

void Detector::restoreDiagnosis(const std::string& key, JobState& state) {
  // Read once, on the first reconcile (the worker's thread; not under mu_, which the
  // controller's diagnosis() takes).
  bool loaded = false;
  {
    std::lock_guard lock(mu_);
    loaded = recorded_loaded_;
  }
  if (!loaded) {
    const MonoTime now = clock_.monoNow();
    if (recorded_retry_at_ && now < *recorded_retry_at_) return;
    std::size_t malformed = 0;
    auto list = remediator_.recordedDiagnoses(&malformed);
    if (!list) {
      recorded_retry_at_ = now + kRecordedRetry;
      log_.warn("Recorded diagnoses not readable; tried again in 10 s", {{"error", list.error()}});
      return;
    }
    if (malformed > 0) {
      log_.warn("Recorded diagnoses of the wrong shape ignored", {{"entries", malformed}});
    }
    std::lock_guard lock(mu_);
    for (auto& r : *list) recorded_[r.job] = std::move(r);
    recorded_loaded_ = true;
  }
  std::optional<RecordedDiagnosis> record;
  {
    std::lock_guard lock(mu_);
    auto it = recorded_.find(key);
    if (it == recorded_.end()) return;
    record = std::move(it->second);
    recorded_.erase(it);
  }
  std::string problem;
  std::optional<DiagnosedFault> d;
  if (record->uid != state.uid || record->attempt != state.attempt) {
    problem = "its attempt has ended";
  } else if (d = decodeDiagnosis(record->diagnosis, problem); d && d->attempt != record->attempt) {
    problem = "its attempt differs from the record's";
    d.reset();
  }
  if (!d) {
    log_.info("Recorded diagnosis dropped", {{"job", key}, {"why", problem}});
    forgetRecordedDiagnosis(key);
    return;
  }
  log_.warn(
      "Diagnosis restored from the cluster: the restart a previous operator decided "
      "follows now",
      {{"job", key}, {"attempt", d->attempt}, {"summary", d->summary}});
  {
    std::lock_guard lock(mu_);
    if (state.diagnosis) return;  // one of this process's own came first
    state.diagnosis = std::move(*d);
    state.diagnosis_window = state.windows;
  }
  state.diagnosis_recorded = true;
  // Confirmed already: nothing waits for more verdicts to join.
  publishDiagnosis(key, state);
}

void Detector::recordNodeFault(const std::string& node_name, const NodeFaultRecord& record) {
  if (auto written = remediator_.recordFault(node_name, record); !written) {
    log_.warn("Node fault history not written", {{"node", node_name}, {"error", written.error()}});
  }
}

void Detector::checkFaultHistory(const std::string& name, const std::string& rv,
                                 const std::string& problem) {
  {
    std::lock_guard lock(mu_);
    if (problem.empty()) {
      history_reported_.erase(name);
      return;
    }
    auto [it, added] = history_reported_.try_emplace(name, rv);
    if (!added && it->second == rv) return;
    it->second = rv;
  }
  log_.warn("Malformed fault history ignored", {{"node", name}, {"problem", problem}});
  // The Event regards the Node: a copy of it, only now (once per malformed resourceVersion).
  auto node = nodes_.store().get(name);
  if (!node) return;
  events_.record(*node, "Warning", "InvalidFaultHistory",
                 std::string("annotation ") + kFaultHistoryAnnotation + " is malformed (" +
                     problem +
                     "); its malformed entries are ignored and dropped with the next fault "
                     "recorded");
}

void Detector::start() {
  std::lock_guard lock(lifecycle_mu_);
  if (stopped_ || worker_.joinable()) return;
  for (const auto& job : jobs_.store().list()) {
    queue_.add(objectKey(objectNamespace(job), objectName(job)));
  }
  worker_ = std::thread([this] { worker(); });
}

void Detector::stop() {
  {
    std::lock_guard lock(lifecycle_mu_);
    stopped_ = true;
    queue_.shutDown();
  }
  if (worker_.joinable()) worker_.join();
}

void Detector::worker() {
  for (;;) {
    auto key = queue_.get();
    if (!key) return;
    Result<ReconcileResult> result = makeError(ErrorCode::kInternal, "not run");
    try {
      result = reconcile(*key);
    } catch (const std::exception& e) {  // no exception leaves the worker
      result = makeError(ErrorCode::kInternal, std::string("analysis threw: ") + e.what());
    }
    if (!result) {
      log_.warn("Analysis failed, will retry", {{"job", *key}, {"error", result.error()}});
      queue_.addRateLimited(*key);
    } else {
      queue_.forget(*key);
      if (result->requeue_after) queue_.addAfter(*key, *result->requeue_after);
    }
    queue_.done(*key);
  }
}

}  // namespace c4::op
