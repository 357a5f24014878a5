// The NCCL profiler plugin's core (docs/design.md §2, §3.3): per-communicator aggregation of what
// NCCL's profiler events say, and the reporter that turns it into RankReports for the node plugin.
//
// Threads (nccl-profiler-plugin/README.md "Threads"): Coll/P2p events arrive on the application
// thread or a CUDA host-callback thread, ProxyOp/ProxyStep events on the communicator's proxy
// progress thread, init/finalize on application or group-job threads. The event path never
// blocks, never allocates (fixed pools made at init) and never throws; a full pool drops the event
// (handle NULL) and counts it. Only init/finalize and the reporter take a mutex.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/rank_telemetry.h"
#include "c4/common/report.h"

namespace c4::profiler {

// The events this plugin asks NCCL for (the process-wide activation mask it writes at init).
// NCCL also generates their ancestors (GroupApi, CollApi, P2pApi, Group), which the plugin drops.
inline constexpr int kActivationMask = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4);

// Fixed capacities (per communicator context unless said otherwise).
inline constexpr std::size_t kTaskPool = 1024;     // Coll/P2p events not yet finished
inline constexpr std::size_t kProxyOpPool = 512;   // ProxyOps in flight
inline constexpr std::size_t kStepsPerOp = 8;      // NCCL_STEPS (src/include/device.h l.26)
inline constexpr std::size_t kMaxLinks = 1024;     // (peer, direction) entries
inline constexpr std::size_t kMaxChannels = 4096;  // (peer, direction, channel) entries
inline constexpr std::size_t kMaxContexts = 4096;  // live communicators per process
// A task whose last ProxyOp stopped (or that was stopped with none) keeps its slot this long, so a
// ProxyOp the proxy thread starts late still finds its parent (and reopens it).
inline constexpr std::int64_t kTaskReuseGraceNs = 100'000'000;

// Every tunable, read from the environment once per process: the telemetry core's RankEnv (the
// names the net plugin reads too: the operator injects one set for both plugins).
struct ProfilerConfig : telemetry::RankEnv {};
ProfilerConfig loadConfig(const telemetry::EnvLoader::Getenv& getenv);
ProfilerConfig loadConfigFromEnvironment();

using telemetry::LatencyHistogram;  // the telemetry core's (c4/common/rank_telemetry.h)

// Who a communicator is (init arguments; v1..v3 know none of it).
struct CommInfo {
  std::uint64_t comm_hash = 0;
  std::string comm_name;  // empty unless the user named it
  int n_nodes = 0;
  int nranks = 0;  // 0: unknown (v1..v3)
  int rank = -1;   // -1: unknown (v1..v3)
};

// Collective progress of one communicator: the report's CommunicatorProgress (what
// RankReport.communicators carries).
using CommProgress = report::CommunicatorProgress;

// Per (peer, direction, channel) counters, cumulative.
struct ChannelStats {
  int peer = -1;
  bool is_send = false;
  int channel = 0;
  std::uint64_t bytes = 0;
  std::uint64_t steps = 0;
  std::uint64_t ops_started = 0;
  std::uint64_t ops_done = 0;
  std::uint64_t net_wait_us = 0;  // send: SendPeerWait; recv: RecvWait
  std::uint64_t transfer_us = 0;  // send: SendWait (isend posted -> done)
  std::uint64_t gpu_wait_us = 0;  // send: SendGPUWait; recv: RecvFlushWait + RecvGPUWait
};

// Per (peer, direction): counters, in-flight state and latency distributions, cumulative.
struct LinkStats {
  int peer = -1;
  bool is_send = false;
  std::uint64_t bytes = 0;
  std::uint64_t steps = 0;
  std::uint64_t ops_done = 0;
  std::uint32_t inflight = 0;
  std::uint64_t oldest_inflight_us = 0;
  LatencyHistogram::Snapshot net_wait, transfer, gpu_wait;
};

// Things that went wrong or were left out, per context (cumulative).
struct ContextCounters {
  std::uint64_t tasks_dropped = 0;  // task pool full: counted entered and finished at once
  std::uint64_t ops_dropped = 0;    // ProxyOp pool full
  std::uint64_t links_dropped = 0;  // link or channel table full: op not attributed
  std::uint64_t stale_parents = 0;  // ProxyOp whose parent task slot was reused
  std::uint64_t steps_dropped = 0;  // step slot of the op still busy (should not happen)
};

class Context;

struct ProfilerOptions {
  ProfilerConfig config;
  Clock* clock = nullptr;      // nullptr: realClock()
  bool start_reporter = true;  // tests drive ticks themselves
  // How long the last report may wait to be read by the node plugin before the process goes on
  // (usually to exit): the node plugin attributes a datagram by its sender's live pid.
  std::chrono::milliseconds last_report_linger{250};
};

// Process-wide state: the contexts, the sender and the reporter thread. Created with the first
// context and destroyed (thread joined) with the last one by the C shell (src/shells.cc), or by
// the process's static destructors when it leaves through exit() with communicators still open;
// either way its destructor sends one last report (RankReport.last), which a killed process never
// sends, and waits up to ProfilerOptions::last_report_linger for the node plugin to read it.
class Profiler {
 public:
  static Result<std::unique_ptr<Profiler>> create(ProfilerOptions options);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops the reporter and sends the last report (RankReport.last) with every context still
  // there; once. The C shell calls it before it removes the last context, the destructor
  // otherwise (exit() with communicators open).
  void finish();

  Result<Context*> addContext(const CommInfo& info);
  // NCCL guarantees no event of this communicator follows its finalize (init.cc l.379-381).
  void removeContext(Context* ctx);
  [[nodiscard]] std::size_t contexts() const;
  [[nodiscard]] bool holds(const Context* ctx) const;

  // Reporter: one RankReport from everything now (also what the thread sends every interval).
  report::RankReport buildReport();
  void tickNow();  // build and send one report
  [[nodiscard]] std::vector<CommProgress> progress() const;
  [[nodiscard]] std::uint64_t sent() const;
  [[nodiscard]] std::uint64_t dropped() const;
  [[nodiscard]] const ProfilerConfig& config() const;
  [[nodiscard]] Clock& clock() const;

 private:
  struct Impl;
  explicit Profiler(std::unique_ptr<Impl> impl);
  void sendReport(bool last);
  std::unique_ptr<Impl> impl_;
};

// ---- Event path (called by the C shells; noexcept; handles are opaque) ----
struct ProxyOpInfo {
  void* parent = nullptr;  // the Coll/P2p handle (may be NULL, or from another process)
  pid_t pid = 0;
  int channel = 0;
  int peer = -1;
  int n_steps = 0;
  bool is_send = false;
};
// `ctx` may be NULL (init failed) or stale; only Coll/P2p/ProxyOp dereference it.
void* startTask(Context* ctx, bool isColl, std::uint64_t ncclSeqNumber) noexcept;
void* startProxyOp(Context* ctx, const ProxyOpInfo& op) noexcept;
void* startProxyStep(void* parentOp, int step) noexcept;
void stopEvent(void* handle) noexcept;
// `transSize`: the step's current size (v4+), or the op's cumulative size for the pre-2.27
// ProxyOp states 0..7; nullptr when the args carry none.
void recordState(void* handle, int state, const std::size_t* transSize) noexcept;
pid_t processId() noexcept;        // cached getpid()
void refreshProcessId() noexcept;  // at each init (a forked child)

// The clock of the proxy-step phases, the plugin's hottest path (four reads per step): the CPU's
// time-stamp counter (x86-64 RDTSC, 9.6 ns per read on the development VM against 22.6 ns for
// clock_gettime) where the kernel keeps its own time with it — clocksource "tsc", TSC flags
// constant_tsc and nonstop_tsc, which the kernel verified synchronised across CPUs — scaled by a
// factor measured against CLOCK_MONOTONIC once per process (a 2 ms spin at the first init);
// C4_PROFILER_TSC=0 turns it off. Otherwise, and whenever a test injects its own clock, the
// steps read the context's clock like every other event.
struct StepClock {
  bool tsc = false;
  double ns_per_tick = 1.0;
};
// From the given files and the value of C4_PROFILER_TSC (nullptr: unset); measures the factor
// when they allow the TSC. Exposed for tests.
StepClock calibrateStepClock(const char* clocksource_path, const char* cpuinfo_path,
                             const char* env_value);
// The process's, calibrated on first use from /sys and /proc.
const StepClock& processStepClock();
// Whether `ctx` times its steps with the TSC.
bool stepsUseTsc(const Context& ctx);

// Introspection for tests and the reporter.
std::vector<ChannelStats> channelStats(const Context& ctx);
std::vector<LinkStats> linkStats(const Context& ctx, std::int64_t nowNs);
CommProgress commProgress(const Context& ctx, std::int64_t nowNs);
ContextCounters counters(const Context& ctx);
const CommInfo& commInfo(const Context& ctx);
// Process-wide: ProxySteps with a NULL parent (their op was dropped), and PXN ProxyOps created by
// another process (their context and parent belong to another address space).
std::uint64_t orphanSteps() noexcept;
std::uint64_t foreignProxyOps() noexcept;

}  // namespace c4::profiler
