#include "c4/node_plugin/receiver.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

namespace c4::node {

void RateLimitedLog::warn(const std::string& key, std::string_view msg, const std::string& detail) {
  std::uint64_t suppressed = 0;
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[key];
    const MonoTime now = clock_.monoNow();
    if (s.logged && now - s.last < interval_) {
      ++s.suppressed;
      return;
    }
    suppressed = s.suppressed;
    s.suppressed = 0;
    s.last = now;
    s.logged = true;
  }
  log_.warn(msg, {{"reason", key}, {"detail", detail}, {"suppressed", suppressed}});
}

Result<std::unique_ptr<Receiver>> Receiver::create(Config config, Clock& clock,
                                                   const Attributor& attributor,
                                                   metrics::Registry& registry, MessageSink sink) {
  if (config.socket_path.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "socket: path is empty");
  }
  if (config.socket_path.front() != '@') {
    const auto dir = std::filesystem::path(config.socket_path).parent_path();
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) {
        return makeError(ErrorCode::kIo,
                         "socket: cannot create directory " + dir.string() + ": " + ec.message());
      }
    }
  }
  C4_ASSIGN_OR_RETURN(auto server, UnixDatagramServer::bind(config.socket_path, 0666,
                                                            report::kMaxDatagramBytes + 1));
  if (config.rcvbuf_bytes > 0) {
    int size = config.rcvbuf_bytes;
    if (::setsockopt(server.fd(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size) != 0) {
      return std::unexpected(errnoError("setsockopt(SO_RCVBUF)", errno));
    }
  }
  return std::unique_ptr<Receiver>(new Receiver(std::move(config), clock, attributor, registry,
                                                std::move(sink), std::move(server)));
}

Receiver::Receiver(Config config, Clock& clock, const Attributor& attributor,
                   metrics::Registry& registry, MessageSink sink, UnixDatagramServer server)
    : config_(std::move(config)),
      clock_(clock),
      attributor_(attributor),
      sink_(std::move(sink)),
      server_(std::move(server)),
      reassembler_(clock, config_.reassembly),
      limited_(clock, Logger("node-plugin.receiver"), config_.log_interval),
      log_("node-plugin.receiver"),
      received_metric_(registry.counter("c4_node_plugin_messages_received_total",
                                        "Datagrams received on the agent socket.")),
      accepted_metric_(registry.counter("c4_node_plugin_messages_accepted_total",
                                        "Messages attributed and handed to the shipper, by kind "
                                        "(a split report counts once).",
                                        {"kind"})),
      dropped_metric_(registry.counter("c4_node_plugin_messages_dropped_total",
                                       "Datagrams or messages dropped, by reason.", {"reason"})),
      attributed_metric_(registry.counter("c4_node_plugin_attributions_total",
                                          "Messages attributed to a pod, by path.", {"path"})),
      after_exit_metric_(registry
                             .counter("c4_node_plugin_attributions_after_exit_total",
                                      "Messages read after their sender exited, attributed by "
                                      "the cgroup its pid named at its previous message.")
                             .get()),
      reassembly_metric_(registry.counter("c4_node_plugin_reassembly_total",
                                          "Split-report parts and reports by outcome.",
                                          {"outcome"})),
      partial_metric_(registry
                          .gauge("c4_node_plugin_reassembly_partial_reports",
                                 "Split reports waiting for more parts.")
                          .get()) {
  for (int i = 0; i < kDropReasonCount; ++i) {
    dropped_metric_.labels({std::string(dropReasonName(static_cast<DropReason>(i)))});
  }
  last_loop_ns_.store(clock_.monoNow().time_since_epoch().count());
}

Receiver::~Receiver() {
  stop();
}

std::uint64_t Receiver::dropped(DropReason reason) const {
  return dropped_[static_cast<std::size_t>(reason)].load();
}

std::uint64_t Receiver::droppedTotal() const {
  std::uint64_t n = 0;
  for (const auto& d : dropped_) n += d.load();
  return n;
}

MonoTime Receiver::lastLoop() const {
  return MonoTime{Duration{last_loop_ns_.load()}};
}

void Receiver::drop(DropReason reason, const std::string& detail, pid_t pid) {
  dropped_[static_cast<std::size_t>(reason)].fetch_add(1);
  dropped_metric_.labels({std::string(dropReasonName(reason))}).inc();
  limited_.warn(std::string(dropReasonName(reason)), "message dropped",
                "pid " + std::to_string(pid) + ": " + detail);
}

void Receiver::countReassembly(const char* outcome, std::uint64_t n) {
  if (n > 0) reassembly_metric_.labels({outcome}).inc(static_cast<double>(n));
}

void Receiver::handle(Datagram& d) {
  received_.fetch_add(1);
  received_metric_.get().inc();
  const pid_t pid = d.credentials ? d.credentials->pid : 0;
  if (d.truncated) {
    drop(DropReason::kTruncated,
         "datagram larger than " + std::to_string(report::kMaxDatagramBytes) + " bytes", pid);
    return;
  }
  if (!d.credentials) {
    drop(DropReason::kNoCredentials, "no SCM_CREDENTIALS", pid);
    return;
  }
  auto message = report::decodeMessageCbor(d.bytes);
  if (!message) {
    drop(DropReason::kDecode, message.error().message, pid);
    return;
  }
  const report::RankIdentity& id =
      std::visit([](const auto& m) -> const report::RankIdentity& { return m.id; }, *message);
  auto attribution = attributor_.attribute(pid, id);
  if (!attribution) {
    drop(attribution.error().reason, attribution.error().detail, pid);
    return;
  }
  if (auto* rr = std::get_if<report::RankReport>(&*message)) {
    const auto before = reassembler_.stats();
    auto offer = reassembler_.offer(pid, std::move(*rr));
    const auto& after = reassembler_.stats();
    countReassembly("duplicate", after.duplicate - before.duplicate);
    countReassembly("inconsistent", after.inconsistent - before.inconsistent);
    countReassembly("evicted", after.evicted - before.evicted);
    countReassembly("oversize", after.oversize - before.oversize);
    countReassembly("pod_limit", after.pod_limit - before.pod_limit);
    countReassembly("merged", after.merged - before.merged);
    switch (offer.outcome) {
      case PartOutcome::kPending:
        countReassembly("pending");
        return;
      case PartOutcome::kDuplicate:
        drop(DropReason::kReassembly, "duplicate part", pid);
        return;
      case PartOutcome::kInconsistent:
        drop(DropReason::kReassembly, "parts of one report disagree", pid);
        return;
      case PartOutcome::kOversize:
        drop(DropReason::kReassembly, "merged report has too many connections", pid);
        return;
      case PartOutcome::kComplete:
        *message = std::move(*offer.report);
        break;
    }
  }
  attributed_metric_.labels({std::string(attributionPathName(attribution->path))}).inc();
  if (attribution->remembered) after_exit_metric_.inc();
  const std::string kind(report::messageKind(*message));
  if (!sink_(std::move(*message), *attribution)) {
    drop(DropReason::kQueueFull, "shipper buffer full", pid);
    return;
  }
  accepted_.fetch_add(1);
  accepted_metric_.labels({kind}).inc();
}

Result<bool> Receiver::pollOnce(std::chrono::milliseconds timeout) {
  auto got = server_.receive(timeout);
  if (!got) return std::unexpected(got.error());
  const bool handled = got->has_value();
  if (handled) handle(**got);
  countReassembly("timed_out", reassembler_.expire());
  partial_metric_.set(static_cast<double>(reassembler_.partialReports()));
  return handled;
}

void Receiver::start() {
  if (running_.exchange(true)) return;
  stop_.store(false);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      last_loop_ns_.store(clock_.monoNow().time_since_epoch().count());
      auto r = pollOnce(std::chrono::milliseconds{200});
      if (!r) {
        limited_.warn("receive_error", "receive failed", r.error().toString());
        clock_.sleepFor(std::chrono::milliseconds{100});
      }
    }
  });
}

void Receiver::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

}  // namespace c4::node
