// The C4 TCP transport behind the NCCL ABI shell (abi.cc): per-communicator contexts, listen/
// connect/accept state machines, multi-subflow connections, request pools within NCCL's limits,
// telemetry and the traffic plan.
//
// Threads: a SendComm/RecvComm has no thread of its own. Its non-blocking sockets are driven by
// the NCCL thread that calls isend/irecv/test on it (under the comm's I/O mutex): isend writes what
// the socket takes at once, test reads and writes what is ready. NCCL's proxy polls test() on every
// request in flight, so that is all the progress a connection needs, and a small message costs no
// thread hand-off and no wake-up. Every Context owns one reporter thread (telemetry, stall
// detection, plan polling; joined by the destructor, which abi.cc calls from finalize); it only
// reads telemetry atomics.
//
// Wire format (little-endian hosts): each subflow starts with a Hello (rank/pod/node, connection
// id, subflow index); the acceptor answers an Ack with its own identity on subflow 0; after that
// data flows one way as frames {magic, tag, tagSeq, total, offset, len} + payload. A message is
// split into frames across subflows by weight; the receiver gives the k-th message of a tag to the
// k-th receive buffer posted with that tag and reassembles it by offset.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/plan.h"
#include "c4/common/report.h"
#include "c4/plugin/config.h"
#include "c4/plugin/interfaces.h"
#include "c4/plugin/telemetry.h"

namespace c4::plugin {

inline constexpr std::size_t kHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
inline constexpr int kMaxRequests = 32;           // NCCL_NET_MAX_REQUESTS
inline constexpr int kMaxRecvs = 8;               // grouped receive width we advertise
inline constexpr int kMaxSendRequests = kMaxRequests * kMaxRecvs;
inline constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;  // maxP2pBytes (int sizes)
inline constexpr int kPtrHost = 0x1;

class Context;
struct Request;

enum class CommKind : std::uint32_t {
  kListen = 0x4c43344cu,
  kSend = 0x53433453u,
  kRecv = 0x52433452u
};

// Common header of every comm object NCCL holds (lets regMr tell a send from a recv comm).
struct CommBase {
  explicit CommBase(CommKind k, Context* c) : kind(k), ctx(c) {}
  virtual ~CommBase() = default;
  const CommKind kind;
  Context* const ctx;
};

class ListenComm;
class SendComm;
class RecvComm;

struct MemRegion {
  void* data = nullptr;
  std::size_t size = 0;
  int type = 0;
  CommBase* comm = nullptr;
};

struct ContextOptions {
  PluginConfig config;
  Clock* clock = nullptr;  // nullptr: realClock()
  std::vector<NetInterface> devices;
  // How long the context's end waits for the node plugin to read its last words (failure notices
  // sent as it ends) before the process goes on, usually to exit: the node plugin attributes a
  // datagram by its sender's live pid.
  std::chrono::milliseconds last_words_linger{250};
};

// Process-wide device table, discovered once from C4_SOCKET_IFNAME (immutable afterwards).
Result<std::vector<NetInterface>> processDevices(const PluginConfig& config);

class Context {
 public:
  static Result<std::unique_ptr<Context>> create(ContextOptions options);
  ~Context();  // closes comms NCCL left open, joins the reporter thread
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  [[nodiscard]] int deviceCount() const { return static_cast<int>(devices_.size()); }
  [[nodiscard]] const std::vector<NetInterface>& devices() const { return devices_; }
  [[nodiscard]] const PluginConfig& config() const { return config_; }
  [[nodiscard]] Clock& clock() const { return *clock_; }

  // Writes a handle into NCCL's 128-byte buffer.
  Result<CommBase*> listen(int dev, void* handle);
  // Non-blocking and idempotent on the same handle buffer: nullptr = not yet, call again.
  Result<CommBase*> connect(int dev, void* handle);

  // Telemetry and plan, also used by tests.
  [[nodiscard]] std::vector<std::shared_ptr<ConnTelemetry>> connections() const;
  [[nodiscard]] std::int64_t planVersion() const;
  // Runs one reporter tick now (plan poll, stall check, report): tests and shutdown flush.
  void tickNow(bool forceReport);
  [[nodiscard]] std::uint64_t droppedMessages() const;
  [[nodiscard]] std::uint64_t sentMessages() const;

  // The process leaves through exit() with contexts still alive (NCCL finalizes a context only
  // when its communicator is destroyed): each live context sends its last report now, the last
  // of them marked RankReport::last, and waits (at most its last_words_linger) until the node
  // plugin read it. The contexts stay usable; their destructors send no second last report.
  // Called by the library's destructor (abi.cc).
  static void endOfProcess() noexcept;

  // Internal (comms register/unregister themselves).
  void registerComm(CommBase* comm, std::shared_ptr<ConnTelemetry> tel);
  void unregisterComm(CommBase* comm);
  [[nodiscard]] std::vector<double> plannedWeights(const ConnTelemetry& tel) const;

 private:
  explicit Context(ContextOptions options);
  void reporterLoop();
  // `last`: the process's last report (RankReport::last).
  void tick(bool forceReport, bool planDue, bool last = false);
  void applyPlanToLiveConnections();
  void sendMessage(const report::Message& m);
  // Sends the failure notice of a failed connection unless it was sent already.
  void reportFailureOnce(ConnTelemetry& t, std::int64_t wallNs);
  report::RankIdentity identity() const;

  PluginConfig config_;
  Clock* clock_;
  std::chrono::milliseconds last_words_linger_;
  std::vector<NetInterface> devices_;

  mutable std::mutex mu_;  // comms_, closed_, pending_, plan_wait_since_
  std::map<CommBase*, std::shared_ptr<ConnTelemetry>> comms_;
  // Closed since the last report; reported once more (bounded, kMaxClosedOwed in transport.cc).
  std::vector<std::shared_ptr<ConnTelemetry>> closed_;
  struct PendingConnect;
  std::map<void*, std::unique_ptr<PendingConnect>> pending_;
  std::map<void*, std::int64_t> plan_wait_since_;  // handle -> first connect call (clock ns)

  PlanWatcher plan_;
  std::mutex report_mu_;  // one tick at a time (reporter thread vs tickNow)
  // The process's list of live contexts (transport.cc), under its mutex.
  Context* live_prev_ = nullptr;
  Context* live_next_ = nullptr;
  bool reported_at_exit_ = false;  // endOfProcess sent this context's last report
  struct Reporter;
  std::unique_ptr<Reporter> reporter_;
  std::atomic<std::uint64_t> encode_failures_{0};

  std::mutex stop_mu_;
  std::condition_variable_any stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Every function checks that `comm` is of the right kind (kInvalidArgument otherwise).
Result<CommBase*> accept(CommBase* listen);  // nullptr: not yet, call again
Result<Request*> isend(CommBase* sendComm, const void* data, std::size_t size, int tag);
Result<Request*> irecv(CommBase* recvComm, int n, void* const* data, const std::size_t* sizes,
                       const int* tags);
// Host memory needs no flush: returns an already completed request (documented in README.md).
Result<Request*> iflush(CommBase* recvComm);
// done=false: still in flight. On done, `sizes` (if not null) gets the byte count(s) and the
// request is released. An error means the connection failed; the request stays owned by the comm.
Result<bool> test(Request* request, int* sizes);
Status closeComm(CommBase* comm, CommKind expected);
Result<MemRegion*> regMr(CommBase* comm, void* data, std::size_t size, int type);
Status deregMr(CommBase* comm, MemRegion* mr);

using telemetry::encodeReportParts;  // the telemetry core's (c4/common/rank_telemetry.h)

// Peer identity learned in the hello/ack.
struct PeerInfo {
  std::int32_t rank = -1;
  std::string node;
  std::string pod;
};

// The connection handshake's decoders, apart from the sockets (unit tests, fuzz/): a connector
// sends a hello on each subflow and the listener answers an ack on subflow 0; each is a fixed
// header followed by the sender's node and pod names (at most 253 bytes each). `buf` holds the
// bytes read so far. kNeedMore: read until `need` bytes in all (never more: a decoder reads only
// what the message still needs). kInvalid: the bytes cannot be a valid message (drop the
// connection). kComplete: `buf` is exactly one valid message.
enum class HandshakeStep { kNeedMore, kInvalid, kComplete };
struct Hello {
  std::uint16_t subflow_index = 0;
  std::uint16_t n_subflows = 0;
  std::uint64_t conn_id = 0;
  PeerInfo peer;
};
struct HelloDecode {
  HandshakeStep step = HandshakeStep::kNeedMore;
  std::size_t need = 0;
  Hello hello;  // set when kComplete
};
// A hello must name the listener (`listen_id`) and 1..kMaxSubflows subflows.
HelloDecode decodeHello(std::span<const std::uint8_t> buf, std::uint64_t listen_id);
struct AckDecode {
  HandshakeStep step = HandshakeStep::kNeedMore;
  std::size_t need = 0;
  PeerInfo peer;  // set when kComplete
};
AckDecode decodeAck(std::span<const std::uint8_t> buf);

PeerInfo peerOf(const CommBase* comm);
std::shared_ptr<ConnTelemetry> telemetryOf(const CommBase* comm);
// Local port of each subflow socket (tests check planned bindings).
std::vector<std::uint16_t> subflowLocalPorts(const CommBase* comm);

}  // namespace c4::plugin
