// Receiver: the node end of the plugin -> node plugin channel (a Unix datagram socket).
//
// Binds `socket_path` (creating its directory; a stale socket is replaced; mode 0666 so pods of
// any uid can send), asks the kernel for each sender's credentials (SO_PASSCRED ->
// SCM_CREDENTIALS) and sizes the kernel queue with SO_RCVBUF. Senders never block: when the
// queue is full the kernel refuses their datagram and the sender counts the drop (it reports
// the count in RankReport.droppedMessages). Each datagram is decoded strictly
// (report::decodeMessageCbor), attributed (attribution.h), reassembled when split
// (reassembly.h) and handed to the sink. Every drop is counted by reason in
// c4_node_plugin_messages_dropped_total{reason} and logged at most once per reason per
// `log_interval` (with the number of drops the limit held back).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "c4/common/unix_socket.h"
#include "c4/node_plugin/attribution.h"
#include "c4/node_plugin/reassembly.h"

namespace c4::node {

// Takes an attributed message; returns false when it cannot take more (counted as queue_full).
using MessageSink = std::function<bool(report::Message&&, const Attribution&)>;

// Logs one line per key per interval, telling how many lines it held back since the last one.
class RateLimitedLog {
 public:
  RateLimitedLog(Clock& clock, Logger log, Duration interval)
      : clock_(clock), log_(std::move(log)), interval_(interval) {}
  void warn(const std::string& key, std::string_view msg, const std::string& detail);

 private:
  struct Slot {
    MonoTime last{};
    bool logged = false;
    std::uint64_t suppressed = 0;
  };
  Clock& clock_;
  Logger log_;
  Duration interval_;
  std::mutex mu_;
  std::map<std::string, Slot> slots_;
};

class Receiver {
 public:
  struct Config {
    std::string socket_path = "/var/run/c4/agent.sock";
    int rcvbuf_bytes = 4 << 20;  // SO_RCVBUF request (the kernel doubles it, bounded by rmem_max)
    ReassemblyLimits reassembly;
    Duration log_interval = std::chrono::seconds{10};
  };

  static Result<std::unique_ptr<Receiver>> create(Config config, Clock& clock,
                                                  const Attributor& attributor,
                                                  metrics::Registry& registry, MessageSink sink);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // Waits up to `timeout` for one datagram and handles it, then drops timed-out partial reports.
  // Returns whether a datagram was handled.
  Result<bool> pollOnce(std::chrono::milliseconds timeout);
  // A thread that polls until stop().
  void start();
  void stop();
  [[nodiscard]] bool running() const { return running_.load(); }
  // Liveness: monotonic time of the last loop iteration of the thread.
  [[nodiscard]] MonoTime lastLoop() const;

  [[nodiscard]] const std::string& path() const { return server_.path(); }
  [[nodiscard]] std::uint64_t received() const { return received_.load(); }
  [[nodiscard]] std::uint64_t accepted() const { return accepted_.load(); }
  [[nodiscard]] std::uint64_t dropped(DropReason reason) const;
  [[nodiscard]] std::uint64_t droppedTotal() const;
  // Drops for reasons of the node plugin's own capacity (queue_full), as opposed to rejections.
  [[nodiscard]] std::uint64_t overloadDrops() const { return dropped(DropReason::kQueueFull); }
  [[nodiscard]] const Reassembler& reassembler() const { return reassembler_; }

 private:
  Receiver(Config config, Clock& clock, const Attributor& attributor, metrics::Registry& registry,
           MessageSink sink, UnixDatagramServer server);
  void handle(Datagram& d);
  void drop(DropReason reason, const std::string& detail, pid_t pid);
  void countReassembly(const char* outcome, std::uint64_t n = 1);

  Config config_;
  Clock& clock_;
  const Attributor& attributor_;
  MessageSink sink_;
  UnixDatagramServer server_;
  Reassembler reassembler_;
  RateLimitedLog limited_;
  Logger log_;
  std::atomic<std::uint64_t> received_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::array<std::atomic<std::uint64_t>, kDropReasonCount> dropped_{};
  metrics::Family<metrics::Counter>& received_metric_;
  metrics::Family<metrics::Counter>& accepted_metric_;
  metrics::Family<metrics::Counter>& dropped_metric_;
  metrics::Family<metrics::Counter>& attributed_metric_;
  metrics::Counter& after_exit_metric_;
  metrics::Family<metrics::Counter>& reassembly_metric_;
  metrics::Gauge& partial_metric_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> last_loop_ns_{0};
  std::thread thread_;
};

}  // namespace c4::node
