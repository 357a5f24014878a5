#include "operator/detection/detector.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "operator/trainingjob/api.h"

namespace c4::op {
namespace {

std::string stringAtPath(const Json& j, const char* pointer) {
  const Json::json_pointer p(pointer);
  if (!j.contains(p)) return {};
  const Json& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : std::string{};
}

c4d::PodState podStateOf(const std::optional<Json>& pod) {
  if (!pod) return c4d::PodState::kGone;
  if (pod->contains(Json::json_pointer("/metadata/deletionTimestamp"))) {
    return c4d::PodState::kGone;
  }
  const std::string phase = stringAtPath(*pod, "/status/phase");
  if (phase == "Running") return c4d::PodState::kRunning;
  if (phase == "Succeeded") return c4d::PodState::kSucceeded;
  if (phase == "Failed") return c4d::PodState::kFailed;
  if (phase == "Pending") return c4d::PodState::kPending;
  return c4d::PodState::kUnknown;
}

std::int64_t intAt(const Json& j, const char* pointer, std::int64_t fallback) {
  const Json::json_pointer p(pointer);
  if (!j.contains(p)) return fallback;
  const Json& v = j.at(p);
  return v.is_number_integer() ? v.get<std::int64_t>() : fallback;
}

std::string describeCulprit(const c4d::Culprit& c) {
  switch (c.kind) {
    case c4d::CulpritKind::kNode:
      return "node " + c.node;
    case c4d::CulpritKind::kLink:
      return "link " + c.node + "<->" + c.peerNode;
    case c4d::CulpritKind::kRank:
      return "rank " + std::to_string(c.rank) + " on node " + c.node;
  }
  return "unknown";
}

}  // namespace

std::vector<NodeFaultRecord> faultHistoryOf(const Json& node) {
  std::vector<NodeFaultRecord> out;
  const std::string text = annotationOf(node, kFaultHistoryAnnotation);
  if (text.empty()) return out;
  Json parsed = Json::parse(text, nullptr, false);
  if (!parsed.is_array()) return out;
  for (const auto& e : parsed) {
    if (!e.is_object()) continue;
    auto t = parseRfc3339(e.value("time", std::string{}));
    if (!t) continue;
    out.push_back({*t, e.value("class", std::string{}), e.value("job", std::string{})});
  }
  return out;
}

std::string appendFaultHistory(const Json& node, const NodeFaultRecord& added,
                               std::size_t max_entries) {
  auto history = faultHistoryOf(node);
  history.push_back(added);
  if (history.size() > max_entries) {
    history.erase(history.begin(),
                  history.begin() + static_cast<std::ptrdiff_t>(history.size() - max_entries));
  }
  Json out = Json::array();
  for (const auto& r : history) {
    out.push_back({{"time", formatRfc3339(r.time)}, {"class", r.fault_class}, {"job", r.job}});
  }
  return out.dump();
}

c4d::JobSnapshot buildSnapshot(const Json& job, const ingest::JobRecord& record,
                               const SnapshotSources& sources, const DetectorConfig& config,
                               WallTime now, std::int64_t* last_anomaly_ns) {
  c4d::JobSnapshot snap;
  snap.ns = record.ns;
  snap.name = record.name;
  snap.worldSize = record.facts.world_size;
  snap.attempt = record.facts.attempt;
  snap.ranks.resize(static_cast<std::size_t>(std::max(0, snap.worldSize)));

  auto spec = parseTrainingJobSpec(job);
  std::int64_t procs = 1;
  if (spec) {
    const FaultTolerance& ft = spec->fault_tolerance;
    snap.thresholds.hangSeconds = static_cast<double>(ft.hang_seconds);
    snap.thresholds.slowFactor = ft.slow_factor;
    snap.thresholds.confirmationWindows = static_cast<int>(std::max<std::int64_t>(
        1, ft.window_seconds /
               std::max<std::int64_t>(
                   1, std::chrono::duration_cast<std::chrono::seconds>(config.window).count())));
    procs = std::max<std::int64_t>(1, procsPerPod(*spec));
  }
  snap.thresholds.windowSeconds = std::chrono::duration<double>(config.window).count();

  std::map<std::string, std::int32_t> node_index;
  auto nodeIndex = [&](const std::string& name) -> std::int32_t {
    if (name.empty()) return -1;
    auto [it, added] = node_index.emplace(name, static_cast<std::int32_t>(snap.nodes.size()));
    if (added) {
      c4d::NodeSnapshot n;
      n.name = name;
      if (sources.node_record) {
        if (auto rec = sources.node_record(name)) {
          n.telemetryArriving = now - rec->last_batch <= config.node_silence;
          c4d::applyNodeHealth(rec->health, n);
        } else {
          n.telemetryArriving = false;
        }
      }
      if (sources.node) {
        if (auto node = sources.node(name)) {
          for (const auto& r : faultHistoryOf(*node)) {
            if (now - r.time <= config.repeat_offender_window) n.repeatOffenderScore += 1.0;
          }
        }
      }
      snap.nodes.push_back(std::move(n));
    }
    return it->second;
  };

  const std::string job_name = objectName(job);
  std::map<std::int64_t, std::optional<Json>> pods;  // replica index -> pod
  for (std::int32_t r = 0; r < snap.worldSize; ++r) {
    c4d::RankSnapshot& rank = snap.ranks[static_cast<std::size_t>(r)];
    const std::int64_t index = r / procs;
    auto pod_it = pods.find(index);
    if (pod_it == pods.end()) {
      std::optional<Json> pod;
      if (sources.pod) pod = sources.pod(record.ns + "/" + job_name + "-" + std::to_string(index));
      // Only the current attempt's pod is this rank's.
      if (pod && labelOf(*pod, labels::kRestartAttempt) != std::to_string(record.facts.attempt)) {
        pod.reset();
      }
      pod_it = pods.emplace(index, std::move(pod)).first;
    }
    const std::optional<Json>& pod = pod_it->second;
    rank.podState = podStateOf(pod);
    rank.pod = pod ? objectName(*pod) : job_name + "-" + std::to_string(index);
    std::string node = pod ? stringAtPath(*pod, "/spec/nodeName") : std::string{};

    auto rec = record.ranks.find(r);
    if (rec != record.ranks.end()) {
      const ingest::RankRecord& rr = rec->second;
      if (node.empty()) node = rr.identity.node;
      const std::size_t n = std::min(config.report_samples, rr.reports.size());
      for (std::size_t i = rr.reports.size() - n; i < rr.reports.size(); ++i) {
        const ingest::RankHeader& h = rr.reports[i];
        c4d::ReportSample sample;
        sample.time = h.received;  // operator clock: silence is measured against `now`
        sample.intervalMs = h.interval_ms;
        for (const auto& [id, history] : rr.connections) {
          for (const auto& s : history.samples) {
            if (s.report_seq == h.seq) {
              sample.connections.push_back(c4d::ConnSample::from(s.stats));
              break;
            }
          }
        }
        rank.reports.push_back(std::move(sample));
      }
      if (rr.progress) {
        rank.progress = c4d::ProgressSample{rr.progress->state, rr.progress->step,
                                            fromUnixNanos(rr.progress->timeUnixNs)};
      }
    }
    rank.node = nodeIndex(node);
  }

  std::int64_t newest = last_anomaly_ns != nullptr ? *last_anomaly_ns : 0;
  for (const auto& a : record.anomalies) {
    if (last_anomaly_ns != nullptr && a.timeUnixNs <= *last_anomaly_ns) continue;
    newest = std::max(newest, a.timeUnixNs);
    if (a.id.rank < 0 || a.id.rank >= snap.worldSize) continue;
    snap.ranks[static_cast<std::size_t>(a.id.rank)].anomalies.push_back(
        c4d::AnomalySample{a.kind, a.peerRank, a.direction, a.ageUs, fromUnixNanos(a.timeUnixNs)});
  }
  if (last_anomaly_ns != nullptr) *last_anomaly_ns = newest;
  return snap;
}

Detector::Detector(ingest::ReportStore& store, Informer& jobs, Informer& pods, Informer& nodes,
                   KubeClient& client, EventRecorder& events, Clock& clock, DetectorConfig config,
                   metrics::Registry& registry)
    : store_(store),
      jobs_(jobs),
      pods_(pods),
      nodes_(nodes),
      client_(client),
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
                                       "Time of one analysis window over every job.", {},
                                       metrics::exponentialBuckets(0.0005, 2.0, 14))),
      deferred_(registry.counter(
          "c4_c4d_deferred_total",
          "Communication hangs and slow nodes left to C4P (a failed, degraded or suspect link "
          "on the connections' planned paths), by outcome: deferred, then cleared or acted.",
          {"outcome"})) {
  // Every class's histogram and the observation counter from the start at 0, so increase() in
  // alerts and dashboards sees the first verdict of a class and the first observation.
  for (auto c : {c4d::FaultClass::kCrash, c4d::FaultClass::kCommHang, c4d::FaultClass::kNonCommHang,
                 c4d::FaultClass::kCommSlow, c4d::FaultClass::kNonCommSlow}) {
    detection_seconds_.labels({std::string(c4d::faultClassName(c))});
  }
  observations_.labels(
      {std::string(c4d::observationKindName(c4d::ObservationKind::kTelemetryMissing))});
  for (const char* outcome : {"deferred", "cleared", "acted"}) deferred_.labels({outcome});
}

Detector::~Detector() {
  stop();
}

void Detector::setEnqueue(std::function<void(const std::string& key)> enqueue) {
  std::lock_guard lock(mu_);
  enqueue_ = std::move(enqueue);
}

std::optional<DiagnosedFault> Detector::diagnosis(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = job_state_.find(key);
  if (it == job_state_.end()) return std::nullopt;
  return it->second.diagnosis;
}

void Detector::tick() {
  const MonoTime started = clock_.monoNow();
  const WallTime now = clock_.wallNow();
  std::vector<std::string> keys = store_.jobKeys();
  std::set<std::string> live(keys.begin(), keys.end());
  for (const auto& key : keys) {
    auto job = jobs_.store().get(key);
    if (!job) continue;
    JobState* state = nullptr;
    {
      std::lock_guard lock(mu_);
      state = &job_state_[key];
    }
    analyse(key, *job, *state, now);
  }
  {
    std::lock_guard lock(mu_);
    for (auto it = job_state_.begin(); it != job_state_.end();) {
      it = live.contains(it->first) ? std::next(it) : job_state_.erase(it);
    }
  }
  tick_seconds_.get().observe(std::chrono::duration<double>(clock_.monoNow() - started).count());
}

void Detector::analyse(const std::string& key, const Json& job, JobState& state, WallTime now) {
  const std::string uid = stringAtPath(job, "/metadata/uid");
  const std::int64_t attempt = intAt(job, "/status/attempt", 0);
  const std::string phase = stringAtPath(job, "/status/phase");
  if (state.uid != uid || state.attempt != static_cast<std::uint32_t>(attempt)) {
    state.analyser.reset();
    state.uid = uid;
    state.attempt = static_cast<std::uint32_t>(attempt);
    state.last_anomaly_ns = 0;
    state.replanned.clear();
    state.deferred.clear();
    std::lock_guard lock(mu_);
    state.diagnosis.reset();
  }
  // Only a running attempt is analysed: pods starting, a restart in progress or a finished job
  // have no communication syndrome to read.
  if (phase != "Running") {
    state.analyser.reset();
    return;
  }
  std::optional<c4d::JobSnapshot> snap;
  store_.readJob(objectNamespace(job), objectName(job), [&](const ingest::JobRecord& record) {
    if (record.facts.attempt != state.attempt || record.facts.uid != uid) return;
    SnapshotSources sources;
    sources.pod = [this](const std::string& k) { return pods_.store().get(k); };
    sources.node = [this](const std::string& n) { return nodes_.store().get(n); };
    sources.node_record = {};  // filled below: the store's lock is not re-entrant
    snap = buildSnapshot(job, record, sources, config_, now, &state.last_anomaly_ns);
  });
  if (!snap) return;
  for (auto& n : snap->nodes) {
    if (auto rec = store_.node(n.name)) {
      n.telemetryArriving = now - rec->last_batch <= config_.node_silence;
      c4d::applyNodeHealth(rec->health, n);
    } else {
      n.telemetryArriving = false;
    }
  }
  auto result = state.analyser.tick(*snap, now);
  if (!result) {
    log_.warn("Analysis skipped", {{"job", key}, {"error", result.error()}});
    return;
  }
  auto spec = parseTrainingJobSpec(job);
  const bool dry_run = spec && spec->fault_tolerance.dry_run;
  for (const auto& v : result->verdicts) {
    // Which verdicts C4P answers for first (see the header): a hang, and a slowness that would
    // restart the job (a node named because all its slow links share it). A slow link (replan)
    // is C4P's anyway.
    const bool deferrable =
        v.faultClass == c4d::FaultClass::kCommHang ||
        (v.faultClass == c4d::FaultClass::kCommSlow && v.action != c4d::Action::kReplan);
    auto why = deferrable ? trafficExplanation(key, v, *snap) : std::nullopt;
    if (!why) {
      act(key, job, state, v, dry_run);
      continue;
    }
    const bool hang = v.faultClass == c4d::FaultClass::kCommHang;
    state.deferred[v.key()] = JobState::Deferred{v, now, *why};
    deferred_.labels({"deferred"}).inc();
    const std::string culprit = describeCulprit(v.culprit);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f s",
                  std::chrono::duration<double>(config_.traffic_plan_grace).count());
    log_.warn("Fault left to C4P", {{"job", key},
                                    {"class", c4d::faultClassName(v.faultClass)},
                                    {"culprit", culprit},
                                    {"explanation", *why},
                                    {"evidence", v.evidence.message}});
    events_.record(job, "Warning", "FaultDetected",
                   std::string(c4d::faultClassName(v.faultClass)) + " of " + culprit + ": " +
                       v.evidence.message + "; action " + std::string(c4d::actionName(v.action)) +
                       (hang ? " deferred up to " + std::string(secs) + ": "
                             : " held while C4P explains it: ") +
                       *why);
  }
  resolveDeferred(key, job, state, *result, *snap, now, dry_run);
  escalatePersistentSlowLinks(key, job, state, *result, *snap, now, dry_run);
  for (const auto& o : result->observations) {
    if (!o.isNew) continue;
    observations_.labels({std::string(c4d::observationKindName(o.kind))}).inc();
    events_.record(job, "Warning", "TelemetryMissing", o.message);
  }
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
    if (active == result.active.end()) {
      it = state.replanned.erase(it);
      continue;
    }
    // Slowness C4P explains (a link on the connection's paths failed, degraded or suspect) is
    // the remaining links' capacity, not a NIC: the clock starts again when the explanation ends.
    if (trafficExplanation(key, *active, snap)) it->second = now;
    const double since = std::chrono::duration<double>(now - it->second).count();
    if (now - it->second < config_.replan_grace) {
      ++it;
      continue;
    }
    it = state.replanned.erase(it);
    c4d::Verdict v = *active;
    auto suspect = [&](const std::string& name) {
      for (const auto& n : snap.nodes) {
        if (n.name == name) {
          return n.hasHardwareFault() ||
                 n.repeatOffenderScore >= snap.thresholds.repeatOffenderMinScore;
        }
      }
      return false;
    };
    const bool a = suspect(v.culprit.node), b = suspect(v.culprit.peerNode);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", since);
    std::string message = "still slow " + std::string(secs) +
                          " after C4P was asked to re-plan around it (" + v.evidence.message + ")";
    if (a != b) {
      const std::string node = a ? v.culprit.node : v.culprit.peerNode;
      v.culprit = c4d::Culprit{};
      v.culprit.kind = c4d::CulpritKind::kNode;
      v.culprit.node = node;
      v.nodeEvidence = true;
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
  if (v.faultClass != c4d::FaultClass::kCommHang && v.faultClass != c4d::FaultClass::kCommSlow) {
    return std::nullopt;
  }
  TrafficExplanation explain;
  {
    std::lock_guard lock(mu_);
    explain = explain_;
  }
  if (!explain || v.culprit.node.empty()) return std::nullopt;
  if (v.culprit.kind == c4d::CulpritKind::kLink) {
    if (v.culprit.peerNode.empty()) return std::nullopt;
    return explain(key, v.culprit.node, v.culprit.peerNode);
  }
  // A node named only because every hung or slow link of the job touches it (no node-level
  // evidence): C4P explains it when it explains every one of those links.
  if (v.culprit.kind != c4d::CulpritKind::kNode || v.nodeEvidence) return std::nullopt;
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
      events_.record(job, "Normal", "FaultCleared",
                     std::string(c4d::faultClassName(it->second.verdict.faultClass)) + " of " +
                         culprit + " cleared " + secs + " after it was left to C4P (" +
                         it->second.why + "); nothing done");
      it = state.deferred.erase(it);
      continue;
    }
    auto why = trafficExplanation(key, *active, snap);
    const bool expired = active->faultClass == c4d::FaultClass::kCommHang &&
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
  const std::int64_t restarts = intAt(job, "/status/restarts", 0);
  const std::int64_t lost = intAt(job, "/status/goodput/lostSeconds", 0);
  if (restarts > 0 && lost > 0) restart = static_cast<double>(lost) / static_cast<double>(restarts);
  if (auto t = parseRfc3339(stringAtPath(job, "/status/lastCheckpoint/time"))) {
    restart += std::max(0.0, std::chrono::duration<double>(now - *t).count());
  } else if (auto since = parseRfc3339(stringAtPath(job, "/status/phaseSince"))) {
    restart += std::max(0.0, std::chrono::duration<double>(now - *since).count());
  }
  // Running on: this share of every second is lost until the job ends (horizon).
  const double horizon = std::chrono::duration<double>(config_.straggler_horizon).count();
  const double keep = (1.0 - 1.0 / v.slowdown) * horizon;
  return keep > restart;
}

void Detector::act(const std::string& key, const Json& job, JobState& state, const c4d::Verdict& v,
                   bool dry_run) {
  const std::string fault_class(c4d::faultClassName(v.faultClass));
  const WallTime now = clock_.wallNow();
  c4d::Action action = v.action;
  if (v.faultClass == c4d::FaultClass::kNonCommSlow && action == c4d::Action::kEventOnly &&
      stragglerWorthRestart(job, v, now)) {
    action = c4d::Action::kCordonAndRestart;
  }
  const std::string action_name(c4d::actionName(action));
  verdicts_.labels({fault_class, dry_run ? "dryRun" : action_name}).inc();
  detection_seconds_.labels({fault_class})
      .observe(std::chrono::duration<double>(v.confirmedAt - v.firstSeen).count());

  std::vector<std::string> nodes;
  if (v.culprit.kind == c4d::CulpritKind::kNode || v.culprit.kind == c4d::CulpritKind::kRank) {
    if (!v.culprit.node.empty()) nodes.push_back(v.culprit.node);
  } else if (v.culprit.kind == c4d::CulpritKind::kLink) {
    if (!v.culprit.node.empty()) nodes.push_back(v.culprit.node);
    if (!v.culprit.peerNode.empty()) nodes.push_back(v.culprit.peerNode);
  }
  const std::string culprit = describeCulprit(v.culprit);
  std::string message = fault_class + " of " + culprit + ": " + v.evidence.message + "; action " +
                        action_name + (dry_run ? " (dry run: nothing done)" : "");
  log_.warn("Fault detected", {{"job", key},
                               {"class", fault_class},
                               {"culprit", culprit},
                               {"action", action_name},
                               {"dryRun", dry_run},
                               {"evidence", v.evidence.message}});
  events_.record(job, "Warning", "FaultDetected", message);

  // The node's history: only a node the evidence names (a link implicates both ends weakly,
  // a crash without node evidence implicates nobody).
  const bool node_culprit =
      v.culprit.kind != c4d::CulpritKind::kLink &&
      (v.faultClass != c4d::FaultClass::kCrash || v.nodeEvidence || v.repeatOffender);
  if (node_culprit) {
    for (const auto& n : nodes) {
      if (auto node = nodes_.store().get(n)) {
        events_.record(*node, "Warning", "FaultSuspected",
                       "TrainingJob " + key + ": " + fault_class + ": " + v.evidence.message);
      }
      recordNodeFault(n, {now, fault_class, key});
    }
  }
  if (dry_run) return;
  if (action == c4d::Action::kReplan && v.culprit.kind == c4d::CulpritKind::kLink &&
      !v.culprit.node.empty() && !v.culprit.peerNode.empty()) {
    state.replanned.emplace(v.key(), now);  // escalated if still slow after replan_grace
    std::function<void(const std::string&, const std::string&, const std::string&)> replan;
    {
      std::lock_guard lock(mu_);
      replan = replan_;
    }
    if (replan) replan(key, v.culprit.node, v.culprit.peerNode);
    return;
  }
  if (action != c4d::Action::kCordonAndRestart && action != c4d::Action::kRestartOnly) return;

  DiagnosedFault d;
  d.attempt = state.attempt;
  d.fault_class = fault_class;
  d.key = v.key();
  d.summary = fault_class + " of " + culprit + ": " + v.evidence.message;
  d.nodes = node_culprit || v.culprit.kind == c4d::CulpritKind::kLink ? nodes
                                                                      : std::vector<std::string>{};
  d.cordon = action == c4d::Action::kCordonAndRestart && node_culprit;
  d.rank = v.culprit.rank;
  d.detection_seconds = std::chrono::duration<double>(v.confirmedAt - v.firstSeen).count();
  std::function<void(const std::string&)> enqueue;
  {
    std::lock_guard lock(mu_);
    if (state.diagnosis) return;  // the first diagnosis of an attempt decides its restart
    state.diagnosis = std::move(d);
    enqueue = enqueue_;
  }
  if (enqueue) enqueue(key);
}

void Detector::setTrafficExplanation(TrafficExplanation explain) {
  std::lock_guard lock(mu_);
  explain_ = std::move(explain);
}

void Detector::setReplan(
    std::function<void(const std::string&, const std::string&, const std::string&)> replan) {
  std::lock_guard lock(mu_);
  replan_ = std::move(replan);
}

void Detector::recordNodeFault(const std::string& node_name, const NodeFaultRecord& record) {
  auto node = nodes_.store().get(node_name);
  if (!node) return;
  Json patch = {{"metadata",
                 {{"annotations",
                   {{kFaultHistoryAnnotation,
                     appendFaultHistory(*node, record, config_.max_fault_history)}}}}}};
  auto written = client_.patch(resources::nodes(), "", node_name, PatchType::kMerge, patch);
  if (!written) {
    log_.warn("Node fault history not written", {{"node", node_name}, {"error", written.error()}});
  }
}

void Detector::start() {
  std::lock_guard guard(loop_mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] {
    std::unique_lock lock(loop_mu_);
    MonoTime next = clock_.monoNow();
    while (!stopping_) {
      lock.unlock();
      tick();
      lock.lock();
      next += config_.window;
      if (next < clock_.monoNow()) next = clock_.monoNow();  // fell behind: no burst
      clock_.waitUntil(lock, loop_cv_, next, [this] { return stopping_; });
    }
  });
}

void Detector::stop() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace c4::op
