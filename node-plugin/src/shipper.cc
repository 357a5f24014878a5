#include "c4/node_plugin/shipper.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace c4::node {
namespace {

std::size_t estimateBytes(const report::RankIdentity& id) {
  return 96 + id.ns.size() + id.job.size() + id.pod.size() + id.node.size();
}

std::size_t estimateBytes(const report::RankReport& r) {
  std::size_t n = 160 + estimateBytes(r.id);
  for (const auto& c : r.connections) {
    n += 260 + c.peer_node.size() + c.peer_pod.size() + c.subflows.size() * 64;
  }
  return n;
}

std::size_t estimateBytes(const report::Notice& notice) {
  return std::visit(
      [](const auto& v) -> std::size_t {
        using T = std::decay_t<decltype(v)>;
        std::size_t n = 120 + estimateBytes(v.id);
        if constexpr (std::is_same_v<T, report::CheckpointNotice>) n += v.path.size();
        if constexpr (std::is_same_v<T, report::AnomalyNotice>) {
          n += 80 + v.detail.size() + v.peer_node.size();
        }
        return n;
      },
      notice);
}

bool isNotice(const std::variant<report::RankReport, report::Notice>& v) {
  return std::holds_alternative<report::Notice>(v);
}

const report::RankIdentity& identityOf(const std::variant<report::RankReport, report::Notice>& v) {
  if (const auto* r = std::get_if<report::RankReport>(&v)) return r->id;
  return std::visit([](const auto& n) -> const report::RankIdentity& { return n.id; },
                    std::get<report::Notice>(v));
}

}  // namespace

// ---- TokenSource -----------------------------------------------------------------------------

Result<std::string> TokenSource::token() {
  std::lock_guard lock(mu_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    valid_ = false;
    return std::unexpected(errnoError("token file " + path_, errno));
  }
  const std::int64_t mtime_ns =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (valid_ && st.st_ino == ino_ && st.st_size == size_ && mtime_ns == mtime_ns_) return token_;
  std::ifstream in(path_, std::ios::binary);
  std::stringstream buf;
  if (in) buf << in.rdbuf();
  if (!in) return makeError(ErrorCode::kIo, "token file " + path_ + ": cannot read");
  std::string text = buf.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  ++reads_;
  if (text.empty()) {
    valid_ = false;
    return makeError(ErrorCode::kUnauthenticated, "token file " + path_ + " is empty");
  }
  token_ = std::move(text);
  ino_ = st.st_ino;
  size_ = st.st_size;
  mtime_ns_ = mtime_ns;
  valid_ = true;
  return token_;
}

void TokenSource::invalidate() {
  std::lock_guard lock(mu_);
  valid_ = false;
}

// ---- Shipper ---------------------------------------------------------------------------------

std::string_view sendOutcomeName(SendOutcome o) noexcept {
  switch (o) {
    case SendOutcome::kAccepted:
      return "accepted";
    case SendOutcome::kBadRequest:
      return "bad_request";
    case SendOutcome::kUnauthorized:
      return "unauthorized";
    case SendOutcome::kForbidden:
      return "forbidden";
    case SendOutcome::kConflict:
      return "conflict";
    case SendOutcome::kTooLarge:
      return "too_large";
    case SendOutcome::kUnsupported:
      return "unsupported_media_type";
    case SendOutcome::kRateLimited:
      return "rate_limited";
    case SendOutcome::kUnavailable:
      return "unavailable";
    case SendOutcome::kServerError:
      return "server_error";
    case SendOutcome::kOtherStatus:
      return "other_status";
    case SendOutcome::kConnectionError:
      return "connection_error";
    case SendOutcome::kNoToken:
      return "no_token";
  }
  return "unknown";
}

Shipper::Shipper(ShipperConfig config, Clock& clock, ReportTransport& transport,
                 TokenSource& tokens, metrics::Registry& registry, kube::RandomSource random)
    : config_(std::move(config)),
      clock_(clock),
      transport_(transport),
      tokens_(tokens),
      random_(std::move(random)),
      log_("node-plugin.shipper"),
      batches_(registry.counter("c4_node_plugin_batches_total",
                                "POSTs of node batches to the operator, by outcome.", {"outcome"})),
      bytes_sent_(registry
                      .counter("c4_node_plugin_sent_bytes_total",
                               "Body bytes of node batches POSTed (whatever the answer).")
                      .get()),
      buffer_dropped_(registry.counter("c4_node_plugin_buffer_dropped_total",
                                       "Items dropped from the send buffer, by reason.",
                                       {"reason"})),
      coalesced_(registry
                     .counter("c4_node_plugin_coalesced_reports_total",
                              "Rank reports replaced by a later one of the same rank while the "
                              "operator asked to slow down.")
                     .get()),
      splits_(registry
                  .counter("c4_node_plugin_batch_splits_total",
                           "Batches halved after 413 (or too large to encode).")
                  .get()),
      replayed_(registry
                    .counter("c4_node_plugin_replayed_items_total",
                             "Last words of exited rank processes resent to a new operator "
                             "instance (reports and notices).")
                    .get()),
      buffer_bytes_gauge_(
          registry
              .gauge("c4_node_plugin_buffer_bytes", "Estimated encoded size of the buffered items.")
              .get()),
      buffer_items_gauge_(
          registry.gauge("c4_node_plugin_buffer_items", "Buffered reports and notices.").get()),
      backoff_gauge_(registry
                         .gauge("c4_node_plugin_backoff_seconds",
                                "The current wait before the next POST (0 when none).")
                         .get()),
      failures_gauge_(registry
                          .gauge("c4_node_plugin_consecutive_failures",
                                 "POSTs failed in a row (kept data, backing off).")
                          .get()),
      send_seconds_(registry
                        .histogram("c4_node_plugin_send_duration_seconds",
                                   "Duration of one POST to the operator.")
                        .get()) {
  next_seq_ = static_cast<std::uint64_t>(toUnixNanos(clock_.wallNow()) / 1000);
  not_before_ = clock_.monoNow();
  last_loop_ns_.store(clock_.monoNow().time_since_epoch().count());
}

Shipper::~Shipper() {
  stop();
}

bool Shipper::add(report::Message message) {
  bool flush = false;
  Item item;
  std::lock_guard lock(mu_);
  if (auto* r = std::get_if<report::RankReport>(&message)) {
    if (newlyStalledLocked(*r)) {
      const MonoTime now = clock_.monoNow();
      if (!last_stall_flush_ || now - *last_stall_flush_ >= config_.interval) {
        last_stall_flush_ = now;
        flush = true;
      }
    }
    item.bytes = estimateBytes(*r);
    item.pod = r->id.ns + "/" + r->id.pod;
    item.value = std::move(*r);
  } else {
    report::Notice notice = std::visit(
        [&](auto&& v) -> report::Notice {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, report::RankReport>) {
            return report::ProgressNotice{};  // unreachable: handled above
          } else {
            return report::Notice{std::move(v)};
          }
        },
        std::move(message));
    flush = !std::holds_alternative<report::ProgressNotice>(notice);
    item.bytes = estimateBytes(notice);
    item.pod = std::visit([](const auto& v) { return v.id.ns + "/" + v.id.pod; }, notice);
    item.value = std::move(notice);
  }
  if (item.bytes > config_.max_buffer_bytes) return false;
  rememberLocked(item);
  chargeLocked(item);
  buffer_.push_back(std::move(item));
  enforceBoundLocked();
  updateGaugesLocked();
  if (flush) {
    flush_requested_ = true;
    cv_.notify_all();
  }
  return true;
}

bool Shipper::newlyStalledLocked(const report::RankReport& r) {
  if (rank_conns_.size() >= kMaxTrackedRanks) rank_conns_.clear();
  auto& previous = rank_conns_[{r.id.ns + "/" + r.id.pod, r.id.pid, r.id.rank}];
  std::map<std::uint64_t, ConnState> current;
  bool newly = false;
  for (const auto& c : r.connections) {
    if (c.direction != report::Direction::kRecv) continue;
    auto before = previous.find(c.id);
    const bool stalled = before != previous.end() && c.bytes == before->second.bytes &&
                         c.inflight > 0 && c.oldest_inflight_us >= report::kStalledWaitUs;
    if (stalled && !before->second.stalled) newly = true;
    current[c.id] = ConnState{c.bytes, stalled};
  }
  previous = std::move(current);
  return newly;
}

void Shipper::rememberLocked(const Item& item) {
  const report::RankIdentity& id = identityOf(item.value);
  if (id.rank < 0 || config_.last_words_ttl <= Duration::zero()) return;
  RankKey key{id.ns + "/" + id.pod, id.rank, id.restart_attempt};
  if (live_words_.size() >= kMaxTrackedRanks && !live_words_.contains(key)) {
    while (!live_words_.empty()) forgetWordsLocked(live_words_, live_words_.begin());
  }
  auto replace = [&](LastWords& words, std::size_t old_bytes, std::size_t new_bytes) {
    words.bytes = words.bytes - old_bytes + new_bytes;
    last_words_bytes_ = last_words_bytes_ - old_bytes + new_bytes;
  };
  if (const auto* r = std::get_if<report::RankReport>(&item.value)) {
    LastWords& words = live_words_[key];
    replace(words, words.report ? estimateBytes(*words.report) : 0, item.bytes);
    words.report = *r;
  } else if (const auto* notice = std::get_if<report::Notice>(&item.value)) {
    if (const auto* p = std::get_if<report::ProgressNotice>(notice)) {
      LastWords& words = live_words_[key];
      replace(words, words.progress ? estimateBytes(report::Notice{*words.progress}) : 0,
              item.bytes);
      words.progress = *p;
    } else if (const auto* a = std::get_if<report::AnomalyNotice>(notice)) {
      if (a->kind != report::AnomalyKind::kProcessExited) {
        LastWords& words = live_words_[key];
        words.anomalies.push_back(*a);
        replace(words, 0, item.bytes);
        while (words.anomalies.size() > kMaxLastAnomalies) {
          replace(words, estimateBytes(report::Notice{words.anomalies.front()}), 0);
          words.anomalies.pop_front();
        }
      } else {
        LastWords words;
        if (auto it = live_words_.find(key); it != live_words_.end()) {
          words = std::move(it->second);
          live_words_.erase(it);
        }
        words.exit = *a;
        words.exited_at = clock_.monoNow();
        words.bytes += item.bytes;
        last_words_bytes_ += item.bytes;
        if (auto it = exited_words_.find(key); it != exited_words_.end()) {
          forgetWordsLocked(exited_words_, it);  // the same process seen exiting again
        }
        exited_words_.emplace(key, std::move(words));
        expireExitedWordsLocked(clock_.monoNow());
      }
    }
    // Checkpoints are no last words: the job's status keeps them.
  }
  if (last_words_bytes_ > config_.max_last_words_bytes) boundLastWordsBytesLocked();
}

void Shipper::forgetWordsLocked(std::map<RankKey, LastWords>& map,
                                std::map<RankKey, LastWords>::iterator it) {
  last_words_bytes_ -= it->second.bytes;
  map.erase(it);
}

std::map<Shipper::RankKey, Shipper::LastWords>::iterator Shipper::oldestExitLocked() {
  return std::min_element(
      exited_words_.begin(), exited_words_.end(),
      [](const auto& a, const auto& b) { return a.second.exited_at < b.second.exited_at; });
}

void Shipper::expireExitedWordsLocked(MonoTime now) {
  for (auto it = exited_words_.begin(); it != exited_words_.end();) {
    auto next = std::next(it);
    if (now - it->second.exited_at > config_.last_words_ttl) forgetWordsLocked(exited_words_, it);
    it = next;
  }
  while (exited_words_.size() > config_.max_last_words) {
    forgetWordsLocked(exited_words_, oldestExitLocked());
  }
}

void Shipper::boundLastWordsBytesLocked() {
  while (last_words_bytes_ > config_.max_last_words_bytes) {
    if (!live_words_.empty()) {
      auto largest = std::max_element(
          live_words_.begin(), live_words_.end(),
          [](const auto& a, const auto& b) { return a.second.bytes < b.second.bytes; });
      forgetWordsLocked(live_words_, largest);
    } else if (!exited_words_.empty()) {
      forgetWordsLocked(exited_words_, oldestExitLocked());
    } else {
      break;
    }
  }
}

void Shipper::replayLocked() {
  expireExitedWordsLocked(clock_.monoNow());
  std::vector<Item> items;
  for (const auto& [key, words] : exited_words_) {
    auto push = [&](std::variant<report::RankReport, report::Notice> value, std::size_t bytes) {
      Item item;
      item.value = std::move(value);
      item.bytes = bytes;
      item.pod = std::get<0>(key);
      item.replay = true;
      items.push_back(std::move(item));
    };
    if (words.report) push(*words.report, estimateBytes(*words.report));
    if (words.progress) {
      report::Notice n{*words.progress};
      push(n, estimateBytes(n));
    }
    for (const auto& a : words.anomalies) {
      report::Notice n{a};
      push(n, estimateBytes(n));
    }
    if (words.exit) {
      report::Notice n{*words.exit};
      push(n, estimateBytes(n));
    }
  }
  if (items.empty()) return;
  log_.info("new operator instance; resending the last words of exited rank processes",
            {{"instance", instance_}, {"ranks", exited_words_.size()}, {"items", items.size()}});
  replayed_.inc(static_cast<double>(items.size()));
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    chargeLocked(*it);
    buffer_.push_front(std::move(*it));
  }
  enforceBoundLocked();
  flush_requested_ = true;
  cv_.notify_all();
}

void Shipper::setHealth(report::NodeHealth health, bool anomaly) {
  std::lock_guard lock(mu_);
  health_ = std::move(health);
  if (anomaly) {
    flush_requested_ = true;
    cv_.notify_all();
  }
}

void Shipper::setMessageCounters(std::uint64_t dropped, std::uint64_t rejected) {
  std::lock_guard lock(mu_);
  dropped_messages_ = dropped;
  rejected_messages_ = rejected;
}

void Shipper::requestFlush() {
  std::lock_guard lock(mu_);
  flush_requested_ = true;
  cv_.notify_all();
}

void Shipper::dropItemLocked(const Item& item, const char* why) {
  buffer_dropped_.labels({why}).inc();
  ++dropped_items_;
  (void)item;
}

void Shipper::chargeLocked(const Item& item) {
  PodUsage& u = pods_[item.pod];
  ++u.items;
  u.bytes += item.bytes;
  buffer_bytes_ += item.bytes;
  if (isNotice(item.value)) {
    ++u.notices;
    ++notices_;
  }
}

void Shipper::releaseLocked(const Item& item) {
  buffer_bytes_ -= item.bytes;
  const bool notice = isNotice(item.value);
  if (notice) --notices_;
  auto it = pods_.find(item.pod);
  if (it == pods_.end()) return;
  it->second.bytes -= item.bytes;
  if (notice) --it->second.notices;
  if (--it->second.items == 0) pods_.erase(it);
}

std::deque<Shipper::Item>::iterator Shipper::largestPodsOldestLocked(bool notices) {
  const std::string* largest = nullptr;
  std::size_t size = 0;
  for (const auto& [pod, u] : pods_) {
    const std::size_t n = notices ? u.notices : u.bytes;
    if (largest == nullptr || n > size) {
      largest = &pod;
      size = n;
    }
  }
  if (largest == nullptr) return buffer_.end();
  return std::find_if(buffer_.begin(), buffer_.end(), [&](const Item& item) {
    return item.pod == *largest && (!notices || isNotice(item.value));
  });
}

void Shipper::enforceBoundLocked() {
  while (buffer_bytes_ > config_.max_buffer_bytes && !buffer_.empty()) {
    auto victim = largestPodsOldestLocked(false);
    if (victim == buffer_.end()) victim = buffer_.begin();
    releaseLocked(*victim);
    dropItemLocked(*victim, "buffer_full");
    buffer_.erase(victim);
  }
  while (notices_ > config_.max_notices) {
    auto victim = largestPodsOldestLocked(true);
    if (victim == buffer_.end()) break;
    releaseLocked(*victim);
    dropItemLocked(*victim, "notices_full");
    buffer_.erase(victim);
  }
}

void Shipper::coalesceLocked() {
  std::set<std::tuple<std::string, std::string, std::int32_t>> seen;
  std::deque<Item> kept;
  for (auto it = buffer_.rbegin(); it != buffer_.rend(); ++it) {
    if (auto* r = std::get_if<report::RankReport>(&it->value); r != nullptr && !it->replay) {
      if (!seen.emplace(r->id.ns, r->id.pod, r->id.rank).second) {
        releaseLocked(*it);
        coalesced_.inc();
        continue;
      }
    }
    kept.push_front(std::move(*it));
  }
  buffer_ = std::move(kept);
}

void Shipper::requeueLocked(Batch batch) {
  for (auto it = batch.items.rbegin(); it != batch.items.rend(); ++it) {
    chargeLocked(*it);
    buffer_.push_front(std::move(*it));
  }
}

Shipper::Batch Shipper::takeBatchLocked() {
  Batch batch;
  std::size_t reports = 0;
  std::size_t notices = 0;
  std::size_t bytes = 0;
  if (!buffer_.empty()) batch.replay = buffer_.front().replay;
  while (!buffer_.empty()) {
    Item& front = buffer_.front();
    if (front.replay != batch.replay) break;  // replayed words travel in batches of their own
    const bool notice = isNotice(front.value);
    if (notice ? notices >= report::kMaxNoticesPerBatch : reports >= report::kMaxReportsPerBatch) {
      break;
    }
    if (!batch.items.empty() && bytes + front.bytes > report::kMaxBatchBytes / 2) break;
    (notice ? notices : reports) += 1;
    bytes += front.bytes;
    releaseLocked(front);
    batch.items.push_back(std::move(front));
    buffer_.pop_front();
  }
  return batch;
}

Result<std::vector<std::uint8_t>> Shipper::encodeLocked(const Batch& batch, std::uint64_t seq) {
  report::NodeReport nr;
  nr.node = config_.node;
  nr.seq = seq;
  nr.time_unix_ns = toUnixNanos(clock_.wallNow());
  nr.health = health_;
  nr.dropped_messages = dropped_messages_;
  nr.rejected_messages = rejected_messages_;
  nr.replay = batch.replay;
  for (const auto& item : batch.items) {
    if (const auto* r = std::get_if<report::RankReport>(&item.value)) {
      nr.reports.push_back(*r);
    } else {
      nr.notices.push_back(std::get<report::Notice>(item.value));
    }
  }
  return report::encodeCbor(nr);
}

void Shipper::failureLocked(std::optional<Duration> retry_after) {
  ++failures_;
  const double base = static_cast<double>(config_.backoff_base.count());
  const double cap = static_cast<double>(config_.backoff_cap.count());
  const double d = std::min(cap, base * std::pow(2.0, std::min(failures_ - 1, 40)));
  double draw = random_ ? std::clamp(random_(), 0.0, 1.0) : 1.0;
  Duration wait{static_cast<Duration::rep>(d / 2 + d / 2 * draw)};
  if (retry_after) wait = std::max(*retry_after, Duration{0});
  const MonoTime now = clock_.monoNow();
  not_before_ = now + wait;
  last_backoff_ = wait;
  if (!failing_since_) failing_since_ = now;
  backoff_gauge_.set(std::chrono::duration<double>(wait).count());
  failures_gauge_.set(failures_);
}

void Shipper::successLocked() {
  failures_ = 0;
  const MonoTime now = clock_.monoNow();
  not_before_ = now;
  last_success_ = now;
  failing_since_.reset();
  backoff_gauge_.set(0);
  failures_gauge_.set(0);
}

void Shipper::updateGaugesLocked() {
  buffer_bytes_gauge_.set(static_cast<double>(buffer_bytes_));
  buffer_items_gauge_.set(static_cast<double>(buffer_.size()));
}

SendOutcome Shipper::sendBatchLocked(std::unique_lock<std::mutex>& lock, Batch batch, int depth) {
  auto split = [&](const char* why) -> SendOutcome {
    if (batch.items.size() <= 1) {
      for (const auto& item : batch.items) dropItemLocked(item, why);
      return SendOutcome::kTooLarge;
    }
    splits_.inc();
    Batch second;
    second.replay = batch.replay;
    const std::size_t half = batch.items.size() / 2;
    second.items.assign(std::make_move_iterator(batch.items.begin() + static_cast<long>(half)),
                        std::make_move_iterator(batch.items.end()));
    batch.items.resize(half);
    const std::size_t before = buffer_.size();
    SendOutcome first = sendBatchLocked(lock, std::move(batch), depth);
    if (buffer_.size() > before) {
      // The first half was kept for a retry: keep the second half behind it, unsent.
      const auto pos = buffer_.begin() + static_cast<long>(buffer_.size() - before);
      for (auto& item : second.items) chargeLocked(item);
      buffer_.insert(pos, std::make_move_iterator(second.items.begin()),
                     std::make_move_iterator(second.items.end()));
      return first;
    }
    return sendBatchLocked(lock, std::move(second), depth);
  };

  auto token = tokens_.token();
  if (!token) {
    batches_.labels({std::string(sendOutcomeName(SendOutcome::kNoToken))}).inc();
    log_.warn("no token; keeping the batch", {{"error", token.error()}});
    requeueLocked(std::move(batch));
    failureLocked(std::nullopt);
    return SendOutcome::kNoToken;
  }
  const std::uint64_t seq = next_seq_++;
  auto body = encodeLocked(batch, seq);
  if (!body) {
    log_.warn("batch does not encode; splitting", {{"error", body.error()}});
    return split("unencodable");
  }
  Duration timeout = config_.request_timeout;
  if (stopping_) {
    timeout = std::max<Duration>(std::chrono::milliseconds{100},
                                 std::min(timeout, shutdown_deadline_ - clock_.monoNow()));
  }
  const MonoTime start = clock_.monoNow();
  lock.unlock();
  auto resp = transport_.post(*body, *token, timeout);
  lock.lock();
  send_seconds_.observe(std::chrono::duration<double>(clock_.monoNow() - start).count());
  bytes_sent_.inc(static_cast<double>(body->size()));

  SendOutcome outcome;
  if (!resp) {
    outcome = SendOutcome::kConnectionError;
  } else {
    const long s = resp->status;
    if (s >= 200 && s < 300) {
      outcome = SendOutcome::kAccepted;
    } else if (s == 400) {
      outcome = SendOutcome::kBadRequest;
    } else if (s == 401) {
      outcome = SendOutcome::kUnauthorized;
    } else if (s == 403) {
      outcome = SendOutcome::kForbidden;
    } else if (s == 409) {
      outcome = SendOutcome::kConflict;
    } else if (s == 413) {
      outcome = SendOutcome::kTooLarge;
    } else if (s == 415) {
      outcome = SendOutcome::kUnsupported;
    } else if (s == 429) {
      outcome = SendOutcome::kRateLimited;
    } else if (s == 503) {
      outcome = SendOutcome::kUnavailable;
    } else if (s >= 500) {
      outcome = SendOutcome::kServerError;
    } else {
      outcome = SendOutcome::kOtherStatus;
    }
  }
  batches_.labels({std::string(sendOutcomeName(outcome))}).inc();
  switch (outcome) {
    case SendOutcome::kAccepted:
      successLocked();
      if (!resp->instance.empty() && resp->instance != instance_) {
        const bool changed = !instance_.empty();
        instance_ = resp->instance;
        if (changed) replayLocked();
      }
      return outcome;
    case SendOutcome::kBadRequest:
    case SendOutcome::kUnsupported:
    case SendOutcome::kOtherStatus:
      log_.error("operator refused the batch; dropping it", {{"status", resp->status},
                                                             {"items", batch.items.size()},
                                                             {"body", resp->body.substr(0, 200)}});
      for (const auto& item : batch.items) dropItemLocked(item, "refused");
      return outcome;
    case SendOutcome::kConflict:
      if (resp->last_seq) next_seq_ = std::max(next_seq_, *resp->last_seq + 1);
      if (depth == 0) {
        log_.info("seq refused; resending once", {{"seq", seq}, {"next_seq", next_seq_}});
        return sendBatchLocked(lock, std::move(batch), depth + 1);
      }
      log_.warn("seq refused twice; dropping the batch", {{"seq", seq}});
      for (const auto& item : batch.items) dropItemLocked(item, "conflict");
      return outcome;
    case SendOutcome::kTooLarge:
      return split("too_large");
    case SendOutcome::kUnauthorized:
    case SendOutcome::kForbidden:
      tokens_.invalidate();
      log_.warn("operator refused the token; re-reading it", {{"status", resp->status}});
      requeueLocked(std::move(batch));
      failureLocked(std::nullopt);
      return outcome;
    case SendOutcome::kRateLimited:
    case SendOutcome::kUnavailable:
      requeueLocked(std::move(batch));
      coalesceLocked();
      failureLocked(resp->retry_after ? resp->retry_after : std::nullopt);
      return outcome;
    case SendOutcome::kServerError:
    case SendOutcome::kConnectionError:
    case SendOutcome::kNoToken:
      if (!resp) {
        log_.debug("POST failed", {{"error", resp.error()}});
      }
      requeueLocked(std::move(batch));
      failureLocked(std::nullopt);
      return outcome;
  }
  return outcome;
}

SendOutcome Shipper::sendNow() {
  std::unique_lock lock(mu_);
  Batch batch = takeBatchLocked();
  SendOutcome outcome = sendBatchLocked(lock, std::move(batch), 0);
  enforceBoundLocked();
  updateGaugesLocked();
  return outcome;
}

void Shipper::run() {
  std::unique_lock lock(mu_);
  MonoTime next_due = clock_.monoNow() + config_.interval;
  while (!stopping_) {
    const MonoTime now = clock_.monoNow();
    last_loop_ns_.store(now.time_since_epoch().count());
    const MonoTime due = flush_requested_ ? not_before_ : std::max(next_due, not_before_);
    if (now >= due) {
      flush_requested_ = false;
      next_due = now + config_.interval;
      Batch batch = takeBatchLocked();
      sendBatchLocked(lock, std::move(batch), 0);
      enforceBoundLocked();
      updateGaugesLocked();
      continue;
    }
    const bool seen_flush = flush_requested_;
    clock_.waitUntil(lock, cv_, std::min(due, now + std::chrono::seconds{1}),
                     [&] { return stopping_ || flush_requested_ != seen_flush; });
  }
  // Shutdown: send what is buffered until it is gone or the deadline passes.
  shutdown_deadline_ = clock_.monoNow() + config_.shutdown_deadline;
  bool sent_once = false;
  while (!buffer_.empty() || !sent_once) {
    const MonoTime now = clock_.monoNow();
    if (now >= shutdown_deadline_) break;
    if (not_before_ > now) {
      if (not_before_ >= shutdown_deadline_) break;
      clock_.waitUntil(lock, cv_, not_before_, [] { return false; });
      continue;
    }
    sent_once = true;
    Batch batch = takeBatchLocked();
    sendBatchLocked(lock, std::move(batch), 0);
    enforceBoundLocked();
    updateGaugesLocked();
  }
  if (!buffer_.empty()) {
    log_.warn("shutdown deadline passed with data unsent", {{"items", buffer_.size()}});
  }
}

void Shipper::start() {
  thread_ = std::thread([this] { run(); });
}

void Shipper::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

std::uint64_t Shipper::nextSeq() const {
  std::lock_guard lock(mu_);
  return next_seq_;
}
std::size_t Shipper::bufferedBytes() const {
  std::lock_guard lock(mu_);
  return buffer_bytes_;
}
std::size_t Shipper::bufferedReports() const {
  std::lock_guard lock(mu_);
  return buffer_.size() - notices_;
}
std::size_t Shipper::bufferedNotices() const {
  std::lock_guard lock(mu_);
  return notices_;
}
int Shipper::consecutiveFailures() const {
  std::lock_guard lock(mu_);
  return failures_;
}
MonoTime Shipper::notBefore() const {
  std::lock_guard lock(mu_);
  return not_before_;
}
Duration Shipper::lastBackoff() const {
  std::lock_guard lock(mu_);
  return last_backoff_;
}
std::optional<MonoTime> Shipper::lastSuccess() const {
  std::lock_guard lock(mu_);
  return last_success_;
}
std::optional<MonoTime> Shipper::failingSince() const {
  std::lock_guard lock(mu_);
  return failing_since_;
}
std::uint64_t Shipper::droppedItems() const {
  std::lock_guard lock(mu_);
  return dropped_items_;
}
std::size_t Shipper::lastWordsKept() const {
  std::lock_guard lock(mu_);
  return exited_words_.size();
}
std::size_t Shipper::lastWordsBytes() const {
  std::lock_guard lock(mu_);
  return last_words_bytes_;
}
std::string Shipper::operatorInstance() const {
  std::lock_guard lock(mu_);
  return instance_;
}
MonoTime Shipper::lastLoop() const {
  return MonoTime{Duration{last_loop_ns_.load()}};
}

}  // namespace c4::node
