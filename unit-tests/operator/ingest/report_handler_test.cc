// ReportHandler: every answer of the wire contract, the authorisation matrix, limits and
// replay on simulated time, attribution drops, and that no refusal changes the store or the
// replay state. The authenticator is a table (the thing under test is the endpoint; TokenReview
// itself is tested in token_review_test.cc and against the real API server).
#include "operator/ingest/report_handler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "ingest_testing.h"

namespace c4::op::ingest {
namespace {

using testing::checkpointNotice;
using testing::identity;
using testing::nodeReport;
using testing::rankReport;

const std::string kPluginUser = "system:serviceaccount:c4-system:c4-node-plugin";

class TableAuthenticator final : public TokenAuthenticator {
 public:
  std::map<std::string, Result<TokenUser>> table;
  int calls = 0;
  Result<TokenUser> authenticate(std::string_view token) override {
    ++calls;
    auto it = table.find(std::string(token));
    if (it == table.end()) return makeError(ErrorCode::kUnauthenticated, "unknown token");
    return it->second;
  }
};

TokenUser user(const std::string& name, const std::string& node) {
  TokenUser u;
  u.username = name;
  if (!node.empty()) u.extra[kNodeNameExtra] = {node};
  u.audiences = {"c4-operator"};
  return u;
}

class ReportHandlerTest : public ::testing::Test {
 protected:
  ReportHandlerTest() {
    auth_.table.emplace("tok-a", user(kPluginUser, "node-a"));
    auth_.table.emplace("tok-b", user(kPluginUser, "node-b"));
    auth_.table.emplace("tok-other-sa", user("system:serviceaccount:c4-system:other", "node-a"));
    auth_.table.emplace("tok-unbound", user(kPluginUser, ""));
    auth_.table.emplace("tok-down", Result<TokenUser>(makeError(ErrorCode::kUnavailable, "down")));
    // Job ns1/job: 2 pods × 2 ranks; pod 0 on node-a, pod 1 on node-b; attempt 0.
    jobs_["ns1/job"] = JobInfo{JobFacts{"uid-1", 0, 4}, 2};
    pods_["ns1/job-0"] = testing::pod("ns1", "job-0", "job", "node-a", 0, 0);
    pods_["ns1/job-1"] = testing::pod("ns1", "job-1", "job", "node-b", 1, 0);
    config_.global_limit = {100, 100};
    config_.node_limit = {100, 100};
  }

  ReportHandler& handler() {
    if (!handler_) {
      ClusterView view;
      view.job = [this](const std::string& ns, const std::string& name) -> std::optional<JobInfo> {
        auto it = jobs_.find(ns + "/" + name);
        if (it == jobs_.end()) return std::nullopt;
        return it->second;
      };
      view.pod = [this](const std::string& ns, const std::string& name) -> std::optional<Json> {
        auto it = pods_.find(ns + "/" + name);
        if (it == pods_.end()) return std::nullopt;
        return it->second;
      };
      view.serving = [this] { return serving_; };
      handler_ = std::make_unique<ReportHandler>(config_, clock_, auth_, store_, view, &registry_);
    }
    return *handler_;
  }

  std::int64_t nowNs() const { return toUnixNanos(clock_.wallNow()); }

  // A batch for node-a: ranks 0 and 1 (pod job-0) report, rank 0 a checkpoint.
  report::NodeReport batchA(std::uint64_t seq) const {
    auto b = nodeReport("node-a", seq, nowNs());
    for (int r = 0; r < 2; ++r) {
      b.reports.push_back(rankReport(identity("ns1", "job", r, "node-a", 0, 2), seq, nowNs()));
    }
    b.notices.push_back(checkpointNotice(identity("ns1", "job", 0, "node-a", 0, 2), 5, nowNs()));
    return b;
  }

  static std::string cbor(const report::NodeReport& b) {
    auto bytes = report::encodeCbor(b);
    EXPECT_TRUE(bytes) << bytes.error().toString();
    return std::string(bytes->begin(), bytes->end());
  }

  IngestResponse post(const std::string& token, const std::string& body,
                      const std::string& content_type = "application/cbor") {
    body_ = body;  // keep the bytes alive for the string_view
    IngestRequest req;
    if (!token.empty()) req.authorization = "Bearer " + token;
    req.content_type = content_type;
    req.body = body_;
    return handler().handle(req);
  }
  IngestResponse post(const std::string& token, const report::NodeReport& b) {
    return post(token, cbor(b));
  }

  std::string state() const { return store_.summary("", "").dump(); }
  double requests(const std::string& code, const std::string& reason) {
    return registry_.counter("c4_ingest_requests_total", "", {"code", "reason"})
        .labels({code, reason})
        .value();
  }
  double dropped(const std::string& reason) {
    return registry_.counter("c4_ingest_reports_dropped_total", "", {"reason"})
        .labels({reason})
        .value();
  }

  SimulatedClock clock_;
  metrics::Registry registry_;
  TableAuthenticator auth_;
  ReportStore store_{{}, &registry_};
  ReportHandlerConfig config_;
  std::map<std::string, JobInfo> jobs_;
  std::map<std::string, Json> pods_;
  bool serving_ = true;
  std::string body_;
  std::unique_ptr<ReportHandler> handler_;
};

TEST_F(ReportHandlerTest, AcceptsABatchOfItsOwnNode) {
  auto r = post("tok-a", batchA(10));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body), (Json{{"accepted", 3}, {"dropped", 0}}));
  EXPECT_EQ(handler().lastSeq("node-a"), 10u);
  // The accepted answer names this operator process: 16 hex digits, the same on every answer of
  // one handler, another for the next process.
  EXPECT_EQ(r.instance, handler().instance());
  EXPECT_EQ(r.instance.size(), 16u);
  EXPECT_EQ(r.instance.find_first_not_of("0123456789abcdef"), std::string::npos) << r.instance;
  metrics::Registry other_registry;
  ReportStore other_store;
  ReportHandler other({}, clock_, auth_, other_store, {}, &other_registry);
  EXPECT_NE(other.instance(), handler().instance());
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    EXPECT_EQ(job.ranks.size(), 2u);
    EXPECT_EQ(job.reports_total, 2u);
    EXPECT_EQ(job.notices_total, 1u);
  });
  EXPECT_TRUE(store_.node("node-a"));
  EXPECT_EQ(requests("200", "accepted"), 1);
  EXPECT_EQ(registry_.counter("c4_ingest_reports_accepted_total", "").get().value(), 2);
  // JSON is accepted too (debugging).
  auto json = report::encodeJson(batchA(11));
  ASSERT_TRUE(json);
  auto r2 = post("tok-a", *json, "application/json; charset=utf-8");
  EXPECT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(handler().lastSeq("node-a"), 11u);
}

struct Refusal {
  const char* name;
  int status;
  const char* reason;
};

TEST_F(ReportHandlerTest, EveryRefusalLeavesTheStoreAndTheSeqUnchanged) {
  ASSERT_EQ(post("tok-a", batchA(10)).status, 200);
  const std::string before = state();
  auto expect = [&](const IngestResponse& r, int status, const std::string& reason) {
    EXPECT_EQ(r.status, status) << reason << ": " << r.body;
    EXPECT_EQ(r.reason, reason);
    Json body = Json::parse(r.body);
    EXPECT_EQ(body["reason"], reason);
    EXPECT_FALSE(body["error"].get<std::string>().empty());
    EXPECT_EQ(state(), before) << reason;
    EXPECT_EQ(handler().lastSeq("node-a"), 10u) << reason;
    EXPECT_EQ(requests(std::to_string(status), reason), 1) << reason;
    EXPECT_TRUE(r.instance.empty()) << reason << ": only an accepted batch names the instance";
  };
  expect(post("", batchA(11)), 401, "no_token");
  expect(post("nobody", batchA(11)), 401, "invalid_token");
  {
    IngestRequest req;
    req.authorization = "Basic dXNlcjpwYXNz";
    req.content_type = "application/cbor";
    std::string body = cbor(batchA(11));
    req.body = body;
    auto r = handler().handle(req);
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.reason, "no_token");
  }
  auto down = post("tok-down", batchA(11));
  expect(down, 503, "review_failed");
  EXPECT_EQ(down.retry_after_seconds, 1);
  expect(post("tok-other-sa", batchA(11)), 403, "wrong_serviceaccount");
  expect(post("tok-unbound", batchA(11)), 403, "no_node_binding");
  expect(post("tok-b", batchA(11)), 403, "node_mismatch");  // node-b's token, node-a's batch
  expect(post("tok-a", cbor(batchA(11)), "text/plain"), 415, "unsupported_media_type");
  expect(post("tok-a", std::string("\xa1\x61v\x01", 4)), 400, "malformed");
  auto unknown_field =
      post("tok-a", R"({"v":1,"kind":"NodeReport","node":"node-a","extra":1})", "application/json");
  EXPECT_EQ(unknown_field.status, 400);
  EXPECT_EQ(unknown_field.reason, "malformed");
  EXPECT_EQ(state(), before);
  EXPECT_EQ(requests("400", "malformed"), 2);
  auto future = batchA(11);
  future.time_unix_ns = nowNs() + std::chrono::nanoseconds(std::chrono::minutes{2}).count();
  expect(post("tok-a", future), 400, "clock_skew");
  auto old = batchA(11);
  old.time_unix_ns = nowNs() - std::chrono::nanoseconds(std::chrono::minutes{6}).count();
  auto too_old = post("tok-a", old);
  expect(too_old, 409, "too_old");
  EXPECT_EQ(too_old.last_seq, 10u);
  auto replay = post("tok-a", batchA(10));
  expect(replay, 409, "replay");
  EXPECT_EQ(replay.last_seq, 10u);
  EXPECT_EQ(post("tok-a", batchA(9)).reason, "replay");
  serving_ = false;
  auto standby = post("tok-a", batchA(11));
  expect(standby, 503, "not_leader");
  EXPECT_EQ(standby.retry_after_seconds, 5);
  serving_ = true;
  // And the next good batch goes through.
  EXPECT_EQ(post("tok-a", batchA(11)).status, 200);
}

TEST_F(ReportHandlerTest, TooLargeBodiesAre413) {
  config_.max_body_bytes = 64;
  const std::string before = state();
  auto r = post("tok-a", batchA(1));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.reason, "too_large");
  EXPECT_EQ(auth_.calls, 0);  // refused before any review
  EXPECT_EQ(state(), before);
  EXPECT_FALSE(handler().lastSeq("node-a"));
}

TEST_F(ReportHandlerTest, NodeRateLimitAnswers429WithRetryAfterOnSimulatedTime) {
  config_.node_limit = {0.5, 2};  // one request per 2 s, burst 2
  ASSERT_EQ(post("tok-a", batchA(1)).status, 200);
  ASSERT_EQ(post("tok-a", batchA(2)).status, 200);
  const std::string before = state();
  auto limited = post("tok-a", batchA(3));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.reason, "node_rate_limit");
  EXPECT_EQ(limited.retry_after_seconds, 2);
  EXPECT_EQ(state(), before);
  EXPECT_EQ(handler().lastSeq("node-a"), 2u);
  // Another node has its own bucket.
  auto b = nodeReport("node-b", 1, nowNs());
  EXPECT_EQ(post("tok-b", b).status, 200);
  clock_.advance(std::chrono::seconds{2});
  EXPECT_EQ(post("tok-a", batchA(3)).status, 200);
}

TEST_F(ReportHandlerTest, GlobalRateLimitComesBeforeTheTokenReview) {
  config_.global_limit = {1, 1};
  ASSERT_EQ(post("tok-a", batchA(1)).status, 200);
  int reviews = auth_.calls;
  auto limited = post("tok-b", nodeReport("node-b", 1, nowNs()));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.reason, "global_rate_limit");
  EXPECT_EQ(limited.retry_after_seconds, 1);
  EXPECT_EQ(auth_.calls, reviews);  // no TokenReview spent on it
  clock_.advance(std::chrono::seconds{1});
  EXPECT_EQ(post("tok-b", nodeReport("node-b", 1, nowNs())).status, 200);
}

TEST_F(ReportHandlerTest, ConcurrencyLimitAnswers429) {
  config_.max_inflight = 0;
  auto r = post("tok-a", batchA(1));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.reason, "overloaded");
  EXPECT_EQ(r.retry_after_seconds, 1);
  EXPECT_FALSE(handler().lastSeq("node-a"));
}

TEST_F(ReportHandlerTest, UnattributableItemsAreDroppedAndCountedTheRestAccepted) {
  auto b = batchA(1);
  // Rank 2 belongs to pod job-1 on node-b: a node-a plugin may not speak for it.
  auto foreign = identity("ns1", "job", 2, "node-a", 0, 2);
  b.reports.push_back(rankReport(foreign, 1, nowNs()));
  // The identity claims another node.
  b.reports.push_back(rankReport(identity("ns1", "job", 0, "node-b", 0, 2), 1, nowNs()));
  // An unknown job, an unknown pod.
  b.reports.push_back(rankReport(identity("ns1", "nojob", 0, "node-a", 0, 2), 1, nowNs()));
  auto ghost = identity("ns1", "job", 0, "node-a", 0, 2);
  ghost.pod = "ghost";
  b.reports.push_back(rankReport(ghost, 1, nowNs()));
  // A previous attempt; a rank outside pod job-0's range [0, 2).
  b.reports.push_back(rankReport(identity("ns1", "job", 0, "node-a", 1, 2), 1, nowNs()));
  auto wrong_rank = identity("ns1", "job", 3, "node-a", 0, 2);
  wrong_rank.pod = "job-0";
  b.notices.push_back(checkpointNotice(wrong_rank, 5, nowNs()));
  // A pod of another job with our job's name claimed.
  pods_["ns1/imposter"] = testing::pod("ns1", "imposter", "other", "node-a", 0, 0);
  auto imposter = identity("ns1", "job", 0, "node-a", 0, 2);
  imposter.pod = "imposter";
  b.reports.push_back(rankReport(imposter, 1, nowNs()));
  auto r = post("tok-a", b);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body), (Json{{"accepted", 3}, {"dropped", 7}}));
  EXPECT_EQ(dropped("pod_not_on_node"), 1);
  EXPECT_EQ(dropped("wrong_node"), 1);
  EXPECT_EQ(dropped("unknown_job"), 1);
  EXPECT_EQ(dropped("unknown_pod"), 1);
  EXPECT_EQ(dropped("stale_attempt"), 1);
  EXPECT_EQ(dropped("rank_not_of_pod"), 1);
  EXPECT_EQ(dropped("pod_not_of_job"), 1);
  store_.readJob("ns1", "job", [](const JobRecord& job) {
    EXPECT_EQ(job.ranks.size(), 2u);
    EXPECT_TRUE(job.ranks.contains(0));
    EXPECT_TRUE(job.ranks.contains(1));
  });
  EXPECT_EQ(store_.node("node-a")->operator_dropped, 7u);
}

TEST_F(ReportHandlerTest, CheckpointsOfAllRanksAcrossNodesMakeTheJobsCheckpoint) {
  std::vector<std::string> advanced;
  store_.setCheckpointListener([&](const std::string& key) { advanced.push_back(key); });
  auto a = nodeReport("node-a", 1, nowNs());
  auto b = nodeReport("node-b", 1, nowNs());
  for (int rank = 0; rank < 4; ++rank) {
    auto& batch = rank < 2 ? a : b;
    batch.notices.push_back(
        checkpointNotice(identity("ns1", "job", rank, batch.node, 0, 2), 42, nowNs()));
  }
  ASSERT_EQ(post("tok-a", a).status, 200);
  EXPECT_FALSE(store_.checkpoint("ns1", "job"));
  ASSERT_EQ(post("tok-b", b).status, 200);
  auto cp = store_.checkpoint("ns1", "job");
  ASSERT_TRUE(cp);
  EXPECT_EQ(cp->step, 42);
  EXPECT_EQ(advanced, std::vector<std::string>{"ns1/job"});
}

TEST_F(ReportHandlerTest, ConcurrentBatchesOfOneNodeNeverAcceptASeqTwiceOrOutOfOrder) {
  config_.global_limit = {0, 0};
  config_.node_limit = {0, 0};
  handler();
  std::atomic<std::uint64_t> next{1};
  std::mutex mu;
  std::vector<std::uint64_t> accepted;
  int replays = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto b = nodeReport("node-a", next.fetch_add(1), nowNs());
        auto bytes = report::encodeCbor(b);
        std::string body(bytes->begin(), bytes->end());
        IngestRequest req;
        req.authorization = "Bearer tok-a";
        req.content_type = "application/cbor";
        req.body = body;
        auto r = handler_->handle(req);
        std::lock_guard lock(mu);
        if (r.status == 200) {
          accepted.push_back(b.seq);
        } else {
          EXPECT_EQ(r.reason, "replay");
          ++replays;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(accepted.empty());
  EXPECT_EQ(accepted.size() + static_cast<std::size_t>(replays), 400u);
  // Every accepted batch reached the store exactly once, and the recorded seq is the highest.
  EXPECT_EQ(store_.node("node-a")->batches, accepted.size());
  EXPECT_EQ(handler().lastSeq("node-a"), *std::max_element(accepted.begin(), accepted.end()));
}

// admit() decides on the headers alone (the server reads the body only after it): refusals need
// no body, an admission holds its in-flight slot until it is gone, and how the body read ended
// is answered by accept().
TEST_F(ReportHandlerTest, AdmissionComesBeforeTheBodyAndHoldsItsSlot) {
  config_.max_inflight = 1;
  RequestHead head;
  head.content_type = "application/cbor";
  head.content_length = 1 << 20;
  auto no_token = handler().admit(head);
  ASSERT_FALSE(no_token);
  EXPECT_EQ(no_token.error().status, 401);
  EXPECT_EQ(no_token.error().reason, "no_token");
  head.authorization = "Bearer nobody";
  EXPECT_EQ(handler().admit(head).error().reason, "invalid_token");
  head.authorization = "Bearer tok-a";
  head.malformed_length = true;
  EXPECT_EQ(handler().admit(head).error().reason, "bad_length");
  head.malformed_length = false;
  head.content_length = config_.max_body_bytes + 1;
  int reviews = auth_.calls;
  EXPECT_EQ(handler().admit(head).error().reason, "too_large");
  EXPECT_EQ(auth_.calls, reviews);  // a declared oversize costs no TokenReview
  head.content_length.reset();      // chunked: the size is checked while reading
  {
    auto admitted = handler().admit(head);
    ASSERT_TRUE(admitted);
    EXPECT_EQ(admitted->node(), "node-a");
    auto second = handler().admit(head);  // the first holds the only slot
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().reason, "overloaded");
    auto too_large = handler().accept(std::move(*admitted), "", BodyRead::kTooLarge);
    EXPECT_EQ(too_large.status, 413);
    EXPECT_EQ(too_large.reason, "too_large");
  }
  auto admitted = handler().admit(head);  // the slot is free again
  ASSERT_TRUE(admitted);
  const std::string before = state();
  auto cut = handler().accept(std::move(*admitted), "\xa1", BodyRead::kIncomplete);
  EXPECT_EQ(cut.status, 400);
  EXPECT_EQ(cut.reason, "incomplete_body");
  EXPECT_EQ(state(), before);
  std::string body = cbor(batchA(1));
  auto ok = handler().accept(std::move(*handler().admit(head)), body);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(requests("400", "incomplete_body"), 1);
  EXPECT_EQ(requests("413", "too_large"), 2);
}

// Refusals are logged, but at most refusal_log_lines per interval; the rest are counted and the
// count is logged with the first refusal of a later interval (issue #27: a flood of bad requests
// must not flood the log).
TEST_F(ReportHandlerTest, RefusalLogsAreRateLimitedWithASummaryOfTheSuppressed) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  config_.refusal_log_lines = 3;
  config_.refusal_log_interval = std::chrono::seconds{10};
  auto count = [&](std::string_view text) {
    auto lines = sink->lines();
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  };
  for (int i = 0; i < 50; ++i) post("forged-" + std::to_string(i), batchA(1));
  EXPECT_EQ(count("Refused a report request"), 3);
  EXPECT_EQ(count("reason=invalid_token"), 3);
  EXPECT_EQ(count("Suppressed"), 0);
  EXPECT_EQ(requests("401", "invalid_token"), 50);  // the metrics count every one
  clock_.advance(std::chrono::seconds{10});
  post("", batchA(1));
  EXPECT_EQ(count("Refused a report request"), 4);
  EXPECT_EQ(count("Suppressed report refusal logs"), 1);
  EXPECT_EQ(count("suppressed=47"), 1);
  EXPECT_EQ(count("reason=no_token"), 1);
  // Accepted batches are not refusals: never logged.
  ASSERT_EQ(post("tok-a", batchA(1)).status, 200);
  EXPECT_EQ(count("Refused a report request"), 4);
  setLogSink(nullptr);
}

// Issue #27: a burst of refusals followed by silence is summarised when its interval ends, with
// no further refusal to carry the summary. Before, it was written only with the next refusal.
TEST_F(ReportHandlerTest, ABurstOfRefusalsThenSilenceIsSummarisedWhenTheIntervalEnds) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  config_.refusal_log_lines = 3;
  config_.refusal_log_interval = std::chrono::seconds{10};
  auto count = [&](std::string_view text) {
    auto lines = sink->lines();
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    });
  };
  for (int i = 0; i < 20; ++i) post("forged-" + std::to_string(i), batchA(1));
  EXPECT_EQ(count("Refused a report request"), 3);
  clock_.advance(std::chrono::seconds{10});
  for (int i = 0; i < 5000 && count("Suppressed report refusal logs") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  EXPECT_EQ(count("Suppressed report refusal logs"), 1) << "the burst was never summarised";
  EXPECT_EQ(count("suppressed=17"), 1);
  EXPECT_EQ(count("Refused a report request"), 3);
  handler_.reset();  // joins the flusher before the sink goes
  setLogSink(nullptr);
}

TEST(JobInfoTest, WorldSizeAndAttemptFromTheTrainingJob) {
  Json job = {
      {"apiVersion", "c4.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "j"}, {"namespace", "n"}, {"uid", "u"}}},
      {"spec",
       {{"replicas", 3},
        {"numProcPerNode", 4},
        {"template", {{"spec", {{"containers", {{{"name", "t"}, {"image", "busybox"}}}}}}}}}},
      {"status", {{"attempt", 2}}}};
  auto info = jobInfoOf(job);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->facts.uid, "u");
  EXPECT_EQ(info->facts.attempt, 2u);
  EXPECT_EQ(info->facts.world_size, 12);
  EXPECT_EQ(info->procs_per_pod, 4);
  job["spec"]["replicas"] = "three";
  EXPECT_FALSE(jobInfoOf(job));
}

// Found by fuzz/report_handler_fuzzer.cc: the JSON parser's error quotes the body's bytes, and
// bytes that are not UTF-8 made the error body's dump() throw out of handle() (httplib answered
// 500 and the request went uncounted).
TEST_F(ReportHandlerTest, MalformedBodyThatIsNotUtf8IsA400WithAJsonBody) {
  const std::string before = state();
  auto r = post("tok-a", std::string("\x9f\x00\x80\x80", 4), "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.reason, "malformed");
  Json body = Json::parse(r.body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << r.body;
  EXPECT_NE(body["error"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos) << r.body;
  EXPECT_EQ(state(), before);
  EXPECT_EQ(requests("400", "malformed"), 1);
}

}  // namespace
}  // namespace c4::op::ingest
