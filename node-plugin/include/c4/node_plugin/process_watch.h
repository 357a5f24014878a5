// ProcessWatch: tells when a rank's process ends. NCCL's profiler API has no event for a peer
// that died (NCCL's own transports see the closed connection; the profiler does not), so with
// profiler telemetry a rank killed while its pod stays up (an MPI-style worker whose main process
// outlives it) would only look like a silent rank. The node plugin knows each sender's pid from
// SCM_CREDENTIALS; it opens a pidfd for it (pidfd_open, Linux 5.3; no permission is needed, and
// unlike a pid a pidfd can never name a later process that reuses the number) and waits for it
// to become readable, which happens when the process exits. Each exit becomes an AnomalyNotice
// of kind processExited for the rank that process last spoke for, stamped on this node's clock
// (the operator moves it onto its own). Whether the exit was a crash is the operator's call: a
// rank that finishes also exits; C4D counts an exit only while the rank's peers wait for it.
//
// Bounded: at most `max_processes` processes are watched (more are counted in
// c4_node_plugin_processes_unwatched_total and not watched); c4_node_plugin_processes_watched is
// the current count, c4_node_plugin_process_exits_total the exits seen. Nothing here throws;
// observe() is called on the receiver's thread, the exits are handled on this one's.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "c4/common/report.h"

namespace c4::node {

// Takes the notice of one exit; returns false when it cannot take more (the exit is then lost
// and counted as dropped).
using ExitSink = std::function<bool(report::AnomalyNotice&&)>;

class ProcessWatch {
 public:
  struct Config {
    std::size_t max_processes = 4096;
  };

  static Result<std::unique_ptr<ProcessWatch>> create(Config config, Clock& clock,
                                                      metrics::Registry& registry, ExitSink sink);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // `pid` (in this process's pid namespace) spoke for rank `id`. A pid not yet watched gets a
  // pidfd; a watched one takes `id` as the identity its exit reports. Ids without a job or a
  // rank, and pid 0, are ignored. A process that is already gone is reported at the next poll.
  void observe(pid_t pid, const report::RankIdentity& id);
  // Waits up to `timeout` for exits and reports them; returns how many it reported.
  Result<int> pollOnce(std::chrono::milliseconds timeout);
  // A thread that polls until stop().
  void start();
  void stop();
  [[nodiscard]] std::size_t watched() const;
  [[nodiscard]] MonoTime lastLoop() const;

 private:
  struct Watched {
    int pidfd = -1;
    report::RankIdentity id;
  };
  ProcessWatch(Config config, Clock& clock, metrics::Registry& registry, ExitSink sink, int epfd);
  void report(pid_t pid, const report::RankIdentity& id);

  Config config_;
  Clock& clock_;
  ExitSink sink_;
  Logger log_;
  int epfd_ = -1;
  mutable std::mutex mu_;
  std::map<pid_t, Watched> watched_;
  std::map<pid_t, report::RankIdentity> gone_;  // exited before a pidfd could be opened
  metrics::Gauge& watched_gauge_;
  metrics::Counter& exits_;
  metrics::Counter& unwatched_;
  metrics::Counter& dropped_;
  std::atomic<bool> running_{false};
  std::atomic<MonoTime::rep> last_loop_{0};
  std::thread thread_;
};

}  // namespace c4::node
