#include "c4/node_plugin/process_watch.h"

#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace c4::node {
namespace {

// pidfd_open(2): glibc has a wrapper only from 2.36; the system call is the interface.
int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

Result<std::unique_ptr<ProcessWatch>> ProcessWatch::create(Config config, Clock& clock,
                                                           metrics::Registry& registry,
                                                           ExitSink sink) {
  if (config.max_processes == 0) {
    return makeError(ErrorCode::kInvalidArgument, "process watch: max_processes must be > 0");
  }
  int epfd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    return makeError(ErrorCode::kInternal,
                     std::string("process watch: epoll_create1: ") + std::strerror(errno));
  }
  return std::unique_ptr<ProcessWatch>(
      new ProcessWatch(config, clock, registry, std::move(sink), epfd));
}

ProcessWatch::ProcessWatch(Config config, Clock& clock, metrics::Registry& registry, ExitSink sink,
                           int epfd)
    : config_(config),
      clock_(clock),
      sink_(std::move(sink)),
      log_("node-plugin.process-watch"),
      epfd_(epfd),
      watched_gauge_(registry
                         .gauge("c4_node_plugin_processes_watched",
                                "Rank processes whose exit the node plugin watches.")
                         .get()),
      exits_(registry
                 .counter("c4_node_plugin_process_exits_total",
                          "Rank process exits seen (each sent as a processExited anomaly).")
                 .get()),
      unwatched_(registry
                     .counter("c4_node_plugin_processes_unwatched_total",
                              "Rank processes not watched: the table was full or no pidfd.")
                     .get()),
      dropped_(registry
                   .counter("c4_node_plugin_process_exits_dropped_total",
                            "Exits seen but not queued (the shipper's notice buffer was full).")
                   .get()) {
  last_loop_.store(clock_.monoNow().time_since_epoch().count());
}

ProcessWatch::~ProcessWatch() {
  stop();
  std::lock_guard lock(mu_);
  for (auto& [pid, w] : watched_) ::close(w.pidfd);
  watched_.clear();
  if (epfd_ >= 0) ::close(epfd_);
}

void ProcessWatch::observe(pid_t pid, const report::RankIdentity& id) {
  if (pid <= 0 || id.job.empty() || id.rank < 0) return;
  std::lock_guard lock(mu_);
  if (auto it = watched_.find(pid); it != watched_.end()) {
    if (!(it->second.id == id)) it->second.id = id;
    return;
  }
  if (gone_.contains(pid)) return;
  if (watched_.size() >= config_.max_processes) {
    unwatched_.inc();
    return;
  }
  const int fd = openPidfd(pid);
  if (fd < 0) {
    if (errno == ESRCH) {
      gone_[pid] = id;  // it sent, then exited before we looked: reported at the next poll
    } else {
      unwatched_.inc();
      log_.warn("pidfd_open failed; this rank's exit is not watched",
                {{"pid", static_cast<std::int64_t>(pid)}, {"error", std::strerror(errno)}});
    }
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(pid);
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    unwatched_.inc();
    log_.warn("epoll_ctl failed; this rank's exit is not watched",
              {{"pid", static_cast<std::int64_t>(pid)}, {"error", std::strerror(errno)}});
    ::close(fd);
    return;
  }
  watched_[pid] = Watched{fd, id};
  watched_gauge_.set(static_cast<double>(watched_.size()));
}

void ProcessWatch::report(pid_t pid, const report::RankIdentity& id) {
  report::AnomalyNotice n;
  n.id = id;
  n.time_unix_ns = toUnixNanos(clock_.wallNow());
  n.kind = report::AnomalyKind::kProcessExited;
  n.detail = "process " + std::to_string(pid) + " exited (seen by the node plugin)";
  exits_.inc();
  log_.info("rank process exited", {{"pid", static_cast<std::int64_t>(pid)},
                                    {"pod", id.ns + "/" + id.pod},
                                    {"job", id.job},
                                    {"rank", static_cast<std::int64_t>(id.rank)}});
  if (!sink_(std::move(n))) dropped_.inc();
}

Result<int> ProcessWatch::pollOnce(std::chrono::milliseconds timeout) {
  std::vector<std::pair<pid_t, report::RankIdentity>> exited;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, id] : gone_) exited.emplace_back(pid, std::move(id));
    gone_.clear();
  }
  if (exited.empty()) {
    epoll_event events[64];
    const int n = ::epoll_wait(epfd_, events, 64, static_cast<int>(timeout.count()));
    if (n < 0) {
      if (errno == EINTR) return 0;
      return makeError(ErrorCode::kInternal,
                       std::string("process watch: epoll_wait: ") + std::strerror(errno));
    }
    std::lock_guard lock(mu_);
    for (int i = 0; i < n; ++i) {
      const auto pid = static_cast<pid_t>(events[i].data.u64);
      auto it = watched_.find(pid);
      if (it == watched_.end()) continue;
      ::epoll_ctl(epfd_, EPOLL_CTL_DEL, it->second.pidfd, nullptr);
      ::close(it->second.pidfd);
      exited.emplace_back(pid, std::move(it->second.id));
      watched_.erase(it);
    }
    watched_gauge_.set(static_cast<double>(watched_.size()));
  }
  for (const auto& [pid, id] : exited) report(pid, id);
  return static_cast<int>(exited.size());
}

void ProcessWatch::start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] {
    while (running_.load()) {
      last_loop_.store(clock_.monoNow().time_since_epoch().count());
      try {
        auto r = pollOnce(std::chrono::milliseconds{200});
        if (!r) {
          log_.warn("process watch poll failed", {{"error", r.error()}});
          clock_.sleepFor(std::chrono::milliseconds{100});
        }
      } catch (const std::exception& e) {  // never out of the thread: log and go on
        log_.error("process watch poll threw", {{"error", std::string(e.what())}});
        clock_.sleepFor(std::chrono::milliseconds{100});
      }
    }
  });
}

void ProcessWatch::stop() {
  running_.store(false);
  if (thread_.joinable()) thread_.join();
}

std::size_t ProcessWatch::watched() const {
  std::lock_guard lock(mu_);
  return watched_.size();
}

MonoTime ProcessWatch::lastLoop() const {
  return MonoTime{Duration{last_loop_.load()}};
}

}  // namespace c4::node
