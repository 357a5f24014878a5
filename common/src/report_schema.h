// The telemetry schema (v1), written once: one description per struct of report.h, from which
// common/src/report.cc derives the encoder (CBOR and JSON), the DOM decoder, the streaming CBOR
// decoder and validate(). Internal to the codec and its tests (not installed, not part of the API).
//
// A description is a tuple of fields, in the order the DOM decoder reads them (struct order):
//
//   field(wire name, member, wire rule [, validation rule])
//
// The wire rule is what every decoder checks while reading the value, and what validate() checks
// too, so nothing leaves an encoder that a decoder would refuse:
//   U{max}          non-negative integer <= max (and <= the member type's maximum)
//   I{min, max}     integer in [min, max] (max: at most the member type's maximum)
//   F{min, max}     finite number in [min, max]
//   B{}             boolean
//   S{maxBytes}     UTF-8 text of at most maxBytes bytes
//   En{&table, n}   an enum, written as its name (at most n bytes) from `table`
//   Obj{}           a nested object: the member type's own description
//   Arr{max, msg}   an array of at most `max` items (validate() says `msg` when it has more; the
//                   default is the decoders' "N items exceeds the limit of M"); items are objects,
//                   documents (RankReport in a batch: `v` and `kind` of their own) or Notices
//
// The validation rule is what validate() checks beyond the wire rule, with the error text it
// gives (it runs first, so its text is the one a value that breaks both gets):
//   DnsName{required}, Text{}, Short{maxBytes}, Label{nonEmpty, msg}, UnixTime{}, Range{min, max,
//   msg}, AtLeast{min, msg}, FRange{min, max, msg}, Rule<T>{predicate over the whole struct, msg}
//   (a cross-field rule reported at this field), both(a, b).
//
// Per struct, Schema<T> also says: `rules` (cross-field rules reported at the struct's own path),
// `kind` (documents: the `kind` written on the wire; validate() names paths from it) and
// `checkedWhenRead` (the DOM decoder validates the struct as soon as it has read it, naming the
// path it read it from).
//
// Adding a field to a struct is one line here (plus the struct member).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <tuple>
#include <utility>

#include "c4/common/report.h"

namespace c4::report::schema {

// ---- Wire rules
// ----------------------------------------------------------------------------------

struct U {
  std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
};
struct I {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};
struct F {
  double min;
  double max;
};
struct B {};
struct S {
  std::size_t max_bytes;
};
template <typename E, std::size_t N>
using EnumNames = std::array<std::pair<E, std::string_view>, N>;
template <typename E, std::size_t N>
struct En {
  const EnumNames<E, N>* names;
  std::size_t max_bytes;
};
// Aggregate deduction is C++20 but clang has it only from 17 on.
template <typename E, std::size_t N>
En(const EnumNames<E, N>*, std::size_t) -> En<E, N>;
struct Obj {};
struct Arr {
  std::size_t max_items;
  std::string_view too_many = {};
};

// ---- Validation rules
// ----------------------------------------------------------------------------

struct NoCheck {};
struct DnsName {  // empty (unless required) or a Kubernetes DNS-1123 subdomain
  bool required = false;
};
struct Text {};  // at most kMaxTextBytes, UTF-8
struct Short {   // "too long" above maxBytes, then Text
  std::size_t max_bytes;
};
struct Label {  // UTF-8 of at most kMaxNameBytes, non-empty if nonEmpty; else `msg`
  bool non_empty;
  std::string_view msg;
};
struct UnixTime {};  // positive
struct Range {
  std::int64_t min;
  std::int64_t max;
  std::string_view msg;
};
struct AtLeast {
  std::int64_t min;
  std::string_view msg;
};
struct FRange {
  double min;
  double max;
  std::string_view msg;
};
template <typename T>
struct Rule {
  bool (*ok)(const T&);
  std::string_view msg;
};
template <typename A, typename C>
struct Both {
  A first;
  C second;
};
template <typename A, typename C>
constexpr Both<A, C> both(A a, C c) {
  return {a, c};
}

template <typename T, typename M, typename W, typename C>
struct Field {
  using Struct = T;
  using Member = M;
  std::string_view name;
  M T::*member;
  W wire;
  C check;
  // A field added after the schema's first release: a reader takes its absence as the member's
  // default, and a writer leaves it out while it holds the default (so an older reader, which
  // rejects unknown fields, accepts whatever does not use it).
  bool optional = false;
};
template <typename T, typename M, typename W, typename C = NoCheck>
constexpr Field<T, M, W, C> field(std::string_view name, M T::*member, W wire, C check = {}) {
  return {name, member, wire, check, false};
}
template <typename T, typename M, typename W, typename C = NoCheck>
constexpr Field<T, M, W, C> optionalField(std::string_view name, M T::*member, W wire,
                                          C check = {}) {
  return {name, member, wire, check, true};
}

// ---- Enum names
// ----------------------------------------------------------------------------------

inline constexpr EnumNames<Direction, 2> kDirections{
    {{Direction::kSend, "send"}, {Direction::kRecv, "recv"}}};
inline constexpr EnumNames<ProgressState, 5> kProgressStates{
    {{ProgressState::kTraining, "training"},
     {ProgressState::kCheckpointing, "checkpointing"},
     {ProgressState::kEvaluating, "evaluating"},
     {ProgressState::kIdle, "idle"},
     {ProgressState::kFinished, "finished"}}};
inline constexpr EnumNames<AnomalyKind, 4> kAnomalyKinds{
    {{AnomalyKind::kStall, "stall"},
     {AnomalyKind::kConnectionError, "connectionError"},
     {AnomalyKind::kPeerClosed, "peerClosed"},
     {AnomalyKind::kProcessExited, "processExited"}}};

inline constexpr double kMaxWeight = 1e6;
inline constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

// The texts below spell these limits out.
static_assert(kMaxRank == 16'777'216 && kMaxParts == 1024 && kMaxNameBytes == 253);

// ---- The descriptions
// ----------------------------------------------------------------------------

struct Defaults {
  static constexpr std::tuple<> rules{};
  static constexpr std::string_view kind{};
  static constexpr bool checked_when_read = false;
};

template <typename T>
struct Schema;

inline constexpr Range kRankRange{-1, kMaxRank - 1, "must be -1 or in [0, 16777216)"};

template <>
struct Schema<RankIdentity> : Defaults {
  using T = RankIdentity;
  static constexpr auto fields = std::tuple{
      field("namespace", &T::ns, S{kMaxNameBytes}, DnsName{}),
      field("job", &T::job, S{kMaxNameBytes}, DnsName{}),
      field("pod", &T::pod, S{kMaxNameBytes}, DnsName{}),
      field("node", &T::node, S{kMaxNameBytes}, DnsName{}),
      field("rank", &T::rank, I{-1, kMaxRank - 1},
            both(kRankRange,
                 Rule<T>{[](const T& id) { return id.world_size <= 0 || id.rank < id.world_size; },
                         "must be below worldSize"})),
      field("worldSize", &T::world_size, I{0, kMaxRank},
            Range{0, kMaxRank, "must be in [0, 16777216]"}),
      field("restartAttempt", &T::restart_attempt, U{}),
      field("pid", &T::pid, U{}),
  };
};

template <>
struct Schema<LatencySummary> : Defaults {
  using T = LatencySummary;
  static constexpr auto fields = std::tuple{
      field("count", &T::count, U{}),  field("sumUs", &T::sum_us, U{}),
      field("maxUs", &T::max_us, U{}), field("p50Us", &T::p50_us, U{}),
      field("p99Us", &T::p99_us, U{}),
  };
  static constexpr auto rules = std::tuple{
      Rule<T>{[](const T& l) {
                return l.max_us == 0 || (l.p50_us <= l.max_us && l.p99_us <= l.max_us);
              },
              "percentiles exceed the maximum"},
      Rule<T>{[](const T& l) { return l.p50_us <= l.p99_us; }, "p50Us exceeds p99Us"},
      Rule<T>{[](const T& l) { return l.count != 0 || (l.sum_us == 0 && l.max_us == 0); },
              "non-zero latencies with a zero count"},
  };
};

template <>
struct Schema<SubflowStats> : Defaults {
  using T = SubflowStats;
  static constexpr auto fields = std::tuple{
      field("index", &T::index, U{kMaxSubflowsPerConnection - 1}),
      field("localPort", &T::local_port, U{}),
      field("pathId", &T::path_id, I{-1}, AtLeast{-1, "must be >= -1"}),
      field("weight", &T::weight, F{0.0, kMaxWeight},
            FRange{0.0, kMaxWeight, "must be finite and within [0, 1e6]"}),
      field("bytes", &T::bytes, U{}),
  };
};

template <>
struct Schema<ConnectionStats> : Defaults {
  using T = ConnectionStats;
  static constexpr bool checked_when_read = true;
  static constexpr auto fields = std::tuple{
      field("id", &T::id, U{}),
      field("direction", &T::direction, En{&kDirections, 16}),
      field("peerRank", &T::peer_rank, I{-1, kMaxRank - 1}, kRankRange),
      field("peerNode", &T::peer_node, S{kMaxNameBytes}, DnsName{}),
      field("peerPod", &T::peer_pod, S{kMaxNameBytes}, DnsName{}),
      field("bytes", &T::bytes, U{}),
      field("ops", &T::ops, U{}),
      field("inflight", &T::inflight, U{}),
      field("oldestInflightUs", &T::oldest_inflight_us, U{},
            Rule<T>{[](const T& c) { return c.inflight != 0 || c.oldest_inflight_us == 0; },
                    "non-zero with no op in flight"}),
      field("wait", &T::wait, Obj{}),
      field("transfer", &T::transfer, Obj{}),
      field("subflows", &T::subflows, Arr{kMaxSubflowsPerConnection}),
  };
};

template <>
struct Schema<CommunicatorProgress> : Defaults {
  using T = CommunicatorProgress;
  static constexpr bool checked_when_read = true;
  static constexpr auto fields = std::tuple{
      field("commHash", &T::comm_hash, U{}),
      field("nranks", &T::nranks, I{0, kMaxRank}),
      field("rank", &T::rank, I{-1, kMaxRank - 1},
            Rule<T>{[](const T& c) { return c.rank < 0 || c.nranks == 0 || c.rank < c.nranks; },
                    "must be -1 or below nranks"}),
      field("collEntered", &T::coll_entered, U{}),
      field("collFinished", &T::coll_finished, U{},
            Rule<T>{[](const T& c) { return c.coll_finished <= c.coll_entered; },
                    "must not exceed collEntered"}),
      field("p2pEntered", &T::p2p_entered, U{}),
      field("p2pFinished", &T::p2p_finished, U{},
            Rule<T>{[](const T& c) { return c.p2p_finished <= c.p2p_entered; },
                    "must not exceed p2pEntered"}),
      field("lastCollSeq", &T::last_coll_seq, U{}),
      field("oldestUnfinishedUs", &T::oldest_unfinished_us, U{}),
  };
};

template <>
struct Schema<RankReport> : Defaults {
  using T = RankReport;
  static constexpr std::string_view kind = "RankReport";
  static constexpr auto fields = std::tuple{
      field("id", &T::id, Obj{}),
      field("seq", &T::seq, U{}),
      field("part", &T::part, U{kMaxParts - 1},
            Rule<T>{
                [](const T& r) { return r.parts != 0 && r.parts <= kMaxParts && r.part < r.parts; },
                "must satisfy 0 <= part < parts <= 1024"}),
      field("parts", &T::parts, U{kMaxParts}),
      field("timeUnixNs", &T::time_unix_ns, I{1}, UnixTime{}),
      field("intervalMs", &T::interval_ms, U{3'600'000},
            Range{1, 3'600'000, "must be in [1, 3600000]"}),
      field("planVersion", &T::plan_version, I{-1}, AtLeast{-1, "must be >= -1"}),
      field("droppedMessages", &T::dropped_messages, U{}),
      field("connections", &T::connections, Arr{kMaxConnectionsPerReport}),
      field("communicators", &T::communicators, Arr{kMaxCommunicatorsPerReport}),
      optionalField("last", &T::last, B{}),
  };
};

template <>
struct Schema<ProgressNotice> : Defaults {
  using T = ProgressNotice;
  static constexpr std::string_view kind = "ProgressNotice";
  static constexpr auto fields = std::tuple{
      field("id", &T::id, Obj{}),
      field("timeUnixNs", &T::time_unix_ns, I{1}, UnixTime{}),
      field("step", &T::step, I{-1}, AtLeast{-1, "must be >= -1"}),
      field("state", &T::state, En{&kProgressStates, 32}),
      optionalField("expectedSeconds", &T::expected_seconds, U{kMaxPauseSeconds},
                    Rule<T>{[](const T& n) {
                              return n.expected_seconds == 0 ||
                                     n.state == ProgressState::kCheckpointing ||
                                     n.state == ProgressState::kEvaluating ||
                                     n.state == ProgressState::kIdle;
                            },
                            "is for pauses only (checkpointing, evaluating, idle)"}),
  };
};

template <>
struct Schema<CheckpointNotice> : Defaults {
  using T = CheckpointNotice;
  static constexpr std::string_view kind = "CheckpointNotice";
  static constexpr auto fields = std::tuple{
      field("id", &T::id, Obj{}),
      field("timeUnixNs", &T::time_unix_ns, I{1}, UnixTime{}),
      field("step", &T::step, I{0}, AtLeast{0, "must be >= 0"}),
      field("path", &T::path, S{kMaxTextBytes}, Text{}),
  };
};

template <>
struct Schema<AnomalyNotice> : Defaults {
  using T = AnomalyNotice;
  static constexpr std::string_view kind = "AnomalyNotice";
  static constexpr auto fields = std::tuple{
      field("id", &T::id, Obj{}),
      field("timeUnixNs", &T::time_unix_ns, I{1}, UnixTime{}),
      field("anomaly", &T::kind, En{&kAnomalyKinds, 32}),
      field("connectionId", &T::connection_id, U{}),
      field("direction", &T::direction, En{&kDirections, 16}),
      field("peerRank", &T::peer_rank, I{-1, kMaxRank - 1}, kRankRange),
      field("peerNode", &T::peer_node, S{kMaxNameBytes}, DnsName{}),
      field("ageUs", &T::age_us, U{}),
      field("detail", &T::detail, S{kMaxTextBytes}, Text{}),
  };
};

inline constexpr Label kDeviceName{true, "must be a non-empty UTF-8 name of at most 253 bytes"};

template <>
struct Schema<NicHealth> : Defaults {
  using T = NicHealth;
  static constexpr auto fields = std::tuple{
      field("name", &T::name, S{kMaxNameBytes}, kDeviceName),
      field("up", &T::up, B{}),
      field("rdma", &T::rdma, B{}),
      field("speedMbps", &T::speed_mbps, U{}),
      field("errors", &T::errors, U{}),
      field("operstate", &T::operstate, S{32}, Short{32}),
      field("carrier", &T::carrier, B{}),
      field("carrierChanges", &T::carrier_changes, U{}),
      field("rxErrors", &T::rx_errors, U{}),
      field("txErrors", &T::tx_errors, U{}),
      field("rxDropped", &T::rx_dropped, U{}),
      field("txDropped", &T::tx_dropped, U{}),
  };
};

template <>
struct Schema<GpuHealth> : Defaults {
  using T = GpuHealth;
  static constexpr auto fields = std::tuple{
      field("index", &T::index, I{0, kMaxDevicesPerNode - 1},
            Range{0, kMaxDevicesPerNode - 1, "out of range"}),
      field("uuid", &T::uuid, S{kMaxNameBytes}, Text{}),
      field("healthy", &T::healthy, B{}),
      field("detail", &T::detail, S{kMaxTextBytes}, Text{}),
      field("eccVolatileUncorrected", &T::ecc_volatile_uncorrected, U{}),
      field("retiredPagesPending", &T::retired_pages_pending, B{}),
      field("lastXid", &T::last_xid, U{}),
      field("throttleReasons", &T::throttle_reasons, U{}),
  };
};

template <>
struct Schema<RdmaPortHealth> : Defaults {
  using T = RdmaPortHealth;
  static constexpr auto fields = std::tuple{
      field("device", &T::device, S{kMaxNameBytes}, kDeviceName),
      field("port", &T::port, U{255}, Range{0, 255, "must be <= 255"}),
      field("netdev", &T::netdev, S{kMaxNameBytes},
            Label{false, "must be UTF-8 of at most 253 bytes"}),
      field("state", &T::state, S{32}, Short{32}),
      field("physState", &T::phys_state, S{32}, Short{32}),
      field("rateMbps", &T::rate_mbps, U{}),
      field("active", &T::active, B{}),
      field("symbolErrors", &T::symbol_errors, U{}),
      field("linkDowned", &T::link_downed, U{}),
      field("linkErrorRecovery", &T::link_error_recovery, U{}),
      field("rcvErrors", &T::rcv_errors, U{}),
      field("xmitDiscards", &T::xmit_discards, U{}),
  };
};

template <>
struct Schema<NodeHealth> : Defaults {
  using T = NodeHealth;
  static constexpr auto fields = std::tuple{
      field("nics", &T::nics, Arr{kMaxDevicesPerNode, "too many devices"}),
      field("gpus", &T::gpus, Arr{kMaxDevicesPerNode, "too many devices"}),
      field("rdmaPorts", &T::rdma_ports, Arr{kMaxDevicesPerNode, "too many devices"}),
      field("nicsAvailable", &T::nics_available, B{}),
      field("nicsReason", &T::nics_reason, S{kMaxTextBytes}, Text{}),
      field("rdmaAvailable", &T::rdma_available, B{}),
      field("rdmaReason", &T::rdma_reason, S{kMaxTextBytes}, Text{}),
      field("gpusAvailable", &T::gpus_available, B{}),
      field("gpusReason", &T::gpus_reason, S{kMaxTextBytes}, Text{}),
  };
};

template <>
struct Schema<NodeReport> : Defaults {
  using T = NodeReport;
  static constexpr std::string_view kind = "NodeReport";
  static constexpr auto fields = std::tuple{
      field("node", &T::node, S{kMaxNameBytes}, DnsName{true}),
      field("seq", &T::seq, U{}),
      field("timeUnixNs", &T::time_unix_ns, I{1}, UnixTime{}),
      field("health", &T::health, Obj{}),
      field("reports", &T::reports, Arr{kMaxReportsPerBatch, "too many reports"}),
      field("notices", &T::notices, Arr{kMaxNoticesPerBatch, "too many notices"}),
      field("droppedMessages", &T::dropped_messages, U{}),
      field("rejectedMessages", &T::rejected_messages, U{}),
      optionalField("replay", &T::replay, B{}),
  };
};

// Calls f(field) for the field at runtime index i of T's description; false when there is none.
template <typename T, typename Fn>
bool visitField(std::size_t i, Fn&& f) {
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    bool ok = false;
    (void)((i == K && (ok = f(std::get<K>(Schema<T>::fields)), true)) || ...);
    return ok;
  }(std::make_index_sequence<std::tuple_size_v<decltype(Schema<T>::fields)>>{});
}

// Calls f(field) for every field of T's description, in order, while f returns true.
template <typename T, typename Fn>
constexpr bool forEachField(Fn&& f) {
  return std::apply([&](const auto&... fs) { return (f(fs) && ...); }, Schema<T>::fields);
}

template <typename T>
inline constexpr std::size_t kFieldCount = std::tuple_size_v<decltype(Schema<T>::fields)>;

}  // namespace c4::report::schema
