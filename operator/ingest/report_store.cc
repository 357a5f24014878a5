// The report store (see report_store.h).
#include "operator/ingest/report_store.h"

#include <algorithm>
#include <mutex>
#include <variant>

namespace c4::op::ingest {
namespace {

// Clocks further apart than this are not estimated: such a node's anomalies take their arrival
// time.
constexpr std::int64_t kMaxOffsetNs = std::int64_t{24} * 3600 * 1'000'000'000;

std::string jobKey(std::string_view ns, std::string_view name) {
  std::string key(ns);
  key += '/';
  key += name;
  return key;
}

}  // namespace

ReportStore::ReportStore(ReportStoreConfig config, metrics::Registry* registry) : config_(config) {
  config_.history = std::max<std::size_t>(config_.history, 1);
  config_.max_checkpoint_steps = std::max<std::size_t>(config_.max_checkpoint_steps, 1);
  config_.max_nodes = std::max<std::size_t>(config_.max_nodes, 1);
  if (registry == nullptr) return;
  auto& jobs = registry->gauge("c4_ingest_store_jobs", "Jobs with data in the report store.").get();
  auto& ranks =
      registry->gauge("c4_ingest_store_ranks", "Ranks with data in the report store.").get();
  auto& connections =
      registry->gauge("c4_ingest_store_connections", "Connections tracked in the report store.")
          .get();
  auto& samples = registry
                      ->gauge("c4_ingest_store_samples",
                              "Report headers and connection samples held in the report store.")
                      .get();
  auto& nodes =
      registry->gauge("c4_ingest_store_nodes", "Nodes with data in the report store.").get();
  hook_ = registry->onCollect([this, &jobs, &ranks, &connections, &samples, &nodes] {
    StoreStats s = stats();
    jobs.set(static_cast<double>(s.jobs));
    ranks.set(static_cast<double>(s.ranks));
    connections.set(static_cast<double>(s.connections));
    samples.set(static_cast<double>(s.samples));
    nodes.set(static_cast<double>(s.nodes));
  });
}

void ReportStore::setCheckpointListener(std::function<void(const std::string&)> listener) {
  std::unique_lock lock(mu_);
  listener_ = std::move(listener);
}

JobRecord* ReportStore::jobFor(const std::string& key, const JobFacts& facts) {
  auto it = jobs_.find(key);
  if (it != jobs_.end()) {
    JobRecord& job = it->second;
    if (job.facts.uid == facts.uid && job.facts.attempt == facts.attempt) {
      job.facts.world_size = facts.world_size;
      return &job;
    }
    if (job.facts.uid == facts.uid && facts.attempt < job.facts.attempt) return nullptr;  // old
    jobs_.erase(it);  // recreated or a newer attempt: start afresh
  }
  auto slash = key.find('/');
  JobRecord job;
  job.ns = key.substr(0, slash);
  job.name = key.substr(slash + 1);
  job.facts = facts;
  return &jobs_.emplace(key, std::move(job)).first->second;
}

void ReportStore::addRankReport(JobRecord& job, const report::RankReport& r, WallTime received) {
  RankRecord& rank = job.ranks[r.id.rank];
  if (!rank.reports.empty() && rank.identity.pid == r.id.pid && rank.identity.pod == r.id.pod &&
      r.seq <= rank.reports.back().seq) {
    return;  // a resent batch carried this report already
  }
  rank.identity = r.id;
  rank.last_report = received;
  ++rank.reports_total;
  ++job.reports_total;
  job.last_report = std::max(job.last_report, received);
  auto whole = std::make_shared<StoredReport>();
  whole->header = RankHeader{
      r.seq,          r.time_unix_ns,     r.interval_ms,
      r.plan_version, r.dropped_messages, static_cast<std::uint32_t>(r.connections.size()),
      received,       r.communicators,    r.last};
  rank.reports.push_back(whole->header);
  while (rank.reports.size() > config_.history) rank.reports.pop_front();
  const std::uint64_t now = rank.reports_total;
  // The tracked connections of this report, in the report's order: the first of each id goes
  // into the stored report (by id), a repeated one only into its history (as its own copy).
  auto& tracked = tracked_;
  tracked.clear();
  std::size_t firsts = 0;
  for (const auto& c : r.connections) {
    auto it = rank.connections.find(c.id);
    if (it == rank.connections.end()) {
      if (rank.connections.size() >= config_.max_connections_per_rank) continue;
      it = rank.connections.emplace(c.id, ConnectionHistory{}).first;
    }
    const bool first = it->second.last_seen_report != now;
    it->second.last_seen_report = now;
    tracked.push_back({&c, &it->second, first});
    if (first) ++firsts;
  }
  // Connections that come by id, each once (the usual report), need no sorting.
  auto by_id = [](const TrackedConnection& a, const TrackedConnection& b) {
    return a.first != b.first ? a.first : a.first && a.stats->id < b.stats->id;
  };
  if (firsts != tracked.size() || !std::is_sorted(tracked.begin(), tracked.end(), by_id)) {
    std::stable_sort(tracked.begin(), tracked.end(), by_id);
  }
  whole->connections.reserve(firsts);
  for (std::size_t i = 0; i < firsts; ++i) whole->connections.push_back(*tracked[i].stats);
  const StoredReportPtr shared = std::move(whole);
  for (std::size_t i = 0; i < tracked.size(); ++i) {
    std::shared_ptr<const report::ConnectionStats> stats =
        i < firsts ? std::shared_ptr<const report::ConnectionStats>(shared, &shared->connections[i])
                   : std::make_shared<const report::ConnectionStats>(*tracked[i].stats);
    auto& samples = tracked[i].history->samples;
    samples.emplace_back(r.seq, r.time_unix_ns, std::move(stats));
    while (samples.size() > config_.history) samples.pop_front();
  }
  std::erase_if(rank.connections, [&](const auto& entry) {
    return now - entry.second.last_seen_report >= config_.history;
  });
  rank.whole_reports.push_back(shared);
  while (rank.whole_reports.size() > config_.history) {
    StoredReportPtr gone = std::move(rank.whole_reports.front());
    rank.whole_reports.pop_front();
    // A connection absent from the reports since keeps its sample of the report that leaves: it
    // gets its own copy, so a report outlives its place in the history only while a reader
    // holds it. (Not the common case: a connection in every report has dropped that sample.)
    if (gone.use_count() > 1) keepSamplesOf(rank, gone);
  }
}

void ReportStore::keepSamplesOf(RankRecord& rank, const StoredReportPtr& gone) {
  auto points_into = [&](const ConnectionSample& s) {
    return !s.shared.owner_before(gone) && !gone.owner_before(s.shared);
  };
  for (const auto& c : gone->connections) {
    auto it = rank.connections.find(c.id);
    if (it == rank.connections.end()) continue;
    auto& samples = it->second.samples;
    if (std::none_of(samples.begin(), samples.end(), points_into)) continue;
    std::deque<ConnectionSample> kept;
    for (const auto& s : samples) {
      if (points_into(s)) {
        kept.emplace_back(s.report_seq, s.time_unix_ns,
                          std::make_shared<const report::ConnectionStats>(s.stats));
      } else {
        kept.push_back(s);
      }
    }
    samples.swap(kept);
  }
}

bool ReportStore::markCheckpoint(JobRecord& job, const report::CheckpointNotice& notice) {
  const std::int32_t world = job.facts.world_size;
  if (world <= 0 || notice.id.rank < 0 || notice.id.rank >= world) return false;
  if (job.checkpoint && notice.step <= job.checkpoint->step) return false;  // nothing newer
  auto it = job.steps.find(notice.step);
  if (it == job.steps.end()) {
    if (job.steps.size() >= config_.max_checkpoint_steps) {
      if (notice.step < job.steps.begin()->first) return false;  // older than all we track
      job.steps.erase(job.steps.begin());
    }
    it = job.steps.emplace(notice.step, JobRecord::StepMarks{}).first;
    it->second.ranks.assign(static_cast<std::size_t>(world), false);
  }
  auto& marks = it->second;
  if (marks.ranks.size() != static_cast<std::size_t>(world)) {
    marks.ranks.resize(static_cast<std::size_t>(world), false);  // world size changed
  }
  auto index = static_cast<std::size_t>(notice.id.rank);
  if (!marks.ranks[index]) {
    marks.ranks[index] = true;
    ++marks.count;
  }
  if (notice.id.rank == 0 || (!marks.path_from_rank0 && marks.path.empty())) {
    marks.path = notice.path;
    marks.path_from_rank0 = notice.id.rank == 0;
  }
  marks.newest_ns = std::max(marks.newest_ns, notice.time_unix_ns);
  if (marks.count < world) return false;
  job.checkpoint = ReportedCheckpoint{notice.step, marks.path, fromUnixNanos(marks.newest_ns),
                                      job.facts.attempt};
  // Steps up to this one are settled.
  job.steps.erase(job.steps.begin(), job.steps.upper_bound(notice.step));
  return true;
}

void ReportStore::observeClock(NodeRecord& node, std::int64_t stamp_ns, WallTime received) const {
  auto& samples = node.offset_samples;
  while (!samples.empty() && (samples.size() >= config_.offset_samples ||
                              received - samples.front().first > config_.offset_memory)) {
    samples.pop_front();
  }
  if (stamp_ns > 0 && config_.offset_samples > 0) {
    // Saturating: a stamp far from any real clock must not overflow the difference.
    const std::int64_t now_ns = toUnixNanos(received);
    const std::int64_t sample = stamp_ns < now_ns - kMaxOffsetNs   ? kMaxOffsetNs
                                : stamp_ns > now_ns + kMaxOffsetNs ? -kMaxOffsetNs
                                                                   : now_ns - stamp_ns;
    samples.emplace_back(received, sample);
  }
  if (samples.empty()) {
    node.clock_offset_ns.reset();
    return;
  }
  std::int64_t best = samples.front().second;
  for (const auto& s : samples) best = std::min(best, s.second);
  node.clock_offset_ns = best;
}

std::int64_t ReportStore::onOperatorClock(const NodeRecord& node, std::int64_t stamp_ns,
                                          WallTime received) {
  const std::int64_t arrival = toUnixNanos(received);
  if (!node.clock_offset_ns || stamp_ns <= 0) return arrival;
  // Both within kMaxOffsetNs of a real time: no overflow.
  const std::int64_t offset = *node.clock_offset_ns;
  if (stamp_ns > arrival + kMaxOffsetNs || stamp_ns < arrival - kMaxOffsetNs) return arrival;
  return std::min(arrival, stamp_ns + offset);
}

std::size_t ReportStore::apply(const report::NodeReport& batch,
                               const std::map<std::string, JobFacts>& jobs, WallTime received,
                               std::uint64_t operator_dropped) {
  std::vector<std::string> advanced;
  std::size_t ignored = 0;
  std::function<void(const std::string&)> listener;
  {
    std::unique_lock lock(mu_);
    listener = listener_;
    auto node = nodes_.find(batch.node);
    if (node == nodes_.end()) {
      if (nodes_.size() >= config_.max_nodes) {
        auto oldest = std::min_element(
            nodes_.begin(), nodes_.end(),
            [](const auto& a, const auto& b) { return a.second.last_batch < b.second.last_batch; });
        nodes_.erase(oldest);
      }
      node = nodes_.emplace(batch.node, NodeRecord{}).first;
      node->second.name = batch.node;
    }
    NodeRecord& n = node->second;
    observeClock(n, batch.time_unix_ns, received);
    auto facts_of = [&](const report::RankIdentity& id) -> JobRecord* {
      std::string key = jobKey(id.ns, id.job);
      auto f = jobs.find(key);
      if (f == jobs.end() || f->second.attempt != id.restart_attempt) return nullptr;
      if (id.rank < 0 || id.rank >= f->second.world_size) return nullptr;
      return jobFor(key, f->second);
    };
    for (const auto& r : batch.reports) {
      JobRecord* job = facts_of(r.id);
      if (job == nullptr) {
        ++ignored;
        continue;
      }
      // A replayed report (last words of an exited rank, resent to this process after a
      // failover) is as old as its stamp says: timed by its arrival it would make a dead rank
      // look alive. One older than what the rank reported here since (a process of the same
      // pod, rank and attempt that runs now) is ignored: it would make that one look silent.
      if (batch.replay) {
        const WallTime said = fromUnixNanos(onOperatorClock(n, r.time_unix_ns, received));
        auto known = job->ranks.find(r.id.rank);
        if (known != job->ranks.end() && !known->second.reports.empty() &&
            known->second.last_report >= said) {
          continue;
        }
        addRankReport(*job, r, said);
        continue;
      }
      addRankReport(*job, r, received);
    }
    for (const auto& notice : batch.notices) {
      const report::RankIdentity& id = std::visit(
          [](const auto& item) -> const report::RankIdentity& { return item.id; }, notice);
      JobRecord* job = facts_of(id);
      if (job == nullptr) {
        ++ignored;
        continue;
      }
      ++job->notices_total;
      if (const auto* progress = std::get_if<report::ProgressNotice>(&notice)) {
        RankRecord& rank = job->ranks[id.rank];
        // A replayed state is the rank's last before it exited: it never replaces one heard here.
        if (batch.replay && rank.progress) continue;
        if (rank.reports_total == 0 && rank.identity.rank < 0) rank.identity = id;
        // Arrival orders notices, and the operator's clock times them: a sender's clock (maybe
        // skewed, maybe forged) would otherwise decide which state wins, and a "checkpointing"
        // stamped in the future would keep C4D's hang rules off until that time.
        report::ProgressNotice received_notice = *progress;
        received_notice.time_unix_ns = batch.replay
                                           ? onOperatorClock(n, progress->time_unix_ns, received)
                                           : toUnixNanos(received);
        rank.progress = received_notice;
        if (!batch.replay || !job->progress) job->progress = std::move(received_notice);
      } else if (const auto* anomaly = std::get_if<report::AnomalyNotice>(&notice)) {
        StoredAnomaly stored{++anomaly_seq_, anomaly->time_unix_ns, *anomaly};
        stored.notice.time_unix_ns = onOperatorClock(n, anomaly->time_unix_ns, received);
        job->anomalies.push_back(std::move(stored));
        while (job->anomalies.size() > config_.max_anomalies_per_job) job->anomalies.pop_front();
      } else if (const auto* cp = std::get_if<report::CheckpointNotice>(&notice)) {
        if (markCheckpoint(*job, *cp)) advanced.push_back(jobKey(job->ns, job->name));
      }
    }
    n.health = batch.health;
    n.last_batch = received;
    n.last_seq = batch.seq;
    ++n.batches;
    n.plugin_dropped = batch.dropped_messages;
    n.plugin_rejected = batch.rejected_messages;
    n.operator_dropped += operator_dropped + ignored;
  }
  if (listener) {
    std::sort(advanced.begin(), advanced.end());
    advanced.erase(std::unique(advanced.begin(), advanced.end()), advanced.end());
    for (const auto& key : advanced) listener(key);
  }
  return ignored;
}

void ReportStore::observeJob(const std::string& ns, const std::string& name,
                             const JobFacts& facts) {
  std::unique_lock lock(mu_);
  auto it = jobs_.find(jobKey(ns, name));
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  if (job.facts.uid != facts.uid || facts.attempt > job.facts.attempt) {
    jobs_.erase(it);
    return;
  }
  if (job.facts.world_size != facts.world_size) {
    // Resized: ranks beyond the new world go, checkpoint marks restart.
    job.facts.world_size = facts.world_size;
    std::erase_if(job.ranks, [&](const auto& r) { return r.first >= facts.world_size; });
    job.steps.clear();
  }
}

void ReportStore::dropJob(const std::string& ns, const std::string& name) {
  std::unique_lock lock(mu_);
  jobs_.erase(jobKey(ns, name));
}

std::vector<std::string> ReportStore::jobKeys() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> keys;
  keys.reserve(jobs_.size());
  for (const auto& [key, job] : jobs_) keys.push_back(key);
  return keys;
}

bool ReportStore::hasJob(std::string_view ns, std::string_view name) const {
  std::shared_lock lock(mu_);
  return jobs_.contains(jobKey(ns, name));
}

bool ReportStore::readJob(std::string_view ns, std::string_view name,
                          const std::function<void(const JobRecord&)>& read) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(jobKey(ns, name));
  if (it == jobs_.end()) return false;
  read(it->second);
  return true;
}

void ReportStore::forEachJob(const std::function<void(const JobRecord&)>& read) const {
  std::shared_lock lock(mu_);
  for (const auto& [key, job] : jobs_) read(job);
}

std::optional<RecentReports> ReportStore::recentReports(std::string_view ns, std::string_view name,
                                                        const RecentReportsQuery& query) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(jobKey(ns, name));
  if (it == jobs_.end()) return std::nullopt;
  const JobRecord& job = it->second;
  RecentReports out;
  out.ns = job.ns;
  out.name = job.name;
  out.facts = job.facts;
  const std::string* last_node = nullptr;  // consecutive ranks mostly share a node
  auto hint = out.ranks.end();
  for (const auto& [r, rank] : job.ranks) {
    RecentRank& view = out.ranks.emplace_hint(hint, r, RecentRank{})->second;
    view.identity = rank.identity;
    view.progress = rank.progress;
    const std::size_t n = std::min(query.reports, rank.whole_reports.size());
    view.reports.assign(rank.whole_reports.end() - static_cast<std::ptrdiff_t>(n),
                        rank.whole_reports.end());
    if (rank.reports_total > 0 && !rank.identity.node.empty() &&
        (last_node == nullptr || *last_node != rank.identity.node)) {
      last_node = &rank.identity.node;
      if (!out.nodes.contains(rank.identity.node)) {
        if (auto node = nodes_.find(rank.identity.node); node != nodes_.end()) {
          out.nodes.emplace(node->first, node->second);
        }
      }
    }
  }
  for (const auto& a : job.anomalies) {
    if (a.seq > query.anomalies_after_seq) out.anomalies.push_back(a.notice);
  }
  out.anomaly_seq = job.anomalies.empty() ? query.anomalies_after_seq : job.anomalies.back().seq;
  return out;
}

std::optional<ReportedCheckpoint> ReportStore::checkpoint(std::string_view ns,
                                                          std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(jobKey(ns, name));
  if (it == jobs_.end()) return std::nullopt;
  return it->second.checkpoint;
}

std::optional<NodeRecord> ReportStore::node(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

std::vector<NodeRecord> ReportStore::nodes() const {
  std::shared_lock lock(mu_);
  std::vector<NodeRecord> out;
  out.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) out.push_back(node);
  return out;
}

StoreStats ReportStore::stats() const {
  std::shared_lock lock(mu_);
  StoreStats s;
  s.jobs = jobs_.size();
  s.nodes = nodes_.size();
  for (const auto& [key, job] : jobs_) {
    s.ranks += job.ranks.size();
    for (const auto& [r, rank] : job.ranks) {
      s.connections += rank.connections.size();
      s.samples += rank.reports.size();
      for (const auto& [id, c] : rank.connections) s.samples += c.samples.size();
    }
  }
  return s;
}

Json ReportStore::summary(std::string_view ns, std::string_view job_name, bool connections) const {
  std::shared_lock lock(mu_);
  Json jobs = Json::array();
  for (const auto& [key, job] : jobs_) {
    if (!ns.empty() && job.ns != ns) continue;
    if (!job_name.empty() && job.name != job_name) continue;
    Json ranks = Json::array();
    std::int64_t reporting = 0;
    for (const auto& [r, rank] : job.ranks) {
      if (rank.reports_total > 0) ++reporting;
      std::size_t samples = 0;
      for (const auto& [id, c] : rank.connections) samples += c.samples.size();
      ranks.push_back(
          {{"rank", r},
           {"pod", rank.identity.pod},
           {"node", rank.identity.node},
           {"lastReport",
            rank.reports_total > 0 ? formatRfc3339Micro(rank.last_report) : std::string{}},
           {"reports", rank.reports_total},
           {"history", rank.reports.size()},
           {"connections", rank.connections.size()},
           {"connectionSamples", samples},
           {"progressStep", rank.progress ? Json(rank.progress->step) : Json(nullptr)}});
      if (connections) {
        // The newest sample of each connection: what the analyser reads.
        Json conns = Json::array();
        for (const auto& [id, c] : rank.connections) {
          if (c.samples.empty()) continue;
          const report::ConnectionStats& st = c.samples.back().stats;
          conns.push_back({{"id", id},
                           {"direction", std::string(report::directionName(st.direction))},
                           {"peerRank", st.peer_rank},
                           {"peerNode", st.peer_node},
                           {"bytes", st.bytes},
                           {"ops", st.ops},
                           {"inflight", st.inflight},
                           {"oldestInflightUs", st.oldest_inflight_us},
                           {"waitSumUs", st.wait.sum_us},
                           {"transferSumUs", st.transfer.sum_us},
                           {"reportSeq", c.samples.back().report_seq}});
        }
        ranks.back()["connectionDetail"] = std::move(conns);
      }
    }
    Json entry = {
        {"namespace", job.ns},
        {"job", job.name},
        {"uid", job.facts.uid},
        {"attempt", job.facts.attempt},
        {"worldSize", job.facts.world_size},
        {"ranksReporting", reporting},
        {"reports", job.reports_total},
        {"notices", job.notices_total},
        {"anomalies", job.anomalies.size()},
        {"lastReport", job.reports_total > 0 ? formatRfc3339Micro(job.last_report) : std::string{}},
        {"ranks", ranks}};
    if (job.checkpoint) {
      entry["checkpoint"] = {{"step", job.checkpoint->step},
                             {"path", job.checkpoint->path},
                             {"time", formatRfc3339(job.checkpoint->time)}};
    }
    jobs.push_back(std::move(entry));
  }
  Json nodes = Json::array();
  for (const auto& [name, node] : nodes_) {
    nodes.push_back({{"node", name},
                     {"lastBatch", formatRfc3339Micro(node.last_batch)},
                     {"lastSeq", node.last_seq},
                     {"batches", node.batches},
                     {"nics", node.health.nics.size()},
                     {"gpus", node.health.gpus.size()},
                     {"pluginDropped", node.plugin_dropped},
                     {"pluginRejected", node.plugin_rejected},
                     {"operatorDropped", node.operator_dropped},
                     {"clockOffsetMs", node.clock_offset_ns
                                           ? Json(static_cast<double>(*node.clock_offset_ns) / 1e6)
                                           : Json(nullptr)}});
  }
  return Json{{"jobs", jobs}, {"nodes", nodes}};
}

}  // namespace c4::op::ingest
