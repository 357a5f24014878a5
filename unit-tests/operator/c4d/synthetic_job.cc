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
  const int n = spec_.nodes * spec_.ranksPerNode;
  snap_.ns = "default";
  snap_.name = "job";
  snap_.worldSize = n;
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
    for (int k = 0; k <= spec_.extraRings; ++k) {
      const int stride = k == 0 ? 1 : 2 * k + 1;
      peers.insert(((r + stride) % n + n) % n);
      peers.insert(((r - stride) % n + n) % n);
    }
    peers.erase(r);
    for (int p : peers) {
      GEdge e;
      e.src = r;
      e.dst = p;
      e.sendId = nextConnId_++;
      e.recvId = nextConnId_++;
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
  stragglerRank_ = rank;
  stragglerFactor_ = computeFactor;
}

void SyntheticJob::slowLink(int nodeA, int nodeB, double factor) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if ((a == nodeA && b == nodeB) || (a == nodeB && b == nodeA)) e.slowFactor = factor;
  }
}

void SyntheticJob::slowNic(int node, double factor) {
  for (auto& e : edges_) {
    const int a = nodeOfRank(e.src), b = nodeOfRank(e.dst);
    if (a != b && (a == node || b == node)) e.slowFactor = factor;
  }
}

void SyntheticJob::enterStall() {
  if (mode_ != Mode::kStalled) stallSince_ = now_;
  mode_ = Mode::kStalled;
}

void SyntheticJob::freeze(int rank) {
  frozenRank_ = rank;
  ranks_[static_cast<std::size_t>(rank)].reporting = false;
  enterStall();
}

void SyntheticJob::busyHang(int rank) {
  frozenRank_ = rank;
  ranks_[static_cast<std::size_t>(rank)].hungBusy = true;
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
  crashedRank_ = rank;
  auto& r = ranks_[static_cast<std::size_t>(rank)];
  r.reporting = false;
  podFailWindow_ = window_ + 1 + podLagWindows;
  cascadeWindow_ = cascade ? window_ + 3 : -1;
  const WallTime t = now_ + std::chrono::milliseconds{500};
  for (int ei : r.out) {
    const auto& e = edges_[static_cast<std::size_t>(ei)];
    ranks_[static_cast<std::size_t>(e.dst)].pendingAnomalies.push_back(
        {report::AnomalyKind::kPeerClosed, rank, report::Direction::kRecv, 0, t});
  }
  for (int ei : r.in) {
    const auto& e = edges_[static_cast<std::size_t>(ei)];
    ranks_[static_cast<std::size_t>(e.src)].pendingAnomalies.push_back(
        {report::AnomalyKind::kPeerClosed, rank, report::Direction::kSend, 0, t});
  }
  enterStall();
}

void SyntheticJob::pluginOutage(int node) {
  for (int r = 0; r < worldSize(); ++r) {
    if (nodeOfRank(r) == node) ranks_[static_cast<std::size_t>(r)].reporting = false;
  }
  snap_.nodes[static_cast<std::size_t>(node)].telemetryArriving = false;
}

void SyntheticJob::pause(report::ProgressState state, int rank, int announcedBy) {
  if (mode_ != Mode::kPaused) stallSince_ = now_;
  mode_ = Mode::kPaused;
  pausedRank_ = rank;
  for (int r = 0; r < worldSize(); ++r) {
    if (announcedBy < 0 || r == announcedBy) {
      ranks_[static_cast<std::size_t>(r)].progress = ProgressSample{state, window_, now_};
    }
  }
}

void SyntheticJob::resume(int backlogLagWindows) {
  if (backlogLagWindows >= 0 && mode_ == Mode::kPaused) {
    backlogFrom_ = window_ + 1 + backlogLagWindows;
    backlogTo_ = backlogFrom_ + 1;
    backlogUs_ = std::chrono::duration<double, std::micro>(now_ - stallSince_).count();
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
  stragglerRank_ = -1;
  frozenRank_ = -1;
  crashedRank_ = -1;
  podFailWindow_ = -1;
  cascadeWindow_ = -1;
  for (auto& e : edges_) {
    e.slowFactor = 1.0;
    e.blocked = false;
  }
  for (auto& r : ranks_) {
    r.reporting = true;
    r.hungBusy = false;
    r.pod = PodState::kRunning;
  }
  for (auto& n : snap_.nodes) n.telemetryArriving = true;
}

void SyntheticJob::newAttempt() {
  healAll();
  ++snap_.attempt;
  attemptStartWindow_ = window_ + 1;
  std::uniform_int_distribution<int> start(0, spec_.startSpreadWindows);
  for (auto& r : ranks_) {
    r.startWindow = start(rng_);
    r.history.clear();
    r.pendingAnomalies.clear();
    r.progress.reset();
  }
  buildEdges();
}

void SyntheticJob::setNodeFault(int node, bool nicDown, bool gpuFault, std::string detail) {
  auto& n = snap_.nodes[static_cast<std::size_t>(node)];
  n.nicDown = nicDown;
  n.gpuFault = gpuFault;
  n.healthDetail = std::move(detail);
}

void SyntheticJob::setRepeatOffender(int node, double score) {
  snap_.nodes[static_cast<std::size_t>(node)].repeatOffenderScore = score;
}

void SyntheticJob::step() {
  now_ += std::chrono::seconds{1};
  ++window_;
  const std::int64_t age = window_ - attemptStartWindow_;
  auto started = [&](int r) { return age >= ranks_[static_cast<std::size_t>(r)].startWindow; };

  if (crashedRank_ >= 0 && window_ == podFailWindow_) {
    ranks_[static_cast<std::size_t>(crashedRank_)].pod = PodState::kFailed;
  }
  if (cascadeWindow_ >= 0 && window_ == cascadeWindow_) {
    // The NCCL abort cascade: every survivor reports its upstream closed and exits.
    for (int r = 0; r < worldSize(); ++r) {
      auto& g = ranks_[static_cast<std::size_t>(r)];
      if (r == crashedRank_ || g.in.empty()) continue;
      const auto& e = edges_[static_cast<std::size_t>(g.in.front())];
      g.pendingAnomalies.push_back(
          {report::AnomalyKind::kPeerClosed, e.src, report::Direction::kRecv, 0, now_});
      g.reporting = false;
      g.pod = PodState::kFailed;
    }
  }

  // Job-level pace for flowing windows.
  double slowdown = 1.0;
  bool slowLinks = false;
  const double xferShare = spec_.bytesPerWindow / spec_.linkBytesPerSec;
  for (const auto& e : edges_) {
    if (e.slowFactor < 1.0) {
      slowLinks = true;
      slowdown = std::max(slowdown, 1.0 + (1.0 / e.slowFactor - 1.0) * xferShare);
    }
  }
  const double strag =
      stragglerRank_ >= 0 ? kComputeShare * stragglerFactor_ + 1.0 - kComputeShare : 1.0;
  slowdown = std::max(slowdown, strag);
  const double extraWait = (slowdown - 1.0) / slowdown;

  const double ageUs = std::chrono::duration<double, std::micro>(now_ - stallSince_).count();
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
    s.id = e.sendId;
    s.direction = report::Direction::kSend;
    s.peerRank = e.dst;
    ConnSample r;
    r.id = e.recvId;
    r.direction = report::Direction::kRecv;
    r.peerRank = e.src;
    if (mode_ == Mode::kFlow) {
      const double bytes = spec_.bytesPerWindow / slowdown * jit();
      e.sendBytes += toU64(bytes);
      e.recvBytes += toU64(bytes);
      e.sendOps += kOpsPerWindow;
      e.recvOps += kOpsPerWindow;
      const double xferUs = bytes / (spec_.linkBytesPerSec * e.slowFactor * jit()) * 1e6;
      double wait = spec_.baseWaitShare * jit();
      if (e.slowFactor >= 1.0 && slowLinks) wait += extraWait;
      if (stragglerRank_ >= 0) {
        if (e.src == stragglerRank_) wait += extraWait;
        if (e.dst == stragglerRank_) wait = 0.02 * jit();
      }
      double waitUs = wait * 1e6;
      double waitMaxUs = waitUs / 5.0;
      if (window_ >= backlogFrom_ && window_ <= backlogTo_) {
        if (e.dst == pausedRank_) {
          waitUs = 0.02 * jit() * 1e6;  // the paused rank's peers were waiting, not it
          waitMaxUs = waitUs / 5.0;
        } else {
          waitUs += backlogUs_;
          waitMaxUs = backlogUs_;
        }
      }
      r.wait = {kOpsPerWindow, toU64(waitUs), toU64(waitMaxUs), toU64(waitUs / 20.0),
                toU64(waitUs / 5.0)};
      r.transfer = {kOpsPerWindow, toU64(xferUs), toU64(xferUs / 5.0), toU64(xferUs / 20.0),
                    toU64(xferUs / 5.0)};
      s.wait = {kOpsPerWindow, toU64(waitUs / 4.0), 0, 0, 0};
      s.transfer = r.transfer;
      r.inflight = static_cast<std::uint32_t>(inflight3(rng_));
      r.oldestInflightUs = r.inflight > 0 ? toU64(young(rng_)) : 0;
      s.inflight = static_cast<std::uint32_t>(inflight2(rng_));
      s.oldestInflightUs = s.inflight > 0 ? toU64(young(rng_) / 2.0) : 0;
    } else if (mode_ == Mode::kStalled || mode_ == Mode::kPaused) {
      const int hung = mode_ == Mode::kPaused ? pausedRank_ : frozenRank_;
      if (e.blocked) {
        s.inflight = 1;
        s.oldestInflightUs = toU64(ageUs);
        r.inflight = 1;
        r.oldestInflightUs = toU64(ageUs);
      } else if (crashedRank_ >= 0 && (e.src == crashedRank_ || e.dst == crashedRank_)) {
        // the connection failed: nothing in flight on the survivor's side
      } else if (hung >= 0 && e.dst == hung) {
        s.inflight = 1;  // queued towards the hung rank, which receives nothing
        s.oldestInflightUs = toU64(ageUs);
      } else {
        r.inflight = 1;  // waiting on the upstream
        r.oldestInflightUs = toU64(ageUs);
      }
    }
    // Mode::kIdle: nothing posted, nothing moves.
    s.bytes = e.sendBytes;
    s.ops = e.sendOps;
    r.bytes = e.recvBytes;
    r.ops = e.recvOps;
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
    rep.intervalMs = 1000;
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
    if (g.history.size() > static_cast<std::size_t>(spec_.reportHistory)) {
      g.history.erase(g.history.begin());
    }
  }

  for (int rk = 0; rk < worldSize(); ++rk) {
    auto& g = ranks_[static_cast<std::size_t>(rk)];
    auto& rs = snap_.ranks[static_cast<std::size_t>(rk)];
    rs.reports = g.history;
    rs.podState = g.pod;
    rs.progress = g.progress;
    rs.anomalies = std::move(g.pendingAnomalies);
    g.pendingAnomalies.clear();
  }
}

}  // namespace c4::c4d::testing
