// The report store: what the node plugins delivered, per TrainingJob and per rank, in memory,
// for the C4D analyser (which reads it) and for status.lastCheckpoint.
//
// Layout (all bounded; `history` = ReportStoreConfig::history report intervals):
//
//   job "<ns>/<name>"  (uid, attempt, worldSize from the TrainingJob)
//     rank r in [0, worldSize)
//       identity            as last reported (pod, node, pid, attempt)
//       lastReport          operator wall time of the last RankReport
//       reports             the last `history` RankReport headers (seq, sender time, interval,
//                           plan version, dropped messages, number of connections, the
//                           communicators' collective progress), oldest first
//       connections[id]     the last `history` samples of each connection (cumulative counters,
//                           latency summaries, subflows) with the report seq and sender time;
//                           a connection absent from the last `history` reports is forgotten;
//                           at most `max_connections_per_rank`
//       whole_reports       the same reports whole (StoredReport: header and the tracked
//                           connections that came with it), immutable, shared: a connection's
//                           sample points into the report it came with
//       progress            the last ProgressNotice received, its time the operator's receive
//                           time (arrival orders notices: sender clocks order nothing)
//     anomalies             the last `max_anomalies_per_job` AnomalyNotices, oldest first, each
//                           with a store-wide arrival sequence number and its time moved onto
//                           the operator's clock (see "Clocks" below)
//     progress              the last ProgressNotice received from any rank (time as above)
//     checkpoint            the newest step every rank 0..world_size-1 has reported (see below)
//   node "<name>"           latest NodeHealth, last batch time and seq, batches, counters of
//                           messages the node plugin dropped/rejected and of reports the operator
//                           dropped; at most `max_nodes` (the longest silent goes first)
//
// Memory bound per rank: history × (2 × (sizeof(RankHeader) + M × sizeof(CommunicatorProgress))
// + sizeof(StoredReport) + C × (sizeof(ConnectionStats) + sizeof(ConnectionSample) + S ×
// sizeof(SubflowStats) + peer names)) for M communicators (at most 256, 64 bytes each) and C
// connections of S subflows, plus one ProgressNotice and the checkpoint marks
// (max_checkpoint_steps bits). A report leaves the rank's history whole: a connection absent from
// the reports since that still holds its sample gets its own copy of it (the same bound). With
// the defaults (history 8) and 8 connections of 4 subflows a rank costs about 25 KiB, and each
// communicator 1 KiB more. Readers holding reports (recentReports) keep them alive after they
// leave the history.
//
// Attempts: a job's data belongs to one (uid, attempt). Data of a newer attempt (or of a job
// recreated under the same name) replaces everything held for the job, checkpoint marks
// included; reports of an older attempt never reach the store (the endpoint drops them).
// dropJob() forgets a job (its TrainingJob was deleted).
//
// Checkpoints: for each step the store records which ranks reported it (path of rank 0, or of
// the first rank when rank 0 has not reported yet, and the newest notice time). The job's
// checkpoint is the newest step all worldSize ranks reported. It never moves back within an
// attempt. When it advances the checkpoint listener is called with "<ns>/<name>" (outside the
// store's lock): the TrainingJob controller enqueues the job and writes status.lastCheckpoint.
//
// Clocks: sender clocks order no evidence. Each node's clock is compared with the operator's
// on every batch (received minus the batch's stamp = clock offset + delivery delay); the
// smallest such sample of the last `offset_samples` batches within `offset_memory` estimates
// the offset (as NTP's minimum filter does: the fastest delivery carries the least delay). An
// anomaly's stamp is moved by its node's estimate, so stamps from nodes whose clocks disagree
// compare on one time line (C4D orders a crash cascade by them), and is never later than the
// batch's arrival; before a node has an estimate its anomalies take the arrival time. A reader
// asks for anomalies by arrival sequence, not by time: one stamped in the future hides none
// that arrive after it.
//
// Replayed last words (NodeReport.replay: a node plugin resends what exited ranks last said to
// an operator process that took over after the one it was delivered to): their RankReports are
// timed by their stamps moved onto the operator's clock (never later than arrival), so a dead
// rank's last report reads as old as it is; a replayed ProgressNotice is the rank's state only
// when none was received here, timed the same way. A replayed report already held (same pid,
// seq not newer) is ignored, as a resent one is, and so is one older than what the rank reported
// here since (a process of the same pod, rank and attempt that runs now).
//
// Readers that analyse a job (C4D) ask for its recent whole reports (recentReports): each
// RankReport as it arrived, header and connections together, with the ranks' identities, the
// job's newer anomalies and the reporting nodes' records. The reports are the store's immutable
// StoredReports, handed out by pointer (under the shared lock a window copies a few pointers per
// rank, not the samples); the rest is copied.
//
// Thread-safety: one shared_mutex. apply() and the other writers hold it exclusively for the
// time it takes to copy a batch in; readers hold it shared while their callback runs (the
// callback must not call back into the store and should be quick: copy what it needs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "c4/common/report.h"
#include "kube/client/kube_client.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// What the TrainingJob informer says of a job.
struct JobFacts {
  std::string uid;
  std::uint32_t attempt = 0;    // status.attempt
  std::int32_t world_size = 0;  // spec.replicas × processes per pod
  friend bool operator==(const JobFacts&, const JobFacts&) = default;
};

struct ReportedCheckpoint {
  std::int64_t step = 0;
  std::string path;
  WallTime time{};  // the newest notice time (sender clock) among the ranks for this step
  std::uint32_t attempt = 0;
  friend bool operator==(const ReportedCheckpoint&, const ReportedCheckpoint&) = default;
};

// A RankReport without its connections.
struct RankHeader {
  std::uint64_t seq = 0;
  std::int64_t time_unix_ns = 0;  // sender clock
  std::uint32_t interval_ms = 0;
  std::int64_t plan_version = -1;
  std::uint64_t dropped_messages = 0;
  std::uint32_t connections = 0;
  WallTime received{};  // operator clock
  // The rank's NCCL communicators (profiler plugin; empty from the net plugin).
  std::vector<report::CommunicatorProgress> communicators;
  bool last = false;  // the process's last report (RankReport.last)
};

// A connection's sample: the ConnectionStats it came with, immutable and shared with the stored
// report it arrived in (StoredReport), so readers copy pointers, not samples.
struct ConnectionSample {
  ConnectionSample(std::uint64_t seq, std::int64_t time,
                   std::shared_ptr<const report::ConnectionStats> shared_stats)
      : report_seq(seq), time_unix_ns(time), shared(std::move(shared_stats)), stats(*shared) {}
  std::uint64_t report_seq = 0;
  std::int64_t time_unix_ns = 0;
  std::shared_ptr<const report::ConnectionStats> shared;  // owns `stats` (never null)
  const report::ConnectionStats& stats;
};

struct ConnectionHistory {
  std::deque<ConnectionSample> samples;  // oldest first, at most `history`
  std::uint64_t last_seen_report = 0;    // internal: the rank's report count when last seen
};

// An AnomalyNotice as stored: its time on the operator's clock (see "Clocks").
struct StoredAnomaly {
  std::uint64_t seq = 0;                 // store-wide arrival order, from 1
  std::int64_t sender_time_unix_ns = 0;  // as stamped by the sender
  report::AnomalyNotice notice;
};

// One RankReport as the store holds it: its header and the samples of the connections the store
// tracks that came with it (by connection id; the first of a connection id given twice).
// Immutable once stored and shared: the store and the readers that asked for it (recentReports)
// hold the same object, and the connections' histories point into it.
struct StoredReport {
  RankHeader header;
  std::vector<report::ConnectionStats> connections;
};
using StoredReportPtr = std::shared_ptr<const StoredReport>;

struct RankRecord {
  report::RankIdentity identity;
  WallTime last_report{};
  std::deque<RankHeader> reports;                          // oldest first, at most `history`
  std::map<std::uint64_t, ConnectionHistory> connections;  // by connection id
  // The same reports as `reports`, whole (what recentReports hands out), oldest first.
  std::deque<StoredReportPtr> whole_reports;
  std::optional<report::ProgressNotice> progress;
  std::uint64_t reports_total = 0;  // RankReports stored for this rank (this attempt)
};

struct JobRecord {
  std::string ns;
  std::string name;
  JobFacts facts;
  std::map<std::int32_t, RankRecord> ranks;
  std::deque<StoredAnomaly> anomalies;  // oldest first
  std::optional<report::ProgressNotice> progress;
  std::optional<ReportedCheckpoint> checkpoint;
  WallTime last_report{};
  std::uint64_t reports_total = 0;
  std::uint64_t notices_total = 0;

  // Internal: per checkpoint step, which ranks reported it.
  struct StepMarks {
    std::vector<bool> ranks;
    std::int32_t count = 0;
    std::string path;
    bool path_from_rank0 = false;
    std::int64_t newest_ns = 0;
  };
  std::map<std::int64_t, StepMarks> steps;
};

struct NodeRecord {
  std::string name;
  report::NodeHealth health;
  WallTime last_batch{};  // operator clock
  std::uint64_t last_seq = 0;
  std::uint64_t batches = 0;
  std::uint64_t plugin_dropped = 0;    // NodeReport.droppedMessages, latest value
  std::uint64_t plugin_rejected = 0;   // NodeReport.rejectedMessages, latest value
  std::uint64_t operator_dropped = 0;  // rank reports/notices the endpoint dropped, cumulative
  // The node's clock seen from the operator (see "Clocks"): operator minus node, plus the
  // fastest delivery's delay; nullopt until a batch carried a stamp.
  std::optional<std::int64_t> clock_offset_ns;
  // Internal: (arrival, received - stamp) of the recent batches, oldest first.
  std::deque<std::pair<WallTime, std::int64_t>> offset_samples;
};

// What recentReports() returns for one rank.
struct RecentRank {
  report::RankIdentity identity;  // as last reported (pod, node, pid, attempt)
  // The newest `reports` RankReports, oldest first: the store's own immutable objects (never
  // null), which stay valid however long the reader keeps them.
  std::vector<StoredReportPtr> reports;
  std::optional<report::ProgressNotice> progress;
};

// A job's recent whole reports (recentReports()).
struct RecentReports {
  std::string ns;
  std::string name;
  JobFacts facts;
  std::map<std::int32_t, RecentRank> ranks;      // ranks with anything stored
  std::vector<report::AnomalyNotice> anomalies;  // arrived after the query's bound, oldest first
  std::uint64_t anomaly_seq = 0;  // the newest stored anomaly's seq: the next query's bound
  // The records of the nodes the ranks last reported from (NodeRecord.name == key).
  std::map<std::string, NodeRecord> nodes;
};

struct RecentReportsQuery {
  std::size_t reports = 3;  // per rank, newest first kept (at most the store's history)
  // Only anomalies that arrived after this one (RecentReports::anomaly_seq of a caller's last
  // query; 0: all held).
  std::uint64_t anomalies_after_seq = 0;
};

struct ReportStoreConfig {
  std::size_t history = 8;
  std::size_t max_connections_per_rank = report::kMaxConnectionsPerReport;
  std::size_t max_anomalies_per_job = 256;
  std::size_t max_checkpoint_steps = 16;
  std::size_t max_nodes = 100000;
  std::size_t offset_samples = 32;                   // batches per node's clock estimate
  Duration offset_memory = std::chrono::minutes{2};  // the oldest sample an estimate uses
};

struct StoreStats {
  std::size_t jobs = 0;
  std::size_t ranks = 0;
  std::size_t connections = 0;
  std::size_t samples = 0;  // connection samples + report headers
  std::size_t nodes = 0;
};

class ReportStore {
 public:
  // `registry` may be null (no c4_ingest_store_* gauges).
  explicit ReportStore(ReportStoreConfig config = {}, metrics::Registry* registry = nullptr);
  ReportStore(const ReportStore&) = delete;
  ReportStore& operator=(const ReportStore&) = delete;

  // Called with "<ns>/<name>" when a job's checkpoint advanced. Set before the first apply().
  void setCheckpointListener(std::function<void(const std::string& job_key)> listener);

  // --- Writers (the endpoint, the TrainingJob informer) ---
  // Stores an accepted batch. Every rank report and notice in it must be attributed (the
  // endpoint checked pod, node, job and rank) and its job named in `jobs` ("<ns>/<job>" ->
  // facts); items of a job not in `jobs` or of another attempt are ignored (counted in the
  // return value). `operator_dropped`: items the endpoint dropped from this batch.
  std::size_t apply(const report::NodeReport& batch, const std::map<std::string, JobFacts>& jobs,
                    WallTime received, std::uint64_t operator_dropped);
  // The TrainingJob changed: a new uid or a newer attempt drops what is held for the job.
  void observeJob(const std::string& ns, const std::string& name, const JobFacts& facts);
  // The TrainingJob was deleted.
  void dropJob(const std::string& ns, const std::string& name);

  // --- Readers (the C4D analyser, the controller, the debug endpoint) ---
  [[nodiscard]] std::vector<std::string> jobKeys() const;
  [[nodiscard]] bool hasJob(std::string_view ns, std::string_view name) const;
  // Runs `read` under the shared lock with the job's record; false when the job is unknown.
  bool readJob(std::string_view ns, std::string_view name,
               const std::function<void(const JobRecord&)>& read) const;
  void forEachJob(const std::function<void(const JobRecord&)>& read) const;
  // A copy of the job's recent whole reports (see RecentReports); nullopt when the job is
  // unknown. What C4D analyses each window.
  [[nodiscard]] std::optional<RecentReports> recentReports(std::string_view ns,
                                                           std::string_view name,
                                                           const RecentReportsQuery& query) const;
  [[nodiscard]] std::optional<ReportedCheckpoint> checkpoint(std::string_view ns,
                                                             std::string_view name) const;
  [[nodiscard]] std::optional<NodeRecord> node(std::string_view name) const;
  [[nodiscard]] std::vector<NodeRecord> nodes() const;
  [[nodiscard]] StoreStats stats() const;
  // The debug summary (GET /debug/reports): for one job (ns and job set) or every job in `ns`
  // (or everything when both are empty): ranks reporting, last seen, counts, checkpoint.
  // `connections`: with each rank's connections as last reported (GET /debug/reports?...&
  // connections=1).
  [[nodiscard]] Json summary(std::string_view ns, std::string_view job,
                             bool connections = false) const;
  [[nodiscard]] const ReportStoreConfig& config() const { return config_; }

 private:
  JobRecord* jobFor(const std::string& key, const JobFacts& facts);
  // Returns true when the job's checkpoint advanced.
  bool markCheckpoint(JobRecord& job, const report::CheckpointNotice& notice);
  void addRankReport(JobRecord& job, const report::RankReport& r, WallTime received);
  // The samples that point into `gone` (a report leaving the rank's history) get their own copy.
  static void keepSamplesOf(RankRecord& rank, const StoredReportPtr& gone);
  // Takes a batch's stamp as a sample of the node's clock offset (see "Clocks").
  void observeClock(NodeRecord& node, std::int64_t stamp_ns, WallTime received) const;
  // A stamp of the node's clock on the operator's, never after `received`.
  static std::int64_t onOperatorClock(const NodeRecord& node, std::int64_t stamp_ns,
                                      WallTime received);

  // addRankReport's scratch (under the exclusive lock): a report's tracked connections.
  struct TrackedConnection {
    const report::ConnectionStats* stats;
    ConnectionHistory* history;
    bool first;  // the first of its id in the report
  };
  std::vector<TrackedConnection> tracked_;

  ReportStoreConfig config_;
  mutable std::shared_mutex mu_;
  std::map<std::string, JobRecord, std::less<>> jobs_;  // "<ns>/<name>"
  std::map<std::string, NodeRecord, std::less<>> nodes_;
  std::uint64_t anomaly_seq_ = 0;
  std::function<void(const std::string&)> listener_;
  metrics::CollectHook hook_;
};

}  // namespace c4::op::ingest
