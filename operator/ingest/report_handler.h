// The report endpoint's logic, apart from HTTP: one POST /v1/reports request in, one answer out
// (status, reason, JSON body, Retry-After, C4-Last-Seq). The server (report_server.h) only moves
// bytes; everything the wire contract decides is here, so it is tested without sockets.
//
// Two steps, so that nothing of the body is read before the sender is authenticated:
//   admit(head)          checks 1-8 on the request's headers alone (the declared length, the
//                        media type, the bearer token); a refusal is the answer, and the server
//                        answers it without reading a byte of the body and closes the connection.
//   accept(admission, body)  the body, once read (checks 9-13).
// handle(request) runs both on a request whose body is at hand (tests, tools).
//
// Order of checks; the first that fails answers, and nothing before the acceptance changes the
// store or the replay state (rate-limit tokens are the only thing a refused request spends):
//
//   1. not serving (standby, caches not synced)        503 not_leader      Retry-After
//   2. more requests in flight than max_inflight       429 overloaded      Retry-After: 1
//   3. Content-Length not a number                     400 bad_length
//      declared body larger than max_body_bytes        413 too_large
//   4. Content-Type not application/cbor|json          415 unsupported_media_type
//   5. global token bucket empty                       429 global_rate_limit  Retry-After
//   6. no bearer token                                 401 no_token
//      TokenReview says no (or not our audience)       401 invalid_token
//      TokenReview failed (API error)                  503 review_failed   Retry-After
//   7. user is not the node plugin's ServiceAccount    403 wrong_serviceaccount
//      token has no node-name extra (not pod-bound)    403 no_node_binding
//   8. the node's token bucket empty                   429 node_rate_limit  Retry-After
//      ---- the body is read ----
//      body longer than max_body_bytes (no length declared)   413 too_large
//      body cut short (client gone, read timeout)      400 incomplete_body
//   9. strict decode fails                             400 malformed
//  10. batch.node != the token's node                  403 node_mismatch
//  11. timeUnixNs > now + max_clock_skew               400 clock_skew
//      timeUnixNs < now - max_age                      409 too_old         C4-Last-Seq
//  12. seq <= last accepted seq of the node            409 replay          C4-Last-Seq
//  13. accepted: rank reports and notices that cannot be attributed to a pod of a known
//      TrainingJob on this node are dropped and counted by reason; the rest goes to the store,
//      the seq is recorded                             200 {"accepted": n, "dropped": m}
//
// Every refusal with a 4xx status (and every failed TokenReview) is logged at warn, at most
// `refusal_log_lines` lines per `refusal_log_interval`; the rest are counted, and the count is
// logged ("Suppressed report refusal logs", suppressed=n) when their interval ends, whether or
// not another refusal comes (RateLimitedLog, rate_limit.h). The metrics count every refusal.
//
// Attribution of one rank report or notice (identity `id`): the TrainingJob id.ns/id.job is
// known (unknown_job); id.node is the batch's node (wrong_node); the pod id.ns/id.pod is in the
// pod cache (unknown_pod), runs on the batch's node (pod_not_on_node), carries the job's label
// (pod_not_of_job) and the restart attempt id.restartAttempt, which is the job's current
// attempt (stale_attempt); id.rank lies in the pod's rank range [index × nproc,
// (index + 1) × nproc) and below the world size (rank_not_of_pod).
//
// Thread-safe: any number of server threads call admit()/accept()/handle().
#pragma once

#include <atomic>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "c4/common/report.h"
#include "kube/controller/lru_cache.h"
#include "operator/ingest/rate_limit.h"
#include "operator/ingest/report_store.h"
#include "operator/ingest/token_review.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library

// What the endpoint reads of a request before its body.
struct RequestHead {
  std::string authorization;                    // the Authorization header ("Bearer <token>")
  std::string content_type;                     // the Content-Type header (parameters allowed)
  std::optional<std::uint64_t> content_length;  // declared; nullopt when none (chunked)
  bool malformed_length = false;                // a Content-Length that is not a number
  std::string remote;                           // the peer's address, for logs ("" when unknown)
};

struct IngestRequest {
  std::string authorization;  // the Authorization header ("Bearer <token>")
  std::string content_type;   // the Content-Type header (parameters allowed)
  std::string_view body;
};

// How reading a body ended.
enum class BodyRead {
  kComplete,
  kTooLarge,    // more than max_body_bytes arrived (no length was declared)
  kIncomplete,  // the client went away or was too slow
};

struct IngestResponse {
  int status = 200;
  std::string reason;  // "accepted" or the refusal's reason (metrics label, JSON body)
  std::string body;    // JSON
  std::optional<long> retry_after_seconds;
  std::optional<std::uint64_t> last_seq;  // C4-Last-Seq
  // C4-Operator-Instance, on an accepted batch: this operator process's id. A node plugin that
  // sees it change resends the last words of its exited ranks (NodeReport.replay): what it
  // delivered to the process before may have died with it.
  std::string instance;
  std::string detail;  // what the log says of a refusal (never sent)
};

// A job as the endpoint needs it: the store's facts plus the pods' rank layout.
struct JobInfo {
  JobFacts facts;
  std::int32_t procs_per_pod = 1;
};

// Reads of the operator's caches (the TrainingJob and pod informers in production).
struct ClusterView {
  std::function<std::optional<JobInfo>(const std::string& ns, const std::string& name)> job;
  std::function<std::optional<Json>(const std::string& ns, const std::string& name)> pod;
  // True while this operator may take reports (leader, caches synced).
  std::function<bool()> serving;
};

struct ReportHandlerConfig {
  // "<namespace>/<name>" of the node plugin's ServiceAccount.
  std::string service_account = "c4-system/c4-node-plugin";
  std::size_t max_body_bytes = report::kMaxBatchBytes;
  BucketConfig global_limit{4000, 8000};
  BucketConfig node_limit{5, 20};
  std::size_t max_nodes = 100000;  // per-node buckets and last seqs kept (LRU)
  std::size_t max_inflight = 64;
  // Log lines of refusals per interval (the rest are counted, see above).
  std::size_t refusal_log_lines = 5;
  Duration refusal_log_interval = std::chrono::seconds{10};
  Duration max_age = std::chrono::minutes{5};
  Duration max_clock_skew = std::chrono::minutes{1};
  long standby_retry_after_seconds = 5;
};

// The JobInfo of a TrainingJob object (nullopt when its spec does not parse).
std::optional<JobInfo> jobInfoOf(const Json& job);

class ReportHandler;

// A request whose headers passed checks 1-8: it holds one of the max_inflight slots until it is
// destroyed (move-only) and knows the node its token is bound to.
class Admission {
 public:
  Admission(Admission&& other) noexcept
      : inflight_(std::exchange(other.inflight_, nullptr)),
        start_(other.start_),
        node_(std::move(other.node_)),
        cbor_(other.cbor_),
        remote_(std::move(other.remote_)) {}
  Admission& operator=(Admission&&) = delete;
  Admission(const Admission&) = delete;
  ~Admission() {
    if (inflight_ != nullptr) inflight_->fetch_sub(1);
  }
  [[nodiscard]] const std::string& node() const { return node_; }

 private:
  friend class ReportHandler;
  Admission(std::atomic<std::size_t>* inflight, MonoTime start)
      : inflight_(inflight), start_(start) {}
  std::atomic<std::size_t>* inflight_;
  MonoTime start_;
  std::string node_;
  bool cbor_ = true;
  std::string remote_;
};

class ReportHandler {
 public:
  // Everything given must outlive this object; `registry` may be null.
  ReportHandler(ReportHandlerConfig config, Clock& clock, TokenAuthenticator& authenticator,
                ReportStore& store, ClusterView cluster, metrics::Registry* registry);

  // Checks 1-8 on the headers: the admission, or the answer (a refusal, counted and logged).
  std::expected<Admission, IngestResponse> admit(const RequestHead& head);
  // Checks 9-13 on the body read after admit() (counted; logged when refused).
  IngestResponse accept(Admission admission, std::string_view body,
                        BodyRead read = BodyRead::kComplete);
  // Both steps on a request whose body is at hand.
  IngestResponse handle(const IngestRequest& request);

  // Counts a request the server refused before handle() (e.g. the HTTP library's own 413).
  void countRefusal(int status, const std::string& reason);
  // The last accepted seq of a node (tests, debugging).
  [[nodiscard]] std::optional<std::uint64_t> lastSeq(const std::string& node) const;
  [[nodiscard]] const ReportHandlerConfig& config() const { return config_; }
  // This process's id (16 hex digits drawn at construction), sent with every accepted batch.
  [[nodiscard]] const std::string& instance() const { return instance_; }

 private:
  std::expected<Admission, IngestResponse> checkHead(const RequestHead& head, MonoTime start);
  IngestResponse checkBody(const Admission& admission, std::string_view body);
  IngestResponse refuse(int status, std::string reason, std::string message);
  // Counts an answer (metrics) and logs a refusal (rate-limited).
  void finish(const IngestResponse& response, MonoTime start, std::size_t body_bytes,
              const std::string& node, const std::string& remote);
  // Keeps the attributable items of `batch` (in place); returns the number dropped.
  std::uint64_t attribute(report::NodeReport& batch, std::map<std::string, JobFacts>& jobs);

  ReportHandlerConfig config_;
  Clock& clock_;
  TokenAuthenticator& authenticator_;
  ReportStore& store_;
  ClusterView cluster_;
  Logger log_;
  std::string instance_;
  std::string expected_user_;
  std::atomic<std::size_t> inflight_{0};

  RateLimitedLog refusal_log_;
  std::mutex limits_mu_;
  TokenBucket global_;
  KeyedBuckets nodes_;
  // Held from the replay check through the store write and the seq record, so concurrent
  // batches of one node cannot both pass the check.
  mutable std::mutex accept_mu_;
  mutable LruCache<std::uint64_t> last_seq_;

  metrics::Family<metrics::Counter>* requests_ = nullptr;
  metrics::Histogram* duration_ = nullptr;
  metrics::Counter* bytes_ = nullptr;
  metrics::Counter* reports_accepted_ = nullptr;
  metrics::Family<metrics::Counter>* notices_accepted_ = nullptr;
  metrics::Family<metrics::Counter>* dropped_ = nullptr;
};

}  // namespace c4::op::ingest
