// The report endpoint's logic (see report_handler.h).
#include "operator/ingest/report_handler.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <span>
#include <variant>

#include "operator/trainingjob/api.h"

namespace c4::op::ingest {
namespace {

std::string lowerTrimmedMediaType(std::string_view content_type) {
  auto semi = content_type.find(';');
  std::string_view media = content_type.substr(0, semi);
  while (!media.empty() && std::isspace(static_cast<unsigned char>(media.front()))) {
    media.remove_prefix(1);
  }
  while (!media.empty() && std::isspace(static_cast<unsigned char>(media.back()))) {
    media.remove_suffix(1);
  }
  std::string out(media);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The token of "Bearer <token>" (scheme case-insensitive); "" when absent.
std::string bearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return "";
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\r')) token.remove_suffix(1);
  return std::string(token);
}

const report::RankIdentity& identityOf(const report::Notice& n) {
  return std::visit([](const auto& notice) -> const report::RankIdentity& { return notice.id; }, n);
}

std::string_view noticeKind(const report::Notice& n) {
  if (std::holds_alternative<report::ProgressNotice>(n)) return "progress";
  if (std::holds_alternative<report::CheckpointNotice>(n)) return "checkpoint";
  return "anomaly";
}

std::string nodeNameOfPod(const Json& pod) {
  return stringAt(fieldsOf(pod, "spec"), "nodeName").value_or("");
}

// The message may quote the body (a JSON parser's "last read: ..."), so it may hold bytes that
// are not UTF-8: they become U+FFFD rather than an exception out of handle().
std::string errorBody(std::string_view reason, std::string_view message) {
  return Json{{"error", message}, {"reason", reason}}.dump(-1, ' ', false,
                                                           Json::error_handler_t::replace);
}

constexpr const char* kDropReasons[] = {"unknown_job",     "wrong_node",     "unknown_pod",
                                        "pod_not_on_node", "pod_not_of_job", "stale_attempt",
                                        "rank_not_of_pod"};

}  // namespace

std::optional<JobInfo> jobInfoOf(const Json& job) {
  auto spec = parseTrainingJobSpec(job);
  if (!spec) return std::nullopt;
  JobInfo info;
  info.facts.uid = stringAt(fieldsOf(job, "metadata"), "uid").value_or("");
  std::int64_t attempt = 0;
  if (auto status = job.find("status"); status != job.end() && status->is_object()) {
    auto a = status->find("attempt");
    if (a != status->end() && a->is_number_integer()) attempt = a->get<std::int64_t>();
  }
  info.facts.attempt = static_cast<std::uint32_t>(std::max<std::int64_t>(attempt, 0));
  std::int64_t procs = procsPerPod(*spec);
  info.procs_per_pod =
      static_cast<std::int32_t>(std::clamp<std::int64_t>(procs, 1, report::kMaxRank));
  info.facts.world_size =
      static_cast<std::int32_t>(std::min<std::int64_t>(spec->replicas * procs, report::kMaxRank));
  return info;
}

ReportHandler::ReportHandler(ReportHandlerConfig config, Clock& clock,
                             TokenAuthenticator& authenticator, ReportStore& store,
                             ClusterView cluster, metrics::Registry* registry)
    : config_(std::move(config)),
      clock_(clock),
      authenticator_(authenticator),
      store_(store),
      cluster_(std::move(cluster)),
      log_("ingest"),
      refusal_log_(clock, log_, "Suppressed report refusal logs", config_.refusal_log_lines,
                   config_.refusal_log_interval),
      global_(config_.global_limit, clock.monoNow()),
      nodes_(config_.node_limit, config_.max_nodes),
      last_seq_(config_.max_nodes) {
  {
    std::random_device device;
    const std::uint64_t id = (std::uint64_t{device()} << 32) ^ device();
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
    instance_ = text;
  }
  auto slash = config_.service_account.find('/');
  expected_user_ = "system:serviceaccount:" + config_.service_account.substr(0, slash) + ":" +
                   (slash == std::string::npos ? "" : config_.service_account.substr(slash + 1));
  if (registry == nullptr) return;
  requests_ = &registry->counter("c4_ingest_requests_total",
                                 "Report requests by HTTP status and reason.", {"code", "reason"});
  duration_ =
      &registry
           ->histogram("c4_ingest_request_duration_seconds", "Time to answer one report request.",
                       {}, metrics::exponentialBuckets(0.0001, 2.0, 18))
           .get();
  bytes_ = &registry->counter("c4_ingest_request_bytes_total", "Report request body bytes.").get();
  reports_accepted_ =
      &registry->counter("c4_ingest_reports_accepted_total", "Rank reports stored.").get();
  notices_accepted_ =
      &registry->counter("c4_ingest_notices_accepted_total", "Notices stored, by kind.", {"kind"});
  dropped_ = &registry->counter("c4_ingest_reports_dropped_total",
                                "Rank reports and notices of accepted batches dropped, by reason.",
                                {"reason"});
  for (const char* kind : {"progress", "checkpoint", "anomaly"}) notices_accepted_->labels({kind});
  for (const char* reason : kDropReasons) dropped_->labels({reason});
  requests_->labels({"200", "accepted"});
}

void ReportHandler::countRefusal(int status, const std::string& reason) {
  if (requests_ != nullptr) requests_->labels({std::to_string(status), reason}).inc();
}

std::optional<std::uint64_t> ReportHandler::lastSeq(const std::string& node) const {
  std::lock_guard lock(accept_mu_);
  const std::uint64_t* seq = last_seq_.get(node);
  if (seq == nullptr) return std::nullopt;
  return *seq;
}

IngestResponse ReportHandler::refuse(int status, std::string reason, std::string message) {
  IngestResponse r;
  r.status = status;
  r.body = errorBody(reason, message);
  r.reason = std::move(reason);
  r.detail = std::move(message);
  return r;
}

IngestResponse ReportHandler::handle(const IngestRequest& request) {
  RequestHead head;
  head.authorization = request.authorization;
  head.content_type = request.content_type;
  head.content_length = request.body.size();
  auto admitted = admit(head);
  if (!admitted) return std::move(admitted.error());
  return accept(std::move(*admitted), request.body);
}

void ReportHandler::finish(const IngestResponse& response, MonoTime start, std::size_t body_bytes,
                           const std::string& node, const std::string& remote) {
  if (requests_ != nullptr) {
    requests_->labels({std::to_string(response.status), response.reason}).inc();
    duration_->observe(std::chrono::duration<double>(clock_.monoNow() - start).count());
    bytes_->inc(static_cast<double>(body_bytes));
  }
  bool loggable =
      (response.status >= 400 && response.status < 500) || response.reason == "review_failed";
  if (!loggable) return;
  refusal_log_.warn("Refused a report request", {{"status", response.status},
                                                 {"reason", response.reason},
                                                 {"node", node},
                                                 {"remote", remote},
                                                 {"error", response.detail}});
}

std::expected<Admission, IngestResponse> ReportHandler::admit(const RequestHead& head) {
  MonoTime start = clock_.monoNow();
  auto admitted = checkHead(head, start);
  if (!admitted) finish(admitted.error(), start, 0, "", head.remote);
  return admitted;
}

IngestResponse ReportHandler::accept(Admission admission, std::string_view body, BodyRead read) {
  IngestResponse response;
  if (read == BodyRead::kTooLarge) {
    response =
        refuse(413, "too_large",
               "body exceeds the limit of " + std::to_string(config_.max_body_bytes) + " bytes");
  } else if (read == BodyRead::kIncomplete) {
    response = refuse(400, "incomplete_body",
                      "the body ended early or arrived too slowly (" + std::to_string(body.size()) +
                          " bytes read)");
  } else {
    response = checkBody(admission, body);
  }
  finish(response, admission.start_, body.size(), admission.node_, admission.remote_);
  return response;
}

std::expected<Admission, IngestResponse> ReportHandler::checkHead(const RequestHead& head,
                                                                  MonoTime start) {
  auto refused = [](IngestResponse r) { return std::unexpected(std::move(r)); };
  if (cluster_.serving && !cluster_.serving()) {
    auto r =
        refuse(503, "not_leader", "this operator is not serving reports (standby or starting)");
    r.retry_after_seconds = config_.standby_retry_after_seconds;
    return refused(std::move(r));
  }
  if (inflight_.fetch_add(1) >= config_.max_inflight) {
    inflight_.fetch_sub(1);
    auto r = refuse(429, "overloaded", "too many report requests in flight");
    r.retry_after_seconds = 1;
    return refused(std::move(r));
  }
  Admission admission(&inflight_, start);  // holds the slot from here on
  admission.remote_ = head.remote;
  if (head.malformed_length) {
    return refused(refuse(400, "bad_length", "Content-Length is not a number"));
  }
  if (head.content_length && *head.content_length > config_.max_body_bytes) {
    return refused(refuse(413, "too_large",
                          "body of " + std::to_string(*head.content_length) +
                              " bytes exceeds the limit of " +
                              std::to_string(config_.max_body_bytes)));
  }
  std::string media = lowerTrimmedMediaType(head.content_type);
  admission.cbor_ = media == "application/cbor";
  if (!admission.cbor_ && media != "application/json") {
    return refused(refuse(415, "unsupported_media_type",
                          "Content-Type must be application/cbor or application/json"));
  }
  {
    std::lock_guard lock(limits_mu_);
    if (auto wait = global_.take(clock_.monoNow())) {
      auto r = refuse(429, "global_rate_limit", "the operator's report rate limit is exhausted");
      r.retry_after_seconds = retryAfterSeconds(*wait);
      return refused(std::move(r));
    }
  }

  // Authentication and authorisation.
  std::string token = bearerToken(head.authorization);
  if (token.empty()) return refused(refuse(401, "no_token", "a bearer token is required"));
  auto user = authenticator_.authenticate(token);
  if (!user) {
    if (user.error().code == ErrorCode::kUnauthenticated) {
      return refused(refuse(401, "invalid_token", user.error().message));
    }
    auto r = refuse(503, "review_failed", "the token could not be reviewed; retry later");
    r.detail = user.error().toString();
    r.retry_after_seconds = 1;
    return refused(std::move(r));
  }
  if (user->username != expected_user_) {
    return refused(
        refuse(403, "wrong_serviceaccount",
               "user " + user->username + " may not post reports (only " + expected_user_ + ")"));
  }
  std::string token_node = user->extraValue(kNodeNameExtra);
  if (token_node.empty()) {
    return refused(refuse(
        403, "no_node_binding",
        "the token is not bound to a pod on a node (no " + std::string(kNodeNameExtra) + ")"));
  }
  {
    std::lock_guard lock(limits_mu_);
    if (auto wait = nodes_.take(token_node, clock_.monoNow())) {
      auto r = refuse(429, "node_rate_limit",
                      "the report rate limit of node " + token_node + " is exhausted");
      r.retry_after_seconds = retryAfterSeconds(*wait);
      return refused(std::move(r));
    }
  }
  admission.node_ = std::move(token_node);
  return admission;
}

IngestResponse ReportHandler::checkBody(const Admission& admission, std::string_view body) {
  const std::string& token_node = admission.node_;
  const bool cbor = admission.cbor_;
  // The batch.
  Result<report::NodeReport> decoded =
      cbor ? report::decodeNodeReportCbor(std::span<const std::uint8_t>(
                 reinterpret_cast<const std::uint8_t*>(body.data()), body.size()))
           : report::decodeNodeReportJson(body);
  if (!decoded) return refuse(400, "malformed", decoded.error().message);
  report::NodeReport& batch = *decoded;
  if (batch.node != token_node) {
    return refuse(
        403, "node_mismatch",
        "the token is bound to node " + token_node + ", the batch is about node " + batch.node);
  }
  WallTime now = clock_.wallNow();
  WallTime sent = fromUnixNanos(batch.time_unix_ns);
  if (sent > now + config_.max_clock_skew) {
    return refuse(
        400, "clock_skew",
        "timeUnixNs is ahead of the operator's clock by more than " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(config_.max_clock_skew).count()) +
            " s");
  }

  std::lock_guard accept(accept_mu_);
  const std::uint64_t* last = last_seq_.get(batch.node);
  if (sent < now - config_.max_age) {
    auto r = refuse(409, "too_old", "the batch is older than the replay window");
    if (last != nullptr) r.last_seq = *last;
    return r;
  }
  if (last != nullptr && batch.seq <= *last) {
    auto r = refuse(409, "replay",
                    "seq " + std::to_string(batch.seq) + " is not above the last accepted seq " +
                        std::to_string(*last));
    r.last_seq = *last;
    return r;
  }

  // Accepted.
  std::map<std::string, JobFacts> jobs;
  std::uint64_t dropped = attribute(batch, jobs);
  std::size_t reports = batch.reports.size();
  std::size_t notices = batch.notices.size();
  if (reports_accepted_ != nullptr) {
    reports_accepted_->inc(static_cast<double>(reports));
    for (const auto& n : batch.notices)
      notices_accepted_->labels({std::string(noticeKind(n))}).inc();
  }
  store_.apply(batch, jobs, now, dropped);
  last_seq_.put(batch.node, batch.seq);
  IngestResponse r;
  r.status = 200;
  r.reason = "accepted";
  r.instance = instance_;
  r.body = Json{{"accepted", reports + notices}, {"dropped", dropped}}.dump();
  return r;
}

std::uint64_t ReportHandler::attribute(report::NodeReport& batch,
                                       std::map<std::string, JobFacts>& jobs) {
  std::map<std::string, std::optional<JobInfo>> job_cache;
  std::map<std::string, std::optional<Json>> pod_cache;
  std::map<std::string, std::uint64_t> dropped;
  auto why_not = [&](const report::RankIdentity& id) -> const char* {
    std::string job_key = id.ns + "/" + id.job;
    auto j = job_cache.find(job_key);
    if (j == job_cache.end()) {
      j = job_cache.emplace(job_key, cluster_.job ? cluster_.job(id.ns, id.job) : std::nullopt)
              .first;
    }
    if (!j->second) return "unknown_job";
    const JobInfo& info = *j->second;
    if (id.node != batch.node) return "wrong_node";
    std::string pod_key = id.ns + "/" + id.pod;
    auto p = pod_cache.find(pod_key);
    if (p == pod_cache.end()) {
      p = pod_cache.emplace(pod_key, cluster_.pod ? cluster_.pod(id.ns, id.pod) : std::nullopt)
              .first;
    }
    if (!p->second) return "unknown_pod";
    const Json& pod = *p->second;
    if (nodeNameOfPod(pod) != batch.node) return "pod_not_on_node";
    if (labelOf(pod, labels::kJobName) != id.job) return "pod_not_of_job";
    auto attempt = intLabelOf(pod, labels::kRestartAttempt);
    if (!attempt || *attempt != id.restart_attempt || id.restart_attempt != info.facts.attempt) {
      return "stale_attempt";
    }
    auto index = intLabelOf(pod, labels::kReplicaIndex);
    std::int64_t first = index ? *index * info.procs_per_pod : -1;
    if (!index || id.rank < first || id.rank >= first + info.procs_per_pod ||
        id.rank >= info.facts.world_size) {
      return "rank_not_of_pod";
    }
    jobs.emplace(job_key, info.facts);
    return nullptr;
  };
  std::uint64_t total = 0;
  auto keep = [&](const report::RankIdentity& id) {
    const char* reason = why_not(id);
    if (reason == nullptr) return true;
    ++dropped[reason];
    ++total;
    return false;
  };
  std::erase_if(batch.reports, [&](const report::RankReport& r) { return !keep(r.id); });
  std::erase_if(batch.notices, [&](const report::Notice& n) { return !keep(identityOf(n)); });
  if (!dropped.empty()) {
    for (const auto& [reason, n] : dropped) {
      if (dropped_ != nullptr) dropped_->labels({reason}).inc(static_cast<double>(n));
    }
    log_.debug("Dropped unattributable reports", {{"node", batch.node}, {"dropped", total}});
  }
  return total;
}

}  // namespace c4::op::ingest
