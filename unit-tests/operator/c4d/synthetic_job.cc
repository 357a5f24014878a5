#include "synthetic_job.h"

#include <algorithm>
#include <set>

namespace c4::c4d::testing {
namespace {

constexpr std::uint64_t kOpsPerWindow = 20;
constexpr double kComputeShare = 0.5;

std::uint64_t toU64(double v) {
  return v <= 0.0 ? 0 : static_cast<std::uint64_t>(v);
}

}  // namespace

SyntheticJob::SyntheticJob(JobSpec spec)
    : spec_(std::move(spec)),
      rng_(spec_.seed),
      now_(WallTime{std::chrono::seconds{1'700'000'000}}) {
  const int n = spec_.nodes * spec_.ranks_per_node;
  snap_.ns = "default";
  snap_.name = "job";
  snap_.world_size = n;
  snap_.attempt = 0;
  snap_.thresholds = spec_.thresholds;
  for (int i = 0; i < spec_.nodes; ++i) {
    NodeSnapshot ns;
    ns.name = nodeName(i);
    snap_.nodes.push_back(ns);
  }
  snap_.ranks.resize(static_cast<std::size_t>(n));
  ranks_.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& rs = snap_.ranks[static_cast<std::size_t>(r)];
    rs.node = nodeOfRank(r);
    rs.pod = "job-" + std::to_string(r);
  }
  newAttempt();
  snap_.attempt = 0;
}

std::string SyntheticJob::nodeName(int node) {
  return "node-" + std::to_string(node);
}

double SyntheticJob::jit() {
  std::uniform_real_distribution<double> d(1.0 - spec_.jitter, 1.0 + spec_.jitter);
  return d(rng_);
}

void SyntheticJob::buildEdges() {
  edges_.clear();
  const int n = worldSize();
  for (auto& r : ranks_) {
    r.out.clear();
    r.in.clear();
  }
  for (int r = 0; r < n; ++r) {
    std::set<int> peers;
    for (int k = 0; k <= spec_.extra_rings; ++k) {
      const int stride = k == 0 ? 1 : 2 * k + 1;
      peers.insert(((r + stride) % n + n) % n);
      peers.insert(((r - stride) % n + n) % n);
    }
    peers.erase(r);
    for (int p : peers) {
      GEdge e;
      e.src = r;
      e.dst = p;
      e.send_id = next_conn_id_++;
      e.recv_id = next_conn_id_++;
      ranks_[static_cast<std::size_t>(r)].out.push_back(static_cast<int>(edges_.size()));
      ranks_[static_cast<std::size_t>(p)].in.push_back(static_cast<int>(edges_.size()));
      edges_.push_back(e);
    }
  }
}

std::vector<int> SyntheticJob::sendPeers(int rank) const {
  std::vector<int> out;
  for (int e : ranks_[static_cast<std::size_t>(rank)].out) {
    out.push_back(edges_[static_cast<std::size_t>(e)].dst);
  }
  return out;
}

void SyntheticJob::straggler(int rank, double computeFactor) {
  straggler_rank_ = rank;
  straggler_factor_ = computeFactor;
}

void SyntheticJob::slowLink(int nodeA, int nodeB, double factor) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if ((a == nodeA && b == nodeB) || (a == nodeB && b == nodeA)) e.slow_factor = factor;
  }
}

void SyntheticJob::slowNic(int node, double factor) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if (a != b && (a == node || b == node)) e.slow_factor = factor;
  }
}

void SyntheticJob::enterStall() {
  if (mode_ != Mode::kStalled) stall_since_ = now_;
  mode_ = Mode::kStalled;
}

void SyntheticJob::freeze(int rank) {
  frozen_rank_ = rank;
  ranks_[static_cast<std::size_t>(rank)].reporting = false;
  enterStall();
}

void SyntheticJob::busyHang(int rank) {
  frozen_rank_ = rank;
  ranks_[static_cast<std::size_t>(rank)].hung_busy = true;
  enterStall();
}

void SyntheticJob::blackhole(int nodeA, int nodeB) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if ((a == nodeA && b == nodeB) || (a == nodeB && b == nodeA)) e.blocked = true;
  }
  enterStall();
}

void SyntheticJob::killNic(int node) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if (a != b && (a == node || b == node)) e.blocked = true;
  }
  enterStall();
}

void SyntheticJob::crash(int rank, int podLagWindows, bool cascade) {
  crashed_[rank] = window_ + 1 + podLagWindows;
  auto& r = ranks_[static_cast<std::size_t>(rank)];
  r.reporting = false;
  if (cascade) cascade_window_ = window_ + 3;
  const WallTime t = now_ + std::chrono::milliseconds{500};
  for (int ei : r.out) {
    const auto& e = edges_[static_cast<std::size_t>(ei)];
    ranks_[static_cast<std::size_t>(e.dst)].pending_anomalies.push_back(
        {report::AnomalyKind::kPeerClosed, rank, report::Direction::kRecv, 0, t});
  }
  for (int ei : r.in) {
    const auto& e = edges_[static_cast<std::size_t>(ei)];
    ranks_[static_cast<std::size_t>(e.src)].pending_anomalies.push_back(
        {report::AnomalyKind::kPeerClosed, rank, report::Direction::kSend, 0, t});
  }
  enterStall();
}

void SyntheticJob::pluginOutage(int node) {
  for (int r = 0; r < worldSize(); ++r) {
    if (nodeOfRank(r) == node) ranks_[static_cast<std::size_t>(r)].reporting = false;
  }
  snap_.nodes[static_cast<std::size_t>(node)].telemetry_arriving = false;
}

void SyntheticJob::pause(report::ProgressState state, int rank, int announcedBy,
                         double expectedSeconds) {
  if (mode_ != Mode::kPaused) stall_since_ = now_;
  mode_ = Mode::kPaused;
  paused_rank_ = rank;
  for (int r = 0; r < worldSize(); ++r) {
    if (announcedBy < 0 || r == announcedBy) {
      ranks_[static_cast<std::size_t>(r)].progress =
          ProgressSample{state, window_, now_, expectedSeconds};
    }
  }
}

void SyntheticJob::resume(int backlogLagWindows) {
  if (backlogLagWindows >= 0 && mode_ == Mode::kPaused) {
    backlog_from_ = window_ + 1 + backlogLagWindows;
    backlog_to_ = backlog_from_ + 1;
    backlog_us_ = std::chrono::duration<double, std::micro>(now_ - stall_since_).count();
  }
  mode_ = Mode::kFlow;
  for (auto& r : ranks_)
    r.progress = ProgressSample{report::ProgressState::kTraining, window_, now_};
}

void SyntheticJob::idle() {
  mode_ = Mode::kIdle;
  for (auto& r : ranks_) r.progress = ProgressSample{report::ProgressState::kIdle, window_, now_};
}

void SyntheticJob::healAll() {
  mode_ = Mode::kFlow;
  straggler_rank_ = -1;
  frozen_rank_ = -1;
  crashed_.clear();
  cascade_window_ = -1;
  for (auto& e : edges_) {
    e.slow_factor = 1.0;
    e.blocked = false;
  }
  for (auto& r : ranks_) {
    r.reporting = true;
    r.hung_busy = false;
    r.pod = PodState::kRunning;
  }
  for (auto& n : snap_.nodes) n.telemetry_arriving = true;
}

void SyntheticJob::newAttempt() {
  healAll();
  ++snap_.attempt;
  attempt_start_window_ = window_ + 1;
  std::uniform_int_distribution<int> start(0, spec_.start_spread_windows);
  for (auto& r : ranks_) {
    r.start_window = start(rng_);
    r.history.clear();
    r.pending_anomalies.clear();
    r.progress.reset();
  }
  buildEdges();
}

void SyntheticJob::setNodeFault(int node, bool nicDown, bool gpuFault, std::string detail) {
  auto& n = snap_.nodes[static_cast<std::size_t>(node)];
  n.nic_down = nicDown;
  n.gpu_fault = gpuFault;
  n.health_detail = std::move(detail);
}

void SyntheticJob::setRepeatOffender(int node, double score) {
  snap_.nodes[static_cast<std::size_t>(node)].repeat_offender_score = score;
}

void SyntheticJob::step() {
  now_ += std::chrono::seconds{1};
  ++window_;
  const std::int64_t age = window_ - attempt_start_window_;
  auto started = [&](int r) { return age >= ranks_[static_cast<std::size_t>(r)].start_window; };

  for (const auto& [rank, failAt] : crashed_) {
    if (window_ == failAt) ranks_[static_cast<std::size_t>(rank)].pod = PodState::kFailed;
  }
  if (cascade_window_ >= 0 && window_ == cascade_window_) {
    // The NCCL abort cascade: every survivor reports its upstream closed and exits.
    for (int r = 0; r < worldSize(); ++r) {
      auto& g = ranks_[static_cast<std::size_t>(r)];
      if (crashed_.contains(r) || g.in.empty()) continue;
      const auto& e = edges_[static_cast<std::size_t>(g.in.front())];
      g.pending_anomalies.push_back(
          {report::AnomalyKind::kPeerClosed, e.src, report::Direction::kRecv, 0, now_});
      g.reporting = false;
      g.pod = PodState::kFailed;
    }
  }

  // Job-level pace for flowing windows.
  double slowdown = 1.0;
  bool slowLinks = false;
  const double xferShare = spec_.bytes_per_window / spec_.link_bytes_per_sec;
  for (const auto& e : edges_) {
    if (e.slow_factor < 1.0) {
      slowLinks = true;
      slowdown = std::max(slowdown, 1.0 + (1.0 / e.slow_factor - 1.0) * xferShare);
    }
  }
  const double strag =
      straggler_rank_ >= 0 ? kComputeShare * straggler_factor_ + 1.0 - kComputeShare : 1.0;
  slowdown = std::max(slowdown, strag);
  const double extraWait = (slowdown - 1.0) / slowdown;

  const double ageUs = std::chrono::duration<double, std::micro>(now_ - stall_since_).count();
  std::uniform_int_distribution<int> inflight3(0, 2), inflight2(0, 1);
  std::uniform_real_distribution<double> young(0.0, 50'000.0), late(0.0, 300.0);

  // Per-edge samples for this window.
  std::vector<ConnSample> sendS(edges_.size()), recvS(edges_.size());
  std::vector<char> active(edges_.size(), 0);
  for (std::size_t i = 0; i < edges_.size(); ++i) {
    GEdge& e = edges_[i];
    if (!started(e.src) || !started(e.dst)) continue;
    active[i] = 1;
    ConnSample s;
    s.id = e.send_id;
    s.direction = report::Direction::kSend;
    s.peer_rank = e.dst;
    ConnSample r;
    r.id = e.recv_id;
    r.direction = report::Direction::kRecv;
    r.peer_rank = e.src;
    if (mode_ == Mode::kFlow) {
      const double bytes = spec_.bytes_per_window / slowdown * jit();
      e.send_bytes += toU64(bytes);
      e.recv_bytes += toU64(bytes);
      e.send_ops += kOpsPerWindow;
      e.recv_ops += kOpsPerWindow;
      const double xferUs = bytes / (spec_.link_bytes_per_sec * e.slow_factor * jit()) * 1e6;
      double wait = spec_.base_wait_share * jit();
      if (e.slow_factor >= 1.0 && slowLinks) wait += extraWait;
      if (straggler_rank_ >= 0) {
        if (e.src == straggler_rank_) wait += extraWait;
        if (e.dst == straggler_rank_) wait = 0.02 * jit();
      }
      double waitUs = wait * 1e6;
      double waitMaxUs = waitUs / 5.0;
      if (window_ >= backlog_from_ && window_ <= backlog_to_) {
        if (e.dst == paused_rank_) {
          waitUs = 0.02 * jit() * 1e6;  // the paused rank's peers were waiting, not it
          waitMaxUs = waitUs / 5.0;
        } else {
          waitUs += backlog_us_;
          waitMaxUs = backlog_us_;
        }
      }
      r.wait = {kOpsPerWindow, toU64(waitUs), toU64(waitMaxUs), toU64(waitUs / 20.0),
                toU64(waitUs / 5.0)};
      r.transfer = {kOpsPerWindow, toU64(xferUs), toU64(xferUs / 5.0), toU64(xferUs / 20.0),
                    toU64(xferUs / 5.0)};
      s.wait = {kOpsPerWindow, toU64(waitUs / 4.0), 0, 0, 0};
      s.transfer = r.transfer;
      r.inflight = static_cast<std::uint32_t>(inflight3(rng_));
      r.oldest_inflight_us = r.inflight > 0 ? toU64(young(rng_)) : 0;
      s.inflight = static_cast<std::uint32_t>(inflight2(rng_));
      s.oldest_inflight_us = s.inflight > 0 ? toU64(young(rng_) / 2.0) : 0;
    } else if (mode_ == Mode::kStalled || mode_ == Mode::kPaused) {
      const int hung = mode_ == Mode::kPaused ? paused_rank_ : frozen_rank_;
      if (e.blocked) {
        s.inflight = 1;
        s.oldest_inflight_us = toU64(ageUs);
        r.inflight = 1;
        r.oldest_inflight_us = toU64(ageUs);
      } else if (crashed_.contains(e.src) || crashed_.contains(e.dst)) {
        // the connection failed: nothing in flight on the survivor's side
      } else if (hung >= 0 && e.dst == hung) {
        s.inflight = 1;  // queued towards the hung rank, which receives nothing
        s.oldest_inflight_us = toU64(ageUs);
      } else {
        r.inflight = 1;  // waiting on the upstream
        r.oldest_inflight_us = toU64(ageUs);
      }
    }
    // Mode::kIdle: nothing posted, nothing moves.
    s.bytes = e.send_bytes;
    s.ops = e.send_ops;
    r.bytes = e.recv_bytes;
    r.ops = e.recv_ops;
    sendS[i] = s;
    recvS[i] = r;
  }

  for (int rk = 0; rk < worldSize(); ++rk) {
    auto& g = ranks_[static_cast<std::size_t>(rk)];
    if (mode_ == Mode::kFlow && started(rk)) {
      g.progress = ProgressSample{report::ProgressState::kTraining, window_, now_};
    }
    if (!g.reporting || !started(rk)) continue;
    ReportSample rep;
    rep.time = now_ - std::chrono::microseconds{static_cast<std::int64_t>(late(rng_) * 1000.0)};
    rep.interval_ms = 1000;
    for (int ei : g.out) {
      if (active[static_cast<std::size_t>(ei)]) {
        rep.connections.push_back(sendS[static_cast<std::size_t>(ei)]);
      }
    }
    for (int ei : g.in) {
      if (active[static_cast<std::size_t>(ei)]) {
        rep.connections.push_back(recvS[static_cast<std::size_t>(ei)]);
      }
    }
    g.history.push_back(std::move(rep));
    if (g.history.size() > static_cast<std::size_t>(spec_.report_history)) {
      g.history.erase(g.history.begin());
    }
  }

  for (int rk = 0; rk < worldSize(); ++rk) {
    auto& g = ranks_[static_cast<std::size_t>(rk)];
    auto& rs = snap_.ranks[static_cast<std::size_t>(rk)];
    rs.reports = g.history;
    rs.pod_state = g.pod;
    rs.progress = g.progress;
    rs.anomalies = std::move(g.pending_anomalies);
    g.pending_anomalies.clear();
  }
}

report::RankReport rankReportOf(const ReportSample& sample, report::RankIdentity id,
                                std::uint64_t seq) {
  report::RankReport rr;
  rr.id = std::move(id);
  rr.seq = seq;
  rr.time_unix_ns = toUnixNanos(sample.time);
  rr.interval_ms = sample.interval_ms;
  for (const auto& c : sample.connections) {
    report::ConnectionStats s;
    s.id = c.id;
    s.direction = c.direction;
    s.peer_rank = c.peer_rank;
    s.bytes = c.bytes;
    s.ops = c.ops;
    s.inflight = c.inflight;
    s.oldest_inflight_us = c.oldest_inflight_us;
    s.wait = c.wait;
    s.transfer = c.transfer;
    rr.connections.push_back(s);
  }
  return rr;
}

}  // namespace c4::c4d::testing
