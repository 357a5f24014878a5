// One communicator's state: fixed pools and tables made at init, written by NCCL's threads with
// relaxed atomics, read by the reporter. Internal to the core (core.cc, reporter.cc).
#pragma once

#include <atomic>
#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <limits>
#include <memory>

#include "c4/profiler/profiler.h"

namespace c4::profiler {

inline constexpr std::uint32_t kContextMagic = 0xC4C07E47u;
inline constexpr std::uint32_t kOpMagic = 0xC4C00B01u;
inline constexpr std::uint32_t kStepMagic = 0xC4C05E72u;
inline constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

// A counter with one writer (the communicator's proxy thread, proxy.cc l.434, 954, 1035): a plain
// load and store, no locked instruction. Readers use relaxed loads.
inline void bump(std::atomic<std::uint64_t>& a, std::uint64_t d) noexcept {
  a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

// Coll/P2p. `word` packs state (bits 48-49), generation (bits 32-47) and references (bits 0-31):
// NCCL's own reference until it stops the event, plus one per ProxyOp in progress. The handle
// given to NCCL is the slot address with the generation in its top 16 bits, so a ProxyOp that
// names a reused slot is recognised (x86-64/aarch64 user addresses fit 48 bits).
struct TaskSlot {
  enum State : std::uint64_t { kFree = 0, kActive = 1, kDone = 2, kClaim = 3 };
  std::atomic<std::uint64_t> word{0};
  std::atomic<std::int64_t> start_ns{0};
  std::atomic<std::int64_t> done_ns{kNever};
  bool is_coll = false;
  Context* ctx = nullptr;

  static constexpr std::uint64_t pack(std::uint64_t state, std::uint64_t gen, std::uint64_t refs) {
    return state << 48 | gen << 32 | refs;
  }
  static constexpr std::uint64_t stateOf(std::uint64_t w) { return (w >> 48) & 3; }
  static constexpr std::uint64_t genOf(std::uint64_t w) { return (w >> 32) & 0xffff; }
  static constexpr std::uint64_t refsOf(std::uint64_t w) { return w & 0xffffffffu; }
};

struct LinkEntry {
  std::atomic<std::uint64_t> key{0};  // 0: empty
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::uint64_t> ops_done{0};
  LatencyHistogram net_wait, transfer, gpu_wait;
  // Reporter-owned: the snapshots of the previous report (interval summaries).
  LatencyHistogram::Snapshot prev_net_wait, prev_transfer;
};

struct ChannelEntry {
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::uint64_t> ops_started{0};
  std::atomic<std::uint64_t> ops_done{0};
  std::atomic<std::uint64_t> net_wait_us{0};
  std::atomic<std::uint64_t> transfer_us{0};
  std::atomic<std::uint64_t> gpu_wait_us{0};
};

struct OpSlot;

// A ProxyStep lives inside its ProxyOp: NCCL keeps at most NCCL_STEPS step handles per op
// (pHandles[step % NCCL_STEPS], profiler.cc l.613-614), all on the proxy thread.
struct StepSlot {
  enum Phase : std::uint8_t { kNone = 0, kGpu = 1, kNet = 2, kTransfer = 3 };
  std::uint32_t magic = kStepMagic;
  bool busy = false;
  std::uint8_t phase = kNone;
  std::uint8_t seen = 0;  // bit per phase
  OpSlot* op = nullptr;
  std::int64_t phase_start = 0;  // Context::stepTicks()
  std::int64_t phase_ticks[4] = {};
  std::size_t trans_size = 0;
};

struct OpSlot {
  enum State : std::uint32_t { kFree = 0, kClaim = 1, kUsed = 2 };
  std::uint32_t magic = kOpMagic;
  std::atomic<std::uint32_t> state{kFree};
  Context* ctx = nullptr;
  TaskSlot* task = nullptr;
  std::uint64_t task_gen = 0;
  std::atomic<LinkEntry*> link{nullptr};
  ChannelEntry* chan = nullptr;
  std::atomic<std::int64_t> start_ns{0};
  std::uint64_t step_bytes = 0;  // sum of the steps' sizes
  std::uint64_t op_bytes = 0;    // pre-2.27 ProxyOp states: the op's cumulative size
  StepSlot steps[kStepsPerOp];
};

class Context {
 public:
  Context(const CommInfo& info, Clock& clock, std::uint32_t id);

  std::uint32_t magic = kContextMagic;
  Clock* clock;
  CommInfo info;
  std::uint32_t id;

  std::atomic<std::uint64_t> coll_entered{0}, coll_finished{0}, p2p_entered{0}, p2p_finished{0};
  std::atomic<std::uint64_t> last_coll_seq{0};
  std::atomic<std::uint64_t> tasks_dropped{0}, ops_dropped{0}, links_dropped{0}, stale_parents{0},
      steps_dropped{0};

  std::unique_ptr<TaskSlot[]> tasks;
  std::atomic<std::uint64_t> task_cursor{0};
  std::unique_ptr<OpSlot[]> ops;
  std::atomic<std::uint64_t> op_cursor{0};
  std::size_t link_cap;
  std::unique_ptr<LinkEntry[]> links;
  std::size_t chan_cap;
  std::unique_ptr<ChannelEntry[]> chans;

  [[nodiscard]] std::int64_t nowNs() const noexcept {
    return clock->monoNow().time_since_epoch().count();
  }
  // The proxy-step phases' clock (StepClock): TSC ticks, or nowNs() where the TSC is not used.
  bool step_tsc = false;
  double step_ns_per_tick = 1.0;
  [[nodiscard]] std::int64_t stepTicks() const noexcept {
#if defined(__x86_64__)
    if (step_tsc) return static_cast<std::int64_t>(__rdtsc());
#endif
    return nowNs();
  }
  [[nodiscard]] std::int64_t ticksToNs(std::int64_t ticks) const noexcept {
    return step_tsc ? static_cast<std::int64_t>(static_cast<double>(ticks) * step_ns_per_tick)
                    : ticks;
  }
};

inline constexpr std::uint64_t linkKey(int peer, bool isSend) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(peer)) << 1 | (isSend ? 1 : 0)) + 1;
}
inline constexpr int linkPeer(std::uint64_t key) {
  return static_cast<int>(static_cast<std::uint32_t>((key - 1) >> 1));
}
inline constexpr bool linkIsSend(std::uint64_t key) {
  return ((key - 1) & 1) != 0;
}

}  // namespace c4::profiler
