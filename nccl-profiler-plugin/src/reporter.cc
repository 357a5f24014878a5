// Profiler: the process's contexts and the reporter thread that sends a RankReport every interval
// (docs/design.md §3.3) through a non-blocking Unix datagram socket.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "c4/common/log.h"
#include "c4/common/unix_socket.h"
#include "context.h"

namespace c4::profiler {
namespace {

const Logger& log() {
  static const Logger l("nccl-profiler-c4");
  return l;
}

std::int64_t monoNs(Clock& c) {
  return c.monoNow().time_since_epoch().count();
}

// The report's communicators: all of them, or when there are more than a report holds, those
// with the oldest unfinished operation first (a hang shows there), ties in creation order.
void addCommunicators(report::RankReport& r, std::vector<CommProgress> progress) {
  if (progress.size() > report::kMaxCommunicatorsPerReport) {
    std::stable_sort(progress.begin(), progress.end(), [](const auto& a, const auto& b) {
      return a.oldest_unfinished_us > b.oldest_unfinished_us;
    });
    progress.resize(report::kMaxCommunicatorsPerReport);
  }
  r.communicators = std::move(progress);
}

}  // namespace

struct Profiler::Impl {
  ProfilerOptions options;
  Clock* clock = nullptr;
  mutable std::mutex mu;  // contexts, link snapshots, sender use
  std::vector<std::unique_ptr<Context>> contexts;
  std::uint32_t next_context_id = 1;
  std::optional<UnixDatagramSender> sender;
  std::uint64_t seq = 0;
  std::uint64_t encode_failures = 0;

  std::mutex stop_mu;
  std::condition_variable_any stop_cv;
  bool stop = false;
  bool finished = false;  // finish() ran: the last report is sent
  std::thread thread;

  void loop(Profiler& self) {
    const std::int64_t interval =
        static_cast<std::int64_t>(options.config.report_interval_ms) * 1'000'000;
    std::int64_t next = monoNs(*clock) + interval;
    std::unique_lock lock(stop_mu);
    while (!stop) {
      if (clock->waitUntil(lock, stop_cv, MonoTime{std::chrono::nanoseconds{next}},
                           [this] { return stop; })) {
        break;
      }
      lock.unlock();
      try {
        self.tickNow();
      } catch (...) {  // no exception leaves the thread (bad_alloc while building a report)
      }
      next = std::max(next + interval, monoNs(*clock));
      lock.lock();
    }
  }
};

Profiler::Profiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Profiler>> Profiler::create(ProfilerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->clock = options.clock != nullptr ? options.clock : &realClock();
  impl->options = std::move(options);
  for (const auto& w : impl->options.config.warnings) log().warn("config", {{"warning", w}});
  if (!impl->options.config.agent_socket.empty()) {
    auto sender = UnixDatagramSender::create(impl->options.config.agent_socket);
    if (!sender) {
      // A missing node plugin costs nothing: aggregate, send nothing.
      log().warn("C4_AGENT_SOCKET unusable; telemetry is not sent",
                 {{"path", impl->options.config.agent_socket}, {"error", sender.error()}});
    } else {
      impl->sender.emplace(std::move(*sender));
    }
  }
  std::unique_ptr<Profiler> p(new Profiler(std::move(impl)));
  if (p->impl_->options.start_reporter) {
    try {
      Profiler* raw = p.get();
      p->impl_->thread = std::thread([raw] { raw->impl_->loop(*raw); });
    } catch (const std::exception& e) {
      return makeError(ErrorCode::kResourceExhausted,
                       std::string("cannot start the reporter thread: ") + e.what());
    }
  }
  return p;
}

Profiler::~Profiler() {
  finish();
}

void Profiler::finish() {
  {
    std::lock_guard lock(impl_->stop_mu);
    if (impl_->finished) return;
    impl_->finished = true;
    impl_->stop = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // The last report: what happened since the last tick, and the word that this process ended its
  // telemetry in order (the last communicator is being finalized, or the process left through
  // exit() and its static destructors run). A killed process never gets here.
  try {
    sendReport(true);
  } catch (...) {  // nothing leaves (bad_alloc while building it)
  }
  // The process usually exits next: give the node plugin a moment to read the last report while
  // this pid still names the process (it attributes by the pid's cgroup). The sender is set once,
  // in create(); awaitRead is thread-safe.
  if (impl_->sender) (void)impl_->sender->awaitRead(impl_->options.last_report_linger);
}

Result<Context*> Profiler::addContext(const CommInfo& info) {
  if (info.nranks < 0 || (info.nranks > 0 && (info.rank < 0 || info.rank >= info.nranks))) {
    return makeError(ErrorCode::kInvalidArgument,
                     "rank " + std::to_string(info.rank) + " of " + std::to_string(info.nranks));
  }
  std::lock_guard lock(impl_->mu);
  if (impl_->contexts.size() >= kMaxContexts) {
    return makeError(ErrorCode::kResourceExhausted,
                     "more than " + std::to_string(kMaxContexts) + " communicators");
  }
  auto ctx = std::make_unique<Context>(info, *impl_->clock, impl_->next_context_id++);
  Context* raw = ctx.get();
  impl_->contexts.push_back(std::move(ctx));
  return raw;
}

void Profiler::removeContext(Context* ctx) {
  std::unique_ptr<Context> gone;
  {
    std::lock_guard lock(impl_->mu);
    auto it = std::find_if(impl_->contexts.begin(), impl_->contexts.end(),
                           [ctx](const auto& c) { return c.get() == ctx; });
    if (it == impl_->contexts.end()) return;
    gone = std::move(*it);
    impl_->contexts.erase(it);
  }
  gone->magic = 0;
}

bool Profiler::holds(const Context* ctx) const {
  std::lock_guard lock(impl_->mu);
  return std::any_of(impl_->contexts.begin(), impl_->contexts.end(),
                     [ctx](const auto& c) { return c.get() == ctx; });
}

std::size_t Profiler::contexts() const {
  std::lock_guard lock(impl_->mu);
  return impl_->contexts.size();
}

report::RankReport Profiler::buildReport() {
  const ProfilerConfig& cfg = impl_->options.config;
  std::lock_guard lock(impl_->mu);
  std::int64_t now = monoNs(*impl_->clock);
  report::RankReport r;
  r.id.ns = cfg.ns;
  r.id.job = cfg.job;
  r.id.pod = cfg.pod;
  r.id.node = cfg.node;
  r.id.rank = cfg.rank;
  r.id.world_size = cfg.world_size;
  r.id.restart_attempt = cfg.restart_attempt;
  r.id.pid = static_cast<std::uint32_t>(processId());
  r.seq = ++impl_->seq;
  r.time_unix_ns = toUnixNanos(impl_->clock->wallNow());
  r.interval_ms = cfg.report_interval_ms;
  r.dropped_messages = impl_->sender ? impl_->sender->dropped() : 0;
  std::vector<CommProgress> progress;
  for (auto& ctx : impl_->contexts) {
    progress.push_back(commProgress(*ctx, now));
    // A communicator's peers are its own ranks; they are the job's ranks only in a communicator
    // of the whole job (nranks == WORLD_SIZE). Elsewhere the peer is not known: -1.
    bool globalRanks = cfg.world_size > 0 && ctx->info.nranks == cfg.world_size;
    for (const LinkStats& l : linkStats(*ctx, now)) {
      LinkEntry* e = nullptr;
      for (std::size_t i = 0; i < ctx->link_cap && e == nullptr; ++i) {
        if (ctx->links[i].key.load(std::memory_order_relaxed) == linkKey(l.peer, l.is_send)) {
          e = &ctx->links[i];
        }
      }
      report::ConnectionStats c;
      c.id = static_cast<std::uint64_t>(ctx->id) << 32 | linkKey(l.peer, l.is_send);
      c.direction = l.is_send ? report::Direction::kSend : report::Direction::kRecv;
      c.peer_rank = globalRanks ? l.peer : -1;
      c.bytes = l.bytes;
      c.ops = l.ops_done;
      c.inflight = l.inflight;
      c.oldest_inflight_us = l.inflight > 0 ? l.oldest_inflight_us : 0;
      c.wait =
          LatencyHistogram::summarize(e->prev_net_wait, l.net_wait, e->net_wait.takeIntervalMax());
      c.transfer =
          LatencyHistogram::summarize(e->prev_transfer, l.transfer, e->transfer.takeIntervalMax());
      e->prev_net_wait = l.net_wait;
      e->prev_transfer = l.transfer;
      r.connections.push_back(std::move(c));
    }
  }
  addCommunicators(r, std::move(progress));
  return r;
}

void Profiler::tickNow() {
  sendReport(false);
}

void Profiler::sendReport(bool last) {
  report::RankReport r = buildReport();
  r.last = last;
  std::lock_guard lock(impl_->mu);
  if (!impl_->sender) return;
  auto parts = telemetry::encodeReportParts(r, report::kMaxDatagramBytes);
  if (!parts) {
    if (impl_->encode_failures++ == 0) {
      log().warn("rank report not sendable", {{"error", parts.error()}});
    }
    return;
  }
  for (auto& b : *parts) impl_->sender->send(b);
}

std::vector<CommProgress> Profiler::progress() const {
  std::lock_guard lock(impl_->mu);
  std::int64_t now = monoNs(*impl_->clock);
  std::vector<CommProgress> out;
  for (auto& ctx : impl_->contexts) out.push_back(commProgress(*ctx, now));
  return out;
}

std::uint64_t Profiler::sent() const {
  std::lock_guard lock(impl_->mu);
  return impl_->sender ? impl_->sender->sent() : 0;
}

std::uint64_t Profiler::dropped() const {
  std::lock_guard lock(impl_->mu);
  return impl_->sender ? impl_->sender->dropped() : 0;
}

const ProfilerConfig& Profiler::config() const {
  return impl_->options.config;
}

Clock& Profiler::clock() const {
  return *impl_->clock;
}

}  // namespace c4::profiler
