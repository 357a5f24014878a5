// The traffic-plan controller (see controller.h).
#include "operator/trafficplan/controller.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "operator/trainingjob/api.h"
#include "operator/trainingjob/children.h"
#include "operator/trainingjob/status.h"

namespace c4::op::trafficplan {
namespace {

std::string loadText(double load) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", load);
  return buf;
}

std::map<std::string, std::string> labelsOf(const Json& object) {
  std::map<std::string, std::string> out;
  const Json* labels = objectAt(fieldsOf(object, "metadata"), "labels");
  if (labels == nullptr) return out;
  for (const auto& [k, v] : labels->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

std::string uidOf(const Json& object) {
  return stringAt(fieldsOf(object, "metadata"), "uid").value_or("");
}

std::int64_t generationOf(const Json& object) {
  return intAt(fieldsOf(object, "metadata"), "generation").value_or(0);
}

bool terminating(const Json& object) {
  return fieldsOf(object, "metadata").contains("deletionTimestamp");
}

// A status that does not decode (never from the API server) reads as an empty one.
TrainingJobStatus jobStatus(const Json& job) {
  return parseTrainingJobStatus(job).value_or(TrainingJobStatus{});
}

std::string jobPhase(const Json& job) {
  return jobStatus(job).phase.value_or("");
}

std::int64_t jobAttempt(const Json& job) {
  return jobStatus(job).attempt.value_or(0);
}

bool samePlacement(const c4p::JobPlacement& a, const c4p::JobPlacement& b) {
  return a.nodes == b.nodes && a.procs_per_node == b.procs_per_node &&
         a.subflows_per_connection == b.subflows_per_connection &&
         a.spare_subflows == b.spare_subflows && a.both_directions == b.both_directions &&
         a.tree == b.tree;
}

}  // namespace

const ResourceType& fabrics() {
  static const ResourceType type{"c4.dev", "v1alpha1", "fabrics", "Fabric", false};
  return type;
}

Json buildPlanConfigMap(const Json& job, const c4p::PlanDocument& doc, const std::string& reason) {
  const std::string name = objectName(job);
  return {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       {{"name", planConfigMapName(name)},
        {"namespace", objectNamespace(job)},
        {"labels", {{labels::kJobName, name}}},
        {"annotations",
         {{kPlanVersionAnnotation, std::to_string(doc.version)}, {kPlanReasonAnnotation, reason}}},
        {"ownerReferences", Json::array({ownerReference(job)})}}},
      {"data", {{c4p::kPlanDocumentKey, c4p::renderPlanDocument(doc)}}}};
}

std::optional<std::vector<std::string>> jobPlacement(const Json& job, std::int64_t replicas,
                                                     const std::vector<Json>& pods) {
  if (replicas <= 0) return std::nullopt;
  const std::int64_t attempt = jobAttempt(job);
  std::vector<std::string> nodes(static_cast<std::size_t>(replicas));
  for (const auto& pod : pods) {
    if (!isControlledBy(pod, job)) continue;
    auto pod_attempt = intLabelOf(pod, labels::kRestartAttempt);
    auto index = intLabelOf(pod, labels::kReplicaIndex);
    if (!pod_attempt || *pod_attempt != attempt || !index || *index < 0 || *index >= replicas) {
      continue;
    }
    if (terminating(pod)) return std::nullopt;
    std::string node = stringAt(fieldsOf(pod, "spec"), "nodeName").value_or("");
    if (node.empty()) return std::nullopt;
    nodes[static_cast<std::size_t>(*index)] = node;
  }
  for (const auto& n : nodes) {
    if (n.empty()) return std::nullopt;
  }
  return nodes;
}

std::vector<ConnectionDelta> connectionDeltas(
    const ingest::JobRecord& record, const std::vector<c4p::PlannedPair>& pairs,
    std::int64_t plan_version,
    std::map<std::pair<std::int32_t, std::uint64_t>, std::uint64_t>& seen) {
  std::vector<ConnectionDelta> out;
  for (const auto& [rank, rr] : record.ranks) {
    // The header of the receiving rank's report of `seq` (its plan version, its arrival).
    auto headerAt = [&rr](std::uint64_t seq) -> const ingest::RankHeader* {
      for (const auto& h : rr.reports) {
        if (h.seq == seq) return &h;
      }
      return nullptr;
    };
    auto versionAt = [&](std::uint64_t seq) -> std::optional<std::int64_t> {
      const ingest::RankHeader* h = headerAt(seq);
      return h == nullptr ? std::nullopt : std::optional<std::int64_t>(h->plan_version);
    };
    for (const auto& [id, history] : rr.connections) {
      const auto& samples = history.samples;
      if (samples.size() < 2) continue;
      const auto& last = samples.back();
      const auto& prev = samples[samples.size() - 2];
      if (last.stats.direction != report::Direction::kRecv) continue;
      auto& used = seen[{rank, id}];
      if (last.report_seq <= used) continue;
      used = last.report_seq;
      const std::string& sender = last.stats.peer_node;
      const std::string& receiver = rr.identity.node;
      const c4p::PlannedPair* pair = nullptr;
      for (const auto& p : pairs) {
        if (p.local_node == sender && p.peer_node == receiver) pair = &p;
      }
      const std::size_t n = last.stats.subflows.size();
      if (pair == nullptr || pair->subflows.size() != n || prev.stats.subflows.size() != n) {
        continue;
      }
      // Judge only windows in which the receiver ran the current plan (the sender reads the same
      // file); the lag counts from the oldest sample of that run.
      if (versionAt(last.report_seq) != plan_version ||
          versionAt(prev.report_seq) != plan_version) {
        continue;
      }
      // The sender applies a version on its own (its pod's copy of the plan): when its reports
      // are at hand, judge only a window that began after its first report of this version,
      // and count the lag from there. Before it, the sender may still have run the old weights
      // (a path without weight moves nothing, as planned).
      std::optional<WallTime> sender_since;
      if (auto sr = record.ranks.find(last.stats.peer_rank);
          last.stats.peer_rank >= 0 && sr != record.ranks.end() && !sr->second.reports.empty()) {
        const auto& hs = sr->second.reports;
        if (hs.back().plan_version != plan_version) continue;
        auto first = hs.end();
        while (first != hs.begin() && std::prev(first)->plan_version == plan_version) --first;
        sender_since = first->received;
      }
      auto after_sender = [&](const ingest::ConnectionSample& sample) {
        if (!sender_since) return true;
        const ingest::RankHeader* h = headerAt(sample.report_seq);
        return h != nullptr && h->received >= *sender_since;
      };
      if (!after_sender(prev)) continue;
      std::size_t base = samples.size() - 2;
      while (base > 0 && versionAt(samples[base - 1].report_seq) == plan_version &&
             samples[base - 1].stats.subflows.size() == n && after_sender(samples[base - 1])) {
        --base;
      }
      ConnectionDelta delta;
      delta.local_node = sender;
      delta.peer_node = receiver;
      delta.stalled = last.stats.bytes == prev.stats.bytes && last.stats.inflight > 0 &&
                      last.stats.oldest_inflight_us >= kStalledWaitUs;
      std::vector<double> normalised(n, 0.0);
      double most = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double w = pair->subflows[i].weight;
        const std::uint64_t now = last.stats.subflows[i].bytes;
        const std::uint64_t before = prev.stats.subflows[i].bytes;
        const std::uint64_t from = samples[base].stats.subflows[i].bytes;
        const std::uint64_t cumulative = now >= from ? now - from : 0;
        delta.subflows.push_back(
            {pair->subflows[i].path, 0, w, now >= before ? now - before : 0, 0});
        if (w > 0) {
          normalised[i] = static_cast<double>(cumulative) / w;
          most = std::max(most, normalised[i]);
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double w = pair->subflows[i].weight;
        if (w > 0)
          delta.subflows[i].lag_bytes = static_cast<std::uint64_t>((most - normalised[i]) * w);
      }
      out.push_back(std::move(delta));
    }
  }
  return out;
}

TrafficPlanController::TrafficPlanController(KubeClient& client, Clock& clock,
                                             EventRecorder& events, TrafficPlanSources sources,
                                             ingest::ReportStore* store, TrafficPlanConfig config,
                                             metrics::Registry& registry)
    : client_(client),
      clock_(clock),
      events_(events),
      sources_(std::move(sources)),
      store_(store),
      config_(std::move(config)),
      log_("trafficplan"),
      monitor_(config_.monitor),
      plans_written_(registry.counter("c4_trafficplan_plans_written_total",
                                      "Plan ConfigMaps written, by reason.", {"reason"})),
      link_verdicts_(registry.counter("c4_trafficplan_link_verdicts_total",
                                      "Link states (leaf-spine and spine-core) set from telemetry.",
                                      {"state"})),
      fabric_rejects_(
          registry.counter("c4_trafficplan_fabric_rejected_total", "Fabric descriptions refused.")),
      max_link_load_(registry.gauge("c4_trafficplan_max_link_load",
                                    "Load of the most loaded planned link direction.")),
      ranks_behind_(registry.gauge("c4_trafficplan_ranks_behind",
                                   "Ranks whose latest report carries an older plan version than "
                                   "the one written (every planned job).")),
      plan_seconds_(registry.histogram("c4_trafficplan_plan_seconds",
                                       "Time to plan one job (planner only).")),
      queue_(clock, defaultControllerRateLimiter(clock), &registry, "trafficplan") {}

TrafficPlanController::~TrafficPlanController() {
  stop();
}

std::unique_ptr<TrafficPlanController> TrafficPlanController::fromInformers(
    KubeClient& client, Clock& clock, EventRecorder& events, SharedInformers& informers,
    const std::string& watch_namespace, ingest::ReportStore* store, TrafficPlanConfig config,
    metrics::Registry& registry) {
  Informer& fabric_informer = informers.informerFor(fabrics());
  Informer& nodes = informers.informerFor(resources::nodes());
  Informer& jobs = informers.informerFor(resources::trainingJobs(), watch_namespace);
  Informer& pods = informers.informerFor(resources::pods(), watch_namespace, labels::kJobName);
  static constexpr const char* kIndex = "trafficplan-job";
  pods.store().addIndex(kIndex, [](const Json& pod) {
    std::string job = labelOf(pod, labels::kJobName);
    if (job.empty()) return std::vector<std::string>{};
    return std::vector<std::string>{objectNamespace(pod) + "/" + job};
  });
  TrafficPlanSources sources;
  sources.fabrics = [&fabric_informer] { return fabric_informer.store().list(); };
  sources.nodes = [&nodes] { return nodes.store().list(); };
  sources.jobs = [&jobs] { return jobs.store().list(); };
  sources.pods = [&pods](const std::string& ns, const std::string& job) {
    return pods.store().byIndex(kIndex, ns + "/" + job);
  };
  // The plan ConfigMaps (label c4.dev/job-name), read back to repair what someone else changed.
  Informer& config_maps =
      informers.informerFor(resources::configMaps(), watch_namespace, labels::kJobName);
  sources.plan_config_map = [&config_maps](const std::string& ns, const std::string& name) {
    return config_maps.store().get(objectKey(ns, name));
  };
  auto controller = std::make_unique<TrafficPlanController>(
      client, clock, events, std::move(sources), store, std::move(config), registry);
  TrafficPlanController* self = controller.get();
  auto kick = [self](InformerEvent, const Json*, const Json&) { self->kick(); };
  fabric_informer.addHandler(kick);
  jobs.addHandler(kick);
  pods.addHandler(kick);
  config_maps.addHandler([self](InformerEvent, const Json*, const Json& cm) {
    const std::string job = labelOf(cm, labels::kJobName);
    if (!job.empty() && objectName(cm) == planConfigMapName(job)) self->kick();
  });
  // Nodes change often (heartbeats); only label changes matter, and the periodic sync sees them.
  return controller;
}

void TrafficPlanController::start() {
  std::lock_guard lock(lifecycle_mu_);
  if (stopped_ || worker_.joinable()) return;
  queue_.add(kSyncKey);
  if (config_.telemetry_period > Duration::zero()) {
    queue_.addAfter(kTelemetryKey, config_.telemetry_period);
  }
  worker_ = std::thread([this] { worker(); });
}

void TrafficPlanController::stop() {
  {
    std::lock_guard lock(lifecycle_mu_);
    stopped_ = true;
    queue_.shutDown();
  }
  if (worker_.joinable()) worker_.join();
}

void TrafficPlanController::kick() {
  queue_.add(kSyncKey);
}

void TrafficPlanController::reconcile(const std::string& key) {
  if (key == kSyncKey) {
    sync();
    queue_.addAfter(kSyncKey, config_.period);
  } else if (key == kTelemetryKey) {
    syncTelemetryOnly();
    if (config_.telemetry_period > Duration::zero()) {
      queue_.addAfter(kTelemetryKey, config_.telemetry_period);
    }
  }
}

void TrafficPlanController::worker() {
  for (;;) {
    auto key = queue_.get();
    if (!key) return;
    try {
      reconcile(*key);
      queue_.forget(*key);
    } catch (const std::exception& e) {  // no exception leaves the worker
      log_.error("Traffic-plan pass threw, will retry", {{"key", *key}, {"error", e.what()}});
      queue_.addRateLimited(*key);
    }
    queue_.done(*key);
  }
}

void TrafficPlanController::onSlowConnection(const std::string& key, const std::string& node,
                                             const std::string& peer_node) {
  {
    std::lock_guard lock(mu_);
    hints_.push_back({node, peer_node});
    hints_.push_back({peer_node, node});
  }
  log_.info("Slow connection handed to the planner",
            {{"job", key}, {"node", node}, {"peerNode", peer_node}});
  kick();
}

std::optional<std::int64_t> TrafficPlanController::planVersion(const std::string& key) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.version;
}

void TrafficPlanController::sync() {
  syncFabric();
  if (!planner_) {
    publishExplanations();
    return;
  }
  syncNodes();
  syncJobs();
  restoreTelemetry();
  syncTelemetry();
  repairPlans();
  flushWrites();
  syncApplied();
  syncFabricStatus();
  publishExplanations();
}

void TrafficPlanController::syncTelemetryOnly() {
  if (!planner_) return;
  syncTelemetry();
  flushWrites();
  syncApplied();
  syncFabricStatus();
  publishExplanations();
}

std::optional<std::string> TrafficPlanController::explainConnection(
    const std::string& key, const std::string& node, const std::string& peer_node) const {
  std::lock_guard lock(explain_mu_);
  auto job = explanations_.find(key);
  if (job == explanations_.end()) return std::nullopt;
  auto pair = job->second.find({std::min(node, peer_node), std::max(node, peer_node)});
  if (pair == job->second.end()) return std::nullopt;
  return pair->second;
}

void TrafficPlanController::publishExplanations() {
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::string>> out;
  std::map<std::pair<c4p::LinkRef, c4p::Direction>, std::string> suspects;
  if (planner_) {
    for (const auto& s : monitor_.suspects()) {
      suspects.try_emplace({s.link, s.direction}, s.evidence);
    }
  }
  // Every link healthy and none suspected (the usual case, every telemetry pass): nothing to
  // explain, no pair to visit.
  if (planner_ && (!suspects.empty() || !planner_->fabric().degradedLinks().empty())) {
    const c4p::Fabric& fabric = planner_->fabric();
    // Why C4P answers for one link direction, or "" when it is healthy and unsuspected.
    auto linkWhy = [&](const c4p::LinkRef& link, c4p::Direction dir) -> std::string {
      const double fraction = fabric.capacityFraction(link, dir);
      auto s = fraction < 1 ? suspects.end() : suspects.find({link, dir});
      if (fraction >= 1 && s == suspects.end()) return {};
      const std::string name =
          "link " + c4p::linkName(link) + " " + std::string(c4p::directionName(dir));
      if (fraction <= 0) return "C4P holds " + name + " failed";
      if (fraction < 1) {
        char text[32];
        std::snprintf(text, sizeof text, "%.0f %%", fraction * 100);
        return "C4P holds " + name + " degraded to " + text + " of its capacity";
      }
      return "C4P suspects " + name + " (" + s->second + ")";
    };
    // Why C4P answers for a link direction that drops what it carries (failed, or a stalled
    // subflow's suspect), or "": a connection whose acknowledgements cross it stalls too.
    auto droppingWhy = [&](const c4p::LinkRef& link, c4p::Direction dir) -> std::string {
      if (fabric.capacityFraction(link, dir) > 0 && !suspects.contains({link, dir})) return {};
      return linkWhy(link, dir);
    };
    bool drops = !suspects.empty();
    for (const auto& d : fabric.degradedLinks()) drops = drops || d.capacity_fraction <= 0;
    // The first dropping direction on the paths from one location to another (the answer is
    // the same for every pair of nodes there): its why and path, or "" and -1.
    using Leaves = std::tuple<int, std::string, std::string, int, std::string, std::string>;
    std::map<Leaves, std::pair<std::string, int>> back_cache;
    auto firstDroppingBack = [&](const c4p::NodeLocation& from, const c4p::NodeLocation& to) {
      const Leaves leaves{from.plane, from.leaf, from.pod, to.plane, to.leaf, to.pod};
      auto cached = back_cache.find(leaves);
      if (cached != back_cache.end()) return cached->second;
      std::pair<std::string, int> found{std::string(), -1};
      const int paths = fabric.pathCount(from, to);
      for (int path = 0; path < paths && found.second < 0; ++path) {
        auto links = fabric.pathLinks(from, to, path);
        if (!links) continue;
        for (const auto& [link, dir] : *links) {
          std::string why = droppingWhy(link, dir);
          if (why.empty()) continue;
          found = {std::move(why), path};
          break;
        }
      }
      back_cache.emplace(leaves, found);
      return found;
    };
    for (const auto& [key, state] : jobs_) {
      if (state.mode != c4p::Mode::kEnforce) continue;
      const c4p::JobPlan* plan = planner_->plan(key);
      if (plan == nullptr) continue;
      auto& job_out = out[key];
      // A pair's two nodes' locations and its key (both directions of a node pair share it),
      // or nullopt when a node is unknown or the pair is explained already.
      struct PairAt {
        const c4p::NodeLocation& src;
        const c4p::NodeLocation& dst;
        std::pair<std::string, std::string> nodes;
      };
      auto unexplained = [&](const c4p::PlannedPair& pair) -> std::optional<PairAt> {
        auto src = nodes_.find(pair.local_node);
        auto dst = nodes_.find(pair.peer_node);
        if (src == nodes_.end() || dst == nodes_.end()) return std::nullopt;
        PairAt at{
            src->second,
            dst->second,
            {std::min(pair.local_node, pair.peer_node), std::max(pair.local_node, pair.peer_node)}};
        if (job_out.contains(at.nodes)) return std::nullopt;
        return at;
      };
      // First the directions the pairs' planned paths send on, in both directions of a node
      // pair.
      for (const auto& pair : plan->pairs) {
        auto at = unexplained(pair);
        if (!at) continue;
        for (const auto& sf : pair.subflows) {
          if (sf.path < 0) continue;
          auto links = fabric.pathLinks(at->src, at->dst, sf.path);
          if (!links) continue;
          std::string why;
          for (const auto& [link, dir] : *links) {
            why = linkWhy(link, dir);
            if (!why.empty()) break;
          }
          if (why.empty()) continue;
          job_out[at->nodes] = why + " on the path of " + pair.local_node + " -> " +
                               pair.peer_node + " (path " + std::to_string(sf.path) + ")";
          break;
        }
      }
      // Then, for a pair none of them explains, the directions its acknowledgements may come
      // back on (any path back: the return path follows the fabric's hash of the reverse flow,
      // which no plan sets), and only where they drop packets — a degraded return direction
      // carries acknowledgements well enough.
      for (const auto& pair : plan->pairs) {
        if (!drops) break;
        auto at = unexplained(pair);
        if (!at) continue;
        auto [why, path] = firstDroppingBack(at->dst, at->src);
        if (path < 0) continue;
        job_out[at->nodes] = why + " on a path back of " + pair.local_node + " -> " +
                             pair.peer_node + " (path " + std::to_string(path) + " of " +
                             pair.peer_node + " -> " + pair.local_node +
                             ", which its acknowledgements may take)";
      }
      if (job_out.empty()) out.erase(key);
    }
  }
  std::lock_guard lock(explain_mu_);
  explanations_ = std::move(out);
}

void TrafficPlanController::restoreTelemetry() {
  // After the jobs that were running are planned again, as they were first planned (on healthy
  // links), then re-weighted: the same sequence that produced the documents they hold.
  std::vector<RestoredLink> links;
  links.swap(restore_links_);
  for (const auto& r : links) {
    auto out = planner_->setLinkState(r.link, r.fraction, r.direction);
    if (!out) {
      log_.warn("Telemetry link state not restored",
                {{"link", c4p::linkName(r.link)}, {"error", out.error()}});
      continue;
    }
    telemetry_links_.push_back({r.link, r.direction, clock_.monoNow()});
    writeChanged(out->changed, "link " + c4p::linkName(r.link) + " " +
                                   std::string(c4p::directionName(r.direction)) +
                                   " degraded (telemetry, from the Fabric status)");
  }
}

void TrafficPlanController::rejectFabric(const Json& fabric, const std::string& reason,
                                         const std::string& message) {
  fabric_rejects_.get().inc();
  log_.warn("Fabric refused", {{"fabric", objectName(fabric)}, {"error", message}});
  events_.record(fabric, "Warning", reason, message);
  Json status = fieldsOf(fabric, "status");
  setCondition(status, kAcceptedCondition, "False", reason, message, generationOf(fabric),
               clock_.wallNow());
  auto written =
      client_.patch(fabrics(), "", objectName(fabric), PatchType::kMerge,
                    Json{{"status", {{"conditions", status["conditions"]}}}},
                    PatchOptions{.subresource = "status", .field_manager = "", .force = false});
  if (!written) {
    log_.warn("Fabric status not written",
              {{"fabric", objectName(fabric)}, {"error", written.error()}});
  }
}

void TrafficPlanController::syncFabric() {
  std::vector<Json> all = sources_.fabrics();
  std::optional<Json> chosen;
  if (!config_.fabric_name.empty()) {
    for (auto& f : all) {
      if (objectName(f) == config_.fabric_name) chosen = f;
    }
  } else if (all.size() == 1) {
    chosen = all.front();
  } else if (all.size() > 1) {
    std::string seen = "several:" + std::to_string(all.size());
    if (fabric_seen_ != seen) {
      fabric_seen_ = seen;
      for (const auto& f : all) {
        rejectFabric(f, "FabricAmbiguous",
                     std::to_string(all.size()) +
                         " Fabric objects and no --fabric-name: none is used; running plans stay");
      }
    }
    return;
  }
  if (!chosen) return;  // none: plans (if any) stay as they are
  std::string seen = uidOf(*chosen) + "/" + std::to_string(generationOf(*chosen));
  if (seen == fabric_seen_) return;
  fabric_seen_ = seen;

  auto parsed = c4p::Fabric::fromJson(*chosen);
  if (!parsed) {
    rejectFabric(*chosen, "FabricRejected",
                 "invalid description: " + parsed.error().message + "; running plans stay");
    return;
  }
  if (!planner_) {
    planner_ = std::make_unique<c4p::Planner>(std::move(*parsed), config_.planner);
    // Telemetry states survive a restart through the Fabric's status.
    const Json* links = arrayAt(fieldsOf(*chosen, "status"), "links");
    for (const auto& l : links != nullptr ? *links : Json::array()) {
      if (stringAt(l, "source") != "telemetry") continue;
      // An entry with a field of another type is not restored: telemetry finds its state again.
      bool typed = !hasWrongType(l, "capacityFraction", Json::value_t::number_float);
      for (const char* k : {"plane", "spine", "coreUplink", "uplink"}) {
        typed = typed && !hasWrongType(l, k, Json::value_t::number_integer);
      }
      for (const char* k : {"pod", "leaf", "direction"}) {
        typed = typed && !hasWrongType(l, k, Json::value_t::string);
      }
      if (!typed) {
        log_.warn(
            "Telemetry link state in the Fabric status not restored: a field has another "
            "type",
            {{"link", l.dump()}});
        continue;
      }
      auto number = [&l](const char* k) { return static_cast<int>(intAt(l, k).value_or(0)); };
      c4p::LinkRef ref =
          l.contains("spine")
              ? c4p::LinkRef::spineTier(number("plane"), stringAt(l, "pod").value_or(""),
                                        number("spine"), number("coreUplink"))
              : c4p::LinkRef{number("plane"), stringAt(l, "leaf").value_or(""), number("uplink")};
      std::string dir = stringAt(l, "direction").value_or("Both");
      c4p::Direction d = dir == "Up"     ? c4p::Direction::kUp
                         : dir == "Down" ? c4p::Direction::kDown
                                         : c4p::Direction::kBoth;
      restore_links_.push_back({ref, d, numberAt(l, "capacityFraction").value_or(1.0)});
    }
    log_.info("Fabric accepted",
              {{"fabric", objectName(*chosen)}, {"generation", generationOf(*chosen)}});
  } else {
    auto out = planner_->setFabric(std::move(*parsed));
    if (!out) {
      rejectFabric(*chosen, "FabricRejected",
                   "description not applicable: " + out.error().message + "; running plans stay");
      return;
    }
    log_.info("Fabric changed",
              {{"fabric", objectName(*chosen)}, {"generation", generationOf(*chosen)}});
    writeChanged(out->changed,
                 "fabric changed (generation " + std::to_string(generationOf(*chosen)) + ")");
  }
  fabric_object_ = *chosen;
  Json status = chosen->value("status", Json::object());
  if (!status.is_object()) status = Json::object();
  setCondition(status, kAcceptedCondition, "True", "Accepted", "the planner uses this description",
               generationOf(*chosen), clock_.wallNow());
  fabric_object_["status"] = status;
  fabric_status_ = Json();  // write the status at the end of this sync
}

void TrafficPlanController::syncNodes() {
  std::set<std::string> present;
  for (const auto& node : sources_.nodes()) {
    std::string name = objectName(node);
    present.insert(name);
    auto labels = labelsOf(node);
    auto where = planner_->fabric().locate(name, labels);
    auto known = nodes_.find(name);
    if (!where) {
      if (known != nodes_.end()) {
        planner_->removeNode(name);
        nodes_.erase(known);
      }
      continue;
    }
    if (known != nodes_.end() && known->second == *where) continue;
    if (planner_->setNode(name, labels)) nodes_[name] = *where;
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (present.contains(it->first)) {
      ++it;
      continue;
    }
    planner_->removeNode(it->first);
    it = nodes_.erase(it);
  }
}

void TrafficPlanController::syncJobs() {
  std::set<std::string> live;
  std::vector<Json> jobs = sources_.jobs();
  std::sort(jobs.begin(), jobs.end(),
            [](const Json& a, const Json& b) { return objectKey(a) < objectKey(b); });
  for (const auto& job : jobs) {
    const std::string key = objectKey(job);
    auto spec = parseTrainingJobSpec(job);
    if (!spec) continue;
    const c4p::Mode mode = spec->traffic_mode;
    const std::string phase = jobPhase(job);
    if (mode == c4p::Mode::kOff || terminating(job) || phase == phases::kSucceeded ||
        phase == phases::kFailed || spec->suspend) {
      continue;
    }
    live.insert(key);
    auto it = jobs_.find(key);
    if (it != jobs_.end() && it->second.uid != uidOf(job)) {
      // Recreated under the same name: a new job with a ConfigMap of its own.
      writeChanged(planner_->removeJob(key).changed, "a job left the fabric");
      jobs_.erase(it);
      it = jobs_.end();
    }
    auto nodes =
        jobPlacement(job, spec->replicas, sources_.pods(objectNamespace(job), objectName(job)));
    if (!nodes) continue;  // not placed yet: an earlier plan (if any) stays
    c4p::JobPlacement placement;
    placement.job = key;
    placement.nodes = *nodes;
    placement.procs_per_node = static_cast<int>(procsPerPod(*spec));
    placement.subflows_per_connection = static_cast<int>(spec->subflows_per_connection);
    placement.spare_subflows = static_cast<int>(spec->spare_subflows);
    if (it != jobs_.end() && samePlacement(it->second.placement, placement)) {
      it->second.object = job;
      if (it->second.mode != mode) {
        it->second.mode = mode;
        queueWrite(key, std::string("mode changed to ") + std::string(c4p::modeName(mode)));
      }
      continue;
    }
    const MonoTime started = clock_.monoNow();
    auto out = planner_->planJob(placement);
    plan_seconds_.get().observe(std::chrono::duration<double>(clock_.monoNow() - started).count());
    if (!out) {
      events_.record(job, "Warning", "PlanFailed",
                     "traffic plan not computed: " + out.error().message +
                         (it != jobs_.end() ? "; the previous plan stays" : ""));
      log_.warn("Plan failed", {{"job", key}, {"error", out.error()}});
      continue;
    }
    JobState& state = jobs_[key];
    state.uid = uidOf(job);
    state.placement = placement;
    state.mode = mode;
    state.object = job;
    std::string reason = "new placement (attempt " + std::to_string(jobAttempt(job)) + ")";
    // The job itself always gets its document checked (a restart adopts an equal one).
    std::vector<std::string> changed = out->changed;
    if (std::find(changed.begin(), changed.end(), key) == changed.end()) changed.push_back(key);
    for (const auto& other : changed) {
      auto st = jobs_.find(other);
      if (st == jobs_.end()) continue;
      queueWrite(other, other == key ? reason : "another job was placed (" + key + ")");
    }
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (live.contains(it->first)) {
      ++it;
      continue;
    }
    const std::string key = it->first;
    it = jobs_.erase(it);
    log_.info("Job left the fabric", {{"job", key}});
    writeChanged(planner_->removeJob(key).changed, "a job left the fabric (" + key + ")");
  }
}

void TrafficPlanController::writeChanged(const std::vector<std::string>& changed,
                                         const std::string& reason) {
  for (const auto& key : changed) queueWrite(key, reason);
}

void TrafficPlanController::queueWrite(const std::string& key, const std::string& reason) {
  std::string& reasons = pending_writes_[key];
  if (reasons.find(reason) != std::string::npos) return;
  reasons += reasons.empty() ? reason : "; " + reason;
}

void TrafficPlanController::flushWrites() {
  std::map<std::string, std::string> pending;
  pending.swap(pending_writes_);
  for (const auto& [key, reason] : pending) {
    auto it = jobs_.find(key);
    if (it != jobs_.end()) writePlan(key, it->second, reason);
  }
}

void TrafficPlanController::writePlan(const std::string& key, JobState& state,
                                      const std::string& reason) {
  const c4p::JobPlan* plan = planner_->plan(key);
  if (!plan) return;
  const std::string ns = objectNamespace(state.object);
  const std::string name = objectName(state.object);
  if (!state.version) {
    // First time since this process started: continue what the ConfigMap holds.
    auto cm = client_.get(resources::configMaps(), ns, planConfigMapName(name));
    std::int64_t existing = 0;
    if (cm && isControlledBy(*cm, state.object)) {
      if (auto text = stringAt(fieldsOf(*cm, "data"), c4p::kPlanDocumentKey)) {
        auto doc = c4p::parsePlanDocument(*text);
        if (doc) {
          existing = doc->version;
          auto same = c4p::makePlanDocument(*plan, existing, state.mode);
          if (same && *same == *doc && existing > 0) {
            state.version = existing;
            state.written = *doc;
            log_.info("Plan adopted", {{"job", key}, {"version", existing}});
            return;
          }
        }
      }
    } else if (!cm && cm.error().code != ErrorCode::kNotFound) {
      log_.warn("Plan ConfigMap not read", {{"job", key}, {"error", cm.error()}});
      return;  // retried at the next sync (the version is unknown)
    }
    state.version = existing;
  }
  auto doc = c4p::makePlanDocument(*plan, *state.version + 1, state.mode);
  if (!doc) {
    log_.error("Plan document not made", {{"job", key}, {"error", doc.error()}});
    return;
  }
  if (state.written) {
    c4p::PlanDocument same = *doc;
    same.version = state.written->version;
    if (same == *state.written) return;  // nothing this job's plugin would see changed
  }
  commitPlan(key, state, *plan, *doc, reason, "Normal", "PlanUpdated",
             "traffic plan version " + std::to_string(doc->version) + " (" +
                 std::string(c4p::modeName(state.mode)) + "): " + reason + "; max link load " +
                 loadText(plan->max_link_load));
}

void TrafficPlanController::commitPlan(const std::string& key, JobState& state,
                                       const c4p::JobPlan& plan, const c4p::PlanDocument& doc,
                                       const std::string& reason, const char* event_type,
                                       const char* event_reason, const std::string& message) {
  if (auto put = putConfigMap(state, doc, reason); !put) {
    log_.warn("Plan ConfigMap not written", {{"job", key}, {"error", put.error()}});
    if (put.error().code == ErrorCode::kFailedPrecondition) {
      // Someone else's ConfigMap has the plan's name: never taken over; said once per object.
      auto cm = client_.get(resources::configMaps(), objectNamespace(state.object),
                            planConfigMapName(objectName(state.object)));
      const std::string uid = cm ? uidOf(*cm) : std::string{};
      if (uid != state.conflict_uid) {
        state.conflict_uid = uid;
        events_.record(
            state.object, "Warning", "PlanConflict",
            put.error().message + "; the traffic plan cannot be written until it is " + "deleted");
      }
    }
    return;
  }
  state.conflict_uid.clear();
  state.version = doc.version;
  state.written = doc;
  plans_written_.labels({reason.substr(0, reason.find(' '))}).inc();
  TrainingJobStatus plan_status;  // status.plan alone: a merge patch leaves the rest
  plan_status.plan.emplace();
  plan_status.plan->version = doc.version;
  plan_status.plan->mode = state.mode;
  plan_status.plan->max_link_load = loadText(plan.max_link_load);
  plan_status.plan->reason = reason;
  plan_status.plan->time = formatRfc3339(clock_.wallNow());
  if (auto patched = patchPlanStatus(state, plan_status); !patched) {
    log_.warn("status.plan not written", {{"job", key}, {"error", patched.error()}});
  }
  events_.record(state.object, event_type, event_reason, message);
  log_.info("Plan written", {{"job", key}, {"version", doc.version}, {"reason", reason}});
}

std::string TrafficPlanController::tampering(const JobState& state, const std::optional<Json>& cm,
                                             std::int64_t* found_version) const {
  if (!cm) return "deleted";
  if (!isControlledBy(*cm, state.object)) return "replaced by an object the job does not control";
  std::string what;
  if (labelOf(*cm, labels::kJobName) != objectName(state.object)) {
    what = "label " + std::string(labels::kJobName) + " changed";
  }
  auto text = stringAt(fieldsOf(*cm, "data"), c4p::kPlanDocumentKey);
  std::string doc_what;
  if (!text) {
    doc_what = std::string(c4p::kPlanDocumentKey) + " missing";
  } else if (auto doc = c4p::parsePlanDocument(*text); !doc) {
    doc_what = std::string(c4p::kPlanDocumentKey) + " unreadable (" + doc.error().message + ")";
  } else {
    *found_version = doc->version;
    if (!state.written || !(*doc == *state.written)) {
      doc_what = std::string(c4p::kPlanDocumentKey) + " edited (version " +
                 std::to_string(doc->version) + " found)";
    }
  }
  if (!doc_what.empty()) what += (what.empty() ? "" : ", ") + doc_what;
  return what;
}

void TrafficPlanController::repairPlans() {
  for (auto& [key, state] : jobs_) {
    if (!state.written || !state.version) continue;  // nothing written by this process yet
    const c4p::JobPlan* plan = planner_->plan(key);
    if (plan == nullptr) continue;
    const std::string ns = objectNamespace(state.object);
    const std::string name = planConfigMapName(objectName(state.object));
    std::int64_t found = 0;
    if (sources_.plan_config_map) {
      if (tampering(state, sources_.plan_config_map(ns, name), &found).empty()) continue;
    }
    // The cache may not show our own last write yet: the API server decides.
    auto live = client_.get(resources::configMaps(), ns, name);
    if (!live && live.error().code != ErrorCode::kNotFound) {
      log_.warn("Plan ConfigMap not read", {{"job", key}, {"error", live.error()}});
      continue;
    }
    std::optional<Json> current;
    if (live) current = std::move(*live);
    found = 0;
    const std::string what = tampering(state, current, &found);
    if (what.empty()) continue;
    if (current && !isControlledBy(*current, state.object)) {
      // Not ours to repair: commitPlan's write refuses it and says so (PlanConflict).
      if (uidOf(*current) == state.conflict_uid) continue;
    }
    auto doc = c4p::makePlanDocument(*plan, std::max(*state.version, found) + 1, state.mode);
    if (!doc) {
      log_.error("Plan document not made", {{"job", key}, {"error", doc.error()}});
      continue;
    }
    std::string reason = "repaired (" + name + " " + what + ")";
    if (auto pending = pending_writes_.find(key); pending != pending_writes_.end()) {
      reason += "; " + pending->second;
      pending_writes_.erase(pending);
    }
    log_.warn("Plan ConfigMap changed by someone else; putting the plan back",
              {{"job", key}, {"configMap", name}, {"found", what}});
    commitPlan(key, state, *plan, *doc, reason, "Warning", "PlanRepaired",
               "plan ConfigMap " + name + " " + what + "; traffic plan version " +
                   std::to_string(doc->version) + " (" + std::string(c4p::modeName(state.mode)) +
                   ") put back");
  }
}

Status TrafficPlanController::putConfigMap(const JobState& state, const c4p::PlanDocument& doc,
                                           const std::string& reason) {
  const std::string ns = objectNamespace(state.object);
  const std::string name = planConfigMapName(objectName(state.object));
  const std::string text = c4p::renderPlanDocument(doc);
  for (int tries = 0; tries < 3; ++tries) {
    auto cm = client_.get(resources::configMaps(), ns, name);
    if (!cm && cm.error().code == ErrorCode::kNotFound) {
      auto done = client_.create(resources::configMaps(), ns,
                                 buildPlanConfigMap(state.object, doc, reason));
      if (done) return okStatus();
      if (done.error().code == ErrorCode::kAlreadyExists) continue;
      return std::unexpected(done.error());
    }
    if (!cm) return std::unexpected(cm.error());
    if (!isControlledBy(*cm, state.object)) {
      return makeError(ErrorCode::kFailedPrecondition,
                       "ConfigMap " + name + " is not controlled by the TrainingJob");
    }
    Json updated = *cm;
    if (!updated["data"].is_object()) updated["data"] = Json::object();
    updated["data"][c4p::kPlanDocumentKey] = text;
    if (!updated["metadata"]["labels"].is_object()) updated["metadata"]["labels"] = Json::object();
    updated["metadata"]["labels"][labels::kJobName] = objectName(state.object);
    if (!updated["metadata"]["annotations"].is_object()) {
      updated["metadata"]["annotations"] = Json::object();
    }
    updated["metadata"]["annotations"][kPlanVersionAnnotation] = std::to_string(doc.version);
    updated["metadata"]["annotations"][kPlanReasonAnnotation] = reason;
    auto done = client_.update(resources::configMaps(), ns, updated);
    if (done) return okStatus();
    if (done.error().code != ErrorCode::kConflict) return std::unexpected(done.error());
  }
  return makeError(ErrorCode::kConflict, "ConfigMap " + name + " kept changing");
}

void TrafficPlanController::syncTelemetry() {
  std::vector<std::pair<std::string, std::string>> hints;
  {
    std::lock_guard lock(mu_);
    hints.swap(hints_);
  }
  for (const auto& [a, b] : hints) monitor_.hint(a, b);

  // Lift telemetry states older than link_hold.
  const MonoTime now = clock_.monoNow();
  if (config_.link_hold > Duration::zero()) {
    for (auto it = telemetry_links_.begin(); it != telemetry_links_.end();) {
      if (now - it->since < config_.link_hold) {
        ++it;
        continue;
      }
      c4p::LinkRef link = it->link;
      c4p::Direction dir = it->direction;
      it = telemetry_links_.erase(it);
      monitor_.reset(link);
      auto out = planner_->setLinkState(link, 1.0, dir);
      if (!out) continue;
      link_verdicts_.labels({"restored"}).inc();
      events_.record(fabric_object_, "Normal", "LinkRestored",
                     "link " + c4p::linkName(link) + " " + std::string(c4p::directionName(dir)) +
                         ": telemetry state lifted after the hold; weights return");
      writeChanged(out->changed, "link " + c4p::linkName(link) + " restored (hold expired)");
    }
  }

  if (!store_) return;
  std::vector<ConnectionDelta> deltas;
  for (auto& [key, state] : jobs_) {
    if (state.mode != c4p::Mode::kEnforce) continue;  // Advisory jobs do not follow the paths
    // The weights the ranks run are those of the version written (the planner's may have moved
    // on in this pass, its new version not written yet).
    if (!state.written || !state.version || state.written->version != *state.version) continue;
    auto slash = key.find('/');
    store_->readJob(
        key.substr(0, slash), key.substr(slash + 1), [&](const ingest::JobRecord& record) {
          if (record.facts.uid != state.uid) return;
          auto d = connectionDeltas(record, state.written->pairs, *state.version, state.seen);
          for (auto& c : d) {
            c.job = key;
            std::string bytes, lag;
            for (const auto& sf : c.subflows) {
              bytes += std::to_string(sf.path) + ":" + std::to_string(sf.bytes) + " ";
              lag += std::to_string(sf.lag_bytes) + " ";
            }
            log_.debug("Link evidence", {{"job", key},
                                         {"from", c.local_node},
                                         {"to", c.peer_node},
                                         {"pathBytes", bytes},
                                         {"lag", lag},
                                         {"stalled", c.stalled}});
          }
          deltas.insert(deltas.end(), std::make_move_iterator(d.begin()),
                        std::make_move_iterator(d.end()));
        });
  }
  auto locate = [this](const std::string& node) -> std::optional<c4p::NodeLocation> {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return std::nullopt;
    return it->second;
  };
  // The Enforce jobs whose planned subflows carry weight on a link direction: the ones a failed
  // link would move. Built once per pass, and only when the monitor asks (for a suspect that one
  // job's subflows alone named).
  std::optional<std::map<std::pair<c4p::LinkRef, c4p::Direction>, std::set<std::string>>> users;
  auto jobs_on = [&](const c4p::LinkRef& link, c4p::Direction dir) {
    if (!users) {
      users.emplace();
      for (const auto& [key, state] : jobs_) {
        if (state.mode != c4p::Mode::kEnforce) continue;
        const c4p::JobPlan* plan = planner_->plan(key);
        if (plan == nullptr) continue;
        for (const auto& pair : plan->pairs) {
          auto src = locate(pair.local_node), dst = locate(pair.peer_node);
          if (!src || !dst) continue;
          for (const auto& sf : pair.subflows) {
            if (!(sf.weight > 0)) continue;
            auto links = planner_->fabric().pathLinks(*src, *dst, sf.path);
            if (!links) continue;
            for (const auto& hop : *links) (*users)[hop].insert(key);
          }
        }
      }
    }
    auto it = users->find({link, dir});
    return it == users->end() ? std::set<std::string>{} : it->second;
  };
  for (const auto& v : monitor_.observe(deltas, planner_->fabric(), locate, jobs_on)) {
    auto out = planner_->setLinkState(v.link, v.capacity_fraction, v.direction);
    if (!out) {
      log_.warn("Link state refused", {{"link", c4p::linkName(v.link)}, {"error", out.error()}});
      continue;
    }
    telemetry_links_.push_back({v.link, v.direction, now});
    link_verdicts_.labels({"failed"}).inc();
    const std::string what = "link " + c4p::linkName(v.link) + " " +
                             std::string(c4p::directionName(v.direction)) +
                             " failed (telemetry: " + v.evidence + ")";
    log_.warn("Link failed", {{"link", c4p::linkName(v.link)},
                              {"direction", c4p::directionName(v.direction)},
                              {"evidence", v.evidence}});
    events_.record(fabric_object_, "Warning", "LinkFailed", what);
    writeChanged(out->changed, what);
  }
}

Status TrafficPlanController::patchPlanStatus(const JobState& state,
                                              const TrainingJobStatus& plan_only) {
  auto patched = client_.patch(
      resources::trainingJobs(), objectNamespace(state.object), objectName(state.object),
      PatchType::kMerge, Json{{"status", trainingJobStatusJson(plan_only)}},
      PatchOptions{.subresource = "status", .field_manager = "", .force = false});
  if (!patched) return std::unexpected(patched.error());
  return okStatus();
}

void TrafficPlanController::syncApplied() {
  if (!store_) return;
  std::int64_t behind = 0;
  const MonoTime now = clock_.monoNow();
  for (auto& [key, state] : jobs_) {
    if (!state.version) continue;
    JobState::Applied seen;
    seen.version = *state.version;
    const auto slash = key.find('/');
    store_->readJob(key.substr(0, slash), key.substr(slash + 1),
                    [&](const ingest::JobRecord& record) {
                      if (record.facts.uid != state.uid) return;
                      for (const auto& [rank, r] : record.ranks) {
                        // A rank whose telemetry ended in order applies nothing any more.
                        if (r.reports.empty() || r.reports.back().last) continue;
                        const std::int64_t v = r.reports.back().plan_version;
                        ++seen.ranks_reporting;
                        seen.ranks_applied += v >= *state.version ? 1 : 0;
                        seen.oldest = seen.oldest ? std::min(*seen.oldest, v) : v;
                      }
                    });
    behind += seen.ranks_reporting - seen.ranks_applied;
    if (state.applied_written ? *state.applied_written == seen : seen.ranks_reporting == 0) {
      continue;
    }
    // Counts move as ranks start or pick a version up: one write per job and second at most,
    // but at once when a version was written or the oldest applied one moved.
    if (state.applied_written && state.applied_written->oldest == seen.oldest &&
        state.applied_written->version == seen.version &&
        now - state.applied_at < std::chrono::seconds{1}) {
      continue;
    }
    TrainingJobStatus applied;  // status.plan's applied fields alone: a merge patch leaves the rest
    applied.plan.emplace();
    applied.plan->applied_version = seen.oldest;
    applied.plan->ranks_applied = seen.ranks_applied;
    applied.plan->ranks_reporting = seen.ranks_reporting;
    if (auto patched = patchPlanStatus(state, applied); !patched) {
      log_.warn("status.plan applied fields not written",
                {{"job", key}, {"error", patched.error()}});
      continue;  // tried again at the next pass
    }
    if (!state.applied_written || state.applied_written->oldest != seen.oldest) {
      log_.info("Plan applied by the ranks", {{"job", key},
                                              {"appliedVersion", seen.oldest.value_or(-1)},
                                              {"version", *state.version},
                                              {"ranksApplied", seen.ranks_applied},
                                              {"ranksReporting", seen.ranks_reporting}});
    }
    state.applied_written = seen;
    state.applied_at = now;
  }
  ranks_behind_.get().set(static_cast<double>(behind));
}

void TrafficPlanController::syncFabricStatus() {
  max_link_load_.get().set(planner_->maxLinkLoad());
  Json status = c4p::renderFabricStatus(planner_->fabric(), generationOf(fabric_object_),
                                        planner_->maxLinkLoad());
  const Json& known = fieldsOf(fabric_object_, "status");
  if (known.contains("conditions")) status["conditions"] = known["conditions"];
  if (status == fabric_status_) return;
  auto written = client_.patch(
      fabrics(), "", objectName(fabric_object_), PatchType::kMerge, Json{{"status", status}},
      PatchOptions{.subresource = "status", .field_manager = "", .force = false});
  if (!written) {
    log_.warn("Fabric status not written", {{"error", written.error()}});
    return;
  }
  fabric_status_ = status;
}

}  // namespace c4::op::trafficplan
