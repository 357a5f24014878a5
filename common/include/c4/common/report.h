// The telemetry schema shared by the NCCL net plugin, the node plugin and the operator
// (docs/design.md §3.3, §3.4), and its CBOR / JSON codecs.
//
//   plugin --(Unix datagram, CBOR Message)--> node plugin --(HTTP POST, CBOR NodeReport)-->
//   operator
//
// Every encoded object carries `v` (schema version) and `kind`. Decoding is strict: wrong version,
// unknown kind, unknown or missing fields, wrong types, out-of-range numbers, invalid names,
// oversized strings/arrays/documents and nesting deeper than the schema are rejected with an
// kInvalidArgument error naming the offending field path. Decoding never throws and never crashes
// on arbitrary bytes. Encoding validates too, so nothing invalid leaves a process.
//
// Units: times are Unix nanoseconds (wall clock of the sender); durations are microseconds;
// byte and op counters are cumulative since the connection was opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "c4/common/error.h"

namespace c4::report {

inline constexpr int kSchemaVersion = 1;

// Limits enforced by validation.
inline constexpr std::size_t kMaxNameBytes = 253;   // Kubernetes DNS subdomain
inline constexpr std::size_t kMaxTextBytes = 4096;  // free text: paths, details
inline constexpr std::size_t kMaxConnectionsPerReport = 1024;
inline constexpr std::size_t kMaxSubflowsPerConnection = 64;
inline constexpr std::size_t kMaxCommunicatorsPerReport = 256;
inline constexpr std::size_t kMaxReportsPerBatch = 8192;
inline constexpr std::size_t kMaxNoticesPerBatch = 8192;
inline constexpr std::size_t kMaxDevicesPerNode = 256;
inline constexpr std::int32_t kMaxRank = 1 << 24;
inline constexpr std::uint32_t kMaxPauseSeconds = 86'400;  // ProgressNotice.expectedSeconds
inline constexpr std::uint16_t kMaxParts = 1024;
// One plugin message must fit a Unix datagram with the default socket buffer (212992 bytes).
inline constexpr std::size_t kMaxDatagramBytes = 200 * 1024;
// One node batch (HTTP body).
inline constexpr std::size_t kMaxBatchBytes = 64 * 1024 * 1024;

enum class Direction { kSend, kRecv };

// Latency distribution of the ops completed during the last report interval.
struct LatencySummary {
  std::uint64_t count = 0;
  std::uint64_t sum_us = 0;
  std::uint64_t max_us = 0;
  std::uint64_t p50_us = 0;
  std::uint64_t p99_us = 0;
  friend bool operator==(const LatencySummary&, const LatencySummary&) = default;
};

struct SubflowStats {
  std::uint32_t index = 0;
  std::uint16_t local_port = 0;
  std::int32_t path_id = -1;  // -1: not planned
  double weight = 1.0;        // share of bytes, relative to the other subflows
  std::uint64_t bytes = 0;    // cumulative
  friend bool operator==(const SubflowStats&, const SubflowStats&) = default;
};

struct ConnectionStats {
  std::uint64_t id = 0;  // unique within the reporting process
  Direction direction = Direction::kSend;
  std::int32_t peer_rank = -1;  // -1: unknown (no hello yet)
  std::string peer_node;
  std::string peer_pod;
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
  std::uint32_t inflight = 0;
  std::uint64_t oldest_inflight_us = 0;  // age of the oldest op in flight (0 when none)
  LatencySummary wait;      // recv: posted -> first byte; send: posted -> first byte out
  LatencySummary transfer;  // first byte -> done
  std::vector<SubflowStats> subflows;
  friend bool operator==(const ConnectionStats&, const ConnectionStats&) = default;
};

// Who sent a plugin message. Names may be empty outside Kubernetes (a local c4-netbench run).
struct RankIdentity {
  std::string ns;
  std::string job;
  std::string pod;
  std::string node;
  std::int32_t rank = -1;       // -1: unknown
  std::int32_t world_size = 0;  // 0: unknown
  std::uint32_t restart_attempt = 0;
  std::uint32_t pid = 0;  // process id as the sender sees it
  friend bool operator==(const RankIdentity&, const RankIdentity&) = default;
};

// A receive that has waited this long while its connection delivered nothing for a whole report
// interval marks the connection stalled: the node plugin ships that report at once and the
// operator's link monitor reads the subflows' lag in that window (a dead path).
inline constexpr std::uint64_t kStalledWaitUs = 500'000;

// One NCCL communicator as this rank sees it (the profiler plugin's view; the net plugin sends
// none): how many collectives and point-to-point operations the rank has entered and finished in
// it, cumulative. Every member of a communicator calls its collectives in the same order, so a
// member whose collEntered stays below the others' while they wait in the next one is the one
// that has not arrived — over any transport, NVLink included.
struct CommunicatorProgress {
  std::uint64_t comm_hash = 0;  // NCCL's commHash; 0 = unknown (profiler ABI v1-v3)
  std::int32_t nranks = 0;      // 0 = unknown
  std::int32_t rank = -1;       // this rank within the communicator; -1 = unknown
  std::uint64_t coll_entered = 0;
  std::uint64_t coll_finished = 0;  // <= coll_entered
  std::uint64_t p2p_entered = 0;
  std::uint64_t p2p_finished = 0;          // <= p2p_entered
  std::uint64_t last_coll_seq = 0;         // NCCL's seqNumber of the newest collective entered
  std::uint64_t oldest_unfinished_us = 0;  // age of the oldest entered, unfinished op; 0: none
  friend bool operator==(const CommunicatorProgress&, const CommunicatorProgress&) = default;
};

struct RankReport {
  RankIdentity id;
  std::uint64_t seq = 0;
  std::uint16_t part = 0;  // a report too large for one datagram is split: part < parts
  std::uint16_t parts = 1;
  std::int64_t time_unix_ns = 0;
  std::uint32_t interval_ms = 1000;
  std::int64_t plan_version = -1;      // -1: no plan applied
  std::uint64_t dropped_messages = 0;  // messages this process could not send so far
  std::vector<ConnectionStats> connections;
  // The rank's communicators (profiler plugin); a report split into parts carries them in part 0.
  std::vector<CommunicatorProgress> communicators;
  // The process's last report: its telemetry ended in order (its communicators were finalized,
  // or it left through exit()). A process that is killed or crashes sends none, which is what
  // tells a killed rank from the peers that exited of its closed connections a moment later.
  // Optional on the wire (absent: false).
  bool last = false;
  friend bool operator==(const RankReport&, const RankReport&) = default;
};

enum class ProgressState { kTraining, kCheckpointing, kEvaluating, kIdle, kFinished };

// Sent by the trainer (through the plugin's helper or c4-netbench) at step boundaries and around
// pauses; a pause state suspends hang detection for the job.
struct ProgressNotice {
  RankIdentity id;
  std::int64_t time_unix_ns = 0;
  std::int64_t step = 0;
  ProgressState state = ProgressState::kTraining;
  // A pause's announced length (checkpointing, evaluating, idle): C4D's hang rules resume this
  // long after the notice, not after the job's maxPauseSeconds. 0: not said. Optional on the wire.
  std::uint32_t expected_seconds = 0;
  friend bool operator==(const ProgressNotice&, const ProgressNotice&) = default;
};

struct CheckpointNotice {
  RankIdentity id;
  std::int64_t time_unix_ns = 0;
  std::int64_t step = 0;
  std::string path;
  friend bool operator==(const CheckpointNotice&, const CheckpointNotice&) = default;
};

// kProcessExited: the node plugin saw the rank's process end (any exit: C4D decides whether it
// was a crash).
enum class AnomalyKind { kStall, kConnectionError, kPeerClosed, kProcessExited };

struct AnomalyNotice {
  RankIdentity id;
  std::int64_t time_unix_ns = 0;
  AnomalyKind kind = AnomalyKind::kStall;
  std::uint64_t connection_id = 0;
  Direction direction = Direction::kSend;
  std::int32_t peer_rank = -1;
  std::string peer_node;
  std::uint64_t age_us = 0;  // how long the op has been in flight
  std::string detail;
  friend bool operator==(const AnomalyNotice&, const AnomalyNotice&) = default;
};

using Notice = std::variant<ProgressNotice, CheckpointNotice, AnomalyNotice>;
// Everything a plugin (or trainer) sends to the node plugin.
using Message = std::variant<RankReport, ProgressNotice, CheckpointNotice, AnomalyNotice>;

// One network interface (/sys/class/net/<name>). The first five fields keep their meaning from
// the first schema; the rest are the raw readings they summarise.
struct NicHealth {
  std::string name;              // interface name
  bool up = false;               // operstate == "up" and carrier present
  bool rdma = false;             // an RDMA device (/sys/class/infiniband) sits on this interface
  std::uint64_t speed_mbps = 0;  // 0: unknown (no link, or the driver does not say)
  std::uint64_t errors = 0;      // rxErrors + txErrors
  std::string operstate;         // "up", "down", "dormant", "lowerlayerdown", "unknown", ...
  bool carrier = false;
  std::uint64_t carrier_changes = 0;  // cumulative since the driver loaded
  std::uint64_t rx_errors = 0;
  std::uint64_t tx_errors = 0;
  std::uint64_t rx_dropped = 0;
  std::uint64_t tx_dropped = 0;
  friend bool operator==(const NicHealth&, const NicHealth&) = default;
};

// One port of an RDMA device (/sys/class/infiniband/<device>/ports/<port>).
struct RdmaPortHealth {
  std::string device;  // e.g. "mlx5_0"
  std::uint32_t port = 1;
  std::string netdev;      // the network interface on this port ("" when none is known)
  std::string state;       // "ACTIVE", "DOWN", "INIT", "ARMED", ... (the name without its number)
  std::string phys_state;  // "LinkUp", "Polling", "Disabled", ...
  std::uint64_t rate_mbps = 0;  // 0: unknown
  bool active = false;          // state == "ACTIVE" and physState == "LinkUp"
  // Cumulative error counters (counters/*; 0 where the device does not have one).
  std::uint64_t symbol_errors = 0;
  std::uint64_t link_downed = 0;
  std::uint64_t link_error_recovery = 0;
  std::uint64_t rcv_errors = 0;
  std::uint64_t xmit_discards = 0;
  friend bool operator==(const RdmaPortHealth&, const RdmaPortHealth&) = default;
};

struct GpuHealth {
  std::int32_t index = 0;
  std::string uuid;
  bool healthy = true;
  std::string detail;                          // why not healthy ("" when healthy)
  std::uint64_t ecc_volatile_uncorrected = 0;  // uncorrected ECC errors since the driver loaded
  bool retired_pages_pending = false;          // pages retired but not yet blacklisted (reset due)
  std::uint64_t last_xid = 0;                  // the newest XID event seen (0: none)
  std::uint64_t throttle_reasons = 0;          // NVML clocks-throttle-reasons bitmask
  friend bool operator==(const GpuHealth&, const GpuHealth&) = default;
};

// Node health. Each class of hardware is either available (its list holds every device found,
// healthy or not) or unavailable (its list is empty and `*Reason` says why: no such hardware, no
// driver, no NVML library). Absent hardware is never reported as healthy or faulty.
struct NodeHealth {
  std::vector<NicHealth> nics;
  std::vector<GpuHealth> gpus;
  std::vector<RdmaPortHealth> rdma_ports;
  bool nics_available = false;
  std::string nics_reason;
  bool rdma_available = false;
  std::string rdma_reason;
  bool gpus_available = false;
  std::string gpus_reason;
  friend bool operator==(const NodeHealth&, const NodeHealth&) = default;
};

// One batch from a node plugin to the operator.
struct NodeReport {
  std::string node;  // must be non-empty; the operator checks it against the caller's identity
  std::uint64_t seq = 0;
  std::int64_t time_unix_ns = 0;
  NodeHealth health;
  std::vector<RankReport> reports;
  std::vector<Notice> notices;
  std::uint64_t dropped_messages = 0;   // plugin messages the node plugin dropped (overload)
  std::uint64_t rejected_messages = 0;  // plugin messages that failed validation/attribution
  // The batch resends the last words of rank processes that exited (their last RankReport, last
  // ProgressNotice and anomaly notices, the node plugin's processExited among them) to an operator
  // process that has not seen them: one that took over after the one they were delivered to.
  // The operator times such reports by their own stamps, not by the batch's arrival.
  // Optional on the wire (absent: false).
  bool replay = false;
  friend bool operator==(const NodeReport&, const NodeReport&) = default;
};

std::string_view directionName(Direction d) noexcept;
std::string_view progressStateName(ProgressState s) noexcept;
std::string_view anomalyKindName(AnomalyKind k) noexcept;
// "RankReport", "ProgressNotice", ... : the `kind` written on the wire.
std::string_view messageKind(const Message& m) noexcept;

// Validation of in-memory values (also run by every encoder and decoder).
Status validate(const RankReport& r);
Status validate(const ProgressNotice& n);
Status validate(const CheckpointNotice& n);
Status validate(const AnomalyNotice& n);
Status validate(const Message& m);
Status validate(const NodeReport& r);

// Plugin messages.
Result<std::vector<std::uint8_t>> encodeCbor(const Message& m);
Result<Message> decodeMessageCbor(std::span<const std::uint8_t> bytes);
Result<std::string> encodeJson(const Message& m);
Result<Message> decodeMessageJson(std::string_view text);

// Node batches.
Result<std::vector<std::uint8_t>> encodeCbor(const NodeReport& r);
Result<NodeReport> decodeNodeReportCbor(std::span<const std::uint8_t> bytes);
Result<std::string> encodeJson(const NodeReport& r);
Result<NodeReport> decodeNodeReportJson(std::string_view text);

// True when `name` is a valid Kubernetes DNS-1123 subdomain (lower-case alphanumerics, '-' and
// '.', starting and ending alphanumeric, at most 253 bytes).
bool isDnsSubdomain(std::string_view name) noexcept;

}  // namespace c4::report
