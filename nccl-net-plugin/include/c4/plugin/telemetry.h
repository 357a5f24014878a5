// Per-connection telemetry (docs/design.md §3.3): written under the connection's I/O mutex, read
// without locks.
//
// Writers: whichever NCCL thread drives the connection, under the connection's I/O mutex (so each
// counter has one writer at a time). The reporter thread reads with relaxed atomics and computes
// interval deltas, so no NCCL-calling thread ever waits for telemetry. C4_TELEMETRY=0 at compile
// time removes the hooks (the benchmark's "compiled out" baseline).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "c4/common/error.h"
#include "c4/common/plan.h"
#include "c4/common/rank_telemetry.h"
#include "c4/common/report.h"

#ifndef C4_TELEMETRY
#define C4_TELEMETRY 1
#endif

namespace c4::plugin {

// Whether the transport records telemetry (compile with -DC4_TELEMETRY=0 to remove it). The hooks
// below take it as a template argument so a benchmark can run both variants in one binary.
inline constexpr bool kTelemetryEnabled = C4_TELEMETRY != 0;

using telemetry::LatencyHistogram;  // the telemetry core's (c4/common/rank_telemetry.h)

// One per request slot of a comm: when the op was posted (0 = not in flight) and whether it was
// already reported as stalled. The reporter scans these for the oldest op in flight.
struct InflightSlot {
  std::atomic<std::int64_t> posted_ns{0};
  std::atomic<bool> stall_reported{false};
};

struct SubflowTelemetry {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<double> weight{1.0};  // written by the plan applier, read per message by the sender
  std::uint16_t local_port = 0;     // fixed after connect
  std::int32_t path_id = -1;
};

// Everything the reporter needs about one connection. Shared (shared_ptr) between the comm and the
// reporter so a close never races a report.
struct ConnTelemetry {
  ConnTelemetry(std::uint64_t connId, report::Direction dir, int nSubflows, int nSlots)
      : id(connId),
        direction(dir),
        subflows(static_cast<std::size_t>(nSubflows)),
        inflight(static_cast<std::size_t>(nSlots)) {}

  const std::uint64_t id;
  const report::Direction direction;
  std::int32_t peer_rank = -1;  // fixed after the hello
  std::string peer_node;
  std::string peer_pod;
  std::uint64_t peer_node_hash = 0;
  std::vector<SubflowTelemetry> subflows;
  std::vector<InflightSlot> inflight;
  std::string failure;  // set once before `failed` is stored (release), with its code
  ErrorCode failure_code = ErrorCode::kUnavailable;
  std::int64_t failed_unix_ns = 0;  // when it failed (wall clock), set with `failure`

  std::atomic<std::uint64_t> posted_ops{0};
  std::atomic<std::uint64_t> completed_ops{0};
  std::atomic<std::uint64_t> bytes{0};  // payload bytes completed
  LatencyHistogram wait;                // posted -> first byte
  LatencyHistogram transfer;            // first byte -> done
  std::atomic<bool> failed{false};
  std::atomic<bool> failure_reported{false};
  std::atomic<bool> peer_closed{false};

  // Hooks, each a handful of relaxed atomics. `nowNs` values come from the injected clock.
  template <bool On = kTelemetryEnabled>
  void onPosted() noexcept {
    // Under the connection's I/O mutex: a plain load/store, no locked instruction.
    if constexpr (On) {
      posted_ops.store(posted_ops.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  template <bool On = kTelemetryEnabled>
  void onCompleted(std::uint64_t payload, std::int64_t postedNs, std::int64_t firstByteNs,
                   std::int64_t doneNs) noexcept {
    if constexpr (On) {
      completed_ops.store(completed_ops.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
      bytes.store(bytes.load(std::memory_order_relaxed) + payload, std::memory_order_relaxed);
      if (firstByteNs < postedNs) firstByteNs = postedNs;
      if (doneNs < firstByteNs) doneNs = firstByteNs;
      wait.record(static_cast<std::uint64_t>(firstByteNs - postedNs) / 1000);
      transfer.record(static_cast<std::uint64_t>(doneNs - firstByteNs) / 1000);
    } else {
      (void)payload;
      (void)postedNs;
      (void)firstByteNs;
      (void)doneNs;
    }
  }
  template <bool On = kTelemetryEnabled>
  void onSubflowBytes(std::size_t subflow, std::uint64_t n) noexcept {
    if constexpr (On) {
      auto& b = subflows[subflow].bytes;
      b.store(b.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    } else {
      (void)subflow;
      (void)n;
    }
  }
  // The op in request slot `slot` was posted at `nowNs` / is no longer in flight. Feeds the
  // oldest-in-flight age and stall detection.
  template <bool On = kTelemetryEnabled>
  void markPosted(std::size_t slot, std::int64_t nowNs) noexcept {
    if constexpr (On) {
      inflight[slot].stall_reported.store(false, std::memory_order_relaxed);
      inflight[slot].posted_ns.store(nowNs, std::memory_order_relaxed);
    } else {
      (void)slot;
      (void)nowNs;
    }
  }
  template <bool On = kTelemetryEnabled>
  void markDone(std::size_t slot) noexcept {
    if constexpr (On) {
      inflight[slot].posted_ns.store(0, std::memory_order_relaxed);
    } else {
      (void)slot;
    }
  }
};

}  // namespace c4::plugin
