// Shipper: batches what the receiver and the health monitor hand it into one NodeReport every
// interval and POSTs it to the operator's /v1/reports (the wire contract in docs/node-plugin.md):
//
//   200        sent; the batch is done.
//   400, 415   the operator refuses the body: the batch is dropped and counted.
//   401, 403   the token is re-read at once; the batch is kept; backoff.
//   409        next seq = max(own, C4-Last-Seq + 1); the batch is resent once at once with the
//              new seq (a second 409 drops it, counted).
//   413        the batch is halved and each half sent; a batch of one item is dropped.
//   429, 503   the buffer is coalesced (the latest RankReport per (namespace, pod, rank); notices
//              kept, oldest dropped past max_notices) and nothing is sent before Retry-After
//              (or the backoff delay when the answer has none).
//   other 5xx, connection errors: exponential backoff with jitter, data kept.
//
// Backoff: the n-th consecutive failure waits d = min(cap, base * 2^(n-1)) stretched by a jitter
// draw to a uniform value in [d/2, d]. Memory is bounded by max_buffer_bytes (an estimate of the
// encoded size): past it the oldest item of the pod that buffers the most bytes goes first, and
// past max_notices the oldest notice of the pod with the most notices (counted): a pod flooding the
// node plugin loses its own items and leaves the other pods theirs (the pod: namespace and name of
// the attributed identity). `seq` starts at the start time in
// Unix microseconds and grows by one per POST. Notices (anomaly, checkpoint) and health
// anomalies ask for an immediate send (not earlier than the backoff allows), and so does the
// first report in which a receiving connection stalled (a receive waits >= 0.5 s and nothing
// arrived since the rank's previous report), at most once per interval: a dead path reaches the
// operator's link monitor and C4D without the batching delay.
//
// Last words: the shipper keeps what each rank process said last (its newest RankReport, its
// newest ProgressNotice, its last kMaxLastAnomalies anomaly notices) and, once the node plugin
// sees the process exit (an anomaly of kind processExited), keeps those with the exit notice for
// last_words_ttl (at most max_last_words exited processes, the oldest exits go first; at most
// max_last_words_bytes in all, see there). Every
// accepted answer names the operator process that took the batch (C4-Operator-Instance). When
// that name changes from one accepted answer to the next, the evidence of exits delivered to the
// old process may have died with it (an operator killed between a rank's exit and its verdict),
// so the shipper sends the last words again, first, in batches of their own marked `replay`,
// with their original stamps; the operator times replayed reports by those stamps. A rank still
// running has nothing replayed: its next report says more than its last one did.
//
// Thread-safe: add*() from any thread; run() on one thread; stop() from another.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "c4/common/report.h"
#include "kube/client/random.h"

namespace c4::node {

struct HttpResponse {
  long status = 0;
  std::string body;
  std::optional<Duration> retry_after;    // Retry-After in seconds
  std::optional<std::uint64_t> last_seq;  // C4-Last-Seq
  std::string instance;                   // C4-Operator-Instance ("" when absent)
};

// One POST of an encoded NodeReport. An error means no HTTP answer (connection refused, TLS
// failure, timeout): kUnavailable / kDeadlineExceeded.
class ReportTransport {
 public:
  virtual ~ReportTransport() = default;
  virtual Result<HttpResponse> post(const std::vector<std::uint8_t>& cbor_body,
                                    const std::string& bearer_token, Duration timeout) = 0;
};

// libcurl over HTTPS; plain HTTP only with `allow_insecure` (tests; an http:// URL is refused
// otherwise, and curl is held to the URL's scheme). `ca_file` empty = the system trust store.
struct CurlTransportConfig {
  std::string url;  // e.g. https://c4-operator.c4-system.svc:8443/v1/reports
  std::string ca_file;
  bool allow_insecure = false;
  Duration connect_timeout = std::chrono::seconds{5};
};
Result<std::unique_ptr<ReportTransport>> createCurlTransport(CurlTransportConfig config);

// The bearer token from a file, re-read when the file changes (inode, size or mtime) or when
// asked to (after a 401/403). The kubelet rotates projected tokens by replacing the file.
class TokenSource {
 public:
  explicit TokenSource(std::string path) : path_(std::move(path)) {}
  // The current token (trailing whitespace trimmed); an error when the file cannot be read or
  // is empty.
  Result<std::string> token();
  void invalidate();
  [[nodiscard]] std::uint64_t reads() const { return reads_; }

 private:
  std::string path_;
  std::mutex mu_;
  bool valid_ = false;
  std::uint64_t ino_ = 0;
  std::int64_t size_ = -1;
  std::int64_t mtime_ns_ = 0;
  std::string token_;
  std::uint64_t reads_ = 0;
};

struct ShipperConfig {
  std::string node;
  Duration interval = std::chrono::seconds{1};
  std::size_t max_buffer_bytes = 32u << 20;
  std::size_t max_notices = 8192;
  Duration backoff_base = std::chrono::milliseconds{500};
  Duration backoff_cap = std::chrono::seconds{30};
  Duration request_timeout = std::chrono::seconds{10};
  Duration shutdown_deadline = std::chrono::seconds{5};
  // How long, and for how many exited rank processes, last words are kept for a replay
  // (last_words_ttl 0: none kept, nothing replayed).
  Duration last_words_ttl = std::chrono::minutes{10};
  std::size_t max_last_words = 256;
  // Bound of the kept words (estimated encoded size, running and exited processes together):
  // past it the words of the running process that holds the most go first (a pod sending huge
  // reports loses its own), then the oldest exits.
  std::size_t max_last_words_bytes = 16u << 20;
};

// Outcome of one POST (the `outcome` label of c4_node_plugin_batches_total).
enum class SendOutcome {
  kAccepted,
  kBadRequest,
  kUnauthorized,
  kForbidden,
  kConflict,
  kTooLarge,
  kUnsupported,
  kRateLimited,
  kUnavailable,
  kServerError,
  kOtherStatus,
  kConnectionError,
  kNoToken,
};
std::string_view sendOutcomeName(SendOutcome o) noexcept;

class Shipper {
 public:
  Shipper(ShipperConfig config, Clock& clock, ReportTransport& transport, TokenSource& tokens,
          metrics::Registry& registry, kube::RandomSource random = kube::defaultRandomSource());
  ~Shipper();
  Shipper(const Shipper&) = delete;
  Shipper& operator=(const Shipper&) = delete;

  // Adds an attributed message; notices other than progress ask for an immediate send, and so
  // does a rank report with a newly stalled connection (see newlyStalledLocked), at most once per
  // interval. Returns false only if the message alone exceeds the buffer bound.
  bool add(report::Message message);
  // The latest node health; `anomaly` asks for an immediate send.
  void setHealth(report::NodeHealth health, bool anomaly);
  // Cumulative counters carried in NodeReport.droppedMessages / rejectedMessages.
  void setMessageCounters(std::uint64_t dropped, std::uint64_t rejected);
  void requestFlush();

  // Sends one batch now (whatever the schedule), handling the answer as described above.
  // Returns the outcome of the last POST made.
  SendOutcome sendNow();
  // The loop: waits for the interval or a flush request, respecting backoff; returns after
  // stop(), having tried to send what it holds until shutdown_deadline.
  void run();
  void start();  // run() on a thread
  void stop();   // asks run() to flush and return; joins the thread if start() made it

  // Introspection (tests, metrics, readiness).
  [[nodiscard]] std::uint64_t nextSeq() const;
  [[nodiscard]] std::size_t bufferedBytes() const;
  [[nodiscard]] std::size_t bufferedReports() const;
  [[nodiscard]] std::size_t bufferedNotices() const;
  [[nodiscard]] int consecutiveFailures() const;
  // When the next send may happen (backoff / Retry-After); monoNow() or earlier when free.
  [[nodiscard]] MonoTime notBefore() const;
  [[nodiscard]] Duration lastBackoff() const;
  // When the last POST was accepted (nullopt: never); when failures began (nullopt: none).
  [[nodiscard]] std::optional<MonoTime> lastSuccess() const;
  [[nodiscard]] std::optional<MonoTime> failingSince() const;
  [[nodiscard]] std::uint64_t droppedItems() const;
  [[nodiscard]] MonoTime lastLoop() const;
  // Exited rank processes whose last words are kept, the estimated bytes of all kept words
  // (running processes' too); the operator instance last heard from.
  [[nodiscard]] std::size_t lastWordsKept() const;
  [[nodiscard]] std::size_t lastWordsBytes() const;
  [[nodiscard]] std::string operatorInstance() const;

  static constexpr std::size_t kMaxLastAnomalies = 8;

 private:
  struct Item {
    std::variant<report::RankReport, report::Notice> value;
    std::size_t bytes = 0;
    std::string pod;      // "<namespace>/<pod>": the fairness key of the bounds
    bool replay = false;  // last words resent to a new operator instance (a batch of its own)
  };
  struct PodUsage {
    std::size_t items = 0;
    std::size_t bytes = 0;
    std::size_t notices = 0;
  };
  struct Batch {
    std::vector<Item> items;
    bool replay = false;  // every item is a replayed one
  };
  // What one rank process said last (see "Last words" above).
  struct LastWords {
    std::optional<report::RankReport> report;
    std::optional<report::ProgressNotice> progress;
    std::deque<report::AnomalyNotice> anomalies;  // newest last, at most kMaxLastAnomalies
    std::optional<report::AnomalyNotice> exit;    // the processExited notice
    MonoTime exited_at{};
    std::size_t bytes = 0;  // estimated encoded size of all of it
  };
  // (ns/pod, rank, restart attempt): not the pid, since a trainer's progress notices come from
  // a process of its own (c4-notify, the Python helper).
  using RankKey = std::tuple<std::string, std::int32_t, std::uint32_t>;

  SendOutcome sendBatchLocked(std::unique_lock<std::mutex>& lock, Batch batch, int depth);
  Result<std::vector<std::uint8_t>> encodeLocked(const Batch& batch, std::uint64_t seq);
  void requeueLocked(Batch batch);
  void coalesceLocked();
  void enforceBoundLocked();
  // Every item entering or leaving buffer_ goes through these (bytes, notices, per-pod usage).
  void chargeLocked(const Item& item);
  void releaseLocked(const Item& item);
  // The oldest item (notice, when `notices`) of the pod that buffers the most bytes (notices).
  std::deque<Item>::iterator largestPodsOldestLocked(bool notices);
  void dropItemLocked(const Item& item, const char* why);
  void failureLocked(std::optional<Duration> retry_after);
  void successLocked();
  void updateGaugesLocked();
  Batch takeBatchLocked();
  // True when one of the report's receiving connections stalled since the rank's previous report:
  // a receive has waited at least report::kStalledWaitUs and the connection delivered nothing in
  // between (the first silent window of a dead path or a hung peer). Remembers the report.
  bool newlyStalledLocked(const report::RankReport& r);
  // Last words: remembers what `item` says of its rank process (an exit moves the process's
  // words to exited_words_); replayLocked queues the kept words of exited processes, first.
  void rememberLocked(const Item& item);
  void replayLocked();
  // The exited processes' words past last_words_ttl or beyond max_last_words go: run when an
  // exit is recorded and before a resend, not on every message (what lingers past its time until
  // then is within both bounds, and is not resent).
  void expireExitedWordsLocked(MonoTime now);
  // Within max_last_words_bytes: the running process holding the most goes first, then the
  // oldest exit. Run when the words grew.
  void boundLastWordsBytesLocked();
  std::map<RankKey, LastWords>::iterator oldestExitLocked();
  // Erases one entry of live_words_ or exited_words_, keeping last_words_bytes_.
  void forgetWordsLocked(std::map<RankKey, LastWords>& map,
                         std::map<RankKey, LastWords>::iterator it);

  ShipperConfig config_;
  Clock& clock_;
  ReportTransport& transport_;
  TokenSource& tokens_;
  kube::RandomSource random_;
  Logger log_;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> buffer_;
  std::size_t buffer_bytes_ = 0;
  std::size_t notices_ = 0;
  std::map<std::string, PodUsage> pods_;
  report::NodeHealth health_;
  std::uint64_t dropped_messages_ = 0;
  std::uint64_t rejected_messages_ = 0;
  std::uint64_t next_seq_ = 0;
  bool flush_requested_ = false;
  bool stopping_ = false;
  int failures_ = 0;
  MonoTime not_before_{};
  Duration last_backoff_{};
  std::optional<MonoTime> last_success_;
  std::optional<MonoTime> failing_since_;
  MonoTime shutdown_deadline_{};
  std::uint64_t dropped_items_ = 0;
  // Per rank process (namespace/pod, pid, rank): each receiving connection's bytes in its last
  // report and whether it was stalled then. Cleared when it outgrows kMaxTrackedRanks rank
  // processes, far more than a node runs.
  struct ConnState {
    std::uint64_t bytes = 0;
    bool stalled = false;
  };
  static constexpr std::size_t kMaxTrackedRanks = 1024;
  std::map<std::tuple<std::string, std::uint32_t, std::int32_t>, std::map<std::uint64_t, ConnState>>
      rank_conns_;
  std::optional<MonoTime> last_stall_flush_;
  // Last words of running rank processes (cleared past kMaxTrackedRanks, as rank_conns_) and of
  // exited ones (bounded by max_last_words and last_words_ttl); the operator instance last named
  // by an accepted answer.
  std::map<RankKey, LastWords> live_words_;
  std::map<RankKey, LastWords> exited_words_;
  std::size_t last_words_bytes_ = 0;
  std::string instance_;
  std::atomic<std::int64_t> last_loop_ns_{0};
  std::thread thread_;

  metrics::Family<metrics::Counter>& batches_;
  metrics::Counter& bytes_sent_;
  metrics::Family<metrics::Counter>& buffer_dropped_;
  metrics::Counter& coalesced_;
  metrics::Counter& splits_;
  metrics::Counter& replayed_;
  metrics::Gauge& buffer_bytes_gauge_;
  metrics::Gauge& buffer_items_gauge_;
  metrics::Gauge& backoff_gauge_;
  metrics::Gauge& failures_gauge_;
  metrics::Histogram& send_seconds_;
};

}  // namespace c4::node
